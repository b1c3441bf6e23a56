"""Concurrent writes on embedded Chroma (issue 18): writers of many scopes and of one scope, a
sweep, two store instances on one folder and batches spanning two scopes, all at once. After
each race every memory is where the writes put it: in its scope's search and scan, with its
revisions, no other scope's, and no journal left pending."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore, _store

from adk_memory.scope import scope_key
from adk_memory.store import MemoryRecord, NearestQuery, RevisionRecord, ScanQuery, WriteBatch
from adk_memory.testing.conformance import BANK, DIM, T0, bank_record, memory, revision

NOW = T0 + timedelta(hours=1)
SCOPES = [{"user_id": f"u{i}"} for i in range(4)]
KEYS = [scope_key(scope) for scope in SCOPES]


def vectors(seed: int, count: int) -> list[tuple[float, ...]]:
    rows = np.random.default_rng(seed).normal(size=(count, DIM))
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    return [tuple(float(v) for v in row.astype(np.float32)) for row in rows]


def created(memory_id: str, vector: tuple[float, ...], scope: int, **fields: object) -> WriteBatch:
    """What one create writes: the memory and its first revision."""
    record = memory(memory_id, vector, scope=SCOPES[scope], **fields)
    return WriteBatch(inserts=(record,), revisions=(revision_of(record),))


def revision_of(record: MemoryRecord, revision_id: str = "r1") -> RevisionRecord:
    return revision(
        record.memory_id,
        revision_id,
        fact=record.fact,
        scope=dict(record.scope),
        scope_key=record.scope_key,
    )


async def assert_scopes_hold(store: ChromaMemoryStore, expected: Mapping[str, set[str]]) -> None:
    """Each scope's search and scan list exactly `expected[key]`; each memory has revisions."""
    for key in KEYS:
        probe = vectors(99, 1)[0]
        hits = await store.nearest(BANK, NearestQuery(key, probe, 1000, NOW))
        scanned = await store.scan(BANK, ScanQuery(NOW, scope_key=key))
        assert {hit.record.memory_id for hit in hits} == expected.get(key, set()), key
        assert {record.memory_id for record in scanned} == expected.get(key, set()), key
        assert all(hit.record.scope_key == key for hit in hits)
    ids = [memory_id for members in expected.values() for memory_id in members]
    history = await store.list_revisions_many(BANK, ids, NOW)
    assert all(history[memory_id] for memory_id in ids), "a memory lost its revision"


async def assert_no_journal_pending(store: ChromaMemoryStore) -> None:
    memories = await store._collection(store._name(BANK, _store._MEM))
    aux = await store._collection(store._name(BANK, _store._AUX))
    assert (await store._state(memories, aux)).journals == []


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ChromaMemoryStore]:
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    await store.create_bank(bank_record())
    try:
        yield store
    finally:
        await store.aclose()


async def test_creates_of_many_scopes_and_of_one_scope_at_once_lose_nothing(
    store: ChromaMemoryStore,
) -> None:
    rows = vectors(1, 64)
    batches = [created(f"m{i:02d}", rows[i], i % 4 if i < 32 else 0) for i in range(64)]
    await asyncio.gather(*(store.apply(BANK, batch) for batch in batches))
    expected: dict[str, set[str]] = {}
    for i in range(64):
        expected.setdefault(KEYS[i % 4 if i < 32 else 0], set()).add(f"m{i:02d}")
    await assert_scopes_hold(store, expected)
    fresh = ChromaMemoryStore.from_uri(f"chroma://{store.config.path}")
    await assert_scopes_hold(fresh, expected)
    await assert_no_journal_pending(fresh)
    await fresh.aclose()


async def test_a_sweep_racing_creates_removes_only_what_expired(store: ChromaMemoryStore) -> None:
    rows = vectors(2, 40)
    expiring = [
        created(f"old{i:02d}", rows[i], i % 4, expire_time=NOW - timedelta(minutes=1))
        for i in range(20)
    ]
    for batch in expiring:
        await store.apply(BANK, batch)
    fresh = [created(f"new{i:02d}", rows[20 + i], i % 4) for i in range(20)]
    sweep = asyncio.create_task(store.sweep_expired(BANK, NOW))
    await asyncio.gather(*(store.apply(BANK, batch) for batch in fresh))
    assert await sweep >= 20  # the expired memories (and their revisions)
    expected: dict[str, set[str]] = {}
    for i in range(20):
        expected.setdefault(KEYS[i % 4], set()).add(f"new{i:02d}")
    await assert_scopes_hold(store, expected)
    await assert_no_journal_pending(store)


async def test_two_store_instances_on_one_folder_write_at_once_without_loss(
    tmp_path: Path,
) -> None:
    """Two instances (one file lock between them) create in all scopes and update one memory
    each other's way: nothing lost, the updated memory is one update's, whole."""
    first = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    second = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    rows = vectors(3, 41)
    try:
        await first.create_bank(bank_record())
        shared = memory("shared", rows[40], scope=SCOPES[0])
        await first.apply(BANK, WriteBatch(inserts=(shared,), revisions=(revision_of(shared),)))
        updates = [
            WriteBatch(
                upserts=(memory("shared", rows[i], scope=SCOPES[0], fact=f"take {i}"),),
                revisions=(revision("shared", f"r{i + 2:02d}", fact=f"take {i}"),),
            )
            for i in range(8)
        ]
        creates = [created(f"m{i:02d}", rows[i], i % 4) for i in range(32)]
        await asyncio.gather(
            *(
                (first, second)[i % 2].apply(BANK, batch)
                for i, batch in enumerate([*creates, *updates])
            )
        )
        expected: dict[str, set[str]] = {KEYS[0]: {"shared"}}
        for i in range(32):
            expected.setdefault(KEYS[i % 4], set()).add(f"m{i:02d}")
        third = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
        await assert_scopes_hold(third, expected)
        [record] = await third.get_memories(BANK, ["shared"], NOW)
        history = await third.list_revisions(BANK, "shared", NOW)
        assert len(history) == 9  # none of the updates' revisions lost
        assert record.fact in {f"take {i}" for i in range(8)}  # one update won, whole:
        [winner] = [update for update in updates if update.upserts[0].fact == record.fact]
        assert record.embedding == winner.upserts[0].embedding
        await assert_no_journal_pending(third)
        await third.aclose()
    finally:
        await first.aclose()
        await second.aclose()


async def test_batches_spanning_two_scopes_race_single_scope_writes(
    store: ChromaMemoryStore,
) -> None:
    """A batch inserting into scopes 0 and 1 and deleting from both, against creates of one
    scope each: every scope's index equals its memories."""
    rows = vectors(4, 80)
    for i in range(8):
        await store.apply(BANK, created(f"pre{i}", rows[i], i % 2))
    spanning = [
        WriteBatch(
            inserts=(
                memory(f"x{i}", rows[10 + i], scope=SCOPES[0]),
                memory(f"y{i}", rows[20 + i], scope=SCOPES[1]),
            ),
            deletes=(f"pre{2 * i}", f"pre{2 * i + 1}"),
            revisions=(
                revision(f"x{i}", "r1", scope=SCOPES[0], scope_key=KEYS[0]),
                revision(f"y{i}", "r1", scope=SCOPES[1], scope_key=KEYS[1]),
            ),
        )
        for i in range(4)
    ]
    single = [created(f"s{i:02d}", rows[40 + i], i % 2) for i in range(24)]
    await asyncio.gather(*(store.apply(BANK, batch) for batch in [*spanning, *single]))
    expected: dict[str, set[str]] = {
        KEYS[0]: {f"x{i}" for i in range(4)} | {f"s{i:02d}" for i in range(0, 24, 2)},
        KEYS[1]: {f"y{i}" for i in range(4)} | {f"s{i:02d}" for i in range(1, 24, 2)},
    }
    await assert_scopes_hold(store, expected)
    await assert_no_journal_pending(store)
