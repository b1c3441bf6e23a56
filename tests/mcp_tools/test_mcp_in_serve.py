"""`adk-memory serve --mcp-bank B --mcp-scope k=v`: the MCP endpoint beside REST and the browser.

One process serves the REST API, the memory browser and MCP (streamable HTTP at `/mcp`) over the
one store, behind the same keys and the same request guard (Host, Origin), so a browser and an
MCP host share one store.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from joserfc import jwt
from joserfc.jwk import OctKey
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from adk_memory import AsyncClient
from adk_memory._remote._client import OWNER_PROOF_PATH
from adk_memory.server import ApiKey
from adk_memory.server.mcp_server import METADATA_PATH, McpBinding
from adk_memory.testing.rest_server import RunningRestServer, rest_server

SECRET = "mcp-in-serve-token-secret-0123456789abcdef"
ADMIN = "mcp-in-serve-admin-key-0123456789"
KEYS = [
    ApiKey(name="admin", key=ADMIN, permissions=["*"]),
    ApiKey(
        name="users",
        token_secret=SECRET,
        permissions=["memories.*", "memoryRevisions.*"],
        scope_claims={"user_id": "sub"},
    ),
]
PAYLOAD = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}


def _token(user: str) -> str:
    claims = {"sub": user, "exp": int(time.time()) + 3600}
    return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(SECRET))


@pytest.fixture
def keyless() -> Iterator[RunningRestServer]:
    client = AsyncClient("memory://", embedding_model="hash-64")
    binding = McpBinding("reasoningEngines/personal", {"user_id": "me"})
    with rest_server(client, mcp=binding) as running:
        yield running


@pytest.fixture
def keyed() -> Iterator[RunningRestServer]:
    client = AsyncClient("memory://", embedding_model="hash-64")
    binding = McpBinding("reasoningEngines/personal", {"app_name": "ide"}, api_keys=None)
    with rest_server(client, mcp=binding, api_keys=KEYS) as running:
        yield running


async def _remember(url: str, headers: dict[str, str], fact: str, query: str) -> list[str]:
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as session:
            if fact:
                made = await session.call_tool("create_memory", {"fact": fact})
                assert not made.is_error, made.content
            found = await session.call_tool("retrieve_memories", {"query": query})
            assert not found.is_error, found.content
            return [hit["fact"] for hit in found.structured_content["result"]]


async def test_an_mcp_host_and_the_rest_api_share_the_server(keyless: RunningRestServer) -> None:
    """What the MCP host remembers, the REST API (and so the browser) shows, and back."""
    assert await _remember(f"{keyless.url}/mcp", {}, "I like window seats.", "seats") == [
        "I like window seats."
    ]
    async with httpx.AsyncClient(base_url=keyless.url) as http:
        listed = (await http.get("/v1beta1/reasoningEngines/personal/memories")).json()
        assert [memory["fact"] for memory in listed["memories"]] == ["I like window seats."]
        body = {"fact": "I prefer aisle seats.", "scope": {"user_id": "me"}}
        made = await http.post("/v1beta1/reasoningEngines/personal/memories", json=body)
        assert made.status_code == 200
        assert (await http.get("/ui")).status_code == 200
    found = await _remember(f"{keyless.url}/mcp", {}, "", "aisle")
    assert "I prefer aisle seats." in found


async def test_the_mcp_endpoint_has_the_servers_request_guard(keyless: RunningRestServer) -> None:
    """A foreign Host (DNS rebinding) or a foreign web page's Origin is refused on /mcp too,
    and on the MCP metadata and the folder owner's challenge beside it."""
    async with httpx.AsyncClient(base_url=keyless.url) as http:
        rebinding = await http.post("/mcp", json=PAYLOAD, headers={"host": "evil.example"})
        assert rebinding.status_code == 403
        page = await http.post("/mcp", json=PAYLOAD, headers={"origin": "https://evil.example"})
        assert page.status_code == 403
        foreign = {"host": "evil.example"}
        assert (await http.get(METADATA_PATH, headers=foreign)).status_code == 403
        challenge = {"challenge": "ab" * 16}
        owner = await http.get(OWNER_PROOF_PATH, params=challenge, headers=foreign)
        assert owner.status_code == 403
        assert (await http.get(OWNER_PROOF_PATH, params=challenge)).status_code == 404


async def test_the_mcp_endpoint_has_the_servers_keys(keyed: RunningRestServer) -> None:
    """No key is 401; each user's signed token reaches only that user's memories."""
    async with httpx.AsyncClient(base_url=keyed.url) as http:
        refused = await http.post("/mcp", json=PAYLOAD)
        assert refused.status_code == 401
        # The RFC 9728 challenge points at metadata served without a key, as on adk-memory mcp.
        challenge = refused.headers["www-authenticate"]
        assert f'resource_metadata="{keyed.url}{METADATA_PATH}"' in challenge
        metadata = await http.get(METADATA_PATH)
        assert metadata.status_code == 200 and metadata.json()["resource"] == f"{keyed.url}/mcp"
    alice = {"authorization": f"Bearer {_token('alice')}"}
    bob = {"authorization": f"Bearer {_token('bob')}"}
    url = f"{keyed.url}/mcp"
    assert await _remember(url, alice, "I keep bees.", "hobby") == ["I keep bees."]
    assert await _remember(url, bob, "", "hobby") == []
    async with httpx.AsyncClient(base_url=keyed.url) as http:
        headers = {"x-goog-api-key": ADMIN}
        listed = (
            await http.get("/v1beta1/reasoningEngines/personal/memories", headers=headers)
        ).json()
    [memory] = listed["memories"]
    assert memory["scope"] == {"app_name": "ide", "user_id": "alice"}


def test_serve_takes_the_mcp_bank_and_scope(monkeypatch: pytest.MonkeyPatch) -> None:
    """`adk-memory serve --mcp-bank personal --mcp-scope user_id=me` passes them to the app."""
    from typer.testing import CliRunner

    import adk_memory.server as server_package
    from adk_memory.cli import app

    seen: dict[str, Any] = {}
    monkeypatch.setattr(server_package, "serve", lambda uri, **options: seen.update(options))
    args = ["serve", "--uri", "memory://", "--mcp-bank", "personal", "--mcp-scope", "user_id=me"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert seen["mcp"] == McpBinding("reasoningEngines/personal", {"user_id": "me"})
    refused = CliRunner().invoke(app, ["serve", "--uri", "memory://", "--mcp-bank", "personal"])
    assert refused.exit_code == 1 and "Whose memories?" in refused.output


async def test_a_key_reaches_on_mcp_only_what_its_permissions_and_banks_allow() -> None:
    """A key with `memories.retrieve` alone retrieves through /mcp but cannot create; a key
    for other banks is refused before any tool runs."""
    reader = "mcp-in-serve-reader-key-0123456789"
    elsewhere = "mcp-in-serve-elsewhere-key-012345"
    keys = [
        *KEYS,
        ApiKey(name="reader", key=reader, permissions=["memories.retrieve"]),
        ApiKey(name="elsewhere", key=elsewhere, permissions=["memories.*"], banks=["other"]),
    ]
    client = AsyncClient("memory://", embedding_model="hash-64")
    binding = McpBinding("reasoningEngines/personal", {"user_id": "me"}, api_keys=None)
    with rest_server(client, mcp=binding, api_keys=keys) as running:
        async with httpx.AsyncClient(base_url=running.url) as http:
            create = {"name": "create_memory", "arguments": {"fact": "planted"}}
            retrieve = {"name": "retrieve_memories", "arguments": {"query": "planted"}}
            made = await _tool_call(http, reader, create)
            assert made["result"]["isError"] and "PERMISSION_DENIED" in str(made)
            found = await _tool_call(http, reader, retrieve)
            assert not found["result"]["isError"]
            refused = await http.post(
                "/mcp", json=PAYLOAD, headers={"authorization": f"Bearer {elsewhere}"}
            )
            assert refused.status_code == 403
            listed = await http.get(
                "/v1beta1/reasoningEngines/personal/memories", headers={"x-goog-api-key": ADMIN}
            )
        assert listed.json().get("memories", []) == []


async def _tool_call(http: httpx.AsyncClient, key: str, params: dict[str, Any]) -> Any:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    headers = {"authorization": f"Bearer {key}", "accept": "application/json, text/event-stream"}
    answer = await http.post("/mcp", json=body, headers=headers)
    assert answer.status_code == 200, answer.text
    return answer.json()
