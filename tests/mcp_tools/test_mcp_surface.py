"""What an MCP host and its model see of `adk-memory mcp`, through the SDK's own client: each
tool's annotations and schema, the reported version, every tool's job with topics, metadata,
TTL, batches, filters and a distance threshold, and the exact texts of failures (argument
names, tool names, never SDK calls, pydantic dumps or URLs). Over streamable HTTP: 401 for a
missing, wrong or expired key and 403 for a key that may do nothing on the bank, each with a
`WWW-Authenticate` challenge naming the RFC 9728 metadata, which is served without a key."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
import pytest
import uvicorn
from joserfc import jwt
from joserfc.jwk import OctKey
from mcp import Client

import adk_memory
from adk_memory import AsyncClient
from adk_memory.errors import Unauthenticated
from adk_memory.server import ApiKey, ApiKeys, create_app
from adk_memory.server.auth import authenticate
from adk_memory.server.mcp_server import McpBinding, create_mcp_server, mcp_http_app
from adk_memory.testing.models import ScriptedMemoryModel

BANK = "reasoningEngines/notes"
ALICE = {"user_id": "alice"}
SECRET = "mcp-surface-secret-0123456789abcdef-0123"
KEY = "mcp-surface-key-0123456789"
NOTHING_KEY = "mcp-surface-nothing-0123456789"
OTHER_BANK_KEY = "mcp-surface-otherbank-0123456789"
KEYS = ApiKeys.of(
    [
        ApiKey(name="alice", key=KEY, permissions=["memories.*", "memoryRevisions.*"]),
        ApiKey(name="nothing", key=NOTHING_KEY, permissions=["reasoningEngines.get"]),
        ApiKey(name="elsewhere", key=OTHER_BANK_KEY, permissions=["*"], banks=["other"]),
        ApiKey(
            name="users", token_secret=SECRET, permissions=["*"], scope_claims={"user_id": "sub"}
        ),
    ]
)
READ = {"read_only_hint": True, "idempotent_hint": True, "open_world_hint": False}
ADD = {"read_only_hint": False, "destructive_hint": False, "idempotent_hint": False}
CHANGE = {"read_only_hint": False, "destructive_hint": True, "idempotent_hint": False}
DELETE = {"read_only_hint": False, "destructive_hint": True, "idempotent_hint": True}
ANNOTATIONS = {
    "retrieve_memories": READ,
    "list_memories": READ,
    "get_memory": READ,
    "list_revisions": READ,
    "create_memory": ADD,
    "create_memories": ADD,
    "update_memory": CHANGE,
    "rollback_memory": CHANGE,
    "remember_conversation": CHANGE,
    "delete_memory": DELETE,
}


class ToolFailed(Exception):
    """A tool answered with isError; the text the model reads."""


async def call(session: Client, tool: str, **arguments: Any) -> Any:
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise ToolFailed(" ".join(getattr(block, "text", "") for block in result.content))
    content = result.structured_content
    if isinstance(content, dict) and set(content) == {"result"}:
        return content["result"]
    return content


async def failure(session: Client, tool: str, **arguments: Any) -> str:
    with pytest.raises(ToolFailed) as failed:
        await call(session, tool, **arguments)
    text = str(failed.value)
    for leak in ("pydantic", "http", "projects/", "()", "validation error", "input_value"):
        assert leak not in text, text
    return text


@pytest.fixture
async def client() -> AsyncIterator[AsyncClient]:
    model = ScriptedMemoryModel(consolidate=lambda request: {"actions": []})
    async with AsyncClient("memory://", embedding_model="hash-64", generation_model=model) as made:
        await made.memory_banks.create(memory_bank_id="notes")
        yield made


@pytest.fixture
async def server(client: AsyncClient) -> Any:
    """The stdio-style server of alice's scope; each test opens its session inside itself (a
    session belongs to the task that opened it)."""
    return await create_mcp_server(client, McpBinding(BANK, ALICE))


async def test_each_tool_declares_its_annotations_title_and_schema(server: Any) -> None:
    async with Client(server) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == set(ANNOTATIONS)
        for name, expected in ANNOTATIONS.items():
            annotations = tools[name].annotations
            assert annotations is not None, name
            assert annotations.model_dump(include=set(expected)) == expected, name
            assert annotations.open_world_hint is False and annotations.title == tools[name].title
        create = tools["create_memory"]
        assert set(create.input_schema["properties"]) == {
            "fact",
            "topics",
            "metadata",
            "ttl_seconds",
        }
        assert "self-contained" in (create.description or "")
        assert "never secrets" in (create.description or "")
        retrieve = tools["retrieve_memories"].input_schema["properties"]
        assert {"filter", "metadata_filters", "max_distance"} <= set(retrieve)
        assert "AIP-160" in retrieve["filter"]["anyOf"][0]["description"]
        batch = tools["create_memories"].input_schema
        assert batch["properties"]["memories"]["maxItems"] == 20


async def test_the_server_reports_the_package_version(server: Any) -> None:
    async with Client(server) as session:
        assert session.server_info is not None
        assert session.server_info.name == "adk-memory"
        assert session.server_info.version == adk_memory.__version__ != ""


async def test_topics_metadata_and_ttl_are_stored_and_filter_retrieval(server: Any) -> None:
    async with Client(server) as session:
        before = time.time()
        tea = await call(
            session,
            "create_memory",
            fact="Alice drinks green tea.",
            topics=["user_preferences", "drinks"],
            metadata={"source": "chat", "confidence": 0.9, "confirmed": True},
            ttl_seconds=3600,
        )
        assert tea["topics"] == ["USER_PREFERENCES", "drinks"]
        assert tea["metadata"] == {"source": "chat", "confidence": 0.9, "confirmed": True}
        expiry = tea["expire_time"]
        assert expiry is not None
        from datetime import datetime

        assert 3590 < datetime.fromisoformat(expiry).timestamp() - before < 3610
        await call(
            session, "create_memory", fact="Alice lives in Lyon.", metadata={"source": "form"}
        )

        hits = await call(
            session, "retrieve_memories", query="tea", filter='metadata.source = "chat"'
        )
        assert [h["fact"] for h in hits] == ["Alice drinks green tea."]
        by_topic = await call(
            session,
            "retrieve_memories",
            query="anything",
            filter="topics.managed_memory_topic = USER_PREFERENCES",
        )
        assert [h["memory_id"] for h in by_topic] == [tea["memory_id"]]
        every = await call(session, "retrieve_memories", query="Alice drinks green tea.", top_k=10)
        assert len(every) == 2 and every[0]["distance"] < every[1]["distance"]
        near = await call(
            session,
            "retrieve_memories",
            query="Alice drinks green tea.",
            top_k=10,
            max_distance=(every[0]["distance"] + every[1]["distance"]) / 2,
        )
        assert [h["fact"] for h in near] == ["Alice drinks green tea."]
        confident = await call(
            session,
            "retrieve_memories",
            query="Alice",
            metadata_filters=[{"key": "confidence", "op": ">", "value": 0.5}],
        )
        assert [h["fact"] for h in confident] == ["Alice drinks green tea."]
        unconfirmed = await call(
            session,
            "list_memories",
            metadata_filters=[{"key": "confirmed", "value": True, "negate": True}],
        )
        assert [m["fact"] for m in unconfirmed["memories"]] == ["Alice lives in Lyon."]
        listed = await call(session, "list_memories", filter='metadata.source = "form"')
        assert [m["fact"] for m in listed["memories"]] == ["Alice lives in Lyon."]

        changed = await call(
            session, "update_memory", memory_id=tea["memory_id"], topics=["drinks"]
        )
        assert changed["fact"] == "Alice drinks green tea." and changed["topics"] == ["drinks"]
        assert changed["metadata"] == tea["metadata"]


async def test_create_memories_stores_all_or_none(client: AsyncClient, server: Any) -> None:
    async with Client(server) as session:
        text = await failure(
            session,
            "create_memories",
            memories=[{"fact": "Alice runs."}, {"fact": "Alice swims."}, {"fact": "   "}],
        )
        assert text == "INVALID_ARGUMENT: memories[2].fact must be a non-empty string."
        assert (await call(session, "list_memories"))["memories"] == []

        made = await call(
            session,
            "create_memories",
            memories=[
                {"fact": "Alice runs.", "topics": ["hobbies"]},
                {"fact": "Alice swims.", "metadata": {"pool": "north"}, "ttl_seconds": 60},
            ],
        )
        assert [m["fact"] for m in made] == ["Alice runs.", "Alice swims."]
        assert made[0]["topics"] == ["hobbies"] and made[1]["metadata"] == {"pool": "north"}
        assert made[1]["expire_time"] is not None and made[0]["expire_time"] is None
        listed = await call(session, "list_memories")
        assert {m["memory_id"] for m in listed["memories"]} == {m["memory_id"] for m in made}
        for memory in made:  # each has its first revision, as a single create would
            revisions = await call(session, "list_revisions", memory_id=memory["memory_id"])
            assert [r["fact"] for r in revisions] == [memory["fact"]]


async def test_create_memories_refuses_a_batch_over_the_limit_naming_it(server: Any) -> None:
    async with Client(server) as session:
        text = await failure(
            session, "create_memories", memories=[{"fact": f"fact {i}"} for i in range(21)]
        )
        assert text == (
            "INVALID_ARGUMENT: memories: List should have at most 20 items after validation, "
            "not 21."
        )
        text = await failure(session, "create_memories", memories=[{"fact": "x", "scope": ALICE}])
        assert text == "INVALID_ARGUMENT: memories[0].scope: Extra inputs are not permitted."
        assert (await call(session, "list_memories"))["memories"] == []


async def test_failures_read_in_the_tools_terms(server: Any) -> None:
    async with Client(server) as session:
        assert await failure(session, "retrieve_memories", query="x", top_k=0) == (
            "INVALID_ARGUMENT: top_k: Input should be greater than or equal to 1."
        )
        assert await failure(session, "retrieve_memories") == "INVALID_ARGUMENT: query: required."
        assert await failure(session, "create_memory", fact="x", ttl_seconds=0, topics=[""]) == (
            "INVALID_ARGUMENT: topics[0]: String should have at least 1 character; "
            "ttl_seconds: Input should be greater than or equal to 1."
        )
        assert await failure(session, "create_memory", fact="x", metadata={"n": float("nan")}) == (
            "INVALID_ARGUMENT: metadata.n: must be a string, a finite number or a boolean."
        )
        bad_filter = await failure(session, "retrieve_memories", query="x", filter="fact ==")
        assert bad_filter.startswith("INVALID_ARGUMENT: filter")
        compared = await failure(
            session, "retrieve_memories", query="x", filter="metadata.confidence > 0.5"
        )
        assert compared.endswith("Use =, or metadata_filters for other metadata comparisons.")
        assert await failure(session, "get_memory", memory_id="Not/An/Id") == (
            "INVALID_ARGUMENT: memory_id: not a memory_id (lowercase letters, digits and '-')."
        )
        made = await call(session, "create_memory", fact="Alice cycles.")
        memory_id = made["memory_id"]
        assert await failure(session, "update_memory", memory_id=memory_id) == (
            "INVALID_ARGUMENT: Give what changes: fact, topics, metadata or ttl_seconds."
        )
        rollback = await failure(session, "rollback_memory", memory_id=memory_id, revision_id="9")
        assert rollback.startswith("NOT_FOUND: ")
        assert rollback.endswith("list them with the list_revisions tool.")
        assert "memories.revisions.list" not in rollback
        assert await failure(session, "get_memory", memory_id="nothing-here") == (
            "NOT_FOUND: Memory 'nothing-here' does not exist or has expired."
        )


# Over streamable HTTP


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _token(subject: str, expires_in: int, *, secret: str = SECRET) -> str:
    claims = {"sub": subject, "exp": int(time.time()) + expires_in}
    return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(secret))


@pytest.fixture
async def base_url(client: AsyncClient) -> AsyncIterator[str]:
    server = await create_mcp_server(client, McpBinding(BANK, {}, KEYS))
    port = _free_port()
    app = mcp_http_app(server, KEYS, bank=BANK)
    running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(running.serve())
    while not running.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        running.should_exit = True
        await task


async def _post(base_url: str, headers: dict[str, str]) -> httpx2.Response:
    async with httpx2.AsyncClient(headers=headers) as http:
        return await http.post(
            f"{base_url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream"},
        )


@pytest.mark.parametrize(
    ("headers", "status", "error", "message"),
    [
        (
            {},
            401,
            None,
            "This server requires an API key: send it as 'x-goog-api-key: KEY' or "
            "'Authorization: Bearer KEY' (the headers of this server's entry in your MCP "
            "client's configuration).",
        ),
        (
            {"x-goog-api-key": "wrong-key-0123456789"},
            401,
            "invalid_token",
            "The API key is not valid for this server; check the key in the headers of this "
            "server's entry in your MCP client's configuration.",
        ),
        (
            {"authorization": f"Bearer {_token('alice', -60)}"},
            401,
            "invalid_token",
            "The token has expired (its exp claim is past); put a new one in the headers of "
            "this server's entry in your MCP client's configuration.",
        ),
        (  # forged: expired, but not signed with the key's secret; nothing to tell
            {"authorization": f"Bearer {_token('alice', -60, secret='f' * 40)}"},
            401,
            "invalid_token",
            "The API key is not valid for this server; check the key in the headers of this "
            "server's entry in your MCP client's configuration.",
        ),
        (  # unsigned
            {"authorization": "Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJib2IifQ."},
            401,
            "invalid_token",
            "The API key is not valid for this server; check the key in the headers of this "
            "server's entry in your MCP client's configuration.",
        ),
        (
            {"x-goog-api-key": NOTHING_KEY},
            403,
            "insufficient_scope",
            "The API key 'nothing' lacks the permission 'memories.retrieve' "
            "(aiplatform.memories.retrieve); add it to the key's `permissions`.",
        ),
        (
            {"x-goog-api-key": OTHER_BANK_KEY},
            403,
            "insufficient_scope",
            "The API key 'elsewhere' may not use memory bank 'notes'; add it to the key's "
            "`banks` in the key file.",
        ),
    ],
)
async def test_refusals_carry_status_challenge_and_a_message_for_mcp_clients(
    base_url: str, headers: dict[str, str], status: int, error: str | None, message: str
) -> None:
    answer = await _post(base_url, headers)
    assert answer.status_code == status
    assert answer.json()["error"]["message"] == message
    challenge = answer.headers["www-authenticate"]
    metadata = f"{base_url}/.well-known/oauth-protected-resource/mcp"
    expected = 'Bearer realm="adk-memory",'
    expected += f' error="{error}",' if error else ""
    assert challenge == f'{expected} resource_metadata="{metadata}"'


async def test_the_protected_resource_metadata_is_served_without_a_key(base_url: str) -> None:
    async with httpx2.AsyncClient() as http:
        answer = await http.get(f"{base_url}/.well-known/oauth-protected-resource/mcp")
    assert answer.status_code == 200
    document = answer.json()
    assert document["resource"] == f"{base_url}/mcp"
    assert document["bearer_methods_supported"] == ["header"]
    assert "memories.retrieve" in document["scopes_supported"]
    assert "authorization_servers" not in document


async def test_a_valid_token_reaches_the_tools_and_the_version_over_http(
    client: AsyncClient, base_url: str
) -> None:
    """A batch created with bob's token lands in bob's scope only; alice's token sees none."""
    from mcp.client.streamable_http import streamable_http_client

    for user, batch in (("bob", [{"fact": "Bob rows."}, {"fact": "Bob sails."}]), ("alice", [])):
        headers = {"authorization": f"Bearer {_token(user, 600)}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            url = f"{base_url}/mcp"
            async with Client(streamable_http_client(url, http_client=http)) as session:
                assert session.server_info is not None
                assert session.server_info.version == adk_memory.__version__
                made = await call(session, "create_memories", memories=batch) if batch else []
                hits = await call(session, "retrieve_memories", query="rows", top_k=10)
                assert {h["memory_id"] for h in hits} == {m["memory_id"] for m in made}
    stored = await client.memory_banks.memories.retrieve(name=BANK, scope={"user_id": "bob"})
    assert sorted(hit.memory.fact for hit in stored.page if hit.memory) == [
        "Bob rows.",
        "Bob sails.",
    ]


async def test_rest_and_python_word_the_same_refusals_their_own_way(client: AsyncClient) -> None:
    """The REST server's 401s name the request's headers; the Python message the SDK's token."""
    app = create_app(client, api_keys=KEYS)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        url = f"/v1beta1/{BANK}/memories:retrieve"
        missing = await http.post(url, json={"scope": ALICE})
        expired = await http.post(
            url,
            json={"scope": ALICE},
            headers={"authorization": f"Bearer {_token('alice', -60)}"},
        )
    assert missing.status_code == expired.status_code == 401
    assert missing.json()["error"]["message"] == (
        "This server requires an API key: send it as 'x-goog-api-key: KEY' or "
        "'Authorization: Bearer KEY' (the request's headers)."
    )
    assert expired.json()["error"]["message"] == (
        "The token has expired (its exp claim is past); put a new one in the request's headers."
    )
    with pytest.raises(Unauthenticated) as raised:
        authenticate(KEYS, None, None)
    assert str(raised.value).endswith(
        "(credentials.token, which the official SDK sends as a bearer token)."
    )
