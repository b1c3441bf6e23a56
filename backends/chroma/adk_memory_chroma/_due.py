"""The due index: when each engine document of every bank is next due.

The due index (`MemoryStore.due_documents`) is one store-wide collection, `<prefix>.due`: a row
per (kind, bank, document) with its due time (`due_us`), so a scheduler's tick is one `get` with
`due_us <= now`. It cannot be written with the document (another collection), so a document
write first lowers the entry (a crash after the document leaves it early, never late), then
writes the document, then raises or removes it if its due is later or gone (`index_around` in
`adk_memory.store`).

Embedded, the process keeps what it read and wrote of the index (`DueMirror`; the directory is
its alone) and changes it under one lock: a lowering's read and write are one step, and one the
mirror shows to be no earlier (every create lowers its bank's expiry entry), or an exact write
of what it shows stored (a stream's due time set again after its lowering), costs no call.
A write that raises or removes an entry is deferred (`DueMirror.deferred`): an entry earlier
than its document's due time is harmless (a scheduler finding it re-checks the document), so
it is written with the index's next call, a lowering or a read (a scheduler's tick, every
second in the ADK service), many raises as one; only lowerings, which keep entries from being
late, are written before their documents. Every turn of an ADK session puts its stream's idle
entry off: before, each writer pass paid a Chroma write for that (the GIL held ~10 ms), the
same cost as the pass's own write. A crash loses only deferred raises: entries stay early.
On a server, a lowering is a read then a write, so every write of a bank's entries of one kind
holds a lock of the store's lock provider (`DueIndex.lock`): no exact write or other lowering
lands between them, among the processes the provider reaches (one host, or all with
`lock_url`).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from adk_memory.store import DueDocument
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import DUE, Chroma, upsert_arguments
from adk_memory_chroma._journal import JOURNAL_LEASE_SECONDS, JOURNAL_WAIT_SECONDS
from adk_memory_chroma._locks import Locks
from adk_memory_chroma._sizing import Limits, requests

_KIND, _BANK, _KEY, _US = "dk", "b", "key", "due_us"
"""Fields of a due-index row."""


class DueMirror:
    """Embedded only: the due index's rows as this process last read or wrote them.

    The directory is this process's alone (`_folder`), so a row the mirror knows is the row
    stored. Every change of the index goes through `lock` in a worker thread, so a lowering's
    read and write are one step (no exact write lands between them) and a lowering the mirror
    shows to be no earlier costs no call at all (every create lowers its bank's expiry entry).
    Raises and removals wait in `deferred` (see the module docstring).
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.due_us: dict[str, int | None] = {}
        """Row id -> its stored `due_us`, or None for a row known to be absent."""
        self.deferred: dict[str, codec.Row | None] = {}
        """Row id -> the row that raises it, or None to remove it: not written yet, the stored
        entry (`due_us`, earlier) standing in meanwhile."""

    def changes(
        self,
        kind: str,
        bank_id: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool,
    ) -> tuple[list[codec.Row], list[str]] | None:
        """Under `lock`: the rows to write and ids to delete now; raises and removals deferred.

        None, deferring nothing, while a lowering needs a row the mirror does not know (read it
        first). An exact write of a row never read is written now.
        """
        if only_earlier and any(_due_id(kind, bank_id, key) not in self.due_us for key in dues):
            return None
        rows: list[codec.Row] = []
        gone: list[str] = []
        for key, due in dues.items():
            row_id = _due_id(kind, bank_id, key)
            if only_earlier and not self._lowers(row_id, due):
                continue
            row = None if due is None else due_row(kind, bank_id, key, due)
            if row_id not in self.due_us:
                self.deferred.pop(row_id, None)
                rows += [row] if row is not None else []
                gone += [row_id] if row is None else []
                continue
            stored = self.due_us[row_id]
            if (row[3][_US] if row is not None else None) == stored:
                self.deferred.pop(row_id, None)
            elif row is not None and (stored is None or row[3][_US] < stored):
                self.deferred.pop(row_id, None)
                rows.append(row)  # a lowering: written before its document
            else:
                self.deferred[row_id] = row  # a raise or a removal: the stored entry is earlier
        return rows, gone

    def _lowers(self, row_id: str, due: datetime | None) -> bool:
        """Whether `due` is earlier than the entry is to be (deferred, else stored; or absent)."""
        if due is None:
            return False
        if row_id in self.deferred:
            row = self.deferred[row_id]
            current = None if row is None else int(row[3][_US])
        else:
            current = self.due_us.get(row_id)
        return current is None or codec.micros(due) < current

    def write(self, index: Any, limits: Limits, rows: list[codec.Row], gone: list[str]) -> None:
        """Writes `rows` and deletes `gone` with every deferred change, and remembers them.

        Under `lock`, in a worker thread: one delete and one upsert (per request limit).
        """
        for row_id, row in self.deferred.items():
            if row is None:
                gone.append(row_id)
            else:
                rows.append(row)
        self.deferred.clear()
        for row_id in [*gone, *(row[0] for row in rows)]:
            self.due_us.pop(row_id, None)  # unknown until written
        for start in range(0, len(gone), limits[0]):
            index.delete(ids=gone[start : start + limits[0]])
        for chunk in requests(rows, limits):
            index.upsert(**upsert_arguments(chunk))
        self.due_us.update(dict.fromkeys(gone))
        self.due_us.update((row[0], row[3][_US]) for row in rows)


class DueIndex:
    """The due index of a store (`<prefix>.due`): its reads and writes, and its locks."""

    def __init__(self, chroma: Chroma, locks: Locks) -> None:
        self._chroma = chroma
        self._locks = locks
        self.mirror: DueMirror | None = None
        """Embedded only, shared by this process's stores on the directory: `DueMirror`."""

    async def documents(self, kind: str, now: datetime, *, limit: int = 1000) -> list[DueDocument]:
        """Due entries of one kind up to `now`, earliest first (one `get` of the due index).

        Embedded, the deferred raises and removals are written first (one call).
        """
        where = {"$and": [{_KIND: kind}, {_US: {"$lte": codec.micros(now)}}]}

        async def work(index: Any) -> list[DueDocument]:
            await self._write_deferred(index)
            found = await self._chroma.call(
                "list due documents", index.get, where=where, include=["metadatas"]
            )
            entries = sorted((meta[_US], meta[_BANK], meta[_KEY]) for meta in found["metadatas"])
            return [
                DueDocument(bank_id, key, codec.EPOCH + timedelta(microseconds=due_us))
                for due_us, bank_id, key in entries[: max(limit, 0)]
            ]

        return await self._chroma.on_store_wide(work, DUE)

    async def set_entries(
        self,
        bank_id: str,
        kind: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool = False,
    ) -> None:
        """Sets due entries (one upsert, one delete), or lowers them (one read, one upsert).

        Embedded, each is one step under the `DueMirror`'s lock, reads only rows the mirror does
        not know, and writes only lowerings now: raises and removals wait for the index's next
        call or read (`DueMirror.deferred`). On a server, each holds the bank's due lock
        (`lock`).
        """
        ids = [_due_id(kind, bank_id, key) for key in dues]
        mirror = self.mirror
        # Not waiting on the loop for a lock a worker thread holds during a Chroma call.
        if mirror is not None and mirror.lock.acquire(blocking=False):
            try:
                planned = mirror.changes(kind, bank_id, dues, only_earlier=only_earlier)
            finally:
                mirror.lock.release()
            if planned == ([], []):
                return  # already so, or deferred: nothing to write now (nor to wait for)

        def change(index: Any, mirror: DueMirror, limits: Limits) -> None:
            with mirror.lock:
                unknown = [row_id for row_id in ids if row_id not in mirror.due_us]
                if only_earlier and unknown:
                    found = index.get(ids=unknown, include=["metadatas"])
                    mirror.due_us.update(dict.fromkeys(unknown))
                    mirror.due_us.update(_due_times(found))
                planned = mirror.changes(kind, bank_id, dues, only_earlier=only_earlier)
                rows, gone = planned or ([], [])
                mirror.write(index, limits, rows, gone)

        async def work(index: Any) -> None:
            mirror = self.mirror  # set once connected (`Chroma.connection`)
            if mirror is not None:
                limits = await self._chroma.limits()
                await self._chroma.call(
                    "write due entries", change, index=index, mirror=mirror, limits=limits
                )
                return
            async with self.lock(bank_id, kind):
                current = None
                if only_earlier:
                    found = await self._chroma.call(
                        "read due entries", index.get, ids=ids, include=["metadatas"]
                    )
                    current = dict(_due_times(found))
                rows, gone = _due_changes(kind, bank_id, dues, current)
                if gone:
                    await self._chroma.delete_ids("remove due entries", index, gone)
                if rows:
                    await self._chroma.write("write due entries", index, rows)

        if ids:
            await self._chroma.on_store_wide(work, DUE)

    async def write_deferred(self) -> None:
        """Writes the deferred raises and removals now (embedded; e.g. before a store closes)."""
        if self.mirror is not None and self.mirror.deferred:
            await self._chroma.on_store_wide(self._write_deferred, DUE)

    async def _write_deferred(self, index: Any) -> None:
        mirror = self.mirror
        if mirror is None or not mirror.deferred:
            return
        limits = await self._chroma.limits()

        def write() -> None:
            with mirror.lock:
                mirror.write(index, limits, [], [])

        await self._chroma.call("write due entries", write)

    def lock(self, bank_id: str, kind: str) -> contextlib.AbstractAsyncContextManager[Any]:
        """Serialises a server's writes of one bank's due entries of `kind`.

        A lowering is a read then a write: without the lock, an exact write (a sweep setting
        the expiry entry) or another lowering landing in between would be overwritten by a
        later time, and the entry would stay late until the bank's next sweep. The lock
        provider's reach is the guarantee's: the processes of a host, or every host with
        `lock_url`.
        """
        return self._locks.provider().lock(
            f"due:{self._chroma.name(bank_id, kind)}",
            lease_seconds=JOURNAL_LEASE_SECONDS,
            wait_seconds=JOURNAL_WAIT_SECONDS,
        )

    async def forget_bank(self, bank_id: str) -> None:
        """Removes a deleted bank's due entries (of every kind)."""

        def forget(index: Any, mirror: DueMirror, limits: Limits) -> None:
            with mirror.lock:
                mirror.write(index, limits, [], [])  # the deferred changes, of any bank
                mirror.due_us.clear()  # its row ids do not say which bank they belong to
                index.delete(where={_BANK: bank_id})

        async def work(index: Any) -> None:
            if self.mirror is not None:
                limits = await self._chroma.limits()
                await self._chroma.call(
                    "remove due entries", forget, index=index, mirror=self.mirror, limits=limits
                )
            else:
                await self._chroma.call("remove due entries", index.delete, where={_BANK: bank_id})

        await self._chroma.on_store_wide(work, DUE)

    def forget_all(self) -> None:
        """Forgets what the mirror holds: the index was dropped."""
        if self.mirror is not None:
            with self.mirror.lock:
                self.mirror.due_us.clear()
                self.mirror.deferred.clear()


def _due_id(kind: str, bank_id: str, key: str) -> str:
    """The id of a document's due-index row."""
    return codec.digest(f"{kind}\x1f{bank_id}\x1f{key}")


def due_row(kind: str, bank_id: str, key: str, due: datetime) -> codec.Row:
    row_id = _due_id(kind, bank_id, key)
    meta = {_KIND: kind, _BANK: bank_id, _KEY: key, _US: codec.micros(due)}
    return row_id, codec.placeholder_vector(row_id), None, meta


def _due_times(found: Mapping[str, Any]) -> Iterator[tuple[str, int]]:
    """`(row id, due_us)` of the due rows a `get` found."""
    for row_id, meta in zip(found["ids"], found["metadatas"], strict=True):
        yield row_id, int(meta[_US])


def _due_changes(
    kind: str,
    bank_id: str,
    dues: Mapping[str, datetime | None],
    stored: Mapping[str, int | None] | None,
) -> tuple[list[codec.Row], list[str]]:
    """The due rows to write and the row ids to delete.

    Exactly `dues`, or with `stored` (the stored `due_us` by row id) only the entries that
    `dues` makes earlier (a lowering).
    """
    rows: list[codec.Row] = []
    gone: list[str] = []
    for key, due in dues.items():
        row_id = _due_id(kind, bank_id, key)
        if due is None:
            if stored is None:
                gone.append(row_id)
            continue
        current = None if stored is None else stored.get(row_id)
        if stored is None or current is None or current > codec.micros(due):
            rows.append(due_row(kind, bank_id, key, due))
    return rows, gone
