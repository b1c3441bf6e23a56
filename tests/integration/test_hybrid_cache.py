"""Attacks on the per-process BM25 index of hybrid retrieval (adk_memory.engine.lexical_cache).

Every test runs two clients, each on its own store instance over the same data, as two
processes would: one's cached index must see what the other wrote. The stores are real; the
equality tests pair each with a subclass that keeps no scope version (the scan-every-query path).
"""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from adk_memory_chroma import ChromaMemoryStore
from adk_memory_redis import RedisMemoryStore

from adk_memory import AsyncClient
from adk_memory._registry import store_from_uri
from adk_memory.engine import retrieval
from adk_memory.engine.lexical_cache import LexicalCache
from adk_memory.errors import InvalidArgument
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.scope import ScopeKey
from adk_memory.store import MemoryStore
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.testing.processes import run_in_a_process

U1, U2 = {"user_id": "u1"}, {"user_id": "u2"}
FACTS = [
    "I adopted a rescue greyhound named Biscuit last spring.",
    "My favourite colour is teal.",
    "I went hiking in Yosemite in May.",
    "The quarterly report is due on Friday.",
    "I am learning to play the cello.",
]
FILLER = [f"Note {i}: groceries, laundry and emails for day {i}." for i in range(40)]
"""With a lexical-only ranking, a fact the index missed would tie with these at 0."""
LEXICAL = {"mode": "hybrid", "lexical_weight": 1.0}
StoreMaker = Callable[[], MemoryStore]


@pytest.fixture(autouse=True)
def process_cache(monkeypatch: pytest.MonkeyPatch) -> LexicalCache:
    """A new process cache for each test, whose dense queries build their index at the first
    miss (patience 0): the cached dense path is what these tests attack (the ski rental that
    decides when to build has its own tests in tests/unit/test_lexical_cache.py)."""
    cache = LexicalCache(patience=0.0)
    monkeypatch.setattr(retrieval, "_LEXICAL_CACHE", cache)
    return cache


@pytest.fixture(params=["memory", "redis", "chroma"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> StoreMaker:
    """Builds store instances that all see one set of data (as separate processes would)."""
    if request.param == "memory":
        name = f"hybrid-{uuid.uuid4().hex[:8]}"
        return lambda: ReferenceMemoryStore(name=name)
    if request.param == "chroma":
        return lambda: store_from_uri(f"chroma://{tmp_path}")
    url = request.getfixturevalue("redis_url")
    prefix = f"t{uuid.uuid4().hex[:10]}"
    return lambda: store_from_uri(f"{url}?key_prefix={prefix}&index_algorithm=FLAT")


@pytest.fixture
async def clients(make_store: StoreMaker) -> AsyncIterator[tuple[AsyncClient, AsyncClient]]:
    reader = AsyncClient(store=make_store(), embedding_model="hash-64", run_scheduler=False)
    writer = AsyncClient(store=make_store(), embedding_model="hash-64", run_scheduler=False)
    try:
        yield reader, writer
    finally:
        await reader.aclose()
        await writer.aclose()


async def hybrid_bank(client: AsyncClient, retrieval: dict[str, Any] = LEXICAL) -> str:
    return (await client.memory_banks.create(extensions={"retrieval": retrieval})).name


async def add(
    client: AsyncClient, bank: str, fact: str, scope: dict[str, str], **config: Any
) -> str:
    operation = await client.memory_banks.memories.create(
        name=bank, fact=fact, scope=scope, config=config or None
    )
    assert operation.response is not None and operation.response.name is not None
    return operation.response.name


async def search(
    client: AsyncClient,
    bank: str,
    query: str,
    scope: dict[str, str] = U1,
    top_k: int = 10,
    filter: str | None = None,
    groups: list[dict[str, Any]] | None = None,
) -> list[tuple[str, str, float]]:
    """(name, fact, distance) of each hit, best first."""
    pager = await client.memory_banks.memories.retrieve(
        name=bank,
        scope=scope,
        similarity_search_params={"search_query": query, "top_k": top_k},
        config={"filter": filter, "filter_groups": groups} if filter or groups else None,
    )
    found = []
    async for hit in pager:
        assert hit.memory.scope == scope
        found.append((hit.memory.name or "", hit.memory.fact or "", hit.distance or 0.0))
    return found


async def test_writes_through_another_store_instance_are_seen_by_the_next_query(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    reader, writer = clients
    bank = await hybrid_bank(reader)
    for fact in FACTS + FILLER:
        await add(reader, bank, fact, U1)
    assert "Zanzibar" not in (await search(reader, bank, "zanzibar"))[0][1]  # index now warm
    name = await add(writer, bank, "I flew to Zanzibar in June.", U1)
    assert (await search(reader, bank, "zanzibar"))[0][:2] == (name, "I flew to Zanzibar in June.")
    await writer.memory_banks.memories.update(
        name=name, fact="I flew to Madagascar in June.", config={"update_mask": "fact"}
    )
    assert (await search(reader, bank, "madagascar"))[0][:2] == (
        name,
        "I flew to Madagascar in June.",
    )
    assert all("Zanzibar" not in fact for _, fact, _ in await search(reader, bank, "zanzibar"))
    await writer.memory_banks.memories.delete(name=name)
    assert name not in [hit[0] for hit in await search(reader, bank, "madagascar")]


def _write(uri: str, bank: str, action: str, target: str) -> None:
    """Run in another process: creates the memory `target` in scope u1, or deletes `target`."""

    async def main() -> None:
        async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
            if action == "create":
                await client.memory_banks.memories.create(name=bank, fact=target, scope=U1)
            else:
                await client.memory_banks.memories.delete(name=target)

    asyncio.run(main())


def write_in_another_process(uri: str, bank: str, action: str, target: str) -> None:
    run_in_a_process(_write, uri, bank, action, target)


async def test_writes_of_another_process_are_seen_by_the_next_query(redis_url: str) -> None:
    uri = f"{redis_url}?key_prefix=t{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"
    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as reader:
        bank = await hybrid_bank(reader)
        for fact in FACTS + FILLER:
            await add(reader, bank, fact, U1)
        assert "Zanzibar" not in (await search(reader, bank, "zanzibar"))[0][1]
        write_in_another_process(uri, bank, "create", "I flew to Zanzibar in June.")
        [(name, fact, _distance), *_] = await search(reader, bank, "zanzibar")
        assert fact == "I flew to Zanzibar in June."
        write_in_another_process(uri, bank, "delete", name)
        assert name not in [hit[0] for hit in await search(reader, bank, "zanzibar")]


@pytest.mark.parametrize(
    ("mode", "where"),
    [
        ("dense", 'fact:"Zanzibar"'),
        ("dense", 'create_time > "2000-01-01T00:00:00Z"'),
        ("hybrid", 'fact:"Zanzibar"'),
    ],
)
async def test_a_filtered_query_sees_the_writes_of_another_process(
    redis_url: str, mode: str, where: str
) -> None:
    """The filter's view of the cached index is its version's: a memory another process
    writes (or deletes) that the filter keeps is in (or out of) the next query."""
    uri = f"{redis_url}?key_prefix=t{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"
    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as reader:
        bank = await hybrid_bank(reader, {"mode": mode})
        for fact in FACTS + FILLER:
            await add(reader, bank, fact, U1)
        before = await search(reader, bank, "zanzibar", top_k=100, filter=where)  # warm
        write_in_another_process(uri, bank, "create", "I flew to Zanzibar in June.")
        after = await search(reader, bank, "zanzibar", top_k=100, filter=where)
        [added] = [hit for hit in after if hit not in before]
        assert added[1] == "I flew to Zanzibar in June." and len(after) == len(before) + 1
        write_in_another_process(uri, bank, "delete", added[0])
        assert await search(reader, bank, "zanzibar", top_k=100, filter=where) == before


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
async def test_a_filtered_query_leaves_out_what_expired_since_the_index_was_built(
    clients: tuple[AsyncClient, AsyncClient], mode: str
) -> None:
    reader, _writer = clients
    bank = await hybrid_bank(reader, {"mode": mode})
    for fact in FACTS[1:] + FILLER[:5]:
        await add(reader, bank, fact, U1, **tagged("a"))
    expiring = await add(reader, bank, FACTS[0], U1, ttl="60s", **tagged("a"))
    only_a, start = 'metadata.tag = "a" AND NOT fact = "x"', reader.engine.context.clock()
    now = [start]
    reader.engine.context.clock = lambda: now[0]
    assert expiring in [hit[0] for hit in await search(reader, bank, "greyhound", filter=only_a)]
    now[0] = start + timedelta(seconds=61)
    hits = await search(reader, bank, "greyhound", filter=only_a)
    assert expiring not in [hit[0] for hit in hits] and len(hits) == len(FACTS[1:] + FILLER[:5])


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
async def test_a_filter_never_reaches_another_scope(
    clients: tuple[AsyncClient, AsyncClient], mode: str
) -> None:
    """The same facts and tags in two scopes: each filter keeps to the scope asked; a filter
    naming a scope is refused (retrieval matches its scope exactly)."""
    reader, _writer = clients
    bank = await hybrid_bank(reader, {"mode": mode})
    mine = [await add(reader, bank, fact, U1, **tagged("a")) for fact in FACTS]
    theirs = [await add(reader, bank, fact, U2, **tagged("a")) for fact in FACTS]
    for where in ('metadata.tag = "a"', 'fact:"e"', 'NOT fact = "x"', 'fact=~"."'):
        for _ in range(2):  # the second is served by the remembered view
            assert {hit[0] for hit in await search(reader, bank, "cello", U1, filter=where)} <= (
                set(mine)
            )
            assert {hit[0] for hit in await search(reader, bank, "cello", U2, filter=where)} <= (
                set(theirs)
            )
    for where in ('scope.user_id = "u2"', 'NOT scope.user_id = "u1"'):
        with pytest.raises(InvalidArgument):
            await search(reader, bank, "cello", U1, filter=where)


async def test_a_deleted_memory_is_never_returned(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    reader, writer = clients
    bank = await hybrid_bank(reader)
    names = [await add(reader, bank, fact, U1) for fact in FACTS]
    await search(reader, bank, "greyhound Biscuit")
    await writer.memory_banks.memories.delete(name=names[0])
    assert names[0] not in [hit[0] for hit in await search(reader, bank, "greyhound Biscuit")]
    await reader.memory_banks.memories.delete(name=names[1])
    assert names[1] not in [hit[0] for hit in await search(reader, bank, "teal colour")]


async def test_another_scope_with_identical_facts_is_never_returned(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    reader, writer = clients
    bank = await hybrid_bank(reader, {"mode": "hybrid"})
    mine = [await add(reader, bank, fact, U1) for fact in FACTS]
    theirs = [await add(reader, bank, fact, U2) for fact in FACTS]
    for query in ("greyhound Biscuit", "cello", "Friday report"):
        assert {hit[0] for hit in await search(reader, bank, query, U1)} <= set(mine)
        assert {hit[0] for hit in await search(reader, bank, query, U2)} <= set(theirs)
    await writer.memory_banks.memories.delete(name=theirs[0])
    assert mine[0] in [hit[0] for hit in await search(reader, bank, "greyhound Biscuit", U1)]
    u2_hits = [hit[0] for hit in await search(reader, bank, "greyhound Biscuit", U2)]
    assert mine[0] not in u2_hits and theirs[0] not in u2_hits


async def test_a_memory_expired_since_the_index_was_built_is_not_returned(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    reader, _writer = clients
    bank = await hybrid_bank(reader)
    for fact in FACTS[1:]:
        await add(reader, bank, fact, U1)
    expiring = await add(reader, bank, FACTS[0], U1, ttl="60s")
    assert (await search(reader, bank, "greyhound Biscuit"))[0][0] == expiring
    context = reader.engine.context
    later = context.clock() + timedelta(seconds=61)
    context.clock = lambda: later
    assert expiring not in [hit[0] for hit in await search(reader, bank, "greyhound Biscuit")]


def tagged(tag: str) -> dict[str, Any]:
    return {"metadata": {"tag": {"string_value": tag}}}


async def test_a_repeated_filter_sees_what_another_process_retagged_or_added(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """A filter's view is remembered with its index's version: a write elsewhere that makes a
    memory match (or stop matching) is seen by the next query with that filter."""
    reader, writer = clients
    bank = await hybrid_bank(reader)
    target = await add(reader, bank, FACTS[0], U1, **tagged("b"))
    others = [await add(reader, bank, fact, U1, **tagged("a")) for fact in FACTS[1:] + FILLER[:5]]
    only_a = 'metadata.tag = "a"'
    for _ in range(2):  # the second query is served by the remembered view
        assert {
            hit[0] for hit in await search(reader, bank, "greyhound Biscuit", filter=only_a)
        } == set(others)
    retag = {**tagged("a"), "update_mask": "metadata"}
    await writer.memory_banks.memories.update(name=target, config=retag)
    assert (await search(reader, bank, "greyhound Biscuit", filter=only_a))[0][0] == target
    await writer.memory_banks.memories.update(name=target, config={**retag, **tagged("b")})
    assert target not in [hit[0] for hit in await search(reader, bank, "greyhound", filter=only_a)]
    added = await add(writer, bank, "Biscuit the greyhound loves the beach.", U1, **tagged("a"))
    assert (await search(reader, bank, "greyhound Biscuit", filter=only_a))[0][0] == added


async def test_filter_values_equal_in_python_but_not_in_matching_get_their_own_views(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """`True == 1.0` in Python, but a bool filter never matches a number (nor the reverse): a
    view of one served to the other would rank by the wrong memories' BM25 (ties by id)."""
    reader, _writer = clients
    bank = await hybrid_bank(reader)  # lexical weight 1: the order is BM25's alone
    flags = [
        await add(reader, bank, fact, U1, metadata={"x": {"bool_value": True}})
        for fact in FILLER[:5]
    ]
    numbers = [
        await add(reader, bank, fact, U1, metadata={"x": {"double_value": 1.0}}) for fact in FACTS
    ]

    async def hits(query: str, value: dict[str, Any]) -> list[str]:
        groups = [{"filters": [{"key": "x", "value": value}]}]
        pager = await reader.memory_banks.memories.retrieve(
            name=bank,
            scope=U1,
            similarity_search_params={"search_query": query, "top_k": 10},
            config={"filter_groups": groups},
        )
        return [hit.memory.name or "" async for hit in pager]

    for _ in range(2):
        assert sorted(await hits("groceries laundry", {"bool_value": True})) == sorted(flags)
        for query, best in (("greyhound Biscuit", 0), ("cello", 4), ("teal colour", 1)):
            found = await hits(query, {"double_value": 1.0})
            assert sorted(found) == sorted(numbers) and found[0] == numbers[best], query


async def test_one_filter_on_two_scopes_keeps_to_each_scope(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    reader, writer = clients
    bank = await hybrid_bank(reader, {"mode": "hybrid"})
    mine = [await add(reader, bank, fact, U1, **tagged("a")) for fact in FACTS]
    theirs = [await add(reader, bank, fact, U2, **tagged("a")) for fact in FACTS]
    only_a = 'metadata.tag = "a"'
    for _ in range(2):
        assert {hit[0] for hit in await search(reader, bank, "cello", U1, filter=only_a)} == set(
            mine
        )
        assert {hit[0] for hit in await search(reader, bank, "cello", U2, filter=only_a)} == set(
            theirs
        )
    await writer.memory_banks.memories.delete(name=theirs[0])
    assert {hit[0] for hit in await search(reader, bank, "cello", U1, filter=only_a)} == set(mine)
    assert {hit[0] for hit in await search(reader, bank, "cello", U2, filter=only_a)} == set(
        theirs[1:]
    )


async def test_a_filters_view_is_not_served_to_a_clock_set_back_before_it(
    clients: tuple[AsyncClient, AsyncClient],
) -> None:
    """Ids read at a later `now` leave out what had expired by then (a filtered scan's do);
    a query at an earlier `now`, when that memory was live, must still find it."""
    reader, _writer = clients
    bank = await hybrid_bank(reader)
    for fact in FACTS[1:]:
        await add(reader, bank, fact, U1)
    expiring = await add(reader, bank, FACTS[0], U1, ttl="60s")
    start = reader.engine.context.clock()
    now = [start]
    reader.engine.context.clock = lambda: now[0]
    await search(reader, bank, "greyhound Biscuit")  # the index is built at `start`
    biscuit = 'fact=~"Biscuit|cello"'  # a regular expression: a filtered scan on some stores
    now[0] = start + timedelta(seconds=61)
    assert expiring not in [
        hit[0] for hit in await search(reader, bank, "greyhound", filter=biscuit)
    ]
    now[0] = start + timedelta(seconds=30)
    assert (await search(reader, bank, "greyhound Biscuit", filter=biscuit))[0][0] == expiring


class _UnversionedMemory(ReferenceMemoryStore):
    """The memory:// store as one that keeps no scope version: the scan-every-query path."""

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> None:
        return None


class _UnversionedRedis(RedisMemoryStore):
    """The Redis store as one that keeps no scope version: the scan-every-query path."""

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> None:
        return None


class _UnversionedChroma(ChromaMemoryStore):
    """The Chroma store as one that keeps no scope version: the scan-every-query path."""

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> None:
        return None


@pytest.fixture(params=["memory", "redis", "chroma"])
def versioned_and_not(
    request: pytest.FixtureRequest, tmp_path: Path
) -> tuple[StoreMaker, StoreMaker]:
    """Makers of a versioned store and an unversioned one over the same data."""
    if request.param == "memory":
        name = f"equal-{uuid.uuid4().hex[:8]}"
        return lambda: ReferenceMemoryStore(name=name), lambda: _UnversionedMemory(name=name)
    if request.param == "chroma":  # two stores of one process share an embedded folder
        uri = f"chroma://{tmp_path}"
        return lambda: store_from_uri(uri), lambda: _UnversionedChroma.from_uri(uri)
    url = request.getfixturevalue("redis_url")
    uri = f"{url}?key_prefix=t{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"
    return lambda: store_from_uri(uri), lambda: _UnversionedRedis.from_uri(uri)


_WORDS = (
    "greyhound beach cello tax report Friday Biscuit morning hike Yosemite sister Hamburg "
    "painting lessons Melanie kids teal colour spring rescue Zanzibar June trip"
).split()


@pytest.mark.parametrize("mode", ["hybrid", "dense", "dense renting"])
@pytest.mark.parametrize("seed", range(3))
async def test_cached_rankings_equal_the_scan_path_through_writes_and_expiry(
    seed: int,
    mode: str,
    versioned_and_not: tuple[StoreMaker, StoreMaker],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Random facts, topics, writes, clock moves and filters from the whole language: the
    cached path (restricted to a filter's matches when there is one) ranks exactly as a fresh
    scan (hybrid) or the store's nearest query (dense): same ids, order and distances.
    `dense renting`: the default patience, so queries go to the store until they have cost
    what the last build did, then to a new index (both paths, in turn)."""
    if mode == "dense renting":
        renting = LexicalCache(first_build_seconds=0.0)
        monkeypatch.setattr(retrieval, "_LEXICAL_CACHE", renting)
    rng = random.Random(seed)
    versioned, unversioned = versioned_and_not
    cached = AsyncClient(store=versioned(), embedding_model="hash-64", run_scheduler=False)
    scanned = AsyncClient(store=unversioned(), embedding_model="hash-64", run_scheduler=False)
    now = [datetime.now(UTC)]
    for client in (cached, scanned):
        client.engine.context.clock = lambda: now[0]
    try:
        fusion = rng.choice(["convex", "rrf"])
        config = {"mode": mode.split()[0], "fusion": fusion, "candidates": 8}
        bank = await hybrid_bank(cached, config)
        start = now[0]
        durable: list[str] = []

        def sentence() -> str:
            return " ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 8)))

        for step in range(40):
            action = rng.random()
            if action < 0.5 or not durable:
                scope = rng.choice([U1, U1, U2])
                ttl = rng.choice([None, "30s", "300s"])
                tag = rng.choice([tagged("a"), tagged("b"), {}, _NUMBER_TAG])
                tag = {**tag, "topics": rng.sample(_TOPICS, rng.randint(0, 2))}
                if ttl is None:
                    durable.append(await add(cached, bank, sentence(), scope, **tag))
                else:
                    await add(cached, bank, sentence(), scope, ttl=ttl, **tag)
            elif action < 0.65:
                await cached.memory_banks.memories.update(
                    name=rng.choice(durable), fact=sentence(), config={"update_mask": "fact"}
                )
            elif action < 0.75:
                victim = durable.pop(rng.randrange(len(durable)))
                await cached.memory_banks.memories.delete(name=victim)
            else:
                now[0] += timedelta(seconds=rng.choice([0, 20, 100]))
            scope, chosen = rng.choice([U1, U2]), _random_filter(rng, start, now[0])
            groups = rng.choice([None, None, None, *_GROUPS])
            for query in (sentence(), sentence()):  # the second may reuse the filter's view
                assert await search(cached, bank, query, scope, 5, chosen, groups) == await search(
                    scanned, bank, query, scope, 5, chosen, groups
                ), (step, chosen, groups)
    finally:
        await cached.aclose()
        await scanned.aclose()


_NUMBER_TAG = {"metadata": {"tag": {"double_value": 1.0}}}
"""`= "a"` holds for no tag that is not a string (nor for a missing one): its NOT does."""


_TOPICS = [
    {"managed_memory_topic": "USER_PREFERENCES"},
    {"managed_memory_topic": "KEY_CONVERSATION_DETAILS"},
    {"custom_memory_topic_label": "work"},
]
_GROUPS: list[list[dict[str, Any]]] = [
    [{"filters": [{"key": "tag", "value": {"double_value": 0.5}, "op": "GREATER_THAN"}]}],
    [
        {"filters": [{"key": "tag", "value": {"string_value": "a"}, "negate": True}]},
        {"filters": [{"key": "tag", "value": {"string_value": "a"}, "op": "LESS_THAN"}]},
    ],
]
"""filter_groups: a number comparison, a negated string equality OR a string ordering."""


def _random_filter(rng: random.Random, start: datetime, now: datetime) -> str | None:
    """None a third of the time, else a filter of the whole language: facts (=, !=, :, =~),
    times (create, update, expire), topics, metadata, with NOT and OR nested."""
    word, other = rng.choice(_WORDS), rng.choice(_WORDS)
    moment = (start + timedelta(seconds=rng.choice([0, 20, 100, 300]))).isoformat()
    return rng.choice(
        [
            None,
            None,
            None,
            None,
            f'fact:"{word}"',
            f'NOT fact:"{word}"',
            f'fact:"{word}" OR fact:"{other}"',
            f'fact = "{word}" OR fact != "{other}"',
            f'metadata.tag = "{rng.choice("ab")}"',
            'NOT metadata.tag = "a" OR metadata.tag = "b"',
            f'metadata.tag = "a" AND NOT fact:"{word}"',
            f'expire_time > "{(now + timedelta(seconds=100)).isoformat()}"',
            f'NOT expire_time <= "{moment}"',
            f'create_time >= "{moment}" OR update_time < "{moment}"',
            f'update_time > "{moment}" AND NOT (fact=~"^{word}" OR fact:"{other}")',
            f'fact=~"{word}|{other}"',
            "topics.managed_memory_topic: USER_PREFERENCES",
            'topics.custom_memory_topic_label != "work" AND NOT metadata.tag = "b"',
            "NOT (topics.managed_memory_topic = key_conversation_details OR "
            f'fact=~"(?i)^{word[:3]}")',
        ]
    )


async def true_distance(client: AsyncClient, name: str, query: str = "greyhound Biscuit") -> float:
    """The Euclidean distance of memory `name`'s vector, as stored now, to `query`'s."""
    bank_id, memory_id = name.split("/")[-3], name.split("/")[-1]
    bank = await client.engine.context.load_bank(bank_id)
    vector = np.asarray(await bank.embedder.embed_query(query))
    [record] = await client.engine.store.get_memories(bank_id, [memory_id], datetime.now(UTC))
    return float(np.linalg.norm(np.asarray(record.embedding) - vector))


class _Raced:
    """A store mixin that slips a write in just before the store's next call of one of `raced`."""

    race: Callable[[], Awaitable[None]] | None = None
    raced: tuple[str, ...] = ("get_memories",)
    """Of `get_memories`, `scan`, `nearest`."""

    async def _run_race(self, method: str) -> None:
        if self.race is not None and method in self.raced:
            race, self.race = self.race, None
            await race()

    async def get_memories(self, bank_id: str, memory_ids: Any, now: datetime) -> Any:
        await self._run_race("get_memories")
        return await super().get_memories(bank_id, memory_ids, now)  # type: ignore[misc]

    async def scan(self, bank_id: str, query: Any) -> Any:
        await self._run_race("scan")
        return await super().scan(bank_id, query)  # type: ignore[misc]

    async def nearest(self, bank_id: str, query: Any) -> Any:
        await self._run_race("nearest")
        return await super().nearest(bank_id, query)  # type: ignore[misc]


class _RacedMemory(_Raced, ReferenceMemoryStore):
    """The memory:// store, raced."""


class _RacedRedis(_Raced, RedisMemoryStore):
    """The Redis store, raced."""


@pytest.fixture(params=["memory", "redis"])
def raced_and_writer(request: pytest.FixtureRequest) -> tuple[StoreMaker, StoreMaker]:
    """Makers of a store whose reads can be raced, and of a plain one over the same data."""
    if request.param == "memory":
        name = f"raced-{uuid.uuid4().hex[:8]}"
        return lambda: _RacedMemory(name=name), lambda: ReferenceMemoryStore(name=name)
    url = request.getfixturevalue("redis_url")
    uri = f"{url}?key_prefix=t{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"
    return lambda: _RacedRedis.from_uri(uri), lambda: store_from_uri(uri)


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
@pytest.mark.parametrize("write", ["delete", "update", "retag"])
async def test_a_write_between_the_version_read_and_the_record_read_is_not_served_stale(
    raced_and_writer: tuple[StoreMaker, StoreMaker], write: str, mode: str
) -> None:
    """The records the cached ranking returns are read last: one rewritten since is caught
    (`retag`: its metadata changed so that the query's filter no longer matches it). Dense
    retrieval ranks from the cache only with a filter: it always has one here."""
    raced_maker, writer_maker = raced_and_writer
    tagged = 'metadata.tag = "a"' if write == "retag" or mode == "dense" else None
    tag = {"metadata": {"tag": {"string_value": "a"}}}
    raced = raced_maker()
    reader = AsyncClient(store=raced, embedding_model="hash-64", run_scheduler=False)
    writer = AsyncClient(store=writer_maker(), embedding_model="hash-64", run_scheduler=False)
    try:
        bank = await hybrid_bank(reader, {"mode": mode})
        target = await add(reader, bank, FACTS[0], U1, **tag)
        for fact in FACTS[1:] + FILLER[:10]:
            await add(reader, bank, fact, U1, **tag)
        assert (await search(reader, bank, "greyhound Biscuit", filter=tagged))[0][0] == target

        async def race() -> None:
            if write == "delete":
                await writer.memory_banks.memories.delete(name=target)
            elif write == "retag":
                retagged = {"metadata": {"tag": {"string_value": "b"}}, "update_mask": "metadata"}
                await writer.memory_banks.memories.update(name=target, config=retagged)
            else:
                await writer.memory_banks.memories.update(
                    name=target, fact="I sold my sailing boat.", config={"update_mask": "fact"}
                )

        assert isinstance(raced, _RacedMemory | _RacedRedis)
        raced.race = race
        # Dense: every memory, so that the rewritten one is returned wherever it ranks now.
        top_k = 10 if mode == "hybrid" else 20
        hits = await search(reader, bank, "greyhound Biscuit", top_k=top_k, filter=tagged)
        assert raced.race is None  # the race ran
        left = 15 if write == "update" else 14
        assert len(hits) == min(top_k, left)  # of the memories left, none lost
        if write in ("delete", "retag"):
            assert target not in [hit[0] for hit in hits]
        else:
            served = {name: (fact, distance) for name, fact, distance in hits}
            assert served[target][0] == "I sold my sailing boat."
            assert served[target][1] == pytest.approx(await true_distance(reader, target))
            assert all(fact != FACTS[0] for _, fact, _ in hits)
    finally:
        await reader.aclose()
        await writer.aclose()


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
async def test_a_write_during_the_scope_scan_is_seen_and_a_warm_filter_reads_no_ids(
    raced_and_writer: tuple[StoreMaker, StoreMaker], mode: str
) -> None:
    """The index claims the version read before its scan: a memory written during the scan is
    seen by the next query (a newer version: one rebuild). Once warm, a filter of any kind is
    evaluated from the index's columns: no scan, no store `nearest`."""
    raced_maker, writer_maker = raced_and_writer
    raced = raced_maker()
    reader = AsyncClient(store=raced, embedding_model="hash-64", run_scheduler=False)
    writer = AsyncClient(store=writer_maker(), embedding_model="hash-64", run_scheduler=False)
    try:
        bank = await hybrid_bank(reader, {"mode": mode})
        for fact in FACTS + FILLER[:10]:
            await add(reader, bank, fact, U1)
        written: list[str] = []

        async def race() -> None:
            written.append(await add(writer, bank, "Biscuit the greyhound loves the beach.", U1))

        assert isinstance(raced, _RacedMemory | _RacedRedis)
        raced.race, raced.raced = race, ("scan",)
        biscuit = 'fact:"Biscuit"'
        for _ in range(2):  # dense builds its index at the second query finding a version
            await search(reader, bank, "greyhound Biscuit", filter=biscuit)
        assert raced.race is None  # the race ran
        for _ in range(2):  # the version moved: the store's query, or a rebuild
            hits = await search(reader, bank, "greyhound Biscuit", filter=biscuit)
            assert sorted(hit[1] for hit in hits) == sorted(
                ["Biscuit the greyhound loves the beach.", FACTS[0]]
            )
            assert written[0] in [hit[0] for hit in hits]
        raced.race, raced.raced = race, ("scan", "nearest")
        for where in ('fact=~"Bisc[u]it"', 'create_time > "2000-01-01T00:00:00Z"'):
            assert len(await search(reader, bank, "greyhound", filter=where)) >= 2
        assert raced.race is not None  # none was read: the cached vectors ranked the dense side
    finally:
        await reader.aclose()
        await writer.aclose()


@pytest.mark.parametrize("mode", ["hybrid", "dense"])
async def test_natural_language_and_profile_scopes_together_rank_as_the_scan_path(
    mode: str,
) -> None:
    """Two scope keys in one query (memory_types): each its own cached index, one ranking
    (dense: with a filter, else the cache is not used)."""
    name = f"profiles-{uuid.uuid4().hex[:8]}"
    model = ScriptedMemoryModel()
    cached = AsyncClient(
        store=ReferenceMemoryStore(name=name), embedding_model="hash-64", generation_model=model
    )
    scanned = AsyncClient(store=_UnversionedMemory(name=name), embedding_model="hash-64")
    schema = {"type": "OBJECT", "properties": {"name": {"type": "STRING"}}}
    structured = [{"scope_keys": ["user_id"], "schema_configs": [{"id": "p", "schema": schema}]}]
    try:
        bank = (
            await cached.memory_banks.create(
                extensions={"retrieval": {"mode": mode, "fusion": "rrf"}},
                managed_semantic_memory_config={"structured_memory_configs": structured},
            )
        ).name
        for fact in FACTS:
            await add(cached, bank, fact, U1)
        model.extractions += [{"memories": [], "profiles": {"p": {"name": "Biscuit Ada"}}}]
        text = {"role": "user", "parts": [{"text": "I'm Biscuit Ada."}]}
        await cached.memory_banks.memories.generate(
            name=bank, scope=U1, direct_contents_source={"events": [{"content": text}]}
        )

        async def both(client: AsyncClient, query: str) -> list[tuple[str, str, float]]:
            pager = await client.memory_banks.memories.retrieve(
                name=bank,
                scope=U1,
                similarity_search_params={"search_query": query, "top_k": 10},
                config={
                    "memory_types": ["NATURAL_LANGUAGE_COLLECTION", "STRUCTURED_PROFILE"],
                    "filter": 'NOT fact = "x"' if mode == "dense" else None,
                },
            )
            return [
                (hit.memory.name or "", str(hit.memory.memory_type), hit.distance or 0.0)
                async for hit in pager
            ]

        for query in ("Biscuit", "greyhound Biscuit Ada", "teal cello"):
            hits = await both(cached, query)
            assert len(hits) == len(FACTS) + 1
            assert hits == await both(scanned, query), query
    finally:
        await cached.aclose()
        await scanned.aclose()
