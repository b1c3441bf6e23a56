"""2. Write cost: memories created per second, one by one and in bulk; embedding shown apart.

* `create 1-by-1`  `memories.create(fact, scope)` awaited one after the other through the public
  API (validation, embedding, the memory, its revision and its operation in the store). The
  fact's vector comes from a table (embedding excluded), so this is the engine + store cost.
* `create x16`     the same with 16 creates in flight (asyncio), the throughput of a busy server.
* `bulk import`    `adk_memory.transfer.import_bank` of an export with vectors (batches of 200,
  memory + revision per record): the engine's bulk path (`adk-memory import`).
* `embedding`      all-MiniLM-L6-v2 on this machine, measured apart: one fact (ms) and a batch of
  64 facts (facts/s). Add it to the figures above for creates that embed.
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

import numpy as np

from benchmarks._common import Backends, Timer, summary, unit_rows
from benchmarks.latency import TableEmbedder, _fact, _vocab


async def _one_backend(
    where: Backends,
    backend: str,
    count: int,
    bulk: int,
    tag: str,
    embedder: TableEmbedder,
    facts: list[str],
    log: Any,
) -> dict[str, Any]:
    from adk_memory import AsyncClient
    from adk_memory._registry import store_from_uri
    from adk_memory.transfer import export_bank, import_bank

    uri, options = where.uri(backend, f"w{tag}")
    client = AsyncClient(store=store_from_uri(uri, **options), run_scheduler=False)
    row: dict[str, Any] = {"backend": backend}
    try:
        memories = client.memory_banks.memories
        bank = await client.memory_banks.create()
        ms = []
        for i in range(count):
            with Timer() as t:
                await memories.create(
                    name=bank.name, fact=facts[i], scope={"user_id": f"u{i % 10}"}
                )
            ms.append(t.ms)
        row["create 1-by-1"] = summary(ms) | {"per_s": round(1000 * len(ms) / sum(ms), 1)}
        gate = asyncio.Semaphore(16)

        async def create(i: int) -> None:
            async with gate:
                await memories.create(
                    name=bank.name, fact=facts[i], scope={"user_id": f"u{i % 10}"}
                )

        started = time.perf_counter()
        await asyncio.gather(*(create(i) for i in range(count, 2 * count)))
        row["create x16"] = {"per_s": round(count / (time.perf_counter() - started), 1)}
        # Bulk: export a memory:// bank of `bulk` memories, import it here.
        source = AsyncClient("memory://", run_scheduler=False)
        src_bank = await source.memory_banks.create()
        from adk_memory.engine.context import utc_now
        from adk_memory.scope import scope_key
        from adk_memory.store import MemoryRecord, RevisionRecord, WriteBatch

        now = utc_now()
        rng = np.random.default_rng(1)
        vecs = unit_rows(rng, bulk)
        records = []
        revisions = []
        for i in range(bulk):
            scope = {"user_id": f"u{i % 10}"}
            records.append(
                MemoryRecord(
                    memory_id=f"b{i:07d}",
                    scope_key=scope_key(scope),
                    scope=scope,
                    fact=facts[i % len(facts)],
                    embedding=tuple(vecs[i].tolist()),
                    create_time=now,
                    update_time=now,
                )
            )
        src_id = src_bank.name.rsplit("/", 1)[-1]
        await source.engine.context.store.apply(src_id, WriteBatch(inserts=tuple(records)))
        del revisions, RevisionRecord
        buffer = io.StringIO()
        await export_bank(source.engine, src_id, buffer.write)
        await source.aclose()
        lines = buffer.getvalue().splitlines(keepends=True)
        started = time.perf_counter()
        await import_bank(client.engine, lines, bank_id="bulk-target")
        row["bulk import"] = {"per_s": round(bulk / (time.perf_counter() - started), 1), "n": bulk}
        for b in (bank.name, "reasoningEngines/bulk-target"):
            await client.memory_banks.delete(name=b, force=True)
    finally:
        await client.aclose()
    return row


async def _embedding(facts: list[str]) -> dict[str, Any]:
    from adk_memory.embeddings import LocalEmbedder

    embedder = LocalEmbedder()
    embedder._encode(["warm up"])
    ms = []
    for i in range(20):
        with Timer() as t:
            embedder._encode([facts[i] + " (single)"])
        ms.append(t.ms)
    batch = [f + " (batch)" for f in facts[:64]]
    with Timer() as t:
        embedder._encode(batch)
    return {"single": summary(ms), "batch64_per_s": round(64 * 1000 / t.ms, 1)}


def run(where: Backends, backends: list[str], count: int, bulk: int, log: Any = print) -> dict:
    from benchmarks import _cache

    rng = np.random.default_rng(3)
    vocab = _vocab(rng)
    facts = [_fact(rng, vocab, i) for i in range(max(2 * count, 64))]
    embedder = TableEmbedder()
    vecs = unit_rows(rng, len(facts))
    embedder.table.update({f: tuple(v.tolist()) for f, v in zip(facts, vecs, strict=True)})
    _cache.install({"all-MiniLM-L6-v2": embedder})  # type: ignore[dict-item]
    rows = []
    for n, backend in enumerate(backends):
        if backend.startswith("redis") and not where.redis_url:
            continue
        log(f"  write: {backend}")
        try:
            row = asyncio.run(
                _one_backend(where, backend, count, bulk, str(n), embedder, facts, log)
            )
        except Exception as exc:  # noqa: BLE001
            row = {"backend": backend, "error": f"{type(exc).__name__}: {exc}"[:300]}
        log(f"    {row}")
        rows.append(row)
    log("  write: embedding cost (all-MiniLM-L6-v2)")
    embedding = asyncio.run(_embedding(facts))
    log(f"    {embedding}")
    return {"rows": rows, "embedding": embedding}
