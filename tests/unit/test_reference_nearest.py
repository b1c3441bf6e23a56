"""The reference store's nearest search (a partial ranking grown on demand) against brute force."""

from __future__ import annotations

import random
from datetime import timedelta

import numpy as np
import pytest

from adk_memory.filters import Condition, Op
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.store import MemoryRecord, NearestQuery, WriteBatch
from adk_memory.testing.conformance import BANK, DIM, KEY, T0, bank_record, memory


def _records(rng: random.Random, count: int) -> list[MemoryRecord]:
    """Random vectors with many exact duplicates (ties), some expired, a metadata flag."""
    base = [tuple(rng.gauss(0, 1) for _ in range(DIM)) for _ in range(count // 4)]
    records = []
    for number in range(count):
        vector = base[number % len(base)] if number % 3 == 0 else rng.choice(base)
        expired = number % 5 == 0
        records.append(
            memory(
                f"m{rng.randrange(10**6):06d}-{number}",
                vector,
                expire_time=T0 - timedelta(seconds=1) if expired else None,
                metadata={"keep": number % 7 == 0},
            )
        )
    return records


def _brute_force(records: list[MemoryRecord], query: NearestQuery, keep_only: bool) -> list:
    target = np.asarray(query.vector, dtype=np.float64)
    eligible = [
        record
        for record in records
        if record.is_live(query.now) and (not keep_only or record.metadata["keep"])
    ]
    scored = [
        (float(np.linalg.norm(np.asarray(record.embedding) - target)), record.memory_id)
        for record in eligible
    ]
    return sorted(scored)[: query.k]


@pytest.mark.parametrize("k", [1, 10, 100, 400])
@pytest.mark.parametrize("keep_only", [False, True])
async def test_nearest_equals_brute_force_with_ties_expiry_and_filters(
    k: int, keep_only: bool
) -> None:
    rng = random.Random(k)
    store = ReferenceMemoryStore()
    await store.create_bank(bank_record())
    records = _records(rng, 600)
    await store.apply(BANK, WriteBatch(inserts=tuple(records)))
    flag = Condition("metadata.keep", Op.EQ, True) if keep_only else None
    for _ in range(5):
        vector = records[rng.randrange(len(records))].embedding  # exact ties at distance 0
        query = NearestQuery(KEY, vector, k, T0, filter=flag)
        hits = await store.nearest(BANK, query)
        got = [(hit.distance, hit.record.memory_id) for hit in hits]
        want = _brute_force(records, query, keep_only)
        assert [memory_id for _, memory_id in got] == [memory_id for _, memory_id in want]
        assert np.allclose([d for d, _ in got], [d for d, _ in want], rtol=0, atol=1e-12)


async def test_a_write_drops_only_the_index_of_its_scope() -> None:
    store = ReferenceMemoryStore()
    await store.create_bank(bank_record())
    other = {"user_id": "someone else"}
    first = memory("a", tuple([1.0] + [0.0] * (DIM - 1)))
    elsewhere = memory("b", tuple([1.0] + [0.0] * (DIM - 1)), scope=other)
    await store.apply(BANK, WriteBatch(inserts=(first, elsewhere)))
    query = NearestQuery(KEY, first.embedding, 5, T0)
    assert [hit.record.memory_id for hit in await store.nearest(BANK, query)] == ["a"]
    added = memory("c", tuple([0.0, 1.0] + [0.0] * (DIM - 2)))
    await store.apply(BANK, WriteBatch(inserts=(added,)))
    assert [hit.record.memory_id for hit in await store.nearest(BANK, query)] == ["a", "c"]
    await store.apply(BANK, WriteBatch(deletes=("a",)))
    assert [hit.record.memory_id for hit in await store.nearest(BANK, query)] == ["c"]


async def test_a_tie_wider_than_the_first_pool_still_breaks_by_id() -> None:
    """200 copies of one vector: the k smallest ids win, wherever the partition cut them."""
    store = ReferenceMemoryStore()
    await store.create_bank(bank_record())
    vector = tuple([1.0] + [0.0] * (DIM - 1))
    ids = [f"m{number:03d}" for number in random.Random(3).sample(range(1000), 200)]
    await store.apply(BANK, WriteBatch(inserts=tuple(memory(i, vector) for i in ids)))
    hits = await store.nearest(BANK, NearestQuery(KEY, vector, 10, T0))
    assert [hit.record.memory_id for hit in hits] == sorted(ids)[:10]
