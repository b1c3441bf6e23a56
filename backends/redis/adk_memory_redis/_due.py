r"""The due index (`P:due:<kind>`): when each engine document of every bank is next due.

One store-wide sorted set per kind, of members `"B\x1f<key>"` scored by the due time (µs), so a
scheduler's tick is one ZRANGEBYSCORE whatever the number of banks. On one server a document's
entry is written in the same script or MULTI/EXEC as the document (`in_slot`). On a cluster it
lives in another slot: a write first lowers it (`ZADD LT`, so a crash after the document leaves it
early, never late), then writes the document, then sets it exactly (`index_around`).
`delete_bank` removes the bank's entries (ZSCAN); any left by a crash point at a bank or document
that no longer exists, and the engine removes them when it finds one.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

from adk_memory.store import DueDocument
from adk_memory_redis._codec import from_us, text, to_us
from adk_memory_redis._config import RedisClient
from adk_memory_redis._connection import Connection
from adk_memory_redis._layout import Bank, StoreKeys

_FORGET_CHUNK = 500
"""Members of a deleted bank removed per ZREM."""


class DueIndex:
    """Reads and writes the due sets of one store."""

    def __init__(self, connection: Connection, keys: StoreKeys) -> None:
        self._connection = connection
        self._keys = keys

    def in_slot(self, kind: str, bank: Bank) -> bool:
        """Whether the due set can be written with the bank's keys (one server: always)."""
        return self._connection.in_slot_of(self._keys.due(kind), self._keys.bank(bank.bank_id))

    async def documents(self, kind: str, now: datetime, *, limit: int) -> list[DueDocument]:
        """Due entries of one kind up to `now`, earliest first: one ZRANGEBYSCORE."""
        if limit <= 0:
            return []
        async with self._connection.call("list due documents") as client:
            found = await client.zrangebyscore(
                self._keys.due(kind), "-inf", to_us(now), start=0, num=limit, withscores=True
            )
        return [_due_document(text(member), float(score)) for member, score in cast(Any, found)]

    async def set(
        self,
        bank_id: str,
        kind: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool,
    ) -> None:
        """Sets (`ZADD`/`ZREM`) or lowers (`ZADD LT`) due entries, in one round trip."""
        self._keys.bank(bank_id)  # validates the id
        async with self._connection.call("index due documents") as client:
            async with client.pipeline(transaction=False) as pipe:
                for key, due in dues.items():
                    member = due_member(bank_id, key)
                    if due is not None:
                        pipe.zadd(self._keys.due(kind), {member: to_us(due)}, lt=only_earlier)
                    elif not only_earlier:
                        pipe.zrem(self._keys.due(kind), member)
                await pipe.execute()

    async def forget_bank(self, client: RedisClient, bank_id: str) -> None:
        """Removes a deleted bank's due entries (of every kind)."""
        async for due_key in client.scan_iter(match=self._keys.due("*"), count=1000):
            members = [
                member
                async for member, _score in client.zscan_iter(due_key, match=f"{bank_id}\x1f*")
            ]
            for start in range(0, len(members), _FORGET_CHUNK):
                await client.zrem(due_key, *members[start : start + _FORGET_CHUNK])


def due_member(bank_id: str, key: str) -> str:
    """A document's member in its kind's due set (bank ids hold no separator)."""
    return f"{bank_id}\x1f{key}"


def _due_document(member: str, score: float) -> DueDocument:
    bank_id, key = member.split("\x1f", 1)
    return DueDocument(bank_id, key, from_us(int(score)))
