"""The cost of one scheduler tick when nothing is due: BANKS banks x STREAMS idle streams.

    python -m benchmarks.tick [--banks 1000] [--streams 10] [--backends memory chroma]

An idle stream is one whose events were all flushed (nothing pending), the common state of a
deployment between conversations. A tick (`IngestScheduler.run_once`) is timed with the
expiry sweep (the first tick of a scheduler) and without it (every other tick within
`sweep_seconds`). Prints one line per backend; the figures go to NOTES.md by hand.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from datetime import UTC, datetime

from benchmarks._common import Timer


def _idle_stream(now: datetime) -> dict[str, object]:
    event = {"content": {"role": "user", "parts": [{"text": "hello"}]}}
    return {
        "pending": [],
        "processed": [event],
        "operations": [],
        "created_at": now.isoformat(),
        "last_flush_at": now.isoformat(),
        "failures": 0,
        "force": False,
    }


async def _tick(uri: str, banks: int, streams: int, ticks: int) -> str:
    from adk_memory import AsyncClient
    from adk_memory.engine.ingest import STREAM_KIND
    from adk_memory.store import BankRecord

    client = AsyncClient(uri, run_scheduler=False, embedding_model="hash-64")
    store = client.engine.store
    now = datetime.now(UTC)
    started = time.perf_counter()
    for index in range(banks):
        bank_id = str(1000 + index)
        await store.create_bank(BankRecord(bank_id, {}, "hash-64", 64, now, now))
        for stream in range(streams):
            await store.put_document(bank_id, STREAM_KIND, f"s{stream}", _idle_stream(now))
    load_s = time.perf_counter() - started
    scheduler = client.ingest_scheduler
    with Timer() as first:  # sweeps expired memories of every bank too
        await scheduler.run_once()
    plain = []
    for _ in range(ticks):
        with Timer() as t:
            await scheduler.run_once()
        plain.append(t.ms)
    await client.aclose()
    return (
        f"{uri.split(':')[0]}: {banks} banks x {streams} idle streams (loaded in {load_s:.0f} s): "
        f"tick with sweep {first.ms:.0f} ms, tick p50 {statistics.median(plain):.0f} ms "
        f"(n={ticks}), load average {os.getloadavg()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tick")
    parser.add_argument("--banks", type=int, default=1000)
    parser.add_argument("--streams", type=int, default=10)
    parser.add_argument("--ticks", type=int, default=5)
    parser.add_argument("--backends", nargs="+", default=["memory", "chroma"])
    args = parser.parse_args()
    for backend in args.backends:
        uri = "memory://" if backend == "memory" else f"chroma://{tempfile.mkdtemp()}"
        print(asyncio.run(_tick(uri, args.banks, args.streams, args.ticks)), flush=True)


if __name__ == "__main__":
    main()
