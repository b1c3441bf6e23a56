"""Retrieval's view of a scope, kept between queries: BM25 index, vectors, filterable columns.

Hybrid retrieval scores every live memory of the scope. Reading and tokenizing the whole scope
on every query would make its cost grow with the scope, so each process keeps the scope's
`LexicalIndex` (term counts, postings), its vectors (a `VectorMatrix`, rows aligned with the
documents) and its `ScopeColumns` (memory ids aside, every field a filter can name: facts,
times, topics, scope, metadata), and checks them on each query with one
`MemoryStore.scope_version` read: an equal version guarantees that no memory of the scope was
written since the index was built, by any process; a new one means one rebuild (a scan, plus
one read of the vectors when the store's scan leaves them out). Expiry does not change a
version, so each query leaves out the documents expired at its `now`. A store that keeps no
version (None) is scanned whole every time, as before the cache (and its index keeps no
vectors: the store's own nearest query ranks the dense side then).

A filtered query ranks a view of the index that keeps the filter's matches, evaluated from the
columns (`ScopeColumns.matching`, exactly `filters.matches`): a cached scope never asks the
store which memories match. Each index remembers its views of the last `MAX_VIEWS` filters, so
a filter repeated at the same version is not evaluated again.

Filtered dense retrieval ranks the same views with the cached vectors, from an index built
without the BM25 side (tokenizing 10,000 facts took ~0.8 s; a dense index serves hybrid queries
never, a hybrid one serves dense queries too). Its store path is cheap, so a dense query builds
an index only once the store's own queries at the scope's version have cost what the scope's
last build did (`stable_scope_index`, ski rental).

The cache is per process and bounded in bytes (least recently used scopes go first): each
entry weighs its vectors' actual bytes, its columns' (`ScopeColumns.nbytes`: ~170 bytes per
8-word fact with one metadata key), plus `LEXICAL_BYTES_PER_FACT` per fact for the BM25 side
when it has one. A scope larger than the whole budget is used for its query and not kept.
"""

from __future__ import annotations

import itertools
import math
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from adk_memory.engine.scope_columns import ScopeColumns
from adk_memory.filters import FilterExpr
from adk_memory.lexical import LexicalIndex
from adk_memory.scope import ScopeKey
from adk_memory.store import MemoryRecord, MemoryStore
from adk_memory.vectors import VectorMatrix

__all__ = [
    "LEXICAL_BYTES_PER_FACT",
    "MAX_CACHED_BYTES",
    "FIRST_BUILD_SECONDS",
    "MAX_RENTS",
    "MAX_VIEWS",
    "LexicalCache",
    "ScopeIndex",
]

MAX_CACHED_BYTES = 256 * 2**20
"""The default budget of a process's cache: ~80,000 facts with 384-d float32 vectors."""
LEXICAL_BYTES_PER_FACT = 1_600
"""The BM25 side's weight of one fact: ~0.6 KB of postings (measured on 8-word facts) and up to
~1 KB of term counts the tokenizer's own cache does not share. A 384-d float32 vector adds
1.5 KB (float64, when a store keeps vectors that are not float32: 3 KB)."""
MAX_VIEWS = 16
"""How many filters' views of one cached index are kept (least recently used go first)."""
MAX_RENTS = 4096
"""How many scopes' dense-query costs `stable_scope_index` remembers (least recent go first)."""
FIRST_BUILD_SECONDS = 0.5
"""What building a scope's index is taken to cost before one was built: ~10,000 memories on
memory:// (0.3 s measured), fewer on Redis or Chroma (2-3 s at 10,000)."""


@dataclass(frozen=True, slots=True)
class ScopeIndex:
    """The live memories of one scope at one version, as retrieval ranks them."""

    version: str | None
    built_at: datetime
    """The `now` of the scan that built it: memories expired then are not in it."""
    memory_ids: tuple[str, ...]
    columns: ScopeColumns
    """The fields a filter can name, per document: `filtered` evaluates filters on them."""
    lexical: LexicalIndex | None = None
    """The BM25 index; None when built for dense retrieval only."""
    vectors: VectorMatrix | None = None
    """The documents' vectors (rows in document order); None when not read, or not all of one
    length (a re-embedding under way)."""
    kept: np.ndarray[Any, np.dtype[np.bool_]] | None = None
    """A mask of the documents this view keeps (those a query's filter matches); None: all.
    The others count as expired."""
    _views: _Views = field(default_factory=lambda: _Views(), init=False, compare=False, repr=False)

    @classmethod
    def of(
        cls,
        records: Sequence[MemoryRecord],
        version: str | None,
        now: datetime,
        *,
        with_vectors: bool = False,
        with_lexical: bool = True,
    ) -> ScopeIndex:
        """The index of `records` (a scan of the scope at `now`, read after `version`).

        With `with_vectors`, the records carry their embeddings and the index keeps them; with
        `with_lexical`, it keeps their BM25 index.
        """
        memory_ids = tuple(record.memory_id for record in records)
        return cls(
            version=version,
            built_at=now,
            memory_ids=memory_ids,
            columns=ScopeColumns.of(records),
            lexical=LexicalIndex.of(record.fact for record in records) if with_lexical else None,
            vectors=_vectors(memory_ids, records) if with_vectors else None,
        )

    @property
    def nbytes(self) -> int:
        """Its weight in the cache's budget (see the module docstring)."""
        lexical = LEXICAL_BYTES_PER_FACT * len(self.memory_ids) if self.lexical is not None else 0
        vectors = self.vectors.nbytes if self.vectors is not None else 0
        return max(lexical + vectors + self.columns.nbytes, 1)

    def filtered(self, expr: FilterExpr) -> ScopeIndex:
        """The view of the documents matching `expr`, evaluated from the index's columns.

        Remembered: the views of the last `MAX_VIEWS` filters are served again.
        """
        # repr tells apart values that compare equal but match differently (True, 1.0).
        return self._views.get(repr(expr), lambda: self._view(expr))

    def _view(self, expr: FilterExpr) -> ScopeIndex:
        kept = self.columns.matching(expr)
        kept.flags.writeable = False  # `live` hands it out
        return replace(self, kept=kept)

    def live(self, now: datetime) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        """A mask over the documents, False for those expired at `now` or not kept; None: all.

        A memory is live while its expiry is after `now`.
        """
        expired = self.columns.expired(now)
        if not expired.any():
            return self.kept
        return ~expired if self.kept is None else self.kept & ~expired

    def serves(self, version: str, now: datetime, *, lexical: bool) -> bool:
        """Whether this index answers a query at `now` on a scope read at `version`.

        `lexical`: the query ranks by BM25 too.
        """
        # A clock set back could make live a memory that had expired when the index was built.
        current = self.version == version and now >= self.built_at
        return current and (self.lexical is not None or not lexical)


class _Views:
    """The filtered views of one index, by filter: the last `MAX_VIEWS` used.

    Not counted in the cache's budget: a view holds a mask of one byte per document, against
    the index's ~3 KB per document.
    """

    def __init__(self) -> None:
        self._views: OrderedDict[str, ScopeIndex] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, filter_key: str, build: Callable[[], ScopeIndex]) -> ScopeIndex:
        """The view remembered for `filter_key`, else the one `build` makes (then remembered)."""
        with self._lock:
            found = self._views.get(filter_key)
            if found is not None:
                self._views.move_to_end(filter_key)
                return found
        view = build()
        with self._lock:
            self._views[filter_key] = view
            self._views.move_to_end(filter_key)
            while len(self._views) > MAX_VIEWS:
                self._views.popitem(last=False)
        return view


_Key = tuple[int, str, ScopeKey]


@dataclass(slots=True)
class _Rent:
    """One scope's dense queries: what the store's took at `version`, what a build took (s)."""

    version: str
    paid: float = 0.0
    build_seconds: float = FIRST_BUILD_SECONDS


class LexicalCache:
    """Scope indexes of every store of the process, least recently used first out."""

    def __init__(
        self,
        max_bytes: int = MAX_CACHED_BYTES,
        *,
        first_build_seconds: float = FIRST_BUILD_SECONDS,
        patience: float = 1.0,
    ) -> None:
        """A cache of `max_bytes`.

        `first_build_seconds` and `patience` tune `stable_scope_index`: a build's cost guessed
        before one was measured, and how many builds' worth of store time a version's dense
        queries spend before building (0: build at the first miss, as `scope_index` does).
        """
        self._max_bytes = max_bytes
        self._first_build_seconds = first_build_seconds
        self._patience = patience
        self._entries: OrderedDict[_Key, ScopeIndex] = OrderedDict()
        self._rents: OrderedDict[_Key, _Rent] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._store_ids: weakref.WeakKeyDictionary[MemoryStore, int] = weakref.WeakKeyDictionary()
        self._next_store_id = itertools.count()

    async def scope_index(
        self,
        store: MemoryStore,
        bank_id: str,
        scope_key: ScopeKey,
        version: str,
        now: datetime,
        scan: Callable[[], Awaitable[Sequence[MemoryRecord]]],
        *,
        lexical: bool,
    ) -> ScopeIndex:
        """The scope's index at `now`: the cached one if the scope is still at `version`.

        `version` is the scope's, read just before; `scan()` reads the scope's live memories at
        `now` with their embeddings. So an index never claims a version older than its contents
        (a write in between only costs one more rebuild). `lexical`: the index must have its
        BM25 side (a dense query's index is built without it, and serves hybrid queries never).
        """
        key = self._key(store, bank_id, scope_key)
        cached = self._current(key, version, now, lexical=lexical)
        if cached is not None:
            return cached
        return await self._build(key, version, now, scan, lexical=lexical)

    async def stable_scope_index(
        self,
        store: MemoryStore,
        bank_id: str,
        scope_key: ScopeKey,
        version: str,
        now: datetime,
        scan: Callable[[], Awaitable[Sequence[MemoryRecord]]],
    ) -> ScopeIndex | None:
        """The scope's index for dense retrieval (no BM25), built once it pays for itself.

        The cached one if the scope is still at `version`. Else a new one only when the store's
        own queries at `version` (`paid_store`) have taken as long as building the scope's
        index took last time (`FIRST_BUILD_SECONDS` before): ski rental, so the dense queries
        of a version never cost more than twice the better of the two choices; None before
        (the caller asks the store). A scope written between every few queries is never
        scanned whole; one too large for the whole budget is built once at most.
        """
        key = self._key(store, bank_id, scope_key)
        cached = self._current(key, version, now, lexical=False)
        if cached is not None or key is None or not self._worth_building(key, version):
            return cached
        started = time.perf_counter()
        index = await self._build(key, version, now, scan, lexical=False)
        with self._lock:
            rent = self._rents.get(key)
            if rent is not None:
                rent.paid = 0.0
                # A scope over the whole budget is not kept: building it never pays.
                kept = index.nbytes <= self._max_bytes
                rent.build_seconds = time.perf_counter() - started if kept else math.inf
        return index

    def paid_store(
        self, store: MemoryStore, bank_id: str, scope_key: ScopeKey, seconds: float
    ) -> None:
        """Counts a dense query the store answered because `stable_scope_index` built nothing."""
        key = self._key(store, bank_id, scope_key)
        with self._lock:
            rent = self._rents.get(key) if key is not None else None
            if rent is not None:
                rent.paid += seconds

    def _worth_building(self, key: _Key, version: str) -> bool:
        with self._lock:
            rent = self._rents.get(key)
            if rent is None:
                rent = self._rents[key] = _Rent(version, build_seconds=self._first_build_seconds)
                while len(self._rents) > MAX_RENTS:
                    self._rents.popitem(last=False)
            elif rent.version != version:
                rent.version, rent.paid = version, 0.0
            self._rents.move_to_end(key)
            return rent.paid >= rent.build_seconds * self._patience

    def _current(
        self, key: _Key | None, version: str, now: datetime, *, lexical: bool
    ) -> ScopeIndex | None:
        cached = self._get(key) if key is not None else None
        if cached is not None and cached.serves(version, now, lexical=lexical):
            return cached
        return None

    async def _build(
        self,
        key: _Key | None,
        version: str,
        now: datetime,
        scan: Callable[[], Awaitable[Sequence[MemoryRecord]]],
        *,
        lexical: bool,
    ) -> ScopeIndex:
        index = ScopeIndex.of(await scan(), version, now, with_vectors=True, with_lexical=lexical)
        if key is not None:
            self._put(key, index)
        return index

    def _key(self, store: MemoryStore, bank_id: str, scope_key: ScopeKey) -> _Key | None:
        """The entry's key; None for a store that cannot be weakly referenced (not cached)."""
        with self._lock:
            try:
                store_id = self._store_ids.get(store)
                if store_id is None:
                    store_id = self._store_ids[store] = next(self._next_store_id)
            except TypeError:
                return None
        return store_id, bank_id, scope_key

    def _get(self, key: _Key) -> ScopeIndex | None:
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
            return found

    def _put(self, key: _Key, index: ScopeIndex) -> None:
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old.nbytes
            if index.nbytes > self._max_bytes:
                return
            self._entries[key] = index
            self._bytes += index.nbytes
            while self._bytes > self._max_bytes:
                _, evicted = self._entries.popitem(last=False)
                self._bytes -= evicted.nbytes


def _vectors(memory_ids: tuple[str, ...], records: Sequence[MemoryRecord]) -> VectorMatrix | None:
    """The records' embeddings as one matrix; None if they are not all of one length."""
    try:
        return VectorMatrix.of(memory_ids, [record.embedding for record in records])
    except ValueError:
        return None
