"""Embedded Chroma's mirrors: scope versions (`HeadMirror`) and memory rows (`RecordMirror`)
known in the process, never stale.

The directory is this process's alone, so what a writer committed is what is stored; the
attacks here are the ways a mirror could be wrong: a read racing a write, a write cut short, a
replayed journal, a second store on the directory, a bank created again, a field removed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore, _records, _scope_index
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import Chroma
from adk_memory_chroma._journal import Journal
from adk_memory_chroma._scope_index import HeadMirror, ScopeIndex

from adk_memory.errors import StoreUnavailable
from adk_memory.store import DocumentRecord, NearestQuery, TopicRef, WriteBatch
from adk_memory.testing.conformance import BANK, DIM, KEY, T0, bank_record, memory

NOW = T0 + timedelta(minutes=1)


def vector(position: int) -> tuple[float, ...]:
    return tuple(1.0 if index == position else 0.0 for index in range(DIM))


@pytest.fixture
async def pair(tmp_path: Path) -> AsyncIterator[tuple[ChromaMemoryStore, ChromaMemoryStore]]:
    """Two stores of this process on one directory (they share its mirror)."""
    writer = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'db'}")
    reader = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'db'}")
    await writer.create_bank(bank_record())
    try:
        yield writer, reader
    finally:
        await writer.aclose()
        await reader.aclose()


def fail_memory_writes(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Makes writes of memory rows fail (Chroma gone mid-batch); returns what undoes it."""
    original = Chroma.write

    async def failing(chroma: Chroma, step: str, collection: Any, rows: Any) -> None:
        if step == "write memories":
            raise StoreUnavailable("Chroma went away mid-batch.")
        await original(chroma, step, collection, rows)

    monkeypatch.setattr(Chroma, "write", failing)
    return lambda: monkeypatch.setattr(Chroma, "write", original)


class IndexReads:
    """Counts the Chroma reads of scope heads ("read a scope's index") and of winners."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.winners = 0
        original = Chroma.call

        async def call(chroma: Chroma, action: str, method: Any, **kwargs: Any) -> Any:
            if action == "read a scope's index":
                self.count += 1
            if action == "read nearest memories":
                self.winners += 1
            return await original(chroma, action, method, **kwargs)

        monkeypatch.setattr(Chroma, "call", call)


async def test_a_committed_version_costs_no_read_in_any_store_of_the_process(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = pair
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vector(0)),)))
    assert [hit.record.memory_id for hit in await reader.nearest(BANK, _query(0))] == ["a"]
    reads = IndexReads(monkeypatch)
    await writer.apply(BANK, WriteBatch(inserts=(memory("b", vector(1)),)))
    version = await reader.scope_version(BANK, KEY)
    assert version not in (None, "")
    assert [hit.record.memory_id for hit in await reader.nearest(BANK, _query(1))] == ["b", "a"]
    assert await writer.scope_version(BANK, KEY) == version
    assert reads.count == 0
    assert reads.winners == 0


async def test_winners_from_the_mirror_equal_what_chroma_returns(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every field, as a read of the stored row decodes it, through an update that removes a
    metadata key and a topic and sets an expiry, and a delete."""
    writer, reader = pair
    full = memory(
        "a",
        vector(0),
        metadata={"kept": "yes", "dropped": 2},
        topics=(TopicRef(managed="USER_PREFERENCES"),),
    )
    await writer.apply(BANK, WriteBatch(inserts=(full, memory("b", vector(1)))))
    fewer = memory(
        "a",
        vector(2),
        fact="changed",
        metadata={"kept": "yes"},
        update_time=T0 + timedelta(seconds=1),
        expire_time=T0 + timedelta(days=1),
    )
    await writer.apply(BANK, WriteBatch(upserts=(fewer,), deletes=("b",)))
    reads = IndexReads(monkeypatch)
    hits = await reader.nearest(BANK, _query(2, k=5))
    assert reads.winners == 0
    stored = await reader.get_memories(BANK, ["a", "b"], NOW)  # read from Chroma
    assert [hit.record for hit in hits] == stored
    assert stored[0].metadata == {"kept": "yes"} and stored[0].topics == ()
    past_expiry = NearestQuery(KEY, vector(2), 5, T0 + timedelta(days=2))
    assert await reader.nearest(BANK, past_expiry) == []


async def test_a_write_cut_short_leaves_its_rows_to_be_read(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = pair
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vector(0)),)))
    restore = fail_memory_writes(monkeypatch)
    changed = memory("a", vector(0), fact="changed", update_time=T0 + timedelta(seconds=1))
    with pytest.raises(StoreUnavailable):
        await writer.apply(BANK, WriteBatch(upserts=(changed,)))
    mirror = writer._journal.records
    assert mirror is not None
    assert mirror.live_records(BANK, str((await _memories(writer)).id), ["a"], 0) is None
    restore()
    hits = await reader.nearest(BANK, _query(0))
    assert [hit.record.fact for hit in hits] == ["changed"]  # the replayed batch, read


async def test_a_read_that_straddles_a_write_never_puts_back_the_old_version(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A head read from Chroma before a write commits, whose answer comes after, is not kept:
    the next search sees the write (without it, the old version would be served for good)."""
    writer, reader = pair
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vector(0)),)))
    # Nothing known of the bank: the next head is read from Chroma.
    mirror = writer._journal.heads
    assert mirror is not None
    mirror.forget(BANK)
    read_done, resume = asyncio.Event(), asyncio.Event()
    original = ScopeIndex.read

    async def slow_read(index: ScopeIndex, *args: Any, **kwargs: Any) -> Any:
        found = await original(index, *args, **kwargs)
        if not resume.is_set():
            read_done.set()
            await resume.wait()
        return found

    monkeypatch.setattr(ScopeIndex, "read", slow_read)
    stale = asyncio.create_task(reader.scope_version(BANK, KEY))
    await asyncio.wait_for(read_done.wait(), 10)
    await writer.apply(BANK, WriteBatch(inserts=(memory("b", vector(1)),)))
    new = await writer.scope_version(BANK, KEY)
    resume.set()  # the held read answers after the write
    old = await stale
    assert old != new
    assert await reader.scope_version(BANK, KEY) == new
    assert [hit.record.memory_id for hit in await reader.nearest(BANK, _query(1))] == ["b", "a"]


async def test_a_write_cut_short_leaves_its_scope_to_be_read_again(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = pair
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vector(0)),)))
    before = await reader.scope_version(BANK, KEY)
    restore = fail_memory_writes(monkeypatch)
    with pytest.raises(StoreUnavailable):
        await writer.apply(BANK, WriteBatch(inserts=(memory("b", vector(1)),)))
    mirror = writer._journal.heads
    assert mirror is not None and mirror.known(BANK, str((await _memories(writer)).id), KEY) is None
    restore()
    # The next use replays the batch's journal; the version is then the batch's, read again.
    await writer.apply(BANK, WriteBatch(inserts=(memory("c", vector(2)),)))
    after = await reader.scope_version(BANK, KEY)
    assert after not in (None, before)
    found = [hit.record.memory_id for hit in await reader.nearest(BANK, _query(1, k=5))]
    assert sorted(found) == ["a", "b", "c"]


async def test_a_replay_forgets_what_was_known_of_the_bank(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    writer, _ = pair
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vector(0)),)))
    memories = await _memories(writer)
    mirror = writer._journal.heads
    assert mirror is not None and mirror.known(BANK, str(memories.id), KEY) not in (None, "")
    aux = await writer._chroma.collection(writer._chroma.name(BANK, "aux"))
    await writer._journal.replay(BANK, memories, aux)
    assert mirror.known(BANK, str(memories.id), KEY) is None


async def test_a_bank_created_again_knows_nothing_of_the_old_one(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    writer, reader = pair
    await writer.apply(BANK, WriteBatch(inserts=(memory("a", vector(0)),)))
    assert await reader.scope_version(BANK, KEY) not in (None, "")
    await writer.delete_bank(BANK)
    await writer.create_bank(bank_record())
    assert await reader.scope_version(BANK, KEY) == ""
    assert await reader.nearest(BANK, _query(0)) == []
    mirror = writer._journal.records
    assert mirror is not None
    assert mirror.live_records(BANK, str((await _memories(writer)).id), ["a"], 0) is None


def test_the_record_mirror_keeps_the_newest_rows_within_its_bytes() -> None:
    records = [memory(f"m{index}", vector(index)) for index in range(4)]
    rows = [codec.memory_row(record) for record in records]
    vectors = np.asarray([row[1] for row in rows], dtype=np.float32)
    sizes = [
        len(row[2]) + len(row[3][codec.PAYLOAD]) + vectors[0].nbytes + _records._ROW_OVERHEAD
        for row in rows
    ]
    mirror = _records.RecordMirror(max_bytes=sizes[2] + sizes[3])
    mirror.committed("bank", "c1", rows, vectors)
    assert mirror.live_records("bank", "c1", ["m1"], 0) is None  # the oldest went first
    assert mirror.live_records("bank", "c1", ["m2", "m3"], 0) == records[2:]
    assert mirror.live_records("bank", "c2", ["m3"], 0) is None  # another incarnation
    assert mirror.live_records("bank", "c1", ["m3", "m9"], 0) is None  # all or nothing
    mirror.writing("bank", ["m3"])
    assert mirror.live_records("bank", "c1", ["m3"], 0) is None
    mirror.forget("bank")
    assert mirror.live_records("bank", "c1", ["m2"], 0) is None


def test_the_mirror_forgets_its_oldest_half_past_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_scope_index, "_MIRRORED_SCOPES", 4)
    mirror = HeadMirror()
    mirror.committed("bank", "c1", {f"s{index}": f"v{index}" for index in range(4)})
    mirror.committed("bank", "c1", {"s4": "v4"})
    known = [mirror.known("bank", "c1", f"s{index}") for index in range(5)]
    assert known == [None, None, "v2", "v3", "v4"]
    assert mirror.known("bank", "c2", "s4") is None  # another incarnation of the bank
    epoch = mirror.epoch("bank")
    mirror.writing("bank", ["s3"])
    mirror.learn("bank", "c1", "s3", "v3", epoch)  # read before the write began: not kept
    assert mirror.known("bank", "c1", "s3") is None
    mirror.learn("bank", "c1", "s3", "v3", mirror.epoch("bank"))
    assert mirror.known("bank", "c1", "s3") == "v3"
    mirror.forget("bank")
    assert mirror.known("bank", "c1", "s4") is None


def _query(position: int, *, k: int = 3) -> NearestQuery:
    return NearestQuery(KEY, vector(position), k, NOW)


async def _memories(store: ChromaMemoryStore) -> Any:
    return await store._chroma.collection(store._chroma.name(BANK, "mem"))


# Documents


def stream(body: dict[str, Any]) -> WriteBatch:
    return WriteBatch(documents=(DocumentRecord("stream", "s-key", body),))


async def test_a_document_a_batch_wrote_is_read_from_the_mirror(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    writer, reader = pair
    assert await reader.get_document(BANK, "stream", "s-key") is None  # the bank, recovered
    await writer.apply(BANK, stream({"pending": [1, 2], "nested": {"a": "b"}}))
    reads = DocumentReads(monkeypatch)
    found = await reader.get_document(BANK, "stream", "s-key")
    assert found == {"pending": [1, 2], "nested": {"a": "b"}}
    assert reads.count == 0
    found["pending"].append(3)  # a caller's copy: the mirror's stays as stored
    assert await reader.get_document(BANK, "stream", "s-key") == {
        "pending": [1, 2],
        "nested": {"a": "b"},
    }


async def test_a_put_document_between_a_batch_s_write_and_its_mirror_wins(
    pair: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`put_document` writes outside the journal lock: landing after a batch's Chroma write and
    before the batch fills the mirror, it is what is stored, and what is read."""
    writer, reader = pair
    committed, resume = asyncio.Event(), asyncio.Event()
    original = Journal.commit

    async def held_after_commit(journal: Journal, *args: Any) -> None:
        await original(journal, *args)
        if not resume.is_set():
            committed.set()
            await resume.wait()

    monkeypatch.setattr(Journal, "commit", held_after_commit)
    batch = asyncio.create_task(writer.apply(BANK, stream({"from": "batch"})))
    await asyncio.wait_for(committed.wait(), 10)
    await reader.put_document(BANK, "stream", "s-key", {"from": "put"})
    resume.set()
    await batch
    assert await reader.get_document(BANK, "stream", "s-key") == {"from": "put"}
    await reader.delete_document(BANK, "stream", "s-key")
    assert await writer.get_document(BANK, "stream", "s-key") is None


class DocumentReads:
    """Counts the Chroma reads of documents by id."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = Chroma.read_metadata

        async def read_metadata(chroma: Chroma, collection: Any, ids: Any, *args: Any) -> Any:
            self.count += 1
            return await original(chroma, collection, ids, *args)

        monkeypatch.setattr(Chroma, "read_metadata", read_metadata)
