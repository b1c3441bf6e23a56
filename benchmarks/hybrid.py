"""Hybrid vs dense retrieve latency at 10,000 memories in one scope (issue 18).

`python -m benchmarks.hybrid [--size N] [--queries Q]` loads the same N memories (random unit
384-d vectors, synthetic 8-word facts) into a dense bank and a hybrid bank of each backend, then
times `memories.retrieve(top_k=10)` through the public async client, query by query alternating:

* `dense`        the dense bank;
* `hybrid`       the hybrid bank (its scope's BM25 index cached, checked by `scope_version`);
* `hybrid scan`  the hybrid bank through a store that keeps no scope version, so every query
                 scans the scope (the path before the cache);
* `... filtered` the same three with `--filter` (default: half the memories, by metadata): the
                 cached hybrid path ranks its index's view of the filter's matches (the view is
                 remembered: a repeated filter is not evaluated again), the unversioned one
                 indexes the filtered scan on every query (the path before the cache);
* `hybrid new filter` the cached hybrid path with a filter it has not seen (the same matches,
                 `--filter OR metadata.tag = "<query number>"`): string metadata equalities are
                 evaluated by the cached index itself;
* `hybrid new fact filter` the same with `(--filter) AND NOT fact:"<query number>#"`: a fact
                 condition new at each query (before the index kept the facts, its ids were asked
                 of the store every query; now the index evaluates it from its columns);
* `hybrid new time filter` the same with `(--filter) AND create_time > <query number>`;
* `dense filtered store`, `dense new fact filter (store)` the dense filtered paths through a
                 store that keeps no version: the store's filtered nearest query (what a filtered
                 dense query cost before it was served from the cached index);
* `dense filtered, first visit` a filtered dense query right after a write to the scope (not
                 timed): the store answers until its queries at the new version have cost what
                 building the index did (then one scan rebuilds it, without BM25);
* `dense keep-all filter` `NOT fact = "-"` (every memory, a remembered view): what an
                 unfiltered dense query would cost through the cached index, against `dense`.

`--paths` runs only the named paths (the hybrid scan paths take ~1 s a query on Redis).

Queries are embedded by the `hash-384` test embedder (cheap, identical for every path). Prints
one line per backend and path: p50 / p99 in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from typing import Any

import numpy as np

from benchmarks._common import Timer, backends, summary, unit_rows
from benchmarks.latency import _fact, _vocab

K = 10


def _unversioned(store_type: type) -> type:
    """`store_type` keeping no scope version: hybrid retrieval scans the scope every query."""

    class Unversioned(store_type):  # type: ignore[misc,valid-type]
        async def scope_version(self, bank_id: str, scope_key: str) -> None:
            return None

    return Unversioned


def _stores(backend: str, redis_url: str | None, tmp: str) -> tuple[Any, Any]:
    """Two stores over the same data: a versioned one and one without versions."""
    from adk_memory._registry import store_from_uri
    from adk_memory.reference_store import ReferenceMemoryStore

    if backend == "memory":
        return ReferenceMemoryStore(name="bench"), _unversioned(ReferenceMemoryStore)(name="bench")
    if backend == "redis":
        from adk_memory_redis import RedisMemoryStore

        uri = f"{redis_url}?key_prefix=hyb&index_algorithm=FLAT"
        return store_from_uri(uri), _unversioned(RedisMemoryStore).from_uri(uri)
    from adk_memory_chroma import ChromaMemoryStore

    uri = f"chroma://{tmp}/chroma"  # two stores of one process share an embedded folder
    return store_from_uri(uri), _unversioned(ChromaMemoryStore).from_uri(uri)


SCOPE = {"user_id": "bench"}


def _record(i: int, fact: str, vector: np.ndarray) -> Any:
    from adk_memory.engine.context import utc_now
    from adk_memory.scope import scope_key
    from adk_memory.store import MemoryRecord

    now = utc_now()
    return MemoryRecord(
        memory_id=f"m{i:07d}",
        scope_key=scope_key(SCOPE),
        scope=SCOPE,
        fact=fact,
        embedding=tuple(vector.tolist()),
        create_time=now,
        update_time=now,
        metadata={"tag": "ab"[i % 2]},
    )


async def _load(store: Any, bank_id: str, size: int, rng: np.random.Generator) -> None:
    from adk_memory.store import WriteBatch

    vocab = _vocab(rng)
    vectors = unit_rows(rng, size)
    for start in range(0, size, 1000):
        records = tuple(
            _record(i, _fact(rng, vocab, i), vectors[i])
            for i in range(start, min(size, start + 1000))
        )
        await store.apply(bank_id, WriteBatch(inserts=records))


async def _write_one(store: Any, bank_id: str, i: int) -> None:
    """One more memory in the scope: a new scope version."""
    from adk_memory.store import WriteBatch

    vector = unit_rows(np.random.default_rng(i), 1)[0]
    await store.apply(bank_id, WriteBatch(inserts=(_record(i, f"Written {i}", vector),)))


def _paths(
    client: Any, scanning: Any, dense: str, hybrid: str, filter: str
) -> dict[str, tuple[Any, str, str | None]]:
    """Each path: the client, the bank, the filter (`{n}`: the query's number)."""
    new_fact = f'({filter}) AND NOT fact:"{{n}}#"'
    return {
        "dense": (client, dense, None),
        "hybrid": (client, hybrid, None),
        "hybrid scan": (scanning, hybrid, None),
        "dense filtered": (client, dense, filter),
        "dense filtered store": (scanning, dense, filter),
        "dense filtered, first visit": (client, dense, filter),
        "dense new fact filter": (client, dense, new_fact),
        "dense new fact filter store": (scanning, dense, new_fact),
        "dense keep-all filter": (client, dense, 'NOT fact = "-"'),
        "hybrid filtered": (client, hybrid, filter),
        "hybrid filtered scan": (scanning, hybrid, filter),
        "hybrid new filter": (client, hybrid, f'({filter}) OR metadata.tag = "{{n}}"'),
        "hybrid new fact filter": (client, hybrid, new_fact),
        "hybrid new time filter": (client, hybrid, f"({filter}) AND create_time > {{n}}"),
    }


async def run_backend(
    backend: str,
    redis_url: str | None,
    tmp: str,
    size: int,
    queries: int,
    filter: str,
    only: list[str] | None = None,
    warmup: int = 1,
) -> dict[str, dict[str, float]]:
    from adk_memory import AsyncClient

    versioned, unversioned = _stores(backend, redis_url, tmp)
    client = AsyncClient(store=versioned, embedding_model="hash-384", run_scheduler=False)
    scanning = AsyncClient(store=unversioned, embedding_model="hash-384", run_scheduler=False)
    rng = np.random.default_rng(18)
    try:
        dense = (await client.memory_banks.create()).name
        hybrid = (
            await client.memory_banks.create(extensions={"retrieval": {"mode": "hybrid"}})
        ).name
        for bank in (dense, hybrid):
            await _load(
                client.engine.store, bank.rsplit("/", 1)[-1], size, np.random.default_rng(7)
            )
        vocab = _vocab(np.random.default_rng(7))
        texts = [" ".join(vocab[j] for j in rng.integers(0, len(vocab), 3)) for _ in range(queries)]

        async def retrieve(on: Any, bank: str, text: str, where: str | None) -> None:
            await on.memory_banks.memories.retrieve(
                name=bank,
                scope={"user_id": "bench"},
                similarity_search_params={"search_query": text, "top_k": K},
                config={"filter": where} if where else None,
            )

        paths = _paths(client, scanning, dense, hybrid, filter)
        paths = {name: path for name, path in paths.items() if not only or name in only}
        for _ in range(warmup):  # the first hybrid query builds the index; dense ones rent first
            for on, bank, where in paths.values():
                await retrieve(on, bank, "warm up", where and where.replace("{n}", "1"))
        series: dict[str, list[float]] = {name: [] for name in paths}
        for n, text in enumerate(texts):  # alternate query by query: load hits every path alike
            for name, (on, bank, where) in paths.items():
                where = where and where.replace("{n}", str(n))
                if name.endswith("first visit"):
                    await _write_one(client.engine.store, bank.rsplit("/", 1)[-1], size + n)
                with Timer() as t:
                    await retrieve(on, bank, text, where)
                series[name].append(t.ms)
        return {name: summary(ms) for name, ms in series.items()}
    finally:
        await client.aclose()
        if scanning is not client:
            await scanning.aclose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--queries", type=int, default=30)
    parser.add_argument("--backends", nargs="+", default=["memory", "redis", "chroma"])
    parser.add_argument("--filter", default='metadata.tag = "a"')
    parser.add_argument("--paths", nargs="+", help="only these paths (names as printed)")
    parser.add_argument(
        "--warmup",
        type=int,
        default=1,
        help="untimed queries per path first (a dense filtered path is served from the cache "
        "once the store's queries at the scope's version cost what building its index does)",
    )
    parser.add_argument(
        "--patience",
        type=float,
        help="the process cache's patience (0: a dense filtered query builds its index at the "
        "first miss, as a hybrid one does; default: the engine's ski rental)",
    )
    args = parser.parse_args(argv)
    if args.patience is not None:
        from adk_memory.engine import lexical_cache, retrieval

        retrieval._LEXICAL_CACHE = lexical_cache.LexicalCache(patience=args.patience)
    with (
        backends(need_redis="redis" in args.backends) as where,
        tempfile.TemporaryDirectory() as tmp,
    ):
        for backend in args.backends:
            if backend == "redis" and not where.redis_url:
                continue
            rows = asyncio.run(
                run_backend(
                    backend,
                    where.redis_url,
                    tmp,
                    args.size,
                    args.queries,
                    args.filter,
                    args.paths,
                    args.warmup,
                )
            )
            for name, row in rows.items():
                baseline = rows.get("dense filtered" if "filter" in name else "dense", row)
                ratio = row["p50_ms"] / baseline["p50_ms"]
                p50, p99 = row["p50_ms"], row["p99_ms"]
                print(
                    f"{backend:7} {name:28} p50 {p50:8.2f} ms  p99 {p99:8.2f} ms"
                    f"  ({ratio:.1f}x dense)",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
