"""The store seam: what a storage backend must do, and the immutable records it stores.

The engine validates every request, computes embeddings, expiry and revisions, and hands the
store finished records. A store persists them and answers three kinds of reads: by id, nearest
neighbours within one scope, and ordered keyset scans (of memories, resuming strictly after a
`ScanCursor`; and of the ids that have revisions). It never sees scope text in a query (only the
`ScopeKey` digest), never reads the wall clock (`now` is passed in) and never calls a model.

Filters arrive as `adk_memory.filters.FilterExpr` trees. A store declares in
`StoreCapabilities.pushdown` which conditions it can evaluate inside its own query; the engine
passes it only those and evaluates the rest itself, over-fetching until `k` survive. Whatever a
store is given, it must honour exactly.

The contract is tested by `adk_memory.testing.conformance.MemoryStoreConformance`.
"""

from __future__ import annotations

import heapq
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, runtime_checkable

from adk_memory.errors import Aborted, InvalidArgument
from adk_memory.scope import ScopeKey
from adk_memory.vectors import unstorable_value

if TYPE_CHECKING:
    from adk_memory.filters import FilterExpr
    from adk_memory.locks import Lease, LockProvider

__all__ = [
    "BankRecord",
    "DocumentRecord",
    "DueDocument",
    "EXPIRY_KEY",
    "EXPIRY_KIND",
    "Expectation",
    "MemoryRecord",
    "MemoryStore",
    "MetadataValue",
    "NearestQuery",
    "OperationRecord",
    "RevisionRecord",
    "SET_ASIDE_KIND",
    "SET_ASIDE_PART_KIND",
    "ScanCursor",
    "ScanQuery",
    "ScoredRecord",
    "SortKey",
    "StoreCapabilities",
    "TopicRef",
    "WriteBatch",
    "batch_expiry",
    "check_cursor",
    "check_expectations",
    "check_vectors",
    "cursor_of",
    "discard_set_aside",
    "document_dues",
    "expiry_around",
    "index_around",
    "lower_dues",
    "set_aside_batches",
    "sort_records",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

EXPIRY_KIND = "expiry"
"""The due-index kind of expiry work: one entry per bank (key `EXPIRY_KEY`), no document.

Its due time is never later than the earliest expire time of the bank's stored memories and
revisions, except that a sweep may put it off to its next regular sweep (`IngestScheduler`):
`apply` lowers it before and after every write of a row with an expire time
(`expiry_around`), and a sweep sets it from `MemoryStore.earliest_expiry`."""
EXPIRY_KEY = "bank"

SET_ASIDE_KIND = "set-aside"
"""Documents of this kind report write batches a store set aside instead of completing them.

A store that journals its batches (Chroma) completes a journaled batch before the bank's next
read or write; a batch the store deterministically refuses (a value Chroma does not take)
could never be completed, and would stop the whole bank. Such a batch is set aside: its
journal is kept in documents of kind `SET_ASIDE_PART_KIND` (keys `<batch>:<n>`, bodies
`{"text": ...}`), one document of this kind (key: the batch id) reports it (`batch_id`,
`journaled_at`, `set_aside_at`, `reason`, `memory_ids`, `deleted_ids`, `aux_rows`, `parts`),
and the bank goes on serving. `adk-memory banks set-aside` lists and discards them
(`set_aside_batches`, `discard_set_aside`). Stores without a journal write none."""
SET_ASIDE_PART_KIND = "set-aside-part"
"""The documents holding a set-aside batch's journal text (see `SET_ASIDE_KIND`)."""

MetadataValue = str | float | bool | datetime
"""A metadata value: Memory Bank's string, double, bool or timestamp (test `bool` first)."""


@dataclass(frozen=True, slots=True)
class TopicRef:
    """One topic label of a memory: a managed topic enum name or a custom label (exactly one)."""

    managed: str | None = None
    """A `ManagedTopicEnum` name such as `USER_PREFERENCES`."""
    custom: str | None = None
    """A custom topic label such as `business_feedback`."""


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory as stored: validated by the engine, immutable, the same on every backend."""

    memory_id: str
    scope_key: ScopeKey
    scope: Mapping[str, str]
    fact: str
    embedding: tuple[float, ...]
    """L2-normalised. Empty when read by `scan` (which does not load vectors)."""
    create_time: datetime
    update_time: datetime
    expire_time: datetime | None = None
    topics: tuple[TopicRef, ...] = ()
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)
    display_name: str | None = None
    description: str | None = None
    memory_type: str = "NATURAL_LANGUAGE_COLLECTION"
    """`NATURAL_LANGUAGE_COLLECTION`, or `STRUCTURED_PROFILE` for a profile (which has its own
    scope key, `adk_memory.scope.profile_scope_key`, so natural-language reads never see it)."""
    schema_id: str | None = None
    """For a profile: the id of its schema in the bank's `structured_memory_configs`."""
    structured_data: Mapping[str, Any] | None = None
    """For a profile: its JSON object."""

    def is_live(self, now: datetime) -> bool:
        """True until the instant the memory expires (an expired memory is never returned)."""
        return self.expire_time is None or self.expire_time > now


@dataclass(frozen=True, slots=True)
class RevisionRecord:
    """An immutable snapshot of a memory written by a create, update, generate or rollback."""

    memory_id: str
    revision_id: str
    """Sortable: a later revision of the same memory has a greater id."""
    scope_key: ScopeKey
    scope: Mapping[str, str]
    fact: str
    create_time: datetime
    expire_time: datetime | None = None
    topics: tuple[TopicRef, ...] = ()
    metadata: Mapping[str, MetadataValue] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)
    extracted_memories: tuple[Mapping[str, Any], ...] = ()
    """`IntermediateExtractedMemory` dicts (fact, context) of the generate request that wrote it."""
    deleted: bool = False
    """A tombstone: written when generation deleted the memory; rollback can restore from it."""
    structured_data: Mapping[str, Any] | None = None
    """For a profile's revision: the profile's JSON object at that time."""

    def is_live(self, now: datetime) -> bool:
        """True until the revision's own expiry."""
        return self.expire_time is None or self.expire_time > now


@dataclass(frozen=True, slots=True)
class BankRecord:
    """A memory bank: its configuration and the embedding model it was created with."""

    bank_id: str
    config: Mapping[str, Any]
    """The bank config as JSON (snake_case `ReasoningEngineContextSpecMemoryBankConfig`)."""
    embedding_model: str
    embedding_dimension: int
    create_time: datetime
    update_time: datetime
    display_name: str | None = None
    description: str | None = None


@dataclass(frozen=True, slots=True)
class OperationRecord:
    """A long-running operation as returned on the wire, kept so `operations.get` can find it."""

    bank_id: str
    operation_path: str
    """The name relative to the bank: `operations/{id}` or `memories/{m}/operations/{id}`."""
    done: bool
    payload: Mapping[str, Any]
    """The operation's JSON (camelCase) without its `name`."""
    create_time: datetime


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """One document to create or replace, as `MemoryStore.put_document` would (ingest streams)."""

    kind: str
    key: str
    body: Mapping[str, Any]
    """A JSON-serialisable mapping."""
    scope_key: ScopeKey | None = None
    """The scope the document belongs to, for `list_documents(scope_key=...)`."""
    due: datetime | None = None
    """When the document next needs work (`due_documents`); None: it is not in the due index."""


@dataclass(frozen=True, slots=True)
class DueDocument:
    """An entry of the store-wide due index: a document of a bank that needs work from `due`."""

    bank_id: str
    key: str
    due: datetime


@dataclass(frozen=True, slots=True)
class Expectation:
    """A precondition of a batch, checked by the store atomically with the batch's writes.

    `update_time` set: a live memory `memory_id` must exist with exactly that update time (the
    engine makes a memory's update time grow with every write, so it is its version). None: no
    live memory may have the id. Liveness is judged at `now`.
    """

    memory_id: str
    now: datetime
    update_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class WriteBatch:
    """One logical write: every part is applied, or none is."""

    inserts: tuple[MemoryRecord, ...] = ()
    """New memories; a live memory with the same id fails the whole batch with `AlreadyExists`."""
    fresh_inserts: bool = False
    """The inserts' ids were just drawn at random (`names.new_memory_id`, 76 bits): no memory has
    one, so a store need not read them before writing (it may still check)."""
    upserts: tuple[MemoryRecord, ...] = ()
    """Whole-record replacements (or creations) of memories."""
    deletes: tuple[str, ...] = ()
    """Memory ids to delete; their revisions stay."""
    revisions: tuple[RevisionRecord, ...] = ()
    documents: tuple[DocumentRecord, ...] = ()
    """Documents created or replaced together with the memories (a later one of the same kind
    and key wins); a batch that fails writes none of them."""
    expect: tuple[Expectation, ...] = ()
    """Checked atomically with the writes; one that does not hold fails the whole batch with
    `Aborted` (see `check_expectations`), and nothing is written."""
    fences: tuple[Lease, ...] = ()
    """The leases of the locks the batch was decided under: a batch one of whose leases lapsed
    (another holder may have taken the lock) fails with `Aborted`, checked atomically with the
    writes where the lock lives in the store itself (Redis), else just before them."""
    operations: tuple[OperationRecord, ...] = ()
    """Operations recorded together with the memories (`put_operation` in the same atomic
    write: a create's memory, revision and operation are all there or none is)."""


@dataclass(frozen=True, slots=True)
class NearestQuery:
    """The `k` live memories of one scope nearest to `vector` by Euclidean distance."""

    scope_key: ScopeKey
    vector: tuple[float, ...]
    k: int
    now: datetime
    filter: FilterExpr | None = None
    """Only conditions the store declared in `capabilities.pushdown`; applied before top-k."""


@dataclass(frozen=True, slots=True)
class ScoredRecord:
    """A memory and its true Euclidean distance to the query vector (not the squared one)."""

    record: MemoryRecord
    distance: float


@dataclass(frozen=True, slots=True)
class SortKey:
    """One ordering term; the memory id always breaks ties, ascending."""

    field: str
    """`create_time` or `update_time`."""
    descending: bool = True


@dataclass(frozen=True, slots=True)
class ScanCursor:
    """A keyset position in a scan's order: just after the memory with these sort values and id.

    A scan resuming from a cursor returns only memories that sort strictly after it, whether or
    not that memory still exists, so writes between two pages neither repeat nor skip a memory
    that sorts after the cursor (a memory written meanwhile before it is simply not seen).
    """

    values: tuple[datetime, ...]
    """The memory's value of each `ScanQuery.order_by` field, in that order."""
    memory_id: str


@dataclass(frozen=True, slots=True)
class ScanQuery:
    """Live memories in a stable order, optionally of one scope and filtered, as one keyset page."""

    now: datetime
    scope_key: ScopeKey | None = None
    filter: FilterExpr | None = None
    order_by: tuple[SortKey, ...] = (SortKey("create_time"),)
    after: ScanCursor | None = None
    """Only memories sorting strictly after this position; it has one value per `order_by` key."""
    limit: int | None = None
    """At most this many, the first in order (None: all)."""


@dataclass(frozen=True, slots=True)
class StoreCapabilities:
    """What a backend does natively; the engine does the rest."""

    pushdown: frozenset[tuple[str, str]]
    """(family, op) pairs the store can filter on natively; see `adk_memory.filters.family_of`."""
    native_ttl: bool = False
    """True when the backend reclaims expired memories itself (Redis key expiry)."""


def _position(values: Sequence[datetime], memory_id: str, order_by: Sequence[SortKey]) -> Any:
    """A tuple that sorts in the scan's order: each field (negated when descending), then id."""
    terms = [
        _EPOCH - value if key.descending else value - _EPOCH
        for value, key in zip(values, order_by, strict=True)
    ]
    return (*terms, memory_id)


def cursor_of(record: MemoryRecord, order_by: Sequence[SortKey]) -> ScanCursor:
    """The cursor that resumes a scan in `order_by` just after `record`."""
    return ScanCursor(tuple(getattr(record, key.field) for key in order_by), record.memory_id)


def cursor_key(cursor: ScanCursor, order_by: Sequence[SortKey]) -> Any:
    """A value that compares as cursors sort in `order_by` (greater: later in the scan)."""
    return _position(cursor.values, cursor.memory_id, order_by)


def _record_key(order_by: Sequence[SortKey]) -> Callable[[MemoryRecord], Any]:
    def key(record: MemoryRecord) -> Any:
        values = [getattr(record, sort.field) for sort in order_by]
        return _position(values, record.memory_id, order_by)

    return key


def sort_records(records: Iterable[MemoryRecord], query: ScanQuery) -> list[MemoryRecord]:
    """The first `query.limit` records after `query.after`, in the query's order.

    The order is total: the sort keys, then memory id ascending.
    """
    key = _record_key(query.order_by)
    if query.after is not None:
        start = cursor_key(query.after, query.order_by)
        records = (record for record in records if key(record) > start)
    if query.limit is None:
        return sorted(records, key=key)
    return heapq.nsmallest(query.limit, records, key=key)


def check_cursor(query: ScanQuery) -> None:
    """Refuses a cursor whose values do not match the query's sort keys (a store's first check)."""
    if query.after is not None and len(query.after.values) != len(query.order_by):
        raise InvalidArgument(
            f"A scan cursor has {len(query.after.values)} sort values for "
            f"{len(query.order_by)} order_by keys.",
            field="page_token",
        )


def check_vectors(batch: WriteBatch, dimension: int | None) -> None:
    """Refuses a batch with a vector no store can hold, before anything is written.

    Every vector must have the bank's `dimension` (None: not checked here, the store checks it
    against its own rows) and hold only finite values within float32's range
    (`adk_memory.vectors.unstorable_value`): Chroma refuses anything else, Redis keeps it but
    never returns it by similarity. Every store calls this at the top of `apply`, so no write
    path (an import, a re-embedding, an embedder returning NaN, a caller of the store) can
    journal a batch the store would refuse later.
    """
    for record in (*batch.inserts, *batch.upserts):
        if dimension is not None and len(record.embedding) != dimension:
            raise InvalidArgument(
                f"Memory {record.memory_id!r} has a {len(record.embedding)}-dimensional embedding; "
                f"its bank holds {dimension}-dimensional ones. Re-embed with the bank's model.",
                field="embedding",
            )
        found = unstorable_value(record.embedding)
        if found is not None:
            position, value = found
            raise InvalidArgument(
                f"Memory {record.memory_id!r} has an embedding holding {value!r} at position "
                f"{position}: every value must be a finite number within float32's range "
                "(about ±3.4e38). Nothing of the batch was written.",
                field="embedding",
            )


def _utc(when: datetime) -> datetime:
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def check_expectations(
    expectations: Sequence[Expectation], found: Mapping[str, datetime | None]
) -> None:
    """Raises `Aborted` for the first expectation `found` breaks.

    `found` maps each expected id to the update time of its memory live at the expectation's
    `now` (None when there is none), as read by the store inside its atomic write.
    """
    for expected in expectations:
        current = found.get(expected.memory_id)
        if expected.update_time is None:
            if current is not None:
                raise Aborted(
                    f"Memory {expected.memory_id!r} was created by a concurrent write while this "
                    "request ran; nothing was written. Read it and retry."
                )
        elif current is None:
            raise Aborted(
                f"Memory {expected.memory_id!r} was deleted (or expired) by a concurrent write "
                "after this request read it; nothing was written."
            )
        elif _utc(current) != _utc(expected.update_time):
            raise Aborted(
                f"Memory {expected.memory_id!r} was changed by a concurrent write after this "
                f"request read it (its update_time is now {_utc(current).isoformat()}, was "
                f"{_utc(expected.update_time).isoformat()}); nothing was written. Read it again "
                "and retry."
            )


async def set_aside_batches(store: MemoryStore, bank_id: str) -> list[dict[str, Any]]:
    """The reports of the bank's set-aside batches (`SET_ASIDE_KIND`), oldest first."""
    found = await store.list_documents(bank_id, SET_ASIDE_KIND)
    return [dict(body) for _key, body in found]


async def discard_set_aside(store: MemoryStore, bank_id: str, batch_id: str) -> bool:
    """Deletes a set-aside batch's report and journal; False if the bank has no such batch."""
    report = await store.get_document(bank_id, SET_ASIDE_KIND, batch_id)
    if report is None:
        return False
    for part in range(1, int(report.get("parts") or 0) + 1):
        await store.delete_document(bank_id, SET_ASIDE_PART_KIND, f"{batch_id}:{part}")
    await store.delete_document(bank_id, SET_ASIDE_KIND, batch_id)
    return True


async def index_around(
    store: MemoryStore,
    bank_id: str,
    documents: Sequence[DocumentRecord],
    write: Callable[[], Awaitable[object]],
) -> None:
    """Runs `write` (of `documents`) between lowering their due entries and setting them.

    For a store whose due index cannot be written atomically with the documents: lowered first
    (`lower_dues`), a crash after `write` leaves an entry early, never late; then set exactly
    (raised, or removed for a document without a due time). A later document of the same kind
    and key wins, as in a batch.
    """
    dues = document_dues(documents)
    await lower_dues(store, bank_id, dues)
    await write()
    for kind, entries in dues.items():
        await store.set_due(bank_id, kind, entries)


def document_dues(documents: Sequence[DocumentRecord]) -> dict[str, dict[str, datetime | None]]:
    """The due entries of `documents` by kind and key (a later document of a key wins)."""
    by_kind: dict[str, dict[str, datetime | None]] = {}
    for document in documents:
        by_kind.setdefault(document.kind, {})[document.key] = document.due
    return by_kind


async def lower_dues(
    store: MemoryStore, bank_id: str, dues: Mapping[str, Mapping[str, datetime | None]]
) -> None:
    """Lowers the due entries `dues` (by kind and key) to their times, `set_due(only_earlier)`.

    Before the documents' write; an entry without a time is left as it is.
    """
    for kind, entries in dues.items():
        lowered = {key: due for key, due in entries.items() if due is not None}
        if lowered:
            await store.set_due(bank_id, kind, lowered, only_earlier=True)


def batch_expiry(batch: WriteBatch) -> datetime | None:
    """The earliest expire time among the memories and revisions `batch` writes (None: none)."""
    rows: tuple[MemoryRecord | RevisionRecord, ...] = (
        *batch.inserts,
        *batch.upserts,
        *batch.revisions,
    )
    return min((row.expire_time for row in rows if row.expire_time is not None), default=None)


async def expiry_around(
    store: MemoryStore, bank_id: str, batch: WriteBatch, write: Callable[[], Awaitable[object]]
) -> None:
    """Runs `write` (of `batch`) between two lowerings of the bank's expiry entry.

    For a store that cannot lower it atomically with the batch. Before: a crash after `write`
    leaves the entry early, never late. After: a sweep that raised the entry while `write` ran,
    having read the bank before the batch landed, cannot leave it later than the batch's rows
    (the sweep reads the bank again after raising it, so a batch that landed earlier is seen).
    """
    earliest = batch_expiry(batch)
    if earliest is None:
        await write()
        return
    lowered = {EXPIRY_KEY: earliest}
    await store.set_due(bank_id, EXPIRY_KIND, lowered, only_earlier=True)
    await write()
    await store.set_due(bank_id, EXPIRY_KIND, lowered, only_earlier=True)


@runtime_checkable
class MemoryStore(Protocol):
    """Async persistence for memory banks. The contract is `adk_memory.testing.conformance`.

    Constructors do no I/O; the first call connects. Driver errors are re-raised as
    `adk_memory.errors.StoreUnavailable` (or another `AdkMemoryError`), never as driver types.
    """

    capabilities: ClassVar[StoreCapabilities]

    @classmethod
    def from_uri(cls, uri: str, **options: Any) -> Self:
        """Builds the store from `memory://`, `chroma:///…`, `redis://…` without connecting."""
        ...

    # Banks
    async def create_bank(self, bank: BankRecord) -> None:
        """Creates the bank; `AlreadyExists` if its id is taken."""
        ...

    async def get_bank(self, bank_id: str) -> BankRecord | None:
        """The bank, or None."""
        ...

    async def list_banks(self) -> list[BankRecord]:
        """Every bank, ordered by `create_time` then id."""
        ...

    async def update_bank(self, bank: BankRecord) -> None:
        """Replaces the bank record; `NotFound` if it does not exist."""
        ...

    async def delete_bank(self, bank_id: str) -> None:
        """Deletes the bank with all its memories, revisions, vectors and operations."""
        ...

    # Memories
    async def apply(self, bank_id: str, batch: WriteBatch) -> None:
        """Applies the whole batch atomically, or raises and changes nothing.

        Lowers the bank's `EXPIRY_KIND` entry to `batch_expiry(batch)` atomically with the
        batch, or before and after it (`expiry_around`).
        """
        ...

    async def get_memories(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> list[MemoryRecord]:
        """The live memories among `memory_ids`, with embeddings, in the order asked."""
        ...

    async def nearest(self, bank_id: str, query: NearestQuery) -> list[ScoredRecord]:
        """Up to `query.k` live memories of one scope by true L2 distance, ties by memory id."""
        ...

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> str | None:
        """An opaque version of one scope's memories, for caches kept outside the store.

        Two equal values read at two moments guarantee that no memory of the scope was inserted,
        replaced or deleted in between, by any process (expiry need not change it: a cache
        filters by `expire_time` itself). None (the default): the store keeps no version, and
        callers must read the scope again.
        """
        return None

    async def scan(self, bank_id: str, query: ScanQuery) -> list[MemoryRecord]:
        """Up to `limit` live memories matching the query, in its order, after `query.after`.

        A keyset page: the order is total (sort keys, then memory id ascending) and a page
        resumes strictly after its cursor, with no offset and no cap on how deep a scan goes.
        Fewer than `limit` memories means none is left: callers end a listing on a short page.
        """
        ...

    # Revisions
    async def list_revisions(
        self, bank_id: str, memory_id: str, now: datetime
    ) -> list[RevisionRecord]:
        """Live revisions of a memory (deleted or not), newest first."""
        ...

    async def list_revisions_many(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> dict[str, list[RevisionRecord]]:
        """`list_revisions` of several memories at once, in a bounded number of round trips.

        Every id asked is a key (once, however often it is asked), mapped to exactly what
        `list_revisions` returns for it: `[]` for an id without live revisions. No ids, `{}`.
        """
        ...

    async def get_revision(
        self, bank_id: str, memory_id: str, revision_id: str, now: datetime
    ) -> RevisionRecord | None:
        """One live revision, or None."""
        ...

    async def list_revision_memory_ids(
        self, bank_id: str, now: datetime, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """One page of the ids of memories that have live revisions, deleted memories included.

        A keyset page: ids come in an order of the store's choosing that is total and stable
        (ascending id in the reference store), each id once; `after` continues after that id,
        and a page shorter than `limit` is the last. So a bank of any size is read in bounded
        steps, and ids written meanwhile are neither repeated nor, if they sort later, skipped.
        """
        ...

    # Operations
    async def put_operation(self, operation: OperationRecord) -> None:
        """Creates or replaces an operation."""
        ...

    async def get_operation(self, bank_id: str, operation_path: str) -> OperationRecord | None:
        """The operation, or None."""
        ...

    # Documents: small JSON state the engine keeps per bank (ingest streams)
    #
    # The due index: a document written with `due` has an entry (bank, kind, key, due) that
    # `due_documents` finds across every bank without reading the banks. An entry may be EARLIER
    # than its document says (the engine re-checks under the document's lock and fixes it with
    # `set_due`) but never later or missing: a store that cannot write it atomically with the
    # document writes it as `min(entry, due)` before the document and exactly after it.
    async def put_document(
        self,
        bank_id: str,
        kind: str,
        key: str,
        body: Mapping[str, Any],
        *,
        scope_key: ScopeKey | None = None,
        due: datetime | None = None,
    ) -> None:
        """Creates or replaces one document (a JSON-serialisable mapping) atomically.

        `scope_key` tags it for `list_documents(scope_key=...)`; `due` sets its due-index entry
        (None removes it).
        """
        ...

    async def get_document(self, bank_id: str, kind: str, key: str) -> Mapping[str, Any] | None:
        """The document, or None."""
        ...

    async def list_documents(
        self, bank_id: str, kind: str, *, scope_key: ScopeKey | None = None
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """Every (key, body) of one kind in the bank (of one scope when given), ordered by key.

        With `scope_key`, only documents written with that `scope_key`, at a cost that follows
        their number rather than the bank's.
        """
        ...

    async def delete_document(self, bank_id: str, kind: str, key: str) -> None:
        """Deletes one document if it exists, and its due-index entry."""
        ...

    async def due_documents(
        self, kind: str, now: datetime, *, limit: int = 1000
    ) -> list[DueDocument]:
        """Due-index entries of one kind with `due <= now`, in every bank, earliest first.

        Ties by bank id, then key; at most `limit`. The cost follows the entries returned, not
        the number of banks or documents. A deleted bank's entries are gone.
        """
        ...

    async def set_due(
        self,
        bank_id: str,
        kind: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool = False,
    ) -> None:
        """Sets the due-index entries of documents by key, without rewriting them.

        Exact (None removes the entry) for a caller that holds the document's lock (so no write
        of it runs meanwhile); `only_earlier` lowers an entry to `due` (adding a missing one,
        ignoring None), which is safe without the lock. Works for a deleted bank too (removes).
        """
        ...

    # Coordination
    def lock_provider(self) -> LockProvider:
        """The lock provider that serialises generation on this store's data (no I/O)."""
        ...

    # Maintenance
    async def sweep_expired(self, bank_id: str, now: datetime) -> int:
        """Reclaims storage of expired memories and revisions; returns how many were removed."""
        ...

    async def earliest_expiry(self, bank_id: str) -> datetime | None:
        """The earliest expire time of the bank's stored memories and revisions, or None.

        Rows expired but not swept yet count (their time is then in the past). What a sweep
        sets the bank's `EXPIRY_KIND` entry from; `NotFound` without the bank.
        """
        ...

    async def open_locally(self) -> None:
        """Does the store's start-up work on this machine now, ahead of the first call.

        Opening an embedded directory, starting a process of the store's own: work that takes
        time but never waits on a network, so a host may wait for it as it waits for a local
        model to load, not as for a store that does not answer. A store reached over the
        network does nothing here (its connection is its first call's). Raises what opening
        raises (`FailedPrecondition` for a directory another process holds).
        """
        return None

    async def aclose(self) -> None:
        """Releases connections the store opened (never a client the caller passed in)."""
        ...
