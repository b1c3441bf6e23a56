"""RetrieveMemories: similarity search, retrieve-all and simple retrieval within one exact scope.

Filters apply before top-k (SPEC §3): the part the store declared it can run is pushed into its
query; the rest is evaluated here, over-fetching until `top_k` memories survive or the scope is
exhausted. The cost of one similarity retrieve is one query embedding (cached per text), one bank
read and, without a residual filter, one nearest query. Hybrid retrieval, and a filtered dense
one once it pays, rank the process's cached index of the scope instead (`lexical_cache`), whose
columns evaluate the whole filter.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np

from adk_memory import types
from adk_memory.engine.context import EngineContext, LoadedBank
from adk_memory.engine.lexical_cache import LexicalCache, ScopeIndex
from adk_memory.engine.memories import MemoryOps
from adk_memory.engine.paging import Page
from adk_memory.engine.profiles import PROFILE_TYPE
from adk_memory.errors import InvalidArgument
from adk_memory.extensions import RetrievalConfig
from adk_memory.filters import (
    FilterExpr,
    matches,
    partition,
    request_filter,
)
from adk_memory.lexical import Corpus, best
from adk_memory.scope import ScopeKey, profile_scope_key, scope_key, validate_scope
from adk_memory.store import MemoryRecord, NearestQuery, ScanQuery, ScoredRecord, SortKey
from adk_memory.vectors import exact_distances

__all__ = ["DEFAULT_TOP_K", "MAX_SEARCH_QUERY", "MAX_TOP_K", "Retrieval", "Retrieved"]

DEFAULT_TOP_K = 3
MAX_TOP_K = 100
DEFAULT_PAGE_SIZE = 3
_RETRIEVE_ALL_CHUNK = 1_000
"""Memories read per keyset page while a retrieve-all collects its whole scope."""
MAX_SCAN = 1_000_000
MAX_SEARCH_QUERY = 10_000
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
        expr = request_filter(config.filter, config.filter_groups)
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
            return Page(await self._dense(bank_id, keys, vector, top_k, expr, now), None)
        queries = [ScanQuery(now=now, scope_key=key, order_by=_RETRIEVE_ORDER) for key in keys]
        if simple_retrieval_params is None:
            return Page(await self._whole_scope(bank, queries, expr), None)
        size = simple_retrieval_params.page_size
        if size is not None and size < 0:
            raise InvalidArgument(
                "simple_retrieval_params.page_size must not be negative.",
                field="simple_retrieval_params.page_size",
            )
        page_size = min(size or DEFAULT_PAGE_SIZE, MAX_TOP_K)
        page = await self._memories.scan_page(
            bank, queries, expr, page_size, simple_retrieval_params.page_token
        )
        return Page([Retrieved(record, None) for record in page.items], page.next_page_token)

    async def _whole_scope(
        self, bank: LoadedBank, queries: list[ScanQuery], expr: FilterExpr | None
    ) -> list[Retrieved]:
        """Every memory of the scans, newest first: what a retrieve without params answers.

        SPEC §3: retrieve-all answers the whole scope at once, with no page token: the official
        SDK's retrieve pager cannot send one back (reference §2.7), so a token would break
        `list(retrieve(...))`. Keyset pages read it without repeats or skips.
        """
        found: list[Retrieved] = []
        token: str | None = None
        while True:
            chunk = await self._memories.scan_page(bank, queries, expr, _RETRIEVE_ALL_CHUNK, token)
            found += [Retrieved(record, None) for record in chunk.items]
            token = chunk.next_page_token
            if not token:
                return found

    async def _dense(
        self,
        bank_id: str,
        keys: list[ScopeKey],
        vector: tuple[float, ...],
        top_k: int,
        expr: FilterExpr | None,
        now: datetime,
    ) -> list[Retrieved]:
        """The `top_k` live memories of the scopes matching `expr` nearest to `vector`.

        Nearest first, ties by memory id. A filtered query on a store that keeps scope versions
        ranks the cached indexes' views of the filter's matches (`_dense_cached`); any other
        query, or one whose records changed since, the store's nearest query. Unfiltered
        queries keep to the store: its own nearest costs no more than the cached ranking
        (benchmarks/NOTES.md).
        """
        if expr is not None:
            cached = await self._dense_cached(bank_id, keys, vector, top_k, expr, now)
            if cached is not None:
                return cached
        hits: list[ScoredRecord] = []
        for key in keys:
            started = time.perf_counter()
            hits += await self._nearest(bank_id, NearestQuery(key, vector, top_k, now), expr)
            if expr is not None:
                seconds = time.perf_counter() - started
                _LEXICAL_CACHE.paid_store(self._context.store, bank_id, key, seconds)
        hits.sort(key=lambda hit: (hit.distance, hit.record.memory_id))
        return [Retrieved(hit.record, hit.distance) for hit in hits[:top_k]]

    async def _dense_cached(
        self,
        bank_id: str,
        keys: list[ScopeKey],
        vector: tuple[float, ...],
        top_k: int,
        expr: FilterExpr,
        now: datetime,
    ) -> list[Retrieved] | None:
        """The dense ranking from the cached indexes (built without BM25), as the store ranks.

        The exact distances of the cached vectors (the stores' own, bit for bit), ties by id,
        then one read of the `top_k` records. None when it does not serve: a store without
        versions, a scope whose index is not worth building yet (`_cached_index`), vectors of
        another length, or a returned record changed since the version read.
        """
        indexes: list[ScopeIndex] = []
        for key in keys:
            index = await self._cached_index(bank_id, key, expr, now, lexical=False)
            if index is None or not _ranks_dense(index, vector):
                return None
            indexes.append(index)
        target = np.asarray(vector, dtype=np.float64)
        ranked: list[tuple[float, str]] = []
        rows: dict[str, tuple[int, int]] = {}
        for part, index in enumerate(indexes):
            assert index.vectors is not None
            found, distances = index.vectors.nearest(target, index.live(now), top_k)
            for row, distance in zip(found.tolist(), distances.tolist(), strict=True):
                ranked.append((distance, index.memory_ids[row]))
                rows[index.memory_ids[row]] = (part, row)
        ranked.sort()
        chosen = [memory_id for _, memory_id in ranked[:top_k]]
        records = await self._current_records(bank_id, keys, indexes, rows, chosen, expr, now)
        if records is None:
            return None
        return [
            Retrieved(record, distance)
            for record, (distance, _) in zip(records, ranked[:top_k], strict=True)
        ]

    async def _current_records(
        self,
        bank_id: str,
        keys: list[ScopeKey],
        indexes: list[ScopeIndex],
        rows: dict[str, tuple[int, int]],
        chosen: list[str],
        expr: FilterExpr | None,
        now: datetime,
    ) -> list[MemoryRecord] | None:
        """The `chosen` records, in order, if each is still as its index has it; else None.

        `rows` gives each one's (index, row). A record deleted or expired since the version
        read, moved, re-embedded or no longer matching `expr` makes the cached ranking stale.
        """
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
        return records

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
        a filter new to that version adds its evaluation over the index's columns.
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
        records = await self._current_records(bank_id, keys, indexes, rows, chosen, expr, now)
        if records is None:
            return None
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
        """The index (with BM25) of the scope's live memories matching `expr`, at `now`.

        The process's cached one (`_cached_index`); for a store without versions, an index of
        the filtered scan, built for this query only.
        """
        index = await self._cached_index(bank_id, key, expr, now, lexical=True)
        if index is None:
            return ScopeIndex.of(
                await self._scan(bank_id, key, expr, now, with_vectors=False), None, now
            )
        return index

    async def _cached_index(
        self, bank_id: str, key: ScopeKey, expr: FilterExpr | None, now: datetime, *, lexical: bool
    ) -> ScopeIndex | None:
        """The process's cached index of the scope (checked by the scope's version), at `now`.

        With a filter, its view of the matches, evaluated from the index's own columns: no
        store read beyond the version's. The index remembers its views, so the same filter at
        the same version costs no more than no filter. `lexical`: with the BM25 side (hybrid
        retrieval); without it (dense retrieval), an index is built only once the store's own
        queries at that version took as long as building it (`LexicalCache.stable_scope_index`),
        and None before.
        None for a store that keeps no scope versions.
        """
        store = self._context.store
        version = await store.scope_version(bank_id, key)
        if version is None:
            return None

        def scan() -> Awaitable[list[MemoryRecord]]:
            return self._scan(bank_id, key, None, now, with_vectors=True)

        index = (
            await _LEXICAL_CACHE.scope_index(store, bank_id, key, version, now, scan, lexical=True)
            if lexical
            else await _LEXICAL_CACHE.stable_scope_index(store, bank_id, key, version, now, scan)
        )
        return index if index is None or expr is None else index.filtered(expr)

    async def _scan(
        self,
        bank_id: str,
        key: ScopeKey,
        expr: FilterExpr | None,
        now: datetime,
        *,
        with_vectors: bool,
    ) -> list[MemoryRecord]:
        """The scope's live memories matching `expr` at `now` (with their vectors if asked)."""
        query = ScanQuery(now=now, scope_key=key, order_by=_RETRIEVE_ORDER)
        records = await self._memories.scan(bank_id, [query], expr, MAX_SCAN)
        if not with_vectors or all(record.embedding for record in records):
            return records
        # A scan may leave vectors out (store contract): read the scope's records again
        # with them. Those written since are newer than the version read before the scan.
        ids = [record.memory_id for record in records]
        found = await self._context.store.get_memories(bank_id, ids, now)
        return [record for record in found if record.scope_key == key]

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
    parts = []
    for index in indexes:
        assert index.lexical is not None  # hybrid retrieval's indexes are built with BM25
        parts.append((index.lexical, index.live(now)))
    corpus = Corpus(parts)
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
    if len(text) > MAX_SEARCH_QUERY:
        raise InvalidArgument(
            f"similarity_search_params.search_query is limited to {MAX_SEARCH_QUERY} characters.",
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
