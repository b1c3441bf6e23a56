"""`adk-memory mcp` through the MCP SDK's own client: in-process and over streamable HTTP on a
loopback port, on Chroma and Redis. Every tool works end to end in the bound scope, and no
argument, memory id or key reaches another scope."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import httpx2
import pytest
import uvicorn
from joserfc import jwt
from joserfc.jwk import OctKey
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from adk_memory import AsyncClient
from adk_memory.server import ApiKey, ApiKeys
from adk_memory.server.mcp_server import McpBinding, create_mcp_server, mcp_http_app
from adk_memory.testing.models import ScriptedMemoryModel

BANK = "reasoningEngines/notes"
ALICE = {"app_name": "notes", "user_id": "alice"}
BOB = {"app_name": "notes", "user_id": "bob"}
BOB_SECRET = "bob-secret-5d1e"
ALICE_KEY = "mcp-alice-key-0123456789"
UNBOUND_KEY = "mcp-unbound-key-0123456789"
CONTRARY_KEY = "mcp-contrary-key-0123456789"
TOKEN_SECRET = "mcp-token-secret-0123456789abcdef-01234"
KEYS = ApiKeys.of(
    [
        ApiKey(
            name="alice",
            key=ALICE_KEY,
            permissions=["memories.*", "memoryRevisions.*"],
            scope={"user_id": "alice"},
        ),
        ApiKey(name="unbound", key=UNBOUND_KEY, permissions=["*"]),
        ApiKey(
            name="contrary",
            key=CONTRARY_KEY,
            permissions=["*"],
            scope={"app_name": "other", "user_id": "bob"},
        ),
        ApiKey(
            name="users",
            token_secret=TOKEN_SECRET,
            permissions=["memories.*"],
            scope_claims={"user_id": "sub"},
        ),
    ]
)
TOOLS = {
    "retrieve_memories",
    "list_memories",
    "get_memory",
    "create_memory",
    "create_memories",
    "update_memory",
    "delete_memory",
    "list_revisions",
    "rollback_memory",
    "remember_conversation",
}


def token(subject: str) -> str:
    claims = {"sub": subject, "exp": int(time.time()) + 3600}
    return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(TOKEN_SECRET))


class ToolFailed(Exception):
    """A tool answered with isError."""


async def call(session: Client, tool: str, **arguments: Any) -> Any:
    """The structured result of a tool (a list result unwrapped), or ToolFailed."""
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise ToolFailed(" ".join(getattr(block, "text", "") for block in result.content))
    content = result.structured_content
    if isinstance(content, dict) and set(content) == {"result"}:
        return content["result"]
    return content


@dataclass
class World:
    """A server over one store, holding BOB_SECRET in bob's scope; `connect` opens a session."""

    client: AsyncClient
    transport: str
    url: str | None
    server: Any
    bob_id: str

    @asynccontextmanager
    async def connect(self, headers: dict[str, str] | None = None) -> AsyncIterator[Client]:
        if self.transport == "inproc":
            async with Client(self.server) as session:
                yield session
            return
        assert self.url is not None
        default = {"x-goog-api-key": ALICE_KEY}
        async with httpx2.AsyncClient(headers=default if headers is None else headers) as http:
            async with Client(streamable_http_client(self.url, http_client=http)) as session:
                yield session

    async def bob_state(self) -> str:
        memories = self.client.memory_banks.memories
        hits = (await memories.retrieve(name=BANK, scope=BOB)).page
        name = f"{BANK}/memories/{self.bob_id}"
        revisions = (await memories.revisions.list(name=name)).page
        dumped = [h.model_dump(mode="json") for h in hits] + [
            r.model_dump(mode="json") for r in revisions
        ]
        return json.dumps(dumped, sort_keys=True)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(params=["inproc", "http"])
async def world(request: pytest.FixtureRequest, store_uri: str) -> AsyncIterator[World]:
    model = ScriptedMemoryModel(
        extractions=[{"memories": [{"fact": "alice plays chess", "topics": ["USER_PREFERENCES"]}]}],
        consolidations=[
            {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "alice plays chess"}]}
        ],
    )
    async with AsyncClient(store_uri, embedding_model="hash-64", generation_model=model) as client:
        await client.memory_banks.create(memory_bank_id="notes")
        made = await client.memory_banks.memories.create(name=BANK, fact=BOB_SECRET, scope=BOB)
        assert made.response is not None and made.response.name
        bob_id = made.response.name.rsplit("/", 1)[-1]
        await client.memory_banks.memories.update(name=made.response.name, fact=f"{BOB_SECRET} v2")
        if request.param == "inproc":
            server = await create_mcp_server(client, McpBinding(BANK, ALICE))
            yield World(client, "inproc", None, server, bob_id)
            return
        server = await create_mcp_server(client, McpBinding(BANK, {"app_name": "notes"}, KEYS))
        port = _free_port()
        config = uvicorn.Config(
            mcp_http_app(server, KEYS), host="127.0.0.1", port=port, log_level="warning"
        )
        running = uvicorn.Server(config)
        task = asyncio.create_task(running.serve())
        while not running.started:
            await asyncio.sleep(0.01)
        try:
            yield World(client, "http", f"http://127.0.0.1:{port}/mcp", server, bob_id)
        finally:
            running.should_exit = True
            await task


BACKENDS = pytest.mark.parametrize("store_uri", ["chroma", "redis"], indirect=True)


@BACKENDS
async def test_every_tool_works_end_to_end_in_the_bound_scope(world: World) -> None:
    async with world.connect() as session:
        listed = await session.list_tools()
        assert {tool.name for tool in listed.tools} == TOOLS
        for tool in listed.tools:
            assert tool.description and len(tool.description) > 30, tool.name
            names = set(tool.input_schema.get("properties", {}))
            assert not names & {"scope", "bank", "user_id", "name", "app_name"}, tool.name

        made = await call(session, "create_memory", fact="I prefer green tea.")
        memory_id = made["memory_id"]
        hits = await call(session, "retrieve_memories", query="favourite drink", top_k=5)
        assert [h["fact"] for h in hits] == ["I prefer green tea."]
        assert hits[0]["distance"] is not None
        page = await call(session, "list_memories", page_size=10)
        assert [m["memory_id"] for m in page["memories"]] == [memory_id]
        assert (await call(session, "get_memory", memory_id=memory_id))["fact"] == (
            "I prefer green tea."
        )
        updated = await call(session, "update_memory", memory_id=memory_id, fact="I prefer coffee.")
        assert updated["fact"] == "I prefer coffee."
        revisions = await call(session, "list_revisions", memory_id=memory_id)
        assert [r["fact"] for r in revisions] == ["I prefer coffee.", "I prefer green tea."]
        restored = await call(
            session,
            "rollback_memory",
            memory_id=memory_id,
            revision_id=revisions[-1]["revision_id"],
        )
        assert restored["fact"] == "I prefer green tea."
        generated = await call(
            session,
            "remember_conversation",
            messages=[{"role": "user", "text": "I play chess on Sundays."}],
        )
        assert [g["action"] for g in generated] == ["CREATED"]
        batch = await call(
            session, "create_memories", memories=[{"fact": "I row."}, {"fact": "I ski."}]
        )
        found = await call(session, "retrieve_memories", query="I ski.", top_k=1)
        assert [h["memory_id"] for h in found] == [batch[1]["memory_id"]]
        for made_now in batch:
            assert await call(session, "delete_memory", memory_id=made_now["memory_id"])
        assert await call(session, "delete_memory", memory_id=memory_id)
        with pytest.raises(ToolFailed, match="does not exist"):
            await call(session, "get_memory", memory_id=memory_id)
    stored = (await world.client.memory_banks.memories.retrieve(name=BANK, scope=ALICE)).page
    assert [hit.memory.fact for hit in stored if hit.memory] == ["alice plays chess"]


@BACKENDS
async def test_no_argument_reaches_another_scope(world: World) -> None:
    before = await world.bob_state()
    async with world.connect() as session:
        await call(session, "create_memory", fact="alice likes jazz")
        hostile = [
            world.bob_id,
            f"{world.bob_id}/",
            f"../memories/{world.bob_id}",
            f"{BANK}/memories/{world.bob_id}",
            world.bob_id.upper(),
            "*",
            "",
            "\u0000",
        ]
        for memory_id in hostile:
            for tool, extra in [
                ("get_memory", {}),
                ("update_memory", {"fact": "owned"}),
                ("delete_memory", {}),
                ("list_revisions", {}),
                ("rollback_memory", {"revision_id": "1"}),
            ]:
                with pytest.raises(ToolFailed) as failed:
                    await call(session, tool, memory_id=memory_id, **extra)
                assert BOB_SECRET not in str(failed.value)
        for query in (BOB_SECRET, "bob", 'scope.user_id = "bob"'):
            hits = await call(session, "retrieve_memories", query=query, top_k=100)
            assert {h["fact"] for h in hits} == {"alice likes jazz"}
        page = await call(session, "list_memories", page_size=100)
        assert {m["fact"] for m in page["memories"]} == {"alice likes jazz"}
        for smuggled in ({"scope": BOB}, {"user_id": "bob"}, {"bank": "reasoningEngines/x"}):
            try:
                hits = await call(session, "retrieve_memories", query="x", **smuggled)
            except ToolFailed:
                continue
            assert {h["fact"] for h in hits} == {"alice likes jazz"}
    assert await world.bob_state() == before


@pytest.mark.parametrize("store_uri", ["redis"], indirect=True)
@pytest.mark.parametrize("world", ["http"], indirect=True)
async def test_over_http_the_key_decides_the_scope(world: World) -> None:
    async with world.connect({"authorization": f"Bearer {token('bob')}"}) as session:
        hits = await call(session, "retrieve_memories", query="secret")
        assert [h["memory_id"] for h in hits] == [world.bob_id]
    async with world.connect({"authorization": f"Bearer {token('carol')}"}) as session:
        await call(session, "create_memory", fact="carol's note")
        assert [h["fact"] for h in await call(session, "retrieve_memories", query="x")] == [
            "carol's note"
        ]
    # A key bound to no scope gets exactly the server's: {app_name: notes}, no user's memories.
    async with world.connect({"x-goog-api-key": UNBOUND_KEY}) as session:
        assert await call(session, "retrieve_memories", query="secret") == []
        with pytest.raises(ToolFailed, match="does not exist"):
            await call(session, "get_memory", memory_id=world.bob_id)
    # A key whose entries contradict the server's --scope is refused, not merged.
    async with world.connect({"x-goog-api-key": CONTRARY_KEY}) as session:
        with pytest.raises(ToolFailed, match="PERMISSION_DENIED"):
            await call(session, "retrieve_memories", query="secret")
    for headers in (
        {},
        {"x-goog-api-key": "wrong-key-0123456789"},
        {"authorization": "Bearer x.y.z"},
    ):
        async with httpx2.AsyncClient(headers=headers) as http:
            answer = await http.post(
                world.url or "",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"accept": "application/json, text/event-stream"},
            )
            assert answer.status_code == 401, answer.text
            assert BOB_SECRET not in answer.text
