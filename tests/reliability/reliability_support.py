"""Helpers of the reliability suite: worker processes, store snapshots, an echoing model."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterator
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any

import _worker
import pytest
from google.adk.models import LlmRequest, LlmResponse
from pydantic import Field

from adk_memory import AsyncClient, types
from adk_memory.names import Names
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.testing.processes import FORKS


def run_workers(jobs: list[dict[str, Any]], *, timeout: float = 90.0) -> list[dict[str, Any]]:
    """Starts one process per job, releases them together once all are ready; their results.

    A worker still running after `timeout` seconds is killed and fails the test (a deadlock).
    """
    deadline = time.monotonic() + timeout
    workers = _start(jobs)
    try:
        _release(workers, deadline)
        results = [_message(parent, deadline)["result"] for _, parent in workers]
        for proc, _ in workers:
            proc.join(timeout=max(1.0, deadline - time.monotonic()))
            assert proc.exitcode == 0, f"a worker exited with {proc.exitcode}"
        return results
    finally:
        _kill(workers)


@contextlib.contextmanager
def holding(job: dict[str, Any], *, timeout: float = 60.0) -> Iterator[BaseProcess]:
    """Runs a `hold_*` job in a process of its own; its process once it holds. The process is
    killed (no cleanup) when the block exits."""
    with talking(job, timeout=timeout) as (process, _):
        yield process


@contextlib.contextmanager
def talking(
    job: dict[str, Any], *, timeout: float = 60.0
) -> Iterator[tuple[BaseProcess, Connection]]:
    """`holding`, also yielding the connection on which the job tells what it does (`serve`)."""
    workers = _start([job])
    try:
        _release(workers, time.monotonic() + timeout)
        yield workers[0]
    finally:
        _kill(workers)


def _start(jobs: list[dict[str, Any]]) -> list[tuple[BaseProcess, Connection]]:
    workers = []
    for job in jobs:
        parent, child = FORKS.Pipe()
        proc = FORKS.Process(target=_worker.run_job, args=(job, child), daemon=True)
        proc.start()
        child.close()  # the worker holds the only other end: its death reads as end of file
        workers.append((proc, parent))
    return workers


def _release(workers: list[tuple[BaseProcess, Connection]], deadline: float) -> None:
    """Waits until every worker is ready, then signals them all."""
    for _, parent in workers:
        assert _message(parent, deadline) == {"ready": True}
    for _, parent in workers:
        parent.send("go")


def _kill(workers: list[tuple[BaseProcess, Connection]]) -> None:
    for proc, _ in workers:
        if proc.is_alive():
            proc.kill()
            proc.join()


def _message(parent: Connection, deadline: float) -> dict[str, Any]:
    """The worker's next message; fails the test on its traceback or when it is late."""
    if not parent.poll(max(0.0, deadline - time.monotonic())):
        pytest.fail("a worker did not answer in time (deadlock?)")
    try:
        message: dict[str, Any] = parent.recv()
    except EOFError:
        pytest.fail("a worker died without a word")
    assert "error" not in message, message["error"][-3000:]
    return message


async def snapshot(client: AsyncClient, bank: str, names: set[str]) -> list[tuple[Any, ...]]:
    """Memories and revisions, without ids or times: (fact, scope, revision facts) per memory.

    `names` are memory names to look up even when they are not live (deleted ones keep their
    revisions); the live ones found are added to it.
    """
    memories = client.memory_banks.memories
    live = {m.name: m async for m in await memories.list(name=bank)}
    names.update(live)
    rows = []
    for name in sorted(names):
        revisions = [r.fact async for r in await memories.revisions.list(name=name)]
        memory = live.get(name)
        if memory is None and not revisions:
            continue  # a name that never existed in this state
        rows.append(
            (
                memory.fact if memory else None,
                tuple(sorted((memory.scope or {}).items())) if memory else None,
                tuple(sorted(revisions)),
            )
        )
    return sorted(rows, key=repr)


EVENT_TOKEN = re.compile(r"evt-[A-Za-z0-9_.-]+")
_NEW_FACT = re.compile(r"^\[(\d+)\] (\{.*\})$", re.MULTILINE)


Op = Callable[[AsyncClient, str, str], Awaitable[Any]]
"""A write under test: (client, bank name, the name of memory `a`) → its awaitable."""

SCOPE = {"user_id": "u1"}
"""The scope the fault and restart tests write in."""

WRITE_OPERATIONS: dict[str, Op] = {
    "create": lambda c, bank, a: c.memory_banks.memories.create(
        name=bank, fact="b", scope=SCOPE, config={"memory_id": "b"}
    ),
    "update": lambda c, bank, a: c.memory_banks.memories.update(name=a, fact="a2"),
    "create_many": lambda c, bank, a: c.engine.memories.create_many(
        Names.parse_bank(bank),
        scope=SCOPE,
        memories=[("b", types.MemoryConfig()), ("c", types.MemoryConfig(ttl="60s"))],
    ),
    "delete": lambda c, bank, a: c.memory_banks.memories.delete(name=a),
    "generate": lambda c, bank, a: c.memory_banks.memories.generate(
        name=bank,
        scope=SCOPE,
        direct_memories_source={"direct_memories": [{"fact": "a again"}, {"fact": "b"}]},
    ),
    "purge": lambda c, bank, a: c.memory_banks.memories.purge(
        name=bank, filter='fact="a"', force=True
    ),
}
"""The writes every fault test interrupts, on a bank made by `bank_with_memory_a`."""


async def bank_with_memory_a(client: AsyncClient, scope: dict[str, str]) -> tuple[str, str]:
    """A new bank holding one memory `a` in `scope`: the bank's name and the memory's name."""
    bank = (await client.memory_banks.create()).name
    made = await client.memory_banks.memories.create(
        name=bank, fact="a", scope=scope, config={"memory_id": "a"}
    )
    return bank, made.response.name


def consolidate_update_and_create(request: LlmRequest) -> dict[str, Any]:
    """UPDATE the first candidate and CREATE a second memory: two actions, one batch."""
    text = ScriptedMemoryModel().prompt_text(request)
    memory_id = text.split("id=")[1].split(":")[0]
    return {
        "actions": [
            {"fact_index": 0, "action": "UPDATE", "memory_id": memory_id, "fact": "a, updated"},
            {"fact_index": 1, "action": "CREATE", "fact": "generated b"},
        ]
    }


def event(token: str) -> dict[str, Any]:
    """An ingest event whose text is `token` (an `evt-…` word the EchoModel extracts)."""
    return {"content": {"role": "user", "parts": [{"text": f"note {token}"}]}}


class EchoModel(ScriptedMemoryModel):
    """Extracts one fact per `evt-…` token of the conversation and CREATEs every fact.

    It never merges, so events generated twice show up as two memories with the same fact, and
    `seen` lists every token of every extraction call, in order.
    """

    seen: list[str] = Field(default_factory=list)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        text = self.prompt_text(llm_request)
        if self.kind_of(llm_request) == "extraction":
            tokens = EVENT_TOKEN.findall(text.rsplit("<conversation>", 1)[-1])
            self.seen.extend(tokens)
            self.extractions.append(
                {"memories": [{"fact": t, "topics": ["USER_PREFERENCES"]} for t in tokens]}
            )
        else:
            facts = text.split("NEW FACTS:", 1)[-1].split("EXISTING MEMORIES:", 1)[0]
            self.consolidations.append(
                {
                    "actions": [
                        {
                            "fact_index": int(index),
                            "action": "CREATE",
                            "fact": json.loads(body)["fact"],
                        }
                        for index, body in _NEW_FACT.findall(facts)
                    ]
                }
            )
        async for response in super().generate_content_async(llm_request, stream):
            yield response


TRIGGERS: list[dict[str, Any]] = [{"event_count": 2}, {"idle_duration": "0.05s"}]


async def produce_events(
    client: AsyncClient,
    bank: str,
    streams: list[tuple[dict[str, str], str]],
    per_stream: int,
    seed: int,
) -> list[str]:
    """Ingests `per_stream` events `evt-<stream>-<n>` into each (scope, stream id), in batches
    of 1 to 3 in a seeded random order; returns the tokens.

    Streams of even index have the trigger `event_count: 2`: a batch that makes one due is
    flushed by this client at once (as `ingest_events` does), racing the schedulers. Streams of
    odd index have `idle_duration: 0.05s`: they become due between batches, so only schedulers
    flush them, while this client keeps appending. The client's scheduler is drained at the end.
    """
    rng = random.Random(seed)
    sent: list[str] = []
    counters = [0] * len(streams)
    while any(n < per_stream for n in counters):
        index = rng.choice([i for i, n in enumerate(counters) if n < per_stream])
        size = min(rng.randint(1, 3), per_stream - counters[index])
        tokens = [f"evt-{index}-{counters[index] + i}" for i in range(size)]
        counters[index] += size
        scope, stream_id = streams[index]
        await client.memory_banks.ingest_events(
            name=bank,
            scope=scope,
            stream_id=stream_id,
            direct_contents_source={"events": [event(token) for token in tokens]},
            generation_trigger_config={"generation_rule": TRIGGERS[index % 2]},
        )
        sent.extend(tokens)
        await asyncio.sleep(0.01)
    await client.ingest_scheduler.drain()
    return sent


async def schedule_for(client: AsyncClient, seconds: float) -> int:
    """Runs the client's ingest scheduler pass after pass for `seconds`; returns the passes."""
    deadline = time.monotonic() + seconds
    passes = 0
    while time.monotonic() < deadline:
        await client.ingest_scheduler.run_once()
        passes += 1
        await asyncio.sleep(0.01)
    return passes
