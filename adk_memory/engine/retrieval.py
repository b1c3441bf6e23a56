"""RetrieveMemories: similarity search, retrieve-all and simple retrieval within one exact scope.

Filters apply before top-k (SPEC §3): the part the store declared it can run is pushed into its
query; the rest is evaluated here, over-fetching until `top_k` memories survive or the scope is
exhausted. The cost of one similarity retrieve is one query embedding (cached per text), one bank
read and, without a residual filter, one nearest query.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from adk_memory import types
from adk_memory.engine.context import EngineContext
from adk_memory.engine.lexical_cache import LexicalCache, ScopeIndex
from adk_memory.engine.memories import MemoryOps
from adk_memory.engine.paging import Page
from adk_memory.engine.profiles import PROFILE_TYPE
from adk_memory.errors import InvalidArgument
from adk_memory.extensions import RetrievalConfig
from adk_memory.filters import (
    FilterExpr,
    combine,
    from_filter_groups,
    matches,
    parse_filter,
    partition,
)
from adk_memory.lexical import Corpus, best
from adk_memory.scope import ScopeKey, profile_scope_key, scope_key, validate_scope
from adk_memory.store import MemoryRecord, NearestQuery, ScanQuery, ScoredRecord, SortKey

__all__ = ["DEFAULT_TOP_K", "MAX_TOP_K", "Retrieval", "Retrieved"]

DEFAULT_TOP_K = 3
MAX_TOP_K = 100
DEFAULT_PAGE_SIZE = 3
RETRIEVE_ALL_LIMIT = 100
MAX_SCAN = 1_000_000
_MAX_SEARCH_QUERY = 10_000
_NL_TYPES = {"NATURAL_LANGUAGE_COLLECTION", "MEMORY_TYPE_UNSPECIFIED"}
_RETRIEVE_ORDER = (SortKey("update_time", descending=True),)
_LEXICAL_CACHE = LexicalCache()
"""The process's scope indexes for hybrid retrieval, shared by every engine (see its module)."""


@dataclass(frozen=True, slots=True)
class Retrieved:
    """A retrieved memory; `distance` is set only for similarity search."""

    record: MemoryRecord
    distance: float | None


class Retrieval:
    """The retrieve half of the engine."""

    def __init__(self, context: EngineContext, memories: MemoryOps) -> None:
        self._context = context
        self._memories = memories

    async def retrieve(
        self,
        bank_id: str,
        *,
        scope: Any,
        similarity_search_params: types.RetrieveMemoriesRequestSimilaritySearchParams | None,
        simple_retrieval_params: types.RetrieveMemoriesRequestSimpleRetrievalParams | None,
        config: types.RetrieveMemoriesConfig,
    ) -> Page[Retrieved]:
        """Memories of exactly `scope`, by similarity or by recency."""
        checked = validate_scope(scope)
        if similarity_search_params is not None and simple_retrieval_params is not None:
            raise InvalidArgument(
                "Set at most one of similarity_search_params and simple_retrieval_params.",
                field="similarity_search_params",
            )
        expr = combine(parse_filter(config.filter or ""), from_filter_groups(config.filter_groups))
        keys = _scope_keys_for(checked, config.memory_types)
        bank = await self._context.load_bank(bank_id)
        now = self._context.clock()
        if similarity_search_params is not None:
            top_k = _top_k(similarity_search_params.top_k)
            vector = await bank.embedder.embed_query(
                _search_query(similarity_search_params.search_query)
            )
            retrieval = bank.extensions.retrieval
            if retrieval.mode == "hybrid":
                query_text = _search_query(similarity_search_params.search_query)
                fused = await self._hybrid(
                    bank_id, keys, query_text, vector, top_k, expr, now, retrieval
                )
                return Page(fused, None)
            hits = [
                hit
                for key in keys
                for hit in await self._nearest(bank_id, NearestQuery(key, vector, top_k, now), expr)
            ]
            hits.sort(key=lambda hit: (hit.distance, hit.record.memory_id))
            return Page([Retrieved(hit.record, hit.distance) for hit in hits[:top_k]], None)
        if simple_retrieval_params is None:
            page_size, token = RETRIEVE_ALL_LIMIT, None
        else:
            size = simple_retrieval_params.page_size
            if size is not None and size < 0:
                raise InvalidArgument(
                    "simple_retrieval_params.page_size must not be negative.",
                    field="simple_retrieval_params.page_size",
                )
            page_size = min(size or DEFAULT_PAGE_SIZE, MAX_TOP_K)
            token = simple_retrieval_params.page_token
        # Retrieve-all and simple retrieval share one listing: a retrieve-all token continues
        # as simple_retrieval_params.page_token (the request has no other place for it).
        queries = [ScanQuery(now=now, scope_key=key, order_by=_RETRIEVE_ORDER) for key in keys]
        page = await self._memories.scan_page(bank_id, queries, expr, page_size, token)
        return Page([Retrieved(record, None) for record in page.items], page.next_page_token)

    async def _hybrid(
        self,
        bank_id: str,
        keys: list[ScopeKey],
        query_text: str,
        vector: tuple[float, ...],
        top_k: int,
        expr: FilterExpr | None,
        now: datetime,
        config: RetrievalConfig,
    ) -> list[Retrieved]:
        """Dense and BM25 rankings of the scope fused as `config.fusion` says (extension).

        Cost: the dense query, the scope's BM25 index (one version read when the process's
        cached index is current, else one scan of the scope; with a filter, one filtered scan),
        scoring over the postings of the query's terms (with RM3 feedback, two passes), and one
        read of the vectors of lexical-only hits for their true distance.
        """
        dense: list[ScoredRecord] = []
        indexes: list[ScopeIndex] = []
        for key in keys:
            dense += await self._nearest(
                bank_id, NearestQuery(key, vector, config.candidates, now), expr
            )
            indexes.append(await self._scope_index(bank_id, key, expr, now))
        dense.sort(key=lambda hit: (hit.distance, hit.record.memory_id))
        corpus = Corpus([(index.lexical, index.expired(now)) for index in indexes])
        scores = corpus.bm25(
            query_text, feedback_docs=config.feedback_docs, feedback_terms=config.feedback_terms
        )
        ids = _concatenated([index.memory_ids for index in indexes])
        lexical = [
            (float(scores[position]), ids[position])
            for position in best(scores, config.candidates, ids.__getitem__)
        ]
        found = {
            hit.record.memory_id: (hit.record, hit.distance) for hit in dense[: config.candidates]
        }
        missing = [memory_id for _, memory_id in lexical if memory_id not in found]
        target = np.asarray(vector, dtype=np.float64)
        for record in await self._context.store.get_memories(bank_id, missing, now):
            gap = np.asarray(record.embedding, dtype=np.float64) - target
            found[record.memory_id] = (record, float(np.linalg.norm(gap)))
        lexical_score = {memory_id: score for score, memory_id in lexical}
        fused = _fuse(found, lexical_score, [hit.record.memory_id for hit in dense], config)
        chosen = sorted(fused, key=lambda memory_id: (-fused[memory_id], memory_id))[:top_k]
        return [Retrieved(*found[memory_id]) for memory_id in chosen]

    async def _scope_index(
        self, bank_id: str, key: ScopeKey, expr: FilterExpr | None, now: datetime
    ) -> ScopeIndex:
        """The BM25 index of the scope's live memories matching `expr`, at `now`.

        Without a filter, the process's cached index (checked by the scope's version); with
        one, an index of the filtered scan, built for this query only.
        """

        async def scan() -> list[MemoryRecord]:
            query = ScanQuery(now=now, scope_key=key, order_by=_RETRIEVE_ORDER)
            return (await self._memories.scan_page(bank_id, query, expr, MAX_SCAN, None)).items

        if expr is not None:
            return ScopeIndex.of(await scan(), None, now)
        store = self._context.store
        return await _LEXICAL_CACHE.scope_index(store, bank_id, key, now, scan)

    async def _nearest(
        self, bank_id: str, query: NearestQuery, expr: FilterExpr | None
    ) -> list[ScoredRecord]:
        pushed, residual = partition(expr, self._context.store.capabilities.pushdown)
        query = replace(query, filter=pushed)
        if residual is None:
            return await self._context.store.nearest(bank_id, query)
        fetch = max(query.k * 4, 32)
        while True:
            hits = await self._context.store.nearest(bank_id, replace(query, k=fetch))
            survivors = [hit for hit in hits if matches(residual, hit.record)]
            if len(survivors) >= query.k or len(hits) < fetch:
                return survivors[: query.k]
            fetch *= 4


def _fuse(
    found: dict[str, tuple[MemoryRecord, float]],
    lexical: dict[str, float],
    dense_order: list[str],
    config: RetrievalConfig,
) -> dict[str, float]:
    """The fused score of every candidate (higher is better)."""
    weight = config.lexical_weight
    if config.fusion == "rrf":
        fused = {
            memory_id: (1 - weight) / (config.rrf_k + rank + 1)
            for rank, memory_id in enumerate(dense_order[: config.candidates])
        }
        for rank, memory_id in enumerate(sorted(lexical, key=lambda key: (-lexical[key], key))):
            fused[memory_id] = fused.get(memory_id, 0.0) + weight / (config.rrf_k + rank + 1)
        return {memory_id: score for memory_id, score in fused.items() if memory_id in found}
    closeness = {memory_id: -distance for memory_id, (_, distance) in found.items()}
    dense_norm = _min_max(closeness)
    lexical_norm = _min_max({memory_id: lexical.get(memory_id, 0.0) for memory_id in found})
    return {
        memory_id: (1 - weight) * dense_norm[memory_id] + weight * lexical_norm[memory_id]
        for memory_id in found
    }


def _concatenated(parts: list[tuple[str, ...]]) -> Sequence[str]:
    """The parts one after another (the only one itself: a scope has 10,000 ids, say)."""
    return parts[0] if len(parts) == 1 else tuple(itertools.chain.from_iterable(parts))


def _min_max(scores: dict[str, float]) -> dict[str, float]:
    low, high = min(scores.values(), default=0.0), max(scores.values(), default=0.0)
    span = high - low or 1.0
    return {key: (value - low) / span for key, value in scores.items()}


def _top_k(value: int | None) -> int:
    if value is None:
        return DEFAULT_TOP_K
    if value <= 0:
        raise InvalidArgument(
            f"similarity_search_params.top_k must be positive (got {value}); omit it for 3.",
            field="similarity_search_params.top_k",
        )
    return min(value, MAX_TOP_K)


def _search_query(text: str | None) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(
            "similarity_search_params.search_query must be a non-empty string.",
            field="similarity_search_params.search_query",
        )
    if len(text) > _MAX_SEARCH_QUERY:
        raise InvalidArgument(
            f"similarity_search_params.search_query is limited to {_MAX_SEARCH_QUERY} characters.",
            field="similarity_search_params.search_query",
        )
    return text


def _scope_keys_for(scope: dict[str, str], memory_types: list[Any] | None) -> list[ScopeKey]:
    """The scope keys to read: natural-language memories by default, profiles when asked."""
    names = {str(getattr(kind, "value", kind)).upper() for kind in memory_types or ()}
    unknown = names - {*_NL_TYPES, PROFILE_TYPE} - {"NONE"}
    if unknown:
        raise InvalidArgument(
            f"config.memory_types has unknown types {sorted(unknown)}; use "
            "NATURAL_LANGUAGE_COLLECTION and/or STRUCTURED_PROFILE.",
            field="config.memory_types",
        )
    keys = []
    if not names or names & _NL_TYPES:
        keys.append(scope_key(scope))
    if PROFILE_TYPE in names:
        keys.append(profile_scope_key(scope))
    return keys
