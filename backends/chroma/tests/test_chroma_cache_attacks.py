"""Attacks on the vector cache's write-through and the bulk journal (issue 18's Chroma writes).

Each test tries to make a store serve a scope that is not, at its version, what a cold read of
Chroma returns: a bulk batch (memory collection's slot) or one too large for one request (aux
journal) that moves, rewrites and deletes cached rows; a bank deleted and re-created with the
same id and memory ids while its scopes are cached; a write cancelled at every step; writers and
searchers of two stores racing. A Chroma server's journal lock in Redis (`lock_url`) is cut while
it is being taken.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore, _journal, _writer
from test_write_through import (
    KEYS,
    NOW,
    SCOPES,
    assert_written_through,
    cached,
    cold,
    snapshot,
    top,
    two_stores,
    vector,
)

from adk_memory.filters import parse_filter
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.store import MemoryRecord, NearestQuery, WriteBatch
from adk_memory.testing.conformance import BANK, T0, bank_record, memory

__all__ = ["two_stores"]


def exact(rng: random.Random) -> tuple[float, ...]:
    """A vector Chroma stores as sent (float32 values), so a read can be compared with it."""
    return float32(vector(rng))


def float32(values: Sequence[float]) -> tuple[float, ...]:
    """`values` rounded to float32, as Chroma stores them (a server's JSON reads back close)."""
    return tuple(float(value) for value in np.asarray(values, dtype=np.float32))


def scattered(rng: random.Random, count: int, prefix: str = "m") -> list[MemoryRecord]:
    """`count` memories spread over `SCOPES`, some expiring."""
    return [
        memory(
            f"{prefix}{i:03d}",
            vector(rng),
            scope=SCOPES[i % len(SCOPES)],
            expire_time=rng.choice([None, NOW + _MINUTE, NOW - _MINUTE]),
        )
        for i in range(count)
    ]


_MINUTE = NOW - T0


def reshuffled(rng: random.Random, records: list[MemoryRecord]) -> tuple[WriteBatch, set[str]]:
    """One batch that moves, re-embeds, re-expires or deletes each of `records` and adds as
    many new ones; returns it and the ids it deletes."""
    upserts: list[MemoryRecord] = []
    deletes: set[str] = set()
    for record in records:
        kind = rng.choice(["move", "vector", "expiry", "delete", "same"])
        if kind == "delete":
            deletes.add(record.memory_id)
            continue
        scope = rng.choice(SCOPES) if kind == "move" else record.scope
        upserts.append(
            memory(
                record.memory_id,
                vector(rng) if kind == "vector" else record.embedding,
                scope=scope,
                expire_time=NOW + 2 * _MINUTE if kind == "expiry" else record.expire_time,
                fact=f"{kind} {record.memory_id}",
            )
        )
    inserts = scattered(rng, len(records), prefix="new")
    return WriteBatch(
        inserts=tuple(inserts), upserts=tuple(upserts), deletes=tuple(deletes)
    ), deletes


async def warm(store: ChromaMemoryStore, rng: random.Random) -> None:
    """Searches every scope, so that its vectors are cached."""
    query = vector(rng)
    for key in KEYS:
        await top(store, key, query)


async def assert_same_answers(
    first: ChromaMemoryStore, second: ChromaMemoryStore, rng: random.Random
) -> None:
    for _ in range(3):
        query = vector(rng)
        for key in KEYS:
            assert await top(first, key, query, 8) == await top(second, key, query, 8)


async def test_a_bulk_batch_in_the_memory_slot_writes_every_cached_scope_through(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    """Moves between cached scopes, new vectors and expiries, deletions and inserts, in one
    batch of more than `_MEMORY_SLOT_ROWS` memories (its heads are written after its rows)."""
    writer, reader = two_stores
    rng = random.Random(31)
    records = scattered(rng, 45)
    await writer.apply(BANK, WriteBatch(inserts=tuple(records)))
    await warm(writer, rng)
    await warm(reader, rng)
    batch, deleted = reshuffled(rng, records)
    assert len(batch.inserts) + len(batch.upserts) >= _journal.MEMORY_SLOT_ROWS
    await writer.apply(BANK, batch)
    await assert_written_through(writer, reader)
    await assert_same_answers(writer, reader, rng)
    assert not deleted & {
        memory_id
        for key in KEYS
        for memory_id in snapshot(await cached(writer, key))  # type: ignore[arg-type]
    }


async def test_a_batch_too_large_for_one_request_writes_every_cached_scope_through(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    """The aux journal's path (its heads after the rows) with a batch limit of 4 rows."""
    writer, reader = two_stores
    rng = random.Random(32)
    records = scattered(rng, 12)
    await writer.apply(BANK, WriteBatch(inserts=tuple(records)))
    await warm(writer, rng)
    writer._max_batch = 4  # Chroma's batch limit, as a small server would answer it
    batch, _ = reshuffled(rng, records)
    await writer.apply(BANK, batch)
    await assert_written_through(writer, reader)
    await assert_same_answers(writer, reader, rng)


@pytest.mark.parametrize("recreator", ["writer", "reader"])
async def test_a_bank_recreated_with_the_same_id_and_memory_ids_serves_only_the_new_bank(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore], recreator: str
) -> None:
    """Both stores hold the old bank's scopes cached (write-through and read); the bank is
    deleted and re-created by one of them with the same memory ids in the same scopes."""
    writer, reader = two_stores
    rng = random.Random(33)
    old = scattered(rng, 9)
    await writer.apply(BANK, WriteBatch(inserts=tuple(old)))
    await warm(writer, rng)
    await warm(reader, rng)
    owner = writer if recreator == "writer" else reader
    await owner.delete_bank(BANK)
    await owner.create_bank(bank_record())
    new = [memory(record.memory_id, vector(rng), scope=record.scope) for record in old[:5]]
    await owner.apply(BANK, WriteBatch(inserts=tuple(new)))
    reference = ReferenceMemoryStore()
    await reference.create_bank(bank_record())
    await reference.apply(BANK, WriteBatch(inserts=tuple(new)))
    for query in [record.embedding for record in old] + [vector(rng)]:
        for key in KEYS:
            hits = await reference.nearest(BANK, NearestQuery(key, query, 8, NOW))
            expected = [hit.record.memory_id for hit in hits]
            for store in (writer, reader):
                found = await store.nearest(BANK, NearestQuery(key, query, 8, NOW))
                assert [hit.record.memory_id for hit in found] == expected
                assert all(hit.record.fact == f"fact of {hit.record.memory_id}" for hit in found)
                assert all(hit.record.scope_key == key for hit in found)


def cuts() -> Iterator[float]:
    """Ever later moments to cut a call at (seconds): at once, then growing by a quarter."""
    yield 0.0
    delay = 0.0005
    while True:
        yield delay
        delay *= 1.25


async def cancelled_at(work: Any, delay: float) -> bool:
    """Runs `work` for `delay` seconds (a turn of the loop for 0), then cancels it; whether it
    had ended by then."""
    task = asyncio.ensure_future(work)
    await asyncio.sleep(delay)
    finished = task.done()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return finished


async def test_a_write_cancelled_at_any_step_is_whole_or_absent_and_caches_nothing_stale(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    """Cut ever later (`cuts`), with a second writer queued behind it (group commit): each
    batch is all or nothing, the next write is not held up by a lock left taken, and the
    writer's cache is the scope as Chroma has it."""
    writer, reader = two_stores
    rng = random.Random(34)
    await writer.apply(BANK, WriteBatch(inserts=tuple(scattered(rng, 6))))
    await warm(writer, rng)
    steps = 0
    for steps, delay in enumerate(cuts()):
        moved = memory(f"m{steps % 6:03d}", exact(rng), scope=rng.choice(SCOPES))
        created = memory(f"c{steps:03d}", vector(rng), scope=rng.choice(SCOPES))
        other = memory(f"o{steps:03d}", vector(rng), scope=rng.choice(SCOPES))
        queued = asyncio.ensure_future(writer.apply(BANK, WriteBatch(inserts=(other,))))
        batch = WriteBatch(inserts=(created,), upserts=(moved,))
        finished = await cancelled_at(writer.apply(BANK, batch), delay)
        await asyncio.wait_for(queued, 10)  # not lost with the cancelled writer's group
        found = await reader.get_memories(BANK, [moved.memory_id, created.memory_id], NOW)
        if finished:
            assert [record.scope_key for record in found] == [moved.scope_key, created.scope_key]
        written = [record for record in found if float32(record.embedding) == moved.embedding]
        assert (created.memory_id in [record.memory_id for record in found]) == bool(written)
        await asyncio.wait_for(writer.apply(BANK, WriteBatch(deletes=(other.memory_id,))), 10)
        for key in KEYS:
            entry = await cached(writer, key)
            if entry is not None and entry.version == await writer.scope_version(BANK, key):
                assert snapshot(entry) == await cold(reader, key)
        if finished:
            break
    assert steps > 5  # the cuts reached into the write
    await assert_same_answers(writer, reader, rng)


async def test_racing_writers_and_searchers_of_two_stores_serve_no_other_scope_or_deleted(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    """Two stores write and search one bank at once. A search returns only memories of its
    scope, none deleted before it began; once quiet, both answer as a cold read does."""
    first, second = two_stores
    rng = random.Random(35)
    initial = scattered(rng, 12)
    await first.apply(BANK, WriteBatch(inserts=tuple(initial)))
    owned = [{record.memory_id: record for record in initial[part::2]} for part in range(2)]
    deleted: set[str] = set()  # never written again: new memories take new ids
    serial = iter(range(10_000))

    async def write(store: ChromaMemoryStore, live: dict[str, MemoryRecord]) -> None:
        for _ in range(25):
            victim = rng.choice(sorted(live))
            if rng.random() < 0.3 and len(live) > 2:
                live.pop(victim)
                await store.apply(BANK, WriteBatch(deletes=(victim,)))
                deleted.add(victim)
            elif rng.random() < 0.5:
                record = memory(victim, vector(rng), scope=rng.choice(SCOPES))
                await store.apply(BANK, WriteBatch(upserts=(record,)))
                live[victim] = record
            else:
                record = memory(f"r{next(serial):04d}", vector(rng), scope=rng.choice(SCOPES))
                await store.apply(BANK, WriteBatch(inserts=(record,)))
                live[record.memory_id] = record

    async def search(store: ChromaMemoryStore) -> None:
        for _ in range(40):
            key, gone = rng.choice(KEYS), set(deleted)
            hits = await store.nearest(BANK, NearestQuery(key, vector(rng), 20, NOW))
            assert all(hit.record.scope_key == key for hit in hits)
            assert not gone & {hit.record.memory_id for hit in hits}

    await asyncio.gather(
        write(first, owned[0]), write(second, owned[1]), search(first), search(second)
    )
    live = owned[0] | owned[1]
    reference = ReferenceMemoryStore()
    await reference.create_bank(bank_record())
    await reference.apply(BANK, WriteBatch(inserts=tuple(live.values())))
    for _ in range(3):
        query = vector(rng)
        for key in KEYS:
            hits = await reference.nearest(BANK, NearestQuery(key, query, 30, NOW))
            expected = sorted(hit.record.memory_id for hit in hits)
            for store in (first, second):
                assert sorted(await top(store, key, query, 30)) == expected


@pytest.fixture
async def locked_in_redis(
    chroma_http_url: str, redis_url: str
) -> AsyncIterator[tuple[ChromaMemoryStore, ChromaMemoryStore]]:
    """Two stores of one Chroma server whose journal locks are in Redis (`lock_url`)."""
    query = f"collection_prefix=lk-{uuid.uuid4().hex[:8]}&lock_url={quote(redis_url, safe='')}"
    server = chroma_http_url.split("?")[0]  # the server alone: its locks are in Redis
    first, second = (ChromaMemoryStore.from_uri(f"{server}?{query}") for _ in "12")
    await first.create_bank(bank_record())
    try:
        yield first, second
    finally:
        await first.drop_all()
        await first.aclose()
        await second.aclose()


async def test_a_write_cut_while_taking_a_redis_journal_lock_leaves_it_free(
    locked_in_redis: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    """Cut at each turn of the loop while it waits for and takes the lock another store
    holds, a write leaves no lock behind: the other store's next write goes through at once."""
    first, second = locked_in_redis
    rng = random.Random(36)
    for steps, delay in zip(range(12), cuts(), strict=False):
        held = WriteBatch(inserts=(memory(f"h{steps}", vector(rng)),))
        holding = asyncio.ensure_future(first.apply(BANK, held))
        cut = WriteBatch(inserts=(memory(f"s{steps}", vector(rng)),))
        await cancelled_at(second.apply(BANK, cut), delay)
        await asyncio.wait_for(holding, 10)
        await asyncio.wait_for(
            first.apply(BANK, WriteBatch(inserts=(memory(f"n{steps}", vector(rng)),))), 5
        )
    names = [f"{kind}{steps}" for steps in range(12) for kind in "hn"]
    assert len(await second.get_memories(BANK, names, NOW)) == len(names)


async def _commit(finished: list[str]) -> None:
    await asyncio.sleep(0)
    finished.append("committed")


async def _apply(finished: list[str]) -> None:
    await _writer._uncancellable(_commit(finished))


async def test_a_commit_cancelled_as_it_ends_still_reports_the_cancellation() -> None:
    """`_uncancellable` runs the commit to its end, then re-raises a cancellation that came
    meanwhile, also one landing in the turn of the loop in which the commit finished."""
    for turns in range(1, 6):
        finished: list[str] = []
        writer = asyncio.ensure_future(_apply(finished))
        for _ in range(turns):
            await asyncio.sleep(0)
        if writer.done():
            break
        writer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writer
        assert finished == ["committed"], turns


async def test_a_memory_retagged_between_the_filter_and_the_record_read_is_not_returned(
    two_stores: tuple[ChromaMemoryStore, ChromaMemoryStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pushed filter is asked of Chroma as ids, then the winners are read: a memory the other
    store retags in between must not be returned for a filter it no longer matches."""
    searcher, writer = two_stores
    rng = random.Random(37)
    records = [memory(f"t{i}", vector(rng), metadata={"tag": "a"}) for i in range(6)]
    await writer.apply(BANK, WriteBatch(inserts=tuple(records)))
    only_a = parse_filter('metadata.tag = "a"')
    query = records[0].embedding
    first = await searcher.nearest(BANK, NearestQuery(KEYS[1], query, 3, NOW, filter=only_a))
    assert [hit.record.memory_id for hit in first][0] == "t0"
    call = searcher._chroma.call
    retagged = replace(records[0], metadata={"tag": "b"}, update_time=NOW)

    async def racing_call(action: str, method: Any, **kwargs: Any) -> Any:
        result = await call(action, method, **kwargs)
        if action == "filter a scope":
            monkeypatch.setattr(searcher._chroma, "call", call)
            await writer.apply(BANK, WriteBatch(upserts=(retagged,)))
        return result

    monkeypatch.setattr(searcher._chroma, "call", racing_call)
    hits = await searcher.nearest(BANK, NearestQuery(KEYS[1], query, 3, NOW, filter=only_a))
    assert searcher._chroma.call == call  # the race ran
    assert all(hit.record.metadata == {"tag": "a"} for hit in hits)
    assert len(hits) == 3 and "t0" not in [hit.record.memory_id for hit in hits]
