"""Resident memory of one process searching an embedded Chroma bank spread over many scopes.

Loads N memories (random unit 384-d vectors) over S scopes through `store.apply`, then searches
every scope once, so the per-store vector cache (`vector_cache_mb`) fills up to its budget, and
prints the process's RSS after the load and after the searches, the cache's size and the p50 of
those first (uncached) searches. Figures: `NOTES.md`, "Chroma's scope index (issue 18)".

    python -m benchmarks.chroma_rss --memories 20000 --scopes 1000 10000 --cache-mb 256 4
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def measure(memories: int, scopes: int, cache_mb: float, folder: str) -> str:
    from adk_memory_chroma import ChromaMemoryStore

    from adk_memory.scope import scope_key
    from adk_memory.store import BankRecord, MemoryRecord, NearestQuery, WriteBatch

    store = ChromaMemoryStore.from_uri(f"chroma://{folder}", vector_cache_mb=cache_mb)
    now = datetime.now(UTC)
    scope_maps = [{"user_id": f"u{i}"} for i in range(scopes)]
    keys = [scope_key(scope) for scope in scope_maps]
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(memories, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    try:
        await store.create_bank(BankRecord("rss", {}, "random", 384, now, now))
        started = time.perf_counter()
        for start in range(0, memories, 1000):
            records = tuple(
                MemoryRecord(
                    memory_id=f"m{i:07d}",
                    scope_key=keys[i % scopes],
                    scope=scope_maps[i % scopes],
                    fact=f"fact {i}",
                    embedding=tuple(vectors[i].tolist()),
                    create_time=now,
                    update_time=now,
                )
                for i in range(start, min(memories, start + 1000))
            )
            await store.apply("rss", WriteBatch(inserts=records))
        load_s = time.perf_counter() - started
        loaded = _rss_mb()
        probe = tuple(vectors[0].tolist())
        ms = []
        for key in keys:
            started = time.perf_counter()
            await store.nearest("rss", NearestQuery(key, probe, 10, now))
            ms.append((time.perf_counter() - started) * 1000)
        cache = store._vectors._bytes / 2**20
        return (
            f"{memories:,} memories, {scopes:,} scopes, vector_cache_mb={cache_mb:g}: load "
            f"{load_s:.0f} s, RSS {loaded:.0f} MB after it, {_rss_mb():.0f} MB after a search in "
            f"every scope (cache {cache:.1f} MB), first search p50 {np.median(ms):.1f} ms"
        )
    finally:
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--scopes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--cache-mb", type=float, nargs="+", default=[256.0])
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:  # one configuration in this process, so that its RSS is its own
        folder = tempfile.mkdtemp(prefix="chroma-rss-")
        try:
            print(asyncio.run(measure(args.memories, args.scopes[0], args.cache_mb[0], folder)))
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        return
    for scopes in args.scopes:
        for cache_mb in args.cache_mb:
            command = [sys.executable, "-m", "benchmarks.chroma_rss", "--one"]
            command += ["--memories", str(args.memories), "--scopes", str(scopes)]
            subprocess.run([*command, "--cache-mb", str(cache_mb)], check=True)


if __name__ == "__main__":
    main()
