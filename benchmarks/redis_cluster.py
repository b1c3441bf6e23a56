"""Retrieve p50 and throughput with concurrent clients: a 3-primary Redis Cluster against one node.

Both get the same data: `--banks` banks (ids chosen so that their hash tags spread evenly over
the cluster's primaries) of `--memories` random L2-normalised 384-d vectors each, over `--scopes`
scopes per bank. Then `--clients` concurrent clients (`--processes` processes, each running its
share as asyncio tasks over one store) send `--queries` retrieves each (`nearest`, k=10, one
scope, FLAT), every client cycling over all banks; each retrieve's latency is timed end to end.
Throughput is all retrieves over the wall time from the first to the last.

The servers are Valkey with RediSearch from the test wheels (a single server and a 3-primary
cluster, one index per shard), unless REDIS_URL / REDIS_CLUSTER_URL point at servers to use.
On one small machine the cluster's three servers and the clients share the same cores, so the
figure shows what the cluster costs or saves per request rather than what three machines give.

    python benchmarks/redis_cluster.py                  # about a minute
    python benchmarks/redis_cluster.py --clients 32 --processes 4
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from concurrent.futures import ProcessPoolExecutor
from contextlib import ExitStack
from datetime import UTC, datetime

import numpy as np
import redis.cluster
from adk_memory_redis import RedisMemoryStore
from adk_memory_redis._config import cluster_nodes

from adk_memory.scope import scope_key
from adk_memory.store import BankRecord, MemoryRecord, NearestQuery, WriteBatch
from adk_memory.testing._redis_server import redis_cluster, redis_server

DIM = 384
K = 10
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _unit_rows(rng: np.random.Generator, count: int) -> np.ndarray:
    rows = rng.standard_normal((count, DIM)).astype(np.float64)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def spread_bank_ids(cluster_url: str, prefix: str, banks: int) -> list[str]:
    """`banks` ids whose `{prefix:id}` hash tags are dealt evenly over the primaries."""
    host, port = cluster_nodes(cluster_url)[0]
    topology = redis.cluster.RedisCluster(host=host, port=port)
    try:
        primaries = [node.name for node in topology.get_primaries()]
        wanted = {name: -(-banks // len(primaries)) for name in primaries}
        chosen: list[str] = []
        index = 0
        while len(chosen) < banks:
            bank_id = f"bench-{index}"
            owner = topology.get_node_from_key(f"{{{prefix}:{bank_id}}}:bank").name
            if wanted[owner] > 0:
                wanted[owner] -= 1
                chosen.append(bank_id)
            index += 1
        return chosen
    finally:
        topology.close()


async def load(url: str, prefix: str, bank_ids: list[str], memories: int, scopes: int) -> None:
    store = RedisMemoryStore.from_uri(url, key_prefix=prefix, index_algorithm="FLAT")
    try:
        for number, bank_id in enumerate(bank_ids):
            rng = np.random.default_rng(number)
            await store.create_bank(BankRecord(bank_id, {}, "random-384", DIM, NOW, NOW))
            for start in range(0, memories, 500):
                rows = _unit_rows(rng, min(500, memories - start))
                records = tuple(
                    MemoryRecord(
                        memory_id=f"m{start + i:06d}",
                        scope_key=scope_key({"user_id": f"u{(start + i) % scopes}"}),
                        scope={"user_id": f"u{(start + i) % scopes}"},
                        fact=f"benchmark fact {start + i}",
                        embedding=tuple(row.tolist()),
                        create_time=NOW,
                        update_time=NOW,
                    )
                    for i, row in enumerate(rows)
                )
                await store.apply(bank_id, WriteBatch(inserts=records))
    finally:
        await store.aclose()


async def drop(url: str, prefix: str) -> None:
    store = RedisMemoryStore.from_uri(url, key_prefix=prefix)
    try:
        await store.drop_all()
    finally:
        await store.aclose()


async def _client(
    store: RedisMemoryStore, bank_ids: list[str], scopes: int, queries: int, seed: int
) -> list[float]:
    rng = np.random.default_rng(1000 + seed)
    vectors = _unit_rows(rng, queries)
    timings: list[float] = []
    for i, row in enumerate(vectors):
        bank_id = bank_ids[(seed + i) % len(bank_ids)]
        query = NearestQuery(scope_key({"user_id": f"u{i % scopes}"}), tuple(row.tolist()), K, NOW)
        began = time.perf_counter()
        hits = await store.nearest(bank_id, query)
        timings.append((time.perf_counter() - began) * 1000)
        assert len(hits) == K
    return timings


async def _process(
    url: str, prefix: str, bank_ids: list[str], scopes: int, queries: int, seeds: list[int]
) -> tuple[list[float], float, float]:
    store = RedisMemoryStore.from_uri(url, key_prefix=prefix, max_connections=64)
    try:
        for bank_id in bank_ids:  # warm up: connections, cached bank layouts, indexes
            vector = tuple(_unit_rows(np.random.default_rng(0), 1)[0].tolist())
            await store.nearest(bank_id, NearestQuery(scope_key({"user_id": "u0"}), vector, K, NOW))
        started = time.time()
        results = await asyncio.gather(
            *(_client(store, bank_ids, scopes, queries, seed) for seed in seeds)
        )
        return [t for timings in results for t in timings], started, time.time()
    finally:
        await store.aclose()


def _run_process(args: tuple[str, str, list[str], int, int, list[int]]) -> tuple:
    return asyncio.run(_process(*args))


def measure(url: str, prefix: str, bank_ids: list[str], args: argparse.Namespace) -> dict:
    seeds = list(range(args.clients))
    shares = [seeds[i :: args.processes] for i in range(args.processes)]
    with ProcessPoolExecutor(args.processes) as pool:
        jobs = [(url, prefix, bank_ids, args.scopes, args.queries, share) for share in shares]
        outcomes = list(pool.map(_run_process, jobs))
    timings = sorted(t for outcome in outcomes for t in outcome[0])
    wall = max(outcome[2] for outcome in outcomes) - min(outcome[1] for outcome in outcomes)
    return {
        "p50_ms": round(statistics.median(timings), 2),
        "p99_ms": round(timings[int(len(timings) * 0.99)], 2),
        "retrieves_per_s": round(len(timings) / wall),
    }


def main(args: argparse.Namespace) -> None:
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    rows = []
    with ExitStack() as stack:
        single = os.environ.get("REDIS_URL") or stack.enter_context(redis_server())
        cluster = os.environ.get("REDIS_CLUSTER_URL") or stack.enter_context(redis_cluster()).url
        bank_ids = spread_bank_ids(cluster, prefix, args.banks)
        for label, url in (("one node", single), ("3-primary cluster", cluster)):
            started = time.perf_counter()
            asyncio.run(load(url, prefix, bank_ids, args.memories, args.scopes))
            loaded = round(time.perf_counter() - started, 1)
            row = {"setup": label, "load_s": loaded, **measure(url, prefix, bank_ids, args)}
            rows.append(row)
            print(row, flush=True)
            asyncio.run(drop(url, prefix))
    print()
    print(
        f"{args.banks} banks × {args.memories:,} memories ({args.scopes} scopes each), 384-d, "
        f"FLAT, k={K}; {args.clients} concurrent clients in {args.processes} processes, "
        f"{args.queries} retrieves each"
    )
    print()
    print("| setup | retrieve p50 (ms) | p99 (ms) | retrieves/s | load (s) |")
    print("|---|---:|---:|---:|---:|")
    for row in rows:
        print(
            f"| {row['setup']} | {row['p50_ms']} | {row['p99_ms']} | {row['retrieves_per_s']:,} "
            f"| {row['load_s']} |"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--banks", type=int, default=12)
    parser.add_argument("--memories", type=int, default=2_000)
    parser.add_argument("--scopes", type=int, default=10)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--queries", type=int, default=100)
    main(parser.parse_args())
