"""Attacks on the guard-tokens, mcp-cli-surfaces and browser-ui merges, from the outside.

- A key bound to alice, and every MCP caller, can bring back a memory it deleted, as the REST
  route and the `delete_memory` tool promise ("its revisions remain for a while, so
  rollback_memory can bring it back"): before, the scope check read the live memory only, so a
  deleted memory of one's own answered NotFound to its revisions and its rollback. Bob's deleted
  memories still answer alice exactly as ids that never existed.
- A page token of a bank deleted and created again under its id resumed the new bank's list,
  retrieve or revisions after a position all its memories precede: an empty last page, and a
  caller sure it had seen everything. Tokens now name the bank's creation too, and are refused.
- Held, kept because cheap: a request without `Host` and the MCP endpoint's other methods from a
  foreign page are refused by the keyless guard.

The store-touching attacks run on every backend (`store_uri`: memory://, embedded Chroma, a Chroma
server, Redis).
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import httpx
import pytest
from test_scope_and_guard_leaks import (
    ADMIN,
    ADMIN_KEY,
    ALICE,
    ALICE_KEY,
    BOB,
    MCP_HEADERS,
    TOKEN_SECRET,
    listening,
    rest,
    rpc,
    user_token,
)

from adk_memory import AsyncClient, InvalidArgument, NotFound
from adk_memory.server import ApiKey, ApiKeys, create_app
from adk_memory.server.mcp_server import McpBinding, create_mcp_server, mcp_http_app

pytestmark = pytest.mark.filterwarnings("ignore:.* is not a valid .*:UserWarning")

ALICE_HEADERS = {"x-goog-api-key": ALICE_KEY}
HISTORY = ["memories.*", "memoryRevisions.*"]
KEYS = ApiKeys.of(
    [
        ApiKey(name="admin", key=ADMIN_KEY, permissions=["*"]),
        ApiKey(name="alice", key=ALICE_KEY, permissions=HISTORY, scope=ALICE),
        ApiKey(
            name="users",
            token_secret=TOKEN_SECRET,
            permissions=HISTORY,
            scope_claims={"user_id": "sub"},
        ),
    ]
)


def _short(name: str) -> str:
    return name[name.index("reasoningEngines/") :]


async def _created_and_deleted(
    http: httpx.AsyncClient, bank: str, headers: dict[str, str], scope: dict[str, str]
) -> tuple[str, str]:
    """(the memory's path, its first revision id) of a memory created and then deleted."""
    made = await http.post(
        f"{bank}/memories",
        json={"fact": f"{scope['user_id']}'s bike", "scope": scope},
        headers=headers,
    )
    assert made.status_code == 200, made.text
    path = _short(made.json()["response"]["name"])
    listed = await http.get(f"{path}/revisions", headers=headers)
    revision = listed.json()["memoryRevisions"][0]["name"].rsplit("/", 1)[-1]
    assert (await http.delete(path, headers=headers)).status_code == 200
    return path, revision


async def test_a_bound_key_restores_its_own_deleted_memory_and_never_bobs(
    aclient: AsyncClient,
) -> None:
    """Alice lists the revisions of her deleted memory and rolls it back; bob's deleted memory
    answers her revisions, revision and rollback requests as an id that never existed does."""
    bank = _short((await aclient.memory_banks.create()).name or "")
    async with rest(aclient, api_keys=KEYS) as http:
        own, own_revision = await _created_and_deleted(http, bank, ALICE_HEADERS, ALICE)
        listed = await http.get(f"{own}/revisions", headers=ALICE_HEADERS)
        assert listed.status_code == 200, listed.text
        assert [r["fact"] for r in listed.json()["memoryRevisions"]] == ["alice's bike"]
        back = await http.post(
            f"{own}:rollback", json={"targetRevisionId": own_revision}, headers=ALICE_HEADERS
        )
        assert back.status_code == 200, back.text
        restored = await http.get(own, headers=ALICE_HEADERS)
        assert restored.status_code == 200, restored.text
        assert (restored.json()["fact"], restored.json()["scope"]) == ("alice's bike", ALICE)

        bobs, bobs_revision = await _created_and_deleted(http, bank, user_token("bob"), BOB)
        never = f"{bank}/memories/never-was"
        for path in (bobs, never):
            answers = [
                await http.get(f"{path}/revisions", headers=ALICE_HEADERS),
                await http.get(f"{path}/revisions/{bobs_revision}", headers=ALICE_HEADERS),
                await http.post(
                    f"{path}:rollback",
                    json={"targetRevisionId": bobs_revision},
                    headers=ALICE_HEADERS,
                ),
                await http.get(path, headers=ALICE_HEADERS),
            ]
            assert [a.status_code for a in answers] == [404] * 4, [a.text for a in answers]
            assert all("bob" not in a.text for a in answers)
        assert (await http.get(bobs, headers=ADMIN)).status_code == 404  # still deleted


async def test_mcp_rollback_memory_brings_back_what_delete_memory_deleted(
    aclient: AsyncClient,
) -> None:
    """delete_memory, then list_revisions and rollback_memory of the same id restore it; bob's
    deleted memory stays out of alice's reach."""
    await aclient.memory_banks.create(memory_bank_id="notes")
    bank = "reasoningEngines/notes"
    server = await create_mcp_server(aclient, McpBinding(bank, {}, KEYS))
    async with (
        listening(mcp_http_app(server, KEYS), "127.0.0.1") as address,
        httpx.AsyncClient() as http,
    ):

        async def call(user: str, tool: str, **arguments: Any) -> dict[str, Any]:
            answer = await http.post(
                f"http://{address}/mcp",
                json=rpc(tool, **arguments),
                headers={**MCP_HEADERS, **user_token(user)},
            )
            assert answer.status_code == 200, answer.text
            result: dict[str, Any] = answer.json()["result"]
            return result

        def made(result: dict[str, Any]) -> Any:
            assert not result["isError"], result
            return result["structuredContent"]

        ids = {}
        for user in ("alice", "bob"):
            memory_id = made(await call(user, "create_memory", fact=f"{user}'s bike"))["memory_id"]
            made(await call(user, "delete_memory", memory_id=memory_id))
            ids[user] = memory_id
        revisions = made(await call("alice", "list_revisions", memory_id=ids["alice"]))["result"]
        assert [r["fact"] for r in revisions] == ["alice's bike"]
        restored = made(
            await call(
                "alice",
                "rollback_memory",
                memory_id=ids["alice"],
                revision_id=revisions[0]["revision_id"],
            )
        )
        assert restored["fact"] == "alice's bike"
        bobs = (
            await aclient.memory_banks.memories.revisions.list(name=f"{bank}/memories/{ids['bob']}")
        ).page
        for tool, arguments in (
            ("list_revisions", {}),
            ("rollback_memory", {"revision_id": (bobs[0].name or "").rsplit("/", 1)[-1]}),
        ):
            refused = await call("alice", tool, memory_id=ids["bob"], **arguments)
            assert refused["isError"] and "NOT_FOUND" in json.dumps(refused), refused
            assert "bob" not in json.dumps(refused)
    hits = (await aclient.memory_banks.memories.retrieve(name=bank, scope=BOB)).page
    assert hits == []


async def test_a_page_token_of_a_deleted_bank_is_refused_by_its_successor(
    aclient: AsyncClient,
) -> None:
    """A bank deleted and created again under its id is another listing: before, the old
    bank's list, retrieve and revisions tokens resumed after a position the new bank's
    memories all precede, so the page came back empty and last, and the caller believed it
    had seen every memory. Now each is refused, saying to start over."""
    memories = aclient.memory_banks.memories
    bank = "reasoningEngines/recreated"

    async def fill(label: str) -> None:
        await aclient.memory_banks.create(memory_bank_id="recreated")
        for i in range(3):
            await memories.create(name=bank, fact=f"{label} {i}", scope=ALICE)
        pet = (
            await memories.create(name=bank, fact=label, scope=ALICE, config={"memory_id": "pet"})
        ).response
        for i in range(2):
            await memories.update(name=pet.name or "", fact=f"{label} pet {i}")

    await fill("old")
    pet = f"{bank}/memories/pet"
    tokens = {
        "list": (await memories.list(name=bank, config={"page_size": 1})).next_page_token,
        "retrieve": (
            await memories.retrieve(
                name=bank, scope=ALICE, simple_retrieval_params={"page_size": 1}
            )
        ).next_page_token,
        "revisions": (
            await memories.revisions.list(name=pet, config={"page_size": 1})
        ).next_page_token,
    }
    assert all(tokens.values()), tokens
    await aclient.memory_banks.delete(name=bank, force=True)
    await fill("new")
    resumed = {
        "list": lambda token: memories.list(name=bank, config={"page_token": token}),
        "retrieve": lambda token: memories.retrieve(
            name=bank, scope=ALICE, simple_retrieval_params={"page_token": token}
        ),
        "revisions": lambda token: memories.revisions.list(name=pet, config={"page_token": token}),
    }
    for kind, token in tokens.items():
        with pytest.raises(InvalidArgument, match="page_token"):
            await resumed[kind](token)


async def _status(address: str, request: bytes) -> bytes:
    """The status line a raw HTTP request gets (what no HTTP client library would send)."""
    host, port = address.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return (await asyncio.wait_for(reader.readline(), 10)).strip()
    finally:
        writer.close()


async def test_keyless_http_refuses_a_request_without_host_and_foreign_mcp_methods() -> None:
    """Held: an HTTP/1.0 request with no `Host` (a name the guard cannot check) and the MCP
    endpoint's GET (event stream), DELETE (session end) and OPTIONS (preflight) from a foreign
    page are 403 on the keyless REST and MCP apps alike."""
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="notes")
        server = await create_mcp_server(client, McpBinding("reasoningEngines/notes", ALICE))
        for app in (create_app(client), mcp_http_app(server, None)):
            async with listening(app, "127.0.0.1") as address:
                no_host = [
                    b"GET /v1beta1/reasoningEngines HTTP/1.0\r\n\r\n",
                    b"POST /mcp HTTP/1.0\r\ncontent-type: application/json\r\n"
                    b"content-length: 2\r\n\r\n{}",
                ]
                foreign = [
                    f"{method} /mcp HTTP/1.1\r\nhost: {address}\r\norigin: http://evil.example"
                    f"\r\naccess-control-request-method: POST\r\nconnection: close\r\n\r\n".encode()
                    for method in ("GET", "DELETE", "OPTIONS")
                ]
                for request in [*no_host, *foreign]:
                    assert (await _status(address, request)).endswith(b" 403 Forbidden"), request


MARKERS = ["[[call:nope]]", "[[option:nope]]"]
"""Text shaped like `wording`'s advice markers, naming no operation or option."""


@pytest.mark.parametrize("store_uri", ["memory"], indirect=True)  # wording, not the store
async def test_text_shaped_like_an_advice_marker_is_quoted_back_not_a_crash(
    aclient: AsyncClient,
) -> None:
    """A revision id or a memory name holding `[[call:nope]]` (an advice marker of
    `adk_memory.wording` with an unknown name): before, the error built around it raised
    KeyError, an untyped exception in Python and a 500 over REST. Now each is its typed error,
    quoting the text as sent, in Python, over REST and over MCP."""
    memories = aclient.memory_banks.memories
    await aclient.memory_banks.create(memory_bank_id="marked")
    bank = "reasoningEngines/marked"
    made = await memories.create(name=bank, fact="a fact", scope=ALICE)
    name = made.response.name if made.response else ""
    for marker in MARKERS:
        with pytest.raises(NotFound, match=re.escape(marker)):
            await memories.rollback(name=name, target_revision_id=marker)
        with pytest.raises(InvalidArgument, match=re.escape(marker)):
            await memories.get(name=f"{bank}/memories/{marker}")
    async with rest(aclient, api_keys=KEYS) as http:
        for marker in MARKERS:
            answers = [
                await http.post(
                    f"{_short(name)}:rollback", json={"targetRevisionId": marker}, headers=ADMIN
                ),
                await http.get(f"{bank}/memories/{marker}", headers=ADMIN),
            ]
            assert [a.status_code for a in answers] == [404, 400], [a.text for a in answers]
            assert all(marker in a.json()["error"]["message"] for a in answers)
    server = await create_mcp_server(aclient, McpBinding(bank, ALICE))
    async with (
        listening(mcp_http_app(server, None), "127.0.0.1") as address,
        httpx.AsyncClient() as http,
    ):
        for marker in MARKERS:
            memory_id = name.rsplit("/", 1)[-1]
            body = rpc("rollback_memory", memory_id=memory_id, revision_id=marker)
            answer = await http.post(f"http://{address}/mcp", json=body, headers=MCP_HEADERS)
            result = answer.json()["result"]
            assert result["isError"] and result["content"][0]["text"].startswith("NOT_FOUND")
            assert marker in result["content"][0]["text"]
