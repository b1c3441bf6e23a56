"""Attacks on hybrid retrieval's cached scope index and its remembered filtered views
(adk_memory.engine.lexical_cache), with another store instance (as another process) writing.

A bank deleted and re-created with the same id, memory ids and facts while a reader holds its
scopes and views cached; a bank re-embedded with a model of another dimension while cached; a
memory moved to another scope with its vector, or its id taken by another scope during a query;
a rollback, a sweep with the clock set back, a retag, a merge import, the same ids in two banks.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import test_hybrid_cache
from adk_memory_chroma import ChromaMemoryStore
from adk_memory_redis import RedisMemoryStore

from adk_memory import AsyncClient
from adk_memory._registry import store_from_uri
from adk_memory.engine.reembed import reembed
from adk_memory.errors import AlreadyExists
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.scope import scope_key
from adk_memory.store import MemoryStore, WriteBatch
from adk_memory.transfer import export_bank, import_bank

U1, U2 = {"user_id": "u1"}, {"user_id": "u2"}
FACTS = [
    "I adopted a rescue greyhound named Biscuit last spring.",
    "My favourite colour is teal.",
    "I went hiking in Yosemite in May.",
    "The quarterly report is due on Friday.",
    "I am learning to play the cello.",
]
FILLER = [f"Note {i}: groceries, laundry and emails for day {i}." for i in range(12)]
HYBRID = {"retrieval": {"mode": "hybrid"}}
StoreMaker = Callable[[], MemoryStore]


@pytest.fixture(params=["memory", "redis", "redis_cluster", "chroma", "chroma_http"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreMaker:
    """Builds store instances that all see one set of data (as separate processes would)."""
    if request.param == "memory":
        name = f"attack-{uuid.uuid4().hex[:8]}"
        return lambda: ReferenceMemoryStore(name=name)
    prefix = f"t{uuid.uuid4().hex[:10]}"
    if request.param == "chroma":
        return lambda: store_from_uri(f"chroma://{tmp_path}")
    if request.param == "chroma_http":
        url = request.getfixturevalue("chroma_http_url")
        return lambda: store_from_uri(f"{url}&collection_prefix={prefix}")
    url = request.getfixturevalue(f"{request.param}_url")
    return lambda: store_from_uri(f"{url}?key_prefix={prefix}&index_algorithm=FLAT")


clients = test_hybrid_cache.clients
"""The reader and the writer, each on its own store from this module's `make_store`."""
add = test_hybrid_cache.add


def tagged(tag: str, memory_id: str | None = None) -> dict[str, Any]:
    config: dict[str, Any] = {"metadata": {"tag": {"string_value": tag}}}
    if memory_id is not None:
        config["memory_id"] = memory_id
    return config


async def search(
    client: AsyncClient,
    bank: str,
    query: str,
    scope: dict[str, str] = U1,
    filter: str | None = None,
) -> list[tuple[str, str, str]]:
    """(name, fact, tag) of each hit, best first; every hit is of `scope`."""
    pager = await client.memory_banks.memories.retrieve(
        name=bank,
        scope=scope,
        similarity_search_params={"search_query": query, "top_k": 20},
        config={"filter": filter} if filter else None,
    )
    found = []
    async for hit in pager:
        assert hit.memory.scope == scope
        tag = (hit.memory.metadata or {}).get("tag")
        found.append(
            (hit.memory.name or "", hit.memory.fact or "", getattr(tag, "string_value", ""))
        )
    return found


async def test_a_bank_recreated_with_the_same_id_and_memories_is_searched_afresh(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """The reader holds the old bank's scope and a filter's view cached; the writer deletes
    the bank and re-creates it with the same id, the same memory ids and facts (so the same
    vectors) tagged the other way, and fewer of them."""
    reader, writer = clients
    bank_id = f"b{uuid.uuid4().hex[:10]}"
    facts = FACTS + FILLER
    for client_tags in (("a", "b"), ("b", "a")):
        client = reader if client_tags[0] == "a" else writer
        bank = (await client.memory_banks.create(memory_bank_id=bank_id, extensions=HYBRID)).name
        kept = facts if client is reader else facts[:-3]
        for index, fact in enumerate(kept):
            tag = client_tags[index % 2]
            await add(client, bank, fact, U1, **tagged(tag, memory_id=f"m{index:02d}"))
        for filter in (None, 'metadata.tag = "a"', 'metadata.tag = "a"'):
            hits = await search(reader, bank, "greyhound Biscuit groceries", filter=filter)
            expected = {
                (f"{bank}/memories/m{index:02d}", fact, client_tags[index % 2])
                for index, fact in enumerate(kept)
                if filter is None or client_tags[index % 2] == "a"
            }
            assert set(hits) == expected, (client_tags, filter)
        if client is reader:
            await writer.memory_banks.delete(name=bank, force=True)


async def test_a_bank_re_embedded_with_another_dimension_is_searched_with_the_new_model(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """The reader's cached vectors are 64-d; the writer re-embeds the bank with a 32-d model:
    the reader's next searches (plain and filtered) rank the new vectors."""
    reader, writer = clients
    bank = (await reader.memory_banks.create(extensions=HYBRID)).name
    names = {}
    for index, fact in enumerate(FACTS + FILLER):
        names[fact] = await add(reader, bank, fact, U1, **tagged("ab"[index % 2]))
    before = await search(reader, bank, "greyhound Biscuit")
    await search(reader, bank, "greyhound Biscuit", filter='metadata.tag = "a"')
    await reembed(writer.engine, bank.rsplit("/", 1)[-1], "hash-32", batch_size=5)
    for filter in (None, 'metadata.tag = "a"'):
        hits = await search(reader, bank, "greyhound Biscuit", filter=filter)
        assert hits[0][0] == names[FACTS[0]]
        assert {hit[0] for hit in hits} == {
            hit[0] for hit in before if filter is None or hit[2] == "a"
        }


async def test_a_memory_moved_to_another_scope_with_its_vector_leaves_the_cached_one(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """Moves no request makes, but a store must keep apart: the same record (fact, vector,
    id) rewritten into another scope by one upsert, then deleted and inserted back; the
    reader holds both scopes cached with a filter's view each time."""
    reader, writer = clients
    bank = (await reader.memory_banks.create(extensions=HYBRID)).name
    bank_id = bank.rsplit("/", 1)[-1]
    names = [await add(reader, bank, fact, U1, **tagged("a")) for fact in FACTS + FILLER]
    await add(reader, bank, "Biscuit sleeps on the sofa.", U2, **tagged("a"))
    moved_id = names[0].rsplit("/", 1)[-1]
    store = writer.engine.store
    [record] = await store.get_memories(bank_id, [moved_id], datetime.now(UTC))
    for scope, other in ((U2, U1), (U1, U2)):
        for where in (U1, U2):
            for filter in (None, 'metadata.tag = "a"'):
                await search(reader, bank, "greyhound Biscuit", where, filter)
        later = datetime.now(UTC)
        record = replace(record, scope=scope, scope_key=scope_key(scope), update_time=later)
        if scope == U2:
            await store.apply(bank_id, WriteBatch(upserts=(record,)))
        else:
            await store.apply(bank_id, WriteBatch(deletes=(moved_id,)))
            await store.apply(bank_id, WriteBatch(inserts=(record,)))
        for filter in (None, 'metadata.tag = "a"'):
            assert (await search(reader, bank, "greyhound Biscuit", scope, filter))[0][0] == (
                names[0]
            )
            assert names[0] not in [
                hit[0] for hit in await search(reader, bank, "greyhound Biscuit", other, filter)
            ]


async def test_a_deleted_memory_rolled_back_by_another_store_returns_to_the_cached_scope(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """The reader caches the scope (and a view) after the delete; the rollback re-creates the
    memory, tagged as in the revision chosen."""
    reader, writer = clients
    bank = (await reader.memory_banks.create(extensions=HYBRID)).name
    for fact in FACTS[1:] + FILLER:
        await add(reader, bank, fact, U1, **tagged("a"))
    name = await add(reader, bank, FACTS[0], U1, **tagged("b"))
    await reader.memory_banks.memories.update(
        name=name, config={**tagged("a"), "update_mask": "metadata"}
    )
    revisions = [
        revision async for revision in await reader.memory_banks.memories.revisions.list(name=name)
    ]
    first = (revisions[-1].name or "").rsplit("/", 1)[-1]  # newest first: tagged "b"
    await writer.memory_banks.memories.delete(name=name)
    for filter in (None, 'metadata.tag = "b"', 'metadata.tag = "a"'):
        assert name not in [
            hit[0] for hit in await search(reader, bank, "greyhound", filter=filter)
        ]
    await writer.memory_banks.memories.rollback(name=name, target_revision_id=first)
    assert (await search(reader, bank, "greyhound Biscuit"))[0][:2] == (name, FACTS[0])
    assert [
        hit[0] for hit in await search(reader, bank, "greyhound", filter='metadata.tag = "b"')
    ] == [name]
    assert name not in [
        hit[0] for hit in await search(reader, bank, "greyhound", filter='metadata.tag = "a"')
    ]


async def test_memories_swept_after_a_view_is_cached_stay_gone_for_a_clock_set_back(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """The reader caches the scope and a view while a memory is live; it expires and another
    store sweeps it; a query at a later time, then one with the clock set back before the
    expiry, never return it (it is deleted, whatever the clock says)."""
    reader, writer = clients
    start = datetime.now(UTC)
    now = [start]
    for client in (reader, writer):
        client.engine.context.clock = lambda: now[0]
    bank = (await reader.memory_banks.create(extensions=HYBRID)).name
    for fact in FACTS[1:] + FILLER:
        await add(reader, bank, fact, U1, **tagged("a"))
    name = await add(reader, bank, FACTS[0], U1, **tagged("a"), ttl="60s")
    only_a = 'metadata.tag = "a"'
    for filter in (None, only_a, 'fact:"Biscuit"'):
        assert (await search(reader, bank, "greyhound Biscuit", filter=filter))[0][0] == name
    now[0] = start + timedelta(seconds=61)
    assert await writer.engine.store.sweep_expired(name.split("/")[-3], now[0]) >= 1
    for when in (start + timedelta(seconds=62), start + timedelta(seconds=30)):
        now[0] = when
        for filter in (None, only_a, 'fact:"Biscuit"'):
            hits = await search(reader, bank, "greyhound Biscuit", filter=filter)
            assert name not in [hit[0] for hit in hits], (when, filter)


async def test_a_repeated_filter_sees_another_store_retag(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """A view remembered, then the metadata changed by another store (and back)."""
    reader, writer = clients
    bank = (await reader.memory_banks.create(extensions=HYBRID)).name
    for fact in FACTS[1:] + FILLER:
        await add(reader, bank, fact, U1, **tagged("a"))
    name = await add(reader, bank, FACTS[0], U1, **tagged("b"))
    for tag in ("a", "b", "a"):
        for filter in ('metadata.tag = "b"', 'metadata.tag = "b"', 'NOT metadata.tag = "a"'):
            await search(reader, bank, "greyhound", filter=filter)  # remembered at this version
        await writer.memory_banks.memories.update(
            name=name, config={**tagged(tag), "update_mask": "metadata"}
        )
        for filter in ('metadata.tag = "b"', 'NOT metadata.tag = "a"'):
            hits = [hit[0] for hit in await search(reader, bank, "greyhound", filter=filter)]
            assert hits == ([] if tag == "a" else [name]), (tag, filter)


class _MovedBeforeRecordRead:
    """A store mixin that runs `race` once, just before its next `get_memories`."""

    race: Callable[[], Awaitable[None]] | None = None

    async def get_memories(self, bank_id: str, memory_ids: Any, now: datetime) -> Any:
        if self.race is not None:
            race, self.race = self.race, None
            await race()
        return await super().get_memories(bank_id, memory_ids, now)  # type: ignore[misc]


class _RacedMemory(_MovedBeforeRecordRead, ReferenceMemoryStore):
    """The memory:// store, raced."""


class _RacedRedis(_MovedBeforeRecordRead, RedisMemoryStore):
    """The Redis store, raced."""


class _RacedChroma(_MovedBeforeRecordRead, ChromaMemoryStore):
    """The Chroma store, raced."""


@pytest.fixture(params=["memory", "redis", "chroma"])
def raced_and_plain(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[Callable[[], _MovedBeforeRecordRead], StoreMaker]:
    """Makers of a store whose record reads can be raced, and of a plain one, on one data."""
    if request.param == "memory":
        name = f"raced-{uuid.uuid4().hex[:8]}"
        return lambda: _RacedMemory(name=name), lambda: ReferenceMemoryStore(name=name)
    if request.param == "chroma":
        uri = f"chroma://{tmp_path}"
        return lambda: _RacedChroma.from_uri(uri), lambda: store_from_uri(uri)
    url = request.getfixturevalue("redis_url")
    uri = f"{url}?key_prefix=t{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"
    return lambda: _RacedRedis.from_uri(uri), lambda: store_from_uri(uri)


async def test_a_memory_id_taken_by_another_scope_during_a_query_is_not_returned(
    raced_and_plain: tuple[Callable[[], _MovedBeforeRecordRead], StoreMaker],
) -> None:
    """Between the cached ranking and its record read, the memory is deleted and its id taken
    by another scope with the same fact (an id is free again once its revisions expired): the
    cached ranking is dropped, and the fallback must not serve that record either."""
    raced_maker, plain_maker = raced_and_plain
    raced = raced_maker()
    reader = AsyncClient(store=raced, embedding_model="hash-64", run_scheduler=False)  # type: ignore[arg-type]
    writer = AsyncClient(store=plain_maker(), embedding_model="hash-64", run_scheduler=False)
    try:
        bank = (await reader.memory_banks.create(extensions=HYBRID)).name
        bank_id = bank.rsplit("/", 1)[-1]
        for fact in FACTS[1:] + FILLER:
            await add(reader, bank, fact, U1, **tagged("a"))
        name = await add(reader, bank, FACTS[0], U1, **tagged("a", memory_id="biscuit"))
        assert (await search(reader, bank, "greyhound Biscuit"))[0][0] == name
        store = writer.engine.store
        [record] = await store.get_memories(bank_id, ["biscuit"], datetime.now(UTC))
        elsewhere = replace(
            record, scope=U2, scope_key=scope_key(U2), update_time=datetime.now(UTC)
        )

        async def race() -> None:
            await store.apply(bank_id, WriteBatch(deletes=("biscuit",)))
            await store.apply(bank_id, WriteBatch(inserts=(elsewhere,)))

        raced.race = race
        hits = await search(reader, bank, "greyhound Biscuit")  # asserts each hit's scope
        assert raced.race is None  # the race ran
        assert name not in [hit[0] for hit in hits]
    finally:
        await reader.aclose()
        await writer.aclose()


async def test_a_merge_import_over_cached_scopes_is_seen_and_cannot_move_a_memory(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """Exports whose memories have the target's ids are imported with `merge` (70 in one batch:
    Chroma's memory-slot journal) while the reader holds the scopes and a filter's view cached:
    one that would move them to another scope is refused whole, one that rewrites them in place
    is seen by the reader's next searches."""
    reader, writer = clients
    facts = [f"{fact} ({index})" for index, fact in enumerate((FACTS + FILLER) * 4)][:70]
    target = (await reader.memory_banks.create(extensions=HYBRID)).name
    await asyncio.gather(  # at once: the writes share group commits (the test's set-up)
        *(
            add(reader, target, fact, U1, **tagged("a", memory_id=f"m{index:02d}"))
            for index, fact in enumerate(facts)
        )
    )
    query = "greyhound Biscuit (0)"
    before = await search(reader, target, query)
    for scope, tag in ((U2, "a"), (U1, "b")):
        source = (await writer.memory_banks.create(extensions=HYBRID)).name
        await asyncio.gather(
            *(
                add(
                    writer, source, f"{fact} again", scope, **tagged(tag, memory_id=f"m{index:02d}")
                )
                for index, fact in enumerate(facts)
            )
        )
        for where in (U1, U2):
            for filter in (None, 'metadata.tag = "a"', 'metadata.tag = "b"'):
                await search(reader, target, query, where, filter)
        lines: list[str] = []
        await export_bank(writer.engine, source.rsplit("/", 1)[-1], lines.append)
        target_id = target.rsplit("/", 1)[-1]
        if scope == U2:
            with pytest.raises(AlreadyExists):
                await import_bank(writer.engine, lines, bank_id=target_id, merge=True)
            assert await search(reader, target, query) == before
            assert await search(reader, target, query, U2) == []
            continue
        await import_bank(writer.engine, lines, bank_id=target_id, merge=True, batch_size=100)
        assert await search(reader, target, query, filter='metadata.tag = "a"') == []
        hits = await search(reader, target, query, filter='metadata.tag = "b"')
        assert len(hits) == 20 and all(fact.endswith(" again") for _, fact, _ in hits)
        assert hits[0][0] == f"{target}/memories/m00"


async def test_the_same_memory_ids_and_scope_in_two_banks_stay_apart(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """Two banks, one scope, the same memory ids with other facts: searched in turn (each cached),
    and rewritten by the writer in turn, each bank answers with its own memories only."""
    reader, writer = clients
    banks = [(await reader.memory_banks.create(extensions=HYBRID)).name for _ in "12"]
    for bank, facts in zip(banks, (FACTS, FACTS[::-1]), strict=True):
        for index, fact in enumerate(facts):
            await add(reader, bank, fact, U1, **tagged("a", memory_id=f"m{index}"))
    for round_number in range(3):
        for bank, facts in zip(banks, (FACTS, FACTS[::-1]), strict=True):
            for filter in (None, 'metadata.tag = "a"'):
                hits = await search(reader, bank, "greyhound Biscuit cello", filter=filter)
                expected = {(f"{bank}/memories/m{i}", fact, "a") for i, fact in enumerate(facts)}
                assert set(hits) == expected, (round_number, bank)
        bank = banks[round_number % 2]
        await writer.memory_banks.memories.update(
            name=f"{bank}/memories/m0", config={**tagged("a"), "update_mask": "metadata"}
        )


async def test_concurrent_writes_and_filtered_searches_never_serve_a_wrong_memory(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """The writer creates, retags, rewrites and deletes (and moves ids between scopes through
    the store) while the reader searches with and without a filter: every hit is of the
    scope, matches the filter as read, and was not deleted before the search began."""
    reader, writer = clients
    rng = random.Random(41)
    bank = (await reader.memory_banks.create(extensions=HYBRID)).name
    bank_id = bank.rsplit("/", 1)[-1]
    live = {
        await add(reader, bank, fact, rng.choice([U1, U2]), **tagged(rng.choice("ab")))
        for fact in FACTS + FILLER
    }
    deleted: set[str] = set()

    async def write() -> None:
        for step in range(40):
            name = rng.choice(sorted(live))
            action = rng.random()
            if action < 0.2:
                live.add(
                    await add(writer, bank, rng.choice(FACTS), rng.choice([U1, U2]), **tagged("a"))
                )
            elif action < 0.5:
                config = {**tagged(rng.choice("ab")), "update_mask": "metadata"}
                await writer.memory_banks.memories.update(name=name, config=config)
            elif action < 0.65:
                await writer.memory_banks.memories.update(
                    name=name, fact=f"{rng.choice(FACTS)} {step}", config={"update_mask": "fact"}
                )
            elif action < 0.8 and len(live) > 5:
                live.discard(name)
                await writer.memory_banks.memories.delete(name=name)
                deleted.add(name)
            else:  # the id moves to the other scope with its vector (an id freed and reused)
                memory_id = name.rsplit("/", 1)[-1]
                found = await writer.engine.store.get_memories(
                    bank_id, [memory_id], datetime.now(UTC)
                )
                for record in found:
                    scope = U2 if record.scope == U1 else U1
                    moved = replace(
                        record,
                        scope=scope,
                        scope_key=scope_key(scope),
                        update_time=datetime.now(UTC),
                    )
                    await writer.engine.store.apply(bank_id, WriteBatch(deletes=(memory_id,)))
                    await writer.engine.store.apply(bank_id, WriteBatch(inserts=(moved,)))

    async def read() -> None:
        for _ in range(60):
            gone = set(deleted)
            filter = rng.choice(
                [None, 'metadata.tag = "a"', 'NOT metadata.tag = "a"', 'fact:"Biscuit"']
            )
            scope = rng.choice([U1, U2])
            for name, fact, tag in await search(reader, bank, rng.choice(FACTS), scope, filter):
                assert name not in gone
                if filter is not None and "tag" in filter:
                    assert (tag == "a") == filter.startswith("metadata"), (filter, tag)
                if filter == 'fact:"Biscuit"':
                    assert "Biscuit" in fact

    await asyncio.gather(write(), read())
