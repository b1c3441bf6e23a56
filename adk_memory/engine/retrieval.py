"""RetrieveMemories: similarity search, retrieve-all and simple retrieval within one exact scope.

Filters apply before top-k (SPEC §3): the part the store declared it can run is pushed into its
query; the rest is evaluated here, over-fetching until `top_k` memories survive or the scope is
exhausted. The cost of one similarity retrieve is one query embedding (cached per text), one bank
read and, without a residual filter, one nearest query.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Awaitable, Callable, Sequence
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
from adk_memory.vectors import exact_distances

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

        Cost, when the process's cached index of each scope is current (one version read each):
        exact dense ranking over the cached vectors, BM25 over the postings of the query's terms
        (with RM3 feedback, two passes), fusion, and one read of the `top_k` records returned;
        a filter that is not metadata equalities, new to that version, adds the ids it keeps
        (from the store, else a filtered scan) and a second version read.
        Otherwise (a scope written since, a store without versions) one scan of the scope, the
        store's nearest query and one read of the vectors of lexical-only hits.
        """
        indexes = [await self._scope_index(bank_id, key, expr, now) for key in keys]
        lexical = _lexical_ranking(indexes, query_text, now, config)
        if all(_ranks_dense(index, vector) for index in indexes):
            fused = await self._hybrid_cached(
                bank_id, keys, indexes, lexical, vector, top_k, expr, now
            )
            if fused is not None:
                return fused
        return await self._hybrid_scanned(bank_id, keys, lexical, vector, top_k, expr, now)

    async def _hybrid_cached(
        self,
        bank_id: str,
        keys: list[ScopeKey],
        indexes: list[ScopeIndex],
        lexical: _LexicalRanking,
        vector: tuple[float, ...],
        top_k: int,
        expr: FilterExpr | None,
        now: datetime,
    ) -> list[Retrieved] | None:
        """The fusion ranked from the cached indexes; None if a returned record changed since."""
        config = lexical.config
        distance_of, dense_order, rows = _cached_distances(indexes, lexical, vector, now)
        chosen = _fused_order(distance_of, lexical.scores, dense_order, config)[:top_k]
        records = await self._context.store.get_memories(bank_id, chosen, now)
        if len(records) != len(chosen):
            return None  # deleted or expired since the version read
        for record in records:
            part, row = rows[record.memory_id]
            vectors = indexes[part].vectors
            assert vectors is not None
            same = np.array_equal(np.asarray(record.embedding), vectors.matrix[row])
            if record.scope_key != keys[part] or not same or not matches(expr, record):
                return None  # rewritten since the version read: its ranking is stale
        return [Retrieved(record, distance_of[record.memory_id]) for record in records]

    async def _hybrid_scanned(
        self,
        bank_id: str,
        keys: list[ScopeKey],
        lexical: _LexicalRanking,
        vector: tuple[float, ...],
        top_k: int,
        expr: FilterExpr | None,
        now: datetime,
    ) -> list[Retrieved]:
        """The fusion with the store's nearest query as the dense side."""
        config = lexical.config
        dense: list[ScoredRecord] = []
        for key in keys:
            dense += await self._nearest(
                bank_id, NearestQuery(key, vector, config.candidates, now), expr
            )
        dense.sort(key=lambda hit: (hit.distance, hit.record.memory_id))
        found = {
            hit.record.memory_id: (hit.record, hit.distance) for hit in dense[: config.candidates]
        }
        missing = [memory_id for memory_id in lexical.scores if memory_id not in found]
        target = np.asarray(vector, dtype=np.float64)
        for record in await self._context.store.get_memories(bank_id, missing, now):
            part, _ = lexical.rows[record.memory_id]
            if record.scope_key != keys[part] or not matches(expr, record):
                continue  # changed (its id now another scope's) since the index was read
            distance = exact_distances(np.asarray([record.embedding]), target)[0]
            found[record.memory_id] = (record, float(distance))
        distance_of = {memory_id: distance for memory_id, (_, distance) in found.items()}
        dense_order = [hit.record.memory_id for hit in dense]
        chosen = _fused_order(distance_of, lexical.scores, dense_order, config)[:top_k]
        return [Retrieved(*found[memory_id]) for memory_id in chosen]

    async def _scope_index(
        self, bank_id: str, key: ScopeKey, expr: FilterExpr | None, now: datetime
    ) -> ScopeIndex:
        """The index of the scope's live memories matching `expr`, at `now`.

        The process's cached index (checked by the scope's version, with vectors); with a
        filter, its view of the matches: evaluated by the index itself for metadata
        equalities, else restricted to the ids that match (`_matching_ids`: no records read
        where the store can say) if the scope's version is the same after that (so no write
        came in between). The cached index remembers its views, so the same filter at the same
        version costs no more than no filter. A store without versions, or a scope written
        meanwhile: an index of the filtered scan, built for this query only.
        """
        store = self._context.store

        async def scan(with_vectors: bool, expr: FilterExpr | None = None) -> list[MemoryRecord]:
            query = ScanQuery(now=now, scope_key=key, order_by=_RETRIEVE_ORDER)
            records = (await self._memories.scan_page(bank_id, query, expr, MAX_SCAN, None)).items
            if not with_vectors or all(record.embedding for record in records):
                return records
            # A scan may leave vectors out (store contract): read the scope's records again
            # with them. Those written since are newer than the version read before the scan.
            ids = [record.memory_id for record in records]
            found = await store.get_memories(bank_id, ids, now)
            return [record for record in found if record.scope_key == key]

        version = await store.scope_version(bank_id, key)
        if version is None:
            return ScopeIndex.of(await scan(False, expr), None, now)
        index = await _LEXICAL_CACHE.scope_index(
            store, bank_id, key, version, now, lambda: scan(True)
        )
        if expr is None:
            return index
        # repr tells apart values that compare equal but match differently (True, 1.0).
        filter_key = repr(expr)
        known = index.view(filter_key, now) or index.filtered(filter_key, expr)
        if known is not None:
            return known
        matching = await self._matching_ids(bank_id, key, expr, scan)
        if index.version == await store.scope_version(bank_id, key):
            return index.restricted(filter_key, matching, now)
        return ScopeIndex.of(await scan(False, expr), None, now)  # written meanwhile

    async def _matching_ids(
        self,
        bank_id: str,
        key: ScopeKey,
        expr: FilterExpr,
        scan: Callable[[bool, FilterExpr], Awaitable[list[MemoryRecord]]],
    ) -> frozenset[str]:
        """Ids of the scope's memories matching `expr` (expired ones possibly included).

        Asked of the store (ids only) when it evaluates the whole filter and can say; else
        those of a filtered scan.
        """
        store = self._context.store
        pushed, residual = partition(expr, store.capabilities.pushdown)
        if residual is None and pushed is not None:
            found = await store.matching_ids(bank_id, key, pushed)
            if found is not None:
                return found
        return frozenset(record.memory_id for record in await scan(False, expr))

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


@dataclass(frozen=True, slots=True)
class _LexicalRanking:
    """The BM25 candidates of a query over the scopes' indexes."""

    config: RetrievalConfig
    scores: dict[str, float]
    """Memory id -> BM25 score of the `config.candidates` best (positive) documents."""
    rows: dict[str, tuple[int, int]]
    """Memory id -> (index, row) of each of them."""


def _lexical_ranking(
    indexes: list[ScopeIndex], query_text: str, now: datetime, config: RetrievalConfig
) -> _LexicalRanking:
    corpus = Corpus([(index.lexical, index.live(now)) for index in indexes])
    scores = corpus.bm25(
        query_text, feedback_docs=config.feedback_docs, feedback_terms=config.feedback_terms
    )
    ids = _concatenated([index.memory_ids for index in indexes])
    starts = list(itertools.accumulate((len(index.memory_ids) for index in indexes), initial=0))
    ranked: dict[str, float] = {}
    rows: dict[str, tuple[int, int]] = {}
    for position in best(scores, config.candidates, ids.__getitem__):
        part = bisect.bisect_right(starts, position) - 1
        ranked[ids[position]] = float(scores[position])
        rows[ids[position]] = (part, position - starts[part])
    return _LexicalRanking(config, ranked, rows)


def _cached_distances(
    indexes: list[ScopeIndex],
    lexical: _LexicalRanking,
    vector: tuple[float, ...],
    now: datetime,
) -> tuple[dict[str, float], list[str], dict[str, tuple[int, int]]]:
    """The true distances of the dense and lexical candidates, from the cached vectors.

    Returns:
        The distance of each candidate, the dense order, and each candidate's (index, row).
    """
    target = np.asarray(vector, dtype=np.float64)
    dense: list[tuple[float, str]] = []
    rows = dict(lexical.rows)
    for part, index in enumerate(indexes):
        assert index.vectors is not None
        found, distances = index.vectors.nearest(target, index.live(now), lexical.config.candidates)
        for row, distance in zip(found.tolist(), distances.tolist(), strict=True):
            dense.append((distance, index.memory_ids[row]))
            rows[index.memory_ids[row]] = (part, row)
    dense.sort()
    distance_of = {
        memory_id: distance for distance, memory_id in dense[: lexical.config.candidates]
    }
    for part, index in enumerate(indexes):
        assert index.vectors is not None
        lexical_only = [
            memory_id
            for memory_id, (at, _) in lexical.rows.items()
            if at == part and memory_id not in distance_of
        ]
        if not lexical_only:
            continue
        matrix = index.vectors.matrix[[lexical.rows[memory_id][1] for memory_id in lexical_only]]
        distances = exact_distances(matrix, target).tolist()
        distance_of.update(zip(lexical_only, distances, strict=True))
    return distance_of, [memory_id for _, memory_id in dense], rows


def _ranks_dense(index: ScopeIndex, vector: tuple[float, ...]) -> bool:
    """Whether the index's own vectors can rank the dense side for `vector`."""
    vectors = index.vectors
    return vectors is not None and (not vectors.ids or vectors.dimensions == len(vector))


def _fused_order(
    distances: dict[str, float],
    lexical: dict[str, float],
    dense_order: list[str],
    config: RetrievalConfig,
) -> list[str]:
    """The candidates with a distance, best fused score first (ties by memory id)."""
    fused = _fuse(distances, lexical, dense_order, config)
    return sorted(fused, key=lambda memory_id: (-fused[memory_id], memory_id))


def _fuse(
    distances: dict[str, float],
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
        return {memory_id: score for memory_id, score in fused.items() if memory_id in distances}
    closeness = {memory_id: -distance for memory_id, distance in distances.items()}
    dense_norm = _min_max(closeness)
    lexical_norm = _min_max({memory_id: lexical.get(memory_id, 0.0) for memory_id in distances})
    return {
        memory_id: (1 - weight) * dense_norm[memory_id] + weight * lexical_norm[memory_id]
        for memory_id in distances
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
