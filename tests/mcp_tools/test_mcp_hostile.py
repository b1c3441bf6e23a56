"""Hostile tool calls against `adk-memory mcp` (in-process, the SDK's client): any tool, any
arguments (ids of another scope's memory, extra `scope`/`bank`/`user_id` arguments, wrong types,
odd text) answer with a result or a tool error, never show bob's memory, never change it."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp import Client

from adk_memory import AsyncClient
from adk_memory.server.mcp_server import McpBinding, create_mcp_server
from adk_memory.testing.models import ScriptedMemoryModel

BANK = "reasoningEngines/notes"
ALICE = {"user_id": "alice"}
BOB = {"user_id": "bob"}
BOB_SECRET = "bob-secret-0b7a"
TOOLS = {
    "retrieve_memories": ("query", "top_k", "filter", "metadata_filters", "max_distance"),
    "list_memories": ("page_size", "page_token", "filter", "metadata_filters"),
    "get_memory": ("memory_id",),
    "create_memory": ("fact", "topics", "metadata", "ttl_seconds"),
    "create_memories": ("memories",),
    "update_memory": ("memory_id", "fact", "topics", "metadata", "ttl_seconds"),
    "delete_memory": ("memory_id",),
    "list_revisions": ("memory_id",),
    "rollback_memory": ("memory_id", "revision_id"),
    "remember_conversation": ("messages",),
}
TEXT = st.one_of(
    st.sampled_from(["", "*", "..", "bob", 'scope.user_id = "bob"', "\u0000", "a" * 500]),
    st.text(max_size=20),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=5,
)


class Harness:
    """A server on its own event loop; `call` opens a session, calls one tool, closes."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        model = ScriptedMemoryModel(
            consolidate=lambda request: {"actions": []},
        )
        self.client = AsyncClient("memory://", embedding_model="hash-64", generation_model=model)
        self.bob_id, self.alice_id, self.server = self.run(self.setup())

    async def setup(self) -> tuple[str, str, Any]:
        memories = self.client.memory_banks.memories
        await self.client.memory_banks.create(memory_bank_id="notes")
        ids = []
        for fact, scope in ((BOB_SECRET, BOB), ("alice likes jazz", ALICE)):
            made = await memories.create(name=BANK, fact=fact, scope=scope)
            assert made.response is not None and made.response.name
            await memories.update(name=made.response.name, fact=f"{fact} v2")
            ids.append(made.response.name.rsplit("/", 1)[-1])
        return ids[0], ids[1], await create_mcp_server(self.client, McpBinding(BANK, ALICE))

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def call(self, tool: str, arguments: dict[str, Any]) -> Any:
        async def one() -> Any:
            async with Client(self.server) as session:
                return await session.call_tool(tool, arguments)

        return self.run(one())

    def bob_state(self) -> str:
        async def state() -> str:
            memories = self.client.memory_banks.memories
            hits = (await memories.retrieve(name=BANK, scope=BOB)).page
            revisions = (await memories.revisions.list(name=f"{BANK}/memories/{self.bob_id}")).page
            dumped = [item.model_dump(mode="json") for item in [*hits, *revisions]]
            return json.dumps(dumped, sort_keys=True)

        result: str = self.run(state())
        return result

    def close(self) -> None:
        self.run(self.client.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def harness() -> Iterator[Harness]:
    made = Harness()
    try:
        yield made
    finally:
        made.close()


@st.composite
def tool_calls(draw: st.DrawFn, bob_id: str, alice_id: str) -> tuple[str, dict[str, Any]]:
    tool = draw(st.sampled_from(sorted(TOOLS)))
    ids = st.one_of(
        st.sampled_from(
            [
                bob_id,
                alice_id,
                bob_id.upper(),
                f"{bob_id}/",
                f"../{bob_id}",
                f"{BANK}/memories/{bob_id}",
                "1",
            ]
        ),
        TEXT,
    )
    values: dict[str, st.SearchStrategy[Any]] = {
        "memory_id": ids,
        "revision_id": st.one_of(st.sampled_from(["1", "2"]), TEXT),
        "query": st.one_of(st.just(BOB_SECRET), TEXT, JSON),  # never stored by alice
        "fact": st.one_of(TEXT, JSON),
        "top_k": st.one_of(st.integers(-3, 200), JSON),
        "page_size": st.one_of(st.integers(-3, 200), JSON),
        "page_token": st.one_of(TEXT, JSON),
        "filter": st.one_of(
            st.sampled_from(['scope.user_id = "bob"', f'fact : "{BOB_SECRET}"', "fact ="]), TEXT
        ),
        "max_distance": st.one_of(st.floats(allow_nan=False), JSON),
        "metadata_filters": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"key": TEXT, "value": st.one_of(TEXT, st.floats(), st.booleans())},
                    optional={"op": st.sampled_from(["=", ">", "<", "!"]), "negate": JSON},
                ),
                max_size=3,
            ),
            JSON,
        ),
        "topics": st.one_of(st.lists(TEXT, max_size=3), JSON),
        "metadata": st.one_of(
            st.dictionaries(TEXT, st.one_of(TEXT, st.floats()), max_size=3), JSON
        ),
        "ttl_seconds": st.one_of(st.integers(-3, 2**40), JSON),
        "memories": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"fact": TEXT}, optional={"scope": st.just(BOB), "topics": JSON}
                ),
                max_size=3,
            ),
            JSON,
        ),
        "messages": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"role": st.sampled_from(["user", "model", "system"]), "text": TEXT}
                ),
                max_size=3,
            ),
            JSON,
        ),
    }
    arguments = draw(
        st.fixed_dictionaries(
            {name: values[name] for name in TOOLS[tool] if draw(st.integers(0, 5))},
            optional={
                "scope": st.one_of(st.just(BOB), JSON),
                "bank": st.one_of(st.just("reasoningEngines/other"), TEXT),
                "user_id": st.just("bob"),
                "name": st.just(f"{BANK}/memories/{bob_id}"),
            },
        )
    )
    return tool, arguments


@settings(
    max_examples=300,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=st.data())
def test_no_tool_call_shows_or_changes_another_scopes_memory(
    harness: Harness, data: st.DataObject
) -> None:
    before = harness.bob_state()
    tool, arguments = data.draw(tool_calls(harness.bob_id, harness.alice_id))
    result = harness.call(tool, arguments)
    shown = json.dumps(result.model_dump(mode="json"))
    assert BOB_SECRET not in shown
    assert harness.bob_id not in json.dumps(result.structured_content or {}) or (
        # echoing the id the caller sent is fine; showing it as a found memory is not
        result.is_error
    )
    assert harness.bob_state() == before
