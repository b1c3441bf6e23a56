"""The scope index of layout 2 (`_scope_index`): scope isolation, versions, the vector
cache against other writers, sweeps, and the in-place upgrade of a folder of layout 1."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import chromadb
import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore, _chroma, _journal
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import AUX, MEM, Chroma
from chromadb.api.models.Collection import Collection
from chromadb.config import Settings

from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.scope import scope_key
from adk_memory.store import MemoryStore, NearestQuery, ScanQuery, WriteBatch
from adk_memory.testing.conformance import BANK, DIM, KEY, SCOPE, T0, bank_record, memory, revision

NOW = T0 + timedelta(minutes=1)
OTHER = {"user_id": "u2"}
OTHER_KEY = scope_key(OTHER)


def unit_vectors(seed: int, count: int) -> list[tuple[float, ...]]:
    rng = np.random.default_rng(seed)
    vectors = rng.normal(size=(count, DIM))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    # float32-exact, so Chroma's stored vectors equal the reference store's
    return [tuple(float(v) for v in row.astype(np.float32)) for row in vectors]


async def top(store: MemoryStore, key: str, vector: tuple[float, ...], k: int = 5) -> list[str]:
    hits = await store.nearest(BANK, NearestQuery(key, vector, k, NOW))  # type: ignore[arg-type]
    return [hit.record.memory_id for hit in hits]


async def test_scope_version_changes_only_with_its_own_scope(store: ChromaMemoryStore) -> None:
    vectors = unit_vectors(1, 3)
    never = await store.scope_version(BANK, KEY)
    await store.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0]),)))
    created = await store.scope_version(BANK, KEY)
    assert created != never
    other = memory("b", vectors[1], scope=OTHER)
    await store.apply(BANK, WriteBatch(inserts=(other,)))
    assert await store.scope_version(BANK, KEY) == created
    await store.apply(BANK, WriteBatch(upserts=(memory("a", vectors[2], fact="changed"),)))
    updated = await store.scope_version(BANK, KEY)
    assert updated not in (created, never)
    await store.apply(BANK, WriteBatch(deletes=("b",)))  # in the other scope
    assert await store.scope_version(BANK, KEY) == updated
    await store.apply(BANK, WriteBatch(deletes=("a",)))
    assert await store.scope_version(BANK, KEY) not in (updated, created, never)


async def test_a_memory_moved_to_another_scope_leaves_the_first(store: ChromaMemoryStore) -> None:
    """Same id re-upserted in another scope: only the new scope finds it, both versions move."""
    vectors = unit_vectors(2, 2)
    await store.apply(BANK, WriteBatch(inserts=(memory("m", vectors[0]), memory("n", vectors[1]))))
    assert await top(store, KEY, vectors[0]) == ["m", "n"]
    before = (await store.scope_version(BANK, KEY), await store.scope_version(BANK, OTHER_KEY))
    await store.apply(BANK, WriteBatch(upserts=(memory("m", vectors[0], scope=OTHER),)))
    after = (await store.scope_version(BANK, KEY), await store.scope_version(BANK, OTHER_KEY))
    assert before[0] != after[0] and before[1] != after[1]
    assert await top(store, KEY, vectors[0]) == ["n"]
    assert await top(store, OTHER_KEY, vectors[0]) == ["m"]


async def test_a_reused_id_in_another_scope_after_a_delete_stays_apart(
    store: ChromaMemoryStore,
) -> None:
    vectors = unit_vectors(3, 1)
    await store.apply(BANK, WriteBatch(inserts=(memory("m", vectors[0]),)))
    assert await top(store, KEY, vectors[0]) == ["m"]  # cached
    await store.apply(BANK, WriteBatch(deletes=("m",)))
    await store.apply(BANK, WriteBatch(inserts=(memory("m", vectors[0], scope=OTHER),)))
    assert await top(store, KEY, vectors[0]) == []
    assert await top(store, OTHER_KEY, vectors[0]) == ["m"]


async def test_stale_index_ids_never_leak_another_scope(store: ChromaMemoryStore) -> None:
    """An index listing a memory of another scope (say, from a torn upgrade) is not believed."""
    vectors = unit_vectors(4, 2)
    await store.apply(BANK, WriteBatch(inserts=(memory("mine", vectors[0]),)))
    await store.apply(BANK, WriteBatch(inserts=(memory("theirs", vectors[1], scope=OTHER),)))
    aux = await store._chroma.collection(store._chroma.name(BANK, AUX))
    bucket = codec.scope_bucket("theirs")
    row = codec.index_rows(
        KEY, "forged", {bucket: {"theirs": codec.NEVER_US, "mine": codec.NEVER_US}}
    )
    await asyncio.to_thread(
        aux.upsert,
        ids=[r[0] for r in row],
        embeddings=[r[1] for r in row],
        metadatas=[r[3] for r in row],
    )
    assert await top(store, KEY, vectors[1]) == ["mine"]


async def test_the_cache_follows_other_stores_writes(tmp_path: Path) -> None:
    """Two stores on one folder: each one's cached vectors follow the other's writes."""
    first = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    second = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    vectors = unit_vectors(5, 3)
    try:
        await first.create_bank(bank_record())
        await first.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0]),)))
        assert await top(first, KEY, vectors[1]) == ["a"]
        await second.apply(BANK, WriteBatch(inserts=(memory("b", vectors[1]),)))
        assert await top(first, KEY, vectors[1]) == ["b", "a"]
        assert await top(second, KEY, vectors[1]) == ["b", "a"]
        await second.apply(BANK, WriteBatch(upserts=(memory("a", vectors[1]),)))
        await first.apply(BANK, WriteBatch(deletes=("b",)))
        assert await top(second, KEY, vectors[1]) == ["a"]
    finally:
        await first.aclose()
        await second.aclose()


async def test_the_cache_follows_writes_through_a_server(chroma_http_url: str) -> None:
    prefix = f"idx-{uuid.uuid4().hex[:8]}"
    first = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=prefix)
    second = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=prefix)
    vectors = unit_vectors(6, 2)
    try:
        await first.create_bank(bank_record())
        await first.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0]),)))
        assert await top(first, KEY, vectors[1]) == ["a"]
        await second.apply(BANK, WriteBatch(inserts=(memory("b", vectors[1]),)))
        assert await top(first, KEY, vectors[1]) == ["b", "a"]
        await second.apply(BANK, WriteBatch(deletes=("a",)))
        assert await top(first, KEY, vectors[1]) == ["b"]
    finally:
        await first.drop_all()
        await first.aclose()
        await second.aclose()


async def test_a_small_cache_evicts_and_stays_exact(tmp_path: Path) -> None:
    """A budget for about one scope: searches over many scopes stay exact, memory bounded."""
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}", vector_cache_mb=0.004)
    vectors = unit_vectors(7, 40)
    scopes = [{"user_id": f"u{i}"} for i in range(8)]
    records = [
        memory(f"m{i:02d}", vectors[i], scope=scopes[i % len(scopes)]) for i in range(len(vectors))
    ]
    reference = ReferenceMemoryStore()
    try:
        for target in (store, reference):
            await target.create_bank(bank_record())
            await target.apply(BANK, WriteBatch(inserts=tuple(records)))
        for _round in range(2):
            for scope in scopes:
                key = scope_key(scope)
                assert await top(store, key, vectors[0]) == await top(reference, key, vectors[0])
        assert store._scopes.cache._bytes <= 0.004 * 2**20
    finally:
        await store.aclose()


async def test_a_sweep_drops_expired_memories_from_their_scope(store: ChromaMemoryStore) -> None:
    vectors = unit_vectors(8, 2)
    soon = T0 + timedelta(seconds=30)
    await store.apply(
        BANK,
        WriteBatch(
            inserts=(memory("gone", vectors[0], expire_time=soon), memory("kept", vectors[1]))
        ),
    )
    version = await store.scope_version(BANK, KEY)
    assert await store.sweep_expired(BANK, NOW) == 1
    assert await store.scope_version(BANK, KEY) != version
    members = await store._scopes.members(
        await store._chroma.collection(store._chroma.name(BANK, AUX)), KEY
    )
    assert set(members) == {"kept"}


# Upgrade of a folder written by layout 1 (no scope index)


def write_layout_1(path: Path, records: list[Any]) -> None:
    """A folder as the code before the scope index wrote it: registry, memories, revisions."""
    client = chromadb.PersistentClient(
        path=str(path), settings=Settings(anonymized_telemetry=False)
    )
    registry = client.get_or_create_collection(
        "adkmem.banks", configuration={"hnsw": {"space": "l2"}}
    )
    memories = client.get_or_create_collection(
        f"adkmem.{BANK}.mem", configuration={"hnsw": {"space": "l2"}}
    )
    aux = client.get_or_create_collection(
        f"adkmem.{BANK}.aux", configuration={"hnsw": {"space": "l2"}}
    )

    def put(collection: Any, rows: list[codec.Row]) -> None:
        documents = [row[2] for row in rows]
        collection.upsert(
            ids=[row[0] for row in rows],
            embeddings=[row[1] for row in rows],
            documents=documents if any(d is not None for d in documents) else None,
            metadatas=[row[3] for row in rows],
        )

    put(registry, [codec.bank_row(bank_record())])
    put(memories, [codec.memory_row(record) for record in records])
    put(aux, [codec.revision_row(revision(record.memory_id, "r1")) for record in records])
    _chroma.close_client(client)


def layout_1_records() -> list[Any]:
    vectors = unit_vectors(9, 60)
    scopes = [SCOPE, OTHER, {"user_id": "u3"}]
    soon = T0 + timedelta(seconds=30)
    return [
        memory(
            f"m{i:02d}",
            vectors[i],
            scope=scopes[i % 3],
            expire_time=soon if i % 7 == 0 else None,
        )
        for i in range(60)
    ]


async def assert_like_reference(store: ChromaMemoryStore, records: list[Any]) -> None:
    reference = ReferenceMemoryStore()
    await reference.create_bank(bank_record())
    await reference.apply(BANK, WriteBatch(inserts=tuple(records)))
    for key in (KEY, OTHER_KEY, scope_key({"user_id": "u3"})):
        for probe in unit_vectors(10, 3):
            assert await top(store, key, probe, 10) == await top(reference, key, probe, 10)
    listed = [r.memory_id for r in await store.scan(BANK, ScanQuery(NOW))]
    assert listed == [r.memory_id for r in await reference.scan(BANK, ScanQuery(NOW))]


async def test_a_layout_1_folder_is_indexed_in_place_on_first_open(tmp_path: Path) -> None:
    records = layout_1_records()
    write_layout_1(tmp_path, records)
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    try:
        await assert_like_reference(store, records)
        memories = await store._chroma.collection(store._chroma.name(BANK, MEM))
        aux = await store._chroma.collection(store._chroma.name(BANK, AUX))
        assert (await store._journal.state(memories, aux)).indexed
        assert await store.scope_version(BANK, KEY) != ""
        # and it is a layout 2 bank from then on: writes keep the index
        extra = memory("new", unit_vectors(11, 1)[0])
        await store.apply(BANK, WriteBatch(inserts=(extra,)))
        assert await top(store, KEY, extra.embedding, 1) == ["new"]
    finally:
        await store.aclose()


async def test_an_upgrade_cut_short_is_redone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A crash before the layout mark leaves the bank unmarked; the next open indexes it again."""
    records = layout_1_records()
    write_layout_1(tmp_path, records)

    class Crash(BaseException):
        pass

    original: Callable[..., Any] = Collection.upsert

    def upsert(collection: Collection, *args: Any, **kwargs: Any) -> Any:
        if codec.LAYOUT_ID in kwargs.get("ids", []):
            raise Crash
        return original(collection, *args, **kwargs)

    monkeypatch.setattr(Collection, "upsert", upsert)
    crashed = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    with pytest.raises(Crash):
        await crashed.get_memories(BANK, ["m01"], NOW)
    monkeypatch.setattr(Collection, "upsert", original)
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    try:
        await assert_like_reference(store, records)
    finally:
        await store.aclose()
        await crashed.aclose()


async def test_concurrent_writers_of_one_scope_lose_no_index_entry(tmp_path: Path) -> None:
    """Two stores creating in one scope at once: the index lists every memory (read-modify-write
    of its buckets under the bank's journal lock)."""
    first = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    second = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    vectors = unit_vectors(12, 40)
    try:
        await first.create_bank(bank_record())
        await asyncio.gather(
            *(
                (first, second)[i % 2].apply(BANK, WriteBatch(inserts=(memory(f"m{i}", vector),)))
                for i, vector in enumerate(vectors)
            )
        )
        found = await top(first, KEY, vectors[0], 100)
        assert sorted(found) == sorted(f"m{i}" for i in range(40))
    finally:
        await first.aclose()
        await second.aclose()


# A scope's version is written in a batch's first call, before its memory rows: a search or a
# `scope_version` between the two must not cache what it read under the new version (it would
# miss the new memory until the scope's next write). Embedded, and through a server with a
# second store reading (no shared process state).


class PausedMemoryWrite:
    """Holds a store's next write with `action` (its memory rows by default) until `release`d."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, action: str = "write memories") -> None:
        self.paused = asyncio.Event()
        self.released = asyncio.Event()
        original = Chroma.write

        async def write(
            chroma: Chroma, step: str, collection: Any, rows: Sequence[codec.Row]
        ) -> None:
            if step == action and not self.released.is_set():
                self.paused.set()
                await self.released.wait()
            await original(chroma, step, collection, rows)

        monkeypatch.setattr(Chroma, "write", write)


@pytest.fixture(params=["embedded", "server"])
async def stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[ChromaMemoryStore, ChromaMemoryStore]]:
    """A writer and a reader on the same data (one instance embedded, as a process has)."""
    if request.param == "embedded":
        writer = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
        reader = writer
    else:
        url = request.getfixturevalue("chroma_http_url")
        prefix = f"fl-{uuid.uuid4().hex[:8]}"
        writer = ChromaMemoryStore.from_uri(url, collection_prefix=prefix)
        reader = ChromaMemoryStore.from_uri(url, collection_prefix=prefix)
    await writer.create_bank(bank_record())
    try:
        yield writer, reader
    finally:
        await writer.drop_all()
        await writer.aclose()
        await reader.aclose()


async def test_a_search_between_a_create_s_calls_caches_nothing_stale(
    stores: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = stores
    vectors = unit_vectors(21, 2)
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0], create_time=T0),)))
    assert await top(reader, KEY, vectors[1]) == ["a"]  # cached under the first version
    before = await reader.scope_version(BANK, KEY)
    pause = PausedMemoryWrite(monkeypatch)
    create = WriteBatch(inserts=(memory("b", vectors[1], create_time=T0),))
    writing = asyncio.create_task(writer.apply(BANK, create))
    await asyncio.wait_for(pause.paused.wait(), 30)
    assert await reader.scope_version(BANK, KEY) is None  # the head is new, the rows are not
    assert await top(reader, KEY, vectors[1]) == ["a"]
    pause.released.set()
    await writing
    after = await reader.scope_version(BANK, KEY)
    assert after not in (None, "", before)
    assert await top(reader, KEY, vectors[1]) == ["b", "a"]
    assert await top(reader, KEY, vectors[1]) == ["b", "a"]  # and from the cache


async def test_a_version_seen_complete_costs_no_more_reads_and_stays(
    stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    writer, reader = stores
    vectors = unit_vectors(22, 1)
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0], create_time=T0),)))
    first = await reader.scope_version(BANK, KEY)
    assert first not in (None, "")
    assert await reader.scope_version(BANK, KEY) == first
    hits = await reader.nearest(BANK, NearestQuery(KEY, vectors[0], 3, NOW))
    assert [hit.record.memory_id for hit in hits] == ["a"]


async def test_a_search_during_a_memory_slot_batch_sees_it_once_its_heads_are_written(
    stores: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of many memories writes its memory rows first and the scopes' heads last (with
    its revisions): a search in between keeps the old version and reads none of the batch's
    rows under it, and the next search sees the whole batch."""
    monkeypatch.setattr(_journal, "MEMORY_SLOT_ROWS", 2)
    writer, reader = stores
    vectors = unit_vectors(23, 3)
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vectors[0], create_time=T0),)))
    assert await top(reader, KEY, vectors[1]) == ["a"]
    before = await reader.scope_version(BANK, KEY)
    pause = PausedMemoryWrite(monkeypatch, "write revisions")
    many = WriteBatch(
        inserts=tuple(memory(i, v, create_time=T0) for i, v in zip("bc", vectors[1:], strict=True))
    )
    writing = asyncio.create_task(writer.apply(BANK, many))
    await asyncio.wait_for(pause.paused.wait(), 30)
    assert len(await reader.get_memories(BANK, ["b", "c"], NOW)) == 2  # its rows are written
    assert await reader.scope_version(BANK, KEY) == before
    assert await top(reader, KEY, vectors[1]) == ["a"]
    pause.released.set()
    await writing
    after = await reader.scope_version(BANK, KEY)
    assert after not in (None, "", before)
    assert (await top(reader, KEY, vectors[1]))[0] == "b"
    assert sorted(await top(reader, KEY, vectors[1])) == ["a", "b", "c"]  # and from the cache
