"""Engine documents: one hash per kind, with their scope entries and due entries.

A kind's documents live in one hash (key -> JSON), with the scope each was written with (`dsk`,
and `dsc` to list one scope's) and, where it shares the bank's slot, its due entry.

A document is written by one script (`WRITE_DOCUMENT_SCRIPT`), alone (`Documents.put`) or in a
write batch's transaction (`_writer`), so its body, scope entries and due entry on one server
change together.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, cast

from redis.asyncio.cluster import RedisCluster

from adk_memory.errors import InvalidArgument, NotFound
from adk_memory.scope import ScopeKey
from adk_memory.store import DocumentRecord
from adk_memory_redis._banks import Banks
from adk_memory_redis._codec import text, to_us
from adk_memory_redis._connection import Connection
from adk_memory_redis._due import DueIndex, due_member
from adk_memory_redis._layout import Bank, StoreKeys

# KEYS: bank key, document hash, scope-tag hash, scope set, and the due set when it shares the
# bank's slot. ARGV: epoch, key, JSON, scope key ('' for none), due µs ('' for none), due member.
# 1 when written, 0 when the bank changed.
WRITE_DOCUMENT_SCRIPT = """
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


class Documents:
    """The document reads and writes of one store."""

    def __init__(
        self, connection: Connection, keys: StoreKeys, banks: Banks, due: DueIndex
    ) -> None:
        self._connection = connection
        self._keys = keys
        self._banks = banks
        self._due = due

    async def put(self, bank_id: str, document: DocumentRecord, encoded: str) -> None:
        """Writes one document atomically (with its due entry when in the bank's slot)."""
        async with self._connection.call("store a document") as client:
            for _attempt in range(3):
                bank = await self._banks.get(client, bank_id)
                keys, args = self.script(bank, document, encoded)
                if await client.eval(WRITE_DOCUMENT_SCRIPT, len(keys), *keys, *args):
                    return
                self._banks.forget(bank_id)
        raise NotFound(f"Memory bank {bank_id!r} does not exist.")

    def script(
        self, bank: Bank, document: DocumentRecord, encoded: str
    ) -> tuple[list[str], list[Any]]:
        """KEYS and ARGV of `WRITE_DOCUMENT_SCRIPT` for one document."""
        kind = document.kind
        keys = [
            self._keys.bank(bank.bank_id),
            bank.documents(kind),
            bank.document_scopes(kind),
            bank.scoped_documents(kind),
        ]
        if self._due.in_slot(kind, bank):
            keys.append(self._keys.due(kind))
        due = "" if document.due is None else to_us(document.due)
        member = due_member(bank.bank_id, document.key)
        return keys, [bank.epoch, document.key, encoded, document.scope_key or "", due, member]

    async def get(self, bank_id: str, kind: str, key: str) -> Mapping[str, Any] | None:
        """The document, or None."""
        async with self._connection.call("read a document") as client:
            try:
                _bank, replies = await self._banks.with_bank(
                    client, bank_id, lambda pipe, bank: pipe.hget(bank.documents(kind), key)
                )
            except NotFound:
                return None
        return None if replies[0] is None else cast(Mapping[str, Any], json.loads(replies[0]))

    async def of_kind(
        self, bank_id: str, kind: str, scope_key: ScopeKey | None
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """Every (key, body) of one kind in the bank (of one scope when given), ordered by key."""

        def queue(pipe: Any, bank: Bank) -> None:
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

        async with self._connection.call("list documents") as client:
            try:
                _bank, replies = await self._banks.with_bank(client, bank_id, queue)
            except NotFound:
                return []
        found = replies[0]
        pairs = found.items() if scope_key is None else zip(found[::2], found[1::2], strict=True)
        return sorted(((text(key), json.loads(raw)) for key, raw in pairs), key=lambda d: d[0])

    async def delete(self, bank_id: str, kind: str, key: str) -> None:
        """Deletes one document if it exists, with its due entry."""

        def queue(pipe: Any, bank: Bank) -> None:
            keys = [bank.documents(kind), bank.document_scopes(kind), bank.scoped_documents(kind)]
            if self._due.in_slot(kind, bank):
                keys.append(self._keys.due(kind))
            pipe.eval(_DELETE_DOCUMENT_SCRIPT, len(keys), *keys, key, due_member(bank_id, key))

        async with self._connection.call("delete a document") as client:
            try:
                await self._banks.with_bank(client, bank_id, queue)
            except NotFound:
                return
            if isinstance(client, RedisCluster):
                await client.zrem(self._keys.due(kind), due_member(bank_id, key))


def encode_document(kind: str, key: str, body: Mapping[str, Any]) -> str:
    """A document's JSON as stored in its kind's hash; `InvalidArgument` if not serialisable."""
    try:
        return json.dumps(dict(body))
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"Document {kind}/{key[:40]} is not JSON-serialisable.") from exc
