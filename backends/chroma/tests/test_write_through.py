"""The vector cache's write-through (`_vectors.ScopeWrite`): after a batch this store committed,
its cached scopes are, at the batch's version, exactly what a cold read of Chroma returns; any
other writer in between, or a batch not committed whole, leaves nothing stale believed."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore, _vectors
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import AUX, MEM, Chroma
from test_scope_index import PausedMemoryWrite

from adk_memory.errors import StoreUnavailable
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.scope import scope_key
from adk_memory.store import MemoryRecord, NearestQuery, WriteBatch
from adk_memory.testing.conformance import BANK, DIM, KEY, T0, bank_record, memory

NOW = T0 + timedelta(minutes=1)
SCOPES = [{"user_id": f"u{i}"} for i in range(3)]
KEYS = [scope_key(scope) for scope in SCOPES]
ELSEWHERE = {"user_id": "elsewhere"}

Snapshot = dict[str, tuple[tuple[float, ...], int]]


def vector(rng: random.Random, dim: int = DIM) -> tuple[float, ...]:
    """Not float32-exact: the cache must hold what Chroma stores (float32), not what was sent."""
    return tuple(rng.gauss(0.0, 1.0) for _ in range(dim))


async def cache_key(store: ChromaMemoryStore, key: str) -> tuple[str, str]:
    memories = await store._chroma.collection(store._chroma.name(BANK, MEM))
    return (str(memories.id), key)


async def cached(store: ChromaMemoryStore, key: str) -> _vectors.ScopeVectors | None:
    return store._scopes.cache._entries.get(await cache_key(store, key))


def snapshot(entry: _vectors.ScopeVectors) -> Snapshot:
    rows = entry.vectors.matrix.astype(np.float64)
    return {
        memory_id: (tuple(map(float, rows[at])), int(entry.live_us[at]))
        for at, memory_id in enumerate(entry.vectors.ids)
    }


async def cold(store: ChromaMemoryStore, key: str) -> Snapshot:
    """The scope as `store` reads it from Chroma, nothing cached; the cache is left as it was.

    (Embedded, it is every store's of the folder: a check must not reset what it checks.)
    """
    cache, at = store._scopes.cache, await cache_key(store, key)
    kept = cache._entries.get(at)
    cache.drop(at)
    memories = await store._chroma.collection(store._chroma.name(BANK, MEM))
    aux = await store._chroma.collection(store._chroma.name(BANK, AUX))
    read = snapshot(await store._scopes.vectors(BANK, memories, aux, key, False))
    cache.drop(at)
    if kept is not None:
        cache.put(kept)
    return read


async def top(store: ChromaMemoryStore, key: str, query: Sequence[float], k: int = 5) -> list[str]:
    hits = await store.nearest(BANK, NearestQuery(key, tuple(query), k, NOW))
    return [hit.record.memory_id for hit in hits]


async def assert_written_through(writer: ChromaMemoryStore, reader: ChromaMemoryStore) -> None:
    """Every scope is cached by `writer` at its version, equal to `reader`'s cold read."""
    for key in KEYS:
        version = await writer.scope_version(BANK, key)
        entry = await cached(writer, key)
        assert entry is not None and entry.version == version
        assert snapshot(entry) == await cold(reader, key)


@pytest.fixture(params=["embedded", "server"])
async def two_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[ChromaMemoryStore, ChromaMemoryStore]]:
    """Two stores on the same bank: on one folder (one process may), or through a server."""
    if request.param == "embedded":
        locations = [f"chroma://{tmp_path}"] * 2
        options: dict[str, Any] = {}
    else:
        locations = [request.getfixturevalue("chroma_http_url")] * 2
        options = {"collection_prefix": f"wt-{uuid.uuid4().hex[:8]}"}
    first, second = (ChromaMemoryStore.from_uri(where, **options) for where in locations)
    await first.create_bank(bank_record())
    try:
        yield first, second
    finally:
        await first.drop_all()
        await first.aclose()
        await second.aclose()


class RandomBatches:
    """Random batches over a few scopes, the live memories known to the test."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.live: dict[str, MemoryRecord] = {}
        self.next_id = 0

    def create(self) -> WriteBatch:
        self.next_id += 1
        record = memory(
            f"m{self.next_id:03d}",
            vector(self.rng),
            scope=self.rng.choice(SCOPES),
            expire_time=self.rng.choice([None, T0 + timedelta(seconds=30), T0 + timedelta(days=1)]),
        )
        self.live[record.memory_id] = record
        return WriteBatch(inserts=(record,))

    def change(self, memory_id: str) -> WriteBatch:
        """An update of one kind: vector, metadata only, expiry only, scope (a move) or delete."""
        record = self.live[memory_id]
        kind = self.rng.choice(["vector", "metadata", "expiry", "move", "delete"])
        if kind == "delete":
            del self.live[memory_id]
            return WriteBatch(deletes=(memory_id,))
        fields: dict[str, Any] = {
            "vector": {"embedding": vector(self.rng)},
            "metadata": {"metadata": {"n": self.rng.randrange(100)}, "fact": "changed"},
            "expiry": {"expire_time": T0 + timedelta(seconds=self.rng.choice([10, 3600]))},
            "move": {"scope": self.rng.choice(SCOPES)},
        }[kind]
        scope = fields.pop("scope", record.scope)
        values = {
            "scope": scope,
            "expire_time": record.expire_time,
            "metadata": record.metadata,
            **fields,
        }
        updated = memory(memory_id, fields.get("embedding", record.embedding), **values)
        self.live[memory_id] = updated
        return WriteBatch(upserts=(updated,))

    def batches(self) -> list[WriteBatch]:
        """One batch, or several on distinct memories (written as one group)."""
        count = self.rng.choice([1, 1, 3])
        chosen = self.rng.sample(sorted(self.live), min(count, len(self.live)))
        batches = [self.change(memory_id) for memory_id in chosen]
        return [*batches, self.create()] if self.rng.random() < 0.4 else batches or [self.create()]


async def test_random_batches_leave_each_cached_scope_as_a_cold_read(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    writer, reader = two_stores
    batches = RandomBatches(seed=18)
    for _ in range(6):
        await writer.apply(BANK, batches.create())
    await assert_written_through(writer, reader)  # new scopes: cached from their first write
    for step in range(40):
        if step % 10 == 9:
            await writer.sweep_expired(BANK, NOW)  # a sweep is a batch of deletes as well
            batches.live = {
                memory_id: record
                for memory_id, record in batches.live.items()
                if record.is_live(NOW)
            }
        else:
            await asyncio.gather(*(writer.apply(BANK, batch) for batch in batches.batches()))
        await assert_written_through(writer, reader)
        query = vector(batches.rng)
        for key in KEYS:
            assert await top(writer, key, query) == await top(reader, key, query)


async def test_a_group_commit_over_several_scopes_writes_each_through(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    writer, reader = two_stores
    rng = random.Random(2)
    for index, scope in enumerate(SCOPES):
        await writer.apply(
            BANK, WriteBatch(inserts=(memory(f"s{index}", vector(rng), scope=scope),))
        )
    group = [
        WriteBatch(inserts=(memory(f"g{i}", vector(rng), scope=SCOPES[i % 3]),)) for i in range(9)
    ]
    group.append(WriteBatch(upserts=(memory("s0", vector(rng), scope=SCOPES[1]),)))  # a move
    group.append(WriteBatch(deletes=("s2",)))
    await asyncio.gather(*(writer.apply(BANK, batch) for batch in group))
    await assert_written_through(writer, reader)
    assert sorted(snapshot(await cached(writer, KEYS[1]))) == ["g1", "g4", "g7", "s0", "s1"]  # type: ignore[arg-type]


async def test_another_writer_in_between_drops_the_entry(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    first, second = two_stores
    rng = random.Random(3)
    vectors = [vector(rng) for _ in range(4)]
    await first.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0]),)))
    assert await top(first, KEY, vectors[1]) == ["a"]
    await second.apply(BANK, WriteBatch(inserts=(memory("b", vectors[1]),)))
    await first.apply(BANK, WriteBatch(inserts=(memory("c", vectors[2]),)))
    entry = await cached(first, KEY)
    if first._chroma.on_server():
        assert entry is None  # it missed "b": not advanced, dropped
    else:  # the stores of one process on a folder share the cache: "b" went through it too
        assert entry is not None and snapshot(entry) == await cold(first, KEY)
    assert sorted(await top(first, KEY, vectors[1])) == ["a", "b", "c"]
    await second.apply(BANK, WriteBatch(deletes=("a",)))
    await first.apply(BANK, WriteBatch(upserts=(memory("c", vectors[3], fact="again"),)))
    assert sorted(await top(first, KEY, vectors[3])) == ["b", "c"]
    assert sorted(await top(second, KEY, vectors[3])) == ["b", "c"]


async def test_the_stores_of_a_folder_share_one_cache_and_its_write_through(
    tmp_path: Path,
) -> None:
    """Embedded, one store's batch advances what another store of the process cached (the ADK
    service searches with one store what it generated with another); a store with another
    budget keeps a cache of its own."""
    reader, writer, other = (
        ChromaMemoryStore.from_uri(f"chroma://{tmp_path}", vector_cache_mb=budget)
        for budget in (256, 256, 8)
    )
    await writer.create_bank(bank_record())
    try:
        rng = random.Random(5)
        query = vector(rng)
        await writer.apply(BANK, WriteBatch(inserts=(memory("a", vector(rng)),)))
        assert await top(reader, KEY, query) == ["a"]
        await writer.apply(BANK, WriteBatch(inserts=(memory("b", query),)))
        entry = await cached(reader, KEY)
        assert entry is not None and entry.version == await reader.scope_version(BANK, KEY)
        assert snapshot(entry) == await cold(writer, KEY)
        assert await top(reader, KEY, query) == ["b", "a"]
        assert await top(other, KEY, query) == ["b", "a"]
        assert other._scopes.cache is not reader._scopes.cache is writer._scopes.cache
    finally:
        await writer.drop_all()
        for store in (reader, writer, other):
            await store.aclose()


async def test_another_writer_in_another_scope_leaves_the_entry_advancing(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    first, second = two_stores
    rng = random.Random(4)
    await first.apply(BANK, WriteBatch(inserts=(memory("a", vector(rng)),)))
    await second.apply(BANK, WriteBatch(inserts=(memory("b", vector(rng), scope=ELSEWHERE),)))
    await first.apply(BANK, WriteBatch(inserts=(memory("c", vector(rng)),)))
    entry = await cached(first, KEY)
    assert entry is not None and entry.version == await first.scope_version(BANK, KEY)
    assert snapshot(entry) == await cold(second, KEY)


class FailingMemoryWrites:
    """Chroma fails every write of `action` until `stop`ped (a store's own retry included)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, action: str) -> None:
        self.failing = True
        original = Chroma.write

        async def write(
            chroma: Chroma, what: str, collection: Any, rows: Sequence[codec.Row]
        ) -> None:
            if what == action and self.failing:
                raise StoreUnavailable("Chroma went away")
            await original(chroma, what, collection, rows)

        monkeypatch.setattr(Chroma, "write", write)


@pytest.mark.parametrize("action", ["write a batch and its journal", "write memories"])
async def test_a_batch_not_committed_whole_is_never_cached(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
    monkeypatch: pytest.MonkeyPatch,
    action: str,
) -> None:
    """Failing on its commit (nothing happened) or after it (completed on the next use)."""
    writer, reader = two_stores
    rng = random.Random(5)
    vectors = [vector(rng) for _ in range(2)]
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0]),)))
    before = await writer.scope_version(BANK, KEY)
    fault = FailingMemoryWrites(monkeypatch, action)
    with pytest.raises(StoreUnavailable):
        await writer.apply(BANK, WriteBatch(inserts=(memory("b", vectors[1]),)))
    fault.failing = False
    entry = await cached(writer, KEY)
    assert entry is not None and entry.version == before  # not advanced
    expected = ["a"] if action.startswith("write a batch") else ["b", "a"]
    assert await top(writer, KEY, vectors[1]) == expected
    assert await top(reader, KEY, vectors[1]) == expected


async def test_a_search_of_the_writer_between_its_calls_leaves_the_entry_exact(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer's own search while its memory rows are not yet written caches nothing that
    the write-through would then advance wrongly."""
    writer, reader = two_stores
    rng = random.Random(8)
    vectors = [vector(rng) for _ in range(2)]
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0]),)))
    pause = PausedMemoryWrite(monkeypatch)
    writing = asyncio.create_task(
        writer.apply(BANK, WriteBatch(upserts=(memory("a", vectors[1]), memory("b", vectors[1]))))
    )
    await asyncio.wait_for(pause.paused.wait(), 30)
    assert await top(writer, KEY, vectors[1]) == ["a"]
    pause.released.set()
    await writing
    entry = await cached(writer, KEY)
    assert entry is not None and entry.version == await writer.scope_version(BANK, KEY)
    assert snapshot(entry) == await cold(reader, KEY)
    assert sorted(await top(writer, KEY, vectors[1])) == ["a", "b"]


async def test_write_through_keeps_the_byte_budget_and_stays_exact(tmp_path: Path) -> None:
    budget_mb = 0.004  # about one scope of these
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}", vector_cache_mb=budget_mb)
    reference = ReferenceMemoryStore()
    rng = np.random.default_rng(6)
    scopes = [{"user_id": f"u{i}"} for i in range(8)]
    try:
        for target in (store, reference):
            await target.create_bank(bank_record())
        for i in range(40):
            row = rng.normal(size=DIM).astype(np.float32)  # float32-exact: as the reference
            record = memory(f"m{i:02d}", tuple(map(float, row)), scope=scopes[i % 8])
            for target in (store, reference):
                await target.apply(BANK, WriteBatch(inserts=(record,)))
            assert store._scopes.cache._bytes <= budget_mb * 2**20
        query = tuple(map(float, rng.normal(size=DIM)))
        for scope in scopes:
            key = scope_key(scope)
            hits = await reference.nearest(BANK, NearestQuery(key, query, 5, NOW))
            assert await top(store, key, query) == [hit.record.memory_id for hit in hits]
    finally:
        await store.aclose()


async def test_a_new_dimension_after_emptying_the_bank_is_searched_exactly(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    writer, reader = two_stores
    rng = random.Random(7)
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vector(rng)),)))
    await writer.apply(BANK, WriteBatch(deletes=("a",)))
    wider = vector(rng, DIM + 1)
    await writer.apply(BANK, WriteBatch(inserts=(memory("b", wider),)))
    assert await top(writer, KEY, wider) == ["b"]
    assert await top(reader, KEY, wider) == ["b"]


def test_rows_of_another_dimension_cannot_advance_an_entry() -> None:
    entry = _vectors.ScopeVectors.build(("c", "s"), "v1", ["a"], [[1.0] * DIM], {"a": 5})
    row = memory("b", (1.0,) * (DIM + 1))
    rows = [codec.memory_row(row)]
    write = _vectors.ScopeWrite("v2", "v1", frozenset({"b"}), rows, _vectors.as_read_embedded)
    assert entry.after(write) is None
    same = _vectors.ScopeWrite("v2", "v1", frozenset({"a"}), [], _vectors.as_read_embedded)
    emptied = entry.after(same)
    assert emptied is not None and emptied.vectors.ids == () and emptied.version == "v2"
