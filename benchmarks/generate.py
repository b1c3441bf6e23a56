"""3. Generation cost with the scripted model (`adk_memory.testing.models.ScriptedMemoryModel`).

Each request sends a short conversation through `memories.generate(direct_contents_source=…)`
on `memory://` (and, for a few rows, Redis FLAT, where store calls are network round trips);
the scripted model "extracts" F facts and answers consolidation with one CREATE per fact. The
scope already holds M memories, so consolidation is offered up to min(5 F, 25, M) candidates
(the engine's CANDIDATES_PER_FACT and MAX_CANDIDATES). Measured per request: wall time, time
inside the model (subtracted: "engine overhead excluding model time"; fact embeddings are served
from a table, so embedding is excluded too), the part of that overhead spent inside store calls
and how many there were, LLM calls, and prompt tokens (characters / 4, the scripted model's
count).
"""

from __future__ import annotations

import asyncio
import inspect
import statistics
import time
import uuid
from typing import Any

import numpy as np

from benchmarks._common import backends, unit_rows
from benchmarks.latency import TableEmbedder, _fact, _vocab


def _model_class():  # noqa: ANN202
    from adk_memory.testing.models import ScriptedMemoryModel

    class TimedModel(ScriptedMemoryModel):
        model_ms: float = 0.0
        prompt_tokens: int = 0

        async def generate_content_async(self, llm_request, stream=False):  # noqa: ANN001, ANN201
            started = time.perf_counter()
            async for response in super().generate_content_async(llm_request, stream):
                self.prompt_tokens += response.usage_metadata.prompt_token_count or 0
                self.model_ms += (time.perf_counter() - started) * 1000
                yield response
                started = time.perf_counter()
            self.model_ms += (time.perf_counter() - started) * 1000

    return TimedModel


class StoreClock:
    """Forwards to a store, counting its calls and the wall time while at least one runs."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls = 0
        self.ms = 0.0
        self._running = 0
        self._since = 0.0

    def __getattr__(self, name: str) -> Any:
        target = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(target):
            return target

        async def timed(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if not self._running:
                self._since = time.perf_counter()
            self._running += 1
            try:
                return await target(*args, **kwargs)
            finally:
                self._running -= 1
                if not self._running:
                    self.ms += (time.perf_counter() - self._since) * 1000

        return timed


async def _case(
    backend: str,
    store: StoreClock,
    facts_per_request: int,
    existing: int,
    requests: int,
    embedder: TableEmbedder,
    rng: np.random.Generator,
    vocab: list[str],
) -> dict[str, Any]:
    from adk_memory import AsyncClient
    from adk_memory.engine.context import utc_now
    from adk_memory.scope import scope_key
    from adk_memory.store import MemoryRecord, WriteBatch

    model = _model_class()(
        consolidate=lambda request: {
            "actions": [{"fact_index": i, "action": "CREATE"} for i in range(facts_per_request)]
        }
    )
    client = AsyncClient(store=store, run_scheduler=False, generation_model=model)  # type: ignore[arg-type]
    try:
        bank = await client.memory_banks.create()
        bank_id = bank.name.rsplit("/", 1)[-1]
        scope = {"user_id": "u1"}
        if existing:
            vecs = unit_rows(rng, existing)
            now = utc_now()
            await client.engine.context.store.apply(
                bank_id,
                WriteBatch(
                    inserts=tuple(
                        MemoryRecord(
                            memory_id=f"e{i:06d}",
                            scope_key=scope_key(scope),
                            scope=scope,
                            fact=_fact(rng, vocab, i),
                            embedding=tuple(vecs[i].tolist()),
                            create_time=now,
                            update_time=now,
                        )
                        for i in range(existing)
                    )
                ),
            )
        wall, engine_ms, store_ms, store_calls, calls, tokens = [], [], [], [], [], []
        for r in range(requests + 2):
            facts = [_fact(rng, vocab, 10_000 * r + i) for i in range(facts_per_request)]
            for f, v in zip(facts, unit_rows(rng, len(facts)), strict=True):
                embedder.table[f] = tuple(v.tolist())
            model.extractions.append(
                {"memories": [{"fact": f, "topics": ["USER_PREFERENCES"]} for f in facts]}
            )
            model.model_ms, model.prompt_tokens, before = 0.0, 0, len(model.requests)
            store.ms, store.calls = 0.0, 0
            conversation = " ".join(facts)
            started = time.perf_counter()
            await client.memory_banks.memories.generate(
                name=bank.name,
                scope=scope,
                direct_contents_source={
                    "events": [{"content": {"role": "user", "parts": [{"text": conversation}]}}]
                },
            )
            total = (time.perf_counter() - started) * 1000
            if r < 2:
                continue  # warm-up
            wall.append(total)
            engine_ms.append(total - model.model_ms)
            store_ms.append(store.ms)
            store_calls.append(store.calls)
            calls.append(len(model.requests) - before)
            tokens.append(model.prompt_tokens)
    finally:
        await client.aclose()
    return {
        "backend": backend,
        "facts": facts_per_request,
        "existing": existing,
        "engine_ms_p50": round(statistics.median(engine_ms), 2),
        "engine_ms_max": round(max(engine_ms), 2),
        "store_ms_p50": round(statistics.median(store_ms), 2),
        "store_calls": statistics.fmean(store_calls),
        "wall_ms_p50": round(statistics.median(wall), 2),
        "llm_calls": statistics.fmean(calls),
        "prompt_tokens": round(statistics.fmean(tokens)),
        "candidates": min(5 * facts_per_request, 25, existing),
        "n": len(wall),
    }


def run(facts: list[int], existing: list[int], requests: int, log: Any = print) -> list[dict]:
    from adk_memory._registry import store_from_uri
    from benchmarks import _cache

    rng = np.random.default_rng(5)
    vocab = _vocab(rng)
    embedder = TableEmbedder()
    _cache.install({"all-MiniLM-L6-v2": embedder})  # type: ignore[dict-item]
    rows = []
    with backends(need_redis=True) as where:
        cases = [("memory", f, m) for m in existing for f in facts]
        if where.redis_url:  # store calls are round trips there: concurrency and counts show
            cases += [("redis-flat", f, max(existing)) for f in facts]
        for backend, f, m in cases:
            uri, options = where.uri(backend, uuid.uuid4().hex[:8])
            store = StoreClock(store_from_uri(uri, **options))
            row = asyncio.run(_case(backend, store, f, m, requests, embedder, rng, vocab))
            log(
                f"  generate ({backend}): {f} facts, {m} existing: engine "
                f"{row['engine_ms_p50']} ms (store {row['store_ms_p50']} ms, "
                f"{row['store_calls']:.0f} calls), {row['llm_calls']} LLM calls, "
                f"{row['prompt_tokens']} prompt tokens"
            )
            rows.append(row)
    return rows
