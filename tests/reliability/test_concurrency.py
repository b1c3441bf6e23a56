"""Several processes on one shared store: no lost update, no duplicate, no deadlock (Issue 8.1).

Each worker is a separate Python process (`_worker.py`) with its own client, all against one
Redis or one Chroma server whose scope lock is in Redis (`lock_url=`). The numbers these tests
print (`-s`) are the ones quoted in RELIABILITY.md.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import subprocess
import sys
import time

import pytest
from reliability_support import WORKER, run_workers

from adk_memory import AsyncClient, ResourceExhausted

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
    holder = subprocess.Popen(
        [
            sys.executable,
            str(WORKER),
            json.dumps({"mode": "hold_lock", "redis_url": redis_url, "name": name, "lease": 2.0}),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert json.loads(holder.stdout.readline())["held"]

        async def attempt(wait: float) -> float:
            provider = RedisLockProvider.from_uri(redis_url)
            began = time.monotonic()
            try:
                async with provider.lock(name, wait_seconds=wait):
                    return time.monotonic() - began
            finally:
                await provider.aclose()

        with pytest.raises(ResourceExhausted):
            asyncio.run(attempt(0.5))
    finally:
        holder.kill()
        holder.wait()
    waited = asyncio.run(attempt(10.0))
    print(f"\n[lease] acquired {waited:.2f} s after the holder was killed")  # noqa: T201
    assert waited < 3.0
