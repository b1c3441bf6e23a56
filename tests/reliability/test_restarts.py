"""A real server crash and restart in the middle of a call: Redis and a Chroma server (Issue 8.2).

`RestartingStore` wraps a client's store. Its k-th awaited call SIGKILLs the server, runs
against the dead server, and starts the server again (same port, same data folder) as soon as
that call has returned or raised; the rest of the request meets the restarted server and its
stale connections. Each write operation is run once to count its store calls, then once per k:
it completes or raises a typed error (never a driver exception, never a hang), and what is
stored afterwards, memories and revisions together, is exactly the state before or the state
after the call. For ingest, the events a failed call had already buffered survive the restart:
a later flush generates from them exactly once.

The servers are this module's own (`restartable.py`): Valkey with `appendfsync always` and the
Chroma server on a persistent folder.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from reliability_support import (
    SCOPE,
    WRITE_OPERATIONS,
    EchoModel,
    Op,
    bank_with_memory_a,
    consolidate_update_and_create,
    event,
    snapshot,
)
from restartable import RestartableChroma, RestartableRedis

from adk_memory import AdkMemoryError, AsyncClient
from adk_memory._registry import store_from_uri
from adk_memory.testing.models import ScriptedMemoryModel

CHROMA_POINTS = 4
"""A Chroma server restart and a fresh bank cost about 0.5 s: its runs crash at most this many
evenly spread store calls of each operation (the first and the last among them). Redis restarts
in 0.06 s and is crashed at every call."""
CHROMA_OPERATIONS = ["create", "generate", "ingest", "purge", "update"]


class RestartingStore:
    """Forwards to `inner`; the `restart_at`-th awaited call (0-based) meets a killed server."""

    def __init__(self, inner: Any, server: RestartableRedis | RestartableChroma) -> None:
        self._inner = inner
        self._server = server
        self.capabilities = inner.capabilities
        self.calls: list[str] = []
        self.restart_at: int | None = None

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(target) or name == "aclose":
            return target

        @functools.wraps(target)
        async def call(*args: Any, **kwargs: Any) -> Any:
            index = len(self.calls)
            self.calls.append(name)
            if index != self.restart_at:
                return await target(*args, **kwargs)
            self._server.kill()
            try:
                return await target(*args, **kwargs)
            finally:
                self._server.start()

        return call


FLUSH = {"force_flush": True, "wait_for_completion": True}

OPERATIONS: dict[str, Op] = {
    **WRITE_OPERATIONS,
    "ingest": lambda c, bank, a: c.memory_banks.ingest_events(
        name=bank,
        scope=SCOPE,
        stream_id="s",
        direct_contents_source={"events": [event("evt-1"), event("evt-2")]},
        config=FLUSH,
    ),
}


async def _settled(read: Callable[[], Awaitable[Any]]) -> Any:
    """`read()` once the server is back: it must succeed at the first try.

    After a restart every connection left in the Redis client's pool is dead; the store's
    client sends the command again on a fresh connection (`connection_retries`), so no read
    fails because of them.
    """
    return await asyncio.wait_for(read(), timeout=60)


async def _flush_stream(client: AsyncClient, bank: str) -> None:
    """Flushes whatever the stream of the `ingest` operation still holds (as the scheduler
    would: again, until a flush has run)."""
    for _ in range(3):
        operation = await _settled(
            lambda: client.memory_banks.ingest_events(
                name=bank,
                scope=SCOPE,
                stream_id="s",
                direct_contents_source={"events": []},
                config=FLUSH,
            )
        )
        if operation.done:
            return


def _points(calls: int, limit: int | None) -> list[int]:
    if limit is None or calls <= limit:
        return list(range(calls))
    return sorted({round(i * (calls - 1) / (limit - 1)) for i in range(limit)})


async def _run_with_restarts(
    uri: str, server: RestartableRedis | RestartableChroma, operation: str, limit: int | None
) -> None:
    op = OPERATIONS[operation]
    store = RestartingStore(store_from_uri(uri), server)
    model = (
        EchoModel()
        if operation == "ingest"
        else ScriptedMemoryModel(consolidate=consolidate_update_and_create)
    )
    async with AsyncClient(
        store=store, embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as client:
        fresh_bank = functools.partial(bank_with_memory_a, client, SCOPE)
        bank, a = await fresh_bank()
        names = {a}
        before = await snapshot(client, bank, names)
        store.calls.clear()
        await op(client, bank, a)
        calls = list(store.calls)
        after = await snapshot(client, bank, names)
        assert after != before

        points = _points(len(calls), limit)
        began = time.perf_counter()
        outcomes = []
        for k in points:
            bank, a = await _settled(fresh_bank)
            names = {a, a.rsplit("/", 1)[0] + "/b"}
            store.calls.clear()
            store.restart_at = k
            try:
                await asyncio.wait_for(op(client, bank, a), timeout=60)
                failed = None
            except AdkMemoryError as exc:  # anything else (a driver error, a hang) fails here
                failed = type(exc).__name__
            finally:
                store.restart_at = None
            where = f"{operation}: server killed at store call {k} ({calls[k]}) of {len(calls)}"
            state = await _settled(functools.partial(snapshot, client, bank, names))
            assert state in (before, after), where
            if operation == "ingest":
                # Events buffered before the crash are still there: one more flush generates
                # them once. A call that returned had buffered them.
                await _flush_stream(client, bank)
                state = await _settled(functools.partial(snapshot, client, bank, names))
                assert state == after or (failed and state == before), where
            elif failed is None:
                assert state == after, where
            outcomes.append(failed or "ok")
        print(  # noqa: T201
            f"\n[{uri.split(':')[0]} {operation}] {len(calls)} store calls, killed at "
            f"{len(points)} of them in {time.perf_counter() - began:.1f} s: "
            f"{outcomes.count('ok')} completed, "
            f"{len(outcomes) - outcomes.count('ok')} typed errors ({sorted(set(outcomes))})"
        )


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
async def test_a_redis_restart_at_any_store_call_leaves_the_state_before_or_after(
    restartable_redis: RestartableRedis, operation: str
) -> None:
    uri = f"{restartable_redis.url}?key_prefix=k{uuid.uuid4().hex[:8]}&index_algorithm=FLAT"
    await _run_with_restarts(uri, restartable_redis, operation, None)


@pytest.mark.parametrize("operation", CHROMA_OPERATIONS)
async def test_a_chroma_server_restart_at_store_calls_leaves_the_state_before_or_after(
    restartable_chroma: RestartableChroma, operation: str
) -> None:
    uri = f"{restartable_chroma.url}?single_host=true&collection_prefix=k{uuid.uuid4().hex[:8]}"
    await _run_with_restarts(uri, restartable_chroma, operation, CHROMA_POINTS)
