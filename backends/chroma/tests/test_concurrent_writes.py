"""Concurrent writes on embedded Chroma (issue 18): writers of many scopes and of one scope, a
sweep, two store instances on one folder and batches spanning two scopes, all at once. After
each race every memory is where the writes put it: in its scope's search and scan, with its
revisions, no other scope's, and no journal left pending."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore
from adk_memory_chroma._chroma import AUX, DUE, MEM
from chromadb.api.models.Collection import Collection

from adk_memory import AsyncClient
from adk_memory.errors import Aborted, AlreadyExists
from adk_memory.locks import HeldLock
from adk_memory.scope import scope_key
from adk_memory.store import (
    DocumentRecord,
    Expectation,
    MemoryRecord,
    NearestQuery,
    RevisionRecord,
    ScanQuery,
    WriteBatch,
)
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
    memories = await store._chroma.collection(store._chroma.name(BANK, MEM))
    aux = await store._chroma.collection(store._chroma.name(BANK, AUX))
    assert (await store._journal.state(memories, aux)).journals == []


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


# Group commit: the writer holding a bank's journal lock writes the batches queued behind it
# together. The first batch below always goes alone (nothing is queued yet when it starts); the
# ones started with it queue and form the next group.


class Crash(BaseException):
    """The process dies here: nothing in the store catches a `BaseException`."""


@dataclass
class ChromaWrites:
    """Counts chromadb `Collection` writes of the bank (not of the store-wide due index, which
    documents' due entries write around each batch); optionally crashes from write `crash_at`
    on, or sleeps in the first write (so that the batches started with it queue behind it)."""

    count: int = 0
    crash_at: int | None = None
    first_sleep: float = 0.0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for method in ("upsert", "delete"):
            monkeypatch.setattr(Collection, method, self._wrap(getattr(Collection, method)))

    def _wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        def write(collection: Collection, *args: Any, **kwargs: Any) -> Any:
            if collection.name.endswith(f".{DUE}"):
                return original(collection, *args, **kwargs)
            index, self.count = self.count, self.count + 1
            if self.crash_at is not None and index >= self.crash_at:
                raise Crash(f"crash before write {index}")
            if index == 0 and self.first_sleep:
                time.sleep(self.first_sleep)
            return original(collection, *args, **kwargs)

        return write


async def ids_in(store: ChromaMemoryStore, ids: list[str]) -> set[str]:
    return {record.memory_id for record in await store.get_memories(BANK, ids, NOW)}


async def test_batches_in_flight_together_share_chroma_calls(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = vectors(5, 12)
    writes = ChromaWrites()
    writes.install(monkeypatch)
    await asyncio.gather(*(store.apply(BANK, created(f"g{i}", rows[i], i % 4)) for i in range(12)))
    assert writes.count == 4  # the first batch alone, then the eleven others as one
    expected: dict[str, set[str]] = {}
    for i in range(12):
        expected.setdefault(KEYS[i % 4], set()).add(f"g{i}")
    await assert_scopes_hold(store, expected)


class MemoryReads:
    """Counts chromadb `get`s of the bank's memory collection (the checks' reads before a write)."""

    count: int = 0

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        original = Collection.get

        def get(collection: Collection, *args: Any, **kwargs: Any) -> Any:
            if collection.name.endswith(f".{MEM}"):
                self.count += 1
            return original(collection, *args, **kwargs)

        monkeypatch.setattr(Collection, "get", get)


async def test_fresh_inserts_read_no_memory_row_and_a_chosen_id_still_does(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = vectors(7, 9)
    await store.apply(BANK, created("f0", rows[0], 0))  # the bank's first write checks more
    reads = MemoryReads()
    reads.install(monkeypatch)
    fresh = [replace(created(f"f{i}", rows[i], i % 4), fresh_inserts=True) for i in range(1, 8)]
    await asyncio.gather(*(store.apply(BANK, batch) for batch in fresh))
    assert reads.count == 0  # what a create of a generated id costs: its writes alone
    with pytest.raises(AlreadyExists):  # a chosen id is read, and a live one refused
        await store.apply(BANK, created("f3", rows[8], 1))
    assert reads.count == 1
    expected: dict[str, set[str]] = {}
    for i in range(8):
        expected.setdefault(KEYS[i % 4], set()).add(f"f{i}")
    await assert_scopes_hold(store, expected)


async def test_a_create_of_a_generated_id_reads_nothing_before_its_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine's side of `fresh_inserts`: it marks the ids it draws, never a chosen one."""
    async with AsyncClient(f"chroma://{tmp_path}", embedding_model="hash-64") as client:
        bank = (await client.memory_banks.create()).name
        memories = client.memory_banks.memories
        await memories.create(name=bank, fact="I like tea.", scope=SCOPES[0])
        reads = MemoryReads()
        reads.install(monkeypatch)
        await memories.create(name=bank, fact="I like green tea.", scope=SCOPES[0])
        assert reads.count == 0
        chosen = {"memory_id": "tea"}
        await memories.create(name=bank, fact="Tea at five.", scope=SCOPES[0], config=chosen)
        assert reads.count >= 1
        with pytest.raises(AlreadyExists):
            await memories.create(name=bank, fact="Coffee.", scope=SCOPES[1], config=chosen)


async def test_a_batch_failing_its_checks_is_left_out_of_its_group_alone(
    store: ChromaMemoryStore,
) -> None:
    rows = vectors(6, 6)
    await store.apply(BANK, created("taken", rows[0], 0))
    duplicate = created("taken", rows[1], 1)  # another scope's insert of a live id
    outcomes = await asyncio.gather(
        store.apply(BANK, created("first", rows[2], 0)),
        store.apply(BANK, created("b", rows[3], 1)),
        store.apply(BANK, duplicate),
        store.apply(BANK, created("c", rows[4], 2)),
        return_exceptions=True,
    )
    assert [type(outcome).__name__ for outcome in outcomes] == [
        "NoneType",
        "NoneType",
        "AlreadyExists",
        "NoneType",
    ]
    await assert_scopes_hold(store, {KEYS[0]: {"taken", "first"}, KEYS[1]: {"b"}, KEYS[2]: {"c"}})
    assert len(await store.list_revisions(BANK, "taken", NOW)) == 1  # none of the duplicate's


async def test_batches_of_one_memory_queued_together_apply_in_their_order(
    store: ChromaMemoryStore,
) -> None:
    """Insert, then update, then update again of one id, queued behind one another: each
    touches a memory of the one before, so none joins its group and the last update wins."""
    rows = vectors(7, 5)
    first = memory("m", rows[1], scope=SCOPES[0], fact="one")
    batches = [
        created("lead", rows[0], 0),
        WriteBatch(inserts=(first,), revisions=(revision_of(first, "r1"),)),
        *(
            WriteBatch(
                upserts=(replace(first, fact=fact, embedding=rows[2 + n]),),
                revisions=(revision_of(replace(first, fact=fact), f"r{2 + n}"),),
            )
            for n, fact in enumerate(("two", "three"))
        ),
        created("other", rows[4], 1),
    ]
    await asyncio.gather(*(store.apply(BANK, batch) for batch in batches))
    [record] = await store.get_memories(BANK, ["m"], NOW)
    assert (record.fact, record.embedding) == ("three", rows[3])
    history = await store.list_revisions(BANK, "m", NOW)
    assert sorted(revision.revision_id for revision in history) == ["r1", "r2", "r3"]
    await assert_scopes_hold(store, {KEYS[0]: {"lead", "m"}, KEYS[1]: {"other"}})


@pytest.mark.parametrize("crash_at", [2, 3], ids=["before-the-group-commit", "after-it"])
async def test_a_crash_in_a_group_leaves_all_of_it_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: int
) -> None:
    rows = vectors(8, 4)
    crashed = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    await crashed.create_bank(bank_record())
    writes = ChromaWrites(crash_at=crash_at)  # the first batch: writes 0 and 1; the group: 2, 3
    writes.install(monkeypatch)
    outcomes = await asyncio.gather(
        *(crashed.apply(BANK, created(f"k{i}", rows[i], i % 2)) for i in range(4)),
        return_exceptions=True,
    )
    assert outcomes[0] is None and all(isinstance(o, Crash) for o in outcomes[1:]), outcomes
    writes.crash_at = None
    fresh = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    group = {"k1", "k2", "k3"} if crash_at > 2 else set()
    everything = {"k0", *group}
    await assert_scopes_hold(
        fresh, {KEYS[0]: everything & {"k0", "k2"}, KEYS[1]: everything & {"k1", "k3"}}
    )
    await assert_no_journal_pending(fresh)
    await fresh.aclose()
    await crashed.aclose()


async def test_a_batch_cancelled_while_queued_is_not_written_and_its_group_is(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = vectors(9, 4)
    writes = ChromaWrites(first_sleep=0.3)
    writes.install(monkeypatch)
    tasks = [
        asyncio.create_task(store.apply(BANK, created(f"q{i}", rows[i], i % 2))) for i in range(4)
    ]
    await asyncio.sleep(0.1)  # the first batch is in its first write, the others queued
    tasks[2].cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(outcomes[2], asyncio.CancelledError)
    assert [outcomes[i] for i in (0, 1, 3)] == [None, None, None]
    assert await ids_in(store, ["q0", "q1", "q2", "q3"]) == {"q0", "q1", "q3"}
    await assert_scopes_hold(store, {KEYS[0]: {"q0"}, KEYS[1]: {"q1", "q3"}})


# Group commit of the engine's batches: a generation writes its memories expecting their ids
# free (or their targets as read), the ingest stream's document and the leases of the stream's
# and the scope's locks; such batches join a group when they are independent of it.

STREAM = "test-stream"


def generated(
    memory_id: str, vector: tuple[float, ...], scope: int, *, lapsed: bool = False
) -> WriteBatch:
    """A generation's batch: a created memory expected free, its revision, its stream's
    document (due in an hour) and the lease of the lock it was decided under."""
    record = memory(memory_id, vector, scope=SCOPES[scope])
    lease = HeldLock(f"generate:{memory_id}")
    lease.released = lapsed
    return replace(
        created(memory_id, vector, scope),
        documents=(stream(f"s-{memory_id}", {"flushed": memory_id}, due=NOW + timedelta(hours=1)),),
        expect=(Expectation(record.memory_id, NOW),),
        fences=(lease,),
    )


def stream(key: str, body: dict[str, Any], due: Any = None) -> DocumentRecord:
    return DocumentRecord(STREAM, key, body, due=due)


def updated(record: MemoryRecord, fact: str, *, expect: str | None = None) -> WriteBatch:
    """An update of `record` expecting memory `expect` (default: itself) as `record` is."""
    changed = replace(record, fact=fact, update_time=record.update_time + timedelta(minutes=1))
    return WriteBatch(
        upserts=(changed,),
        revisions=(revision_of(changed, f"r-{fact}"),),
        expect=(Expectation(expect or record.memory_id, NOW, record.update_time),),
    )


async def test_generations_in_flight_together_share_calls_and_a_lapsed_lease_fails_alone(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = vectors(10, 6)
    writes = ChromaWrites(first_sleep=0.2)
    writes.install(monkeypatch)
    outcomes = await asyncio.gather(
        *(store.apply(BANK, generated(f"g{i}", rows[i], i % 4, lapsed=i == 3)) for i in range(6)),
        return_exceptions=True,
    )
    assert [type(outcome).__name__ for outcome in outcomes] == [
        *["NoneType"] * 3,
        "Aborted",
        *["NoneType"] * 2,
    ]
    assert "no longer held" in str(outcomes[3])
    assert writes.count == 4  # the first batch alone, then the four others as one
    written = {f"g{i}" for i in range(6)} - {"g3"}
    expected: dict[str, set[str]] = {}
    for i in range(6):
        if f"g{i}" in written:
            expected.setdefault(KEYS[i % 4], set()).add(f"g{i}")
    await assert_scopes_hold(store, expected)
    assert await store.get_document(BANK, STREAM, "s-g3") is None
    assert await store.list_revisions(BANK, "g3", NOW) == []
    for memory_id in written:
        assert await store.get_document(BANK, STREAM, f"s-{memory_id}") == {"flushed": memory_id}
    due = await store.due_documents(STREAM, NOW + timedelta(hours=2))
    # each written document's due entry (the failed one's may stay lowered: early, never late)
    assert {entry.key for entry in due} >= {f"s-{memory_id}" for memory_id in written}


async def test_every_lease_of_a_group_lapsed_writes_nothing(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = vectors(11, 3)
    writes = ChromaWrites(first_sleep=0.2)
    writes.install(monkeypatch)
    outcomes = await asyncio.gather(
        store.apply(BANK, created("lead", rows[0], 0)),
        *(store.apply(BANK, generated(f"x{i}", rows[i], 1, lapsed=True)) for i in (1, 2)),
        return_exceptions=True,
    )
    assert outcomes[0] is None and all(isinstance(o, Aborted) for o in outcomes[1:]), outcomes
    assert writes.count == 2  # the lead batch's; the lapsed group wrote nothing
    await assert_scopes_hold(store, {KEYS[0]: {"lead"}})
    await assert_no_journal_pending(store)


async def test_a_batch_expecting_a_memory_another_batch_changes_waits_for_it_and_fails(
    store: ChromaMemoryStore,
) -> None:
    """Queued behind an update of `m`, a batch expecting `m` as it was before (and writing
    another memory) is checked after that update, not beside it: it fails, the update wins."""
    rows = vectors(12, 4)
    base = memory("m", rows[0], scope=SCOPES[0])
    await store.apply(BANK, WriteBatch(inserts=(base,), revisions=(revision_of(base),)))
    other = memory("n", rows[1], scope=SCOPES[0])
    outcomes = await asyncio.gather(
        store.apply(BANK, created("lead", rows[2], 1)),
        store.apply(BANK, updated(base, "changed")),
        store.apply(BANK, updated(other, "blind", expect="m")),
        return_exceptions=True,
    )
    assert outcomes[:2] == [None, None] and isinstance(outcomes[2], Aborted), outcomes
    [stored] = await store.get_memories(BANK, ["m"], NOW)
    assert stored.fact == "changed"
    assert await store.get_memories(BANK, ["n"], NOW) == []


async def queued(
    store: ChromaMemoryStore, batches: list[WriteBatch], applying: list[asyncio.Task[None]]
) -> None:
    """Waits until each of `batches` waits in the bank's write queue or is applied."""
    queue = store._writer._queues.setdefault(asyncio.get_running_loop(), {}).setdefault(BANK, [])
    for _ in range(1000):
        waiting = {id(entry.changes.batch) for entry in queue}
        if all(
            task.done() or id(batch) in waiting
            for batch, task in zip(batches, applying, strict=True)
        ):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the batches never reached the bank's write queue")


async def test_documents_of_one_key_queued_together_are_written_in_their_order(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writes of one stream (and one of another) behind a slow batch: the later of the
    two wins, body and due entry, whatever groups they go in."""
    rows = vectors(13, 1)
    writes = ChromaWrites(first_sleep=0.2)
    writes.install(monkeypatch)
    soon, later = NOW + timedelta(minutes=5), NOW + timedelta(hours=3)
    lead = asyncio.create_task(store.apply(BANK, created("lead", rows[0], 0)))
    first = [
        WriteBatch(documents=(stream("a", {"take": 1}, due=soon),)),
        WriteBatch(documents=(stream("b", {"take": 1}, due=soon),)),
    ]
    applying = [asyncio.create_task(store.apply(BANK, batch)) for batch in first]
    # The first write of "a" asks for the bank's lock before the second starts: a batch's due
    # entries are lowered before it queues, in a worker thread when the due mirror is busy, so
    # started together the two could queue in either order.
    await queued(store, first, applying)
    second = WriteBatch(documents=(stream("a", {"take": 2}, due=later),))
    await asyncio.gather(lead, *applying, store.apply(BANK, second))
    assert await store.get_document(BANK, STREAM, "a") == {"take": 2}
    assert await store.get_document(BANK, STREAM, "b") == {"take": 1}
    due = await store.due_documents(STREAM, NOW + timedelta(hours=4))
    assert {(entry.key, entry.due) for entry in due} == {("a", later), ("b", soon)}


async def test_deletes_racing_expecting_updates_in_groups_resurrect_nothing(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """For each of 8 memories an update expecting it as stored and a delete, in either order,
    all queued behind a slow batch: an update queued after its delete fails and brings nothing
    back; one queued before is written, then deleted. A memory nobody deletes is updated."""
    rows = vectors(14, 10)
    records = [memory(f"d{i}", rows[i], scope=SCOPES[i % 4]) for i in range(9)]
    for record in records:
        await store.apply(BANK, WriteBatch(inserts=(record,), revisions=(revision_of(record),)))
    writes = ChromaWrites(first_sleep=0.2)
    writes.install(monkeypatch)
    calls = [store.apply(BANK, created("lead", rows[9], 0))]
    for i, record in enumerate(records[:8]):
        pair = [updated(record, f"u{i}"), WriteBatch(deletes=(record.memory_id,))]
        calls += [store.apply(BANK, batch) for batch in (pair if i % 2 == 0 else pair[::-1])]
    calls.append(store.apply(BANK, updated(records[8], "kept")))
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    failed = [i for i, outcome in enumerate(outcomes) if outcome is not None]
    assert failed == [1 + 2 * i + 1 for i in range(1, 8, 2)], outcomes  # odd i: update second
    assert all(isinstance(outcomes[i], Aborted) for i in failed)
    assert await ids_in(store, [f"d{i}" for i in range(9)]) == {"d8"}
    [kept] = await store.get_memories(BANK, ["d8"], NOW)
    assert kept.fact == "kept"
    await assert_scopes_hold(store, {KEYS[0]: {"lead", "d8"}})
    for i in range(8):
        history = await store.list_revisions(BANK, f"d{i}", NOW)
        assert len(history) == (2 if i % 2 == 0 else 1)  # an update that failed left none
    assert writes.count < 1 + 3 * 17  # groups shared calls (one batch is two or three calls)


@pytest.mark.parametrize("crash_at", [2, 3], ids=["before-the-group-commit", "after-it"])
async def test_a_crash_in_a_group_of_generations_leaves_all_of_it_or_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, crash_at: int
) -> None:
    rows = vectors(15, 4)
    crashed = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    await crashed.create_bank(bank_record())
    writes = ChromaWrites(crash_at=crash_at)  # the first batch: writes 0 and 1; the group: 2, 3
    writes.install(monkeypatch)
    outcomes = await asyncio.gather(
        *(crashed.apply(BANK, generated(f"k{i}", rows[i], i % 2)) for i in range(4)),
        return_exceptions=True,
    )
    assert outcomes[0] is None and all(isinstance(o, Crash) for o in outcomes[1:]), outcomes
    writes.crash_at = None
    fresh = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    group = {"k1", "k2", "k3"} if crash_at > 2 else set()
    everything = {"k0", *group}
    await assert_scopes_hold(
        fresh, {KEYS[0]: everything & {"k0", "k2"}, KEYS[1]: everything & {"k1", "k3"}}
    )
    for i in range(4):
        document = await fresh.get_document(BANK, STREAM, f"s-k{i}")
        assert (document is not None) == (f"k{i}" in everything), i
    await assert_no_journal_pending(fresh)
    await fresh.aclose()
    await crashed.aclose()


async def test_a_group_sets_its_documents_due_entries_in_one_call_after_its_commit(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behind a slow batch, four writes of streams (two putting their entries off, two removing
    them, as an ingest flush does) go as one group, which sets the four entries in one call of
    the due index once committed, before any of them returns."""
    rows = vectors(14, 1)
    soon, later = NOW + timedelta(minutes=5), NOW + timedelta(hours=3)
    keys = ["a", "b", "c", "d"]
    first = tuple(stream(key, {"take": 1}, due=soon) for key in keys)
    await store.apply(BANK, WriteBatch(documents=first))
    exact: list[dict[str, Any]] = []
    set_entries = store._due.set_entries

    async def counted(
        bank_id: str, kind: str, dues: dict[str, Any], *, only_earlier: bool = False
    ) -> None:
        if not only_earlier:
            exact.append(dict(dues))
        await set_entries(bank_id, kind, dues, only_earlier=only_earlier)

    monkeypatch.setattr(store._due, "set_entries", counted)
    writes = ChromaWrites(first_sleep=0.2)
    writes.install(monkeypatch)
    await asyncio.gather(
        store.apply(BANK, created("lead", rows[0], 0)),
        *(
            store.apply(BANK, WriteBatch(documents=(stream(key, {"take": 2}, due=due),)))
            for key, due in zip(keys, [later, later, None, None], strict=True)
        ),
    )
    assert exact == [{"a": later, "b": later, "c": None, "d": None}]
    due = await store.due_documents(STREAM, NOW + timedelta(hours=4))
    assert {(entry.key, entry.due) for entry in due} == {("a", later), ("b", later)}


async def test_documents_read_at_once_share_one_chroma_call(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the ADK writer reads the streams of every turn it stores at once: one `get` for all,
    each caller its own document (or None), and a read after them a call of its own."""
    keys = [f"k{i}" for i in range(5)]
    documents = tuple(stream(key, {"n": i}) for i, key in enumerate(keys))
    await store.apply(BANK, WriteBatch(documents=documents))
    # Documents this process wrote are read from its mirror; these stand for any others.
    assert store._journal.documents is not None
    store._journal.documents.forget(BANK)
    reads: list[int] = []
    original = Collection.get

    def counted(collection: Collection, *args: Any, **kwargs: Any) -> Any:
        reads.append(len(kwargs.get("ids") or ()))
        return original(collection, *args, **kwargs)

    monkeypatch.setattr(Collection, "get", counted)
    found = await asyncio.gather(
        *(store.get_document(BANK, STREAM, key) for key in [*keys, "missing", "k1"])
    )
    assert found == [*({"n": i} for i in range(5)), None, {"n": 1}]
    assert reads == [6]
    assert await store.get_document(BANK, STREAM, "k3") == {"n": 3}
    assert reads == [6, 1]
