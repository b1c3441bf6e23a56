"""Faults in the middle of a call: a store call that fails, a model that fails or hangs (8.2).

`FlakyStore` wraps a real store and makes its k-th call raise `StoreUnavailable` (what every
backend raises when its connection drops). Each write operation is run once to count its store
calls, then once per k with the k-th call failing: it either completes or raises a typed error,
and what is stored afterwards (memories and their revisions together) is exactly the state before
or the state after the call, once the store is next used.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import uuid
from typing import Any

import pytest
from google.adk.models import BaseLlm, LlmRequest, LlmResponse
from reliability_support import (
    SCOPE,
    WRITE_OPERATIONS,
    bank_with_memory_a,
    consolidate_update_and_create,
    snapshot,
)

from adk_memory import AdkMemoryError, AsyncClient, ModelUnavailable, StoreUnavailable
from adk_memory._registry import store_from_uri
from adk_memory.engine import generate as generate_module
from adk_memory.generation import call_structured
from adk_memory.generation import model as model_module
from adk_memory.testing.models import ScriptedMemoryModel


class FlakyStore:
    """Forwards to `inner`; the `fail_at`-th awaited call (0-based) raises StoreUnavailable."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.capabilities = inner.capabilities
        self.calls = 0
        self.fail_at: int | None = None

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(target) or name == "aclose":
            return target

        @functools.wraps(target)
        async def call(*args: Any, **kwargs: Any) -> Any:
            index, self.calls = self.calls, self.calls + 1
            if self.fail_at is not None and index == self.fail_at:
                raise StoreUnavailable(f"injected: the connection dropped during {name}")
            return await target(*args, **kwargs)

        return call


@pytest.fixture(params=["memory", "redis", "chroma"])
def fault_uri(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "chroma":
        return f"chroma://{tmp_path_factory.mktemp('chroma')}"
    redis_url = request.getfixturevalue("redis_url")
    return f"{redis_url}?key_prefix=f{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"


@pytest.mark.parametrize("operation", sorted(WRITE_OPERATIONS))
async def test_a_store_failure_at_any_step_leaves_the_state_before_or_after(
    fault_uri: str, operation: str
) -> None:
    op = WRITE_OPERATIONS[operation]
    store = FlakyStore(store_from_uri(fault_uri))
    model = ScriptedMemoryModel(consolidate=consolidate_update_and_create)
    async with AsyncClient(
        store=store, embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as client:
        fresh_bank = functools.partial(bank_with_memory_a, client, SCOPE)
        bank, a = await fresh_bank()
        names = {a}
        before = await snapshot(client, bank, names)
        store.calls = 0
        await op(client, bank, a)
        calls = store.calls
        after = await snapshot(client, bank, names)
        assert after != before
        assert calls >= 1

        for k in range(calls):
            bank, a = await fresh_bank()
            names = {a, a.rsplit("/", 1)[0] + "/b"}
            store.calls, store.fail_at = 0, k
            try:
                await asyncio.wait_for(op(client, bank, a), timeout=30)
            except AdkMemoryError:
                pass  # a typed error is fine; an untyped one or a hang fails the test
            finally:
                store.fail_at = None
            state = await snapshot(client, bank, names)
            assert state in (before, after), f"{operation}: failure at store call {k} of {calls}"


async def test_an_unreachable_redis_is_a_prompt_store_unavailable() -> None:
    """No server on the port: a typed error within seconds, not a hang."""
    async with AsyncClient(
        "redis://127.0.0.1:1/0?socket_connect_timeout=1",
        embedding_model="hash-64",
        run_scheduler=False,
    ) as client:
        with pytest.raises(StoreUnavailable):
            await asyncio.wait_for(client.memory_banks.create(), timeout=20)


class HangingModel(BaseLlm):
    """A model that never answers."""

    model: str = "hanging-model"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):  # type: ignore[override]
        await asyncio.sleep(3600)
        yield LlmResponse()


class FailingModel(BaseLlm):
    """A model whose client raises, as a provider outage does."""

    model: str = "failing-model"

    async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False):  # type: ignore[override]
        raise ConnectionError("provider unreachable")
        yield LlmResponse()  # pragma: no cover


async def _generate_unchanged(
    model: BaseLlm, expected: type[Exception], timeout: float = 10
) -> None:
    """generate fails with `expected`, changes nothing, and releases the scope's lock."""
    async with AsyncClient(
        "memory://", embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as client:
        bank = (await client.memory_banks.create()).name
        made = await client.memory_banks.memories.create(name=bank, fact="a", scope=SCOPE)
        before = await snapshot(client, bank, {made.response.name})
        for _ in range(2):  # the second call would time out on the lock if it were kept
            with pytest.raises(expected):
                await asyncio.wait_for(
                    client.memory_banks.memories.generate(
                        name=bank,
                        scope=SCOPE,
                        direct_memories_source={"direct_memories": [{"fact": "b"}]},
                    ),
                    timeout=timeout,
                )
        assert await snapshot(client, bank, {made.response.name}) == before


async def test_a_failing_model_is_model_unavailable_and_changes_nothing() -> None:
    await _generate_unchanged(FailingModel(), ModelUnavailable)


async def test_a_hanging_model_times_out_and_changes_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        generate_module, "call_structured", functools.partial(call_structured, timeout_seconds=0.3)
    )
    await _generate_unchanged(HangingModel(), ModelUnavailable)


async def test_the_model_timeout_follows_default_timeout_seconds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(model_module, "DEFAULT_TIMEOUT_SECONDS", 0.3)
    await _generate_unchanged(HangingModel(), ModelUnavailable, timeout=3)


async def test_buffered_ingest_events_survive_a_restart_and_a_failed_flush(
    shared_uri: str,
) -> None:
    """Events buffered by one client, a flush that fails in another, then a third flushes all."""
    events = [
        {"content": {"role": "user", "parts": [{"text": f"event number {i}"}]}} for i in range(3)
    ]
    trigger = {"generation_rule": {"event_count": 10}}
    async with AsyncClient(shared_uri, embedding_model="hash-64", run_scheduler=False) as first:
        bank = (await first.memory_banks.create()).name
        await first.memory_banks.ingest_events(
            name=bank,
            scope=SCOPE,
            stream_id="s",
            generation_trigger_config=trigger,
            direct_contents_source={"events": events[:2]},
        )
    async with AsyncClient(
        shared_uri, embedding_model="hash-64", generation_model=FailingModel(), run_scheduler=False
    ) as second:
        # The flush fails inside (the engine logs it and keeps the events) or raises typed.
        with contextlib.suppress(AdkMemoryError):
            await second.memory_banks.ingest_events(
                name=bank,
                scope=SCOPE,
                stream_id="s",
                generation_trigger_config=trigger,
                direct_contents_source={"events": events[2:]},
                config={"force_flush": True, "wait_for_completion": True},
            )
    model = ScriptedMemoryModel(
        extractions=[
            {"memories": [{"fact": "I sent three events.", "topics": ["USER_PREFERENCES"]}]}
        ],
        consolidations=[
            {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I sent three events."}]}
        ],
    )
    async with AsyncClient(
        shared_uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as third:
        await third.memory_banks.ingest_events(
            name=bank,
            scope=SCOPE,
            stream_id="s",
            direct_contents_source={"events": []},
            config={"force_flush": True, "wait_for_completion": True},
        )
        prompt = model.prompt_text(model.requests[0])
        assert all(f"event number {i}" in prompt for i in range(3))
        facts = [
            h.memory.fact
            async for h in await third.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
        ]
        assert facts == ["I sent three events."]


async def test_force_flush_retries_at_once_after_a_failed_flush() -> None:
    event = {"content": {"role": "user", "parts": [{"text": "hello"}]}}
    model = ScriptedMemoryModel(extractions=[{"memories": []}])
    failing = FailingModel()
    real = ScriptedMemoryModel.generate_content_async
    state = {"fail": True}

    async def flaky(self: Any, request: LlmRequest, stream: bool = False) -> Any:
        source = failing if state["fail"] else self
        method = FailingModel.generate_content_async if state["fail"] else real
        async for response in method(source, request, stream):
            yield response

    async with AsyncClient(
        "memory://", embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as client:
        bank = (await client.memory_banks.create()).name
        flush = {"force_flush": True, "wait_for_completion": True}
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(ScriptedMemoryModel, "generate_content_async", flaky)
            with contextlib.suppress(AdkMemoryError):
                await client.memory_banks.ingest_events(
                    name=bank,
                    scope=SCOPE,
                    stream_id="s",
                    config=flush,
                    direct_contents_source={"events": [event]},
                )
            assert model.requests == []
            state["fail"] = False
            await client.memory_banks.ingest_events(
                name=bank,
                scope=SCOPE,
                stream_id="s",
                config=flush,
                direct_contents_source={"events": []},
            )
        assert len(model.requests) == 1
