r"""`RedisMemoryStore`: the `MemoryStore` protocol on Redis with the query engine (RediSearch).

Key layout (P = `key_prefix`, B = bank id, E = the bank's epoch, a random id drawn when the bank
is created). Every key of a bank carries the hash tag `{P:B}`, so all of them live in one cluster
slot and one MULTI/EXEC or script may touch any of them:

```
P:banks                    SET    ids of the banks (for list_banks)
P:garbage                  SET    "B\x1fE" of deleted banks whose keys are still being removed
P:due:<kind>               ZSET   "B\x1f<key>" of documents with a due time, scored by it (µs);
                                  kind `expiry`: "B\x1fbank", the bank's earliest expiry
{P:B}:bank                 HASH   record (JSON), epoch, dim, algorithm, dtype
{P:B}:E:idx                       the bank's search index (RediSearch treats its name as a key)
{P:B}:E:m:<memory>         HASH   a memory, indexed by the search index {P:B}:E:idx
{P:B}:E:r:<memory>:<rev>   HASH   a revision (JSON document, live_until)
{P:B}:E:rz:<memory>        ZSET   revision ids of a memory, scored by create time (µs)
{P:B}:E:rids               ZSET   ids of the memories with a revision set, all scored 0 (so
                                  ZRANGEBYLEX pages them by id, deleted memories included)
{P:B}:E:rexp               ZSET   "<memory>\x1f<rev>" of expiring revisions, by expiry (µs),
                                  that Redis will not evict itself (see Expiry)
{P:B}:E:rexpn              ZSET   the same for revisions Redis evicts; trimmed by each write
{P:B}:E:op:<path>          STRING an operation (JSON)
{P:B}:E:doc:<kind>         HASH   documents of one kind: key -> JSON
{P:B}:E:dsk:<kind>         HASH   key -> scope key, of documents written with one
{P:B}:E:dsc:<kind>         ZSET   "<scope key>\x1f<key>" of those, all scored 0 (ZRANGEBYLEX
                                  lists one scope's documents)
{P:B}:E:tx:<id>            STRING commit marker of one write, kept for 5 minutes (see `apply`)
{P:B}:E:v:<scope key>      STRING the scope's version counter, INCR'd by every write that
                                  inserts, replaces or deletes one of its memories
P:lock:<name>              STRING a lock's token (see `adk_memory_redis.lock`)
{P:B}:lock:<kind>:B[:…]    STRING the same, on a cluster, for the engine's locks of bank B (in
                                  the bank's slot, so its writes can check them as fences)
```

Cluster: the index name carries the bank's hash tag too, so open-source RediSearch (one index
per shard) builds it on the shard that owns the bank's documents, and the client routes every
search of the bank there (`adapt_cluster_client`). The shared keys (`P:banks`, `P:garbage`,
`P:lock:*`) are each read and written alone, never in a command with another key, so no command
spans slots; SCAN and FT._LIST run on every primary. A bank indexed before this layout (index
`P:idx:B:E`) gets its new index built from its documents on first use, and the old one dropped.

`RedisMemoryStore` is the facade; each concern lives in a module of its own:

- `_connection`: the client, its checks and the query-engine check, raw commands;
- `_layout`: every key and index name (`StoreKeys`, `Bank`);
- `_index`: a bank's search index, its schema, creation, rebuild wait and drop;
- `_banks`: bank records, the registry, the cached layouts, the epoch-checked round trip
  (`with_bank`) and the removal of deleted epochs;
- `_writer`: `apply`'s WATCH/MULTI/EXEC, its checks, commit marker and cluster slot handling;
- `_search`: `nearest` and `scan`;
- `_revisions`: revision reads and the `rids` set;
- `_documents`: engine documents; `_due`: the due index;
- `_expiry`: native expiry and `sweep_expired` / `earliest_expiry`;
- `_codec`, `_query`, `_errors`, `_config`, `lock`: records, query text and replies, errors,
  configuration, locks.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Self

from adk_memory.errors import NotFound
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
    StoreCapabilities,
    WriteBatch,
    expiry_around,
    index_around,
)
from adk_memory_redis._banks import Banks
from adk_memory_redis._codec import (
    MEMORY_FIELDS,
    check_scope_key,
    decode_memory,
    operation_from_json,
    operation_to_json,
    text,
)
from adk_memory_redis._config import RedisClient, RedisStoreConfig, split_uri
from adk_memory_redis._connection import Connection
from adk_memory_redis._documents import Documents, encode_document
from adk_memory_redis._due import DueIndex
from adk_memory_redis._expiry import Expiry
from adk_memory_redis._index import SearchIndex
from adk_memory_redis._layout import Bank, StoreKeys
from adk_memory_redis._query import PUSHDOWN
from adk_memory_redis._revisions import Revisions
from adk_memory_redis._search import Search
from adk_memory_redis._writer import BatchWriter
from adk_memory_redis.lock import RedisLockProvider

__all__ = ["RedisMemoryStore"]

# KEYS: bank key, operation key. ARGV: epoch, JSON. 1 when written, 0 when the bank changed.
_PUT_OPERATION_SCRIPT = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""


class RedisMemoryStore(MemoryStore):
    """Memory banks in Redis: one RediSearch vector index per bank, native key expiry.

    Needs the query engine: Redis 8 or later, Redis Stack, or a server that loads RediSearch
    (a server without it fails the first call with `FailedPrecondition` saying so).

    Example:
        ```python
        store = RedisMemoryStore.from_uri("redis://:secret@localhost:6379/0?index_algorithm=FLAT")
        await store.create_bank(bank)
        hits = await store.nearest(bank.bank_id, NearestQuery(key, vector, k=3, now=now))
        await store.aclose()
        ```

    Args:
        url: `redis://…` or `rediss://…` without query parameters (see `from_uri`).
        config: Layout, index and connection settings.
        client: A `redis.asyncio.Redis` you built (with `decode_responses=False`); the store uses
            it and never closes it. Without one the store opens its own pool on first use.
    """

    capabilities: ClassVar[StoreCapabilities] = StoreCapabilities(
        pushdown=PUSHDOWN, native_ttl=True
    )

    def __init__(
        self,
        url: str | None = None,
        *,
        config: RedisStoreConfig | None = None,
        client: RedisClient | None = None,
    ) -> None:
        self.config = config or RedisStoreConfig()
        self._connection = Connection(url, self.config, client)
        self._keys = StoreKeys(self.config.key_prefix)
        self._index = SearchIndex(self.config, self._connection.where)
        self._due = DueIndex(self._connection, self._keys)
        self._banks = Banks(self._connection, self.config, self._keys, self._index, self._due)
        self._documents = Documents(self._connection, self._keys, self._banks, self._due)
        self._writer = BatchWriter(
            self._connection, self.config, self._keys, self._banks, self._index, self._documents
        )
        self._search = Search(self._connection, self.config, self._banks)
        self._revisions = Revisions(self._connection, self._banks)
        self._expiry = Expiry(self._connection, self.config, self._banks, self._index)
        self._locks: RedisLockProvider | None = None

    @classmethod
    def from_uri(cls, uri: str, **options: Any) -> Self:
        """Builds the store from `redis://[[user]:password@]host[:port][/db][?option=value…]`.

        Query parameters and keyword options are `RedisStoreConfig` fields (keywords win), plus
        the keyword `client` for a `redis.asyncio.Redis` you built. Nothing connects yet.
        """
        client = options.pop("client", None)
        url, config = split_uri(uri, options)
        return cls(url, config=config, client=client)

    def __repr__(self) -> str:
        return (
            f"RedisMemoryStore({self._connection.where!r}, key_prefix={self.config.key_prefix!r})"
        )

    async def aclose(self) -> None:
        """Closes the connection pools the store opened (never a client passed in)."""
        self._locks = None
        await self._writer.aclose()
        await self._connection.aclose()

    # Banks

    async def create_bank(self, bank: BankRecord) -> None:
        """Creates the bank and its search index; `AlreadyExists` if its id is taken."""
        await self._banks.create(bank)

    async def get_bank(self, bank_id: str) -> BankRecord | None:
        """The bank, or None."""
        return await self._banks.record(bank_id)

    async def list_banks(self) -> list[BankRecord]:
        """Every bank, ordered by `create_time` then id."""
        return await self._banks.records()

    async def update_bank(self, bank: BankRecord) -> None:
        """Replaces the bank record; a new embedding dimension rebuilds the (empty) index."""
        await self._banks.update(bank)

    async def delete_bank(self, bank_id: str) -> None:
        """Deletes the bank with all its memories, revisions, vectors and operations."""
        await self._banks.delete(bank_id)

    async def drop_all(self) -> None:
        """Deletes every bank, index and key under this store's prefix (tests, resets)."""
        await self._banks.drop_all()

    # Memories

    async def apply(self, bank_id: str, batch: WriteBatch) -> None:
        """Applies the whole batch in one MULTI/EXEC, or raises and changes nothing.

        The transaction also writes a short-lived marker key. When the connection drops while
        the transaction is in flight, the marker tells whether Redis committed it (then the call
        succeeds) or discarded it (then it raises `StoreUnavailable`, and nothing was written).
        The bank's expiry entry is lowered in the transaction. On a cluster, where the due sets
        live in other slots, the due entries of its documents are lowered before it and set
        after it, and the expiry entry is lowered before and after it (`expiry_around`).
        """
        on_cluster = self._connection.on_cluster()
        write = functools.partial(
            self._writer.apply, bank_id, batch, lower_expiry=not on_cluster, locks=self._locks
        )
        indexed = functools.partial(self._index_apart, bank_id, batch.documents, write)
        if on_cluster:
            await expiry_around(self, bank_id, batch, indexed)
        else:
            await indexed()

    async def get_memories(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> list[MemoryRecord]:
        """The live memories among `memory_ids`, with embeddings, in the order asked."""
        fields = [*MEMORY_FIELDS, "embedding"]

        def queue(pipe: Any, bank: Bank) -> None:
            for memory_id in memory_ids:
                pipe.hmget(bank.memory(memory_id), fields)

        async with self._connection.call("read memories") as client:
            bank, replies = await self._banks.with_bank(client, bank_id, queue)
        found: list[MemoryRecord] = []
        for doc, fact, embedding in replies:
            if doc is None:
                continue
            record = decode_memory(doc, fact, embedding=embedding, dtype=bank.dtype)
            if record.is_live(now):
                found.append(record)
        return found

    async def nearest(self, bank_id: str, query: NearestQuery) -> list[ScoredRecord]:
        """Up to `query.k` live memories of one scope by true L2 distance, ties by memory id."""
        return await self._search.nearest(bank_id, query)

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> str:
        """The bank's epoch and the scope's write counter, read in one round trip."""
        key = check_scope_key(scope_key)
        async with self._connection.call("read a scope version") as client:
            bank, replies = await self._banks.with_bank(
                client, bank_id, lambda pipe, bank: pipe.get(bank.scope_version(key))
            )
        return f"{bank.epoch}:{text(replies[0] or b'0')}"

    async def scan(self, bank_id: str, query: ScanQuery) -> list[MemoryRecord]:
        """Live memories matching the query in its order, after its cursor, up to its limit."""
        return await self._search.scan(bank_id, query)

    # Revisions

    async def list_revisions(
        self, bank_id: str, memory_id: str, now: datetime
    ) -> list[RevisionRecord]:
        """Live revisions of a memory (deleted or not), newest first."""
        return (await self.list_revisions_many(bank_id, [memory_id], now))[memory_id]

    async def list_revisions_many(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> dict[str, list[RevisionRecord]]:
        """`list_revisions` of each id, in two pipelined round trips whatever their number."""
        return await self._revisions.list_many(bank_id, memory_ids, now)

    async def get_revision(
        self, bank_id: str, memory_id: str, revision_id: str, now: datetime
    ) -> RevisionRecord | None:
        """One live revision, or None."""
        return await self._revisions.get(bank_id, memory_id, revision_id, now)

    async def list_revision_memory_ids(
        self, bank_id: str, now: datetime, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """One page of the ids of memories with live revisions, ascending."""
        return await self._revisions.memory_ids(bank_id, now, after=after, limit=limit)

    # Operations

    async def put_operation(self, operation: OperationRecord) -> None:
        """Creates or replaces an operation."""
        bank_key = self._keys.bank(operation.bank_id)
        async with self._connection.call("store an operation") as client:
            for _attempt in range(3):
                bank = await self._banks.get(client, operation.bank_id)
                written = await client.eval(
                    _PUT_OPERATION_SCRIPT,
                    2,
                    bank_key,
                    bank.operation(operation.operation_path),
                    bank.epoch,
                    operation_to_json(operation),
                )
                if written:
                    return
                self._banks.forget(operation.bank_id)
        raise NotFound(f"Memory bank {operation.bank_id!r} does not exist.")

    async def get_operation(self, bank_id: str, operation_path: str) -> OperationRecord | None:
        """The operation, or None."""
        async with self._connection.call("read an operation") as client:
            try:
                _bank, replies = await self._banks.with_bank(
                    client, bank_id, lambda pipe, bank: pipe.get(bank.operation(operation_path))
                )
            except NotFound:
                return None
        return None if replies[0] is None else operation_from_json(replies[0])

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
        """Creates or replaces one document atomically (with its due entry on one server)."""
        document = DocumentRecord(kind, key, body, scope_key=scope_key, due=due)
        encoded = encode_document(kind, key, body)
        write = functools.partial(self._documents.put, bank_id, document, encoded)
        await self._index_apart(bank_id, [document], write)

    async def _index_apart(
        self,
        bank_id: str,
        documents: Sequence[DocumentRecord],
        write: Callable[[], Awaitable[object]],
    ) -> None:
        """Runs `write`; on a cluster, whose due sets live in other slots, inside `index_around`."""
        if documents and self._connection.on_cluster():
            await index_around(self, bank_id, documents, write)
        else:
            await write()

    async def get_document(self, bank_id: str, kind: str, key: str) -> Mapping[str, Any] | None:
        """The document, or None."""
        return await self._documents.get(bank_id, kind, key)

    async def list_documents(
        self, bank_id: str, kind: str, *, scope_key: ScopeKey | None = None
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """Every (key, body) of one kind in the bank (of one scope when given), ordered by key."""
        return await self._documents.of_kind(bank_id, kind, scope_key)

    async def delete_document(self, bank_id: str, kind: str, key: str) -> None:
        """Deletes one document if it exists, with its due entry."""
        await self._documents.delete(bank_id, kind, key)

    async def due_documents(
        self, kind: str, now: datetime, *, limit: int = 1000
    ) -> list[DueDocument]:
        """Due entries of one kind up to `now`, earliest first: one ZRANGEBYSCORE."""
        return await self._due.documents(kind, now, limit=limit)

    async def set_due(
        self,
        bank_id: str,
        kind: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool = False,
    ) -> None:
        """Sets (`ZADD`/`ZREM`) or lowers (`ZADD LT`) due entries, in one round trip."""
        await self._due.set(bank_id, kind, dues, only_earlier=only_earlier)

    # Coordination

    def lock_provider(self) -> RedisLockProvider:
        """Redis locks on this store's server and prefix, sharing its connection pool."""
        if self._locks is None:
            self._locks = RedisLockProvider(
                client=self._connection.client(), key_prefix=self.config.key_prefix
            )
        return self._locks

    # Maintenance

    async def sweep_expired(self, bank_id: str, now: datetime) -> int:
        """Deletes memories and revisions expired at `now` that Redis has not evicted yet."""
        return await self._expiry.sweep(bank_id, now)

    async def earliest_expiry(self, bank_id: str) -> datetime | None:
        """The earliest `live_until` of the bank's memories and revisions, in one round trip."""
        return await self._expiry.earliest(bank_id)
