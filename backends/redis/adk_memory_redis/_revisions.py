"""Reading revisions, and the `rids` set of the memories that have them.

Revisions are read per memory, for many memories at once, and as pages of the ids of memories
with a live revision (the bank's `rids` set, by ZRANGEBYLEX). The write path queues them
(`_writer`) and the sweep removes expired ones (`_expiry`).

An id stays in `rids` until a sweep or a listing finds its revision set gone (emptied by a
sweep, or evicted by Redis) and removes it in one script (`forget_revision_ids`), so a
concurrent write that re-creates the set is never undone.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from adk_memory.store import RevisionRecord
from adk_memory_redis._banks import Banks
from adk_memory_redis._codec import decode_revision, live_at, text, to_us
from adk_memory_redis._config import RedisClient
from adk_memory_redis._connection import Connection
from adk_memory_redis._layout import Bank

# KEYS: the revision-ids set, then revision sets. ARGV: their memory ids. Forgets the ids whose
# revision set no longer exists, atomically (a write re-creating a set also re-adds its id).
_FORGET_REVISION_IDS_SCRIPT = """
for i = 2, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then redis.call('ZREM', KEYS[1], ARGV[i - 1]) end
end
return 0
"""


class Revisions:
    """The revision reads of one store."""

    def __init__(self, connection: Connection, banks: Banks) -> None:
        self._connection = connection
        self._banks = banks

    async def list_many(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> dict[str, list[RevisionRecord]]:
        """`list_revisions` of each id, in two pipelined round trips whatever their number.

        The first reads every revision set (with the bank's epoch check), the second every
        revision they name; an id whose set is empty costs nothing in the second.
        """
        unique = list(dict.fromkeys(memory_ids))

        def queue(pipe: Any, bank: Bank) -> None:
            for memory_id in unique:
                pipe.zrevrange(bank.revision_set(memory_id), 0, -1)

        async with self._connection.call("list revisions") as client:
            bank, replies = await self._banks.with_bank(client, bank_id, queue)
            sets = [[text(member) for member in members] for members in replies]
            async with client.pipeline(transaction=False) as pipe:
                for memory_id, revision_ids in zip(unique, sets, strict=True):
                    for revision_id in revision_ids:
                        pipe.hget(bank.revision(memory_id, revision_id), "data")
                raws = iter(await pipe.execute())
        return {
            memory_id: _live_newest_first([next(raws) for _ in revision_ids], now)
            for memory_id, revision_ids in zip(unique, sets, strict=True)
        }

    async def get(
        self, bank_id: str, memory_id: str, revision_id: str, now: datetime
    ) -> RevisionRecord | None:
        """One live revision, or None."""
        async with self._connection.call("read a revision") as client:
            _bank, replies = await self._banks.with_bank(
                client,
                bank_id,
                lambda pipe, bank: pipe.hget(bank.revision(memory_id, revision_id), "data"),
            )
        if replies[0] is None:
            return None
        revision = decode_revision(replies[0])
        return revision if revision.is_live(now) else None

    async def memory_ids(
        self, bank_id: str, now: datetime, *, after: str | None, limit: int
    ) -> list[str]:
        """One page of the ids of memories with live revisions, ascending.

        ZRANGEBYLEX over the bank's `rids` set reads the candidates in id order; the expiry of
        their revisions is then read in two pipelined round trips per `limit` candidates.
        """
        found: list[str] = []
        low = "-" if after is None else f"({after}"
        async with self._connection.call("list revision memory ids") as client:
            while len(found) < limit:

                def queue(pipe: Any, bank: Bank, low: str = low) -> None:
                    pipe.zrangebylex(bank.revision_ids, low, "+", start=0, num=limit)

                bank, replies = await self._banks.with_bank(client, bank_id, queue)
                candidates = [text(member) for member in replies[0]]
                found += await _with_live_revisions(client, bank, candidates, to_us(now))
                if len(candidates) < limit:
                    break
                low = f"({candidates[-1]}"
        return found[:limit]


async def _with_live_revisions(
    client: RedisClient, bank: Bank, memory_ids: list[str], now_us: int
) -> list[str]:
    """The ids among `memory_ids` with a revision live at `now_us`; forgets those with none."""
    async with client.pipeline(transaction=False) as pipe:
        for memory_id in memory_ids:
            pipe.zrange(bank.revision_set(memory_id), 0, -1)
        sets = [[text(rev) for rev in members] for members in await pipe.execute()]
    async with client.pipeline(transaction=False) as pipe:
        for memory_id, revision_ids in zip(memory_ids, sets, strict=True):
            for revision_id in revision_ids:
                pipe.hget(bank.revision(memory_id, revision_id), "live_until")
        lives = iter(await pipe.execute())
    live: list[str] = []
    for memory_id, revision_ids in zip(memory_ids, sets, strict=True):
        until = [next(lives) for _ in revision_ids]
        if any(live_at(value, now_us) for value in until):
            live.append(memory_id)
    await forget_revision_ids(
        client, bank, [i for i, revs in zip(memory_ids, sets, strict=True) if not revs]
    )
    return live


async def forget_revision_ids(client: RedisClient, bank: Bank, memory_ids: Sequence[str]) -> None:
    """Drops from the bank's `rids` those of `memory_ids` whose revision set is gone."""
    if memory_ids:
        keys = [bank.revision_ids, *(bank.revision_set(i) for i in memory_ids)]
        await client.eval(_FORGET_REVISION_IDS_SCRIPT, len(keys), *keys, *memory_ids)


def _live_newest_first(raws: Sequence[Any], now: datetime) -> list[RevisionRecord]:
    """The revisions live at `now` among stored `data` fields (None: evicted), newest first."""
    revisions = [decode_revision(raw) for raw in raws if raw is not None]
    live = [revision for revision in revisions if revision.is_live(now)]
    return sorted(live, key=lambda rev: (rev.create_time, rev.revision_id), reverse=True)
