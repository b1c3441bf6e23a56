"""Group commit: how `apply` checks batches and writes those in flight together as one.

Group commit. The lock is per bank, not per scope: per-scope locks cannot make embedded writes
overlap. chromadb 1.5's embedded `upsert` and `delete` hold Python's GIL for the whole call (its
bindings release it only in `get` and `query`), so a process runs one Chroma write at a time
whatever we lock, and its event loop waits meanwhile. A Chroma call's cost is mostly fixed
(16 memories with their revisions in one pair of calls cost about 2.3 times one), so writes in
flight together share calls instead: each `apply` queues its batch, and the writer that holds
the lock writes the batches queued behind it as one (`_take_group`: up to 32 consecutive
independent batches, no two touching one memory or writing one document, operation or revision,
so their order cannot matter). Each batch is checked alone: its inserts and
expectations against the rows as stored, then, just before the shared write, its fences (the
leases of the locks it was decided under). One that fails gets its own error (`AlreadyExists`,
`Aborted`) and is left out; the rest share one journal, so a crash leaves all of them or none.
The due entries of a batch's documents are lowered by its own `apply` before it queues
(`lower_dues`, mostly no call: `_due.DueMirror`) and set exactly once the group is committed, in
one due-index call for the whole group (`Changes.dues`), before any batch of it returns: a batch
whose entries could not be set gets that `StoreUnavailable` (its rows are stored; the entries
stay early, never late). A writer cancelled before the commit hands the others back to the
queue; one whose batch another writer took gets that batch's outcome.

With 20 ADK users at once on embedded Chroma, every generation's batch (memories, their
expectations, the ingest stream's document and two leases) and every hand-over of turns' events
(documents) went alone, one after the other: a flush waited about 140 ms for the lock to write
for 25 ms. Grouped, they share the calls. So do the due entries they set afterwards: one call each
(an ingest flush removes its stream's entry) held the GIL as long as a group's write.

Each batch is checked against the rows as stored, under the bank's journal lock once any pending
journal is replayed (`_journal`); the scope index rows of the scopes the group changes join its
aux rows (`_scope_index`), and once committed whole, the scopes cached (by this store, or,
embedded, by any store of the process on the directory) are advanced to the batch's version
(`_vectors`, "Write-through").
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from adk_memory.errors import AdkMemoryError, AlreadyExists, InvalidArgument
from adk_memory.store import Expectation, MemoryRecord, WriteBatch, check_expectations
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._child import fixed_dimension
from adk_memory_chroma._chroma import AUX, MEM, Chroma
from adk_memory_chroma._due import DueIndex
from adk_memory_chroma._journal import Journal, Plan, new_batch_id
from adk_memory_chroma._records import document_rows
from adk_memory_chroma._scope_index import ScopeIndex
from adk_memory_chroma._vectors import (
    ScopeWrite,
    as_read_embedded,
    as_read_http,
    scope_writes,
)

logger = logging.getLogger(__name__)

_GROUP_BATCHES = 32
"""At most this many batches are written together (`_take_group`)."""


@dataclass(frozen=True, slots=True)
class Changes:
    """One batch as rows, before the scope index rows that `BatchWriter.write` adds."""

    memory_rows: list[codec.Row]
    revision_rows: list[codec.Row]
    """Revisions, documents and operations: every aux row of the batch."""
    deletes: list[str]
    batch: WriteBatch
    """For its inserts, expectations and fences."""
    expired_at: int | None = None
    """A sweep: delete only those of `deletes` whose `live_us` is at most this."""
    dues: Mapping[str, Mapping[str, datetime | None]] = field(default_factory=dict)
    """The exact due entries of the batch's documents, by kind and key, set after the commit."""

    @property
    def touched_ids(self) -> set[str]:
        """The memories the batch writes, deletes or expects a state of."""
        expected = {expectation.memory_id for expectation in self.batch.expect}
        return {row[0] for row in self.memory_rows} | set(self.deletes) | expected

    @property
    def dimension(self) -> int | None:
        """The dimension of the batch's vectors (None without memory rows)."""
        return len(self.memory_rows[0][1]) if self.memory_rows else None

    @property
    def aux_ids(self) -> set[str]:
        """The aux rows the batch writes: revisions, documents and operations."""
        return {row[0] for row in self.revision_rows}

    def joins(self, group: Sequence[_Queued]) -> bool:
        """Whether the batch may be written together with `group` (see `_take_group`).

        It may when it is independent of the group: it touches (writes, deletes or expects) no
        memory of the group and writes no aux row of the group (so two documents of one kind
        and key never go together), and its vectors have the group's dimension.
        """
        dimensions = {self.dimension, *(entry.changes.dimension for entry in group)} - {None}
        touched = set().union(*(entry.changes.touched_ids for entry in group))
        written = set().union(*(entry.changes.aux_ids for entry in group))
        return (
            len(dimensions) <= 1 and not self.touched_ids & touched and not self.aux_ids & written
        )

    def checked_deletes(self, stored: Mapping[str, Any]) -> list[str]:
        """Checks the batch against the rows as stored; returns the ids it deletes.

        Raises:
            AlreadyExists: An insert names a live memory.
            Aborted: An expectation does not hold.
        """
        batch = self.batch
        if batch.inserts:
            _check_inserts(stored, batch.inserts)
        if batch.expect:
            _check_expectations(stored, batch.expect)
        # Only rows that exist: deleting another is a no-op, and the slot's probe of its last
        # deletion must be a row that its batch removes.
        deletes = [memory_id for memory_id in self.deletes if memory_id in stored]
        if self.expired_at is not None:  # a sweep: only what is (still) expired
            deletes = [
                memory_id
                for memory_id in deletes
                if int(stored[memory_id][codec.LIVE_US]) <= self.expired_at
            ]
        return deletes

    @property
    def wanted(self) -> list[str]:
        """The memory rows the checks and the scope index need as stored.

        Not fresh inserts (`WriteBatch.fresh_inserts`): a group of creates reads no memory row.
        """
        batch = self.batch
        inserts = () if batch.fresh_inserts else batch.inserts
        return [
            *(record.memory_id for record in (*inserts, *batch.upserts)),
            *self.deletes,
            *(expected.memory_id for expected in batch.expect),
        ]


@dataclass(eq=False, slots=True)
class _Queued:
    """A batch waiting for the bank's journal lock, and what its `apply` will return."""

    changes: Changes
    outcome: asyncio.Future[int]
    """Set by whichever writer writes the batch: its deletions, or the error."""


_Accepted = tuple[_Queued, list[str]]
"""A batch of a group that passed its checks, and the ids it deletes."""


@dataclass(frozen=True, slots=True)
class _GroupRows:
    """What a group's accepted batches write, as one batch."""

    accepted: list[_Accepted]
    memory_rows: list[codec.Row]
    aux_rows: list[codec.Row]
    """Revisions, documents, operations and the scope index rows."""
    deletes: list[str]
    heads: dict[str, str]
    """Per scope touched, the scope index version the group replaces (`ScopeIndex.rows_after`)."""


class BatchWriter:
    """Writes the batches of a store's `apply` calls: queued per bank, checked, group-committed."""

    def __init__(
        self,
        chroma: Chroma,
        journal: Journal,
        scopes: ScopeIndex,
        due: DueIndex,
    ) -> None:
        self._chroma = chroma
        self._journal = journal
        self._scopes = scopes
        self._due = due
        self.dimensions: dict[str, int] = {}
        """Per bank, the dimension of its memories' vectors, once checked (`_check_dimension`)."""
        self._queues: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, list[_Queued]]
        ] = weakref.WeakKeyDictionary()
        """Per event loop and bank, the batches waiting for the journal lock, oldest first."""

    async def write(self, bank_id: str, memories: Any, changes: Changes) -> int:
        """Writes one batch under the bank's journal lock; returns its deletions.

        Group commit: the batch waits in the bank's queue, and whichever writer holds the lock
        writes the queued batches that can go together as one (`_take_group`), so writers of
        one process in flight together share Chroma's calls instead of taking turns for them.
        """
        entry = _Queued(changes, asyncio.get_running_loop().create_future())
        queue = self._queues.setdefault(asyncio.get_running_loop(), {}).setdefault(bank_id, [])
        queue.append(entry)
        try:
            async with self._journal.lock(bank_id):
                while not entry.outcome.done():
                    await self._write_group(bank_id, memories, _take_group(queue), queue)
        except asyncio.CancelledError:
            raise
        except Exception:
            if not entry.outcome.done():  # else another writer wrote it: its outcome stands
                raise
        finally:
            if entry in queue:
                queue.remove(entry)
        return entry.outcome.result()

    async def _write_group(
        self, bank_id: str, memories: Any, group: list[_Queued], queue: list[_Queued]
    ) -> None:
        """`_write_checked`, giving every batch of the group its outcome whatever happens.

        A writer cancelled before the group's commit (the commit itself cannot be cancelled)
        puts the others back at the front of the queue: their own writers, waiting for the lock,
        write them next.
        """
        try:
            await self._write_checked(bank_id, memories, group)
        except Exception as exc:
            for entry in group:
                if not entry.outcome.done():
                    entry.outcome.set_exception(exc)
            raise
        except BaseException:
            queue[:0] = [entry for entry in group if not entry.outcome.done()]
            raise

    async def _write_checked(self, bank_id: str, memories: Any, group: list[_Queued]) -> None:
        """Checks each batch of the group, then writes those that pass as one batch.

        The scope index rows of every scope the group changes are computed here, from the rows
        as stored once any pending journal is replayed, and join its aux rows. A batch that
        fails its checks gets its error and is left out; the others are written.
        """
        aux = await self._chroma.collection(self._chroma.name(bank_id, AUX))
        if self._journal.settled is None or bank_id not in self._journal.settled:
            await self._journal.replay(bank_id, memories, aux)
        dimension = next((e.changes.dimension for e in group if e.changes.dimension), None)
        if dimension is not None:
            memories = await self._check_dimension(bank_id, memories, dimension)
        stored = await self._chroma.read_metadata(
            memories, [memory_id for entry in group for memory_id in entry.changes.wanted]
        )
        accepted: list[_Accepted] = []
        for entry in group:
            try:
                accepted.append((entry, entry.changes.checked_deletes(stored)))
            except AdkMemoryError as exc:
                entry.outcome.set_exception(exc)
        batch_id = new_batch_id()
        rows = await self._rows_held(aux, stored, accepted, batch_id)
        if rows is None:
            return
        plan = await self._journal.plan(batch_id, rows.memory_rows, rows.aux_rows, rows.deletes)
        # From the first journal row to the journal's removal nothing may stop half-way in this
        # process: a cancelled caller waits for the end of the batch.
        self._journal.settle(bank_id, False)
        as_read = as_read_http if self._chroma.on_server() else as_read_embedded
        writes = scope_writes(batch_id, rows.heads, rows.memory_rows, rows.deletes, as_read)
        epoch = self._mirrors_writing(bank_id, rows)
        await _uncancellable(self._commit_group(bank_id, memories, aux, plan, rows, writes, epoch))

    async def _rows_held(
        self, aux: Any, stored: Mapping[str, Any], accepted: list[_Accepted], batch_id: str
    ) -> _GroupRows | None:
        """The rows of the accepted batches whose fences still hold (None: no batch is left).

        The fences are the last check, just before the commit; a batch whose lease lapsed gets
        `Aborted`, and the scope index rows are computed again without it.
        """
        while accepted:
            memory_rows = [
                _replacing(row, stored.get(row[0]))
                for entry, _ in accepted
                for row in entry.changes.memory_rows
            ]
            deletes = [memory_id for _, deleted in accepted for memory_id in deleted]
            index, heads = await self._scopes.rows_after(
                aux, stored, memory_rows, deletes, batch_id
            )
            held = await _fences_held(accepted)
            if len(held) == len(accepted):
                revisions = [row for entry, _ in accepted for row in entry.changes.revision_rows]
                return _GroupRows(accepted, memory_rows, [*revisions, *index], deletes, heads)
            accepted = held
        return None

    async def _commit_group(
        self,
        bank_id: str,
        memories: Any,
        aux: Any,
        plan: Plan,
        rows: _GroupRows,
        writes: Mapping[str, ScopeWrite],
        documents_epoch: int,
    ) -> None:
        """`Journal.commit`, the group's due entries, then each batch's outcome (uncancellable).

        Only a batch committed whole reaches the vector cache (write-through) and the mirrors:
        the scopes it changed are then, at its version, exactly what the cache can compute.
        """
        await self._journal.commit(bank_id, memories, aux, plan)
        self._journal.settle(bank_id, True)
        self._mirrors_committed(bank_id, memories, aux, rows, plan.batch_id, documents_epoch)
        failure = await self._set_dues(bank_id, rows.accepted)
        for entry, deleted in rows.accepted:
            if failure is None:
                entry.outcome.set_result(len(deleted))
            else:
                entry.outcome.set_exception(failure)
        if writes:  # after the outcomes: the batch has happened, whatever the cache does
            self._journal.written[bank_id] = plan.batch_id
            for scope_key, write in writes.items():
                self._scopes.cache.write_through((str(memories.id), scope_key), write)

    def _mirrors_writing(self, bank_id: str, rows: _GroupRows) -> int:
        """Embedded, before the first call: the mirrors forget what the batch writes.

        Returns the documents' epoch (`DocumentMirror.writing`).
        """
        epoch = 0
        if self._journal.documents is not None:
            documents = [row[0] for row in document_rows(rows.aux_rows)]
            epoch = self._journal.documents.writing(bank_id, documents)
        if self._journal.records is not None:
            written = [row[0] for row in rows.memory_rows]
            self._journal.records.writing(bank_id, [*written, *rows.deletes])
        if self._journal.heads is not None:
            self._journal.heads.writing(bank_id, rows.heads)
        return epoch

    def _mirrors_committed(
        self,
        bank_id: str,
        memories: Any,
        aux: Any,
        rows: _GroupRows,
        batch_id: str,
        documents_epoch: int,
    ) -> None:
        """Embedded, once committed whole: the rows first, so a version known has its rows."""
        if self._journal.documents is not None:
            documents = document_rows(rows.aux_rows)
            self._journal.documents.committed(bank_id, str(aux.id), documents, documents_epoch)
        if self._journal.records is not None and rows.memory_rows:
            vectors = as_read_embedded([row[1] for row in rows.memory_rows])
            self._journal.records.committed(bank_id, str(memories.id), rows.memory_rows, vectors)
        if self._journal.heads is not None:
            versions = dict.fromkeys(rows.heads, batch_id)
            self._journal.heads.committed(bank_id, str(memories.id), versions)

    async def _set_dues(self, bank_id: str, accepted: Sequence[_Accepted]) -> AdkMemoryError | None:
        """Sets the due entries of the committed batches' documents: one call per kind.

        No two batches of a group write one document, so their entries never collide. Returns
        the store's error instead of raising it: the batches are stored whatever it says.
        """
        by_kind: dict[str, dict[str, datetime | None]] = {}
        for entry, _ in accepted:
            for kind, dues in entry.changes.dues.items():
                by_kind.setdefault(kind, {}).update(dues)
        try:
            for kind, dues in by_kind.items():
                await self._due.set_entries(bank_id, kind, dues)
        except AdkMemoryError as exc:
            return exc
        return None

    async def _check_dimension(self, bank_id: str, memories: Any, dimension: int) -> Any:
        """Refuses vectors whose dimension differs from the bank's memories' (before any write).

        Chroma fixes a collection's dimension at its first write, even after every row is
        deleted; an empty memory collection of another dimension (the bank changed its embedding
        model while empty) is re-created.
        """
        if self.dimensions.get(bank_id) == dimension:
            return memories
        probe = await self._chroma.get(
            "read the vector dimension",
            memories,
            where={codec.LIVE_US: {"$gte": -codec.NEVER_US}},  # memories only, not the journal
            limit=1,
            include=["embeddings"],
        )
        if probe["ids"]:
            existing = len(probe["embeddings"][0])
            if existing != dimension:
                raise InvalidArgument(
                    f"Bank {bank_id!r} holds memories with {existing}-dimensional embeddings; "
                    f"these have {dimension}. Re-embed the bank's memories (adk-memory reembed) "
                    "or use the embedding model the bank was created with.",
                    field="embedding",
                )
        else:
            memories = await self._reopen_empty(bank_id, dimension)
        self.dimensions[bank_id] = dimension
        return memories

    async def _reopen_empty(self, bank_id: str, dimension: int) -> Any:
        """The bank's empty memory collection, opened afresh; re-created if of another dimension.

        Chroma fixes a collection's dimension at its first write, even after every row is deleted.
        """
        name = self._chroma.name(bank_id, MEM)
        self._chroma.forget_collection(name)
        fresh = await self._chroma.collection(name)
        fixed = fixed_dimension(fresh)
        if fixed is None or fixed == dimension:
            return fresh
        logger.debug("re-creating empty memory collection of bank %s", bank_id)
        await self._chroma.delete_collection(name)
        return await self._chroma.collection(name, create=True, memories=True)


def _take_group(queue: list[_Queued]) -> list[_Queued]:
    """Takes from the front of `queue` the batches to write together.

    The first, and those right behind it that can join it (`Changes.joins`); stopping at the
    first that cannot keeps batches in the order their writers asked for the lock.
    """
    group = [queue.pop(0)]
    while queue and len(group) < _GROUP_BATCHES and queue[0].changes.joins(group):
        group.append(queue.pop(0))
    return group


async def _fences_held(accepted: Sequence[_Accepted]) -> list[_Accepted]:
    """The batches whose fences all still hold; each other one gets its `Aborted`.

    The leases are verified concurrently (a lease of another process's lock is a round trip).
    """

    async def verified(entry: _Queued) -> AdkMemoryError | None:
        try:
            for lease in entry.changes.batch.fences:
                await lease.verify()
        except AdkMemoryError as exc:
            return exc
        return None

    failures = await asyncio.gather(*(verified(entry) for entry, _ in accepted))
    held: list[_Accepted] = []
    for (entry, deleted), failure in zip(accepted, failures, strict=True):
        if failure is None:
            held.append((entry, deleted))
        else:
            entry.outcome.set_exception(failure)
    return held


def _replacing(row: codec.Row, before: Mapping[str, Any] | None) -> codec.Row:
    """`row`, clearing the fields of the row it replaces that it lacks.

    A Chroma upsert merges metadata into the stored row: a metadata key, topic or expiry field
    left out would stay (and filters would still match it); None removes it.
    """
    row_id, vector, fact, meta = row
    stale = {key: None for key in before or () if key not in meta}
    return (row_id, vector, fact, {**stale, **meta}) if stale else row


def _check_inserts(stored: Mapping[str, Any], inserts: Sequence[MemoryRecord]) -> None:
    """`AlreadyExists` for an insert whose id is live at its `create_time` (`stored`: metadata)."""
    for record in inserts:
        meta = stored.get(record.memory_id)
        if meta is not None and int(meta[codec.LIVE_US]) > codec.micros(record.create_time):
            raise AlreadyExists(
                f"A memory with id {record.memory_id!r} already exists; nothing in the "
                "batch was written. Use another id or update the memory."
            )


def _check_expectations(stored: Mapping[str, Any], expectations: Sequence[Expectation]) -> None:
    """`check_expectations` on the memories as stored (journal lock held, journal replayed)."""
    live: dict[str, datetime | None] = {}
    for expected in expectations:
        meta = stored.get(expected.memory_id)
        alive = meta is not None and int(meta[codec.LIVE_US]) > codec.micros(expected.now)
        updated = int(meta[codec.UPDATE_US]) if alive and meta is not None else 0
        live[expected.memory_id] = codec.EPOCH + timedelta(microseconds=updated) if alive else None
    check_expectations(expectations, live)


async def _uncancellable(work: Coroutine[Any, Any, None]) -> None:
    """Runs `work` to its end even if the caller is cancelled meanwhile, then re-raises that.

    A write that was cancelled half-way would leave a batch half applied in a live process (the
    worker thread of the current Chroma call cannot be stopped either).
    """
    task = asyncio.ensure_future(work)
    cancelled = False
    while not task.done():
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            cancelled = True  # also when `work` ended in the same turn: ours is still asked
    task.result()
    if cancelled:
        raise asyncio.CancelledError
