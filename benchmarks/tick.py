"""The cost of one scheduler tick: BANKS banks x STREAMS idle streams, before and after the index.

    python -m benchmarks.tick [--banks 1000] [--streams 10] [--expiring 10]
        [--backends memory chroma redis] [--parts streams expiry flushes]
        [--sessions 20] [--model-ms 200]

An idle stream is one whose events were all flushed (nothing pending), the common state of a
deployment between conversations. Per backend, in one run and alternating:

`streams` part:
* `scan`: what a tick did before the due index (every bank read, every stream read and checked),
  discovery only;
* `tick`: `IngestScheduler.run_once` now, between maintenance cycles: two due-index queries
  (streams, expiry); its first tick, which maintains (sweeps, re-indexes) every bank, is timed
  apart;
* `tick+share`: a tick that also maintains its share of the banks, banks x poll_seconds /
  sweep_seconds of them (4 of 1,000 with the defaults, 1 s and 300 s);
* `tick+1`: the same with one stream due among them (one event ingested before each tick, and
  flushed by it with a scripted model), against `scan+1`, the old discovery of that stream.

`expiry` part (EXPIRING of the banks hold memories with a TTL, the others none):
* `old share`: a tick's maintenance before expiry was indexed: its share of the banks each
  swept and re-indexed, whether or not anything of them can expire (with the due-streams query);
* `new share`: `run_once` of a scheduler in the same cycle now: its share only re-indexed, then
  the expiry entries that are due (none);
* `new 10 due`: `run_once` between cycles just after one memory of each expiring bank expired
  (written untimed before each tick): it sweeps exactly those banks.

`flushes` part (not by default): SESSIONS sessions' streams due at once, flushed by one tick
with a scripted model that answers each call MODEL_MS late, as a real one takes its time:
`one after the other` (the tick before flushes ran at once) against `_FLUSHES_AT_ONCE` at a
time, ticks alternating; a tick's time is when the last session's memories exist.

Prints one line per backend and part; the figures go to NOTES.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import math
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

from benchmarks._common import Timer, backends

_SCOPE = {"user_id": "bench"}


def _idle_stream(now: datetime, user: str) -> dict[str, object]:
    event = {"content": {"role": "user", "parts": [{"text": "hello"}]}}
    return {
        "scope": {"user_id": user},
        "stream_id": "s",
        "pending": [],
        "processed": [event],
        "seen_ids": [],
        "operations": [],
        "created_at": now.isoformat(),
        "last_flush_at": now.isoformat(),
        "failures": 0,
        "force": False,
    }


async def _old_scan(client: object) -> int:
    """Discovery as a tick did it before the due index: every bank, every stream document."""
    from adk_memory.engine.ingest import STREAM_KIND

    engine = client.engine  # type: ignore[attr-defined]
    now = engine.context.clock()
    due = 0
    for bank in await engine.store.list_banks():
        loaded = await engine.context.load_bank(bank.bank_id)
        documents = await engine.store.list_documents(bank.bank_id, STREAM_KIND)
        due += sum(engine.ingest.is_due(dict(body), loaded.config, now) for _, body in documents)
    return due


async def _timed(call: Callable[[], Awaitable[object]]) -> float:
    with Timer() as timer:
        await call()
    return timer.ms


async def _tick(uri: str, options: dict[str, Any], args: argparse.Namespace) -> list[str]:
    from adk_memory import AsyncClient

    client = AsyncClient(
        uri,
        run_scheduler=False,
        embedding_model="hash-64",
        generation_model=_one_fact_model(),
        **options,
    )
    started = time.perf_counter()
    banks = await _load(client, args.banks, args.streams)
    expiring = banks[:: max(1, len(banks) // args.expiring)][: args.expiring]
    for bank_id in expiring:
        await _expire_soon(client, bank_id, ttl="3600s")  # TTL'd rows, none due yet
    load_s = time.perf_counter() - started
    first = await _timed(client.ingest_scheduler.run_once)  # maintains every bank
    head = f"{uri.split(':')[0]}: {args.banks} banks x {args.streams} idle streams"
    lines = []
    if "streams" in args.parts:
        lines.append(f"{head} [streams] " + await _streams_part(client, args.ticks))
    if "expiry" in args.parts:
        lines.append(f"{head} [expiry] " + await _expiry_part(client, banks, expiring, args.ticks))
    await client.aclose()
    return [
        f"{line}; loaded in {load_s:.0f} s, first tick {first:.0f} ms; "
        f"load average {os.getloadavg()}"
        for line in lines
    ]


_HELLO = {"content": {"role": "user", "parts": [{"text": "hi"}]}}


def _one_fact_model(*, latency: float = 0.0) -> Any:
    """A scripted memory model: one fact a conversation, created; each call `latency` s late."""
    from adk_memory.testing.models import ScriptedMemoryModel

    async def late(kind: str) -> None:
        await asyncio.sleep(latency)

    return ScriptedMemoryModel.one_fact(on_call=late if latency else None)


async def _flushes(uri: str, options: dict[str, Any], args: argparse.Namespace) -> str:
    """`flushes` part: SESSIONS streams due at once, a model answering each call MODEL_MS late.

    One tick flushes them all; before, one after the other (`_FLUSHES_AT_ONCE` = 1), now
    `_FLUSHES_AT_ONCE` at a time, alternating tick by tick. The tick's time is when the last
    session's memories exist.
    """
    from adk_memory import AsyncClient, types
    from adk_memory import scheduler as scheduling

    model = _one_fact_model(latency=args.model_ms / 1000)
    client = AsyncClient(
        uri, run_scheduler=False, embedding_model="hash-64", generation_model=model, **options
    )
    bank_id = str((await client.memory_banks.create()).name).rsplit("/", 1)[-1]
    await client.ingest_scheduler.run_once()  # the first tick's maintenance, untimed
    now = scheduling._FLUSHES_AT_ONCE
    times: dict[int, list[float]] = {1: [], now: []}
    made: dict[int, list[int]] = {1: [], now: []}
    try:
        for _ in range(args.ticks):
            for at_once in times:
                for user in range(args.sessions):
                    await client.engine.ingest.ingest(
                        bank_id,
                        scope={"user_id": f"u{user}"},
                        stream_id="s",
                        source={"events": [_HELLO]},
                        trigger_config=None,
                        config=types.IngestEventsConfig(),
                    )
                scheduling._FLUSHES_AT_ONCE = at_once
                with Timer() as timer:
                    made[at_once].append(await client.ingest_scheduler.run_once())
                times[at_once].append(timer.ms)
    finally:
        scheduling._FLUSHES_AT_ONCE = now
        await client.aclose()
    return (
        f"{uri.split(':')[0]} [flushes] {args.sessions} sessions due, model {args.model_ms} ms "
        f"a call, p50 of {args.ticks} ticks: one after the other {statistics.median(times[1]):.0f}"
        f" ms, {now} at once {statistics.median(times[now]):.0f} ms (memories changed a tick: "
        f"{sorted(set(made[1]))} / {sorted(set(made[now]))}); load average {os.getloadavg()}"
    )


async def _load(client: Any, banks: int, streams: int) -> list[str]:
    """Creates the banks and their idle streams straight in the store; returns the bank ids."""
    from adk_memory.engine.ingest import stream_document
    from adk_memory.store import BankRecord

    store = client.engine.store
    now = datetime.now(UTC)
    bank_ids = [str(1000 + index) for index in range(banks)]
    for bank_id in bank_ids:
        await store.create_bank(BankRecord(bank_id, {}, "hash-64", 64, now, now))
        config = (await client.engine.context.load_bank(bank_id)).config
        for stream in range(streams):
            document = stream_document(f"s{stream}", _idle_stream(now, f"u{stream}"), config)
            await store.put_document(
                bank_id,
                document.kind,
                document.key,
                document.body,
                scope_key=document.scope_key,
                due=document.due,
            )
    return bank_ids


async def _expire_soon(client: Any, bank_id: str, *, ttl: str) -> None:
    await client.memory_banks.memories.create(
        name=client.engine.names.bank(bank_id), fact="brief", scope=_SCOPE, config={"ttl": ttl}
    )


def _sharing(client: Any) -> Any:
    """A scheduler whose cycle restarts within the run with the default share (1 s / 300 s)."""
    from adk_memory.scheduler import IngestScheduler

    return IngestScheduler(client.engine, poll_seconds=0.004, sweep_seconds=1.2)


async def _streams_part(client: Any, ticks: int) -> str:
    from adk_memory import types

    scheduler = client.ingest_scheduler

    async def one_due() -> None:
        await client.engine.ingest.ingest(
            "1000",
            scope=_SCOPE,
            stream_id="busy",
            source={"events": [_HELLO]},
            trigger_config=None,
            config=types.IngestEventsConfig(),
        )

    sharing = _sharing(client)
    await sharing.run_once()
    await asyncio.sleep(1.3)
    times: dict[str, list[float]] = {
        "scan": [],
        "tick": [],
        "tick+share": [],
        "scan+1": [],
        "tick+1": [],
    }
    for _ in range(ticks):
        times["scan"].append(await _timed(lambda: _old_scan(client)))
        times["tick"].append(await _timed(scheduler.run_once))
        times["tick+share"].append(await _timed(sharing.run_once))
    for _ in range(ticks):
        await one_due()
        times["scan+1"].append(await _timed(lambda: _old_scan(client)))
        times["tick+1"].append(await _timed(scheduler.run_once))
    p50 = {name: statistics.median(values) for name, values in times.items()}
    return (
        f"p50 of n={ticks}: scan {p50['scan']:.1f} ms, tick {p50['tick']:.1f} ms, "
        f"tick+share {p50['tick+share']:.1f} ms; "
        f"one due: scan {p50['scan+1']:.1f} ms, tick (with its flush) {p50['tick+1']:.1f} ms"
    )


async def _old_share(client: Any, share: list[str]) -> None:
    """One tick's maintenance before expiry was indexed: each bank of its share swept and its
    streams re-indexed, then the due streams listed."""
    from adk_memory.engine.ingest import reindex_streams

    engine = client.engine
    for bank_id in share:
        await engine.store.sweep_expired(bank_id, engine.context.clock())
        await reindex_streams(engine.context, bank_id)
    await engine.ingest.due_streams()


async def _expiry_part(client: Any, banks: list[str], expiring: list[str], ticks: int) -> str:
    scheduler = client.ingest_scheduler
    sharing = _sharing(client)
    await sharing.run_once()
    await asyncio.sleep(1.3)
    per_tick = math.ceil(len(banks) / 300)  # banks x 1 s / 300 s
    rotation = itertools.cycle(range(0, len(banks), per_tick))
    times: dict[str, list[float]] = {"old share": [], "new share": [], "new due": []}
    for _ in range(ticks):
        start = next(rotation)
        share = banks[start : start + per_tick]
        times["old share"].append(await _timed(functools.partial(_old_share, client, share)))
        times["new share"].append(await _timed(sharing.run_once))
        for bank_id in expiring:
            await _expire_soon(client, bank_id, ttl="0.2s")
        await asyncio.sleep(0.25)
        times["new due"].append(await _timed(scheduler.run_once))
    p50 = {name: statistics.median(values) for name, values in times.items()}
    return (
        f"{len(expiring)} banks with TTL'd rows, p50 of n={ticks}: "
        f"old share ({per_tick} banks swept + re-indexed) {p50['old share']:.1f} ms, "
        f"new share ({per_tick} re-indexed + expiry query) {p50['new share']:.1f} ms, "
        f"new tick with {len(expiring)} banks due (swept) {p50['new due']:.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tick")
    parser.add_argument("--banks", type=int, default=1000)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--expiring", type=int, default=10)
    parser.add_argument("--parts", nargs="+", default=["streams", "expiry"])
    parser.add_argument("--sessions", type=int, default=20, help="flushes part")
    parser.add_argument("--model-ms", type=int, default=200, help="flushes part")
    parser.add_argument("--backends", nargs="+", default=["memory", "chroma", "redis"])
    args = parser.parse_args()
    with backends("redis" in args.backends) as found:
        for backend in args.backends:
            if backend == "redis" and not found.redis_url:
                continue
            uri, options = {
                "memory": ("memory://", {}),
                "chroma": (f"chroma://{found.tmp}/chroma", {}),
                "redis": (found.redis_url or "", {"key_prefix": "tick"}),
            }[backend]
            if {"streams", "expiry"} & set(args.parts):
                for line in asyncio.run(_tick(uri, options, args)):
                    print(line, flush=True)
            if "flushes" in args.parts:
                print(asyncio.run(_flushes(uri, options, args)), flush=True)


if __name__ == "__main__":
    main()
