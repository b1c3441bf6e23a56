"""The per-scope index rows of a bank, and the search path that reads them.

The scope index (layout 2, issue 18). Chroma's `where` walks every row of a collection, and its
filtered HNSW search keeps going until it has `ef` allowed rows, so a search inside one scope
cost what the whole bank costs (306 ms at 100,000 memories in 100 scopes). Each scope therefore
has, in aux, a head row holding its version and 16 bucket rows listing its memory ids (by a hash
of the id) with their expiry (`_codec`, "Scope index rows"). Every batch rewrites the head and
the buckets it changes of each scope it touches, computed under the bank's journal lock from the
rows as stored; they are aux rows of the batch, so they are journaled and replayed with its
revisions and can never miss a committed memory. An id listed whose memory is gone is harmless.

Search. `nearest` reads the scope's version (its head row) if its vectors are cached, then,
unless they are cached under that version, the index (one `get` of 16 bucket rows; with the
head when nothing is cached) and the vectors of the ids it lists
(`get` by ids; past `WHOLE_SCOPE_READ` ids, one `get` on the scope's digest). It ranks them in
numpy (float32 dot products, then every row that rounding could move into the top k again in
float64: exact distances, ties by memory id) and reads the k winners whole, checking that each
is still live and of the scope (else the scope is read again, verifying every row's scope). A
pushed filter is asked of Chroma as the ids of the scope that match it. The HNSW index is not
used. The vectors are kept per store in a cache bounded in bytes (`vector_cache_mb`, least
recently used first) under the scope's version: the index and the vectors are read after the
version, so they are at least as new as it, and any write to the scope, by any process, changes
the version. So the cost follows the scope, not the bank: two small reads and the numpy ranking
when cached, plus the scope's index and vectors when not.
The cache and its write-through by the batches of the stores sharing it: `_vectors`.

`scope_version` returns the head's version: the id of the batch that last wrote the scope. A
batch writes the head in its first call (with the slot), before its memory rows, so while the
slot's batch is the head's and not yet seen complete (its probes read, or, embedded, the bank
settled), the version is None: what a reader reads meanwhile is not cached under it (by this
store's vector cache or the engine's hybrid cache). A batch too large for one call writes the
heads after its memory rows.

Embedded, the heads go through a process-wide mirror (`HeadMirror`): the directory is this
process's alone, so a head this process committed is the head stored, and reading the scope's
version costs no call. With 20 ADK users at once that was 100 `get`s a round (5 a user: a
search each turn and generation's candidates), each waiting for a thread and the GIL.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import IN_CHUNK, Chroma
from adk_memory_chroma._journal import Journal
from adk_memory_chroma._vectors import ScopeVectors, VectorCache
from adk_memory_chroma._where import Compiled, all_of

WHOLE_SCOPE_READ = 4 * IN_CHUNK
"""A scope listing more memories than this is read by a `where` on its digest (one SQLite scan
of the collection) rather than by ids in `IN_CHUNK` calls."""


_MIRRORED_SCOPES = 200_000
"""At most this many scope heads are mirrored; past it the oldest half is forgotten (and read
again when next needed)."""


class HeadMirror:
    """Embedded only: each scope's head version as this process committed or read it.

    Shared by this process's stores on the directory (`_folder`), which only this process
    writes, through its writers. A writer forgets the scopes it is about to write (`writing`:
    their versions are read from Chroma until it is done, with the slot check) and sets them
    once its batch is committed whole (`committed`); a replayed journal, a bank deleted or a
    store's `drop_all` forgets the bank (`forget`). A version read from Chroma is kept (`learn`)
    only if no write of the bank began or ended since the read began (`epoch`), so a slow read
    never puts back a version a writer has replaced. Each version is kept with the id of the
    bank's memory collection it belongs to: a store whose handle is of a bank since deleted
    (and created again) never finds it, and reads Chroma, which tells it the handle is gone.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, str], tuple[str, str]] = {}
        """(bank id, scope key) -> (memory collection id, version)."""
        self._epochs: dict[str, int] = {}

    def known(self, bank_id: str, collection_id: str, scope_key: str) -> str | None:
        """The scope's version ("" for a scope never written), or None if not known."""
        found = self._versions.get((bank_id, scope_key))
        return found[1] if found is not None and found[0] == collection_id else None

    def epoch(self, bank_id: str) -> int:
        """Taken before a read of the bank's heads; `learn` keeps a version read only with it."""
        return self._epochs.get(bank_id, 0)

    def learn(
        self, bank_id: str, collection_id: str, scope_key: str, version: str, epoch: int
    ) -> None:
        with self._lock:
            if self._epochs.get(bank_id, 0) == epoch:
                self._put((bank_id, scope_key), (collection_id, version))

    def writing(self, bank_id: str, scope_keys: Iterable[str]) -> None:
        with self._lock:
            self._next_epoch(bank_id)
            for scope_key in scope_keys:
                self._versions.pop((bank_id, scope_key), None)

    def committed(self, bank_id: str, collection_id: str, versions: Mapping[str, str]) -> None:
        with self._lock:
            self._next_epoch(bank_id)
            for scope_key, version in versions.items():
                self._put((bank_id, scope_key), (collection_id, version))

    def forget(self, bank_id: str | None = None) -> None:
        """Forgets the bank's versions (every bank's with None)."""
        with self._lock:
            for known in {key[0] for key in self._versions} | set(self._epochs):
                if bank_id is None or known == bank_id:
                    self._next_epoch(known)
            self._versions = {
                key: value
                for key, value in self._versions.items()
                if bank_id is not None and key[0] != bank_id
            }

    def _next_epoch(self, bank_id: str) -> None:
        self._epochs[bank_id] = self._epochs.get(bank_id, 0) + 1

    def _put(self, key: tuple[str, str], value: tuple[str, str]) -> None:
        if len(self._versions) >= _MIRRORED_SCOPES:
            self._versions = dict(list(self._versions.items())[len(self._versions) // 2 :])
        self._versions[key] = value


class ScopeIndex:
    """Reads and computes the scope index rows of a store's banks; reads scopes' vectors."""

    def __init__(self, chroma: Chroma, journal: Journal, vectors: VectorCache) -> None:
        self._chroma = chroma
        self._journal = journal
        self.cache = vectors
        """The vector cache; embedded, the one every store of the process on the directory
        shares (set once connected), so one store's write-through serves another's search."""

    async def rows_after(
        self,
        aux: Any,
        stored: Mapping[str, Any],
        memory_rows: Sequence[codec.Row],
        deletes: Sequence[str],
        version: str,
    ) -> tuple[list[codec.Row], dict[str, str]]:
        """The scope index rows after a batch: its version and the changed buckets per scope.

        Also, by scope touched, the version the batch replaces ("" for a new scope), read with
        the buckets (for `ScopeWrite`).

        The version is the batch's id, so that a reader can tell from the slot whether the
        batch that last wrote a scope may still be writing its memory rows (`_written_version`).

        `stored` holds the memory rows the batch touches as they are now. A memory leaves the
        index of the scope it was in when it is deleted or moves to another scope, and enters
        (or updates its expiry in) its new one.
        """
        changes: dict[str, dict[int, dict[str, int | None]]] = {}

        def note(scope_key: str, memory_id: str, live_us: int | None) -> None:
            bucket = changes.setdefault(scope_key, {}).setdefault(codec.scope_bucket(memory_id), {})
            bucket[memory_id] = live_us

        for memory_id in deletes:
            if memory_id in stored:
                note(str(stored[memory_id][codec.SCOPE_KEY]), memory_id, None)
        for memory_id, _vector, _fact, meta in memory_rows:
            scope_key = str(meta[codec.SCOPE_KEY])
            before = stored.get(memory_id)
            if before is not None and before[codec.SCOPE_KEY] != scope_key:
                note(str(before[codec.SCOPE_KEY]), memory_id, None)
            note(scope_key, memory_id, int(meta[codec.LIVE_US]))
        buckets = await self._chroma.read_metadata(
            aux,
            [
                *map(codec.scope_head_id, changes),
                *(
                    codec.scope_bucket_id(scope_key, bucket)
                    for scope_key, updates in changes.items()
                    for bucket in updates
                ),
            ],
        )
        heads = {
            scope_key: str(
                buckets.get(codec.scope_head_id(scope_key), {}).get(codec.SCOPE_VERSION, "")
            )
            for scope_key in changes
        }
        rows: list[codec.Row] = []
        for scope_key, updates in changes.items():
            contents: dict[int, dict[str, int]] = {}
            for bucket, members_changed in updates.items():
                row = buckets.get(codec.scope_bucket_id(scope_key, bucket))
                members = {} if row is None else codec.decode_bucket(row)
                for memory_id, live_us in members_changed.items():
                    if live_us is None:
                        members.pop(memory_id, None)
                    else:
                        members[memory_id] = live_us
                contents[bucket] = members
            rows += codec.index_rows(scope_key, version, contents)
        return rows, heads

    async def head(self, bank_id: str, memories: Any, aux: Any, scope_key: str) -> str | None:
        """`scope_version`: from the `HeadMirror` if it knows it, else read with the bank's slot."""
        mirror = self._journal.heads
        if mirror is not None:
            known = mirror.known(bank_id, str(memories.id), scope_key)
            if known is not None:
                return known
        epoch = 0 if mirror is None else mirror.epoch(bank_id)
        version, slot, _ = await self.read(aux, scope_key, buckets=False)
        return await self._checked_version(bank_id, memories, scope_key, version, slot, epoch)

    async def members(self, aux: Any, scope_key: str) -> dict[str, int]:
        """The `{memory id: live_us}` the scope's index lists, in one read of its buckets."""
        return (await self.read(aux, scope_key, head=False))[2]

    async def read(
        self, aux: Any, scope_key: str, *, head: bool = True, buckets: bool = True
    ) -> tuple[str, Mapping[str, Any] | None, dict[str, int]]:
        """A scope's head version, the bank's slot and the scope's members, in one read.

        With `head`, the version ("" for none) and the slot (None for none); with `buckets`, the
        `{memory id: live_us}` the scope's buckets list.
        """
        ids = [codec.scope_head_id(scope_key), codec.SLOT_ID] if head else []
        found = await self._chroma.call(
            "read a scope's index",
            aux.get,
            ids=[*ids, *(codec.bucket_ids(scope_key) if buckets else [])],
            include=["metadatas"],
        )
        version = ""
        slot: Mapping[str, Any] | None = None
        members: dict[str, int] = {}
        for meta in found["metadatas"]:
            if meta[codec.KIND] == codec.KIND_SCOPE_HEAD:
                version = str(meta[codec.SCOPE_VERSION])
            elif meta[codec.KIND] == codec.KIND_JOURNAL_SLOT:
                slot = meta
            else:
                members.update(codec.decode_bucket(meta))
        return version, slot, members

    async def _checked_version(
        self,
        bank_id: str,
        memories: Any,
        scope_key: str,
        version: str,
        slot: Mapping[str, Any] | None,
        epoch: int,
    ) -> str | None:
        """`version` as read, or None while the slot's batch that wrote it may still be writing.

        Its memory rows follow the head; the slot's probes are read unless it was seen complete.
        A version known complete is offered to the `HeadMirror`, read at `epoch`.
        """
        if version and slot is not None and slot[codec.JOURNAL_BATCH] == version:
            if not await self._journal.slot_batch_written(bank_id, memories, slot):
                return None
        if self._journal.heads is not None:
            self._journal.heads.learn(bank_id, str(memories.id), scope_key, version, epoch)
        return version

    async def vectors(
        self, bank_id: str, memories: Any, aux: Any, scope_key: str, verified: bool
    ) -> ScopeVectors:
        """The ids, vectors and expiries of a scope's memories, from the cache if still current.

        The version is read first, then the index and the vectors: they are at least as new as
        the version they are cached under, and any later write changes it; a version whose
        batch may still be writing (None) caches nothing. `verified` reads only rows whose own
        scope is `scope_key` (slower: a `where` on every call).
        """
        key = (str(memories.id), scope_key)
        mirror = self._journal.heads
        if self.cache.holds(key) and not verified:
            version = await self.head(bank_id, memories, aux, scope_key)
            cached = None if version is None else self.cache.get(key, version)
            if cached is not None:
                return cached
            members = await self.members(aux, scope_key)
        else:  # nothing cached to check: the version and the index in one read
            epoch = 0 if mirror is None else mirror.epoch(bank_id)
            head, slot, members = await self.read(aux, scope_key)
            version = await self._checked_version(bank_id, memories, scope_key, head, slot, epoch)
        scoped = {codec.SCOPE_KEY: scope_key}
        ids: list[str] = []
        embeddings: list[Any] = []
        for request in _scope_requests(list(members), scoped, scoped if verified else None):
            found = await self._chroma.get(
                "read a scope's vectors", memories, include=["embeddings"], **request
            )
            for memory_id, embedding in zip(found["ids"], found["embeddings"], strict=True):
                if memory_id in members:  # the scope's memories, by the index
                    ids.append(memory_id)
                    embeddings.append(embedding)
        vectors = ScopeVectors.build(key, version or "", ids, embeddings, members)
        if version is not None:
            self.cache.put(vectors)
        return vectors

    async def matching(
        self,
        memories: Any,
        scope_key: str,
        vectors: ScopeVectors,
        pushed: dict[str, Any],
    ) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Which of `vectors`' rows the pushed filter keeps, asked of Chroma (ids only).

        Expiry is left to the caller (a range on `live_us` makes Chroma walk every row), and so
        are rows this version dropped (`ScopeVectors.live` leaves both out).
        """
        kept = await self.matching_ids(memories, scope_key, vectors.memory_ids, pushed)
        return vectors.rows_of(kept)

    async def matching_ids(
        self, memories: Any, scope_key: str, ids: list[str], pushed: dict[str, Any]
    ) -> set[str]:
        """Those of the scope's `ids` whose rows the pushed filter keeps (ids only)."""
        where = all_of([{codec.SCOPE_KEY: scope_key}, pushed])
        kept: set[str] = set()
        for request in _scope_requests(ids, where, where):
            found = await self._chroma.call("filter a scope", memories.get, include=[], **request)
            kept.update(found["ids"])
        return kept


def _scope_requests(
    ids: list[str], scope_where: Compiled, id_where: Compiled | None
) -> list[dict[str, Any]]:
    """`get` arguments that read a scope's rows among `ids`.

    By id, `IN_CHUNK` a call, narrowed by `id_where` when given; for thousands of ids, one
    `scope_where` scan instead (each id binds a SQLite variable, so the scan is cheaper there).
    """
    if len(ids) > WHOLE_SCOPE_READ:
        return [{"where": scope_where}]
    narrowed = {"where": id_where} if id_where is not None else {}
    return [
        {"ids": ids[start : start + IN_CHUNK]} | narrowed for start in range(0, len(ids), IN_CHUNK)
    ]
