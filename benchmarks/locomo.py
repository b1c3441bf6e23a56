"""4. Retrieval quality on LoCoMo, through the real engine.

Protocol (as in /work/shared/ENVIRONMENT.md): one memory per dialogue turn, text
"[session date] speaker: text", one scope per conversation ({"conversation": sample_id}); each
question of categories 1-4 retrieves the top 10 of its scope; recall@k is the share of the
question's evidence turns among the first k results, averaged over questions (overall and per
category). Questions whose evidence names no existing turn are dropped (the count is reported).

Modes, all computed in the same run on the same turns and questions:

* `dense`  a bank of each model (all-MiniLM-L6-v2, the default; multilingual-e5-small),
           `memories.retrieve(top_k=10)`;
* `hybrid` a bank created with `extensions={"retrieval": {"mode": "hybrid"}}` (defaults: convex
           fusion, lexical_weight 0.5, 100+100 candidates, RM3 feedback from 3 documents with
           20 terms), the same without RM3, and (with --full) a few settings around it;
* `bm25`   adk_memory.lexical.bm25_scores over the scope's turns (k1 0.9, b 0.4), no engine,
           without and with RM3 feedback;
* `adk-sqlite`, `adk-inmemory` ADK's SqliteMemoryService (FTS5 bm25) and InMemoryMemoryService,
           one event per turn, one user per conversation; `search_memory` results in their order.

Besides the whole set, every mode is scored on two halves split by conversation: `dev`
(conversations 0-4 of the file) and `test` (5-9). The defaults of the lexical side and of the
fusion were chosen on `dev` only (benchmarks/NOTES.md lists the variants tried); `test` is the
held-out figure.

Embeddings are computed once per model with the bank's own embedder and cached in
`benchmarks/.cache/` (see `_cache.py`); the engine is then fed the cached vectors by an
`Embedder`, so the run measures retrieval, not re-embedding.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from typing import Any

from benchmarks import _cache, _locomo

KS = (1, 5, 10)
DEV_CONVERSATIONS = 5
"""The first five conversations are the dev half the defaults were chosen on; the rest, test."""


def _memory_id(conv: str, dia_id: str) -> str:
    return f"{conv}-{dia_id}".lower().replace(":", "-").replace("_", "-")


def _halves(questions: list[_locomo.Question]) -> dict[str, str]:
    """Conversation -> "dev" or "test", by order of first appearance in the file."""
    order = list(dict.fromkeys(q.conv for q in questions))
    return {conv: "dev" if i < DEV_CONVERSATIONS else "test" for i, conv in enumerate(order)}


def _score(questions: list[_locomo.Question], ranked: list[list[str]]) -> dict[str, Any]:
    sums: dict[str, dict[int, float]] = defaultdict(lambda: dict.fromkeys(KS, 0.0))
    counts: dict[str, int] = defaultdict(int)
    half = _halves(questions)
    for q, ids in zip(questions, ranked, strict=True):
        for group in ("all", half[q.conv], _locomo.CATEGORIES[q.category]):
            counts[group] += 1
            for k in KS:
                sums[group][k] += len(q.evidence & set(ids[:k])) / len(q.evidence)
    return {
        group: {f"R@{k}": round(sums[group][k] / counts[group], 3) for k in KS}
        | {"n": counts[group]}
        for group in counts
    }


async def _engine_mode(turns, questions, model: str, dimension: int, extensions, log) -> tuple:
    from adk_memory import AsyncClient

    embedder = _cache.CachedEmbedder(model, dimension)
    _cache.install({embedder.model: embedder})
    client = AsyncClient("memory://", run_scheduler=False, embedding_model=embedder.model)
    try:
        create: dict[str, Any] = {}
        if extensions:
            create["extensions"] = extensions
        bank = await client.memory_banks.create(**create)
        started = time.perf_counter()
        for t in turns:
            await client.memory_banks.memories.create(
                name=bank.name,
                fact=t.text,
                scope={"conversation": t.conv},
                config={"memory_id": _memory_id(t.conv, t.dia_id)},
            )
        load_s = time.perf_counter() - started
        by_id = {_memory_id(t.conv, t.dia_id): t.dia_id for t in turns}
        ranked = []
        started = time.perf_counter()
        for q in questions:
            hits = await client.memory_banks.memories.retrieve(
                name=bank.name,
                scope={"conversation": q.conv},
                similarity_search_params={"search_query": q.text, "top_k": 10},
            )
            ranked.append([by_id[h.memory.name.rsplit("/", 1)[-1]] for h in hits])
        query_s = time.perf_counter() - started
    finally:
        await client.aclose()
    return ranked, {
        "load_s": round(load_s, 1),
        "query_ms": round(query_s * 1000 / len(questions), 2),
        "embed_misses": embedder.misses,
    }


def _bm25(turns, questions, feedback_docs: int = 0) -> list[list[str]]:
    from adk_memory.lexical import bm25_scores

    by_conv: dict[str, list[_locomo.Turn]] = defaultdict(list)
    for t in turns:
        by_conv[t.conv].append(t)
    ranked = []
    for q in questions:
        pool = by_conv[q.conv]
        scores = bm25_scores(q.text, [t.text for t in pool], feedback_docs=feedback_docs)
        order = sorted(range(len(pool)), key=lambda i: (-scores[i], i))
        ranked.append([pool[i].dia_id for i in order[:10] if scores[i] > 0])
    return ranked


async def _adk(kind: str, turns, questions, tmp: str) -> list[list[str]]:
    from google.adk.events import Event
    from google.adk.memory import InMemoryMemoryService
    from google.adk.memory._sqlite_memory_service import SqliteMemoryService
    from google.genai import types as gt

    service = (
        SqliteMemoryService(f"{tmp}/locomo-adk.db")
        if kind == "adk-sqlite"
        else InMemoryMemoryService()
    )
    by_conv: dict[str, list[Event]] = defaultdict(list)
    for i, t in enumerate(turns):
        by_conv[t.conv].append(
            Event(
                id=f"{t.conv}|{t.dia_id}",
                author="user",
                timestamp=float(i),
                content=gt.Content(role="user", parts=[gt.Part(text=t.text)]),
            )
        )
    for conv, events in by_conv.items():
        await service.add_events_to_memory(app_name="locomo", user_id=conv, events=events)
    ranked = []
    for q in questions:
        found = await service.search_memory(app_name="locomo", user_id=q.conv, query=q.text)
        ids = [(m.custom_metadata or {}).get("event_id") or m.id or "" for m in found.memories]
        ranked.append([i.split("|", 1)[1] for i in ids if "|" in i][:10])
    if hasattr(service, "close"):
        await service.close()
    return ranked


HYBRID_VARIANTS = [
    ("hybrid", {"mode": "hybrid"}),
    ("hybrid no RM3", {"mode": "hybrid", "feedback_docs": 0}),
    ("hybrid w=0.3", {"mode": "hybrid", "lexical_weight": 0.3}),
    ("hybrid w=0.7", {"mode": "hybrid", "lexical_weight": 0.7}),
    ("hybrid rrf", {"mode": "hybrid", "fusion": "rrf"}),
]


def run(
    tmp: str, models: list[tuple[str, str, int]], variants: bool = True, log: Any = print
) -> dict[str, Any]:
    """`models`: (bank model name [@runtime], sentence-transformers source, dimension)."""
    turns, questions = _locomo.load()
    out: dict[str, Any] = {"turns": len(turns), "questions": len(questions), "modes": {}}
    out["dropped_questions"] = _count_dropped()
    for model, source, dimension in models:
        log(f"  locomo: caching {model} vectors for {len(turns) + len(questions)} texts")
        spent = _cache.fill(
            model, source, [q.text for q in questions], kind="query", log=lambda m: None
        ) + _cache.fill(model, source, [t.text for t in turns], kind="passage", log=lambda m: None)
        if spent:
            log(f"    embedded the missing texts in {spent:.0f} s")
        short = {
            "all-MiniLM-L6-v2@openvino": "MiniLM",
            "all-MiniLM-L6-v2@sentence-transformers": "MiniLM on sentence-transformers",
            "multilingual-e5-small": "e5",
        }.get(model, model.split("/")[-1])
        chosen = HYBRID_VARIANTS if variants else HYBRID_VARIANTS[:2]
        for label, ext in [("dense", None), *chosen]:
            name = f"{label} ({short})"
            log(f"  locomo: {name}")
            ranked, info = asyncio.run(
                _engine_mode(
                    turns, questions, model, dimension, {"retrieval": ext} if ext else None, log
                )
            )
            out["modes"][name] = _score(questions, ranked) | {"info": info}
            log(f"    R@5 {out['modes'][name]['all']['R@5']}  ({info})")
    log("  locomo: bm25")
    out["modes"]["bm25 (adk_memory.lexical)"] = _score(questions, _bm25(turns, questions))
    out["modes"]["bm25+RM3 (adk_memory.lexical)"] = _score(
        questions, _bm25(turns, questions, feedback_docs=3)
    )
    for kind in ("adk-sqlite", "adk-inmemory"):
        log(f"  locomo: {kind}")
        out["modes"][kind] = _score(questions, asyncio.run(_adk(kind, turns, questions, tmp)))
    for name, scores in out["modes"].items():
        log(
            f"    {name:32s} R@1 {scores['all']['R@1']} R@5 {scores['all']['R@5']} "
            f"R@10 {scores['all']['R@10']} (R@5 dev {scores['dev']['R@5']}, "
            f"test {scores['test']['R@5']})"
        )
    return out


def _count_dropped() -> int:
    import json

    data = json.loads(_locomo.DEFAULT_PATH.read_text())
    total = sum(1 for s in data for qa in s["qa"] if qa.get("category") in _locomo.CATEGORIES)
    return total - len(_locomo.load()[1])
