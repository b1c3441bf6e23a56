"""1. Retrieve latency and throughput against bank size and number of scopes.

Every configuration loads N memories (random unit 384-d vectors, the shape of the default
all-MiniLM-L6-v2 embeddings, and short synthetic facts) spread over S scopes, then times, on the
same data and queries:

* `engine`      `AsyncClient.memory_banks.memories.retrieve(similarity_search_params, top_k=10)`,
                 the public API end to end, query embedding excluded (the query's vector is
                 served from a table by a benchmark `Embedder`);
* `engine+embed` the same with the query embedded live by all-MiniLM-L6-v2 on ONNX Runtime, the
                 default (distinct texts, so the embedder's query cache never hits);
* `engine+embed, sentence-transformers` the same on the former default runtime (torch),
                 interleaved query by query with `engine+embed`;
* `engine, same query again` the same retrieve repeated at once (its scope's vectors cached);
* `store`        `store.nearest` (the backend adapter alone: query, exact re-ranking, decoding),
                 run after the two engine calls of the same query, so warm;
* `store, cold`  Chroma: the same after forgetting the scope's cached vectors (a scope not
                 searched lately, or by another process);
* `engine, first visit` Chroma: `engine` after forgetting the scope's cached vectors, so a
                 first visit of a scope stays visible beside `engine` (whose scopes a store
                 that wrote them holds cached: write-through);
* `raw`          one native query to the same store (Redis: FT.SEARCH KNN with the scope filter;
                 Chroma: `collection.query` with the scope filter; none for `memory://`), and
                 for Redis one PING round trip;
* `numpy`        exact search over the scope's vectors in-process (float32 matrix per scope,
                 |x|² − 2x·q, argpartition): the floor of any store.

ADK's `InMemoryMemoryService` and `SqliteMemoryService` (FTS5) hold the same facts (one event per
memory, one user per scope) and answer `search_memory` for a 3-word query: keyword search, the
incumbents a user would otherwise pick (no vectors, so their figures have no embedding cost).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks._common import DIM, Backends, Timer, summary, unit_rows

K = 10
NOW_WORDS = None


def _vocab(rng: np.random.Generator, size: int = 3000) -> list[str]:
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    return ["".join(rng.choice(letters, rng.integers(3, 9))) for _ in range(size)]


def _fact(rng: np.random.Generator, vocab: list[str], i: int) -> str:
    words = [vocab[j] for j in rng.integers(0, len(vocab), 8)]
    return f"Fact {i}: the user said {' '.join(words)}."


class TableEmbedder:
    """Query vectors from a table (embedding excluded); anything else embedded live by MiniLM."""

    model = "all-MiniLM-L6-v2"
    dimension = DIM

    def __init__(self) -> None:
        self.table: dict[str, tuple[float, ...]] = {}
        from adk_memory.embeddings import LocalEmbedder

        self.live = LocalEmbedder("all-MiniLM-L6-v2")

        self.misses: list[str] = []

    async def embed_documents(self, texts):  # noqa: ANN001, ANN201
        return [await self.embed_query(t) for t in texts]

    async def embed_query(self, text: str) -> tuple[float, ...]:
        hit = self.table.get(text)
        if hit is None:
            self.misses.append(text)
            return await self.live.embed_query(text)
        return hit


async def _raw_query(
    backend: str, store: Any, bank_id: str, key: str, vector: np.ndarray, now: Any
) -> Any:
    """Returns an async callable running one native query (and a PING for Redis)."""
    if backend == "chroma":
        from adk_memory_chroma import _codec as codec
        from adk_memory_chroma._chroma import MEM

        collection = await store._chroma.collection(store._chroma.name(bank_id, MEM))
        where = {"$and": [{codec.SCOPE_KEY: key}, {codec.LIVE_US: {"$gt": codec.micros(now)}}]}

        async def chroma_raw(vec: np.ndarray, scope: str) -> None:
            w = {"$and": [{codec.SCOPE_KEY: scope}, where["$and"][1]]}
            collection.query(
                query_embeddings=[vec.tolist()],
                n_results=K,
                where=w,
                include=["distances", "documents", "metadatas"],
            )

        return {"raw": chroma_raw}
    if backend.startswith("redis"):
        from adk_memory_redis._codec import to_us
        from adk_memory_redis._search import _TIE_SLACK

        async with store._connection.call("bench") as client:
            bank = await store._banks.get(client, bank_id)
        import redis.asyncio as aredis

        conn = aredis.Redis.from_url(RAW_URL[0])
        now_us = to_us(now)

        async def redis_raw(vec: np.ndarray, scope: str) -> None:
            # The plain query a user would write: k hits at RediSearch's default EF_RUNTIME.
            await _redis_knn(conn, bank, scope, vec, now_us, K)

        async def ping(vec: np.ndarray, scope: str) -> None:
            await conn.ping()

        queries = {"raw": redis_raw, "ping": ping, "_conn": conn}
        if bank.algorithm == "HNSW":
            # The graph search the store sends for k=10: its over-fetched window at its EF, no
            # re-rank. It separates what that search costs from what the store adds to it.
            window = max(int(np.ceil(K * store.config.overfetch)), K) + _TIE_SLACK
            ef = max(store.config.hnsw_ef_runtime, window)

            async def as_the_store(vec: np.ndarray, scope: str) -> None:
                await _redis_knn(conn, bank, scope, vec, now_us, window, ef=ef)

            queries["raw at the store's recall"] = as_the_store
        return queries
    return {}


RAW_URL: list[str] = [""]


async def _scope_cache_forgetter(
    backend: str, store: Any, bank_id: str
) -> Callable[[str], None] | None:
    """For Chroma, forgets one scope's cached vectors (its next search reads them again)."""
    if backend != "chroma":
        return None
    from adk_memory_chroma._chroma import MEM

    collection = await store._chroma.collection(store._chroma.name(bank_id, MEM))
    return lambda key: store._vectors.drop((str(collection.id), key))


async def _redis_knn(
    conn: Any,
    bank: Any,
    scope: str,
    vec: np.ndarray,
    now_us: int,
    k: int,
    *,
    ef: int | None = None,
) -> None:
    """One FT.SEARCH KNN over the scope's live memories, returning k hits with their fields."""
    from adk_memory_redis._codec import MEMORY_FIELDS

    knn = "KNN $K @embedding $BLOB"
    params: list[Any] = ["K", k, "BLOB", vec.astype(bank.dtype).tobytes()]
    if ef is not None:
        knn += " EF_RUNTIME $EF HYBRID_POLICY BATCHES"
        params += ["EF", ef]
    fields = [*MEMORY_FIELDS, "embedding"]
    await conn.execute_command(
        "FT.SEARCH",
        bank.index_name,
        f"(@scope_key:{{{scope}}} @live_until:[({now_us} +inf])=>[{knn} AS __dist]",
        "PARAMS",
        len(params),
        *params,
        "SORTBY",
        "__dist",
        "ASC",
        "RETURN",
        len(fields),
        *fields,
        "LIMIT",
        0,
        k,
        "DIALECT",
        2,
    )


async def _redis_used_memory(url: str) -> int:
    """The server's used_memory (folded in from the former redis_latency.py)."""
    import redis.asyncio as aredis

    conn = aredis.Redis.from_url(url)
    try:
        return int((await conn.info("memory"))["used_memory"])
    finally:
        await conn.aclose()


async def run_config(
    where: Backends,
    backend: str,
    size: int,
    scopes: int,
    queries: int,
    embed_queries: int,
    tag: str,
    log: Any,
) -> dict[str, Any]:
    from adk_memory import AsyncClient
    from adk_memory._registry import store_from_uri
    from adk_memory.engine.context import utc_now
    from adk_memory.scope import scope_key
    from adk_memory.store import MemoryRecord, NearestQuery, WriteBatch
    from benchmarks import _cache

    rng = np.random.default_rng(size * 7 + scopes)
    vocab = _vocab(rng)
    uri, options = where.uri(backend, tag)
    RAW_URL[0] = uri
    store = store_from_uri(uri, **options)
    embedder = TableEmbedder()
    _cache.install({"all-MiniLM-L6-v2": embedder})  # type: ignore[dict-item]
    client = AsyncClient(store=store, run_scheduler=False)
    row: dict[str, Any] = {"backend": backend, "size": size, "scopes": scopes}
    try:
        bank = await client.memory_banks.create()
        bank_id = bank.name.rsplit("/", 1)[-1]
        scope_maps = [{"user_id": f"user-{i}"} for i in range(scopes)]
        keys = [scope_key(s) for s in scope_maps]
        vectors = unit_rows(rng, size)
        facts = [_fact(rng, vocab, i) for i in range(size)]
        owner = np.arange(size) % scopes
        now = utc_now()
        used_before = await _redis_used_memory(uri) if backend.startswith("redis") else None
        started = time.perf_counter()
        batch = 1000
        for start in range(0, size, batch):
            records = tuple(
                MemoryRecord(
                    memory_id=f"m{i:07d}",
                    scope_key=keys[owner[i]],
                    scope=scope_maps[owner[i]],
                    fact=facts[i],
                    embedding=tuple(vectors[i].tolist()),
                    create_time=now,
                    update_time=now,
                )
                for i in range(start, min(size, start + batch))
            )
            await store.apply(bank_id, WriteBatch(inserts=records))
        row["load_s"] = round(time.perf_counter() - started, 1)
        if used_before is not None:
            await asyncio.sleep(0.5)
            row["bytes_per_memory"] = round((await _redis_used_memory(uri) - used_before) / size)
        log(f"    loaded {size:,} memories in {row['load_s']} s")
        qvecs = unit_rows(rng, queries)
        for i in range(queries):
            embedder.table[f"q{i}"] = tuple(qvecs[i].tolist())
        # The numpy floor: float32 matrix per scope, squared distance as |x|^2 - 2 x.q (+ |q|^2).
        per_scope = {}
        for s in range(scopes):
            matrix = np.ascontiguousarray(vectors[owner == s], dtype=np.float32)
            per_scope[s] = (matrix, np.einsum("ij,ij->i", matrix, matrix))
        q32 = qvecs.astype(np.float32)
        raw = await _raw_query(backend, store, bank_id, keys[0], qvecs[0], now)
        series: dict[str, list[float]] = {"engine": [], "store": [], "numpy": []}
        series.update({name: [] for name in raw if not name.startswith("_")})
        memories = client.memory_banks.memories

        async def engine(i: int) -> None:
            await memories.retrieve(
                name=bank.name,
                scope=scope_maps[i % scopes],
                similarity_search_params={"search_query": f"q{i}", "top_k": K},
            )

        async def nearest(i: int) -> None:
            await store.nearest(
                bank_id, NearestQuery(keys[i % scopes], embedder.table[f"q{i}"], K, now)
            )

        def floor(i: int) -> None:
            matrix, norms = per_scope[i % scopes]
            d = norms - 2.0 * (matrix @ q32[i])
            top = np.argpartition(d, min(K, len(d) - 1))[:K]
            top[np.argsort(d[top])]

        for i in range(min(10, queries)):  # warm up every path
            await engine(i)
            await nearest(i)
            for name, fn in raw.items():
                if not name.startswith("_"):
                    await fn(qvecs[i], keys[i % scopes])
        # Interleave the paths query by query so load changes hit all of them alike. The first
        # `engine` call of a query finds its scope's vectors cached or not as the previous
        # queries left them; the second finds them cached. `store` runs after both (warm);
        # `store, cold` and `engine, first visit` first forget the scope's cached vectors
        # (Chroma only).
        forget = await _scope_cache_forgetter(backend, store, bank_id)
        series["engine, same query again"] = []
        if forget is not None:
            series["store, cold"] = []
            series["engine, first visit"] = []
        for i in range(queries):
            with Timer() as t:
                await engine(i)
            series["engine"].append(t.ms)
            with Timer() as t:
                await engine(i)
            series["engine, same query again"].append(t.ms)
            with Timer() as t:
                await nearest(i)
            series["store"].append(t.ms)
            if forget is not None:
                forget(keys[i % scopes])
                with Timer() as t:
                    await nearest(i)
                series["store, cold"].append(t.ms)
                forget(keys[i % scopes])
                with Timer() as t:
                    await engine(i)
                series["engine, first visit"].append(t.ms)
            for name, fn in raw.items():
                if name.startswith("_"):
                    continue
                with Timer() as t:
                    await fn(qvecs[i], keys[i % scopes])
                series[name].append(t.ms)
            with Timer() as t:
                floor(i)
            series["numpy"].append(t.ms)
        if embed_queries:
            from adk_memory.embeddings import LocalEmbedder

            runtimes = {
                "engine+embed": embedder.live,
                "engine+embed, sentence-transformers": LocalEmbedder(
                    "all-MiniLM-L6-v2", runtime="sentence-transformers"
                ),
            }
            for name, live in runtimes.items():
                embedder.live = live
                await memories.retrieve(
                    name=bank.name,
                    scope=scope_maps[0],
                    similarity_search_params={"search_query": f"warm up {name}", "top_k": K},
                )
                series[name] = []
            for i in range(embed_queries):
                for n, (name, live) in enumerate(runtimes.items()):
                    embedder.live = live
                    text = f"what did the user say about {vocab[i]} and {vocab[-i - 1]}? ({i}.{n})"
                    with Timer() as t:
                        await memories.retrieve(
                            name=bank.name,
                            scope=scope_maps[i % scopes],
                            similarity_search_params={"search_query": text, "top_k": K},
                        )
                    series[name].append(t.ms)
            embedder.live = runtimes["engine+embed"]
        for name, ms in series.items():
            row[name] = summary(ms)
        if "_conn" in raw:
            await raw["_conn"].aclose()
        await client.memory_banks.delete(name=bank.name, force=True)
    finally:
        await client.aclose()
    return row


async def run_incumbents(size: int, scopes: int, queries: int, tmp: str, log: Any) -> list[dict]:
    from google.adk.events import Event
    from google.adk.memory import InMemoryMemoryService
    from google.adk.memory._sqlite_memory_service import SqliteMemoryService
    from google.genai import types as gt

    rng = np.random.default_rng(size * 7 + scopes)
    vocab = _vocab(rng)
    unit_rows(rng, size)  # keep the same random stream as run_config
    facts = [_fact(rng, vocab, i) for i in range(size)]
    events: dict[int, list[Event]] = {s: [] for s in range(scopes)}
    for i, fact in enumerate(facts):
        events[i % scopes].append(
            Event(
                id=f"e{i}",
                author="user",
                timestamp=float(i),
                content=gt.Content(role="user", parts=[gt.Part(text=fact)]),
            )
        )
    rows = []
    for name, service in (
        ("adk-inmemory", InMemoryMemoryService()),
        ("adk-sqlite", SqliteMemoryService(f"{tmp}/adk-{size}-{scopes}.db")),
    ):
        started = time.perf_counter()
        for s, evs in events.items():
            for chunk in range(0, len(evs), 1000):
                await service.add_events_to_memory(
                    app_name="bench", user_id=f"user-{s}", events=evs[chunk : chunk + 1000]
                )
        load = round(time.perf_counter() - started, 1)
        ms = []
        n = queries if name == "adk-sqlite" else max(20, min(queries, 2_000_000 // size))
        for i in range(n + 5):
            words = " ".join(vocab[j] for j in rng.integers(0, len(vocab), 3))
            with Timer() as t:
                await service.search_memory(
                    app_name="bench", user_id=f"user-{i % scopes}", query=words
                )
            if i >= 5:
                ms.append(t.ms)
        if hasattr(service, "close"):
            await service.close()
        rows.append(
            {"backend": name, "size": size, "scopes": scopes, "load_s": load, "engine": summary(ms)}
        )
        log(f"    {name}: p50 {rows[-1]['engine']['p50_ms']} ms")
        del service
        gc.collect()
    return rows


def run(
    where: Backends,
    plan: list[tuple[str, int, int]],
    queries: int,
    embed_queries: int,
    incumbents: list[tuple[int, int]],
    log: Any = print,
) -> list[dict[str, Any]]:
    rows = []
    for n, (backend, size, scopes) in enumerate(plan):
        if backend.startswith("redis") and not where.redis_url:
            continue
        log(f"  latency: {backend} {size:,} memories, {scopes} scope(s)")
        try:
            row = asyncio.run(
                run_config(where, backend, size, scopes, queries, embed_queries, f"{n}", log)
            )
        except Exception as exc:  # noqa: BLE001
            log(f"    FAILED: {type(exc).__name__}: {exc}")
            rows.append(
                {
                    "backend": backend,
                    "size": size,
                    "scopes": scopes,
                    "error": f"{type(exc).__name__}: {exc}"[:300],
                }
            )
            continue
        rows.append(row)
        log(
            "    "
            + ", ".join(f"{k} p50 {v['p50_ms']} ms" for k, v in row.items() if isinstance(v, dict))
        )
        gc.collect()
    for size, scopes in incumbents:
        log(f"  latency: ADK incumbents {size:,} memories, {scopes} scope(s)")
        rows += asyncio.run(run_incumbents(size, scopes, queries, where.tmp, log))
    return rows
