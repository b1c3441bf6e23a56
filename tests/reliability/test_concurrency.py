"""Several processes on one shared store: no lost update, no duplicate, no deadlock (Issue 8.1).

Each worker is a separate Python process (`_worker.py`, forked from a server process that has
imported the package once) with its own client, all against one Redis or one Chroma server whose
scope lock is in Redis (`lock_url=`); several ingest schedulers on the same streams; several
processes on one embedded Chroma directory, which admits one process at a time. The numbers
these tests print (`-s`) are the ones quoted in RELIABILITY.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
import uuid
from pathlib import Path

import pytest
from reliability_support import EchoModel, holding, produce_events, run_workers, schedule_for

from adk_memory import AsyncClient, FailedPrecondition, ResourceExhausted

PROCESSES = 4
PER_PROCESS = 5


async def _facts(uri: str, bank: str, scope: dict[str, str]) -> list[str]:
    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
        pager = await client.memory_banks.memories.retrieve(name=bank, scope=scope)
        return [hit.memory.fact async for hit in pager]


async def _new_bank(uri: str) -> str:
    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
        return (await client.memory_banks.create()).name


def _tokens(fact: str) -> list[str]:
    return sorted(fact.split(" +")[1:])


def test_processes_racing_on_shared_and_own_scopes(shared_uri: str) -> None:
    """PROCESSES workers, released together, each: one create of the id `same-id`, then
    PER_PROCESS rounds of a generate on the shared scope and one on its own scope.

    Every generate updates its scope's single memory by appending a token (or creates it when the
    scope is empty). Without the scope lock two processes would both see an empty scope and both
    CREATE (a duplicate), or read the same fact and overwrite each other (a lost update).
    """
    bank = asyncio.run(_new_bank(shared_uri))
    jobs = [
        {
            "mode": "mixed",
            "uri": shared_uri,
            "bank": bank,
            "tag": f"p{p}",
            "own_scope": {"user_id": f"own{p}"},
            "count": PER_PROCESS,
        }
        for p in range(PROCESSES)
    ]
    results = run_workers(jobs)

    kinds = {
        kind: sorted(x for r in results for x in r["latencies"][kind]) for kind in ("shared", "own")
    }
    wall = max(r["seconds"] for r in results)
    print(  # noqa: T201
        f"\n[{shared_uri.split(':')[0]}] {PROCESSES} processes x {PER_PROCESS} rounds in "
        f"{wall:.1f} s; generate on the shared scope p50 {statistics.median(kinds['shared']):.3f}"
        f" s max {kinds['shared'][-1]:.3f} s; on own scopes p50 "
        f"{statistics.median(kinds['own']):.3f} s max {kinds['own'][-1]:.3f} s"
    )

    assert [e for r in results for e in r["errors"]["shared"] + r["errors"]["own"]] == []
    create_errors = [e for r in results for e in r["errors"]["create"]]
    assert create_errors == ["AlreadyExists"] * (PROCESSES - 1), results
    assert len(asyncio.run(_facts(shared_uri, bank, {"user_id": "dup"}))) == 1

    [shared] = asyncio.run(_facts(shared_uri, bank, {"user_id": "shared"}))
    assert _tokens(shared) == sorted(
        f"p{p}i{i}" for p in range(PROCESSES) for i in range(PER_PROCESS)
    )
    for p in range(PROCESSES):
        [own] = asyncio.run(_facts(shared_uri, bank, {"user_id": f"own{p}"}))
        assert _tokens(own) == [f"p{p}i{i}" for i in range(PER_PROCESS)]


def test_lock_lease_expires_when_its_holder_dies(redis_url: str) -> None:
    """A process takes a scope lock with a 2 s lease and is killed: the lock frees itself.

    While the holder lives (and renews) a waiter times out with ResourceExhausted; after the kill
    the next acquire succeeds within about one lease.
    """
    from adk_memory_redis import RedisLockProvider

    name = f"generate:bank:{time.time_ns()}"

    async def attempt(wait: float) -> float:
        provider = RedisLockProvider.from_uri(redis_url)
        began = time.monotonic()
        try:
            async with provider.lock(name, wait_seconds=wait):
                return time.monotonic() - began
        finally:
            await provider.aclose()

    with holding({"mode": "hold_lock", "redis_url": redis_url, "name": name, "lease": 2.0}):
        with pytest.raises(ResourceExhausted):
            asyncio.run(attempt(0.5))
    waited = asyncio.run(attempt(10.0))
    print(f"\n[lease] acquired {waited:.2f} s after the holder was killed")  # noqa: T201
    assert waited < 3.0


STREAMS = [
    ({"user_id": "s0"}, "a"),
    ({"user_id": "s0"}, "b"),
    ({"user_id": "s1"}, "a"),
    ({"user_id": "s2"}, ""),
]
PER_STREAM = 10
SCHEDULERS = 3
"""Schedulers in one process; across processes, two (each process costs seconds of CPU)."""


async def _flush_leftovers(uri: str, bank: str) -> list[str]:
    """Force-flushes every stream (events left below their trigger); the tokens it generated."""
    model = EchoModel()
    async with AsyncClient(
        uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as client:
        for scope, stream_id in STREAMS:
            await client.memory_banks.ingest_events(
                name=bank,
                scope=scope,
                stream_id=stream_id,
                direct_contents_source={"events": []},
                config={"force_flush": True, "wait_for_completion": True},
            )
    return model.seen


async def _bank_facts(uri: str, bank: str) -> list[str]:
    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
        return sorted([m.fact async for m in await client.memory_banks.memories.list(name=bank)])


def test_schedulers_in_several_processes_generate_from_each_event_once(redis_url: str) -> None:
    """Two processes run ingest schedulers over the same Redis while one of them also ingests 40
    events into 4 streams; its client also flushes at once the streams its batches make due,
    racing both schedulers, and the streams that become due while idle are taken by whichever
    scheduler gets there first (`produce_events`).

    Every event reaches exactly one extraction call across all processes (the EchoModel turns
    each into one memory and never merges), so a flush that ran twice on the same events shows up
    as a duplicate memory and a lost event as a missing one.
    """
    uri = f"{redis_url}?key_prefix=s{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"
    bank = asyncio.run(_new_bank(uri))
    producer = {
        "mode": "produce",
        "uri": uri,
        "bank": bank,
        "streams": STREAMS,
        "per_stream": PER_STREAM,
        "seed": 8,
        "seconds": 2.5,
    }
    scheduler = {"mode": "schedule", "uri": uri, "bank": bank, "seconds": 2.5}
    results = run_workers([producer, scheduler])
    sent = results[0]["sent"]
    leftover = asyncio.run(_flush_leftovers(uri, bank))
    seen = [token for result in results for token in result["seen"]] + leftover
    print(  # noqa: T201
        f"\n[schedulers] {len(sent)} events; flushes with events in the producing process and "
        f"in the other: {[r['flushes'] for r in results]}; left for a final flush: "
        f"{len(leftover)} events"
    )
    assert len(sent) == len(STREAMS) * PER_STREAM
    assert sorted(seen) == sorted(sent)
    assert asyncio.run(_bank_facts(uri, bank)) == sorted(sent)


async def test_schedulers_sharing_a_store_in_one_process_generate_from_each_event_once() -> None:
    """The same on `memory://NAME`: four clients of one named store in one event loop."""
    uri = f"memory://schedulers-{uuid.uuid4().hex[:8]}"
    models = [EchoModel() for _ in range(SCHEDULERS + 1)]
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(
                AsyncClient(uri, embedding_model="hash-64", generation_model=m, run_scheduler=False)
            )
            for m in models
        ]
        bank = (await clients[0].memory_banks.create()).name
        sent, *_ = await asyncio.gather(
            produce_events(clients[0], bank, STREAMS, PER_STREAM, 8),
            *(schedule_for(client, 1.0) for client in clients[1:]),
        )
        leftover = await _flush_leftovers(uri, bank)
        seen = [token for model in models for token in model.seen] + leftover
        assert sorted(seen) == sorted(sent)
        assert await _bank_facts(uri, bank) == sorted(sent)


def test_a_second_process_is_refused_an_embedded_chroma_folder_until_the_holder_dies(
    tmp_path: Path,
) -> None:
    """Embedded Chroma is single-process: while a process has `chroma:///DIR` open, another
    process's first call raises FailedPrecondition naming the holder; once the holder is killed
    (no cleanup), the directory opens and holds what the holder wrote."""
    uri = f"chroma://{tmp_path / 'db'}"
    bank = asyncio.run(_new_bank(uri))
    with holding({"mode": "hold_folder", "uri": uri, "bank": bank}) as holder:
        with pytest.raises(
            FailedPrecondition, match=f"in use by another process \\(pid {holder.pid}\\)"
        ):
            asyncio.run(_facts(uri, bank, {"user_id": "holder"}))
    assert asyncio.run(_facts(uri, bank, {"user_id": "holder"})) == ["held"]


def test_processes_racing_for_one_embedded_chroma_folder_take_turns_and_lose_nothing(
    tmp_path: Path,
) -> None:
    """Two processes released together each write 5 memories into one embedded directory; the
    one refused waits and retries. Every write is there afterwards."""
    uri = f"chroma://{tmp_path / 'db'}"
    bank = asyncio.run(_new_bank(uri))
    jobs = [
        {"mode": "embedded", "uri": uri, "bank": bank, "tag": f"p{p}", "count": 5, "seconds": 60}
        for p in range(2)
    ]
    results = run_workers(jobs)
    print(  # noqa: T201
        f"\n[embedded chroma] refusals per process while another held the directory: "
        f"{[r['refusals'] for r in results]}"
    )
    assert not any(r.get("gave_up") for r in results)
    assert asyncio.run(_bank_facts(uri, bank)) == sorted(
        f"p{p} fact {i}" for p in range(2) for i in range(5)
    )
