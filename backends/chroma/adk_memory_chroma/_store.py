"""`ChromaMemoryStore`: the `MemoryStore` protocol on Chroma, embedded or over HTTP.

Layout. Per bank, `<prefix>.<bank>.mem` holds the memories (L2 space set explicitly, vectors
always passed in: no Chroma embedding function) and `<prefix>.<bank>.aux` holds its revisions,
operations, engine documents and the scope index; `<prefix>.banks` is the registry of banks.
`_codec` documents the fields of each row. A scope is only ever matched by `$eq` on its digest;
expiry is checked in every read, and `sweep_expired` deletes what has expired (Chroma has no
TTL). Documents written with a scope key carry it (`dsk`), which `list_documents(scope_key=...)`
filters on.

Banks are created collections-first and registered last; a deletion marks the registry row
first, then drops the collections, then the row. A crash mid-delete leaves a marked row that
hides the bank and that the next `create_bank` of the same id finishes cleaning up.

`ChromaMemoryStore` is the facade; each concern lives in a module of its own:

- `_chroma`: the client, collection names and handles, every driver call and its errors;
- `_sizing`: how rows are cut into requests a Chroma server accepts;
- `_journal`: the write-ahead journal that makes a batch all or nothing, its replay and lock;
- `_writer`: `apply`'s checks and group commit of the batches in flight together;
- `_scope_index`: the per-scope index rows and the search path that reads them;
- `_reads`: reads of documents in flight together, as one call;
- `_vectors`: the scope vector cache, its write-through and the exact ranking;
- `_due`: the due index of engine documents;
- `_banks`: the bank registry and its cache;
- `_locks`: the lock provider; `_codec`, `_where`, `_folder`, `_config`: rows, filters, the
  embedded directory, the configuration.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self, TypeVar

import numpy as np
from chromadb.api import AsyncClientAPI, ClientAPI

from adk_memory.errors import AdkMemoryError, AlreadyExists, InvalidArgument, NotFound
from adk_memory.filters import matches
from adk_memory.locks import LockProvider
from adk_memory.scope import ScopeKey
from adk_memory.store import (
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
    SortKey,
    StoreCapabilities,
    WriteBatch,
    check_cursor,
    check_vectors,
    document_dues,
    expiry_around,
    index_around,
    lower_dues,
)
from adk_memory_chroma import _codec as codec
from adk_memory_chroma import _folder
from adk_memory_chroma._banks import BankRegistry, BankRows
from adk_memory_chroma._chroma import AUX, IN_CHUNK, MEM, Chroma, Gone, Namespace
from adk_memory_chroma._config import (
    ChromaStoreConfig,
    build_config,
    config_from_uri,
    serving_options,
)
from adk_memory_chroma._due import DueIndex, DueMirror
from adk_memory_chroma._journal import Journal
from adk_memory_chroma._locks import Locks
from adk_memory_chroma._reads import ReadsTogether
from adk_memory_chroma._records import DocumentMirror, RecordMirror
from adk_memory_chroma._scope_index import HeadMirror, ScopeIndex
from adk_memory_chroma._vectors import VectorCache, as_matrix, ranked
from adk_memory_chroma._where import PUSHDOWN, Compiled, all_of, compile_filter
from adk_memory_chroma._writer import BatchWriter, Changes

logger = logging.getLogger(__name__)

__all__ = ["ChromaMemoryStore"]

_T = TypeVar("_T")

_CLOSE_WRITE_SECONDS = 5.0
"""How long closing waits for the deferred due entries: a hung store must not hold a close."""
_DOCUMENT_SCOPE = "dsk"
"""The scope key of a document row written with one."""
_SORT_FIELDS = {"create_time": codec.CREATE_US, "update_time": codec.UPDATE_US}


def _sort_field(key: SortKey) -> str:
    """The metadata field holding a sort key's microseconds."""
    field = _SORT_FIELDS.get(key.field)
    if field is None:
        raise InvalidArgument(
            f"Cannot order by {key.field!r}; use create_time or update_time.", field="order_by"
        )
    return field


class ChromaMemoryStore(MemoryStore):
    """Memory banks in Chroma: embedded (`chroma:///path`) or a server (`chroma+http://h:p`).

    Setup:
        `pip install adk-memory-chroma` (or `adk-memory[chroma]`).

    Instantiate:
        ```python
        store = ChromaMemoryStore.from_uri("chroma:///var/lib/adk-memory")
        store = ChromaMemoryStore.from_uri("chroma+http://chroma:8000?collection_prefix=team-a")
        store = ChromaMemoryStore(ChromaStoreConfig(), client=chromadb.PersistentClient(path))
        ```

    Nothing connects until the first call. A client passed in is used as is and never closed;
    one the store built is closed by `aclose()`. An embedded directory belongs to one process at
    a time (Chroma's embedded mode is single-process): the first call in another process raises
    `FailedPrecondition` until every store of the holder is closed or the holder has exited
    (`_folder`). Several processes or hosts share data through a Chroma server; a store writes
    to one only with locks all its writers share: `lock_url` (several hosts) or
    `single_host=true` (`_locks`).
    """

    capabilities: ClassVar[StoreCapabilities] = StoreCapabilities(
        pushdown=PUSHDOWN, native_ttl=False
    )

    def __init__(
        self,
        config: ChromaStoreConfig | None = None,
        *,
        client: ClientAPI | AsyncClientAPI | None = None,
    ) -> None:
        """Builds the store without connecting.

        Args:
            config: Where the data lives and how it is searched; defaults need `client`.
            client: A chromadb client the caller built (sync or async); never closed by us.

        Raises:
            InvalidArgument: Neither a location in `config` nor a `client` is given.
        """
        self._config = config or ChromaStoreConfig()
        if client is None and self._config.path is None and self._config.host is None:
            raise InvalidArgument(
                "ChromaMemoryStore needs a location: use from_uri('chroma:///path') or "
                "from_uri('chroma+http://host:port'), or pass client=.",
                field="uri",
            )
        self._chroma = Chroma(self._config, client, self._share_embedded)
        self._locks = Locks(self._config, self._chroma)
        self._journal = Journal(self._chroma, self._locks)
        self._scopes = ScopeIndex(self._chroma, self._journal, self._new_vector_cache())
        self._due = DueIndex(self._chroma, self._locks)
        self._writer = BatchWriter(self._chroma, self._journal, self._scopes, self._due)
        self._banks = BankRegistry(self._chroma)
        self._document_reads = ReadsTogether(self._chroma, "read documents")

    @classmethod
    def from_uri(cls, uri: str, **options: Any) -> Self:
        """Builds the store from a URI without connecting.

        Args:
            uri: `chroma:///abs/path`, `chroma://./rel/path`, `chroma+http://host:port` or
                `chroma+https://host:port`, with `ChromaStoreConfig` fields as query parameters.
            **options: `ChromaStoreConfig` fields (they override the URI's parameters), and
                `client`, a chromadb client to use instead of building one.

        Returns:
            The store.

        Raises:
            InvalidArgument: The URI or an option is invalid; the message names it.
        """
        client = options.pop("client", None)
        return cls(config_from_uri(uri, options), client=client)

    async def open_locally(self) -> None:
        """Opens an embedded directory (and starts its child process) now; a server: nothing."""
        if self._config.path is not None:
            await self._chroma.connection()

    @classmethod
    def serving_options(cls, uri: str) -> dict[str, Any]:
        """What a long-lived process serving many callers adds (`store_from_uri(serving=True)`).

        `process=child` for an embedded URI that does not choose (`ChromaStoreConfig.process`).
        """
        return serving_options(uri)

    @classmethod
    def from_config(cls, values: Mapping[str, Any], *, client: Any = None) -> Self:
        """Builds the store from config values (a dict), validating them into `InvalidArgument`."""
        return cls(build_config(values, source="options"), client=client)

    @property
    def config(self) -> ChromaStoreConfig:
        """The frozen configuration."""
        return self._config

    def _share_embedded(self, folder: str, namespace: Namespace) -> None:
        """Takes the state this process's stores on an embedded directory share (`_folder`)."""
        self._banks.rows = _folder.shared(folder, ("banks", *namespace), BankRows)
        self._journal.settled = _folder.shared(folder, ("settled", *namespace), set)
        self._journal.heads = _folder.shared(folder, ("heads", *namespace), HeadMirror)
        self._journal.records = _folder.shared(folder, ("records", *namespace), RecordMirror)
        self._journal.documents = _folder.shared(folder, ("documents", *namespace), DocumentMirror)
        self._due.mirror = _folder.shared(folder, ("due", *namespace), DueMirror)
        # Stores of one budget share a cache: the service's reads store then finds what its
        # writes store just generated (write-through), without reading the scope again.
        budget = self._config.vector_cache_mb
        self._scopes.cache = _folder.shared(
            folder, ("vectors", budget, *namespace), self._new_vector_cache
        )

    def _new_vector_cache(self) -> VectorCache:
        return VectorCache(int(self._config.vector_cache_mb * 2**20))

    async def _on_bank(
        self,
        bank_id: str,
        kind: str,
        work: Callable[[Any], Awaitable[_T]],
        *,
        recover: bool = True,
    ) -> _T:
        """Runs `work` on a bank's collection; `NotFound` if the bank does not exist.

        The first time this instance touches the bank, a journal left by a crashed writer is
        replayed first (`recover=False` for `apply`, which replays under its own lock). A cached
        collection handle goes stale when another store deletes and re-creates the bank; the work
        is then retried once on a fresh handle.
        """
        name = self._chroma.name(bank_id, kind)
        for attempt in range(2):
            try:
                if recover and bank_id not in self._journal.recovered:
                    await self._journal.recover(bank_id)
                collection = await self._chroma.collection(name)
                return await work(collection)
            except Gone:
                self._forget(bank_id)
                if attempt:
                    break
        raise NotFound(
            f"Memory bank {bank_id!r} does not exist in {self._chroma.location}; create it first."
        )

    def _forget(self, bank_id: str) -> None:
        for kind in (MEM, AUX):
            self._chroma.forget_collection(self._chroma.name(bank_id, kind))
        self._writer.dimensions.pop(bank_id, None)
        self._journal.forget(bank_id)

    # Banks

    async def create_bank(self, bank: BankRecord) -> None:
        """Creates the bank's collections, then registers it; `AlreadyExists` if the id is taken."""
        self._locks.require()
        meta = await self._banks.row(bank.bank_id)
        if meta is not None:
            if meta.get(codec.STATE) == codec.STATE_LIVE:
                raise AlreadyExists(
                    f"Memory bank {bank.bank_id!r} already exists; pick another id or update it."
                )
            await self._drop_bank_collections(bank.bank_id)  # finish a crashed delete
        self._forget(bank.bank_id)
        await self._chroma.collection(
            self._chroma.name(bank.bank_id, MEM), create=True, memories=True
        )
        aux = await self._chroma.collection(self._chroma.name(bank.bank_id, AUX), create=True)
        await self._chroma.write("mark a bank indexed", aux, [codec.layout_row()])
        with codec.encoding("the bank config"):
            row = codec.bank_row(bank)
        await self._banks.put("register a bank", row)
        logger.debug("created bank %s", bank.bank_id)

    async def get_bank(self, bank_id: str) -> BankRecord | None:
        """The bank, or None."""
        meta = await self._banks.row(bank_id)
        if meta is None or meta.get(codec.STATE) != codec.STATE_LIVE:
            return None
        return codec.decode_bank(bank_id, meta)

    async def list_banks(self) -> list[BankRecord]:
        """Every bank, ordered by `create_time` then id."""
        banks = await self._banks.live()
        return sorted(banks, key=lambda bank: (bank.create_time, bank.bank_id))

    async def update_bank(self, bank: BankRecord) -> None:
        """Replaces the bank record; `NotFound` if it does not exist."""
        self._locks.require()
        if await self.get_bank(bank.bank_id) is None:
            raise NotFound(f"Memory bank {bank.bank_id!r} does not exist; create it first.")
        with codec.encoding("the bank config"):
            row = codec.bank_row(bank)
        await self._banks.put("update a bank", row)

    async def delete_bank(self, bank_id: str) -> None:
        """Deletes the bank with all its memories, revisions, vectors and operations."""
        self._locks.require()
        meta = await self._banks.row(bank_id)
        if meta is not None:
            await self._banks.mark_deleting(bank_id, meta)
        await self._drop_bank_collections(bank_id)
        await self._due.forget_bank(bank_id)
        if meta is not None:
            await self._banks.unregister(bank_id)
        logger.debug("deleted bank %s", bank_id)

    async def _drop_bank_collections(self, bank_id: str) -> None:
        for kind in (MEM, AUX):
            with contextlib.suppress(Gone):
                await self._chroma.delete_collection(self._chroma.name(bank_id, kind))
        self._forget(bank_id)

    async def drop_all(self) -> None:
        """Deletes every collection whose name starts with this store's prefix (tests, resets)."""
        client = await self._chroma.connection()
        start = f"{self._config.collection_prefix}."
        names: list[str] = []
        offset = 0
        while True:
            page = await self._chroma.call(
                "list collections", client.list_collections, limit=100, offset=offset
            )
            names += [collection.name for collection in page]
            if len(page) < 100:
                break
            offset += len(page)
        for name in names:
            if name.startswith(start):
                with contextlib.suppress(Gone):
                    await self._chroma.delete_collection(name)
        self._chroma.forget_collections()
        self._journal.forget_mirrored()
        self._writer.dimensions.clear()
        self._banks.changed()
        self._due.forget_all()

    # Memories

    async def apply(self, bank_id: str, batch: WriteBatch) -> None:
        """`_apply`, with the due entries of its documents and of the bank's expiry around it.

        As `index_around`, the documents' entries are lowered before the write and set exactly
        after it, but by the writer, in one call for every batch of the group it commits
        (`_writer`); the bank's expiry entry: `expiry_around`.
        """
        dues = document_dues(batch.documents)

        async def write() -> None:
            await lower_dues(self, bank_id, dues)
            await self._apply(bank_id, batch, dues)

        await expiry_around(self, bank_id, batch, write)

    async def _apply(
        self, bank_id: str, batch: WriteBatch, dues: Mapping[str, Mapping[str, datetime | None]]
    ) -> None:
        """Applies the whole batch through the journal (see the module docstring), then `dues`.

        `dues`: the exact due entries of the batch's documents, by kind and key.

        Raises:
            AlreadyExists: An insert names a memory that is live at the insert's `create_time`.
            InvalidArgument: The vectors of the batch differ in dimension from each other or from
                the memories already in the bank, or hold a value no store can (NaN, ±inf,
                beyond float32).
            NotFound: The bank does not exist.
            ResourceExhausted: Another writer held the bank's journal lock for too long.
            StoreUnavailable: Chroma failed; if the batch's journal was already written, the
                message says so and the batch is completed when the bank is next used.
        """
        check_vectors(batch, None)  # the dimension is checked against the stored rows
        final: dict[str, MemoryRecord] = {}
        for record in (*batch.inserts, *batch.upserts):
            final[record.memory_id] = record
        deletes = list(dict.fromkeys(batch.deletes))
        for memory_id in deletes:
            final.pop(memory_id, None)
        dimensions = {len(record.embedding) for record in final.values()}
        if len(dimensions) > 1 or 0 in dimensions:
            raise InvalidArgument(
                f"The memories of one batch must have embeddings of one non-zero dimension; got "
                f"{sorted(dimensions)}.",
                field="embedding",
            )
        with codec.encoding("a memory or revision"):
            memory_rows = [codec.memory_row(record) for record in final.values()]
            revision_rows = list(
                {row[0]: row for row in map(codec.revision_row, batch.revisions)}.values()
            )
        with codec.encoding("a document or operation"):
            document_rows = {
                row[0]: row
                for row in (
                    *map(_document_row, batch.documents),
                    *map(codec.operation_row, batch.operations),
                )
            }
        # Documents and operations are aux rows like revisions: they are written, journaled and
        # replayed with them (a later one of the same kind and key, or path, wins).
        revision_rows += document_rows.values()
        if not (memory_rows or revision_rows or deletes):
            await self._on_bank(bank_id, MEM, _noop)  # NotFound without the bank
            return
        changes = Changes(memory_rows, revision_rows, deletes, batch, dues=dues)
        await self._on_bank(
            bank_id, MEM, lambda memories: self._writer.write(bank_id, memories, changes),
            recover=False,
        )  # fmt: skip

    async def get_memories(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> list[MemoryRecord]:
        """The live memories among `memory_ids`, with embeddings, in the order asked."""
        unique = list(dict.fromkeys(memory_ids))
        if not unique:
            await self._on_bank(bank_id, MEM, _noop)
            return []

        async def work(memories: Any) -> list[MemoryRecord]:
            found = await self._chroma.get(
                "read memories",
                memories,
                ids=unique,
                include=["metadatas", "documents", "embeddings"],
            )
            return _decode_live(found, codec.micros(now))

        by_id = {record.memory_id: record for record in await self._on_bank(bank_id, MEM, work)}
        return [by_id[memory_id] for memory_id in memory_ids if memory_id in by_id]

    async def nearest(self, bank_id: str, query: NearestQuery) -> list[ScoredRecord]:
        """Up to `query.k` live memories of one scope by true L2 distance, ties by memory id.

        Exact search over the scope's own rows (see the module docstring, "Search").
        """
        pushed = compile_filter(query.filter)
        vector = np.asarray(query.vector, dtype=np.float64)
        now_us = codec.micros(query.now)

        async def work(memories: Any) -> list[ScoredRecord]:
            if pushed is False or query.k <= 0:
                return []
            aux = await self._chroma.collection(self._chroma.name(bank_id, AUX))
            for verified in (False, True):
                vectors = await self._scopes.vectors(
                    bank_id, memories, aux, query.scope_key, verified
                )
                if vectors.size and vectors.dimensions != len(vector):
                    as_matrix([vector], vectors.dimensions)  # raises InvalidArgument
                allowed = vectors.live(now_us)
                if pushed is not True and allowed.any():
                    allowed &= await self._scopes.matching(
                        memories, query.scope_key, vectors, pushed
                    )
                best = vectors.nearest(vector, allowed, query.k)
                if not best:
                    return []
                records = [
                    record
                    for record in await self._winners(bank_id, memories, best, now_us)
                    if record.scope_key == query.scope_key and matches(query.filter, record)
                ]
                if len(records) == len(best):
                    return ranked(records, vector, query.k)
                # Gone or changed since the index (or the filter's ids) was read, or an index
                # that lists a memory of another scope: read the scope again, checking each
                # row's scope.
                self._scopes.cache.drop(vectors.key)
            return ranked(records, vector, query.k)

        return await self._on_bank(bank_id, MEM, work)

    async def _winners(
        self, bank_id: str, memories: Any, memory_ids: list[str], now_us: int
    ) -> list[MemoryRecord]:
        """The live memories of `memory_ids`: as committed here (embedded), else read."""
        mirror = self._journal.records
        if mirror is not None:
            kept = mirror.live_records(bank_id, str(memories.id), memory_ids, now_us)
            if kept is not None:
                return kept
        found = await self._chroma.get(
            "read nearest memories",
            memories,
            ids=memory_ids,
            include=["metadatas", "documents", "embeddings"],
        )
        return _decode_live(found, now_us)

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> str | None:
        """The version token of the scope's index head ("" for a scope never written).

        None while the batch that wrote the head may still be writing its memory rows (the head
        goes with the batch's first call): what is read meanwhile must not be cached under it.
        """

        async def work(memories: Any) -> str | None:
            aux = await self._chroma.collection(self._chroma.name(bank_id, AUX))
            return await self._scopes.head(bank_id, memories, aux, scope_key)

        return await self._on_bank(bank_id, MEM, work)

    async def scan(self, bank_id: str, query: ScanQuery) -> list[MemoryRecord]:
        """Live memories matching the query in its order, after its cursor, up to its limit.

        Chroma has no ORDER BY and cannot compare strings: the where clause bounds the first sort
        key (inclusively, so every memory sharing the cursor's time is read), and the ids and
        metadata of the matches are sorted and cut at the cursor here.
        """
        check_cursor(query)
        fields = [_sort_field(key) for key in query.order_by]
        clauses: list[Compiled] = [{codec.LIVE_US: {"$gt": codec.micros(query.now)}}]
        if query.scope_key is not None:
            clauses.append({codec.SCOPE_KEY: query.scope_key})
        if query.after is not None:
            bound = "$lte" if query.order_by[0].descending else "$gte"
            clauses.append({fields[0]: {bound: codec.micros(query.after.values[0])}})
        clauses.append(compile_filter(query.filter))
        where = all_of(clauses)

        def position(memory_id: str, values: Sequence[int]) -> tuple[Any, ...]:
            terms = (
                -v if key.descending else v for v, key in zip(values, query.order_by, strict=True)
            )
            return (*terms, memory_id)

        async def work(memories: Any) -> list[MemoryRecord]:
            if where is False:
                return []
            found = await self._chroma.call(
                "scan memories", memories.get, where=where, include=["metadatas", "documents"]
            )
            rows = [
                (position(row[0], [int(row[1][field]) for field in fields]), row)
                for row in zip(found["ids"], found["metadatas"], found["documents"], strict=True)
            ]
            rows.sort(key=lambda pair: pair[0])
            if query.after is not None:
                cursor = [codec.micros(value) for value in query.after.values]
                start = position(query.after.memory_id, cursor)
                rows = [pair for pair in rows if pair[0] > start]
            return [
                codec.decode_memory(memory_id, document, meta)
                for _, (memory_id, meta, document) in rows[: query.limit]
            ]

        return await self._on_bank(bank_id, MEM, work)

    # Revisions

    async def list_revisions(
        self, bank_id: str, memory_id: str, now: datetime
    ) -> list[RevisionRecord]:
        """Live revisions of a memory (deleted or not), newest first."""

        async def work(aux: Any) -> list[RevisionRecord]:
            found = await self._chroma.call(
                "list revisions",
                aux.get,
                where={
                    "$and": [
                        {codec.KIND: codec.KIND_REVISION},
                        {codec.MEMORY_ID: memory_id},
                        {codec.LIVE_US: {"$gt": codec.micros(now)}},
                    ]
                },
                include=["metadatas"],
            )
            revisions = [codec.decode_revision(meta) for meta in found["metadatas"]]
            return sorted(
                revisions, key=lambda rev: (rev.create_time, rev.revision_id), reverse=True
            )

        return await self._on_bank(bank_id, AUX, work)

    async def list_revisions_many(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> dict[str, list[RevisionRecord]]:
        """`list_revisions` of each id: one `get` with `$in` per `IN_CHUNK` distinct ids."""
        unique = list(dict.fromkeys(memory_ids))

        async def work(aux: Any) -> dict[str, list[RevisionRecord]]:
            found: dict[str, list[RevisionRecord]] = {memory_id: [] for memory_id in unique}
            for start in range(0, len(unique), IN_CHUNK):
                rows = await self._chroma.call(
                    "list revisions",
                    aux.get,
                    where={
                        "$and": [
                            {codec.KIND: codec.KIND_REVISION},
                            {codec.MEMORY_ID: {"$in": unique[start : start + IN_CHUNK]}},
                            {codec.LIVE_US: {"$gt": codec.micros(now)}},
                        ]
                    },
                    include=["metadatas"],
                )
                for meta in rows["metadatas"]:
                    revision = codec.decode_revision(meta)
                    found[revision.memory_id].append(revision)
            for revisions in found.values():
                revisions.sort(key=lambda rev: (rev.create_time, rev.revision_id), reverse=True)
            return found

        return await self._on_bank(bank_id, AUX, work)

    async def get_revision(
        self, bank_id: str, memory_id: str, revision_id: str, now: datetime
    ) -> RevisionRecord | None:
        """One live revision, or None."""

        async def work(aux: Any) -> RevisionRecord | None:
            found = await self._chroma.call(
                "read a revision",
                aux.get,
                ids=[codec.revision_id(memory_id, revision_id)],
                include=["metadatas"],
            )
            # Expiry checked here: with `ids`, a `where` range makes Chroma walk every row.
            live = [m for m in found["metadatas"] if m[codec.LIVE_US] > codec.micros(now)]
            return codec.decode_revision(live[0]) if live else None

        return await self._on_bank(bank_id, AUX, work)

    async def list_revision_memory_ids(
        self, bank_id: str, now: datetime, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """One page of the ids of memories with live revisions, ordered by (`mh`, id).

        Chroma can neither order rows nor compare strings, so the page reads the revision rows
        (ids only) of consecutive `mh` ranges: the first sized from the collection's row count
        to hold about `limit` rows, each next one twice as wide, until `limit` memories are
        found. `mh` is a digest, so ranges hold evenly many memories whatever the ids look like.
        """
        cursor = (-1, "") if after is None else (codec.memory_hash(after), after)

        async def work(aux: Any) -> list[str]:
            rows = await self._chroma.call("count revision rows", aux.count)
            width = max(1, codec.HASH_SPACE * limit // max(rows, 1))
            low = max(cursor[0], 0)
            found: set[tuple[int, str]] = set()
            while low < codec.HASH_SPACE and len(found) < limit:
                high = min(low + width, codec.HASH_SPACE)
                for memory_id in await self._revision_memory_ids(aux, now, low, high):
                    key = (codec.memory_hash(memory_id), memory_id)
                    if key > cursor:
                        found.add(key)
                low, width = high, width * 2
            return [memory_id for _hash, memory_id in sorted(found)[:limit]]

        return await self._on_bank(bank_id, AUX, work)

    async def _revision_memory_ids(self, aux: Any, now: datetime, low: int, high: int) -> set[str]:
        """The memory ids of the live revision rows whose `mh` is in [low, high)."""
        found = await self._chroma.call(
            "list revision memory ids",
            aux.get,
            where={
                "$and": [
                    {codec.KIND: codec.KIND_REVISION},
                    {codec.MEMORY_HASH: {"$gte": low}},
                    {codec.MEMORY_HASH: {"$lt": high}},
                    {codec.LIVE_US: {"$gt": codec.micros(now)}},
                ]
            },
            include=[],
        )
        return {codec.revision_memory_id(row_id) for row_id in found["ids"]}

    # Operations

    async def put_operation(self, operation: OperationRecord) -> None:
        """Creates or replaces an operation; `NotFound` if its bank does not exist."""
        self._locks.require()
        with codec.encoding("the operation payload"):
            row = codec.operation_row(operation)

        async def work(aux: Any) -> None:
            await self._chroma.write("write an operation", aux, [row])

        await self._on_bank(operation.bank_id, AUX, work)

    async def get_operation(self, bank_id: str, operation_path: str) -> OperationRecord | None:
        """The operation, or None (also when the bank does not exist)."""

        async def work(aux: Any) -> OperationRecord | None:
            found = await self._chroma.call(
                "read an operation",
                aux.get,
                ids=[codec.operation_id(operation_path)],
                include=["metadatas"],
            )
            return codec.decode_operation(bank_id, found["metadatas"][0]) if found["ids"] else None

        try:
            return await self._on_bank(bank_id, AUX, work)
        except NotFound:
            return None

    # Documents

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
        """Creates or replaces one document in one Chroma write; `NotFound` without the bank.

        Its due entry is written around it (see the module docstring).
        """
        self._locks.require()
        document = DocumentRecord(kind, key, body, scope_key=scope_key, due=due)
        with codec.encoding("the document"):
            row = _document_row(document)

        async def work(aux: Any) -> None:
            # Outside the journal lock: mirrored by no one, before and after (`DocumentMirror`).
            self._forget_document(bank_id, row[0])
            try:
                await self._chroma.write("write a document", aux, [row])
            finally:
                self._forget_document(bank_id, row[0])

        await index_around(
            self, bank_id, [document], functools.partial(self._on_bank, bank_id, AUX, work)
        )

    async def get_document(self, bank_id: str, kind: str, key: str) -> Mapping[str, Any] | None:
        """The document, or None (also when the bank does not exist).

        Documents read at once (the streams of the turns the ADK writer stores together, the
        flushes of many users) share one Chroma call (`_reads`).
        """

        async def work(aux: Any) -> Mapping[str, Any] | None:
            row_id = codec.document_id(kind, key)
            mirror = self._journal.documents
            kept = None if mirror is None else mirror.body(bank_id, str(aux.id), row_id)
            if kept is not None:
                return kept
            meta = await self._document_reads.metadata(aux, row_id)
            return codec.decode_document(meta)[1] if meta is not None else None

        try:
            return await self._on_bank(bank_id, AUX, work)
        except NotFound:
            return None

    async def list_documents(
        self, bank_id: str, kind: str, *, scope_key: ScopeKey | None = None
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """Every (key, body) of one kind in the bank (of one scope when given), ordered by key.

        [] without the bank.
        """
        clauses: list[dict[str, Any]] = [
            {codec.KIND: codec.KIND_DOCUMENT},
            {codec.DOCUMENT_KIND: kind},
        ]
        if scope_key is not None:
            clauses.append({_DOCUMENT_SCOPE: scope_key})

        async def work(aux: Any) -> list[tuple[str, Mapping[str, Any]]]:
            found = await self._chroma.call(
                "list documents", aux.get, where={"$and": clauses}, include=["metadatas"]
            )
            return sorted(
                (codec.decode_document(meta) for meta in found["metadatas"]), key=lambda d: d[0]
            )

        try:
            return await self._on_bank(bank_id, AUX, work)
        except NotFound:
            return []

    async def delete_document(self, bank_id: str, kind: str, key: str) -> None:
        """Deletes one document if it exists, then its due entry."""
        self._locks.require()

        async def work(aux: Any) -> None:
            row_id = codec.document_id(kind, key)
            self._forget_document(bank_id, row_id)
            try:
                await self._chroma.call("delete a document", aux.delete, ids=[row_id])
            finally:
                self._forget_document(bank_id, row_id)

        with contextlib.suppress(NotFound):
            await self._on_bank(bank_id, AUX, work)
        await self.set_due(bank_id, kind, {key: None})

    def _forget_document(self, bank_id: str, row_id: str) -> None:
        if self._journal.documents is not None:
            self._journal.documents.forget(bank_id, [row_id])

    async def due_documents(
        self, kind: str, now: datetime, *, limit: int = 1000
    ) -> list[DueDocument]:
        """Due entries of one kind up to `now`, earliest first (one `get` of the due index)."""
        return await self._due.documents(kind, now, limit=limit)

    async def set_due(
        self,
        bank_id: str,
        kind: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool = False,
    ) -> None:
        """Sets due entries (one upsert, one delete), or lowers them (one read, one upsert).

        See `_due.DueIndex.set_entries`.
        """
        self._locks.require()
        await self._due.set_entries(bank_id, kind, dues, only_earlier=only_earlier)

    # Coordination

    def lock_provider(self) -> LockProvider:
        """The locks that serialise generation on this store's data (no I/O here).

        See `_locks.Locks.provider`.
        """
        return self._locks.provider()

    # Maintenance

    async def sweep_expired(self, bank_id: str, now: datetime) -> int:
        """Deletes expired memories and revisions; returns how many rows were removed."""
        self._locks.require()
        expired = {codec.LIVE_US: {"$lte": codec.micros(now)}}

        async def sweep_memories(memories: Any) -> int:
            found = await self._chroma.call(
                "find expired memories", memories.get, where=expired, include=[]
            )
            if not found["ids"]:
                return 0
            # Through the journal, so each scope's index drops them in the same commit.
            changes = Changes([], [], found["ids"], WriteBatch(), codec.micros(now))
            return await self._writer.write(bank_id, memories, changes)

        async def sweep_revisions(aux: Any) -> int:
            found = await self._chroma.call(
                "find expired revisions",
                aux.get,
                where={"$and": [{codec.KIND: codec.KIND_REVISION}, expired]},
                include=[],
            )
            await self._chroma.delete_ids("delete expired revisions", aux, found["ids"])
            return len(found["ids"])

        removed = await self._on_bank(bank_id, MEM, sweep_memories)
        removed += await self._on_bank(bank_id, AUX, sweep_revisions)
        if removed:
            logger.debug("swept %d expired rows from bank %s", removed, bank_id)
        return removed

    async def earliest_expiry(self, bank_id: str) -> datetime | None:
        """The earliest expiry among the bank's memories and revisions.

        One `get` of the metadata of the rows with an expiry in each collection.
        """
        expiring = {codec.LIVE_US: {"$lt": codec.NEVER_US}}
        revisions = {"$and": [{codec.KIND: codec.KIND_REVISION}, expiring]}
        earliest = [
            await self._on_bank(bank_id, kind, functools.partial(self._earliest_live_us, where))
            for kind, where in ((MEM, expiring), (AUX, revisions))
        ]
        found = [live_us for live_us in earliest if live_us is not None]
        return codec.EPOCH + timedelta(microseconds=min(found)) if found else None

    async def _earliest_live_us(self, where: Mapping[str, Any], collection: Any) -> int | None:
        """The least `live_us` of the collection's rows matching `where` (None: no such row)."""
        found = await self._chroma.call(
            "find the earliest expiry", collection.get, where=where, include=["metadatas"]
        )
        return min((int(meta[codec.LIVE_US]) for meta in found["metadatas"]), default=None)

    async def aclose(self) -> None:
        """Closes the client the store built (never one passed in) and forgets its handles.

        Embedded, due entries whose raise or removal was deferred are written first, for at
        most `_CLOSE_WRITE_SECONDS` (if that fails or a hung store outlasts it, they stay early:
        harmless).
        """
        with contextlib.suppress(AdkMemoryError, TimeoutError):
            await asyncio.wait_for(self._due.write_deferred(), _CLOSE_WRITE_SECONDS)
        self._chroma.forget_collections()
        self._writer.dimensions.clear()
        await self._locks.aclose()
        self._journal.recovered.clear()
        await self._chroma.close()


async def _noop(collection: Any) -> None:
    """Work that only proves the bank exists."""


def _document_row(document: DocumentRecord) -> codec.Row:
    """The aux row of a document, with its scope key when it has one."""
    row_id, vector, text, meta = codec.document_row(document.kind, document.key, document.body)
    if document.scope_key is not None:
        meta = {**meta, _DOCUMENT_SCOPE: document.scope_key}
    return row_id, vector, text, meta


def _decode_live(found: Mapping[str, Any], now_us: int) -> list[MemoryRecord]:
    """The memories of a `get` by ids that are live at `now_us` (journal rows are not).

    Expiry is checked here rather than in a `where`: with `ids`, a range on `live_us` makes
    Chroma walk every row of the collection (80 ms at 10,000 rows, against 1 ms).
    """
    embeddings = found.get("embeddings")
    return [
        codec.decode_memory(
            memory_id,
            found["documents"][i],
            meta,
            None if embeddings is None else embeddings[i],
        )
        for i, (memory_id, meta) in enumerate(zip(found["ids"], found["metadatas"], strict=True))
        if meta.get(codec.LIVE_US, 0) > now_us
    ]
