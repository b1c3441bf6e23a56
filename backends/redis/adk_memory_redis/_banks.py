"""Banks: records, registry, cached layouts, the epoch-checked round trip, deleted epochs.

`Banks` creates, reads, updates and deletes bank records (and the registry `P:banks`), caches
the layout of each bank's current epoch, runs every bank read through one round trip that
checks the epoch (`with_bank`), and removes the keys of deleted epochs.

Deleting a bank removes its `{P:B}:bank` key in one command, which makes the whole epoch
unreachable at once; its keys are then removed (and, after a crash, by the next `delete_bank`).
A bank re-created with the same id gets a new epoch and so starts empty, whatever was left.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from typing import Any, cast

import redis.exceptions
from redis.asyncio.cluster import RedisCluster

from adk_memory.errors import AlreadyExists, InvalidArgument, NotFound
from adk_memory.store import BankRecord
from adk_memory_redis._codec import bank_from_json, bank_to_json, text
from adk_memory_redis._config import RedisClient, RedisStoreConfig
from adk_memory_redis._connection import Connection, list_indexes
from adk_memory_redis._due import DueIndex
from adk_memory_redis._errors import is_missing_index
from adk_memory_redis._index import SearchIndex
from adk_memory_redis._layout import Bank, StoreKeys

logger = logging.getLogger(__name__)

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


class Banks:
    """The banks of one store, and the layout of each one's current epoch (cached)."""

    def __init__(
        self,
        connection: Connection,
        config: RedisStoreConfig,
        keys: StoreKeys,
        index: SearchIndex,
        due: DueIndex,
    ) -> None:
        self._connection = connection
        self._config = config
        self._keys = keys
        self._index = index
        self._due = due
        self.cached: dict[str, Bank] = {}
        """Bank id -> the layout last read; callers re-check the epoch with each read or write."""

    async def load(self, client: RedisClient, bank_id: str) -> Bank | None:
        raw = await client.hmget(self._keys.bank(bank_id), ["epoch", "dim", "algorithm", "dtype"])
        if raw[0] is None:
            self.cached.pop(bank_id, None)
            return None
        bank = Bank(
            prefix=self._config.key_prefix,
            bank_id=bank_id,
            epoch=text(raw[0]),
            dim=int(cast(bytes, raw[1])),
            algorithm=text(raw[2]),
            dtype=text(raw[3]),
        )
        self.cached[bank_id] = bank
        return bank

    async def get(self, client: RedisClient, bank_id: str) -> Bank:
        """The bank's layout (cached; callers re-check the epoch with each read or write)."""
        bank = self.cached.get(bank_id)
        if bank is None:
            bank = await self.load(client, bank_id)
        if bank is None:
            raise NotFound(f"Memory bank {bank_id!r} does not exist.")
        return bank

    def forget(self, bank_id: str) -> None:
        """Drops the cached layout (its epoch turned out stale)."""
        self.cached.pop(bank_id, None)

    async def with_bank(
        self,
        client: RedisClient,
        bank_id: str,
        queue: Callable[[Any, Bank], None],
    ) -> tuple[Bank, list[Any]]:
        """Runs `queue`'s commands in one round trip with a check of the bank's epoch.

        Returns the layout and the replies of the queued commands. A stale cached epoch (the bank
        was deleted and re-created elsewhere) is refreshed and the commands are re-run; a missing
        index is created and the commands re-run.
        """
        for _attempt in range(3):
            bank = await self.get(client, bank_id)
            async with client.pipeline(transaction=False) as pipe:
                pipe.hget(self._keys.bank(bank_id), "epoch")
                queue(pipe, bank)
                replies = await pipe.execute(raise_on_error=False)
            epoch, rest = replies[0], replies[1:]
            if epoch is None or text(epoch) != bank.epoch:
                self.forget(bank_id)
                continue
            errors = [reply for reply in rest if isinstance(reply, Exception)]
            if errors and any(is_missing_index(error) for error in errors):
                await self._index.ensure(client, bank, known=False)
                continue
            if errors:
                raise errors[0]
            return bank, rest
        raise NotFound(f"Memory bank {bank_id!r} does not exist.")

    async def create(self, bank: BankRecord) -> None:
        """Creates the bank and its search index; `AlreadyExists` if its id is taken."""
        key = self._keys.bank(bank.bank_id)
        if bank.embedding_dimension < 1:
            raise InvalidArgument("A bank's embedding dimension must be positive.")
        async with self._connection.call("create a memory bank") as client:
            layout = Bank(
                prefix=self._config.key_prefix,
                bank_id=bank.bank_id,
                epoch=uuid.uuid4().hex[:12],
                dim=bank.embedding_dimension,
                algorithm=self._config.index_algorithm,
                dtype=self._config.vector_dtype,
            )
            await client.sadd(self._keys.registry, bank.bank_id)
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
            self.cached[bank.bank_id] = layout
            await self._index.ensure(client, layout, known=False)
        logger.debug("created bank %s (%s, dim %d)", bank.bank_id, layout.algorithm, layout.dim)

    async def record(self, bank_id: str) -> BankRecord | None:
        """The bank, or None."""
        key = self._keys.bank(bank_id)
        async with self._connection.call("read a memory bank") as client:
            raw = await client.hget(key, "record")
        return None if raw is None else bank_from_json(raw)

    async def records(self) -> list[BankRecord]:
        """Every bank, ordered by `create_time` then id."""
        async with self._connection.call("list memory banks") as client:
            ids = sorted(text(member) for member in await client.smembers(self._keys.registry))
            async with client.pipeline(transaction=False) as pipe:
                for bank_id in ids:
                    pipe.hget(self._keys.bank(bank_id), "record")
                raws = await pipe.execute()
        banks = [bank_from_json(raw) for raw in raws if raw is not None]
        return sorted(banks, key=lambda bank: (bank.create_time, bank.bank_id))

    async def update(self, bank: BankRecord) -> None:
        """Replaces the bank record; a new embedding dimension rebuilds the (empty) index."""
        key = self._keys.bank(bank.bank_id)
        async with self._connection.call("update a memory bank") as client:
            before = await self.load(client, bank.bank_id)
            previous = await client.eval(
                _UPDATE_BANK_SCRIPT, 1, key, bank_to_json(bank), bank.embedding_dimension
            )
            if previous is None or before is None:
                raise NotFound(f"Memory bank {bank.bank_id!r} does not exist.")
            if before.dim != bank.embedding_dimension:
                # Only an empty bank may change its embedding model (the engine checks), so
                # the index is rebuilt for the new dimension without re-indexing anything.
                await self._index.drop(client, before.index_name, documents=False)
                layout = await self.load(client, bank.bank_id)
                if layout is not None:
                    await self._index.ensure(client, layout, known=False)

    async def delete(self, bank_id: str) -> None:
        """Deletes the bank with all its memories, revisions, vectors and operations."""
        key = self._keys.bank(bank_id)
        async with self._connection.call("delete a memory bank") as client:
            bank = await self.load(client, bank_id)
            if bank is not None:
                # Recorded first, so a crash below leaves the keys findable for the next sweep.
                await client.sadd(self._keys.garbage, f"{bank_id}\x1f{bank.epoch}")
                await client.eval(_DELETE_BANK_SCRIPT, 1, key, bank.epoch)
                self.forget(bank_id)
                await self._due.forget_bank(client, bank_id)
            if not await client.exists(key):
                await client.srem(self._keys.registry, bank_id)
            await self._collect_garbage(client)

    async def _collect_garbage(self, client: RedisClient) -> None:
        """Removes the keys of deleted bank epochs (idempotent; resumes after a crash)."""
        for member in await client.smembers(self._keys.garbage):
            bank_id, epoch = text(member).split("\x1f", 1)
            current = await client.hget(self._keys.bank(bank_id), "epoch")
            if current is not None and text(current) == epoch:
                # Still live: a delete is under way elsewhere, or crashed before it deleted the
                # bank key. Leave the entry for the delete that completes.
                continue
            layout = Bank(self._config.key_prefix, bank_id, epoch, 1, "FLAT", "float32")
            try:
                await self._index.drop(client, layout.index_name, documents=True)
                await self._index.drop(client, layout.legacy_index_name, documents=False)
                await _unlink_matching(client, f"{layout.base}*", slot_of=layout.base)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                # Its shard is unreachable (a cluster primary is down): the entry stays for the
                # next delete, and the delete that brought us here has completed all the same.
                logger.warning("keys of deleted bank %s unreachable; kept for later", bank_id)
                continue
            await client.srem(self._keys.garbage, member)
            logger.debug("removed the keys of a deleted epoch of bank %s", bank_id)

    async def drop_all(self) -> None:
        """Deletes every bank, index and key under this store's prefix (tests, resets)."""
        prefix = self._config.key_prefix
        async with self._connection.call("drop all memory banks") as client:
            for name in await list_indexes(client):
                if name.startswith((f"{{{prefix}:", f"{prefix}:idx:")):
                    await self._index.drop(client, name, documents=True)
            await _unlink_matching(client, f"{{{prefix}:*")
            await _unlink_matching(client, f"{prefix}:lock:*")
            await _unlink_matching(client, self._keys.due("*"))
            await client.unlink(self._keys.registry, self._keys.garbage)
        self.cached.clear()
        self._index.known.clear()


async def _unlink_matching(client: RedisClient, pattern: str, *, slot_of: str | None = None) -> int:
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
