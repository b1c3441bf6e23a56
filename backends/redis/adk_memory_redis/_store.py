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

Deleting a bank removes its `{P:B}:bank` key in one command, which makes the whole epoch
unreachable at once; its keys are then removed (and, after a crash, by the next `delete_bank`).
A bank re-created with the same id gets a new epoch and so starts empty, whatever was left.

Writes: `apply` WATCHes the bank key, the memory keys it inserts and the revision sets it
extends, checks (bank exists, inserted ids are free) and then queues every write in one
MULTI/EXEC. Redis runs a transaction whole or not at all: a connection lost before EXEC discards
it, so a memory and its revision (and the batch's documents, in their kinds' hashes) are all
written or all absent.

The due index (`P:due:<kind>`) is one store-wide key, so a scheduler's tick is one ZRANGEBYSCORE
whatever the number of banks. On one server a document's entry is written in the same script or
MULTI/EXEC as the document. On a cluster it lives in another slot: a write first lowers it
(`ZADD LT`, so a crash after the document leaves it early, never late), then writes the document,
then sets it exactly. `delete_bank` removes the bank's entries (ZSCAN); any left by a crash
point at a bank or document that no longer exists, and the engine removes them when it finds one.

Expiry: a memory's `live_until` (µs) is in every query (`@live_until:[(now +inf]`) and in every
read, so an expired memory is never returned; its key also gets PEXPIREAT so Redis reclaims it.
Native expiry is set only for an expire time still ahead of this host's clock (a record written
already expired, which only a simulated clock produces, is reclaimed by `sweep_expired`). The two
revision expiry sets let `sweep_expired` find every expired revision for any `now`; the one of
natively evicted revisions is trimmed by the host clock on every write, so it stays bounded
even if nobody ever sweeps. An id stays in `rids` until a sweep or a listing finds its revision
set gone (emptied by a sweep, or evicted by Redis) and removes it in one script, so a concurrent
write that re-creates the set is never undone.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import math
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Self, cast

import numpy as np
import redis.asyncio as aredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster
from redis.commands.search.index_definition import IndexDefinition, IndexType
from redis.crc import key_slot
from redis.utils import DEFAULT_RESP_VERSION
from redisvl.schema import IndexSchema

from adk_memory.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StoreUnavailable,
)
from adk_memory.filters import FilterExpr
from adk_memory.locks import lease_lapsed
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
    ScanCursor,
    ScanQuery,
    ScoredRecord,
    SortKey,
    StoreCapabilities,
    WriteBatch,
    batch_expiry,
    check_cursor,
    check_dimensions,
    check_expectations,
    cursor_key,
    expiry_around,
    index_around,
)
from adk_memory_redis._codec import (
    LIVE_FOREVER,
    MEMORY_FIELDS,
    bank_from_json,
    bank_to_json,
    check_scope_key,
    decode_memory,
    decode_revision,
    encode_memory,
    encode_revision,
    from_us,
    operation_from_json,
    operation_to_json,
    to_us,
)
from adk_memory_redis._config import (
    RedisClient,
    RedisStoreConfig,
    adapt_cluster_client,
    connect,
    connection_kwargs,
    describe,
    split_uri,
)
from adk_memory_redis._errors import NO_SEARCH_MODULE, is_missing_index, redis_errors
from adk_memory_redis._query import FALSE, PUSHDOWN, compile_filter, parse_aggregate, parse_search
from adk_memory_redis.lock import RedisLock, RedisLockProvider

logger = logging.getLogger(__name__)

__all__ = ["RedisMemoryStore"]

_BANK_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}")
_SORT_FIELDS = {"create_time": "create_us", "update_time": "update_us"}
_SCAN_CHUNK = 1000
_SPELLABLE_ID = re.compile(r"[^\\\x00-\x1f\x7f]+")
"""Ids a quoted RediSearch expression string holds exactly (its escapes garble backslashes)."""
_SWEEP_CHUNK = 500
_MARKER_TTL_MS = 300_000
"""How long the commit marker of a write outlives it (to settle a lost connection)."""
_TIE_SLACK = 8
"""Extra candidates fetched beyond k so that ties at the k-th place can be seen."""
_INDEXING_WAIT_SECONDS = 120.0
"""How long a call waits for a rebuilt index to take in the bank's stored memories."""
_SLOT_MOVED = (
    redis.exceptions.MovedError,
    redis.exceptions.AskError,
    redis.exceptions.TryAgainError,
)
"""A cluster's answer to a transaction sent to a primary that no longer owns the bank's slot."""

# KEYS: bank key, inserted memory keys..., expected memory keys..., revision sets..., fencing
# lock keys..., written memory keys... ARGV: the number of inserted keys, of expected keys, of
# revision sets, of written keys. Returns the epoch, each inserted key's live_until (false when
# absent), each expected key's live_until and update_us, each revision set's absolute expiry in
# ms (-1 persistent, -2 absent), each lock's token and each written key's scope key (false when
# absent).
_CHECK_SCRIPT = """
local n, e, r, w = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local out = {redis.call('HGET', KEYS[1], 'epoch')}
for i = 2, n + 1 do out[#out + 1] = redis.call('HGET', KEYS[i], 'live_until') end
for i = n + 2, n + e + 1 do
  local found = redis.call('HMGET', KEYS[i], 'live_until', 'update_us')
  out[#out + 1] = found[1]
  out[#out + 1] = found[2]
end
for i = n + e + 2, n + e + r + 1 do out[#out + 1] = redis.call('PEXPIRETIME', KEYS[i]) end
for i = n + e + r + 2, #KEYS - w do out[#out + 1] = redis.call('GET', KEYS[i]) end
for i = #KEYS - w + 1, #KEYS do out[#out + 1] = redis.call('HGET', KEYS[i], 'scope_key') end
return out
"""

# KEYS: bank key. ARGV: record, epoch, dim, algorithm, dtype. 1 when created, 0 when taken.
# Idempotent: a retry after a lost reply finds its own epoch and reports success.
_CREATE_BANK_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 1 then
  if redis.call('HGET', KEYS[1], 'epoch') == ARGV[2] then return 1 end
  return 0
end
redis.call('HSET', KEYS[1], 'record', ARGV[1], 'epoch', ARGV[2], 'dim', ARGV[3],
           'algorithm', ARGV[4], 'dtype', ARGV[5])
return 1
"""

# KEYS: bank key. ARGV: record, dim. The previous dim, or false when the bank does not exist.
_UPDATE_BANK_SCRIPT = """
local dim = redis.call('HGET', KEYS[1], 'dim')
if not dim then return false end
redis.call('HSET', KEYS[1], 'record', ARGV[1], 'dim', ARGV[2])
return dim
"""

# KEYS: bank key. ARGV: epoch. Deletes the bank only if it still has that epoch.
_DELETE_BANK_SCRIPT = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS: bank key, operation key. ARGV: epoch, JSON. 1 when written, 0 when the bank changed.
_PUT_OPERATION_SCRIPT = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""

# KEYS: bank key, document hash. ARGV: epoch, key, JSON. 1 when written, 0 when the bank changed.
_PUT_DOCUMENT_SCRIPT = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return 1
"""

# KEYS: bank key, document hash, scope-tag hash, scope set, and the due set when it shares the
# bank's slot. ARGV: epoch, key, JSON, scope key ('' for none), due µs ('' for none), due member.
# 1 when written, 0 when the bank changed.
_WRITE_DOCUMENT_SCRIPT = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return 0 end
local key = ARGV[2]
redis.call('HSET', KEYS[2], key, ARGV[3])
local old = redis.call('HGET', KEYS[3], key)
if old then redis.call('ZREM', KEYS[4], old .. '\\31' .. key) end
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[3], key)
else
  redis.call('HSET', KEYS[3], key, ARGV[4])
  redis.call('ZADD', KEYS[4], 0, ARGV[4] .. '\\31' .. key)
end
if KEYS[5] then
  if ARGV[5] == '' then redis.call('ZREM', KEYS[5], ARGV[6])
  else redis.call('ZADD', KEYS[5], ARGV[5], ARGV[6]) end
end
return 1
"""

# KEYS: document hash, scope-tag hash, scope set, and the due set when it shares the bank's
# slot. ARGV: key, due member.
_DELETE_DOCUMENT_SCRIPT = """
redis.call('HDEL', KEYS[1], ARGV[1])
local old = redis.call('HGET', KEYS[2], ARGV[1])
if old then
  redis.call('ZREM', KEYS[3], old .. '\\31' .. ARGV[1])
  redis.call('HDEL', KEYS[2], ARGV[1])
end
if KEYS[4] then redis.call('ZREM', KEYS[4], ARGV[2]) end
return 1
"""

# KEYS: scope set, document hash. ARGV: ZRANGEBYLEX min and max, length of "<scope key>\x1f".
# Returns key, JSON, key, JSON, ... of the scope's documents.
_SCOPED_DOCUMENTS_SCRIPT = """
local out = {}
for _, member in ipairs(redis.call('ZRANGEBYLEX', KEYS[1], ARGV[1], ARGV[2])) do
  local key = string.sub(member, tonumber(ARGV[3]) + 1)
  local body = redis.call('HGET', KEYS[2], key)
  if body then
    out[#out + 1] = key
    out[#out + 1] = body
  end
end
return out
"""

# KEYS: the revision-ids set, then revision sets. ARGV: their memory ids. Forgets the ids whose
# revision set no longer exists, atomically (a write re-creating a set also re-adds its id).
_FORGET_REVISION_IDS_SCRIPT = """
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then redis.call('ZREM', KEYS[1], ARGV[i - 1]) end
end
return 0
"""

# KEYS: memory keys, then the version key of each one's scope. ARGV: now (µs), then each one's
# scope key. Deletes those whose live_until <= now and that are still in that scope (a memory
# moved meanwhile is left to the next sweep), INCRs their scopes' versions; returns the count.
_SWEEP_MEMORIES_SCRIPT = """
local now, removed, half = tonumber(ARGV[1]), 0, #KEYS / 2
for i = 1, half do
  local found = redis.call('HMGET', KEYS[i], 'live_until', 'scope_key')
  local live = found[1]
  if live and live ~= 'inf' and tonumber(live) <= now and found[2] == ARGV[i + 1] then
    redis.call('DEL', KEYS[i])
    redis.call('INCR', KEYS[half + i])
    removed = removed + 1
  end
end
return removed
"""

# KEYS: an expiry set, then (revision key, revision set) pairs. ARGV: now, then (member,
# revision id) pairs. Deletes expired revisions, forgets gone ones and entries left stale by a
# rewrite, so every member leaves the expiry set. Returns how many revisions it deleted.
_SWEEP_REVISIONS_SCRIPT = """
local now, removed = tonumber(ARGV[1]), 0
for i = 2, #KEYS, 2 do
  local member, rev = ARGV[i], ARGV[i + 1]
  local live = redis.call('HGET', KEYS[i], 'live_until')
  redis.call('ZREM', KEYS[1], member)
  if not live then
    redis.call('ZREM', KEYS[i + 1], rev)
  elseif live ~= 'inf' and tonumber(live) <= now then
    redis.call('DEL', KEYS[i])
    redis.call('ZREM', KEYS[i + 1], rev)
    removed = removed + 1
  end
end
return removed
"""


@dataclass(frozen=True, slots=True)
class _Bank:
    """Where one epoch of a bank lives and how its index is built."""

    prefix: str
    bank_id: str
    epoch: str
    dim: int
    algorithm: str
    dtype: str

    @property
    def base(self) -> str:
        return f"{{{self.prefix}:{self.bank_id}}}:{self.epoch}:"

    @property
    def index_name(self) -> str:
        return f"{self.base}idx"

    @property
    def legacy_index_name(self) -> str:
        """The index name before it carried the hash tag (dropped once the new one exists)."""
        return f"{self.prefix}:idx:{self.bank_id}:{self.epoch}"

    def memory(self, memory_id: str) -> str:
        return f"{self.base}m:{memory_id}"

    def revision(self, memory_id: str, revision_id: str) -> str:
        return f"{self.base}r:{memory_id}:{revision_id}"

    def revision_set(self, memory_id: str) -> str:
        return f"{self.base}rz:{memory_id}"

    @property
    def revision_ids(self) -> str:
        return f"{self.base}rids"

    @property
    def revision_expiry(self) -> str:
        return f"{self.base}rexp"

    @property
    def revision_expiry_native(self) -> str:
        return f"{self.base}rexpn"

    def operation(self, path: str) -> str:
        return f"{self.base}op:{path}"

    def documents(self, kind: str) -> str:
        return f"{self.base}doc:{kind}"

    def document_scopes(self, kind: str) -> str:
        return f"{self.base}dsk:{kind}"

    def scoped_documents(self, kind: str) -> str:
        return f"{self.base}dsc:{kind}"

    def scope_version(self, scope_key: str) -> str:
        return f"{self.base}v:{scope_key}"


def _after_expression(order_by: Sequence[SortKey], after: ScanCursor, *, exact: bool) -> str:
    """A FILTER expression for rows sorting after the cursor.

    Strictly after it when `exact` (keys, then id); else after or tied with its sort values, and
    the caller compares the id.
    """
    expression = f"@memory_id > '{_quoted(after.memory_id)}'" if exact else "1"
    for key, value in reversed(list(zip(order_by, after.values, strict=True))):
        name, micros = f"@{_SORT_FIELDS[key.field]}", to_us(value)
        beyond = "<" if key.descending else ">"
        expression = f"({name} {beyond} {micros} || ({name} == {micros} && {expression}))"
    return expression


def _quoted(memory_id: str) -> str:
    return memory_id.replace("'", "\\'")


def _row_cursor(row: Mapping[str, Any], query: ScanQuery) -> ScanCursor:
    """The cursor just after an aggregate row (its sort values come from the index)."""
    values = tuple(from_us(int(_text(row[_SORT_FIELDS[key.field]]))) for key in query.order_by)
    return ScanCursor(values, _text(row["memory_id"]))


def _speaks_resp3(client: RedisClient) -> bool:
    protocol = connection_kwargs(client).get("protocol")
    return int(protocol or DEFAULT_RESP_VERSION) == 3


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _live_at(live_until: Any, now_us: int) -> bool:
    """Whether a stored `live_until` (µs, or `inf`; None for an evicted key) is after `now`."""
    if live_until is None:
        return False
    return _text(live_until) == LIVE_FOREVER or int(live_until) > now_us


async def _command(client: RedisClient, *args: Any) -> Any:
    """A raw command (redis-py leaves `execute_command` unannotated)."""
    command: Callable[..., Any] = client.execute_command
    return await command(*args)


def _connection_lost(exc: redis.exceptions.WatchError) -> bool:
    """Whether redis-py raised WatchError because the connection died (not a collision)."""
    cause = exc.__cause__ or exc.__context__
    lost = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
    return isinstance(cause, lost) or "occurred while watching" in str(exc)


async def _forget_revision_ids(client: RedisClient, bank: _Bank, memory_ids: Sequence[str]) -> None:
    """Drops from the bank's `rids` those of `memory_ids` whose revision set is gone."""
    if memory_ids:
        keys = [bank.revision_ids, *(bank.revision_set(i) for i in memory_ids)]
        await client.eval(_FORGET_REVISION_IDS_SCRIPT, len(keys), *keys, *memory_ids)


def _live_newest_first(raws: Sequence[Any], now: datetime) -> list[RevisionRecord]:
    """The revisions live at `now` among stored `data` fields (None: evicted), newest first."""
    revisions = [decode_revision(raw) for raw in raws if raw is not None]
    live = [revision for revision in revisions if revision.is_live(now)]
    return sorted(live, key=lambda rev: (rev.create_time, rev.revision_id), reverse=True)


def _encode_document(kind: str, key: str, body: Mapping[str, Any]) -> str:
    """A document's JSON as stored in its kind's hash; `InvalidArgument` if not serialisable."""
    try:
        return json.dumps(dict(body))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"Document {kind}/{key[:40]} is not JSON-serialisable.") from exc


def _due_member(bank_id: str, key: str) -> str:
    """A document's member in its kind's due set (bank ids hold no separator)."""
    return f"{bank_id}\x1f{key}"


def _due_document(member: str, score: float) -> DueDocument:
    bank_id, key = member.split("\x1f", 1)
    return DueDocument(bank_id, key, from_us(int(score)))


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _native_expiry_ms(expire_us: int | None) -> int | None:
    """The PEXPIREAT time for an expiry, or None when Redis should not expire the key."""
    if expire_us is None:
        return None
    expire_ms = -(-expire_us // 1000)  # round up: never evict before the expiry instant
    return expire_ms if expire_ms > _now_ms() else None


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
        if url is None and client is None:
            raise InvalidArgument("RedisMemoryStore needs a redis:// URL or a client.")
        if client is not None:
            if not isinstance(client, aredis.Redis | RedisCluster):
                raise InvalidArgument(
                    "RedisMemoryStore takes a redis.asyncio.Redis or redis.asyncio.RedisCluster "
                    f"client (not a sync one); got {type(client).__name__}."
                )
            if connection_kwargs(client).get("decode_responses"):
                raise InvalidArgument(
                    "The Redis client decodes responses, which would corrupt stored vectors; "
                    "build it with decode_responses=False."
                )
            if isinstance(client, RedisCluster):
                adapt_cluster_client(client)
        self.config = config or RedisStoreConfig()
        if client is not None and self.config.query_timeout_ms and not _speaks_resp3(client):
            raise InvalidArgument(
                "query_timeout_ms needs a client speaking RESP3 (redis.asyncio.Redis(..., "
                "protocol=3)): over RESP2 RediSearch returns a timed-out search's partial result "
                "without saying so. Pass a RESP3 client or leave query_timeout_ms at 0.",
                field="uri.query_timeout_ms",
            )
        self._url = url
        self._client = client
        self._owns_client = client is None
        self._banks: dict[str, _Bank] = {}
        self._indexes: set[str] = set()
        self._search_checked = False
        self._locks: RedisLockProvider | None = None
        self._writers: dict[str, aredis.Redis] = {}
        self._scope_sizes: dict[tuple[str, str], tuple[int, float]] = {}
        self._where = describe(url, client)

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
        return f"RedisMemoryStore({self._where!r}, key_prefix={self.config.key_prefix!r})"

    # Connection

    def _redis(self) -> RedisClient:
        """The client, created (without connecting) on first use."""
        if self._client is None:
            assert self._url is not None
            self._client = connect(self._url, self.config)
        return self._client

    def _on_cluster(self) -> bool:
        """Whether the store talks to a Redis Cluster (whose keys live in many slots)."""
        return isinstance(self._redis(), RedisCluster)

    async def _ready(self, action: str) -> RedisClient:
        """The client, once the query engine is checked.

        On a cluster, every primary that answers is checked (one that is down fails the calls on
        its own banks only). A one-server client is also checked not to point at a cluster node.
        """
        client = self._redis()
        if not self._search_checked:
            with redis_errors(self._where, action):
                if not isinstance(client, RedisCluster):
                    await self._refuse_cluster_node(client)
                try:
                    await self._list_indexes(client, reachable_only=True)
                except redis.exceptions.ResponseError as exc:
                    if "unknown command" in str(exc).lower():
                        raise FailedPrecondition(
                            NO_SEARCH_MODULE.format(where=self._where)
                        ) from exc
                    raise
            self._search_checked = True
        return client

    async def _refuse_cluster_node(self, client: aredis.Redis) -> None:
        """`FailedPrecondition` when a one-server client reaches a node of a Redis Cluster."""
        info = await client.info("cluster")
        if str(info.get("cluster_enabled", "0")) == "1":
            raise FailedPrecondition(
                f"Redis at {self._where} is a node of a Redis Cluster, which a redis:// URI "
                "cannot use (the bank's keys may live on other nodes). Use "
                "redis+cluster://host:port[,host:port…] (or rediss+cluster:// for TLS)."
            )

    @staticmethod
    async def _list_indexes(client: RedisClient, *, reachable_only: bool = False) -> list[str]:
        """The names of the search indexes, of every primary of a cluster.

        With `reachable_only`, primaries that cannot be reached are left out, as long as one
        answers.
        """
        if not isinstance(client, RedisCluster):
            return [_text(name) for name in await _command(client, "FT._LIST")]
        await client.initialize()
        primaries = client.get_primaries()
        names: set[str] = set()
        unreachable: list[Exception] = []
        for node in primaries:
            try:
                names.update(_text(name) for name in await node.execute_command("FT._LIST"))
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                unreachable.append(exc)
        if unreachable and (not reachable_only or len(unreachable) == len(primaries)):
            raise unreachable[0]
        return sorted(names)

    @asynccontextmanager
    async def _call(self, action: str) -> AsyncIterator[RedisClient]:
        client = await self._ready(action)
        with redis_errors(self._where, action):
            yield client

    async def aclose(self) -> None:
        """Closes the connection pool the store opened (never a client passed in)."""
        self._locks = None
        writers, self._writers = list(self._writers.values()), {}
        for writer in writers:
            with redis_errors(self._where, "close the connection pool"):
                await writer.aclose()
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            with redis_errors(self._where, "close the connection pool"):
                await client.aclose()

    # Keys and banks

    @property
    def _registry(self) -> str:
        return f"{self.config.key_prefix}:banks"

    @property
    def _garbage(self) -> str:
        return f"{self.config.key_prefix}:garbage"

    def _bank_key(self, bank_id: str) -> str:
        if not isinstance(bank_id, str) or not _BANK_ID.fullmatch(bank_id):
            raise InvalidArgument(
                f"Bank id {str(bank_id)[:40]!r} is not valid; use letters, digits, '-', '_' "
                "and '.' (at most 128).",
                field="bank_id",
            )
        return f"{{{self.config.key_prefix}:{bank_id}}}:bank"

    async def _load_bank(self, client: RedisClient, bank_id: str) -> _Bank | None:
        raw = await client.hmget(self._bank_key(bank_id), ["epoch", "dim", "algorithm", "dtype"])
        if raw[0] is None:
            self._banks.pop(bank_id, None)
            return None
        bank = _Bank(
            prefix=self.config.key_prefix,
            bank_id=bank_id,
            epoch=_text(raw[0]),
            dim=int(cast(bytes, raw[1])),
            algorithm=_text(raw[2]),
            dtype=_text(raw[3]),
        )
        self._banks[bank_id] = bank
        return bank

    async def _bank(self, client: RedisClient, bank_id: str) -> _Bank:
        """The bank's layout (cached; callers re-check the epoch with each read or write)."""
        bank = self._banks.get(bank_id)
        if bank is None:
            bank = await self._load_bank(client, bank_id)
        if bank is None:
            raise NotFound(f"Memory bank {bank_id!r} does not exist.")
        return bank

    def _schema(self, bank: _Bank) -> IndexSchema:
        vector_attrs: dict[str, Any] = {
            "algorithm": bank.algorithm.lower(),
            "dims": bank.dim,
            "distance_metric": "l2",
            "datatype": bank.dtype,
        }
        if bank.algorithm == "HNSW":
            vector_attrs.update(
                m=self.config.hnsw_m,
                ef_construction=self.config.hnsw_ef_construction,
                ef_runtime=self.config.hnsw_ef_runtime,
            )
        tag = {"case_sensitive": True}
        fields: list[dict[str, Any]] = [
            {"name": "memory_id", "type": "tag", "attrs": {**tag, "sortable": True}},
            {"name": "scope_key", "type": "tag", "attrs": tag},
            {"name": "scope_tags", "type": "tag", "attrs": tag},
            {"name": "fact_tag", "type": "tag", "attrs": tag},
            {"name": "topic_tags", "type": "tag", "attrs": tag},
            {"name": "meta_tags", "type": "tag", "attrs": tag},
            {"name": "create_us", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "update_us", "type": "numeric", "attrs": {"sortable": True}},
            {"name": "live_until", "type": "numeric"},
            {"name": "expire_us", "type": "numeric"},
            {"name": "embedding", "type": "vector", "attrs": vector_attrs},
        ]
        if self.config.full_text:
            fields.append({"name": "fact", "type": "text", "attrs": {"no_stem": True}})
        return IndexSchema.from_dict(
            {
                "index": {
                    "name": bank.index_name,
                    "prefix": f"{bank.base}m:",
                    "storage_type": "hash",
                },
                "fields": fields,
            }
        )

    async def _ensure_index(self, client: RedisClient, bank: _Bank, *, known: bool = True) -> None:
        if known and bank.index_name in self._indexes:
            return
        # redis-py's create_index, not redisvl's create: on a cluster redisvl sends FT.CREATE to
        # a default node, while the client routes it to the index name's slot owner.
        definition = IndexDefinition(  # type: ignore[no-untyped-call]
            prefix=[f"{bank.base}m:"], index_type=IndexType.HASH
        )
        try:
            await client.ft(bank.index_name).create_index(
                self._schema(bank).redis_fields, definition=definition
            )
        except redis.exceptions.ResponseError as exc:
            if "already exists" not in str(exc).lower():
                raise
        else:
            await self._wait_until_indexed(client, bank.index_name)
            await self._drop_index(client, bank.legacy_index_name, documents=False)
        self._indexes.add(bank.index_name)

    async def _wait_until_indexed(self, client: RedisClient, name: str) -> None:
        """Waits while a new index takes in documents already stored under its prefix.

        An index is built afresh over existing documents when a bank's slot has moved to
        another shard (open-source RediSearch keeps one index per shard) or when a bank indexed
        under the old name is first used; until it has read them all it would answer partially.
        """
        deadline = time.monotonic() + _INDEXING_WAIT_SECONDS
        delay = 0.005
        while True:
            info = await client.ft(name).info()  # type: ignore[no-untyped-call]
            indexing = {_text(key): value for key, value in info.items()}.get("indexing", 0)
            if not float(_text(indexing)):  # RESP2 names the fields in str, RESP3 in bytes
                return
            if time.monotonic() > deadline:
                raise StoreUnavailable(
                    f"The search index of a memory bank on Redis at {self._where} is still being "
                    f"built after {_INDEXING_WAIT_SECONDS:g} s; retry the request later."
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)

    async def _drop_index(self, client: RedisClient, name: str, *, documents: bool) -> None:
        try:
            args = ["FT.DROPINDEX", name] + (["DD"] if documents else [])
            await _command(client, *args)
        except redis.exceptions.ResponseError as exc:
            if not is_missing_index(exc):
                raise
        self._indexes.discard(name)

    async def create_bank(self, bank: BankRecord) -> None:
        """Creates the bank and its search index; `AlreadyExists` if its id is taken."""
        key = self._bank_key(bank.bank_id)
        if bank.embedding_dimension < 1:
            raise InvalidArgument("A bank's embedding dimension must be positive.")
        async with self._call("create a memory bank") as client:
            layout = _Bank(
                prefix=self.config.key_prefix,
                bank_id=bank.bank_id,
                epoch=uuid.uuid4().hex[:12],
                dim=bank.embedding_dimension,
                algorithm=self.config.index_algorithm,
                dtype=self.config.vector_dtype,
            )
            await client.sadd(self._registry, bank.bank_id)
            created = await client.eval(
                _CREATE_BANK_SCRIPT,
                1,
                key,
                bank_to_json(bank),
                layout.epoch,
                layout.dim,
                layout.algorithm,
                layout.dtype,
            )
            if not created:
                raise AlreadyExists(f"Memory bank {bank.bank_id!r} already exists.")
            self._banks[bank.bank_id] = layout
            await self._ensure_index(client, layout, known=False)
        logger.debug("created bank %s (%s, dim %d)", bank.bank_id, layout.algorithm, layout.dim)

    async def get_bank(self, bank_id: str) -> BankRecord | None:
        """The bank, or None."""
        key = self._bank_key(bank_id)
        async with self._call("read a memory bank") as client:
            raw = await client.hget(key, "record")
        return None if raw is None else bank_from_json(raw)

    async def list_banks(self) -> list[BankRecord]:
        """Every bank, ordered by `create_time` then id."""
        async with self._call("list memory banks") as client:
            ids = sorted(_text(member) for member in await client.smembers(self._registry))
            async with client.pipeline(transaction=False) as pipe:
                for bank_id in ids:
                    pipe.hget(self._bank_key(bank_id), "record")
                raws = await pipe.execute()
        banks = [bank_from_json(raw) for raw in raws if raw is not None]
        return sorted(banks, key=lambda bank: (bank.create_time, bank.bank_id))

    async def update_bank(self, bank: BankRecord) -> None:
        """Replaces the bank record; a new embedding dimension rebuilds the (empty) index."""
        key = self._bank_key(bank.bank_id)
        async with self._call("update a memory bank") as client:
            before = await self._load_bank(client, bank.bank_id)
            previous = await client.eval(
                _UPDATE_BANK_SCRIPT, 1, key, bank_to_json(bank), bank.embedding_dimension
            )
            if previous is None or before is None:
                raise NotFound(f"Memory bank {bank.bank_id!r} does not exist.")
            if before.dim != bank.embedding_dimension:
                # Only an empty bank may change its embedding model (the engine checks), so
                # the index is rebuilt for the new dimension without re-indexing anything.
                await self._drop_index(client, before.index_name, documents=False)
                layout = await self._load_bank(client, bank.bank_id)
                if layout is not None:
                    await self._ensure_index(client, layout, known=False)

    async def delete_bank(self, bank_id: str) -> None:
        """Deletes the bank with all its memories, revisions, vectors and operations."""
        key = self._bank_key(bank_id)
        async with self._call("delete a memory bank") as client:
            bank = await self._load_bank(client, bank_id)
            if bank is not None:
                # Recorded first, so a crash below leaves the keys findable for the next sweep.
                await client.sadd(self._garbage, f"{bank_id}\x1f{bank.epoch}")
                await client.eval(_DELETE_BANK_SCRIPT, 1, key, bank.epoch)
                self._banks.pop(bank_id, None)
                await self._forget_due(client, bank_id)
            if not await client.exists(key):
                await client.srem(self._registry, bank_id)
            await self._collect_garbage(client)

    async def _collect_garbage(self, client: RedisClient) -> None:
        """Removes the keys of deleted bank epochs (idempotent; resumes after a crash)."""
        for member in await client.smembers(self._garbage):
            bank_id, epoch = _text(member).split("\x1f", 1)
            current = await client.hget(self._bank_key(bank_id), "epoch")
            if current is not None and _text(current) == epoch:
                # Still live: a delete is under way elsewhere, or crashed before it deleted the
                # bank key. Leave the entry for the delete that completes.
                continue
            layout = _Bank(self.config.key_prefix, bank_id, epoch, 1, "FLAT", "float32")
            try:
                await self._drop_index(client, layout.index_name, documents=True)
                await self._drop_index(client, layout.legacy_index_name, documents=False)
                await self._unlink_matching(client, f"{layout.base}*", slot_of=layout.base)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                # Its shard is unreachable (a cluster primary is down): the entry stays for the
                # next delete, and the delete that brought us here has completed all the same.
                logger.warning("keys of deleted bank %s unreachable; kept for later", bank_id)
                continue
            await client.srem(self._garbage, member)
            logger.debug("removed the keys of a deleted epoch of bank %s", bank_id)

    async def _unlink_matching(
        self, client: RedisClient, pattern: str, *, slot_of: str | None = None
    ) -> int:
        """Unlinks the keys matching `pattern`.

        When every match shares `slot_of`'s hash tag, a cluster scans only that slot's owner.
        """
        scan: dict[str, Any] = {}
        if isinstance(client, RedisCluster) and slot_of is not None:
            await client.initialize()
            scan["target_nodes"] = client.get_node_from_key(slot_of)
        removed = 0
        batch: list[bytes] = []
        async for key in client.scan_iter(match=pattern, count=1000, **scan):
            batch.append(key)
            if len(batch) >= 500:
                removed += await client.unlink(*batch)
                batch.clear()
        if batch:
            removed += await client.unlink(*batch)
        return removed

    async def drop_all(self) -> None:
        """Deletes every bank, index and key under this store's prefix (tests, resets)."""
        prefix = self.config.key_prefix
        async with self._call("drop all memory banks") as client:
            for name in await self._list_indexes(client):
                if name.startswith((f"{{{prefix}:", f"{prefix}:idx:")):
                    await self._drop_index(client, name, documents=True)
            await self._unlink_matching(client, f"{{{prefix}:*")
            await self._unlink_matching(client, f"{prefix}:lock:*")
            await self._unlink_matching(client, f"{prefix}:due:*")
            await client.unlink(self._registry, self._garbage)
        self._banks.clear()
        self._indexes.clear()

    # Memories

    async def _with_bank(
        self,
        client: RedisClient,
        bank_id: str,
        queue: Callable[[Any, _Bank], None],
    ) -> tuple[_Bank, list[Any]]:
        """Runs `queue`'s commands in one round trip with a check of the bank's epoch.

        Returns the layout and the replies of the queued commands. A stale cached epoch (the bank
        was deleted and re-created elsewhere) is refreshed and the commands are re-run; a missing
        index is created and the commands re-run.
        """
        for _attempt in range(3):
            bank = await self._bank(client, bank_id)
            async with client.pipeline(transaction=False) as pipe:
                pipe.hget(self._bank_key(bank_id), "epoch")
                queue(pipe, bank)
                replies = await pipe.execute(raise_on_error=False)
            epoch, rest = replies[0], replies[1:]
            if epoch is None or _text(epoch) != bank.epoch:
                self._banks.pop(bank_id, None)
                continue
            errors = [reply for reply in rest if isinstance(reply, Exception)]
            if errors and any(is_missing_index(error) for error in errors):
                await self._ensure_index(client, bank, known=False)
                continue
            if errors:
                raise errors[0]
            return bank, rest
        raise NotFound(f"Memory bank {bank_id!r} does not exist.")

    async def apply(self, bank_id: str, batch: WriteBatch) -> None:
        """Applies the whole batch in one MULTI/EXEC, or raises and changes nothing.

        The transaction also writes a short-lived marker key. When the connection drops while
        the transaction is in flight, the marker tells whether Redis committed it (then the call
        succeeds) or discarded it (then it raises `StoreUnavailable`, and nothing was written).
        The bank's expiry entry is lowered in the transaction. On a cluster, where the due sets
        live in other slots, the due entries of its documents are lowered before it and set
        after it, and the expiry entry is lowered before and after it (`expiry_around`).
        """
        on_cluster = self._on_cluster()
        write = functools.partial(self._apply_batch, bank_id, batch, lower_expiry=not on_cluster)
        indexed = functools.partial(self._index_apart, bank_id, batch.documents, write)
        if on_cluster:
            await expiry_around(self, bank_id, batch, indexed)
        else:
            await indexed()

    async def _apply_batch(self, bank_id: str, batch: WriteBatch, *, lower_expiry: bool) -> None:
        """The batch's transaction (`lower_expiry`: with the bank's expiry entry lowered)."""
        bank_key = self._bank_key(bank_id)
        async with self._call("apply a write batch") as client:
            for _attempt in range(self.config.write_retries):
                bank = await self._bank(client, bank_id)
                check_dimensions(batch, bank.dim)
                await self._ensure_index(client, bank)
                marker = f"{bank.base}tx:{uuid.uuid4().hex}"
                try:
                    writer = await self._writer(client, bank_key)
                    if await self._try_apply(writer, bank_key, bank, batch, marker, lower_expiry):
                        return
                except _SLOT_MOVED:
                    logger.debug("the slot of bank %s moved; reading the slot map again", bank_id)
                    await cast(RedisCluster, client).nodes_manager.initialize()
                    continue
                except redis.exceptions.WatchError as exc:
                    if not _connection_lost(exc):
                        logger.debug("write to bank %s collided with another; retrying", bank_id)
                        continue
                    await self._settle(client, marker, exc)
                    return
                except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                    await self._settle(client, marker, exc)
                    return
                self._banks.pop(bank_id, None)  # the epoch changed: reload and retry
            raise FailedPrecondition(
                f"Writes to memory bank {bank_id!r} kept colliding with concurrent writers, or "
                f"with its cluster slot being moved ({self.config.write_retries} attempts); "
                "retry the request."
            )

    def _in_slot_of(self, key: str, bank_key: str) -> bool:
        """Whether a transaction of the bank may include `key` (always, on one server)."""
        if not self._on_cluster():
            return True
        return key_slot(key.encode()) == key_slot(bank_key.encode())

    async def _writer(self, client: RedisClient, bank_key: str) -> aredis.Redis:
        """The client a bank's transaction runs on.

        The store's own client, or on a cluster a plain client of the primary that owns the
        bank's slot: redis-py's cluster transaction runs every queued command in a new thread and
        event loop, which made a write ten times as long. A slot that has moved since answers
        MOVED, and `apply` asks the cluster again.
        """
        if not isinstance(client, RedisCluster):
            return client
        await client.initialize()
        node = client.get_node_from_key(bank_key)
        if node is None:
            raise StoreUnavailable(
                f"No primary of the Redis Cluster at {self._where} serves the slot of this bank."
            )
        writer = self._writers.get(node.name)
        if writer is None:
            pool = aredis.ConnectionPool(
                connection_class=node.connection_class,
                max_connections=node.max_connections,
                **node.connection_kwargs,
            )
            writer = self._writers[node.name] = aredis.Redis(connection_pool=pool)
        return writer

    async def _settle(self, client: RedisClient, marker: str, exc: Exception) -> None:
        """Returns if the interrupted transaction committed; raises `StoreUnavailable` if not."""
        try:
            committed = bool(await client.exists(marker))
        except redis.exceptions.RedisError as check:
            raise StoreUnavailable(
                f"The connection to Redis at {self._where} was lost during a write and could not "
                "be re-established to check it; the write was applied entirely or not at all. "
                "Read the memory to find out, then retry if it is absent."
            ) from check
        if committed:
            logger.debug("connection lost after a write committed; the write stands")
            return
        raise StoreUnavailable(
            f"The connection to Redis at {self._where} was lost before the write committed; "
            "nothing was changed. Retry the request."
        ) from exc

    async def _try_apply(
        self,
        client: aredis.Redis,
        bank_key: str,
        bank: _Bank,
        batch: WriteBatch,
        marker: str,
        lower_expiry: bool,
    ) -> bool:
        """One optimistic attempt; False when the bank's epoch changed.

        Everything checked (bank epoch, free insert ids, expectations, the fencing lock's token)
        is WATCHed, so a change between the check and EXEC discards the transaction (and `apply`
        tries again, re-checking).
        """
        insert_keys = [bank.memory(record.memory_id) for record in batch.inserts]
        expect_keys = [bank.memory(expected.memory_id) for expected in batch.expect]
        by_memory: dict[str, list[RevisionRecord]] = {}
        for revision in batch.revisions:
            by_memory.setdefault(revision.memory_id, []).append(revision)
        set_keys = [bank.revision_set(memory_id) for memory_id in by_memory]
        # A lock of this store's provider is checked inside the transaction; another (on
        # another server, or not a Redis lock, or on a cluster outside the bank's slot) cannot
        # join it and is checked just before.
        fences = [
            lease
            for lease in batch.fences
            if isinstance(lease, RedisLock)
            and lease.provider is self._locks
            and self._in_slot_of(lease.key, bank_key)
        ]
        for lease in batch.fences:
            if lease not in fences:
                await lease.verify()
        fence_keys = [lease.key for lease in fences]
        written = [r.memory_id for r in (*batch.inserts, *batch.upserts)] + list(batch.deletes)
        written_keys = [bank.memory(memory_id) for memory_id in dict.fromkeys(written)]
        encoded = [
            (bank.memory(r.memory_id), encode_memory(r, dtype=bank.dtype), r.expire_time)
            for r in (*batch.inserts, *batch.upserts)
        ]
        documents = [
            self._document_script(bank, d, _encode_document(d.kind, d.key, d.body))
            for d in batch.documents
        ]
        operations = [
            (bank.operation(op.operation_path), operation_to_json(op)) for op in batch.operations
        ]
        keys = [bank_key, *insert_keys, *expect_keys, *set_keys, *fence_keys, *written_keys]
        async with client.pipeline(transaction=True) as transaction:
            pipe: Any = transaction  # redis-py leaves multi() and unwatch() unannotated
            await pipe.watch(*keys)
            state = await pipe.eval(
                _CHECK_SCRIPT,
                len(keys),
                *keys,
                len(insert_keys),
                len(expect_keys),
                len(set_keys),
                len(written_keys),
            )
            split = len(state) - len(written_keys)
            state, scopes_before = state[:split], state[split:]
            epoch = state[0]
            if epoch is None:
                await pipe.unwatch()
                raise NotFound(f"Memory bank {bank.bank_id!r} does not exist.")
            if _text(epoch) != bank.epoch:
                await pipe.unwatch()
                return False
            try:
                set_expiry = self._check(batch, state[1:], len(set_keys), fences)
            except (AlreadyExists, Aborted):
                await pipe.unwatch()
                raise
            pipe.multi()
            pipe.set(marker, b"1", px=_MARKER_TTL_MS)
            for key, fields, expire_time in encoded:
                pipe.delete(key)
                pipe.hset(key, mapping=fields)
                at = _native_expiry_ms(None if expire_time is None else to_us(expire_time))
                if at is not None:
                    pipe.pexpireat(key, at)
            for memory_id in batch.deletes:
                pipe.delete(bank.memory(memory_id))
            touched = [_text(key) for key in scopes_before if key is not None]
            touched += [r.scope_key for r in (*batch.inserts, *batch.upserts)]
            for scope_key in dict.fromkeys(touched):
                pipe.incr(bank.scope_version(scope_key))
            for memory_id, revisions in by_memory.items():
                self._queue_revisions(pipe, bank, memory_id, revisions, int(set_expiry[memory_id]))
            if by_memory:  # entries whose keys Redis has evicted by now
                pipe.zremrangebyscore(bank.revision_expiry_native, "-inf", _now_ms() * 1000)
            for document_keys, document_args in documents:
                pipe.eval(
                    _WRITE_DOCUMENT_SCRIPT, len(document_keys), *document_keys, *document_args
                )
            for operation_key, encoded_operation in operations:
                pipe.set(operation_key, encoded_operation)
            earliest = batch_expiry(batch)
            if earliest is not None and lower_expiry:
                member = _due_member(bank.bank_id, EXPIRY_KEY)
                pipe.zadd(self._due_key(EXPIRY_KIND), {member: to_us(earliest)}, lt=True)
            await pipe.execute()
        return True

    @staticmethod
    def _check(
        batch: WriteBatch, state: Sequence[Any], set_count: int, fences: Sequence[RedisLock]
    ) -> dict[str, Any]:
        """Checks the script's answer against the batch; returns each revision set's expiry."""
        inserted = len(batch.inserts)
        for record, live in zip(batch.inserts, state[:inserted], strict=True):
            if _live_at(live, to_us(record.create_time)):
                raise AlreadyExists(f"A memory with id {record.memory_id!r} already exists.")
        pairs = state[inserted : inserted + 2 * len(batch.expect)]
        found: dict[str, datetime | None] = {}
        for index, expected in enumerate(batch.expect):
            live, update_us = pairs[2 * index], pairs[2 * index + 1]
            alive = update_us is not None and _live_at(live, to_us(expected.now))
            found[expected.memory_id] = from_us(int(update_us)) if alive else None
        check_expectations(batch.expect, found)
        rest = state[inserted + len(pairs) :]
        for lease, token in zip(fences, rest[set_count:], strict=True):
            if token is None or _text(token) != lease.token:
                raise lease_lapsed(lease.name)
        by_memory = dict.fromkeys(revision.memory_id for revision in batch.revisions)
        return dict(zip(by_memory, rest[:set_count], strict=True))

    @staticmethod
    def _queue_revisions(
        pipe: Any, bank: _Bank, memory_id: str, revisions: list[RevisionRecord], set_expiry: int
    ) -> None:
        """Queues the revisions of one memory and keeps its revision set alive as long as them."""
        latest: int | None = 0
        for revision in revisions:
            key = bank.revision(memory_id, revision.revision_id)
            pipe.delete(key)
            pipe.hset(key, mapping=encode_revision(revision))
            pipe.zadd(
                bank.revision_set(memory_id), {revision.revision_id: to_us(revision.create_time)}
            )
            expire_us = None if revision.expire_time is None else to_us(revision.expire_time)
            at = _native_expiry_ms(expire_us)
            if at is not None:
                pipe.pexpireat(key, at)
            if expire_us is not None:
                member = f"{memory_id}\x1f{revision.revision_id}"
                expiry_set = bank.revision_expiry if at is None else bank.revision_expiry_native
                pipe.zadd(expiry_set, {member: expire_us})
            latest = None if at is None or latest is None else max(latest, at)
        pipe.zadd(bank.revision_ids, {memory_id: 0})
        zset = bank.revision_set(memory_id)
        if set_expiry == -1:  # an existing set without expiry keeps a revision that never expires
            return
        if latest is None:
            pipe.persist(zset)
        else:
            pipe.pexpireat(zset, max(latest, set_expiry))

    async def get_memories(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> list[MemoryRecord]:
        """The live memories among `memory_ids`, with embeddings, in the order asked."""
        fields = [*MEMORY_FIELDS, "embedding"]

        def queue(pipe: Any, bank: _Bank) -> None:
            for memory_id in memory_ids:
                pipe.hmget(bank.memory(memory_id), fields)

        async with self._call("read memories") as client:
            bank, replies = await self._with_bank(client, bank_id, queue)
        found: list[MemoryRecord] = []
        for doc, fact, embedding in replies:
            if doc is None:
                continue
            record = decode_memory(doc, fact, embedding=embedding, dtype=bank.dtype)
            if record.is_live(now):
                found.append(record)
        return found

    def _base_query(self, now_us: int, scope_key: str | None, expr: Any) -> str | None:
        """The query text of live memories (of one scope) matching a pushed-down filter."""
        clauses = [f"@live_until:[({now_us} +inf]"]
        if scope_key is not None:
            clauses.insert(0, f"@scope_key:{{{check_scope_key(scope_key)}}}")
        compiled = compile_filter(expr)
        if compiled is FALSE:
            return None
        if isinstance(compiled, str):
            clauses.append(compiled)
        return "(" + " ".join(clauses) + ")"

    def _search_args(self) -> list[Any]:
        return ["DIALECT", 2, "TIMEOUT", self.config.query_timeout_ms]

    async def nearest(self, bank_id: str, query: NearestQuery) -> list[ScoredRecord]:
        """Up to `query.k` live memories of one scope by true L2 distance, ties by memory id."""
        base = self._base_query(to_us(query.now), query.scope_key, query.filter)
        if base is None or query.k <= 0:
            async with self._call("search memories") as client:
                await self._bank(client, bank_id)  # NotFound for a missing bank all the same
            return []
        vector = np.asarray(query.vector, dtype=np.float64)
        async with self._call("search memories") as client:
            bank = await self._bank(client, bank_id)
            # FLAT ranks exactly: the window only needs room to see ties at the k-th place.
            # HNSW may miss true neighbours: over-fetch, then rank the candidates exactly.
            window = query.k + _TIE_SLACK
            graph = False
            if bank.algorithm == "HNSW":
                window = max(math.ceil(query.k * self.config.overfetch), query.k) + _TIE_SLACK
                graph = await self._use_graph(client, bank, check_scope_key(query.scope_key))
            while True:
                bank, ranked, exhausted = await self._knn(
                    client, bank_id, base, vector, window, graph
                )
                if exhausted or self._boundary_is_clear(ranked, query.k):
                    break
                window *= 4  # ties reach past the window: widen it until they end
        # Only the k results are decoded into records; the window is ranked on raw vectors.
        return [
            ScoredRecord(
                decode_memory(
                    doc["doc"], doc["fact"], embedding=doc["embedding"], dtype=bank.dtype
                ),
                distance,
            )
            for distance, _memory_id, doc in ranked[: query.k]
        ]

    @staticmethod
    def _boundary_is_clear(ranked: list[tuple[float, str, dict[str, Any]]], k: int) -> bool:
        """Whether the k-th distance is safely below the last candidate's (no hidden ties)."""
        if len(ranked) <= k:
            return True
        return ranked[k - 1][0] < ranked[-1][0] - 1e-6

    async def _use_graph(self, client: RedisClient, bank: _Bank, scope_key: str) -> bool:
        """Whether an HNSW search of this scope should walk the graph (a large scope)."""
        cache_key = (bank.index_name, scope_key)
        cached = self._scope_sizes.get(cache_key)
        if cached is None or time.monotonic() - cached[1] > self.config.scope_size_ttl:
            reply = await _command(
                client,
                "FT.SEARCH",
                bank.index_name,
                f"@scope_key:{{{scope_key}}}",
                "LIMIT",
                0,
                0,
                *self._search_args(),
            )
            cached = (parse_search(reply)[0], time.monotonic())
            if len(self._scope_sizes) > 10_000:
                self._scope_sizes.clear()
            self._scope_sizes[cache_key] = cached
        return cached[0] >= self.config.hnsw_graph_from

    async def _knn(
        self,
        client: RedisClient,
        bank_id: str,
        base: str,
        vector: np.ndarray[Any, Any],
        window: int,
        graph: bool,
    ) -> tuple[_Bank, list[tuple[float, str, dict[str, Any]]], bool]:
        """The `window` nearest candidates, ranked exactly.

        Returns:
            The layout; (exact distance, memory id, fields) by distance then id; and True when
            the scope has no more candidates.
        """
        fields = [*MEMORY_FIELDS, "embedding"]

        def queue(pipe: Any, bank: _Bank) -> None:
            knn = "KNN $K @embedding $BLOB"
            params: list[Any] = ["K", window, "BLOB", vector.astype(bank.dtype).tobytes()]
            if bank.algorithm == "HNSW" and graph:
                knn += " EF_RUNTIME $EF HYBRID_POLICY BATCHES"
                params += ["EF", max(self.config.hnsw_ef_runtime, window)]
            elif bank.algorithm == "HNSW":
                knn += " HYBRID_POLICY ADHOC_BF"
            pipe.execute_command(
                "FT.SEARCH",
                bank.index_name,
                f"{base}=>[{knn} AS __dist]",
                "PARAMS",
                len(params),
                *params,
                "SORTBY",
                "__dist",
                "ASC",
                "RETURN",
                len(fields),
                *fields,
                "LIMIT",
                0,
                window,
                *self._search_args(),
            )

        bank, replies = await self._with_bank(client, bank_id, queue)
        _total, docs, warnings = parse_search(replies[0])
        self._check_warnings(warnings)
        if not docs:
            return bank, [], True
        stored = np.frombuffer(b"".join(doc["embedding"] for _key, doc in docs), dtype=bank.dtype)
        matrix = stored.reshape(len(docs), -1).astype(np.float64)
        distances = np.linalg.norm(matrix - vector, axis=1).tolist()
        prefix = len(bank.memory(""))
        ranked = sorted(
            (distance, key[prefix:], doc)
            for distance, (key, doc) in zip(distances, docs, strict=True)
        )  # (distance, memory id): SPEC §3, ties break by name
        return bank, ranked, len(docs) < window

    def _check_warnings(self, warnings: list[str]) -> None:
        for warning in warnings:
            if "timeout" in warning.lower():
                raise StoreUnavailable(
                    f"A search on Redis at {self._where} reached query_timeout_ms "
                    f"({self.config.query_timeout_ms} ms) and would have returned partial "
                    "results; retry, or raise query_timeout_ms (0 disables the limit)."
                )

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> str:
        """The bank's epoch and the scope's write counter, read in one round trip."""
        key = check_scope_key(scope_key)
        async with self._call("read a scope version") as client:
            bank, replies = await self._with_bank(
                client, bank_id, lambda pipe, bank: pipe.get(bank.scope_version(key))
            )
        return f"{bank.epoch}:{_text(replies[0] or b'0')}"

    async def matching_ids(
        self, bank_id: str, scope_key: ScopeKey, filter: FilterExpr
    ) -> frozenset[str]:
        """The scope's memories that match, by id: one FT.AGGREGATE with a single row.

        Its `REDUCE TOLIST` of the ids took a third to a fifth of the time of FT.SEARCH
        NOCONTENT's reply of 5,000 keys. Expired ones are not left out (the caller does that).
        """
        query = self._base_query(0, scope_key, filter)
        if query is None:
            return frozenset()

        def queue(pipe: Any, bank: _Bank) -> None:
            pipe.execute_command(
                "FT.AGGREGATE", bank.index_name, query,
                "GROUPBY", 0, "REDUCE", "TOLIST", 1, "@memory_id", "AS", "ids",
                *self._search_args(),
            )  # fmt: skip

        async with self._call("filter a scope") as client:
            _bank, replies = await self._with_bank(client, bank_id, queue)
        rows, warnings = parse_aggregate(replies[0])
        self._check_warnings(warnings)
        return frozenset(_text(memory_id) for row in rows for memory_id in row.get("ids") or ())

    async def scan(self, bank_id: str, query: ScanQuery) -> list[MemoryRecord]:
        """Live memories matching the query in its order, after its cursor, up to its limit.

        Keyset chunks of FT.AGGREGATE: each resumes after the last row of the one before (the
        first sort key bounds the query text, a FILTER compares the rest and the id), so no
        LIMIT offset grows with depth and RediSearch's offset cap is never reached.
        """
        check_cursor(query)
        sort: list[str] = []
        for key in query.order_by:
            if key.field not in _SORT_FIELDS:
                raise InvalidArgument(
                    f"Cannot order memories by {key.field!r}; use create_time or update_time.",
                    field="order_by",
                )
            sort += [f"@{_SORT_FIELDS[key.field]}", "DESC" if key.descending else "ASC"]
        sort += ["@memory_id", "ASC"]  # SPEC §3: ties break by name
        found: list[MemoryRecord] = []
        after = query.after
        async with self._call("list memories") as client:
            if self._base_query(0, query.scope_key, query.filter) is None:
                await self._bank(client, bank_id)
                return []
            while query.limit is None or len(found) < query.limit:
                wanted = _SCAN_CHUNK if query.limit is None else query.limit - len(found)
                chunk = min(wanted, _SCAN_CHUNK)
                rows, exhausted, bank = await self._scan_chunk(
                    client, bank_id, query, after, sort, chunk
                )
                for row in rows:
                    if "doc" not in row:  # a key that expired between sort and load
                        continue
                    record = decode_memory(
                        row["doc"], row["fact"], embedding=None, dtype=bank.dtype
                    )
                    if record.is_live(query.now):
                        found.append(record)
                if exhausted:
                    break
                after = _row_cursor(rows[-1], query)
        return found[: query.limit]

    async def _scan_chunk(
        self,
        client: RedisClient,
        bank_id: str,
        query: ScanQuery,
        after: ScanCursor | None,
        sort: list[str],
        chunk: int,
    ) -> tuple[list[dict[str, Any]], bool, _Bank]:
        """Rows sorting after `after`, at least one unless none is left, and whether none is.

        The query text bounds the first sort key; a FILTER compares the rest and the id. An id
        RediSearch's expression strings cannot spell (a backslash or control character, which
        only an imported memory can have) is compared here instead: the FILTER then keeps
        the rows tied with the cursor, and the read widens until it gets past them.
        """
        base = self._base_query(to_us(query.now), query.scope_key, query.filter)
        assert base is not None
        keyset: list[Any] = []
        exact = True
        if after is not None:
            first, value = query.order_by[0], to_us(after.values[0])
            bound = f"[-inf {value}]" if first.descending else f"[{value} +inf]"
            base = f"({base} @{_SORT_FIELDS[first.field]}:{bound})"
            exact = _SPELLABLE_ID.fullmatch(after.memory_id) is not None
            keyset = ["FILTER", _after_expression(query.order_by, after, exact=exact)]
        load = [f"@{name}" for name in MEMORY_FIELDS]
        while True:

            def queue(pipe: Any, bank: _Bank, size: int = chunk) -> None:
                pipe.execute_command(
                    "FT.AGGREGATE",
                    bank.index_name,
                    base,
                    *keyset,
                    "SORTBY",
                    len(sort),
                    *sort,
                    "LIMIT",
                    0,
                    size,
                    "LOAD",
                    len(load),
                    *load,
                    *self._search_args(),
                )

            bank, replies = await self._with_bank(client, bank_id, queue)
            rows, warnings = parse_aggregate(replies[0])
            self._check_warnings(warnings)
            exhausted = len(rows) < chunk
            if not exact:
                assert after is not None
                start = cursor_key(after, query.order_by)
                rows = [
                    row
                    for row in rows
                    if cursor_key(_row_cursor(row, query), query.order_by) > start
                ]
            if rows or exhausted:
                return rows, exhausted, bank
            chunk *= 2

    # Revisions

    async def list_revisions(
        self, bank_id: str, memory_id: str, now: datetime
    ) -> list[RevisionRecord]:
        """Live revisions of a memory (deleted or not), newest first."""
        return (await self.list_revisions_many(bank_id, [memory_id], now))[memory_id]

    async def list_revisions_many(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> dict[str, list[RevisionRecord]]:
        """`list_revisions` of each id, in two pipelined round trips whatever their number.

        The first reads every revision set (with the bank's epoch check), the second every
        revision they name; an id whose set is empty costs nothing in the second.
        """
        unique = list(dict.fromkeys(memory_ids))

        def queue(pipe: Any, bank: _Bank) -> None:
            for memory_id in unique:
                pipe.zrevrange(bank.revision_set(memory_id), 0, -1)

        async with self._call("list revisions") as client:
            bank, replies = await self._with_bank(client, bank_id, queue)
            sets = [[_text(member) for member in members] for members in replies]
            async with client.pipeline(transaction=False) as pipe:
                for memory_id, revision_ids in zip(unique, sets, strict=True):
                    for revision_id in revision_ids:
                        pipe.hget(bank.revision(memory_id, revision_id), "data")
                raws = iter(await pipe.execute())
        return {
            memory_id: _live_newest_first([next(raws) for _ in revision_ids], now)
            for memory_id, revision_ids in zip(unique, sets, strict=True)
        }

    async def get_revision(
        self, bank_id: str, memory_id: str, revision_id: str, now: datetime
    ) -> RevisionRecord | None:
        """One live revision, or None."""
        async with self._call("read a revision") as client:
            _bank, replies = await self._with_bank(
                client,
                bank_id,
                lambda pipe, bank: pipe.hget(bank.revision(memory_id, revision_id), "data"),
            )
        if replies[0] is None:
            return None
        revision = decode_revision(replies[0])
        return revision if revision.is_live(now) else None

    async def list_revision_memory_ids(
        self, bank_id: str, now: datetime, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """One page of the ids of memories with live revisions, ascending.

        ZRANGEBYLEX over the bank's `rids` set reads the candidates in id order; the expiry of
        their revisions is then read in two pipelined round trips per `limit` candidates.
        """
        found: list[str] = []
        low = "-" if after is None else f"({after}"
        async with self._call("list revision memory ids") as client:
            while len(found) < limit:

                def queue(pipe: Any, bank: _Bank, low: str = low) -> None:
                    pipe.zrangebylex(bank.revision_ids, low, "+", start=0, num=limit)

                bank, replies = await self._with_bank(client, bank_id, queue)
                candidates = [_text(member) for member in replies[0]]
                found += await self._with_live_revisions(client, bank, candidates, to_us(now))
                if len(candidates) < limit:
                    break
                low = f"({candidates[-1]}"
        return found[:limit]

    @staticmethod
    async def _with_live_revisions(
        client: RedisClient, bank: _Bank, memory_ids: list[str], now_us: int
    ) -> list[str]:
        """The ids among `memory_ids` with a revision live at `now_us`; forgets those with none."""
        async with client.pipeline(transaction=False) as pipe:
            for memory_id in memory_ids:
                pipe.zrange(bank.revision_set(memory_id), 0, -1)
            sets = [[_text(rev) for rev in members] for members in await pipe.execute()]
        async with client.pipeline(transaction=False) as pipe:
            for memory_id, revision_ids in zip(memory_ids, sets, strict=True):
                for revision_id in revision_ids:
                    pipe.hget(bank.revision(memory_id, revision_id), "live_until")
            lives = iter(await pipe.execute())
        live: list[str] = []
        for memory_id, revision_ids in zip(memory_ids, sets, strict=True):
            until = [next(lives) for _ in revision_ids]
            if any(_live_at(value, now_us) for value in until):
                live.append(memory_id)
        await _forget_revision_ids(
            client, bank, [i for i, revs in zip(memory_ids, sets, strict=True) if not revs]
        )
        return live

    # Operations

    async def put_operation(self, operation: OperationRecord) -> None:
        """Creates or replaces an operation."""
        bank_key = self._bank_key(operation.bank_id)
        async with self._call("store an operation") as client:
            for _attempt in range(3):
                bank = await self._bank(client, operation.bank_id)
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
                self._banks.pop(operation.bank_id, None)
        raise NotFound(f"Memory bank {operation.bank_id!r} does not exist.")

    async def get_operation(self, bank_id: str, operation_path: str) -> OperationRecord | None:
        """The operation, or None."""
        async with self._call("read an operation") as client:
            try:
                _bank, replies = await self._with_bank(
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
        encoded = _encode_document(kind, key, body)

        async def write() -> None:
            async with self._call("store a document") as client:
                for _attempt in range(3):
                    bank = await self._bank(client, bank_id)
                    keys, args = self._document_script(bank, document, encoded)
                    if await client.eval(_WRITE_DOCUMENT_SCRIPT, len(keys), *keys, *args):
                        return
                    self._banks.pop(bank_id, None)
            raise NotFound(f"Memory bank {bank_id!r} does not exist.")

        await self._index_apart(bank_id, [document], write)

    def _due_key(self, kind: str) -> str:
        return f"{self.config.key_prefix}:due:{kind}"

    def _due_in_slot(self, kind: str, bank: _Bank) -> bool:
        """Whether the due set can be written with the bank's keys (one server: always)."""
        return self._in_slot_of(self._due_key(kind), self._bank_key(bank.bank_id))

    def _document_script(
        self, bank: _Bank, document: DocumentRecord, encoded: str
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of `_WRITE_DOCUMENT_SCRIPT` for one document."""
        kind = document.kind
        keys = [
            self._bank_key(bank.bank_id),
            bank.documents(kind),
            bank.document_scopes(kind),
            bank.scoped_documents(kind),
        ]
        if self._due_in_slot(kind, bank):
            keys.append(self._due_key(kind))
        due = "" if document.due is None else to_us(document.due)
        member = _due_member(bank.bank_id, document.key)
        return keys, [bank.epoch, document.key, encoded, document.scope_key or "", due, member]

    async def _index_apart(
        self,
        bank_id: str,
        documents: Sequence[DocumentRecord],
        write: Callable[[], Awaitable[object]],
    ) -> None:
        """Runs `write`; on a cluster, whose due sets live in other slots, inside `index_around`."""
        if documents and self._on_cluster():
            await index_around(self, bank_id, documents, write)
        else:
            await write()

    async def get_document(self, bank_id: str, kind: str, key: str) -> Mapping[str, Any] | None:
        """The document, or None."""
        async with self._call("read a document") as client:
            try:
                _bank, replies = await self._with_bank(
                    client, bank_id, lambda pipe, bank: pipe.hget(bank.documents(kind), key)
                )
            except NotFound:
                return None
        return None if replies[0] is None else cast(Mapping[str, Any], json.loads(replies[0]))

    async def list_documents(
        self, bank_id: str, kind: str, *, scope_key: ScopeKey | None = None
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """Every (key, body) of one kind in the bank (of one scope when given), ordered by key."""

        def queue(pipe: Any, bank: _Bank) -> None:
            if scope_key is None:
                pipe.hgetall(bank.documents(kind))
                return
            start = scope_key.encode() + b"\x1f"
            pipe.eval(
                _SCOPED_DOCUMENTS_SCRIPT,
                2,
                bank.scoped_documents(kind),
                bank.documents(kind),
                b"[" + start,
                b"[" + start + b"\xff",
                len(start),
            )

        async with self._call("list documents") as client:
            try:
                _bank, replies = await self._with_bank(client, bank_id, queue)
            except NotFound:
                return []
        found = replies[0]
        pairs = found.items() if scope_key is None else zip(found[::2], found[1::2], strict=True)
        return sorted(((_text(key), json.loads(raw)) for key, raw in pairs), key=lambda d: d[0])

    async def delete_document(self, bank_id: str, kind: str, key: str) -> None:
        """Deletes one document if it exists, with its due entry."""

        def queue(pipe: Any, bank: _Bank) -> None:
            keys = [bank.documents(kind), bank.document_scopes(kind), bank.scoped_documents(kind)]
            if self._due_in_slot(kind, bank):
                keys.append(self._due_key(kind))
            pipe.eval(_DELETE_DOCUMENT_SCRIPT, len(keys), *keys, key, _due_member(bank_id, key))

        async with self._call("delete a document") as client:
            try:
                await self._with_bank(client, bank_id, queue)
            except NotFound:
                return
            if isinstance(client, RedisCluster):
                await client.zrem(self._due_key(kind), _due_member(bank_id, key))

    async def due_documents(
        self, kind: str, now: datetime, *, limit: int = 1000
    ) -> list[DueDocument]:
        """Due entries of one kind up to `now`, earliest first: one ZRANGEBYSCORE."""
        if limit <= 0:
            return []
        async with self._call("list due documents") as client:
            found = await client.zrangebyscore(
                self._due_key(kind), "-inf", to_us(now), start=0, num=limit, withscores=True
            )
        return [_due_document(_text(member), float(score)) for member, score in cast(Any, found)]

    async def set_due(
        self,
        bank_id: str,
        kind: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool = False,
    ) -> None:
        """Sets (`ZADD`/`ZREM`) or lowers (`ZADD LT`) due entries, in one round trip."""
        self._bank_key(bank_id)  # validates the id
        async with self._call("index due documents") as client:
            async with client.pipeline(transaction=False) as pipe:
                for key, due in dues.items():
                    member = _due_member(bank_id, key)
                    if due is not None:
                        pipe.zadd(self._due_key(kind), {member: to_us(due)}, lt=only_earlier)
                    elif not only_earlier:
                        pipe.zrem(self._due_key(kind), member)
                await pipe.execute()

    async def _forget_due(self, client: RedisClient, bank_id: str) -> None:
        """Removes a deleted bank's due entries (of every kind)."""
        async for due_key in client.scan_iter(match=f"{self.config.key_prefix}:due:*", count=1000):
            members = [
                member
                async for member, _score in client.zscan_iter(due_key, match=f"{bank_id}\x1f*")
            ]
            for start in range(0, len(members), _SWEEP_CHUNK):
                await client.zrem(due_key, *members[start : start + _SWEEP_CHUNK])

    # Coordination

    def lock_provider(self) -> RedisLockProvider:
        """Redis locks on this store's server and prefix, sharing its connection pool."""
        if self._locks is None:
            self._locks = RedisLockProvider(client=self._redis(), key_prefix=self.config.key_prefix)
        return self._locks

    # Maintenance

    async def sweep_expired(self, bank_id: str, now: datetime) -> int:
        """Deletes memories and revisions expired at `now` that Redis has not evicted yet."""
        now_us = to_us(now)
        removed = 0
        async with self._call("sweep expired memories") as client:
            bank = await self._bank(client, bank_id)
            await self._ensure_index(client, bank)
            while True:
                _bank, replies = await self._with_bank(
                    client,
                    bank_id,
                    lambda pipe, bank: pipe.execute_command(
                        "FT.SEARCH",
                        bank.index_name,
                        f"@live_until:[-inf {now_us}]",
                        "RETURN",
                        1,
                        "scope_key",
                        "LIMIT",
                        0,
                        _SWEEP_CHUNK,
                        *self._search_args(),
                    ),
                )
                _total, docs, _warnings = parse_search(replies[0])
                if not docs:
                    break
                docs = [(key, fields) for key, fields in docs if "scope_key" in fields]
                expired = [key for key, _fields in docs]  # less those evicted meanwhile
                scopes = [_text(fields["scope_key"]) for _key, fields in docs]
                versions = [bank.scope_version(scope) for scope in scopes]
                count = int(
                    await client.eval(
                        _SWEEP_MEMORIES_SCRIPT,
                        2 * len(expired),
                        *expired,
                        *versions,
                        now_us,
                        *scopes,
                    )
                )
                removed += count
                if count == 0:
                    break
            for expiry_set in (bank.revision_expiry, bank.revision_expiry_native):
                removed += await self._sweep_revisions(client, bank, expiry_set, now_us)
        if removed:
            logger.debug("swept %d expired records from bank %s", removed, bank_id)
        return removed

    async def earliest_expiry(self, bank_id: str) -> datetime | None:
        """The earliest `live_until` of the bank's memories and revisions, in one round trip.

        FT.AGGREGATE MIN over the expiring memories, and the first of each revision expiry set.
        """

        def queue(pipe: Any, bank: _Bank) -> None:
            pipe.execute_command(
                "FT.AGGREGATE",
                bank.index_name,
                "@live_until:[-inf (+inf]",
                "LOAD", 1, "@live_until",
                "GROUPBY", 0, "REDUCE", "MIN", 1, "@live_until", "AS", "earliest",
                *self._search_args(),
            )  # fmt: skip
            for expiry_set in (bank.revision_expiry, bank.revision_expiry_native):
                pipe.zrange(expiry_set, 0, 0, withscores=True)

        async with self._call("find the earliest expiry") as client:
            await self._ensure_index(client, await self._bank(client, bank_id))
            _bank, (aggregate, *firsts) = await self._with_bank(client, bank_id, queue)
        rows, _warnings = parse_aggregate(aggregate)
        times = [float(row["earliest"]) for row in rows if row.get("earliest") is not None]
        times += [float(score) for first in firsts for _member, score in first]
        return from_us(int(min(times))) if times else None

    @staticmethod
    async def _sweep_revisions(
        client: RedisClient, bank: _Bank, expiry_set: str, now_us: int
    ) -> int:
        removed = 0
        while True:
            members = await client.zrangebyscore(
                expiry_set, "-inf", now_us, start=0, num=_SWEEP_CHUNK
            )
            if not members:
                return removed
            keys: list[str] = [expiry_set]
            args: list[Any] = [now_us]
            memory_ids: dict[str, None] = {}
            for member in members:
                memory_id, revision_id = _text(member).split("\x1f", 1)
                keys += [bank.revision(memory_id, revision_id), bank.revision_set(memory_id)]
                args += [_text(member), revision_id]
                memory_ids[memory_id] = None
            removed += int(await client.eval(_SWEEP_REVISIONS_SCRIPT, len(keys), *keys, *args))
            await _forget_revision_ids(client, bank, list(memory_ids))
