"""The index name carries the bank's hash tag; a bank indexed under the old name is upgraded.

Before Redis Cluster support the index of a bank was named `P:idx:B:E`, with no hash tag. A store
of this version that meets such a bank builds the new index (`{P:B}:E:idx`) from the stored
memories on first use, waits until it has read them all, and drops the old one.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import redis.asyncio as aredis
from adk_memory_redis import RedisMemoryStore
from redis.commands.search.index_definition import IndexDefinition

from adk_memory.store import NearestQuery, ScanQuery, WriteBatch
from adk_memory.testing.conformance import KEY, bank_record, memory, unit

T = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


async def _index_names(client: aredis.Redis, prefix: str) -> list[str]:
    names = [name.decode() for name in await client.execute_command("FT._LIST")]
    return sorted(name for name in names if prefix in name)


async def test_a_bank_indexed_under_the_old_name_is_reindexed_and_answers_whole(
    redis_url: str,
) -> None:
    prefix = f"old-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore.from_uri(redis_url, key_prefix=prefix)
    raw = aredis.Redis.from_url(redis_url)
    try:
        await store.create_bank(bank_record("b1"))
        records = tuple(memory(f"m{i:04d}", unit(i % 8)) for i in range(2000))
        await store.apply("b1", WriteBatch(inserts=records))
        bank = store._banks.cached["b1"]
        assert await _index_names(raw, prefix) == [bank.index_name]
        assert bank.index_name == f"{{{prefix}:b1}}:{bank.epoch}:idx"
        # What an older version left: the same index under the old name, and no new one.
        await raw.execute_command("FT.DROPINDEX", bank.index_name)
        await raw.ft(bank.legacy_index_name).create_index(
            store._index.schema(bank).redis_fields,
            definition=IndexDefinition(prefix=[f"{bank.base}m:"]),
        )
        upgraded = RedisMemoryStore.from_uri(redis_url, key_prefix=prefix)
        try:
            hits = await upgraded.nearest("b1", NearestQuery(KEY, unit(3), 300, T))
            assert [hit.distance for hit in hits[:250]] == [0.0] * 250  # all 250 at unit(3)
            assert hits[250].distance > 1.0
            listed = await upgraded.scan("b1", ScanQuery(T, KEY))
            assert len(listed) == 2000
            assert await _index_names(raw, prefix) == [bank.index_name]
        finally:
            await upgraded.aclose()
    finally:
        await store.drop_all()
        await store.aclose()
        await raw.aclose()
