"""The vector cache's shared rows (`_vectors._Rows`): a scope's cached versions share rows that
writes only append to; a write lays them out again only when they are full or more than a
sixteenth of them are dropped ones. Every version, an old one held by a search included, is its
memories exactly: the same snapshot and the same ranking as a cold read of them."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore, _vectors
from adk_memory_chroma import _codec as codec
from test_write_through import NOW, Snapshot, cached, cold, snapshot, top, two_stores, vector

from adk_memory.filters import Condition, Op
from adk_memory.store import NearestQuery, WriteBatch
from adk_memory.testing.conformance import BANK, DIM, KEY, T0, memory

__all__ = ["two_stores"]  # the fixture, shared with test_write_through

AsRead = Callable[[list[Any]], np.ndarray[Any, Any]]
NOW_US = codec.micros(NOW)
EXPIRIES = [None, T0 + timedelta(seconds=30), T0 + timedelta(days=1)]
OTHER = _vectors.ScopeVectors.build(("c", "other"), "x", ["o"], [[1.0] * DIM], {"o": 1})


class Chain:
    """A scope's cached entry advanced by single writes, and the memories the test knows.

    `known` maps each memory to its vector as a read returns it and its expiry: what a cold read
    of the scope would cache.
    """

    def __init__(self, size: int, seed: int, built: AsRead, written: AsRead) -> None:
        self.rng = random.Random(seed)
        self.written = written
        self.next_id = 0
        self.known: Snapshot = {}
        self.learn([self.row(self.fresh_id()) for _ in range(size)], built)
        self.entry = self.cold("v0")
        self.writes = 0

    def fresh_id(self) -> str:
        self.next_id += 1
        return f"m{self.next_id:04d}"

    def row(self, memory_id: str) -> codec.Row:
        record = memory(memory_id, vector(self.rng), expire_time=self.rng.choice(EXPIRIES))
        return codec.memory_row(record)

    def cold(self, version: str) -> _vectors.ScopeVectors:
        """The entry a read of the scope would build now."""
        ids = list(self.known)
        embeddings = [list(self.known[memory_id][0]) for memory_id in ids]
        live_us = {memory_id: self.known[memory_id][1] for memory_id in ids}
        return _vectors.ScopeVectors.build(("c", "s"), version, ids, embeddings, live_us)

    def write(self, touched: set[str], rows: list[codec.Row]) -> _vectors.ScopeVectors:
        """Advances the entry past a batch that touched `touched` and wrote `rows` here."""
        write = self.next_write(touched, rows)
        successor = self.entry.after(write)
        assert successor is not None and successor.version == write.version
        self.entry = successor
        return successor

    def next_write(self, touched: set[str], rows: list[codec.Row]) -> _vectors.ScopeWrite:
        """The next batch, its memories known from now on; `entry` is its successor if cached
        (by `VectorCache.write_through`)."""
        self.writes += 1
        write = _vectors.ScopeWrite(
            f"v{self.writes}",
            f"v{self.writes - 1}",
            frozenset(touched | {row[0] for row in rows}),
            rows,
            self.written,
        )
        for memory_id in touched:
            self.known.pop(memory_id, None)
        self.learn(rows, self.written)
        return write

    def learn(self, rows: list[codec.Row], as_read: AsRead) -> None:
        """The memories of `rows` from now on, their vectors as `as_read` gives them."""
        if rows:
            vectors = as_read([row[1] for row in rows]).tolist()
            for row, read in zip(rows, vectors, strict=True):
                self.known[row[0]] = (tuple(read), int(row[3][codec.LIVE_US]))

    def create(self, memory_id: str | None = None) -> _vectors.ScopeVectors:
        return self.write(set(), [self.row(memory_id or self.fresh_id())])

    def update(self, memory_id: str) -> _vectors.ScopeVectors:
        return self.write({memory_id}, [self.row(memory_id)])

    def delete(self, memory_id: str) -> _vectors.ScopeVectors:
        """A delete, or a move out of the scope: the same to this scope."""
        return self.write({memory_id}, [])

    def random_step(self) -> _vectors.ScopeVectors:
        """A create, update or delete, a batch of several, or a batch of another scope."""
        ids = sorted(self.known)
        kind = self.rng.choice(["create", "update", "delete", "delete", "several", "elsewhere"])
        if kind == "elsewhere" or not ids:
            return self.write({"not-in-this-scope"}, [])
        if kind == "several":
            chosen = self.rng.sample(ids, min(3, len(ids)))
            rows = [self.row(memory_id) for memory_id in chosen[1:]] + [self.row(self.fresh_id())]
            return self.write({chosen[0]} | set(chosen[1:]), rows)
        if kind == "create":
            return self.create()
        memory_id = self.rng.choice(ids)
        return self.update(memory_id) if kind == "update" else self.delete(memory_id)


def ranking(entry: _vectors.ScopeVectors, query: np.ndarray[Any, Any], now_us: int) -> list[str]:
    return entry.nearest(query, entry.live(now_us), 7)


def assert_as_cold(chain: Chain, entry: _vectors.ScopeVectors, queries: int = 3) -> None:
    """`entry` holds exactly the chain's memories and ranks them as a cold read would."""
    fresh = chain.cold(entry.version)
    assert snapshot(entry) == chain.known
    assert entry.size == len(chain.known) and sorted(entry.memory_ids) == sorted(chain.known)
    for _ in range(queries):
        query = np.asarray(vector(chain.rng))
        for now_us in (codec.micros(T0), NOW_US):
            assert ranking(entry, query, now_us) == ranking(fresh, query, now_us)


AS_READ: dict[str, tuple[AsRead, AsRead]] = {
    "embedded": (_vectors.as_read_embedded, _vectors.as_read_embedded),
    "server": (_vectors.as_read_http, _vectors.as_read_http),
    "float32 read, then server rows": (_vectors.as_read_embedded, _vectors.as_read_http),
}


@pytest.mark.parametrize("reads", list(AS_READ))
@pytest.mark.parametrize("seed", range(3))
def test_random_writes_keep_every_version_as_its_cold_read(reads: str, seed: int) -> None:
    """Across appends and layouts, each version stays its memories, however many came after."""
    chain = Chain(40, seed, *AS_READ[reads])
    history: list[tuple[_vectors.ScopeVectors, Snapshot]] = []
    layouts = appends = 0
    for _ in range(300):
        before = chain.entry
        history.append((before, dict(chain.known)))
        after = chain.random_step()
        appends += after.rows is before.rows
        layouts += after.rows is not before.rows
        assert_as_cold(chain, after, queries=1)
    assert appends > 150 and layouts > 20
    for entry, known in history:  # searches that held an old version: nothing moved under them
        assert snapshot(entry) == known


def test_rows_are_laid_out_again_only_when_full_or_more_than_a_sixteenth_dropped() -> None:
    chain = Chain(32, 1, _vectors.as_read_embedded, _vectors.as_read_embedded)
    built = chain.entry.rows
    assert built.capacity == 32  # a cold read holds no room
    ids = sorted(chain.known)
    assert chain.delete(ids[0]).rows is built and chain.delete(ids[1]).rows is built  # 2/32
    assert chain.delete(ids[2]).rows is not built  # 3/32 dropped: laid out again
    laid = chain.entry.rows
    assert (chain.entry.count, laid.capacity) == (29, 29 + 29 // 4 + 4)
    for _ in range(laid.capacity - 29):
        assert chain.create().rows is laid
    assert chain.entry.count == laid.capacity
    assert chain.create().rows is not laid  # full
    assert chain.entry.count == len(chain.known) == 41
    assert_as_cold(chain, chain.entry)


def test_rows_that_are_not_float32_values_widen_the_rows_never_narrow() -> None:
    """A server's rows (decimals parsed as float64) appended to float32 rows of a cold read."""
    chain = Chain(16, 9, _vectors.as_read_embedded, _vectors.as_read_http)
    for memory_id in sorted(chain.known)[:3]:
        chain.delete(memory_id)  # laid out again, float32 still, with room
    narrow = chain.entry.rows
    assert narrow.matrix.dtype == np.float32 and narrow.capacity > chain.entry.count
    widened = chain.create()
    assert widened.rows is not narrow and widened.rows.matrix.dtype == np.float64
    assert_as_cold(chain, widened)


def test_a_memory_deleted_then_created_again_is_one_memory_with_its_new_vector() -> None:
    chain = Chain(20, 2, _vectors.as_read_embedded, _vectors.as_read_embedded)
    chain.create()  # laid out with room: what follows appends
    again = sorted(chain.known)[0]
    old_vector = np.asarray(chain.known[again][0])
    before = chain.entry
    deleted = chain.delete(again)
    created = chain.create(again)
    new_vector = np.asarray(chain.known[again][0])
    assert created.rows is before.rows and created.count == before.count + 1
    assert_as_cold(chain, created)
    assert created.memory_ids.count(again) == 1 and again not in deleted.memory_ids
    assert ranking(created, new_vector, NOW_US)[0] == again
    assert again not in ranking(created, old_vector, NOW_US)[:1]
    assert ranking(before, old_vector, NOW_US)[0] == again  # the old version keeps the old row
    assert again not in ranking(deleted, old_vector, NOW_US)
    everything = created.nearest(old_vector, created.live(0), created.count)
    assert everything.count(again) == 1  # its dropped row is never a result


def test_a_write_failing_half_way_leaves_its_version_whole_and_its_rows_never_appended_to(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chain = Chain(32, 10, _vectors.as_read_embedded, _vectors.as_read_embedded)
    before = chain.create()  # laid out with room
    known = dict(chain.known)
    victim = sorted(known)[0]
    write = _vectors.ScopeWrite(
        "failed", before.version, frozenset({victim, "new"}), [chain.row("new")], chain.written
    )

    def out_of_memory(ids: Any) -> int:
        raise MemoryError("no memory for the ids")

    monkeypatch.setattr(_vectors, "ids_nbytes", out_of_memory)  # after rows were written
    with pytest.raises(MemoryError):
        before.after(write)
    monkeypatch.undo()
    assert snapshot(before) == known
    following = chain.create()
    assert following.rows is not before.rows  # laid out afresh from the version, not appended
    assert_as_cold(chain, following)


def test_a_search_on_another_thread_holding_an_old_version_sees_it_unchanged() -> None:
    chain = Chain(300, 3, _vectors.as_read_embedded, _vectors.as_read_embedded)
    chain.create()
    held, known = chain.entry, dict(chain.known)
    queries = [np.asarray(vector(chain.rng)) for _ in range(4)]
    answers = [ranking(held, query, NOW_US) for query in queries]
    stop = threading.Event()
    wrong: list[list[str]] = []
    searches = 0

    def search() -> None:
        nonlocal searches
        while not stop.is_set():
            for query, answer in zip(queries, answers, strict=True):
                found = ranking(held, query, NOW_US)
                searches += 1
                if found != answer:
                    wrong.append(found)

    searcher = threading.Thread(target=search)
    searcher.start()
    layouts = 0
    try:
        for _ in range(400):  # deletes, updates and creates of the held version's memories
            before = chain.entry
            layouts += chain.random_step().rows is not before.rows
    finally:
        stop.set()
        searcher.join()
    assert not wrong and searches > 0 and layouts > 0
    assert snapshot(held) == known
    assert_as_cold(chain, chain.entry)


def test_advancing_a_version_that_is_not_the_newest_leaves_the_newer_ones_alone() -> None:
    """The cache only advances its newest version, but an older one must not append either."""
    chain = Chain(16, 4, _vectors.as_read_embedded, _vectors.as_read_embedded)
    older = chain.create()  # laid out with room
    newer = chain.create()
    newer_known = dict(chain.known)
    assert newer.rows is older.rows
    other = chain.row("elsewhere")
    write = _vectors.ScopeWrite(
        "fork", older.version, frozenset({"elsewhere"}), [other], chain.written
    )
    fork = older.after(write)
    assert fork is not None and fork.rows is not older.rows
    assert snapshot(newer) == newer_known
    assert sorted(snapshot(fork)) == sorted([*snapshot(older), "elsewhere"])
    assert chain.create().rows is newer.rows  # the newest still appends
    assert_as_cold(chain, chain.entry)


def counted(cache: _vectors.VectorCache) -> None:
    """The cache's bytes are its entries', within its budget."""
    assert cache._bytes == sum(entry.nbytes for entry in cache._entries.values())
    assert cache._bytes <= cache._max_bytes


def test_the_cache_counts_each_entry_by_all_its_rows_dropped_ones_and_room_included() -> None:
    chain = Chain(64, 5, _vectors.as_read_embedded, _vectors.as_read_embedded)
    cache = _vectors.VectorCache(10**6)
    cache.put(OTHER)
    cache.put(chain.entry)
    key, built = chain.entry.key, chain.entry.nbytes
    for memory_id in sorted(chain.known)[:4]:
        cache.write_through(key, chain.next_write({memory_id}, []))
        dropped = cache._entries[key]
        assert dropped.rows is chain.entry.rows and dropped.size < 64
        assert dropped.nbytes == built  # dropped rows are still held
        counted(cache)
    cache.write_through(key, chain.next_write(set(), [chain.row(chain.fresh_id())]))
    grown = cache._entries[key]
    rows = grown.rows
    allocated = rows.matrix.nbytes + rows.squared_norms.nbytes
    allocated += rows.live_us.nbytes + rows.gone_at.nbytes
    assert rows.capacity > grown.count and allocated == rows.capacity * (DIM * 4 + 3 * 8)
    assert grown.nbytes > allocated  # room counted, and the ids
    counted(cache)


def test_write_through_keeps_the_cache_within_its_budget_as_rows_grow() -> None:
    chain = Chain(64, 7, _vectors.as_read_embedded, _vectors.as_read_embedded)
    key = chain.entry.key
    cache = _vectors.VectorCache(chain.entry.nbytes + OTHER.nbytes + 2_000)
    cache.put(OTHER)
    cache.put(chain.entry)
    sizes = []
    while key in cache._entries:
        cache.write_through(key, chain.next_write(set(), [chain.row(chain.fresh_id())]))
        counted(cache)
        if key in cache._entries:
            sizes.append(cache._entries[key].nbytes)
    assert OTHER.key not in cache._entries  # least recently used: evicted first
    assert len(sizes) > 3 and sizes == sorted(sizes)


async def test_a_scope_written_past_its_layouts_searches_as_a_cold_read(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    """Deletes, creates again, updates and a pushed filter, through Chroma, embedded and server."""
    writer, reader = two_stores
    rng = random.Random(11)

    def record(memory_id: str) -> Any:
        return memory(memory_id, vector(rng), metadata={"n": rng.randrange(3)})

    gone: list[str] = []
    live = [f"m{i:02d}" for i in range(24)]
    await writer.apply(BANK, WriteBatch(inserts=tuple(record(i) for i in live)))
    layouts = appends = 0
    for step in range(36):
        before = await cached(writer, KEY)
        if step % 3 == 0 and gone:
            live.append(gone.pop(0))
            batch = WriteBatch(inserts=(record(live[-1]),))
        elif step % 3 == 1:
            gone.append(live.pop(rng.randrange(len(live))))
            batch = WriteBatch(deletes=(gone[-1],))
        else:
            batch = WriteBatch(upserts=(record(rng.choice(live)),))
        await writer.apply(BANK, batch)
        after = await cached(writer, KEY)
        assert before is not None and after is not None
        appends += after.rows is before.rows
        layouts += after.rows is not before.rows
        if step % 6 == 5:
            assert snapshot(after) == await cold(reader, KEY)
            query = vector(rng)
            assert await top(writer, KEY, query) == await top(reader, KEY, query)
            only = Condition("metadata.n", Op.EQ, 1.0)
            ranked = [
                [hit.record.memory_id for hit in await store.nearest(BANK, nearest)]
                for store in (writer, reader)
                for nearest in [NearestQuery(KEY, query, 5, NOW, filter=only)]
            ]
            assert ranked[0] == ranked[1] and ranked[0]
    assert appends > 20 and layouts > 0
