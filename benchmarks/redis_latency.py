"""Retrieve latency and memory use of the Redis store, FLAT against HNSW.

For each bank size it loads N memories (random L2-normalised 384-d vectors, the size of the
default all-MiniLM-L6-v2 embeddings) into one bank, then times `RedisMemoryStore.nearest` end to
end (query, exact re-ranking, decoding; k=10, scope-filtered as every retrieve is) and reports
p50/p99, plus the server's memory per memory (`INFO memory` used_memory growth / N, including
the hash, the vector index and the tag/numeric indexes).

By default all memories share one scope: the worst case, since the scope filter then selects the
whole bank. `--scopes 100` spreads them over 100 scopes to show the usual case (a retrieve only
searches one user's memories).

Each configuration runs on a fresh server started from the test wheels (so one bank's freed
memory does not blur the next one's figure), unless REDIS_URL points at a server to use.
Building an HNSW graph of 100,000 384-d vectors takes about six minutes on two cores, so HNSW
runs at 1,000 and 10,000 unless `--hnsw-sizes` asks for more.

    python benchmarks/redis_latency.py                                   # about 3 minutes
    python benchmarks/redis_latency.py --sizes 100000 --hnsw-sizes 100000 --algorithms HNSW
    REDIS_URL=redis://localhost:6379/0 python benchmarks/redis_latency.py --sizes 1000 10000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from datetime import UTC, datetime

import numpy as np
import redis.asyncio as aredis
from adk_memory_redis import RedisMemoryStore

from adk_memory.scope import scope_key
from adk_memory.store import BankRecord, MemoryRecord, NearestQuery, WriteBatch
from adk_memory.testing._redis_server import redis_server

DIM = 384
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _unit_rows(rng: np.random.Generator, count: int) -> np.ndarray:
    rows = rng.standard_normal((count, DIM)).astype(np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


async def _used_memory(client: aredis.Redis) -> int:
    return int((await client.info("memory"))["used_memory"])


async def run_one(
    url: str, *, size: int, algorithm: str, scopes: int, queries: int, k: int, batch: int
) -> dict[str, float | int | str]:
    rng = np.random.default_rng(size)
    scope_maps = [{"user_id": f"user-{i}"} for i in range(scopes)]
    keys = [scope_key(scope) for scope in scope_maps]
    store = RedisMemoryStore.from_uri(
        url, key_prefix=f"bench-{uuid.uuid4().hex[:8]}", index_algorithm=algorithm
    )
    probe = aredis.Redis.from_url(url)
    try:
        bank = BankRecord("bench", {}, "random-384", DIM, NOW, NOW)
        await store.create_bank(bank)
        before = await _used_memory(probe)
        started = time.perf_counter()
        for start in range(0, size, batch):
            rows = _unit_rows(rng, min(batch, size - start))
            records = tuple(
                MemoryRecord(
                    memory_id=f"m{start + i:07d}",
                    scope_key=keys[(start + i) % scopes],
                    scope=scope_maps[(start + i) % scopes],
                    fact=f"benchmark fact number {start + i}",
                    embedding=tuple(row.tolist()),
                    create_time=NOW,
                    update_time=NOW,
                    metadata={"source": "bench"},
                )
                for i, row in enumerate(rows)
            )
            await store.apply("bench", WriteBatch(inserts=records))
        load_seconds = time.perf_counter() - started
        await asyncio.sleep(0.5)
        per_memory = (await _used_memory(probe) - before) / size
        vectors = _unit_rows(rng, queries)
        for row in vectors[:10]:  # warm up
            await store.nearest("bench", NearestQuery(keys[0], tuple(row.tolist()), k, NOW))
        timings = []
        for i, row in enumerate(vectors):
            query = NearestQuery(keys[i % scopes], tuple(row.tolist()), k, NOW)
            began = time.perf_counter()
            hits = await store.nearest("bench", query)
            timings.append((time.perf_counter() - began) * 1000)
            assert len(hits) == min(k, size // scopes)
        timings.sort()
        return {
            "size": size,
            "algorithm": algorithm,
            "scopes": scopes,
            "load_s": round(load_seconds, 1),
            "p50_ms": round(statistics.median(timings), 2),
            "p99_ms": round(timings[min(len(timings) - 1, int(len(timings) * 0.99))], 2),
            "bytes_per_memory": round(per_memory),
        }
    finally:
        await store.drop_all()
        await store.aclose()
        await probe.aclose()


def main(args: argparse.Namespace) -> None:
    rows = []
    for size in args.sizes:
        for algorithm in args.algorithms:
            if algorithm == "HNSW" and size not in args.hnsw_sizes:
                continue
            with redis_server() as url:
                row = asyncio.run(
                    run_one(
                        url,
                        size=size,
                        algorithm=algorithm,
                        scopes=args.scopes,
                        queries=args.queries,
                        k=args.k,
                        batch=args.batch,
                    )
                )
            rows.append(row)
            print(row, flush=True)
    print()
    print("| memories | scopes | index | load (s) | p50 (ms) | p99 (ms) | bytes/memory |")
    print("|---:|---:|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['size']:,} | {row['scopes']} | {row['algorithm']} | {row['load_s']} "
            f"| {row['p50_ms']} | {row['p99_ms']} | {row['bytes_per_memory']:,} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--algorithms", nargs="+", default=["FLAT", "HNSW"])
    parser.add_argument("--hnsw-sizes", type=int, nargs="+", default=[1_000, 10_000])
    parser.add_argument("--scopes", type=int, default=1)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batch", type=int, default=1000)
    main(parser.parse_args())
