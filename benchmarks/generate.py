"""3. Generation cost with the scripted model (`adk_memory.testing.models.ScriptedMemoryModel`).

Each request sends a short conversation through `memories.generate(direct_contents_source=…)`
on `memory://`; the scripted model "extracts" F facts and answers consolidation with one CREATE
per fact. The scope already holds M memories, so consolidation is offered up to
min(5 F, 25, M) candidates (the engine's CANDIDATES_PER_FACT and MAX_CANDIDATES). Measured per
request: wall time, time inside the model (subtracted: "engine overhead excluding model time";
fact embeddings are served from a table, so embedding is excluded too), LLM calls, and prompt
tokens (characters / 4, the scripted model's count).
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

import numpy as np

from benchmarks._common import unit_rows
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


async def _case(
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
    client = AsyncClient("memory://", run_scheduler=False, generation_model=model)
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
        wall, engine_ms, calls, tokens = [], [], [], []
        for r in range(requests + 2):
            facts = [_fact(rng, vocab, 10_000 * r + i) for i in range(facts_per_request)]
            for f, v in zip(facts, unit_rows(rng, len(facts)), strict=True):
                embedder.table[f] = tuple(v.tolist())
            model.extractions.append(
                {"memories": [{"fact": f, "topics": ["USER_PREFERENCES"]} for f in facts]}
            )
            model.model_ms, model.prompt_tokens, before = 0.0, 0, len(model.requests)
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
            calls.append(len(model.requests) - before)
            tokens.append(model.prompt_tokens)
    finally:
        await client.aclose()
    return {
        "facts": facts_per_request,
        "existing": existing,
        "engine_ms_p50": round(statistics.median(engine_ms), 2),
        "engine_ms_max": round(max(engine_ms), 2),
        "wall_ms_p50": round(statistics.median(wall), 2),
        "llm_calls": statistics.fmean(calls),
        "prompt_tokens": round(statistics.fmean(tokens)),
        "candidates": min(5 * facts_per_request, 25, existing),
        "n": len(wall),
    }


def run(facts: list[int], existing: list[int], requests: int, log: Any = print) -> list[dict]:
    from benchmarks import _cache

    rng = np.random.default_rng(5)
    vocab = _vocab(rng)
    embedder = TableEmbedder()
    _cache.install({"all-MiniLM-L6-v2": embedder})  # type: ignore[dict-item]
    rows = []
    for m in existing:
        for f in facts:
            row = asyncio.run(_case(f, m, requests, embedder, rng, vocab))
            log(
                f"  generate: {f} facts, {m} existing: engine {row['engine_ms_p50']} ms, "
                f"{row['llm_calls']} calls, {row['prompt_tokens']} prompt tokens"
            )
            rows.append(row)
    return rows
