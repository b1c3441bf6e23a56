"""The lexical side of hybrid retrieval: one BM25 index per scope, kept between queries.

Hybrid retrieval scores every live memory of the scope. Reading and tokenizing the whole scope
on every query would make its cost grow with the scope, so each process keeps the scope's
`LexicalIndex` (memory ids, expiry times, term counts, postings) and checks it on each query
with one `MemoryStore.scope_version` read: an equal version guarantees that no memory of the
scope was written since the index was built, by any process; a new one means one scan rebuilds
it. Expiry does not change a version, so each query leaves out the documents expired at its
`now`. A store that keeps no version (None) is read whole every time, as before the cache.

The cache is per process and bounded by the number of facts it holds (least recently used
scopes go first); a scope larger than the whole budget is used for its query and not kept.
"""

from __future__ import annotations

import bisect
import itertools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from adk_memory.lexical import LexicalIndex
from adk_memory.scope import ScopeKey
from adk_memory.store import MemoryRecord, MemoryStore

__all__ = ["MAX_CACHED_FACTS", "LexicalCache", "ScopeIndex"]

MAX_CACHED_FACTS = 50_000
"""The default budget of a process's cache, in facts: ~0.6 KB each for postings and id (measured
on 8-word facts), up to ~1 KB more for term counts the tokenizer's own cache does not share, so
30-80 MB when full."""


@dataclass(frozen=True, slots=True)
class ScopeIndex:
    """The live memories of one scope at one version, as BM25 reads them, in scan order."""

    version: str | None
    built_at: datetime
    """The `now` of the scan that built it: memories expired then are not in it."""
    memory_ids: tuple[str, ...]
    lexical: LexicalIndex
    expire_times: tuple[datetime, ...]
    """The expiry of each document that has one, ascending (`expiring` holds the documents)."""
    expiring: tuple[int, ...]

    @classmethod
    def of(cls, records: Sequence[MemoryRecord], version: str | None, now: datetime) -> ScopeIndex:
        """The index of `records` (a scan of the scope at `now`, read after `version`)."""
        expiring = sorted(
            (record.expire_time, doc)
            for doc, record in enumerate(records)
            if record.expire_time is not None
        )
        return cls(
            version=version,
            built_at=now,
            memory_ids=tuple(record.memory_id for record in records),
            lexical=LexicalIndex.of(record.fact for record in records),
            expire_times=tuple(when for when, _ in expiring),
            expiring=tuple(doc for _, doc in expiring),
        )

    def expired(self, now: datetime) -> frozenset[int]:
        """The documents expired at `now` (a memory is live while its expiry is after `now`)."""
        return frozenset(self.expiring[: bisect.bisect_right(self.expire_times, now)])

    def serves(self, version: str, now: datetime) -> bool:
        """Whether this index answers a query at `now` on a scope read at `version`."""
        # A clock set back could make live a memory that had expired when the index was built.
        return self.version == version and now >= self.built_at


_Key = tuple[int, str, ScopeKey]


class LexicalCache:
    """Scope indexes of every store of the process, least recently used first out."""

    def __init__(self, max_facts: int = MAX_CACHED_FACTS) -> None:
        self._max_facts = max_facts
        self._entries: OrderedDict[_Key, ScopeIndex] = OrderedDict()
        self._facts = 0
        self._lock = threading.Lock()
        self._store_ids: weakref.WeakKeyDictionary[MemoryStore, int] = weakref.WeakKeyDictionary()
        self._next_store_id = itertools.count()

    async def scope_index(
        self,
        store: MemoryStore,
        bank_id: str,
        scope_key: ScopeKey,
        now: datetime,
        scan: Callable[[], Awaitable[Sequence[MemoryRecord]]],
    ) -> ScopeIndex:
        """The scope's index at `now`: the cached one if the scope's version is unchanged.

        `scan` reads the scope's live memories at `now`. The version is read before it, so an
        index never claims a version older than its contents (a write in between only costs
        one more rebuild).
        """
        version = await store.scope_version(bank_id, scope_key)
        if version is None:
            return ScopeIndex.of(await scan(), None, now)
        key = self._key(store, bank_id, scope_key)
        cached = self._get(key) if key is not None else None
        if cached is not None and cached.serves(version, now):
            return cached
        index = ScopeIndex.of(await scan(), version, now)
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
        size = _size(index)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._facts -= _size(old)
            if size > self._max_facts:
                return
            self._entries[key] = index
            self._facts += size
            while self._facts > self._max_facts:
                _, evicted = self._entries.popitem(last=False)
                self._facts -= _size(evicted)


def _size(index: ScopeIndex) -> int:
    """An entry's weight: its facts, and at least one (so empty scopes are bounded too)."""
    return max(len(index.memory_ids), 1)
