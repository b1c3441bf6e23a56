"""Expiry: which keys Redis evicts itself (`native_expiry_ms`), and the sweep of what it does not.

A memory's `live_until` (µs) is in every query (`@live_until:[(now +inf]`) and in every read, so
an expired memory is never returned; its key also gets PEXPIREAT so Redis reclaims it. Native
expiry is set only for an expire time still ahead of this host's clock (a record written already
expired, which only a simulated clock produces, is reclaimed by `sweep_expired`). The two
revision expiry sets let `sweep_expired` find every expired revision for any `now`; the one of
natively evicted revisions is trimmed by the host clock on every write, so it stays bounded even
if nobody ever sweeps.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import Any

from adk_memory_redis._banks import Banks
from adk_memory_redis._codec import from_us, text, to_us
from adk_memory_redis._config import RedisClient, RedisStoreConfig
from adk_memory_redis._connection import Connection
from adk_memory_redis._index import SearchIndex
from adk_memory_redis._layout import Bank
from adk_memory_redis._query import parse_aggregate, parse_search, search_args
from adk_memory_redis._revisions import forget_revision_ids

logger = logging.getLogger(__name__)

_SWEEP_CHUNK = 500

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


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def native_expiry_ms(expire_us: int | None) -> int | None:
    """The PEXPIREAT time for an expiry, or None when Redis should not expire the key."""
    if expire_us is None:
        return None
    expire_ms = -(-expire_us // 1000)  # round up: never evict before the expiry instant
    return expire_ms if expire_ms > now_ms() else None


class Expiry:
    """The sweep of expired memories and revisions, and the earliest expiry of a bank."""

    def __init__(
        self, connection: Connection, config: RedisStoreConfig, banks: Banks, index: SearchIndex
    ) -> None:
        self._connection = connection
        self._config = config
        self._banks = banks
        self._index = index

    async def sweep(self, bank_id: str, now: datetime) -> int:
        """Deletes memories and revisions expired at `now` that Redis has not evicted yet."""
        now_us = to_us(now)
        removed = 0
        async with self._connection.call("sweep expired memories") as client:
            bank = await self._banks.get(client, bank_id)
            await self._index.ensure(client, bank)
            while True:
                _bank, replies = await self._banks.with_bank(
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
                        *search_args(self._config.query_timeout_ms),
                    ),
                )
                _total, docs, _warnings = parse_search(replies[0])
                if not docs:
                    break
                docs = [(key, fields) for key, fields in docs if "scope_key" in fields]
                expired = [key for key, _fields in docs]  # less those evicted meanwhile
                scopes = [text(fields["scope_key"]) for _key, fields in docs]
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
                removed += await _sweep_revisions(client, bank, expiry_set, now_us)
        if removed:
            logger.debug("swept %d expired records from bank %s", removed, bank_id)
        return removed

    async def earliest(self, bank_id: str) -> datetime | None:
        """The earliest `live_until` of the bank's memories and revisions, in one round trip.

        FT.AGGREGATE MIN over the expiring memories, and the first of each revision expiry set.
        """

        def queue(pipe: Any, bank: Bank) -> None:
            pipe.execute_command(
                "FT.AGGREGATE",
                bank.index_name,
                "@live_until:[-inf (+inf]",
                "LOAD", 1, "@live_until",
                "GROUPBY", 0, "REDUCE", "MIN", 1, "@live_until", "AS", "earliest",
                *search_args(self._config.query_timeout_ms),
            )  # fmt: skip
            for expiry_set in (bank.revision_expiry, bank.revision_expiry_native):
                pipe.zrange(expiry_set, 0, 0, withscores=True)

        async with self._connection.call("find the earliest expiry") as client:
            await self._index.ensure(client, await self._banks.get(client, bank_id))
            _bank, (aggregate, *firsts) = await self._banks.with_bank(client, bank_id, queue)
        rows, _warnings = parse_aggregate(aggregate)
        times = [float(row["earliest"]) for row in rows if row.get("earliest") is not None]
        times += [float(score) for first in firsts for _member, score in first]
        return from_us(int(min(times))) if times else None


async def _sweep_revisions(client: RedisClient, bank: Bank, expiry_set: str, now_us: int) -> int:
    removed = 0
    while True:
        members = await client.zrangebyscore(expiry_set, "-inf", now_us, start=0, num=_SWEEP_CHUNK)
        if not members:
            return removed
        keys: list[str] = [expiry_set]
        args: list[Any] = [now_us]
        memory_ids: dict[str, None] = {}
        for member in members:
            memory_id, revision_id = text(member).split("\x1f", 1)
            keys += [bank.revision(memory_id, revision_id), bank.revision_set(memory_id)]
            args += [text(member), revision_id]
            memory_ids[memory_id] = None
        removed += int(await client.eval(_SWEEP_REVISIONS_SCRIPT, len(keys), *keys, *args))
        await forget_revision_ids(client, bank, list(memory_ids))
