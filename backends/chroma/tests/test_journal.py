"""Crash atomicity of `apply`: the write-ahead journal (`_journal`'s docstring, "Atomicity").

A crash is injected *between* two Chroma calls of one `apply` by wrapping chromadb's
`Collection` writes: `Crash` (a `BaseException`, which no handler in the store catches, like a
dying process) is raised before the N-th write, for every N. A NEW store instance on the same
directory must then show, after its first call, either the state before the batch (crash before
the call carrying the journal's commit row) or the state after it, exactly as the reference store
computes it, with every memory agreeing with its latest revision and no journal left pending. One
case kills a real process (`os._exit`) mid-batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import timedelta
from pathlib import Path
from typing import Any
from unittest.mock import ANY
from urllib.parse import urlsplit

import chromadb
import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore, ChromaStoreConfig, _journal, _sizing
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import AUX, MEM, Chroma
from chromadb.api.models.Collection import Collection
from chromadb.config import Settings
from chromadb.errors import InvalidArgumentError
from typer.testing import CliRunner

from adk_memory.cli import app
from adk_memory.errors import InvalidArgument, ResourceExhausted, StoreUnavailable
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.store import (
    SET_ASIDE_PART_KIND,
    DocumentRecord,
    MemoryStore,
    NearestQuery,
    ScanQuery,
    WriteBatch,
    discard_set_aside,
    set_aside_batches,
)
from adk_memory.testing.conformance import BANK, KEY, T0, bank_record, memory, revision
from adk_memory.testing.processes import exit_code_in_a_process

T1 = T0 + timedelta(hours=1)
NOW = T1 + timedelta(minutes=1)
IDS = ("a", "b", "c")
HALF = (0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5)  # exact in float32, so Chroma equals the reference
SETUP = WriteBatch(
    inserts=(memory("a", (1.0,) + (0.0,) * 7), memory("b", (0.0, 1.0) + (0.0,) * 6)),
    revisions=(revision("a", "r1", fact="fact of a"), revision("b", "r1", fact="fact of b")),
)
GENERATE = WriteBatch(  # what one generate request writes: update, create, delete, revisions
    upserts=(memory("a", HALF, fact="a, updated", update_time=T1),),
    inserts=(memory("c", (0.0, 0.0, 1.0) + (0.0,) * 5, fact="c, new", create_time=T1),),
    deletes=("b",),
    revisions=(
        revision("a", "r2", fact="a, updated", create_time=T1),
        revision("c", "r1", fact="c, new", create_time=T1),
        revision("b", "r2", fact="fact of b", create_time=T1, deleted=True),
    ),
)
DELETE_ONLY = WriteBatch(  # no memory rows: the journal lives in aux
    deletes=("a", "b"),
    revisions=(
        revision("a", "r2", fact="fact of a", create_time=T1, deleted=True),
        revision("b", "r2", fact="fact of b", create_time=T1, deleted=True),
    ),
)
UPDATE_ONLY = WriteBatch(  # its only memory exists already: the slot's probe must see the batch
    upserts=(memory("a", HALF, fact="a, updated", update_time=T1),),
    revisions=(revision("a", "r2", fact="a, updated", create_time=T1),),
)
STREAM = (DocumentRecord("stream", "s1", {"pending": [], "processed": [{"text": "hi"}]}),)
LATER = WriteBatch(  # two memory rows, one of them the row UPDATE_ONLY's slot probes
    upserts=tuple(
        memory(memory_id, HALF, fact=f"{memory_id}, later", update_time=NOW)
        for memory_id in ("a", "c")
    ),
    revisions=tuple(
        revision(memory_id, "r3", fact=f"{memory_id}, later", create_time=NOW)
        for memory_id in ("a", "c")
    ),
)
GENERATE_WITH_STREAM = replace(GENERATE, documents=STREAM)  # an ingest flush
DELETE_ONLY_WITH_STREAM = replace(DELETE_ONLY, documents=STREAM)
_COMMIT_ROW = re.compile(r"^j:(slot|\d{20}-[0-9a-f]{32})$")  # `SLOT_ID`, `batch_head_id(…)`


class Crash(BaseException):
    """The process dies here: nothing in the store catches a `BaseException`."""


@dataclass
class Writes:
    """Wraps every chromadb `Collection` write: records it, and crashes before write `crash_at`."""

    crash_at: int | None = None
    fail: Callable[[int, list[str]], str | None] | None = None
    """Called before each write with its index and ids: "before" or "after" raises RuntimeError
    (a driver error) before doing it or after doing it; "refuse" raises chromadb's
    InvalidArgumentError (a deterministic refusal) instead of doing it; None does it normally."""
    log: list[tuple[str, str, list[str]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for method in ("upsert", "delete", "add", "update"):
            monkeypatch.setattr(Collection, method, self._wrap(method, getattr(Collection, method)))

    def _wrap(self, method: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def write(collection: Collection, *args: Any, **kwargs: Any) -> Any:
            ids = list(kwargs.get("ids") or (args[0] if args else []))
            with self.lock:
                index = len(self.log)
                self.log.append((method, collection.name, ids))
            if self.crash_at is not None and index >= self.crash_at:
                raise Crash(f"crash before write {index}")
            when = self.fail(index, ids) if self.fail else None
            if when == "before":
                raise RuntimeError("connection reset")
            if when == "refuse":  # what Chroma raises for a value it does not take
                raise InvalidArgumentError("Embeddings must not contain NaN or Infinity values")
            result = original(collection, *args, **kwargs)
            if when == "after":
                raise RuntimeError("connection reset after the server committed")
            return result

        return write

    def crash_before(self, index: int | None) -> None:
        """Crashes before write `index` from now on (None: never)."""
        self.log.clear()
        self.crash_at = index

    def commit_index(self) -> int:
        """The index of the write that carries the batch's commit row."""
        return next(i for i, (_, _, ids) in enumerate(self.log) if _has_commit_row(ids))


def _has_commit_row(ids: list[str]) -> bool:
    return any(_COMMIT_ROW.match(row_id) for row_id in ids)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> Iterator[Writes]:
    spy = Writes()
    spy.install(monkeypatch)
    yield spy


async def snapshot(store: MemoryStore) -> dict[str, Any]:
    """Everything a reader can see of the bank: memories, their vectors, the scope's search
    (so its index) and revisions."""
    memories = await store.scan(BANK, ScanQuery(NOW))
    vectors = {r.memory_id: r.embedding for r in await store.get_memories(BANK, IDS, NOW)}
    revisions = {
        memory_id: [
            (r.revision_id, r.fact, r.deleted)
            for r in await store.list_revisions(BANK, memory_id, NOW)
        ]
        for memory_id in IDS
    }
    probe = tuple(float(v) for v in np.full(8, 8**-0.5))
    nearest = await store.nearest(BANK, NearestQuery(KEY, probe, 10, NOW))
    return {
        "memories": [(r.memory_id, r.fact, r.update_time.isoformat()) for r in memories],
        "nearest": [(hit.record.memory_id, round(hit.distance, 9)) for hit in nearest],
        "vectors": {key: [float(v) for v in value] for key, value in vectors.items()},
        "revisions": revisions,
        "documents": await store.list_documents(BANK, "stream"),
    }


async def expected(*batches: WriteBatch) -> dict[str, Any]:
    """The reference store's state after `batches`."""
    reference = ReferenceMemoryStore()
    await reference.create_bank(bank_record())
    for batch in batches:
        await reference.apply(BANK, batch)
    return await snapshot(reference)


def assert_consistent(state: dict[str, Any]) -> None:
    """Each memory agrees with its latest revision; a memory gone has a tombstone or none."""
    live = {memory_id: fact for memory_id, fact, _ in state["memories"]}
    for memory_id, revisions in state["revisions"].items():
        if memory_id in live:
            assert revisions, memory_id
            assert revisions[0][1:] == (live[memory_id], False), memory_id
        elif revisions:
            assert revisions[0][2], f"{memory_id} is gone but its latest revision is no tombstone"


async def assert_no_journal_pending(path: Path) -> None:
    store = ChromaMemoryStore.from_uri(f"chroma://{path}")
    try:
        memories = await store._chroma.collection(store._chroma.name(BANK, MEM))
        aux = await store._chroma.collection(store._chroma.name(BANK, AUX))
        assert (await store._journal.state(memories, aux)).journals == []
    finally:
        await store.aclose()


async def prepared(path: Path) -> ChromaMemoryStore:
    store = ChromaMemoryStore.from_uri(f"chroma://{path}")
    await store.create_bank(bank_record())
    await store.apply(BANK, SETUP)
    return store


async def crash_and_recover(
    path: Path, writes: Writes, batch: WriteBatch, crash_at: int
) -> dict[str, Any]:
    """Applies `batch` crashing before write `crash_at`; returns what a new store then sees."""
    crashed = await prepared(path)
    writes.crash_before(crash_at)
    try:
        with pytest.raises(Crash):
            await crashed.apply(BANK, batch)
    finally:
        writes.crash_before(None)
    fresh = ChromaMemoryStore.from_uri(f"chroma://{path}")
    try:
        return await snapshot(fresh)  # its first call completes or ignores the batch
    finally:
        await fresh.aclose()
        await crashed.aclose()


async def count_writes(path: Path, writes: Writes, batch: WriteBatch) -> tuple[int, int]:
    """(writes of one apply of `batch`, index of the one with the commit row), crash-free."""
    store = await prepared(path)
    writes.log.clear()
    await store.apply(BANK, batch)
    total, commit = len(writes.log), writes.commit_index()
    assert await snapshot(store) == await expected(SETUP, batch)
    await store.aclose()
    return total, commit


@pytest.mark.parametrize(
    "batch",
    [GENERATE, DELETE_ONLY, UPDATE_ONLY, GENERATE_WITH_STREAM, DELETE_ONLY_WITH_STREAM],
    ids=[
        "generate",
        "deletes-only",
        "update-only",
        "generate-and-document",
        "deletes-and-document",
    ],
)
async def test_a_crash_between_any_two_calls_leaves_none_or_all(
    tmp_path: Path, writes: Writes, batch: WriteBatch
) -> None:
    before, after = await expected(SETUP), await expected(SETUP, batch)
    total, commit = await count_writes(tmp_path / "dry", writes, batch)
    assert commit == 0  # the batch is committed by its very first write
    for crash_at in range(total):
        state = await crash_and_recover(tmp_path / f"crash-{crash_at}", writes, batch, crash_at)
        assert state == (before if crash_at <= commit else after), f"crash before write {crash_at}"
        assert_consistent(state)
        await assert_no_journal_pending(tmp_path / f"crash-{crash_at}")


async def test_a_batch_too_large_for_one_request_is_journaled_first(
    tmp_path: Path, writes: Writes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Journal parts over several requests, commit row last: none until it, all after it."""

    async def tiny_limits(self: Chroma) -> tuple[int, int | None]:
        return 2, None  # two rows per Chroma call

    monkeypatch.setattr(Chroma, "limits", tiny_limits)
    monkeypatch.setattr(_journal, "JOURNAL_CHUNK_CHARS", 700)
    monkeypatch.setattr(_journal, "JOURNAL_INLINE_CHARS", 0)
    before, after = await expected(SETUP), await expected(SETUP, GENERATE)
    total, commit = await count_writes(tmp_path / "dry", writes, GENERATE)
    assert commit >= 2, writes.log  # parts were written before the commit row
    for crash_at in sorted({0, 1, commit, commit + 1, total - 1}):
        state = await crash_and_recover(tmp_path / f"crash-{crash_at}", writes, GENERATE, crash_at)
        assert state == (before if crash_at <= commit else after), f"crash before write {crash_at}"
        assert_consistent(state)


async def test_a_crash_during_the_replay_is_replayed_again(tmp_path: Path, writes: Writes) -> None:
    crashed = await prepared(tmp_path)
    writes.crash_before(1)  # after the commit row
    with pytest.raises(Crash):
        await crashed.apply(BANK, GENERATE)
    writes.crash_before(0)  # the next store dies at the first write of its replay
    dying = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    with pytest.raises(Crash):
        await dying.scan(BANK, ScanQuery(NOW))
    writes.crash_before(None)
    fresh = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    assert await snapshot(fresh) == await expected(SETUP, GENERATE)
    for store in (fresh, dying, crashed):
        await store.aclose()


async def test_two_stores_replaying_at_once_agree(tmp_path: Path, writes: Writes) -> None:
    crashed = await prepared(tmp_path)
    writes.crash_before(2)
    with pytest.raises(Crash):
        await crashed.apply(BANK, GENERATE)
    writes.crash_before(None)
    first, second = (ChromaMemoryStore.from_uri(f"chroma://{tmp_path}") for _ in range(2))
    states = await asyncio.gather(snapshot(first), snapshot(second))
    after = await expected(SETUP, GENERATE)
    assert states == [after, after]
    await assert_no_journal_pending(tmp_path)
    for store in (first, second, crashed):
        await store.aclose()


async def test_a_live_store_completes_a_crashed_batch_before_its_next_write(
    tmp_path: Path, writes: Writes
) -> None:
    """A store that already used the bank replays at its next `apply`, before writing."""
    live = await prepared(tmp_path)
    await snapshot(live)  # its first use is behind it
    crashed = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    writes.crash_before(1)
    with pytest.raises(Crash):
        await crashed.apply(BANK, GENERATE)
    writes.crash_before(None)
    later = WriteBatch(
        upserts=(memory("c", HALF, fact="c, later", update_time=NOW),),
        revisions=(revision("c", "r2", fact="c, later", create_time=NOW),),
    )
    await live.apply(BANK, later)
    state = await snapshot(live)
    assert state == await expected(SETUP, GENERATE, later)
    assert_consistent(state)
    await crashed.aclose()
    await live.aclose()


async def test_a_crash_before_the_journal_leaves_nothing_and_blocks_nothing(
    tmp_path: Path, writes: Writes
) -> None:
    crashed = await prepared(tmp_path)
    writes.crash_before(0)
    with pytest.raises(Crash):
        await crashed.apply(BANK, GENERATE)
    writes.crash_before(None)
    fresh = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    assert await snapshot(fresh) == await expected(SETUP)
    await fresh.apply(BANK, GENERATE)  # the lock was released; the batch can be retried
    assert await snapshot(fresh) == await expected(SETUP, GENERATE)
    await fresh.aclose()
    await crashed.aclose()


async def test_a_write_that_failed_after_committing_is_completed(
    tmp_path: Path, writes: Writes
) -> None:
    """The driver raised, yet the commit row is in Chroma: the batch is finished, not failed."""
    store = await prepared(tmp_path)
    writes.log.clear()
    writes.fail = lambda index, ids: "after" if _has_commit_row(ids) else None
    await store.apply(BANK, GENERATE)
    writes.fail = None
    assert await snapshot(store) == await expected(SETUP, GENERATE)
    await store.aclose()
    await assert_no_journal_pending(tmp_path)


async def test_a_write_that_failed_before_committing_changes_nothing(
    tmp_path: Path, writes: Writes
) -> None:
    store = await prepared(tmp_path)
    writes.log.clear()
    writes.fail = lambda index, ids: "before" if _has_commit_row(ids) else None
    with pytest.raises(StoreUnavailable):
        await store.apply(BANK, GENERATE)
    writes.fail = None
    assert await snapshot(store) == await expected(SETUP)
    await store.aclose()
    await assert_no_journal_pending(tmp_path)


async def test_a_failure_after_the_commit_is_reported_and_completed_on_next_use(
    tmp_path: Path, writes: Writes
) -> None:
    store = await prepared(tmp_path)
    writes.log.clear()
    writes.fail = lambda index, ids: "before" if index > 0 else None  # Chroma goes away
    with pytest.raises(StoreUnavailable, match="will be completed"):
        await store.apply(BANK, GENERATE)
    writes.fail = None
    fresh = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    assert await snapshot(fresh) == await expected(SETUP, GENERATE)
    await fresh.aclose()
    await store.aclose()


async def test_a_cancelled_apply_finishes_its_batch_before_raising(
    tmp_path: Path, writes: Writes
) -> None:
    store = await prepared(tmp_path)
    writes.log.clear()
    committed = threading.Event()

    def slow_after_commit(index: int, ids: list[str]) -> str | None:
        if index == 1:
            committed.set()
            time.sleep(0.3)  # the caller is cancelled during this Chroma call
        return None

    writes.fail = slow_after_commit
    task = asyncio.create_task(store.apply(BANK, GENERATE))
    while not committed.is_set():
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    writes.fail = None
    assert await snapshot(store) == await expected(SETUP, GENERATE)
    later = WriteBatch(revisions=(revision("c", "r2", create_time=NOW),))
    await asyncio.wait_for(store.apply(BANK, later), timeout=10)  # the lock was released
    await store.aclose()


async def test_single_call_batches_write_no_journal(tmp_path: Path, writes: Writes) -> None:
    """A batch that one Chroma call can hold is atomic without a journal: only revisions. A
    memory's write also changes its scope's index (aux rows), so it is journaled: the index rows
    travel with the revisions and the slot journal in the first call, the memory alone (no
    closing write) in the second."""
    store = await prepared(tmp_path)
    writes.log.clear()
    await store.apply(BANK, WriteBatch(revisions=(revision("a", "r9"),)))
    assert len(writes.log) == 1 and not _has_commit_row(writes.log[0][2]), writes.log
    head = codec.scope_head_id(KEY)
    writes.log.clear()
    await store.apply(BANK, WriteBatch(upserts=(replace(SETUP.inserts[0], fact="re-embedded"),)))
    assert [ids for _, _, ids in writes.log] == [[head, ANY, codec.SLOT_ID], ["a"]]
    writes.log.clear()
    await store.apply(BANK, WriteBatch(deletes=("b",)))
    assert [ids for _, _, ids in writes.log] == [[head, ANY, codec.SLOT_ID], ["b"]]
    assert [method for method, _, _ in writes.log] == ["upsert", "delete"]
    await store.aclose()


def test_journal_text_round_trips_rows_exactly() -> None:
    """Vectors travel as float32 (what Chroma stores) and metadata as JSON, unchanged."""
    rows = [codec.memory_row(record) for record in (*GENERATE.upserts, *GENERATE.inserts)]
    revisions = [codec.revision_row(record) for record in GENERATE.revisions]
    journal = codec.journal_rows(
        codec.batch_head_id("b1"),
        "b1",
        rows,
        revisions,
        ["b"],
        kind=codec.KIND_JOURNAL,
        chunk_chars=100,
    )
    head_id, _, _, head = journal[-1]
    assert head == {codec.KIND: codec.KIND_JOURNAL, "jb": "b1", "jn": len(journal) - 1}
    parts = [row[3][codec.PAYLOAD] for row in journal[:-1]]
    assert all(len(part) <= 100 and part.isascii() for part in parts)
    decoded = codec.decode_journal(parts)
    assert decoded == (rows, revisions, ["b"])
    [(only_id, _, _, inline)] = codec.journal_rows(
        codec.SLOT_ID, "b2", [], revisions, ["b"], kind=codec.KIND_JOURNAL_SLOT,
        chunk_chars=100, inline_chars=10_000, dimension=8,
    )  # fmt: skip
    assert only_id == codec.SLOT_ID and inline["jn"] == 0
    assert codec.decode_journal([inline[codec.PAYLOAD]]) == ([], revisions, ["b"])
    with pytest.raises(ValueError):
        codec.decode_journal([json.dumps({"v": 99})])


def _commit_then_die(path: Path) -> None:
    """Run in another process: applies GENERATE, exiting right after its commit row is written."""

    async def main() -> None:
        store = ChromaMemoryStore.from_uri(f"chroma://{path}")
        await store.create_bank(bank_record())
        await store.apply(BANK, SETUP)
        upsert = Collection.upsert

        def dying_upsert(self: Collection, *args: Any, **kwargs: Any) -> Any:
            upsert(self, *args, **kwargs)
            if _has_commit_row(list(kwargs["ids"])):
                os._exit(17)  # no cleanup, no lock release, no flush: the process is gone

        Collection.upsert = dying_upsert  # type: ignore[method-assign]
        await store.apply(BANK, GENERATE)

    asyncio.run(main())


async def test_a_killed_process_leaves_a_batch_that_the_next_process_completes(
    tmp_path: Path,
) -> None:
    """A real crash: the writer's process exits (`os._exit`) right after committing a batch."""
    assert exit_code_in_a_process(_commit_then_die, tmp_path) == 17
    fresh = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    state = await snapshot(fresh)
    assert state == await expected(SETUP, GENERATE)
    assert_consistent(state)
    await fresh.aclose()
    await assert_no_journal_pending(tmp_path)


async def test_journaled_batches_work_on_a_caller_async_http_client(chroma_http_url: str) -> None:
    """The journal goes through `_call` like every write, so chromadb's async client works too."""
    server = urlsplit(chroma_http_url)
    client = await chromadb.AsyncHttpClient(
        host=str(server.hostname), port=server.port, settings=Settings(anonymized_telemetry=False)
    )
    config = ChromaStoreConfig(collection_prefix=f"async-{uuid.uuid4().hex[:8]}", single_host=True)
    store = ChromaMemoryStore(config, client=client)
    try:
        await store.create_bank(bank_record())
        await store.apply(BANK, SETUP)
        await store.apply(BANK, GENERATE)
        assert await snapshot(store) == await expected(SETUP, GENERATE)
        memories = await store._chroma.collection(store._chroma.name(BANK, MEM))
        aux = await store._chroma.collection(store._chroma.name(BANK, AUX))
        assert (await store._journal.state(memories, aux)).journals == []
    finally:
        await store.drop_all()
        await store.aclose()


async def test_a_slot_journal_left_in_the_memory_collection_is_completed_and_never_found(
    tmp_path: Path,
) -> None:
    """Before the slot moved to aux, it lived in the memory collection (a vector of the bank's
    dimension, no scope) with the memories, closed by `j:done`. A batch an older version left
    there half-written is completed on upgrade, and the row never reaches a result."""
    rng = np.random.default_rng(5)
    vectors = rng.normal(size=(300, 8))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    records = [memory(f"m{i:03d}", tuple(vectors[i].tolist())) for i in range(300)]
    exhaustive = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    overfetching = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}", vector_cache_mb=0)
    await exhaustive.create_bank(bank_record())
    for start in range(0, 300, 50):
        chunk = records[start : start + 50]
        revisions = tuple(revision(r.memory_id, "r1") for r in chunk)
        await exhaustive.apply(BANK, WriteBatch(inserts=tuple(chunk), revisions=revisions))
    # What an older version's crash left: call 1 (the memory with the slot) done, call 3 not.
    updated = replace(records[1], fact="m001, updated", update_time=T1)
    legacy = codec.journal_rows(
        codec.SLOT_ID, "00000000000000000001-legacy", [],
        [codec.revision_row(revision("m001", "r2", fact="m001, updated", create_time=T1))], [],
        kind=codec.KIND_JOURNAL_SLOT, chunk_chars=10_000, inline_chars=10_000, dimension=8,
    )  # fmt: skip
    memories = await exhaustive._chroma.collection(exhaustive._chroma.name(BANK, MEM))
    rows = [codec.memory_row(updated), *legacy]
    await asyncio.to_thread(
        memories.upsert,
        ids=[row[0] for row in rows],
        embeddings=[row[1] for row in rows],
        metadatas=[row[3] for row in rows],
        documents=[row[2] or "" for row in rows],
    )
    await exhaustive.aclose()
    exhaustive = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    [revised, _] = await exhaustive.list_revisions(BANK, "m001", NOW)  # completed on first use
    assert (revised.revision_id, revised.fact) == ("r2", "m001, updated")
    for query in rng.normal(size=(5, 8)):
        query /= np.linalg.norm(query)
        distances = np.linalg.norm(vectors - query, axis=1)
        exact = [f"m{i:03d}" for i in sorted(range(300), key=lambda i: (distances[i], i))[:10]]
        for store in (exhaustive, overfetching):
            hits = await store.nearest(BANK, NearestQuery(KEY, tuple(query.tolist()), 10, NOW))
            assert [hit.record.memory_id for hit in hits] == exact
    assert len(await exhaustive.scan(BANK, ScanQuery(NOW))) == 300
    await exhaustive.aclose()
    await overfetching.aclose()
    await assert_no_journal_pending(tmp_path)


def test_write_requests_are_bounded_in_rows_and_bytes() -> None:
    rows: list[codec.Row] = [(f"r{i}", [0.0] * 4, None, {"p": "x" * 1000}) for i in range(10)]
    assert [len(chunk) for chunk in _sizing.requests(rows, (4, None))] == [4, 4, 2]
    per_row = _sizing.row_bytes(rows[0])
    chunks = list(_sizing.requests(rows, (100, 3 * per_row)))
    assert [len(chunk) for chunk in chunks] == [3, 3, 3, 1]
    assert [len(c) for c in _sizing.requests(rows, (100, per_row // 2))] == [1] * 10  # never 0
    assert _sizing.fits_one_request(rows, (10, None))
    assert not _sizing.fits_one_request(rows, (10, 9 * per_row))


async def test_writers_of_one_bank_take_turns_across_store_instances(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal lock is the store's file lock, so it holds across instances and processes."""
    monkeypatch.setattr(_journal, "JOURNAL_WAIT_SECONDS", 0.3)
    writer = await prepared(tmp_path)
    other = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    async with other._journal.lock(BANK):
        with pytest.raises(ResourceExhausted, match="locked"):
            await writer.apply(BANK, GENERATE)
    await writer.apply(BANK, GENERATE)
    assert await snapshot(other) == await expected(SETUP, GENERATE)
    await other.aclose()
    await writer.aclose()


# The slot's probes: a batch journaled in the slot has no closing write, so a replay decides
# from the rows it probes whether the batch is complete. Each attack below would make a wrong
# probe re-apply an old batch over newer rows, or skip an interrupted one.


async def test_a_complete_slot_is_not_replayed_over_a_larger_later_batch(
    tmp_path: Path, writes: Writes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The slot's batch wrote `a` and `c`; a later batch too large for one call (an aux
    journal, which does not fill the slot) rewrites them and crashes after its commit. Neither
    its replay nor a later open may bring back the slot's older rows."""
    store = await prepared(tmp_path)
    await store.apply(BANK, GENERATE)  # in the slot: it probes one of `a`, `c`
    later = LATER

    async def tiny_limits(self: Chroma) -> tuple[int, int | None]:
        return 2, None

    async def apply_large(target: ChromaMemoryStore) -> None:
        with monkeypatch.context() as patch:
            patch.setattr(Chroma, "limits", tiny_limits)
            patch.setattr(_journal, "JOURNAL_INLINE_CHARS", 0)
            await target.apply(BANK, later)

    writes.log.clear()
    await apply_large(store)
    total = len(writes.log)
    await store.aclose()
    for crash_at in range(writes.commit_index() + 1, total + 1):  # after its commit row
        path = tmp_path / f"crash-{crash_at}"
        crashed = await prepared(path)
        await crashed.apply(BANK, GENERATE)
        writes.crash_before(crash_at)
        with pytest.raises(Crash) if crash_at < total else contextlib.nullcontext():
            await apply_large(crashed)
        writes.crash_before(None)
        fresh = ChromaMemoryStore.from_uri(f"chroma://{path}")
        state = await snapshot(fresh)
        assert state == await expected(SETUP, GENERATE, later), f"crash before write {crash_at}"
        assert_consistent(state)
        await fresh.aclose()
        await crashed.aclose()
        await assert_no_journal_pending(path)


async def test_deleting_an_absent_id_last_cannot_hide_an_interrupted_deletion(
    tmp_path: Path, writes: Writes
) -> None:
    """The slot probes the last id its batch deletes: an id that never existed is not one."""
    batch = WriteBatch(
        deletes=("a", "ghost"),
        revisions=(revision("a", "r2", fact="fact of a", create_time=T1, deleted=True),),
    )
    before, after = await expected(SETUP), await expected(SETUP, batch)
    total, commit = await count_writes(tmp_path / "dry", writes, batch)
    for crash_at in range(total):
        state = await crash_and_recover(tmp_path / f"crash-{crash_at}", writes, batch, crash_at)
        assert state == (before if crash_at <= commit else after), f"crash before write {crash_at}"
        await assert_no_journal_pending(tmp_path / f"crash-{crash_at}")


@pytest.mark.usefixtures("memory_slot")  # GENERATE takes the memory slot, the rest aux
@pytest.mark.parametrize("deleting", [DELETE_ONLY, GENERATE], ids=["aux-slot", "memory-slot"])
async def test_a_deleted_then_recreated_memory_is_not_deleted_again(
    tmp_path: Path, writes: Writes, deleting: WriteBatch
) -> None:
    """A batch deletes `b` (DELETE_ONLY in the aux slot, GENERATE in the memory collection's);
    the next, a one-row batch in the aux slot, creates `b` again and is cut short at each call:
    the first batch's slot, closed, must not be replayed before it and delete `b` again."""
    recreate = WriteBatch(
        inserts=(memory("b", HALF, fact="b, again", create_time=NOW),),
        revisions=(revision("b", "r3", fact="b, again", create_time=NOW),),
    )
    for crash_at in (1, 2):  # before the memory row; after it (the batch has two writes)
        path = tmp_path / f"crash-{crash_at}"
        crashed = await prepared(path)
        await crashed.apply(BANK, deleting)
        writes.crash_before(crash_at)
        with pytest.raises(Crash) if crash_at < 2 else contextlib.nullcontext():
            await crashed.apply(BANK, recreate)
        writes.crash_before(None)
        fresh = ChromaMemoryStore.from_uri(f"chroma://{path}")
        assert await snapshot(fresh) == await expected(SETUP, deleting, recreate)
        await fresh.aclose()
        await crashed.aclose()
        await assert_no_journal_pending(path)


async def test_a_slot_in_several_parts_is_replayed_whole_and_ignores_older_parts(
    tmp_path: Path, writes: Writes, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot journal longer than a row holds is cut into parts written in its one call; a
    shorter later slot leaves the older batch's extra parts behind, which must not disturb its
    replay."""
    monkeypatch.setattr(_journal, "JOURNAL_INLINE_CHARS", 0)
    monkeypatch.setattr(_journal, "JOURNAL_CHUNK_CHARS", 300)
    later = WriteBatch(
        upserts=(memory("a", HALF, fact="a, later", update_time=NOW),),
        revisions=(revision("a", "r3", fact="a, later", create_time=NOW),),
    )
    before, after = await expected(SETUP, GENERATE), await expected(SETUP, GENERATE, later)

    def slot_parts() -> int:
        return sum(bool(re.match(r"^j:slot:\d+$", row_id)) for row_id in writes.log[0][2])

    await count_writes(tmp_path / "dry", writes, later)
    fewer = slot_parts()
    _, commit = await count_writes(tmp_path / "dry-2", writes, GENERATE)
    assert commit == 0 and slot_parts() > fewer > 1
    for crash_at in range(3):
        path = tmp_path / f"crash-{crash_at}"
        crashed = await prepared(path)
        await crashed.apply(BANK, GENERATE)  # more parts than the later batch's slot
        writes.crash_before(crash_at)
        with pytest.raises(Crash) if crash_at < 2 else contextlib.nullcontext():
            await crashed.apply(BANK, later)
        writes.crash_before(None)
        fresh = ChromaMemoryStore.from_uri(f"chroma://{path}")
        state = await snapshot(fresh)
        assert state == (before if crash_at == 0 else after), f"crash before write {crash_at}"
        assert_consistent(state)
        await fresh.aclose()
        await crashed.aclose()
        await assert_no_journal_pending(path)


# A batch of many memory rows is journaled in the memory collection's slot, with its rows: the
# aux slot is emptied first, then the memory rows and the slot (the commit), the deletions,
# and the revisions with `j:done`. `_MEMORY_SLOT_ROWS` is lowered so that GENERATE's two memory
# rows take that path.


@pytest.fixture
def memory_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_journal, "MEMORY_SLOT_ROWS", 2)


def memory_slot_commit(writes: Writes) -> int:
    """The index of the write of a memory-slot batch's memory rows and slot (its commit)."""
    return next(
        index
        for index, (_, name, ids) in enumerate(writes.log)
        if name.endswith(f".{MEM}") and codec.SLOT_ID in ids
    )


@pytest.mark.usefixtures("memory_slot")
@pytest.mark.parametrize("batch", [GENERATE, GENERATE_WITH_STREAM], ids=["generate", "document"])
async def test_a_memory_slot_batch_crashed_between_any_two_calls_is_none_or_all(
    tmp_path: Path, writes: Writes, batch: WriteBatch
) -> None:
    before, after = await expected(SETUP), await expected(SETUP, batch)
    total, _ = await count_writes(tmp_path / "dry", writes, batch)
    commit = memory_slot_commit(writes)
    calls = [(name.rsplit(".", 1)[-1], method) for method, name, _ in writes.log]
    assert (
        calls[commit - 1 :]
        == [
            ("aux", "upsert"),  # the emptied aux slot
            ("mem", "upsert"),  # the memory rows and the slot
            ("mem", "delete"),
            ("aux", "upsert"),  # the revisions, index rows and j:done
            *calls[commit + 3 :],  # the stream's due entry, after the batch
        ]
    )
    assert codec.DONE_ID in writes.log[commit + 2][2]
    for crash_at in range(total):
        state = await crash_and_recover(tmp_path / f"crash-{crash_at}", writes, batch, crash_at)
        assert state == (before if crash_at <= commit else after), f"crash before write {crash_at}"
        assert_consistent(state)
        await assert_no_journal_pending(tmp_path / f"crash-{crash_at}")


@pytest.mark.usefixtures("memory_slot")
async def test_an_aux_slot_batch_is_not_replayed_over_a_memory_slot_batch(
    tmp_path: Path, writes: Writes
) -> None:
    """UPDATE_ONLY (one row: the aux slot, probing `a`) is complete; LATER rewrites `a` in the
    memory slot. Without the aux slot emptied first, `a` would carry another batch's `jb`, and
    a replay would bring UPDATE_ONLY's `a` back over LATER's, at any crash or none."""
    total, _ = await count_writes(tmp_path / "dry", writes, LATER)
    commit = memory_slot_commit(writes)
    for crash_at in range(total + 1):
        path = tmp_path / f"crash-{crash_at}"
        crashed = await prepared(path)
        await crashed.apply(BANK, UPDATE_ONLY)
        writes.crash_before(crash_at)
        with pytest.raises(Crash) if crash_at < total else contextlib.nullcontext():
            await crashed.apply(BANK, LATER)
        writes.crash_before(None)
        fresh = ChromaMemoryStore.from_uri(f"chroma://{path}")
        state = await snapshot(fresh)
        done = (SETUP, UPDATE_ONLY, LATER) if crash_at > commit else (SETUP, UPDATE_ONLY)
        assert state == await expected(*done), f"crash before write {crash_at}"
        assert_consistent(state)
        await fresh.aclose()
        await crashed.aclose()
        await assert_no_journal_pending(path)


@pytest.mark.usefixtures("memory_slot")
@pytest.mark.parametrize("when", ["before", "after"])
async def test_a_memory_slot_write_that_failed_is_checked_in_the_memory_collection(
    tmp_path: Path, writes: Writes, when: str
) -> None:
    """The driver raised on the commit write: the slot is looked up where it was written."""
    store = await prepared(tmp_path)
    writes.log.clear()

    def fail(index: int, ids: list[str]) -> str | None:
        name = writes.log[index][1]
        return when if name.endswith(f".{MEM}") and codec.SLOT_ID in ids else None

    writes.fail = fail
    with pytest.raises(StoreUnavailable) if when == "before" else contextlib.nullcontext():
        await store.apply(BANK, GENERATE)
    writes.fail = None
    done = (SETUP, GENERATE) if when == "after" else (SETUP,)
    assert await snapshot(store) == await expected(*done)
    await store.aclose()
    await assert_no_journal_pending(tmp_path)


async def test_an_import_sized_batch_takes_the_memory_slot_and_survives_a_crash_after_it(
    tmp_path: Path, writes: Writes
) -> None:
    """At the real `_MEMORY_SLOT_ROWS`: the batch's memory rows and slot go in one call, and a
    crash right after it is completed by the next store."""
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(_journal.MEMORY_SLOT_ROWS, 8)).astype(np.float32)
    ids = [f"n{i:03d}" for i in range(len(vectors))]
    batch = WriteBatch(
        inserts=tuple(memory(i, tuple(map(float, v))) for i, v in zip(ids, vectors, strict=True)),
        revisions=tuple(revision(i, "r1", fact=f"fact of {i}") for i in ids),
    )
    await count_writes(tmp_path / "dry", writes, batch)
    commit = memory_slot_commit(writes)
    assert {*ids, codec.SLOT_ID} <= set(writes.log[commit][2])  # and the journal's parts
    crashed = await prepared(tmp_path / "crash")
    writes.crash_before(commit + 1)
    with pytest.raises(Crash):
        await crashed.apply(BANK, batch)
    writes.crash_before(None)
    fresh = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'crash'}")
    assert len(await fresh.scan(BANK, ScanQuery(NOW))) == len(ids) + 2
    for memory_id in ids[:3]:
        [latest] = await fresh.list_revisions(BANK, memory_id, NOW)
        assert latest.fact == f"fact of {memory_id}"
    await fresh.aclose()
    await crashed.aclose()
    await assert_no_journal_pending(tmp_path / "crash")


# A journal never wedges a bank (issue 27): a batch Chroma refuses is set aside


def _evil_row(batch_id: str, value: float = float("nan")) -> codec.Row:
    """A memory row of another user's scope whose vector Chroma refuses, as a batch carries it."""
    row_id, vector, document, meta = codec.memory_row(
        memory("evil", (value,) + (0.0,) * 7, scope={"user_id": "mallory"})
    )
    return row_id, vector, document, {**meta, codec.JOURNAL_BATCH: batch_id}


def _poison_refused_aux_slot(
    batch_id: str, memories: Any, aux: Any
) -> list[tuple[Any, list[codec.Row]]]:
    return [
        (
            aux,
            codec.slot_rows(
                batch_id, [_evil_row(batch_id)], ["b"], chunk_chars=10**6, inline_chars=10**6
            ),
        )
    ]


def _poison_refused_aux_journal(
    batch_id: str, memories: Any, aux: Any
) -> list[tuple[Any, list[codec.Row]]]:
    rows = codec.journal_rows(
        codec.batch_head_id(batch_id), batch_id, [_evil_row(batch_id, float("-inf"))],
        [codec.revision_row(revision("evil", "r1", scope={"user_id": "mallory"}))], ["b"],
        kind=codec.KIND_JOURNAL, chunk_chars=300,
    )  # fmt: skip
    return [(aux, rows)]


def _poison_corrupt_memory_slot(
    batch_id: str, memories: Any, aux: Any
) -> list[tuple[Any, list[codec.Row]]]:
    head = {
        codec.KIND: codec.KIND_JOURNAL_SLOT,
        codec.JOURNAL_BATCH: batch_id,
        codec.JOURNAL_PARTS: 0,
        codec.PAYLOAD: '{"v": 1, "m": [], "r": [["r:x", {"k": []}]]}',
    }
    vector = list(np.full(8, 8**-0.5))
    return [(memories, [(codec.SLOT_ID, vector, None, head)])]


def _poison_malformed_aux_slot(
    batch_id: str, memories: Any, aux: Any
) -> list[tuple[Any, list[codec.Row]]]:
    head = {codec.KIND: codec.KIND_JOURNAL_SLOT, codec.PAYLOAD: "not json at all"}
    return [(aux, [(codec.SLOT_ID, codec.placeholder_vector(codec.SLOT_ID), None, head)])]


def _poison_malformed_aux_journal(
    batch_id: str, memories: Any, aux: Any
) -> list[tuple[Any, list[codec.Row]]]:
    head_id = codec.batch_head_id(batch_id)
    head = {codec.KIND: codec.KIND_JOURNAL, codec.JOURNAL_BATCH: batch_id}  # no parts, no text
    return [(aux, [(head_id, codec.placeholder_vector(head_id), None, head)])]


POISONS = {
    "refused-in-the-aux-slot": _poison_refused_aux_slot,
    "refused-in-an-aux-journal": _poison_refused_aux_journal,
    "corrupt-in-the-memory-slot": _poison_corrupt_memory_slot,
    "malformed-aux-slot": _poison_malformed_aux_slot,
    "malformed-aux-journal": _poison_malformed_aux_journal,
}


@pytest.fixture(params=["embedded", "server"])
def location(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Where the poisoned bank lives: an embedded folder, or a Chroma server."""
    if request.param == "embedded":
        return f"chroma://{tmp_path / 'db'}"
    prefix = f"aside-{uuid.uuid4().hex[:8]}"
    return f"{request.getfixturevalue('chroma_http_url')}&collection_prefix={prefix}"


async def _poisoned(location: str, poison: Callable[..., list[tuple[Any, list[codec.Row]]]]) -> str:
    """A bank holding SETUP, with a journal a crashed (or hostile) writer left pending."""
    store = ChromaMemoryStore.from_uri(location)
    await store.create_bank(bank_record())
    await store.apply(BANK, SETUP)
    memories = await store._chroma.collection(store._chroma.name(BANK, MEM))
    aux = await store._chroma.collection(store._chroma.name(BANK, AUX))
    batch_id = _journal.new_batch_id()
    for collection, rows in poison(batch_id, memories, aux):
        # Rows replaced whole: an upsert would keep the fields of the row it replaces.
        await store._chroma.delete_ids("poison the journal", collection, [row[0] for row in rows])
        await store._chroma.write("poison the journal", collection, rows)
    assert [entry[0] for entry in (await store._journal.state(memories, aux)).journals] in (
        [batch_id], [codec.SLOT_ID],
    )  # fmt: skip
    await store.aclose()
    return batch_id


@pytest.mark.parametrize("poison", list(POISONS), ids=list(POISONS))
async def test_a_journal_that_can_never_be_completed_is_set_aside_and_the_bank_serves(
    location: str, poison: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A journal whose batch Chroma refuses (a NaN or -inf vector), or that no version wrote
    (corrupt, malformed), left pending in each of its homes: the next store to open the bank
    sets it aside (reported, logged at ERROR) and every user reads and writes; later stores find
    nothing pending; an operator discards it."""
    batch_id = await _poisoned(location, POISONS[poison])
    store = ChromaMemoryStore.from_uri(location)
    try:
        state = await snapshot(store)  # the first read replays the journal
        assert state == await expected(SETUP)  # nothing of the set-aside batch was written
        later = WriteBatch(
            upserts=(memory("c", HALF, fact="c, later", update_time=NOW),),
            revisions=(revision("c", "r1", fact="c, later", create_time=NOW),),
        )
        await store.apply(BANK, later)
        assert await snapshot(store) == await expected(SETUP, later)
        [report] = await set_aside_batches(store, BANK)
        assert report["batch_id"] in (batch_id, codec.SLOT_ID)
        if poison.startswith("refused"):
            assert report["memory_ids"] == ["evil"] and report["deleted_ids"] == ["b"]
            assert "refused" in report["reason"] and report["readable"] is True
        logged = [r for r in caplog.records if r.levelname == "ERROR" and "set aside" in r.message]
        assert len(logged) == 1 and BANK in logged[0].message
    finally:
        await store.aclose()
    caplog.clear()
    again = ChromaMemoryStore.from_uri(location)
    try:
        assert await snapshot(again) == await expected(SETUP, later)
        memories = await again._chroma.collection(again._chroma.name(BANK, MEM))
        aux = await again._chroma.collection(again._chroma.name(BANK, AUX))
        assert (await again._journal.state(memories, aux)).journals == []
        assert not [r for r in caplog.records if r.levelname == "ERROR"]
        assert await discard_set_aside(again, BANK, report["batch_id"])
        assert await set_aside_batches(again, BANK) == []
        assert await again.list_documents(BANK, SET_ASIDE_PART_KIND) == []
        assert not await discard_set_aside(again, BANK, report["batch_id"])
    finally:
        await again.aclose()


async def test_a_batch_refused_while_it_is_written_is_set_aside_and_the_caller_told(
    tmp_path: Path, writes: Writes
) -> None:
    """Chroma refuses a batch's memory rows after its journal was committed (a refusal no
    check foresaw): the caller gets `InvalidArgument` saying the batch was set aside, the bank
    goes on serving, and the next batch is written."""
    store = await prepared(tmp_path)
    writes.log.clear()
    writes.fail = lambda index, ids: "refuse" if "c" in ids and index > 0 else None
    with pytest.raises(InvalidArgument, match="set aside for an operator"):
        await store.apply(BANK, GENERATE)
    writes.fail = None
    [report] = await set_aside_batches(store, BANK)
    assert sorted(report["memory_ids"]) == ["a", "c"] and report["deleted_ids"] == ["b"]
    later = WriteBatch(revisions=(revision("c", "r9", create_time=NOW),))
    await asyncio.wait_for(store.apply(BANK, later), timeout=10)
    assert [r.revision_id for r in await store.list_revisions(BANK, "c", NOW)][0] == "r9"
    await store.aclose()
    await assert_no_journal_pending(tmp_path)


async def test_an_outage_sets_nothing_aside(tmp_path: Path, writes: Writes) -> None:
    """A committed batch left pending, and Chroma failing every write (down, resetting
    connections): every use of the bank is `StoreUnavailable`, nothing is set aside, and once
    Chroma is back the batch is completed whole."""
    crashed = await prepared(tmp_path)
    writes.crash_before(1)  # after the commit row
    with pytest.raises(Crash):
        await crashed.apply(BANK, GENERATE)
    writes.crash_before(None)
    writes.fail = lambda index, ids: "before"
    failing = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    for _attempt in range(3):
        with pytest.raises(StoreUnavailable):
            await failing.scan(BANK, ScanQuery(NOW))
        with pytest.raises(StoreUnavailable):
            await failing.apply(BANK, WriteBatch(revisions=(revision("c", "r9"),)))
    writes.fail = None
    assert await set_aside_batches(failing, BANK) == []
    assert await snapshot(failing) == await expected(SETUP, GENERATE)
    for store in (failing, crashed):
        await store.aclose()
    await assert_no_journal_pending(tmp_path)


def test_a_journal_chromas_client_would_refuse_is_corrupt() -> None:
    """Rows the client refuses with a `ValueError` (indistinguishable from an outage) never
    reach a replay: an empty or mixed list, a nested object, an empty key, a row twice."""
    good = {"v": 1, "m": [], "r": [["r1", {"k": "rev"}]], "d": []}
    assert codec.decode_journal([json.dumps(good)])[1][0][0] == "r1"
    for meta in ({"k": []}, {"k": [1, "x"]}, {"k": {"a": 1}}, {"": 1}):
        with pytest.raises(ValueError):
            codec.decode_journal([json.dumps({**good, "r": [["r1", meta]]})])
    with pytest.raises(ValueError):
        codec.decode_journal([json.dumps({**good, "r": [["r1", {}], ["r1", {}]]})])
    with pytest.raises(codec.NewerJournal):
        codec.decode_journal([json.dumps({**good, "v": 2})])
    # A batch id that is no time (a poisoned head) is reported without a time, not a crash.
    assert _journal._batch_time("9" * 40 + "-x") is None
    assert _journal._batch_time(_journal.new_batch_id()) is not None


def test_the_set_aside_command_lists_and_discards(tmp_path: Path) -> None:
    """`adk-memory banks set-aside` shows what a store set aside (as a table and as JSON, for
    one bank or all) and `--discard` removes it; a wrong discard is a one-line error."""
    uri = f"chroma://{tmp_path / 'db'}"
    batch_id = asyncio.run(_poisoned(uri, _poison_refused_aux_slot))
    runner = CliRunner()
    listed = runner.invoke(app, ["banks", "set-aside", "--uri", uri, "--json"])
    assert listed.exit_code == 0, listed.stderr
    [report] = json.loads(listed.stdout)
    assert (report["bank"], report["batch_id"], report["memory_ids"]) == (BANK, batch_id, ["evil"])
    table = runner.invoke(app, ["banks", "set-aside", "--uri", uri, "-b", BANK])
    assert table.exit_code == 0 and batch_id[:20] in table.stdout, table.stderr
    for wrong in (["--discard", batch_id], ["--discard", "no-such-batch", "-b", BANK]):
        failed = runner.invoke(app, ["banks", "set-aside", "--uri", uri, *wrong])
        assert failed.exit_code == 1 and failed.stderr.startswith("error: INVALID_ARGUMENT")
    discarded = runner.invoke(
        app, ["banks", "set-aside", "--uri", uri, "-b", BANK, "--discard", batch_id]
    )
    assert discarded.exit_code == 0, discarded.stderr
    empty = runner.invoke(app, ["banks", "set-aside", "--uri", uri])
    assert empty.exit_code == 0 and "No set-aside batches." in empty.stdout
