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

import bisect
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from adk_memory.filters import And, Condition, FilterExpr, Not, Op, Or
from adk_memory.lexical import LexicalIndex
from adk_memory.scope import ScopeKey
from adk_memory.store import MemoryRecord, MemoryStore
from adk_memory.vectors import VectorMatrix

__all__ = ["LEXICAL_BYTES_PER_FACT", "MAX_CACHED_BYTES", "MAX_VIEWS", "LexicalCache", "ScopeIndex"]

MAX_CACHED_BYTES = 256 * 2**20
"""The default budget of a process's cache: ~80,000 facts with 384-d float32 vectors."""
LEXICAL_BYTES_PER_FACT = 1_600
"""The BM25 side's weight of one fact: ~0.6 KB of postings (measured on 8-word facts) and up to
~1 KB of term counts the tokenizer's own cache does not share. A 384-d float32 vector adds
1.5 KB (float64, when a store keeps vectors that are not float32: 3 KB)."""
MAX_VIEWS = 16
"""How many filters' views of one cached index are kept (least recently used go first)."""


@dataclass(frozen=True, slots=True)
class ScopeIndex:
    """The live memories of one scope at one version, as hybrid retrieval reads them."""

    version: str | None
    built_at: datetime
    """The `now` of the scan that built it: memories expired then are not in it."""
    memory_ids: tuple[str, ...]
    lexical: LexicalIndex
    expire_times: tuple[datetime, ...]
    """The expiry of each document that has one, ascending (`expiring` holds the documents)."""
    expiring: tuple[int, ...]
    vectors: VectorMatrix | None = None
    """The documents' vectors (rows in document order); None when not read, or not all of one
    length (a re-embedding under way)."""
    metadata: _MetadataIndex | None = None
    """The documents of each metadata value (not timestamps); None in a view."""
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
    ) -> ScopeIndex:
        """The index of `records` (a scan of the scope at `now`, read after `version`).

        With `with_vectors`, the records carry their embeddings and the index keeps them.
        """
        memory_ids = tuple(record.memory_id for record in records)
        expiring = sorted(
            (record.expire_time, doc)
            for doc, record in enumerate(records)
            if record.expire_time is not None
        )
        return cls(
            version=version,
            built_at=now,
            memory_ids=memory_ids,
            lexical=LexicalIndex.of(record.fact for record in records),
            expire_times=tuple(when for when, _ in expiring),
            expiring=tuple(doc for _, doc in expiring),
            vectors=_vectors(memory_ids, records) if with_vectors else None,
            metadata=_MetadataIndex.of(records),
        )

    @property
    def nbytes(self) -> int:
        """Its weight in the cache's budget (see the module docstring)."""
        vectors = self.vectors.nbytes if self.vectors is not None else 0
        metadata = self.metadata.nbytes if self.metadata is not None else 0
        return LEXICAL_BYTES_PER_FACT * max(len(self.memory_ids), 1) + vectors + metadata

    def filtered(self, filter_key: str, expr: FilterExpr) -> ScopeIndex | None:
        """The view of the documents matching `expr`, evaluated by the index itself.

        None when it cannot: `expr` has a condition other than a metadata `=` (not timestamps).
        Remembered as `restricted` does (it holds for every `now` the index serves).
        """
        if self.metadata is None:
            return None
        kept = self.metadata.matching(expr, len(self.memory_ids))
        return None if kept is None else self._remember(filter_key, kept, self.built_at)

    def restricted(
        self, filter_key: str, memory_ids: AbstractSet[str], as_of: datetime
    ) -> ScopeIndex:
        """This index with only the documents of `memory_ids` kept: the matches of a filter.

        `memory_ids` must be every memory of this index's version that matches the filter
        named `filter_key` and is live at `as_of` (expired ones may be in it): the view is
        remembered, and `view` serves it again to queries at `as_of` or later.
        """
        kept = np.fromiter(
            (memory_id in memory_ids for memory_id in self.memory_ids),
            dtype=bool,
            count=len(self.memory_ids),
        )
        return self._remember(filter_key, kept, as_of)

    def _remember(
        self, filter_key: str, kept: np.ndarray[Any, np.dtype[np.bool_]], as_of: datetime
    ) -> ScopeIndex:
        kept.flags.writeable = False  # `live` hands it out
        view = replace(self, kept=kept, metadata=None)
        self._views.put(filter_key, view, as_of)
        return view

    def view(self, filter_key: str, now: datetime) -> ScopeIndex | None:
        """The remembered view for the filter named `filter_key`, if it serves `now`."""
        return self._views.get(filter_key, now)

    def live(self, now: datetime) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        """A mask over the documents, False for those expired at `now` or not kept; None: all.

        A memory is live while its expiry is after `now`.
        """
        expired = self.expiring[: bisect.bisect_right(self.expire_times, now)]
        if not expired:
            return self.kept
        mask = np.ones(len(self.memory_ids), dtype=bool) if self.kept is None else self.kept.copy()
        mask[list(expired)] = False
        return mask

    def serves(self, version: str, now: datetime) -> bool:
        """Whether this index answers a query at `now` on a scope read at `version`."""
        # A clock set back could make live a memory that had expired when the index was built.
        return self.version == version and now >= self.built_at


@dataclass(frozen=True, slots=True)
class _MetadataIndex:
    """Per metadata key and value (string, number or bool) the documents holding it, ascending."""

    documents: dict[tuple[str, _Equal], np.ndarray[Any, np.dtype[np.intp]]]

    @classmethod
    def of(cls, records: Sequence[MemoryRecord]) -> _MetadataIndex:
        documents: dict[tuple[str, _Equal], list[int]] = {}
        for doc, record in enumerate(records):
            for key, value in record.metadata.items():
                equal = _equal(value)
                if equal is not None:
                    documents.setdefault((key, equal), []).append(doc)
        return cls({pair: np.asarray(docs, dtype=np.intp) for pair, docs in documents.items()})

    @property
    def nbytes(self) -> int:
        """Its memory: each value's documents and its entry (key, array object, dict slot)."""
        arrays = sum(int(docs.nbytes) for docs in self.documents.values())
        return arrays + _BYTES_PER_VALUE * len(self.documents)

    def matching(self, expr: FilterExpr, size: int) -> np.ndarray[Any, np.dtype[np.bool_]] | None:
        """A mask of the `size` documents that `filters.matches(expr)`; None if not known here.

        Exactly `filters.matches`: a metadata `=` with a string, number or bool holds for a
        value of that type equal to it (numbers as floats; never a missing key, a value of
        another type, or NaN); NOT is the complement. Timestamps and the ordering comparisons
        of `filter_groups` are left to the store.
        """
        if isinstance(expr, And | Or):
            parts = []
            for part in expr.parts:
                mask = self.matching(part, size)
                if mask is None:
                    return None
                parts.append(mask)
            combine = np.logical_and if isinstance(expr, And) else np.logical_or
            return combine.reduce(parts)  # type: ignore[no-any-return]
        if isinstance(expr, Not):
            inner = self.matching(expr.part, size)
            return None if inner is None else ~inner
        if not (
            isinstance(expr, Condition)
            and expr.field.startswith("metadata.")
            and expr.op is Op.EQ
            and not isinstance(expr.value, datetime)
        ):
            return None
        mask = np.zeros(size, dtype=bool)
        equal = _equal(expr.value)
        key = expr.field.removeprefix("metadata.")
        docs = None if equal is None else self.documents.get((key, equal))
        if docs is not None:
            mask[docs] = True
        return mask


_BYTES_PER_VALUE = 260
"""The memory of one (key, value) entry beyond its documents' 8 bytes each: 267 bytes measured
per entry (tracemalloc) with a distinct value per memory, where the entries outweigh the rest."""
_Equal = tuple[str, str | float | bool]
"""A metadata value as `=` compares it: its type, then the value (numbers as floats)."""


def _equal(value: object) -> _Equal | None:
    """The key of `value` in a `_MetadataIndex`.

    None for what `=` finds under no key (NaN equals nothing) or what is not indexed (timestamps).
    """
    if isinstance(value, bool):  # before numbers: a bool is an int
        return "bool", value
    if isinstance(value, int | float):
        return None if value != value else ("number", float(value))
    if isinstance(value, str):
        return "string", value
    return None


class _Views:
    """The filtered views of one index, by filter: the last `MAX_VIEWS` used.

    Not counted in the cache's budget: a view holds a mask of one byte per document, against
    the index's ~3 KB per document.
    """

    def __init__(self) -> None:
        self._views: OrderedDict[str, tuple[ScopeIndex, datetime]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, filter_key: str, now: datetime) -> ScopeIndex | None:
        with self._lock:
            found = self._views.get(filter_key)
            if found is None or now < found[1]:
                # A clock set back could make live a memory that the ids left out as expired.
                return None
            self._views.move_to_end(filter_key)
            return found[0]

    def put(self, filter_key: str, view: ScopeIndex, as_of: datetime) -> None:
        with self._lock:
            self._views[filter_key] = (view, as_of)
            self._views.move_to_end(filter_key)
            while len(self._views) > MAX_VIEWS:
                self._views.popitem(last=False)


_Key = tuple[int, str, ScopeKey]


class LexicalCache:
    """Scope indexes of every store of the process, least recently used first out."""

    def __init__(self, max_bytes: int = MAX_CACHED_BYTES) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[_Key, ScopeIndex] = OrderedDict()
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
    ) -> ScopeIndex:
        """The scope's index at `now`: the cached one if the scope is still at `version`.

        `version` is the scope's, read just before; `scan()` reads the scope's live memories at
        `now` with their embeddings. So an index never claims a version older than its contents
        (a write in between only costs one more rebuild).
        """
        key = self._key(store, bank_id, scope_key)
        cached = self._get(key) if key is not None else None
        if cached is not None and cached.serves(version, now):
            return cached
        index = ScopeIndex.of(await scan(), version, now, with_vectors=True)
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
