"""The cost of one scheduler tick: BANKS banks x STREAMS idle streams, before and after the index.

    python -m benchmarks.tick [--banks 1000] [--streams 10] [--backends memory chroma redis]

An idle stream is one whose events were all flushed (nothing pending), the common state of a
deployment between conversations. Per backend, in one run and alternating:

* `scan`: what a tick did before the due index (every bank read, every stream read and checked),
  discovery only;
* `tick`: `IngestScheduler.run_once` now, between maintenance cycles: one due-index query; its
  first tick, which maintains (sweeps, re-indexes) every bank, is timed apart;
* `tick+share`: a tick that also maintains its share of the banks, banks x poll_seconds /
  sweep_seconds of them (4 of 1,000 with the defaults, 1 s and 300 s);
* `tick+1`: the same with one stream due among them (one event ingested before each tick, and
  flushed by it with a scripted model), against `scan+1`, the old discovery of that stream.

Prints one line per backend; the figures go to NOTES.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
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


async def _tick(uri: str, options: dict[str, Any], banks: int, streams: int, ticks: int) -> str:
    from adk_memory import AsyncClient, types
    from adk_memory.engine.ingest import stream_document
    from adk_memory.scheduler import IngestScheduler
    from adk_memory.store import BankRecord
    from adk_memory.testing.models import ScriptedMemoryModel

    model = ScriptedMemoryModel(
        extract=lambda request: {"memories": [{"fact": "A fact.", "topics": ["USER_PREFERENCES"]}]},
        consolidate=lambda request: {"actions": [{"fact_index": 0, "action": "CREATE"}]},
    )
    client = AsyncClient(
        uri, run_scheduler=False, embedding_model="hash-64", generation_model=model, **options
    )
    store = client.engine.store
    now = datetime.now(UTC)
    started = time.perf_counter()
    for index in range(banks):
        bank_id = str(1000 + index)
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
    load_s = time.perf_counter() - started
    scheduler = client.ingest_scheduler
    first = await _timed(scheduler.run_once)  # maintains (sweeps, re-indexes) every bank

    async def one_due() -> None:
        await client.engine.ingest.ingest(
            "1000",
            scope=_SCOPE,
            stream_id="busy",
            source={"events": [{"content": {"role": "user", "parts": [{"text": "hi"}]}}]},
            trigger_config=None,
            config=types.IngestEventsConfig(),
        )

    # The default share (1 s / 300 s) in a cycle that restarts within the run.
    sharing = IngestScheduler(client.engine, poll_seconds=0.004, sweep_seconds=1.2)
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
    await client.aclose()
    p50 = {name: statistics.median(values) for name, values in times.items()}
    return (
        f"{uri.split(':')[0]}: {banks} banks x {streams} idle streams (loaded in {load_s:.0f} s), "
        f"p50 of n={ticks}: scan {p50['scan']:.1f} ms, tick {p50['tick']:.1f} ms, "
        f"tick+share {p50['tick+share']:.1f} ms; "
        f"one due: scan {p50['scan+1']:.1f} ms, tick (with its flush) {p50['tick+1']:.1f} ms; "
        f"first tick {first:.0f} ms; load average {os.getloadavg()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tick")
    parser.add_argument("--banks", type=int, default=1000)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--ticks", type=int, default=5)
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
            print(
                asyncio.run(_tick(uri, options, args.banks, args.streams, args.ticks)), flush=True
            )


if __name__ == "__main__":
    main()
