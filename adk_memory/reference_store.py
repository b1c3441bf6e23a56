"""The in-process reference store (`memory://`): exact numpy search over plain dicts.

It is the executable meaning of the store contract: every backend's results are compared with
this one by the conformance suite. It keeps nothing across processes. `memory://NAME` shares one
store between clients of the same process that use the same name; bare `memory://` is private.
"""

from __future__ import annotations

import heapq
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Self
from urllib.parse import parse_qsl, urlsplit

import numpy as np

from adk_memory.errors import AlreadyExists, InvalidArgument, NotFound
from adk_memory.filters import matches
from adk_memory.locks import InProcessLockProvider
from adk_memory.scope import ScopeKey
from adk_memory.store import (
    EXPIRY_KEY,
    EXPIRY_KIND,
    BankRecord,
    DocumentRecord,
    DueDocument,
    MemoryRecord,
    MemoryStore,
    NearestQuery,
    OperationRecord,
    RevisionRecord,
    ScanQuery,
    ScoredRecord,
    StoreCapabilities,
    WriteBatch,
    batch_expiry,
    check_cursor,
    check_expectations,
    check_vectors,
    sort_records,
)

__all__ = ["ReferenceMemoryStore"]

_ALL_FAMILIES = ("fact", "time", "topics", "scope") + tuple(
    f"metadata_{kind}" for kind in ("string", "number", "bool", "timestamp")
)
_ALL_OPS = ("=", "!=", ":", "=~", "<", "<=", ">", ">=")
_VERSIONS = itertools.count(1)
"""Scope versions are drawn from one process-wide sequence, so a version is never reused, not
even by a bank deleted and created again with the same id."""


@dataclass(frozen=True, slots=True)
class _ScopeIndex:
    """One scope's live-or-not records with their vectors as one matrix, for exact search."""

    records: list[MemoryRecord]
    matrix: np.ndarray
    ids: np.ndarray
    squared_norms: np.ndarray

    @classmethod
    def build(cls, records: list[MemoryRecord], rows: Mapping[str, np.ndarray]) -> _ScopeIndex:
        ids = np.asarray([record.memory_id for record in records])
        matrix = (
            np.stack([rows[record.memory_id] for record in records])
            if records
            else np.empty((0, 0))
        )
        squared_norms = np.einsum("ij,ij->i", matrix, matrix) if records else np.empty(0)
        return cls(records, matrix, ids, squared_norms)


@dataclass
class _Bank:
    record: BankRecord
    memories: dict[str, MemoryRecord] = field(default_factory=dict)
    revisions: dict[str, dict[str, RevisionRecord]] = field(default_factory=dict)
    operations: dict[str, OperationRecord] = field(default_factory=dict)
    documents: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    document_scopes: dict[tuple[str, str], str] = field(default_factory=dict)
    """Per (kind, key) of a document written with a scope key, that key."""
    scoped_documents: dict[tuple[str, str], dict[str, None]] = field(default_factory=dict)
    """Per (kind, scope key), the keys of its documents (an ordered set)."""
    rows: dict[str, np.ndarray] = field(default_factory=dict)
    """Per memory id, its vector as a float64 array (so an index is one `np.stack`)."""
    members: dict[str, dict[str, None]] = field(default_factory=dict)
    """Per scope key, the ids of its memories (an ordered set)."""
    scopes: dict[str, _ScopeIndex] = field(default_factory=dict)
    """Per scope key, its search index; `put` and `drop` discard the index of their scope."""
    versions: dict[str, int] = field(default_factory=dict)
    """Per scope key, the version `put` and `drop` draw afresh (a scope never written has none)."""

    def put(self, record: MemoryRecord) -> None:
        """Stores a memory (replacing one with its id) and its vector row."""
        self.drop(record.memory_id)
        self.memories[record.memory_id] = record
        self.rows[record.memory_id] = np.asarray(record.embedding, dtype=np.float64)
        self.members.setdefault(record.scope_key, {})[record.memory_id] = None
        self._changed(record.scope_key)

    def drop(self, memory_id: str) -> None:
        """Forgets a memory, if present."""
        record = self.memories.pop(memory_id, None)
        if record is not None:
            del self.rows[memory_id]
            del self.members[record.scope_key][memory_id]
            self._changed(record.scope_key)

    def _changed(self, key: str) -> None:
        self.scopes.pop(key, None)
        self.versions[key] = next(_VERSIONS)

    def put_document(self, kind: str, key: str, body: Any, scope: ScopeKey | None) -> None:
        """Stores a document (a JSON round trip, like other stores) under its scope key."""
        self.documents[(kind, key)] = json.loads(json.dumps(dict(body)))
        self.drop_document_scope(kind, key)
        if scope is not None:
            self.document_scopes[(kind, key)] = scope
            self.scoped_documents.setdefault((kind, scope), {})[key] = None

    def drop_document_scope(self, kind: str, key: str) -> None:
        """Forgets which scope a document belongs to."""
        scope = self.document_scopes.pop((kind, key), None)
        if scope is not None:
            del self.scoped_documents[(kind, scope)][key]

    def scope_index(self, key: str) -> _ScopeIndex:
        """The scope's search index (cached until a write touches the scope)."""
        if key not in self.scopes:
            records = [self.memories[memory_id] for memory_id in self.members.get(key, {})]
            self.scopes[key] = _ScopeIndex.build(records, self.rows)
        return self.scopes[key]


def _live_update_time(bank: _Bank, memory_id: str, now: datetime) -> datetime | None:
    record = bank.memories.get(memory_id)
    return record.update_time if record is not None and record.is_live(now) else None


class _DueIndex:
    """The due index of one document kind: (bank, key) -> due, with a heap ordered by due.

    The heap keeps superseded items until they surface (skipped then), and is rebuilt when
    they outnumber the live entries, so a query costs the entries it returns.
    """

    def __init__(self) -> None:
        self.entries: dict[tuple[str, str], datetime] = {}
        self._heap: list[tuple[datetime, str, str]] = []

    def set(self, bank_id: str, key: str, due: datetime | None) -> None:
        if due is None:
            self.entries.pop((bank_id, key), None)
            return
        self.entries[(bank_id, key)] = due
        heapq.heappush(self._heap, (due, bank_id, key))
        if len(self._heap) > 2 * len(self.entries) + 64:
            self._heap = [(due, bank, key) for (bank, key), due in self.entries.items()]
            heapq.heapify(self._heap)

    def due(self, now: datetime, limit: int) -> list[DueDocument]:
        taken: list[tuple[datetime, str, str]] = []
        while self._heap and self._heap[0][0] <= now and len(taken) < limit:
            item = heapq.heappop(self._heap)
            due, bank_id, key = item
            if self.entries.get((bank_id, key)) == due and (not taken or taken[-1] != item):
                taken.append(item)
        for item in taken:
            heapq.heappush(self._heap, item)
        return [DueDocument(bank_id, key, due) for due, bank_id, key in taken]


@dataclass
class _Shared:
    """What clients of one `memory://NAME` share."""

    banks: dict[str, _Bank] = field(default_factory=dict)
    due: dict[str, _DueIndex] = field(default_factory=dict)
    """Per document kind."""
    locks: InProcessLockProvider = field(default_factory=InProcessLockProvider)


_SHARED: dict[str, _Shared] = {}


class ReferenceMemoryStore(MemoryStore):
    """Exact, in-process, non-persistent. Evaluates every filter natively."""

    capabilities: ClassVar[StoreCapabilities] = StoreCapabilities(
        pushdown=frozenset((family, op) for family in _ALL_FAMILIES for op in _ALL_OPS),
        native_ttl=False,
    )

    def __init__(self, *, name: str | None = None) -> None:
        shared = _SHARED.setdefault(name, _Shared()) if name else _Shared()
        self._banks = shared.banks
        self._due = shared.due
        self._locks = shared.locks

    @classmethod
    def from_uri(cls, uri: str, **options: Any) -> Self:
        """`memory://` (private) or `memory://NAME` (shared within the process)."""
        parts = urlsplit(uri)
        if parts.scheme != "memory":
            raise InvalidArgument(
                f"ReferenceMemoryStore takes memory:// URIs, not {parts.scheme!r}."
            )
        given = sorted({*options, *(key for key, _ in parse_qsl(parts.query))})
        if given:
            raise InvalidArgument(f"memory:// takes no options; got {given}.")
        return cls(name=(parts.netloc + parts.path).strip("/") or None)

    def _bank(self, bank_id: str) -> _Bank:
        bank = self._banks.get(bank_id)
        if bank is None:
            raise NotFound(f"Memory bank {bank_id!r} does not exist.")
        return bank

    async def create_bank(self, bank: BankRecord) -> None:
        """Creates the bank; `AlreadyExists` if its id is taken."""
        if bank.bank_id in self._banks:
            raise AlreadyExists(f"Memory bank {bank.bank_id!r} already exists.")
        self._banks[bank.bank_id] = _Bank(record=bank)

    async def get_bank(self, bank_id: str) -> BankRecord | None:
        """The bank, or None."""
        bank = self._banks.get(bank_id)
        return bank.record if bank else None

    async def list_banks(self) -> list[BankRecord]:
        """Every bank, ordered by `create_time` then id."""
        records = [bank.record for bank in self._banks.values()]
        return sorted(records, key=lambda record: (record.create_time, record.bank_id))

    async def update_bank(self, bank: BankRecord) -> None:
        """Replaces the bank record; `NotFound` if it does not exist."""
        self._bank(bank.bank_id).record = bank

    async def delete_bank(self, bank_id: str) -> None:
        """Deletes the bank and everything in it, with its due-index entries."""
        bank = self._banks.pop(bank_id, None)
        for kind, key in bank.documents if bank is not None else ():
            self._due_index(kind).set(bank_id, key, None)
        self._due_index(EXPIRY_KIND).set(bank_id, EXPIRY_KEY, None)

    async def apply(self, bank_id: str, batch: WriteBatch) -> None:
        """Applies the whole batch with its expiry entry lowered, or raises and changes nothing.

        Atomic because nothing below the fence checks awaits: no other task runs in between.
        """
        for lease in batch.fences:
            await lease.verify()
        bank = self._bank(bank_id)
        check_vectors(batch, bank.record.embedding_dimension)
        check_expectations(
            batch.expect,
            {
                expected.memory_id: _live_update_time(bank, expected.memory_id, expected.now)
                for expected in batch.expect
            },
        )
        documents = {(document.kind, document.key): document for document in batch.documents}
        json.dumps([dict(document.body) for document in documents.values()])  # before any write
        for record in batch.inserts:
            existing = bank.memories.get(record.memory_id)
            if existing is not None and existing.is_live(record.create_time):
                raise AlreadyExists(f"A memory with id {record.memory_id!r} already exists.")
        for record in (*batch.inserts, *batch.upserts):
            bank.put(record)
        for memory_id in batch.deletes:
            bank.drop(memory_id)
        for revision in batch.revisions:
            bank.revisions.setdefault(revision.memory_id, {})[revision.revision_id] = revision
        for document in documents.values():
            self._put_document(bank_id, bank, document)
        bank.operations.update((op.operation_path, op) for op in batch.operations)
        self._lower(bank_id, EXPIRY_KIND, {EXPIRY_KEY: batch_expiry(batch)})

    async def get_memories(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> list[MemoryRecord]:
        """The live memories among `memory_ids`, in the order asked."""
        memories = self._bank(bank_id).memories
        found = (memories.get(memory_id) for memory_id in memory_ids)
        return [record for record in found if record is not None and record.is_live(now)]

    async def nearest(self, bank_id: str, query: NearestQuery) -> list[ScoredRecord]:
        """Exact Euclidean search over the live memories of one scope.

        One matrix-vector product ranks the scope by squared distance; only the best `pool`
        rows get their exact distance and (distance, id) order. The answer is final when the
        k-th hit is strictly nearer than every row left out; else the pool grows (expired or
        filtered rows, or a tie at the pool's edge).
        """
        index = self._bank(bank_id).scope_index(query.scope_key)
        if not index.records or query.k <= 0:
            return []
        target = np.asarray(query.vector, dtype=np.float64)
        squared = index.squared_norms - 2.0 * (index.matrix @ target) + float(target @ target)
        pool = max(4 * query.k, 64)
        while True:
            hits, final = _best_hits(index, squared, target, query, pool)
            if final:
                return hits
            pool *= 4

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> str:
        """A number drawn afresh by every write that touches the scope ("0": never written)."""
        return str(self._bank(bank_id).versions.get(scope_key, 0))

    async def scan(self, bank_id: str, query: ScanQuery) -> list[MemoryRecord]:
        """Live memories matching the query in its order, after its cursor, up to its limit."""
        check_cursor(query)
        found = (
            record
            for record in self._bank(bank_id).memories.values()
            if (query.scope_key is None or record.scope_key == query.scope_key)
            and record.is_live(query.now)
            and matches(query.filter, record)
        )
        return sort_records(found, query)

    async def list_revisions(
        self, bank_id: str, memory_id: str, now: datetime
    ) -> list[RevisionRecord]:
        """Live revisions of a memory, newest first."""
        revisions = self._bank(bank_id).revisions.get(memory_id, {})
        live = [revision for revision in revisions.values() if revision.is_live(now)]
        return sorted(live, key=lambda rev: (rev.create_time, rev.revision_id), reverse=True)

    async def list_revisions_many(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> dict[str, list[RevisionRecord]]:
        """`list_revisions` of each id (asked once), keyed by id."""
        self._bank(bank_id)
        return {
            memory_id: await self.list_revisions(bank_id, memory_id, now)
            for memory_id in dict.fromkeys(memory_ids)
        }

    async def get_revision(
        self, bank_id: str, memory_id: str, revision_id: str, now: datetime
    ) -> RevisionRecord | None:
        """One live revision, or None."""
        revision = self._bank(bank_id).revisions.get(memory_id, {}).get(revision_id)
        return revision if revision is not None and revision.is_live(now) else None

    async def list_revision_memory_ids(
        self, bank_id: str, now: datetime, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """Ids of the memories with a live revision after `after`, ascending (one page)."""
        found = sorted(
            memory_id
            for memory_id, revisions in self._bank(bank_id).revisions.items()
            if (after is None or memory_id > after)
            and any(revision.is_live(now) for revision in revisions.values())
        )
        return found[: max(limit, 0)]

    async def put_operation(self, operation: OperationRecord) -> None:
        """Creates or replaces an operation."""
        self._bank(operation.bank_id).operations[operation.operation_path] = operation

    async def get_operation(self, bank_id: str, operation_path: str) -> OperationRecord | None:
        """The operation, or None."""
        bank = self._banks.get(bank_id)
        return bank.operations.get(operation_path) if bank else None

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
        """Creates or replaces one document (stored as a JSON round trip, like other stores)."""
        document = DocumentRecord(kind, key, body, scope_key=scope_key, due=due)
        self._put_document(bank_id, self._bank(bank_id), document)

    def _put_document(self, bank_id: str, bank: _Bank, document: DocumentRecord) -> None:
        bank.put_document(document.kind, document.key, document.body, document.scope_key)
        self._due_index(document.kind).set(bank_id, document.key, document.due)

    def _due_index(self, kind: str) -> _DueIndex:
        return self._due.setdefault(kind, _DueIndex())

    async def get_document(self, bank_id: str, kind: str, key: str) -> Mapping[str, Any] | None:
        """The document, or None."""
        bank = self._banks.get(bank_id)
        found = bank.documents.get((kind, key)) if bank else None
        return json.loads(json.dumps(found)) if found is not None else None

    async def list_documents(
        self, bank_id: str, kind: str, *, scope_key: ScopeKey | None = None
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """Every (key, body) of one kind (of one scope when given), ordered by key."""
        bank = self._banks.get(bank_id)
        if bank is None:
            return []
        if scope_key is None:
            keys = [doc_key for doc_kind, doc_key in bank.documents if doc_kind == kind]
        else:
            keys = list(bank.scoped_documents.get((kind, scope_key), {}))
        return [(key, json.loads(json.dumps(bank.documents[(kind, key)]))) for key in sorted(keys)]

    async def delete_document(self, bank_id: str, kind: str, key: str) -> None:
        """Deletes one document if it exists, and its due-index entry."""
        bank = self._banks.get(bank_id)
        if bank is not None:
            bank.documents.pop((kind, key), None)
            bank.drop_document_scope(kind, key)
            self._due_index(kind).set(bank_id, key, None)

    async def due_documents(
        self, kind: str, now: datetime, *, limit: int = 1000
    ) -> list[DueDocument]:
        """Due-index entries of one kind with `due <= now`, earliest first (bank, key on ties)."""
        return self._due_index(kind).due(now, limit)

    async def set_due(
        self,
        bank_id: str,
        kind: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool = False,
    ) -> None:
        """Sets (or with `only_earlier` lowers) entries; only removes in a deleted bank."""
        if only_earlier:
            self._lower(bank_id, kind, dues)
            return
        index = self._due_index(kind)
        for key, due in dues.items():
            if due is None or bank_id in self._banks:
                index.set(bank_id, key, due)

    def _lower(self, bank_id: str, kind: str, dues: Mapping[str, datetime | None]) -> None:
        """Lowers entries (adding missing ones) of an existing bank; None lowers nothing."""
        index = self._due_index(kind)
        for key, due in dues.items():
            current = index.entries.get((bank_id, key))
            if due is not None and (current is None or due < current) and bank_id in self._banks:
                index.set(bank_id, key, due)

    def lock_provider(self) -> InProcessLockProvider:
        """In-process locks (shared by every client of the same named store)."""
        return self._locks

    async def sweep_expired(self, bank_id: str, now: datetime) -> int:
        """Drops expired memories and revisions."""
        bank = self._bank(bank_id)
        expired = [key for key, record in bank.memories.items() if not record.is_live(now)]
        for key in expired:
            bank.drop(key)
        removed = len(expired)
        for revisions in bank.revisions.values():
            stale = [key for key, revision in revisions.items() if not revision.is_live(now)]
            for key in stale:
                del revisions[key]
            removed += len(stale)
        return removed

    async def earliest_expiry(self, bank_id: str) -> datetime | None:
        """The earliest expire time among the bank's memories and revisions (a full pass)."""
        bank = self._bank(bank_id)
        rows: list[MemoryRecord | RevisionRecord] = [*bank.memories.values()]
        rows += (revision for by_id in bank.revisions.values() for revision in by_id.values())
        return min((row.expire_time for row in rows if row.expire_time is not None), default=None)

    async def drop_all(self) -> None:
        """Deletes every bank (tests)."""
        self._banks.clear()
        self._due.clear()

    async def aclose(self) -> None:
        """Nothing to release."""


_EDGE_MARGIN = 1e-9
"""Relative slack between squared distances computed two ways (expanded product vs direct)."""


def _best_hits(
    index: _ScopeIndex, squared: np.ndarray, target: np.ndarray, query: NearestQuery, pool: int
) -> tuple[list[ScoredRecord], bool]:
    """The first k live, matching rows among the `pool` nearest, and whether that is final."""
    if pool < len(index.records):
        split = np.argpartition(squared, pool)
        rows, edge = split[:pool], float(squared[split[pool]])
    else:
        rows, edge = np.arange(len(index.records)), np.inf
    distances = np.linalg.norm(index.matrix[rows] - target, axis=1)
    hits: list[ScoredRecord] = []
    for position in np.lexsort((index.ids[rows], distances)):  # SPEC §3: ties by name
        record = index.records[rows[position]]
        if record.is_live(query.now) and matches(query.filter, record):
            hits.append(ScoredRecord(record, float(distances[position])))
            if len(hits) == query.k:
                break
    if edge == np.inf:
        return hits, True
    scale = 1.0 + float(target @ target) + float(index.squared_norms.max())
    complete = len(hits) == query.k and hits[-1].distance ** 2 < edge - _EDGE_MARGIN * scale
    return hits, complete
