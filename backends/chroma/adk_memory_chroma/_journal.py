"""The write-ahead journal of a bank: how a batch over two collections is all or nothing.

Atomicity. Chroma commits each call on its own (one `upsert` or `delete` is one SQLite
transaction when embedded, one log append on a server), but a batch touches two collections in
several calls. `apply` checks everything that can be checked first (`_writer`:
duplicate inserts, vector dimensions, encodability) and writes nothing if a check fails. It then
commits the batch with ONE call that carries a journal of what the later calls will write
(`_codec`, "Journal rows"), writes the rest with idempotent calls, and closes the journal:

Documents and operations in a batch (`WriteBatch.documents`, `.operations`) are aux rows written
with the revisions: below, "revisions" means all three, and they share the revisions' journal
entries and replay.

Every batch that writes or deletes a memory also has the scope index rows it changes among its
revisions.

* a batch that writes fewer than `MEMORY_SLOT_ROWS` memories or only deletes (engine writes,
  purges, sweeps): call 1 upserts the revisions together with the bank's journal slot `j:slot` in
  aux, which holds the memory rows (vectors included) and the deletions; call 2 upserts the
  memories, each row carrying the batch id (`jb`); call 3 deletes (if any). Nothing closes the slot:
  the next batch overwrites it, and a replay tells a complete batch from an interrupted one by the
  rows the slot names (`_codec.slot_complete`: its first memory row carries its `jb`, its last
  deleted id is gone). That holds because every later write of a memory overwrites the slot first,
  under the lock, and a batch deletes only ids that exist. A create is thus two calls, neither
  rewriting a vector of the bank's dimension (Chroma re-indexes a replaced row's vector: ~4 ms at
  384-d);
* a batch with more memory rows (imports): call 1 upserts an empty aux slot (so that the slot's
  batch, which this one may rewrite, cannot look interrupted later); call 2 upserts the memory rows
  together with the memory collection's slot `j:slot` (a vector of the bank's dimension, no `sk` or
  `live_us`, so no memory read matches it), which holds the revisions and the deletions; call 3
  deletes; call 4 upserts the revisions with `j:done`, naming the batch, which closes the slot. The
  vectors travel once (in the aux slot they travel twice), and the scopes' heads are written after
  the memory rows;
* a batch that one call can hold (only revisions) needs no journal;
* a batch too large for one request (more rows than Chroma's batch size, or, on a server, about
  16 MiB): everything goes into an aux journal written first (part rows, then its commit row),
  then the revisions with an emptied slot (so that the slot's batch, which this one may rewrite,
  cannot look interrupted later), the memories and deletions, then the journal is deleted (the
  vectors travel twice).

Before issue 18's fast writes, every batch with memory rows used the memory collection's slot,
so one left pending by an older version is completed like any other. As for the index, no older
version may write a bank once this one has: its writes leave the aux slot as it is, so a replay
could take the slot's batch for an interrupted one and write its rows again over newer ones.

A batch has happened once the call carrying its commit row succeeded. Replay: before its first
read or write of a bank, and at the start of every `apply`, a store instance reads aux's journal
rows and the memory rows the slot names (two small reads); a journal not complete is completed
(its writes repeated). An embedded process skips the check in `apply` for a bank whose
last batch in this process completed (`Journal.settled`: the folder is single-process, so no other
writer can have left a journal). So after a crash at any step, once the bank is next used, either
none of a batch (crash before its commit row) or all of it is visible, and each memory agrees
with its latest revision. A failure after the commit row is retried once and otherwise reported
as `StoreUnavailable` saying that the batch will be completed, never rolled back; a request that
failed on the way back is checked for its commit row and completed if it is there. A caller
cancelled after the commit row waits for the end of the batch (the calls run in threads that
cannot be stopped half-way anyway).

Setting aside. A replay that Chroma refuses (`InvalidArgument`: its `InvalidArgumentError` or
`InvalidDimensionException`, e.g. a NaN vector) would be refused again at every later replay, so
before every read and write of the bank, for every user: a journal must never be able to wedge
a bank. Such a batch, and a journal no version wrote (corrupt, malformed, or holding rows
chromadb's client refuses with a `ValueError`), is set aside (`Journal._set_aside`): its journal
text is kept in `SET_ASIDE_PART_KIND` documents, a `SET_ASIDE_KIND` document reports it, both
before the journal is closed (a crash in between sets it aside again), an ERROR is logged, and
the replay goes on; whatever of the batch was written stays. `adk-memory banks set-aside` lists
them. Every other failure (`StoreUnavailable`: a server that is down, failing, rate-limiting;
`Gone`) is raised and leaves the batch pending, so an outage never costs a batch. `apply`
refuses vectors Chroma would refuse before journaling (`store.check_vectors`), so setting aside
is the last line of defence.

Cost (measured with chromadb 1.5, 384-d vectors): a lock, two small reads (skipped when
settled), the reads of the touched memories and index buckets, and the slot row in the first
write. A one-memory write is dominated by Chroma's per-call cost: each upsert is two SQLite
commits (embedded folders use SQLite's write-ahead log, `_folder`, which cut one upsert from
15-30 ms to 3-8 ms) plus ~3 ms of Chroma's own work even on tmpfs, whatever the rows' size.

Concurrency. Each `apply` holds a per-bank journal lock from its checks to the end of its
batch (an `asyncio.Lock`, then the store's lock provider: a file lock next to embedded data, a
Redis lock with `lock_url`), and a replay takes the same lock. So a replay never re-applies the
journal of a live writer (which could overwrite a newer write of the same memory once that
writer is done), the slot is only overwritten once its batch is complete, and duplicate-insert
checks do not race. Two stores replaying the same journal one after the other are harmless: the
second finds it closed, or repeats identical writes. On a server the lock is `lock_url`'s (several
hosts) or `single_host`'s; without either, the store does not write (`_locks`). The lock is
taken only by writes and replays: a reader in another process may still see a batch half applied
*while it is being written* (for the milliseconds of one `apply`), and a long-lived reader sees a
crashed writer's half batch until that bank's next `apply`, which completes it before writing.
The promise is about crashes; readers are eventually consistent within one `apply`, and
generation, which reads and writes one scope under its own lock, always writes its decisions
after any pending batch is completed. A multi-request aux journal whose writer dies before its
commit row leaves part rows that nothing reads; they go with the bank.

Migration. A bank written before the index (layout 1) has no `j:layout` row in aux. Before its
first use (`Journal.recover`) or write (`Journal.replay`), under the journal lock, a store
completes any pending journal, then reads every memory row's scope and expiry a page at a time
and writes every scope's head and buckets, the `j:layout` row last; a crash before that row is
written only means the build is repeated. Nothing else changes (same collections, rows and
journal), so an upgrade is in place and automatic; a bank of layout 2 must then not be written by
an older version (its writes would miss the index): upgrade every process that shares a Chroma
server together.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
import weakref
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from adk_memory.errors import (
    AdkMemoryError,
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    StoreUnavailable,
)
from adk_memory.store import SET_ASIDE_KIND, SET_ASIDE_PART_KIND
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import AUX, MEM, Chroma, Gone
from adk_memory_chroma._locks import Locks
from adk_memory_chroma._sizing import fits_one_request

if TYPE_CHECKING:
    from adk_memory_chroma._records import DocumentMirror, RecordMirror
    from adk_memory_chroma._scope_index import HeadMirror

logger = logging.getLogger(__name__)

SLOT = "slot"
"""`Plan.home` of a batch journaled in the bank's slot (in aux, with its revisions)."""
MEMORY_SLOT = "mem-slot"
"""Home of a batch journaled in the memory collection's slot, with its memory rows (closed by
`j:done`): a batch of at least `MEMORY_SLOT_ROWS` memory rows (before issue 18's fast writes,
every batch with memory rows)."""
MEMORY_SLOT_ROWS = 64
"""Memory rows from which a batch is journaled in the memory collection's slot: its vectors
then travel once (in the aux slot they travel twice, in the journal and in the rows), for two
more small calls (emptying the aux slot, `j:done`) and one slot vector of the bank's dimension
re-indexed. Measured (store `apply`, loaded machine): the aux slot is faster at 16 rows (71 vs
95 ms), even at 64; imports gained 0-15% (`benchmarks/NOTES.md`, "sync_threshold"), so group
commits of single creates (at most 32 rows) stay in aux."""
JOURNAL_CHUNK_CHARS = 4 * 2**20
"""Characters (= bytes: the journal is ASCII) of journal text per part row."""
JOURNAL_INLINE_CHARS = 16 * 2**10
"""A journal text up to this long is kept in its commit row, the journal's only row."""
JOURNAL_LEASE_SECONDS = 30.0
"""Lease of the per-bank journal lock (a Redis lock is renewed while held; a file lock needs none,
the OS releases a dead holder's)."""
JOURNAL_WAIT_SECONDS = 120.0
"""How long a write or a first read waits for another writer of the bank to finish its batch."""
_REPORTED_IDS = 100
"""Memory ids a set-aside batch's report lists (the rest are counted)."""


@dataclass(frozen=True, slots=True)
class BankState:
    """What `recover` and `replay` look for before using a bank."""

    journals: list[tuple[str, Any, str, Mapping[str, Any]]]
    """Journals not yet closed, oldest first: (batch id, home, commit row id, its metadata)."""
    indexed: bool
    """The bank has its complete scope index (`j:layout`); else it is built first."""


@dataclass(frozen=True, slots=True)
class Plan:
    """How `apply` writes one batch (see the module docstring, "Atomicity")."""

    home: str | None
    """`SLOT` (the aux slot, written with the revisions), `MEMORY_SLOT` (the memory
    collection's slot, written with the memories), `AUX`, or None (one call)."""
    batch_id: str
    first: list[codec.Row]
    """The call that commits the batch: journal rows and what is written together with them."""
    journal_ids: list[str]
    """Of an aux journal, commit row first (the removal order); empty otherwise."""
    memory_rows: list[codec.Row]
    revision_rows: list[codec.Row]
    deletes: list[str]
    """What remains to write after `first`."""


class Journal:
    """The journals of one store's banks: planning, committing, completing and replaying them.

    Also what this store knows of each bank's journal: which banks it has replayed
    (`recovered`), which are settled, and the last slot batch it saw fully written.
    """

    def __init__(self, chroma: Chroma, locks: Locks) -> None:
        self._chroma = chroma
        self._locks = locks
        self.recovered: set[str] = set()
        """Banks whose journal this instance has replayed (see `recover`)."""
        self._bank_locks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, asyncio.Lock]
        ] = weakref.WeakKeyDictionary()
        """Per event loop (an `asyncio.Lock` belongs to one) and bank: see `lock`."""
        self.written: dict[str, str] = {}
        """Per bank, the last slot batch this store saw fully written (`slot_batch_written`)."""
        self.settled: set[str] | None = None
        """Embedded only, shared by this process's stores on the directory: the banks with no
        journal pending and a complete index, so that `apply` skips its replay check. A bank
        leaves it when a batch starts committing and returns once the batch is complete; a
        batch cut short (an error, a crash that left the process alive) keeps it out."""
        self.heads: HeadMirror | None = None
        """Embedded only, shared like `settled`: the scopes' head versions (`_scope_index`).
        A replay forgets the bank's."""
        self.records: RecordMirror | None = None
        """Embedded only, shared like `settled`: the memory rows committed (`_records`). A
        replay forgets the bank's."""
        self.documents: DocumentMirror | None = None
        """Embedded only, shared like `settled`: the documents committed (`_records`). A
        replay forgets the bank's."""

    def forget(self, bank_id: str) -> None:
        """Forgets what was known of a bank (deleted, or its handles gone stale)."""
        self.recovered.discard(bank_id)
        self.settle(bank_id, False)
        self.forget_mirrored(bank_id)

    def forget_mirrored(self, bank_id: str | None = None) -> None:
        """The mirrors forget the bank (every bank with None)."""
        if self.heads is not None:
            self.heads.forget(bank_id)
        if self.records is not None:
            self.records.forget(bank_id)
        if self.documents is not None:
            self.documents.forget(bank_id)

    def settle(self, bank_id: str, settled: bool) -> None:
        """Records whether the bank is known to have no pending journal (embedded only)."""
        if self.settled is not None:
            if settled:
                self.settled.add(bank_id)
            else:
                self.settled.discard(bank_id)

    async def plan(
        self,
        batch_id: str,
        memory_rows: list[codec.Row],
        revision_rows: list[codec.Row],
        deletes: list[str],
    ) -> Plan:
        """Chooses how to write a batch; pure computation besides reading the batch limit."""
        limits = await self._chroma.limits()
        if not (memory_rows or deletes) and fits_one_request(revision_rows, limits):
            # One Chroma call is atomic by itself (it still runs after any replay). Every write
            # of a memory goes through a journal, so that the slot's probes stay true.
            return Plan(None, batch_id, [], [], [], revision_rows, [])
        memory_rows = [
            (row_id, vector, fact, {**meta, codec.JOURNAL_BATCH: batch_id})
            for row_id, vector, fact, meta in memory_rows
        ]  # the slot's probe: which batch last wrote each row
        chunk = JOURNAL_CHUNK_CHARS
        with codec.encoding("a memory or revision"):
            if len(memory_rows) >= MEMORY_SLOT_ROWS:
                first = _memory_slot_call(batch_id, memory_rows, revision_rows, deletes)
                if fits_one_request(first, limits):
                    return Plan(MEMORY_SLOT, batch_id, first, [], [], revision_rows, deletes)
            slot = codec.slot_rows(
                batch_id,
                memory_rows,
                deletes,
                chunk_chars=chunk,
                inline_chars=JOURNAL_INLINE_CHARS,
            )
            first = [*revision_rows, *slot]
            if fits_one_request(first, limits) and fits_one_request(memory_rows, limits):
                return Plan(SLOT, batch_id, first, [], memory_rows, [], deletes)
            # Too large for one call: everything goes into an aux journal written first (its
            # parts, then its commit row), then the batch.
            journal = codec.journal_rows(
                codec.batch_head_id(batch_id),
                batch_id,
                memory_rows,
                revision_rows,
                deletes,
                kind=codec.KIND_JOURNAL,
                chunk_chars=chunk,
                inline_chars=JOURNAL_INLINE_CHARS,
            )
        ids = [row[0] for row in journal][::-1]
        return Plan(AUX, batch_id, journal, ids, memory_rows, revision_rows, deletes)

    async def commit(self, bank_id: str, memories: Any, aux: Any, plan: Plan) -> None:
        """Writes `plan.first`, then the rest, then closes an aux journal (journal lock held).

        Once the call holding the commit row has succeeded the batch has happened: a failure
        after it is retried once here and otherwise left to the next replay, never undone.
        """
        if plan.home is None:  # a single call, atomic by itself
            await self._chroma.write("write revisions", aux, plan.revision_rows)
            return
        home = memories if plan.home == MEMORY_SLOT else aux
        try:
            if plan.home == MEMORY_SLOT:  # this batch may rewrite the rows the aux slot probes
                await self._chroma.write("empty the bank's slot", aux, _empty_slot(plan.batch_id))
            await self._chroma.write("write a batch and its journal", home, plan.first)
        except AdkMemoryError as exc:
            # A request that failed on the way back may have been committed anyway: if the
            # commit row is there, the batch has happened and is completed below.
            head = plan.journal_ids[0] if plan.home == AUX else codec.SLOT_ID
            try:
                found = await self._chroma.call(
                    "check a batch journal", home.get, ids=[head], include=["metadatas"]
                )
            except (AdkMemoryError, Gone):
                self.recovered.discard(bank_id)  # the next use of the bank replays it if it was
                raise StoreUnavailable(
                    f"{self._chroma.location} failed while writing a batch to bank {bank_id!r}, "
                    "and whether it was recorded is unknown: if it was, it is completed, whole, "
                    "when the bank is next used."
                ) from exc
            metas = found["metadatas"] or []
            if not metas or metas[0].get(codec.JOURNAL_BATCH) != plan.batch_id:
                if plan.home == AUX and len(plan.journal_ids) > 1:
                    with contextlib.suppress(AdkMemoryError, Gone):  # parts never committed
                        await self._chroma.delete_ids(
                            "withdraw a journal", aux, plan.journal_ids[1:]
                        )
                raise
            logger.warning("a failed batch write was committed after all; completing it")
        for attempt in range(2):
            try:
                await self._finish(
                    memories, aux, plan.home, plan.batch_id, plan.journal_ids,
                    plan.memory_rows, plan.revision_rows, plan.deletes,
                )  # fmt: skip
                return
            except (AdkMemoryError, Gone) as exc:
                if isinstance(exc, InvalidArgument):
                    await self._refused(bank_id, memories, aux, plan.batch_id, exc)
                    return
                if attempt:
                    self.recovered.discard(bank_id)  # so this instance's next read completes it
                    raise StoreUnavailable(
                        f"{self._chroma.location} failed while applying a batch to bank "
                        f"{bank_id!r} after its journal was written: the batch is recorded "
                        "and will be completed, whole, the next time a store opens the bank "
                        "or writes to it. Do not repeat the request."
                    ) from exc
                logger.warning("applying a journaled batch failed (%s); retrying", exc)

    async def _refused(
        self, bank_id: str, memories: Any, aux: Any, batch_id: str, refusal: InvalidArgument
    ) -> None:
        """After Chroma refused part of a committed batch: replays it, and sets it aside if refused.

        A refusal (`InvalidArgument`: Chroma's `InvalidArgumentError` or
        `InvalidDimensionException`) is deterministic, so the replay meets it again and sets the
        batch aside (`replay`); the caller then gets an `InvalidArgument` saying so. A replay
        that completes the batch returns; one that fails otherwise is `StoreUnavailable`.
        """
        try:
            aside = await self.replay(bank_id, memories, aux)
        except (AdkMemoryError, Gone) as exc:
            self.recovered.discard(bank_id)
            raise StoreUnavailable(
                f"{self._chroma.location} refused part of a batch of bank {bank_id!r} after its "
                "journal was written, then failed: the batch is recorded, and is completed or "
                "set aside the next time a store opens the bank or writes to it."
            ) from exc
        if batch_id in aside:
            raise InvalidArgument(
                f"{refusal.template} The batch had been journaled: it was set aside for an "
                f"operator (`adk-memory banks set-aside -b {bank_id}`), part of it may be "
                "visible, and the bank goes on serving.",
                field=refusal.field,
            ) from refusal

    async def _finish(
        self,
        memories: Any,
        aux: Any,
        home: str,
        batch_id: str,
        journal_ids: Sequence[str],
        memory_rows: Sequence[codec.Row],
        revision_rows: Sequence[codec.Row],
        deletes: Sequence[str],
    ) -> None:
        """Writes what a committed batch still lacks, then closes its journal (idempotent).

        The aux slot needs no closing (its probes show the batch complete); an aux journal is
        deleted; the memory collection's slot (`MEMORY_SLOT`) is closed by the `j:done` row,
        written with the revisions (after the deletes; the scopes' heads with them, after the
        memory rows they stand for).
        """
        heads = [row for row in revision_rows if row[3][codec.KIND] == codec.KIND_SCOPE_HEAD]
        if home == AUX:
            # The slot is emptied before this batch rewrites or deletes the rows it probes, so
            # that its (complete) batch cannot look interrupted afterwards. The scopes' heads
            # go last: a version must not be readable before the memory rows it stands for.
            rest = [row for row in revision_rows if row[3][codec.KIND] != codec.KIND_SCOPE_HEAD]
            await self._chroma.write("write revisions", aux, [*rest, *_empty_slot(batch_id)])
        if memory_rows:
            await self._chroma.write("write memories", memories, memory_rows)
        if deletes:
            await self._chroma.delete_ids("delete memories", memories, deletes)
        if home == MEMORY_SLOT:
            await self._chroma.write(
                "write revisions", aux, [*revision_rows, codec.done_row(batch_id)]
            )
        elif home == AUX:
            if heads:
                await self._chroma.write("write the scopes' versions", aux, heads)
            await self._remove_journal(aux, journal_ids)

    async def _remove_journal(self, aux: Any, journal_ids: Sequence[str]) -> None:
        """Deletes the aux journal of a completed batch (a failure only leaves a no-op replay)."""
        try:
            await self._chroma.delete_ids("remove a batch journal", aux, journal_ids)
        except (AdkMemoryError, Gone) as exc:  # the batch is complete; a replay is a no-op
            logger.warning("could not remove the journal of a completed batch: %s", exc)

    @contextlib.asynccontextmanager
    async def lock(self, bank_id: str) -> AsyncIterator[None]:
        """Holds the bank's journal lock: in this instance, then across processes (or hosts)."""
        loop_locks = self._bank_locks.setdefault(asyncio.get_running_loop(), {})
        local = loop_locks.setdefault(bank_id, asyncio.Lock())
        async with local:
            shared = self._locks.provider().lock(
                f"journal:{self._chroma.name(bank_id, 'journal')}",
                lease_seconds=JOURNAL_LEASE_SECONDS,
                wait_seconds=JOURNAL_WAIT_SECONDS,
            )
            async with contextlib.AsyncExitStack() as stack:
                try:
                    await stack.enter_async_context(shared)
                except ResourceExhausted as exc:
                    raise ResourceExhausted(
                        f"Another writer kept bank {bank_id!r} locked for over "
                        f"{JOURNAL_WAIT_SECONDS:g} s (a very large batch?); retry later."
                    ) from exc
                yield

    async def recover(self, bank_id: str) -> None:
        """Replays a journal left by a crashed writer (and indexes an old bank), once per bank.

        The check is two small reads; the journal lock is taken only when there is work.
        """
        aux = await self._chroma.collection(self._chroma.name(bank_id, AUX))
        memories = await self._chroma.collection(self._chroma.name(bank_id, MEM))
        state = await self.state(memories, aux)
        if state.journals or not state.indexed:
            async with self.lock(bank_id):
                await self.replay(bank_id, memories, aux)
        self.recovered.add(bank_id)

    async def state(self, memories: Any, aux: Any) -> BankState:
        """Journals not yet closed, oldest first, and whether the scope index is complete.

        Two reads: the journal rows of aux, then, in the memory collection, the rows the slot's
        probes name and the memory collection's slot (`MEMORY_SLOT`).
        """
        marks = await self._chroma.call(
            "look for a batch journal",
            aux.get,
            where={
                codec.KIND: {
                    "$in": [
                        codec.KIND_JOURNAL,
                        codec.KIND_JOURNAL_SLOT,
                        codec.KIND_JOURNAL_DONE,
                        codec.KIND_LAYOUT,
                    ]
                }
            },
            include=["metadatas"],
        )
        done = None
        indexed = False
        slot: Mapping[str, Any] | None = None
        pending: list[tuple[str, Any, str, Mapping[str, Any]]] = []
        for row_id, meta in zip(marks["ids"], marks["metadatas"], strict=True):
            # A row no version writes (a poisoned journal) is pending, so that replay sets it
            # aside; it must never make this check fail, which would stop the bank.
            if meta[codec.KIND] == codec.KIND_JOURNAL_DONE:
                done = meta.get(codec.JOURNAL_BATCH)
            elif meta[codec.KIND] == codec.KIND_LAYOUT:
                indexed = _layout(meta) >= codec.LAYOUT_VERSION
            elif meta[codec.KIND] == codec.KIND_JOURNAL_SLOT:
                slot = meta
            else:
                pending.append((str(meta.get(codec.JOURNAL_BATCH, row_id)), aux, row_id, meta))
        try:
            probes = [] if slot is None else codec.slot_probes(slot)
        except (KeyError, TypeError, ValueError):
            probes = []
        probed = await self._chroma.read_metadata(
            memories, [codec.SLOT_ID, *probes], "look for a batch journal"
        )
        in_memories = probed.pop(codec.SLOT_ID, None)
        if in_memories is not None and in_memories.get(codec.JOURNAL_BATCH) != done:
            batch = str(in_memories.get(codec.JOURNAL_BATCH, codec.SLOT_ID))
            pending.append((batch, memories, codec.SLOT_ID, in_memories))
        if slot is not None and not _slot_complete(slot, probed):
            pending.append(
                (str(slot.get(codec.JOURNAL_BATCH, codec.SLOT_ID)), aux, codec.SLOT_ID, slot)
            )
        return BankState(sorted(pending, key=lambda item: item[0]), indexed)

    async def replay(self, bank_id: str, memories: Any, aux: Any) -> list[str]:
        """Completes the bank's journaled batches not closed; indexes a bank of layout 1.

        Called with the journal lock held, so no live writer's journal is ever replayed: what is
        pending belongs to a writer that crashed (or lost Chroma) after writing it. Replaying is
        idempotent, so a crash during a replay only means another replay.

        A journal is never allowed to stop the bank: a batch Chroma refuses (`InvalidArgument`,
        which it would raise at every replay), or whose journal is corrupt, is set aside
        (`_set_aside`) and the replay goes on. Anything else (Chroma unreachable, failing,
        rate-limiting) is raised: the batch stays pending and is completed once Chroma is back.

        Returns:
            The ids of the batches set aside.
        """
        # It may write heads (a crashed batch's, a new index): what was known or read meanwhile
        # of the bank's heads is forgotten once it is done, whatever happens.
        try:
            return await self._replay(bank_id, memories, aux)
        finally:
            self.forget_mirrored(bank_id)

    async def _replay(self, bank_id: str, memories: Any, aux: Any) -> list[str]:
        state = await self.state(memories, aux)
        aside: list[str] = []
        for batch_id, home, head_id, head in state.journals:
            try:
                count = int(head[codec.JOURNAL_PARTS])
                part_ids = [codec.part_id(head_id, index) for index in range(1, count + 1)]
                chunks: dict[str, str] = {} if count else {head_id: str(head[codec.PAYLOAD])}
            except (KeyError, TypeError, ValueError) as exc:  # a head no version writes
                await self._set_aside(bank_id, memories, aux, batch_id, home, head_id, [], [], exc)
                aside.append(batch_id)
                continue
            parts = await self._chroma.read_metadata(home, part_ids, "read a batch journal")
            for part_id, meta in parts.items():
                if meta.get(codec.JOURNAL_BATCH) == batch_id:
                    chunks[part_id] = str(meta.get(codec.PAYLOAD))
            if len(chunks) < max(count, 1):  # parts go only after the commit row, once applied
                logger.warning("removing the rest of the journal of applied batch %s", batch_id)
                await self._chroma.delete_ids("remove a batch journal", home, [head_id, *part_ids])
                continue
            texts = [chunks[row_id] for row_id in part_ids or [head_id]]
            try:
                rows = codec.decode_journal(texts)
            except codec.NewerJournal as exc:
                raise FailedPrecondition(
                    f"Bank {bank_id!r} has an unfinished batch whose journal this version of "
                    "adk-memory-chroma cannot read; open the bank with the version that wrote "
                    "it to complete the batch."
                ) from exc
            except (ValueError, KeyError, TypeError) as exc:  # no version writes it: corrupt
                await self._set_aside(
                    bank_id, memories, aux, batch_id, home, head_id, part_ids, texts, exc
                )
                aside.append(batch_id)
                continue
            logger.warning("completing batch %s of bank %s from its journal", batch_id, bank_id)
            try:
                if home is memories:
                    await self._finish(memories, aux, MEMORY_SLOT, batch_id, [], *rows)
                elif head_id == codec.SLOT_ID:
                    await self._finish(memories, aux, SLOT, batch_id, [], *rows)
                else:
                    await self._finish(memories, aux, AUX, batch_id, [head_id, *part_ids], *rows)
            except InvalidArgument as exc:  # Chroma refuses it: it would every time
                await self._set_aside(
                    bank_id, memories, aux, batch_id, home, head_id, part_ids, texts, exc, rows
                )
                aside.append(batch_id)
        if not state.indexed:
            await self._index_bank(bank_id, memories, aux)
        self.recovered.add(bank_id)
        self.settle(bank_id, True)
        return aside

    async def _set_aside(
        self,
        bank_id: str,
        memories: Any,
        aux: Any,
        batch_id: str,
        home: Any,
        head_id: str,
        part_ids: Sequence[str],
        texts: Sequence[str],
        error: Exception,
        rows: tuple[list[codec.Row], list[codec.Row], list[str]] | None = None,
    ) -> None:
        """Keeps a journaled batch that can never be completed for an operator; closes its journal.

        Its journal text goes into `SET_ASIDE_PART_KIND` documents and a `SET_ASIDE_KIND`
        document reports it (what it held, why), both written before the journal is closed, so
        a crash in between only means setting it aside again. Then the journal is closed as its
        home requires: the aux slot is emptied, the memory collection's slot marked done
        (`j:done`), an aux journal deleted. Whatever of the batch was written stays.
        """
        memory_rows, aux_rows, deletes = rows if rows is not None else ([], [], [])
        report = {
            "batch_id": batch_id,
            "journaled_at": _batch_time(batch_id),
            "set_aside_at": datetime.now(UTC).isoformat(),
            "reason": f"{type(error).__name__}: {error}"[:1_000],
            "memory_ids": [row[0] for row in memory_rows[:_REPORTED_IDS]],
            "memories": len(memory_rows),
            "deleted_ids": list(deletes[:_REPORTED_IDS]),
            "deletions": len(deletes),
            "aux_rows": len(aux_rows),
            "readable": rows is not None,
            "parts": len(texts),
        }
        kept = [
            codec.document_row(SET_ASIDE_PART_KIND, f"{batch_id}:{index}", {"text": text})
            for index, text in enumerate(texts, start=1)
        ]
        kept.append(codec.document_row(SET_ASIDE_KIND, batch_id, report))
        await self._chroma.write("keep a set-aside batch", aux, kept)
        if home is memories:
            await self._chroma.write("close a set-aside batch", aux, [codec.done_row(batch_id)])
            # A slot row without its batch id would never be closed by `j:done`.
            await self._chroma.delete_ids("close a set-aside batch", memories, [codec.SLOT_ID])
        elif head_id == codec.SLOT_ID:
            await self._chroma.write("close a set-aside batch", aux, _empty_slot(batch_id))
        else:
            await self._chroma.delete_ids("close a set-aside batch", aux, [head_id, *part_ids])
        logger.error(
            "Bank %s: batch %s could never be completed (%s); it was set aside for an operator "
            "(`adk-memory banks set-aside -b %s`), and the bank goes on serving.",
            bank_id,
            batch_id,
            report["reason"],
            bank_id,
        )

    async def _index_bank(self, bank_id: str, memories: Any, aux: Any) -> None:
        """Builds the scope index of a bank written before it existed (journal lock held).

        Reads every memory row's scope and expiry a page at a time, writes each scope's head and
        buckets, then the `j:layout` mark. A crash before the mark means another full build at
        the next use, which overwrites what this one wrote (an id listed twice is harmless).
        """
        logger.warning("indexing the scopes of bank %s (written by an older version)", bank_id)
        scopes: dict[str, dict[int, dict[str, int]]] = {}
        page = await self._chroma.batch_size()
        offset = 0
        while True:
            found = await self._chroma.call(
                "read memories to index",
                memories.get,
                where={codec.LIVE_US: {"$gte": -codec.NEVER_US}},  # memories only
                include=["metadatas"],
                limit=page,
                offset=offset,
            )
            for memory_id, meta in zip(found["ids"], found["metadatas"], strict=True):
                buckets = scopes.setdefault(str(meta[codec.SCOPE_KEY]), {})
                members = buckets.setdefault(codec.scope_bucket(memory_id), {})
                members[memory_id] = int(meta[codec.LIVE_US])
            if len(found["ids"]) < page:
                break
            offset += page
        version = new_batch_id()
        rows = [
            row
            for scope_key, buckets in scopes.items()
            for row in codec.index_rows(scope_key, version, buckets)
        ]
        await self._chroma.write("index the scopes of a bank", aux, [*rows, codec.layout_row()])

    async def slot_batch_written(
        self, bank_id: str, memories: Any, slot: Mapping[str, Any]
    ) -> bool:
        """Whether the batch of the bank's slot has written its memory rows and deletions.

        Known without a read when this process saw it complete: embedded, the bank is settled
        (no batch of it in flight); else this store read its probes complete before.
        """
        batch_id = str(slot[codec.JOURNAL_BATCH])
        if self.written.get(bank_id) == batch_id:
            return True
        if self.settled is not None and bank_id in self.settled:
            return True
        probes = codec.slot_probes(slot)
        probed = await self._chroma.read_metadata(memories, probes, "read a batch's probes")
        if not codec.slot_complete(slot, probed):
            return False
        self.written[bank_id] = batch_id
        return True


def _memory_slot_call(
    batch_id: str,
    memory_rows: list[codec.Row],
    revision_rows: list[codec.Row],
    deletes: list[str],
) -> list[codec.Row]:
    """The call that commits a `MEMORY_SLOT` batch: its memory rows, then the slot journal.

    The journal holds the rest (revisions and deletions); its rows carry vectors of the
    memories' dimension.
    """
    journal = codec.journal_rows(
        codec.SLOT_ID,
        batch_id,
        [],
        revision_rows,
        deletes,
        kind=codec.KIND_JOURNAL_SLOT,
        chunk_chars=JOURNAL_CHUNK_CHARS,
        inline_chars=JOURNAL_INLINE_CHARS,
        dimension=len(memory_rows[0][1]),
    )
    return [*memory_rows, *journal]


def _empty_slot(batch_id: str) -> list[codec.Row]:
    """The aux slot naming no row: its batch is complete whatever is written next."""
    return codec.slot_rows(
        batch_id, [], [], chunk_chars=JOURNAL_CHUNK_CHARS, inline_chars=JOURNAL_INLINE_CHARS
    )


def _layout(meta: Mapping[str, Any]) -> int:
    """The layout a `j:layout` row names (0 for one no version writes: the bank is re-indexed)."""
    try:
        return int(meta[codec.SCOPE_VERSION])
    except (KeyError, TypeError, ValueError):
        return 0


def _slot_complete(slot: Mapping[str, Any], probed: Mapping[str, Mapping[str, Any]]) -> bool:
    """`codec.slot_complete`; a slot no version writes is incomplete (replay sets it aside)."""
    try:
        return codec.slot_complete(slot, probed)
    except (KeyError, TypeError, ValueError):
        return False


def _batch_time(batch_id: str) -> str | None:
    """When a batch was journaled, from its id (`new_batch_id`); None for an id of another form."""
    nanos = batch_id.split("-", 1)[0]
    try:
        return datetime.fromtimestamp(int(nanos) / 1e9, UTC).isoformat()
    except (ValueError, OverflowError, OSError):  # not a time: a journal no version wrote
        return None


def new_batch_id() -> str:
    """A journal batch id: unique, and ordered by time so that replays go oldest first."""
    return f"{time.time_ns():020d}-{uuid.uuid4().hex}"
