"""Hybrid retrieval's view of a scope, kept between queries: BM25 index and vectors.

Hybrid retrieval scores every live memory of the scope. Reading and tokenizing the whole scope
on every query would make its cost grow with the scope, so each process keeps the scope's
`LexicalIndex` (memory ids, expiry times, term counts, postings) and its vectors (a
`VectorMatrix`, rows aligned with the documents), and checks them on each query with one
`MemoryStore.scope_version` read: an equal version guarantees that no memory of the scope was
written since the index was built, by any process; a new one means one rebuild (a scan, plus
one read of the vectors when the store's scan leaves them out). Expiry does not change a
version, so each query leaves out the documents expired at its `now`. A store that keeps no
version (None) is scanned whole every time, as before the cache (and its index keeps no
vectors: the store's own nearest query ranks the dense side then).

A filtered query ranks a view of the index that keeps the filter's matches. The index evaluates
a filter of metadata equalities itself (`metadata.tag = "a"`, or `filter_groups` of strings,
numbers and bools, with AND, OR, NOT): it keeps the documents of each metadata value, read with
the scan. Other filters need the matching ids from the store. Each index remembers its views of
the last `MAX_VIEWS` filters, so a filter repeated at the same version is not evaluated again.

The cache is per process and bounded in bytes (least recently used scopes go first): each
entry weighs its vectors' actual bytes plus `LEXICAL_BYTES_PER_FACT` per fact for the BM25
side, plus its metadata postings. A scope larger than the whole budget is used for its query
and not kept.
"""

from __future__ import annotations

import itertools
import threading
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
    "MAX_MISSES",
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
MAX_MISSES = 4096
"""How many scopes' missed versions `stable_scope_index` remembers (oldest go first)."""


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


class LexicalCache:
    """Scope indexes of every store of the process, least recently used first out."""

    def __init__(self, max_bytes: int = MAX_CACHED_BYTES) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[_Key, ScopeIndex] = OrderedDict()
        self._misses: OrderedDict[_Key, str] = OrderedDict()
        """The version each scope was at when `stable_scope_index` last missed it."""
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
        """The scope's index for dense retrieval (no BM25), built only for a scope that stays.

        The cached one if the scope is still at `version`. Else None the first time a query
        finds the scope at `version` (the caller takes the store's own query, which costs far
        less than the scan that builds an index), and a new index the next time. So a scope
        written between every two queries is never scanned whole, as `scope_index` would.
        """
        key = self._key(store, bank_id, scope_key)
        cached = self._current(key, version, now, lexical=False)
        if cached is not None or key is None or not self._seen_before(key, version):
            return cached
        return await self._build(key, version, now, scan, lexical=False)

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

    def _seen_before(self, key: _Key, version: str) -> bool:
        """Whether the last miss of `key` found it at `version` (else this one is remembered)."""
        with self._lock:
            if self._misses.pop(key, None) == version:
                return True
            self._misses[key] = version
            while len(self._misses) > MAX_MISSES:
                self._misses.popitem(last=False)
            return False

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
