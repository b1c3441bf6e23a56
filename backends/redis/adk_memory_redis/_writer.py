"""The write path: a `WriteBatch` applied in one MULTI/EXEC under WATCH, or not at all.

`BatchWriter.apply` WATCHes the bank key, the memory keys it inserts and the revision sets it
extends, checks (bank exists, inserted ids are free) and then queues every write in one
MULTI/EXEC. Redis runs a transaction whole or not at all: a connection lost before EXEC discards
it, so a memory and its revision (and the batch's documents, in their kinds' hashes) are all
written or all absent. The transaction also writes a short-lived commit marker, which settles a
connection lost while it was in flight (`_settle`). On a cluster the transaction runs on a plain
client of the primary that owns the bank's slot (`_client_for`).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

import redis.asyncio as aredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster

from adk_memory.errors import Aborted, AlreadyExists, FailedPrecondition, NotFound, StoreUnavailable
from adk_memory.locks import lease_lapsed
from adk_memory.store import (
    EXPIRY_KEY,
    EXPIRY_KIND,
    RevisionRecord,
    WriteBatch,
    batch_expiry,
    check_expectations,
    check_vectors,
)
from adk_memory_redis._banks import Banks
from adk_memory_redis._codec import (
    encode_memory,
    encode_revision,
    from_us,
    live_at,
    operation_to_json,
    text,
    to_us,
)
from adk_memory_redis._config import RedisClient, RedisStoreConfig
from adk_memory_redis._connection import Connection
from adk_memory_redis._documents import WRITE_DOCUMENT_SCRIPT, Documents, encode_document
from adk_memory_redis._due import due_member
from adk_memory_redis._errors import redis_errors
from adk_memory_redis._expiry import native_expiry_ms, now_ms
from adk_memory_redis._index import SearchIndex
from adk_memory_redis._layout import Bank, StoreKeys
from adk_memory_redis.lock import RedisLock, RedisLockProvider

logger = logging.getLogger(__name__)

_MARKER_TTL_MS = 300_000
"""How long the commit marker of a write outlives it (to settle a lost connection)."""
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


class BatchWriter:
    """Applies write batches, and keeps the clients of a cluster's primaries that run them."""

    def __init__(
        self,
        connection: Connection,
        config: RedisStoreConfig,
        keys: StoreKeys,
        banks: Banks,
        index: SearchIndex,
        documents: Documents,
    ) -> None:
        self._connection = connection
        self._config = config
        self._keys = keys
        self._banks = banks
        self._index = index
        self._documents = documents
        self._writers: dict[str, aredis.Redis] = {}

    async def aclose(self) -> None:
        """Closes the clients of the cluster's primaries."""
        writers, self._writers = list(self._writers.values()), {}
        for writer in writers:
            with redis_errors(self._connection.where, "close the connection pool"):
                await writer.aclose()

    async def apply(
        self,
        bank_id: str,
        batch: WriteBatch,
        *,
        lower_expiry: bool,
        locks: RedisLockProvider | None,
    ) -> None:
        """The batch's transaction (`lower_expiry`: with the bank's expiry entry lowered).

        `locks` is the store's own lock provider, if it made one: its fences join the
        transaction.
        """
        bank_key = self._keys.bank(bank_id)
        async with self._connection.call("apply a write batch") as client:
            for _attempt in range(self._config.write_retries):
                bank = await self._banks.get(client, bank_id)
                check_vectors(batch, bank.dim)
                await self._index.ensure(client, bank)
                marker = bank.commit_marker(uuid.uuid4().hex)
                try:
                    writer = await self._client_for(client, bank_key)
                    if await self._try_apply(
                        writer, bank_key, bank, batch, marker, lower_expiry, locks
                    ):
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
                self._banks.forget(bank_id)  # the epoch changed: reload and retry
            raise FailedPrecondition(
                f"Writes to memory bank {bank_id!r} kept colliding with concurrent writers, or "
                f"with its cluster slot being moved ({self._config.write_retries} attempts); "
                "retry the request."
            )

    async def _client_for(self, client: RedisClient, bank_key: str) -> aredis.Redis:
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
                f"No primary of the Redis Cluster at {self._connection.where} serves the slot of "
                "this bank."
            )
        writer = self._writers.get(node.name)
        if writer is None:
            pool = aredis.BlockingConnectionPool(
                connection_class=node.connection_class,
                max_connections=self._config.max_connections,
                timeout=self._config.socket_timeout,
                **node.connection_kwargs,
            )
            writer = self._writers[node.name] = aredis.Redis(connection_pool=pool)
        return writer

    async def _settle(self, client: RedisClient, marker: str, exc: Exception) -> None:
        """Returns if the interrupted transaction committed; raises `StoreUnavailable` if not."""
        where = self._connection.where
        try:
            committed = bool(await client.exists(marker))
        except redis.exceptions.RedisError as check:
            raise StoreUnavailable(
                f"The connection to Redis at {where} was lost during a write and could not "
                "be re-established to check it; the write was applied entirely or not at all. "
                "Read the memory to find out, then retry if it is absent."
            ) from check
        if committed:
            logger.debug("connection lost after a write committed; the write stands")
            return
        raise StoreUnavailable(
            f"The connection to Redis at {where} was lost before the write committed; "
            "nothing was changed. Retry the request."
        ) from exc

    async def _try_apply(
        self,
        client: aredis.Redis,
        bank_key: str,
        bank: Bank,
        batch: WriteBatch,
        marker: str,
        lower_expiry: bool,
        locks: RedisLockProvider | None,
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
        fences = await self._fences(batch, bank_key, locks)
        fence_keys = [lease.key for lease in fences]
        written = [r.memory_id for r in (*batch.inserts, *batch.upserts)] + list(batch.deletes)
        written_keys = [bank.memory(memory_id) for memory_id in dict.fromkeys(written)]
        encoded = [
            (bank.memory(r.memory_id), encode_memory(r, dtype=bank.dtype), r.expire_time)
            for r in (*batch.inserts, *batch.upserts)
        ]
        documents = [
            self._documents.script(bank, d, encode_document(d.kind, d.key, d.body))
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
            if text(epoch) != bank.epoch:
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
                at = native_expiry_ms(None if expire_time is None else to_us(expire_time))
                if at is not None:
                    pipe.pexpireat(key, at)
            for memory_id in batch.deletes:
                pipe.delete(bank.memory(memory_id))
            touched = [text(key) for key in scopes_before if key is not None]
            touched += [r.scope_key for r in (*batch.inserts, *batch.upserts)]
            for scope_key in dict.fromkeys(touched):
                pipe.incr(bank.scope_version(scope_key))
            for memory_id, revisions in by_memory.items():
                self._queue_revisions(pipe, bank, memory_id, revisions, int(set_expiry[memory_id]))
            if by_memory:  # entries whose keys Redis has evicted by now
                pipe.zremrangebyscore(bank.revision_expiry_native, "-inf", now_ms() * 1000)
            for document_keys, document_args in documents:
                pipe.eval(WRITE_DOCUMENT_SCRIPT, len(document_keys), *document_keys, *document_args)
            for operation_key, encoded_operation in operations:
                pipe.set(operation_key, encoded_operation)
            earliest = batch_expiry(batch)
            if earliest is not None and lower_expiry:
                member = due_member(bank.bank_id, EXPIRY_KEY)
                pipe.zadd(self._keys.due(EXPIRY_KIND), {member: to_us(earliest)}, lt=True)
            await pipe.execute()
        return True

    async def _fences(
        self, batch: WriteBatch, bank_key: str, locks: RedisLockProvider | None
    ) -> list[RedisLock]:
        """The batch's fences to check inside the transaction; verifies the others now.

        A lock of this store's provider is checked inside the transaction; another (on another
        server, or not a Redis lock, or on a cluster outside the bank's slot) cannot join it and
        is checked just before.
        """
        fences = [
            lease
            for lease in batch.fences
            if isinstance(lease, RedisLock)
            and lease.provider is locks
            and self._connection.in_slot_of(lease.key, bank_key)
        ]
        for lease in batch.fences:
            if lease not in fences:
                await lease.verify()
        return fences

    @staticmethod
    def _check(
        batch: WriteBatch, state: Sequence[Any], set_count: int, fences: Sequence[RedisLock]
    ) -> dict[str, Any]:
        """Checks the script's answer against the batch; returns each revision set's expiry."""
        inserted = len(batch.inserts)
        for record, live in zip(batch.inserts, state[:inserted], strict=True):
            if live_at(live, to_us(record.create_time)):
                raise AlreadyExists(f"A memory with id {record.memory_id!r} already exists.")
        pairs = state[inserted : inserted + 2 * len(batch.expect)]
        found: dict[str, datetime | None] = {}
        for index, expected in enumerate(batch.expect):
            live, update_us = pairs[2 * index], pairs[2 * index + 1]
            alive = update_us is not None and live_at(live, to_us(expected.now))
            found[expected.memory_id] = from_us(int(update_us)) if alive else None
        check_expectations(batch.expect, found)
        rest = state[inserted + len(pairs) :]
        for lease, token in zip(fences, rest[set_count:], strict=True):
            if token is None or text(token) != lease.token:
                raise lease_lapsed(lease.name)
        by_memory = dict.fromkeys(revision.memory_id for revision in batch.revisions)
        return dict(zip(by_memory, rest[:set_count], strict=True))

    @staticmethod
    def _queue_revisions(
        pipe: Any, bank: Bank, memory_id: str, revisions: list[RevisionRecord], set_expiry: int
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
            at = native_expiry_ms(expire_us)
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


def _connection_lost(exc: redis.exceptions.WatchError) -> bool:
    """Whether redis-py raised WatchError because the connection died (not a collision)."""
    cause = exc.__cause__ or exc.__context__
    lost = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)
    return isinstance(cause, lost) or "occurred while watching" in str(exc)
