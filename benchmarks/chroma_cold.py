"""What a first search of a Chroma scope costs, call by call, and the shapes that could replace it.

Builds an embedded Chroma bank of N memories (random unit 384-d vectors) over S scopes through
`store.apply`, or reuses the one `--folder` holds, then, scope after scope (one new scope per
round), times in one alternating run (the order of the shapes rotates every round):

* `nearest cold` / `nearest warm`: `store.nearest` (top 10) with the scope's cached vectors
  dropped first, and again with them cached;
* the Chroma calls of the cold path, made directly on the collections: the scope's index (its
  head, the bank's slot and 16 buckets), its vectors by id, the 10 winners' rows; the warm path
  reads the head and slot, then the winners;
* shapes that could replace them: the scope's rows with their records in the vectors read (no
  winners read), the winners without their vectors, the ids alone (Chroma's own lookup, no
  vectors to convert), the vectors by the scope's `where`, Chroma's HNSW `query` restricted to
  the scope's ids, and the vectors read in two halves by two threads.

Each round first reads the new scope's vectors once (`vectors by id, first touch`: SQLite pages
this process has not read yet), then the rest. Figures: `NOTES.md`, "A first visit of a Chroma
scope".

    python -m benchmarks.chroma_cold --memories 100000 --scopes 1000 --folder /tmp/cold-100k
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

K = 10
BANK = "cold"
ALL = ["embeddings", "metadatas", "documents"]


async def _load(store: Any, memories: int, scope_maps: list[dict[str, str]]) -> None:
    from adk_memory.scope import scope_key
    from adk_memory.store import BankRecord, MemoryRecord, WriteBatch

    now = datetime.now(UTC)
    keys = [scope_key(scope) for scope in scope_maps]
    vectors = np.random.default_rng(1).normal(size=(memories, 384)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    await store.create_bank(BankRecord(BANK, {}, "random", 384, now, now))
    for start in range(0, memories, 1000):
        records = tuple(
            MemoryRecord(
                memory_id=f"m{i:07d}",
                scope_key=keys[i % len(keys)],
                scope=scope_maps[i % len(keys)],
                fact=f"Fact {i}: the user said something about topic {i % 97}.",
                embedding=tuple(vectors[i].tolist()),
                create_time=now,
                update_time=now,
            )
            for i in range(start, min(memories, start + 1000))
        )
        await store.apply(BANK, WriteBatch(inserts=records))


def _members(aux: Any, scope: str) -> list[str]:
    from adk_memory_chroma import _codec as codec

    found = aux.get(ids=codec.bucket_ids(scope), include=["metadatas"])
    return [memory_id for meta in found["metadatas"] for memory_id in codec.decode_bucket(meta)]


def _shapes(mem: Any, aux: Any, pool: ThreadPoolExecutor) -> dict[str, Callable[..., Any]]:
    """Each shape reads one scope: (scope digest, its memory ids, 10 of them, a query vector)."""
    from adk_memory_chroma import _codec as codec

    def halves(ids: list[str]) -> list[Any]:
        half = len(ids) // 2
        parts = (ids[:half], ids[half:])
        jobs = [pool.submit(mem.get, ids=part, include=["embeddings"]) for part in parts]
        return [job.result() for job in jobs]

    return {
        "index: head, slot, 16 buckets": lambda s, ids, top, q: aux.get(
            ids=[codec.scope_head_id(s), codec.SLOT_ID, *codec.bucket_ids(s)],
            include=["metadatas"],
        ),
        "version: head, slot": lambda s, ids, top, q: aux.get(
            ids=[codec.scope_head_id(s), codec.SLOT_ID], include=["metadatas"]
        ),
        "vectors by id": lambda s, ids, top, q: mem.get(ids=ids, include=["embeddings"]),
        "winners, all fields": lambda s, ids, top, q: mem.get(ids=top, include=ALL),
        "(a) scope rows with records": lambda s, ids, top, q: mem.get(ids=ids, include=ALL),
        "winners without vectors": lambda s, ids, top, q: mem.get(
            ids=top, include=["metadatas", "documents"]
        ),
        "ids only (Chroma's lookup)": lambda s, ids, top, q: mem.get(ids=ids, include=[]),
        "vectors by the scope's where": lambda s, ids, top, q: mem.get(
            where={codec.SCOPE_KEY: s}, include=["embeddings"]
        ),
        "HNSW query, ids = scope": lambda s, ids, top, q: mem.query(
            query_embeddings=[q], ids=ids, n_results=K, include=["distances"]
        ),
        "vectors by id, 2 threads": lambda s, ids, top, q: halves(ids),
    }


async def measure(memories: int, scopes: int, rounds: int, folder: str) -> None:
    from adk_memory_chroma import ChromaMemoryStore
    from adk_memory_chroma._chroma import AUX, MEM

    from adk_memory.scope import scope_key
    from adk_memory.store import NearestQuery

    scope_maps = [{"user_id": f"u{i}"} for i in range(scopes)]
    keys = [scope_key(scope) for scope in scope_maps]
    marker = Path(folder) / "cold-bench.json"
    store = ChromaMemoryStore.from_uri(f"chroma://{folder}")
    pool = ThreadPoolExecutor(2)
    try:
        if not marker.exists():
            started = time.perf_counter()
            await _load(store, memories, scope_maps)
            marker.write_text(json.dumps({"memories": memories, "scopes": scopes}))
            print(f"loaded {memories:,} memories in {time.perf_counter() - started:.0f} s")
        mem = await store._chroma.collection(store._chroma.name(BANK, MEM))
        aux = await store._chroma.collection(store._chroma.name(BANK, AUX))
        shapes = _shapes(mem, aux, pool)
        rng = np.random.default_rng(7)
        times: dict[str, list[float]] = {"vectors by id, first touch": []}
        times |= {name: [] for name in ("nearest cold", "nearest warm", *shapes)}
        order = ["nearest", *shapes]
        load = os.getloadavg()[0]
        for round_ in range(rounds):
            scope = keys[(round_ * 7919) % scopes]  # 7919 is prime: no scope is read twice
            ids = _members(aux, scope)
            vector = rng.normal(size=384)
            vector /= np.linalg.norm(vector)
            query = NearestQuery(scope, tuple(vector.tolist()), K, datetime.now(UTC))
            started = time.perf_counter()
            mem.get(ids=ids, include=["embeddings"])
            times["vectors by id, first touch"].append((time.perf_counter() - started) * 1000)
            top = ids[:K]
            order = order[1:] + order[:1]
            for name in order:
                if name == "nearest":
                    store._vectors.drop((str(mem.id), scope))
                    for state in ("cold", "warm"):
                        started = time.perf_counter()
                        await store.nearest(BANK, query)
                        times[f"nearest {state}"].append((time.perf_counter() - started) * 1000)
                    continue
                started = time.perf_counter()
                shapes[name](scope, ids, top, vector.tolist())
                times[name].append((time.perf_counter() - started) * 1000)
        print(
            f"{memories:,} memories in {scopes:,} scopes, {rounds} scopes read, load average "
            f"{load:.1f} -> {os.getloadavg()[0]:.1f}; p50 ms:"
        )
        for name, ms in times.items():
            print(f"  {name:32s} {statistics.median(ms):7.2f}")
    finally:
        pool.shutdown()
        await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--scopes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--folder", help="built if empty, reused if it holds a bank from here")
    args = parser.parse_args()
    rounds = min(args.rounds, args.scopes)  # one scope per round, none read twice
    if args.folder:
        asyncio.run(measure(args.memories, args.scopes, rounds, args.folder))
        return
    with tempfile.TemporaryDirectory(prefix="chroma-cold-") as folder:
        asyncio.run(measure(args.memories, args.scopes, rounds, folder))


if __name__ == "__main__":
    main()
