"""The per-process cache of scope indexes: bounded by facts, rebuilt when it cannot serve."""

from __future__ import annotations

import math
import random
import sys
import tracemalloc
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import numpy as np
import pytest

from adk_memory.engine.lexical_cache import (
    LEXICAL_BYTES_PER_FACT,
    MAX_VIEWS,
    LexicalCache,
    ScopeIndex,
)
from adk_memory.engine.scope_columns import ScopeColumns
from adk_memory.filters import And, Condition, FilterExpr, Not, Op, Or, matches, parse_filter
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.scope import scope_key
from adk_memory.store import MemoryRecord, ScanQuery, TopicRef, WriteBatch
from adk_memory.testing.conformance import BANK, T0, bank_record, memory, unit

A, B = {"user_id": "a"}, {"user_id": "b"}


class _Reads:
    """Index lookups through the cache that count the scans they needed."""

    def __init__(self, cache: LexicalCache, store: ReferenceMemoryStore) -> None:
        self.cache, self.store, self.scans = cache, store, 0

    async def index(
        self, scope: dict[str, str], now: datetime = T0, *, lexical: bool = True
    ) -> ScopeIndex:
        key = scope_key(scope)

        async def scan() -> Sequence[MemoryRecord]:
            self.scans += 1
            return await self.store.scan(BANK, ScanQuery(now=now, scope_key=key))

        version = await self.store.scope_version(BANK, key)
        return await self.cache.scope_index(
            self.store, BANK, key, version, now, scan, lexical=lexical
        )


async def filled(facts_per_scope: int) -> ReferenceMemoryStore:
    store = ReferenceMemoryStore()
    await store.create_bank(bank_record())
    records = [
        memory(f"{scope['user_id']}{i}", unit(i), scope=scope, fact=f"fact {i}")
        for scope in (A, B)
        for i in range(facts_per_scope)
    ]
    await store.apply(BANK, WriteBatch(inserts=tuple(records)))
    return store


async def test_an_unchanged_scope_is_scanned_once_and_a_written_one_again() -> None:
    store = await filled(3)
    reads = _Reads(LexicalCache(), store)
    first = await reads.index(A)
    assert await reads.index(A) is first and reads.scans == 1
    await store.apply(BANK, WriteBatch(deletes=("b0",)))  # another scope
    assert await reads.index(A) is first and reads.scans == 1
    await store.apply(BANK, WriteBatch(deletes=("a0",)))
    assert (await reads.index(A)).memory_ids == ("a1", "a2") and reads.scans == 2


async def test_a_dense_index_has_no_bm25_and_a_hybrid_query_rebuilds_it() -> None:
    store = await filled(3)
    reads = _Reads(LexicalCache(), store)
    dense = await reads.index(A, lexical=False)
    assert dense.lexical is None and await reads.index(A, lexical=False) is dense
    hybrid = await reads.index(A)
    assert hybrid.lexical is not None and reads.scans == 2
    assert await reads.index(A, lexical=False) is hybrid and reads.scans == 2


async def test_a_dense_index_is_built_once_the_stores_queries_cost_what_a_build_did() -> None:
    """Ski rental per version: the store's queries at a version count until they reach what
    building took (a first guess, then the last build's time); a write starts again at 0, so a
    scope written between every few queries is never scanned."""
    store = await filled(3)
    cache, scans = LexicalCache(first_build_seconds=1.0), [0]
    key = scope_key(A)

    async def stable() -> ScopeIndex | None:
        async def scan() -> Sequence[MemoryRecord]:
            scans[0] += 1
            return await store.scan(BANK, ScanQuery(now=T0, scope_key=key))

        version = await store.scope_version(BANK, key)
        return await cache.stable_scope_index(store, BANK, key, version, T0, scan)

    assert await stable() is None
    cache.paid_store(store, BANK, key, 0.6)
    assert await stable() is None
    cache.paid_store(store, BANK, key, 0.6)  # 1.2 s paid, but the scope is written first
    await store.apply(BANK, WriteBatch(deletes=("a0",)))
    assert await stable() is None and scans == [0]
    cache.paid_store(store, BANK, scope_key(B), 5.0)  # another scope's
    assert await stable() is None
    cache.paid_store(store, BANK, key, 1.0)
    index = await stable()
    assert index is not None and index.lexical is None and scans == [1]
    assert await stable() is index and scans == [1]
    await store.apply(BANK, WriteBatch(deletes=("a1",)))
    assert await stable() is None  # the last build took far less than the 0.5 s paid next
    cache.paid_store(store, BANK, key, 0.5)
    assert (await stable()) is not None and scans == [2]


async def test_a_dense_index_over_the_budget_is_built_once_and_then_left_to_the_store() -> None:
    store = await filled(3)
    too_small = await scope_bytes(store, A) // 4
    cache, key, scans = LexicalCache(too_small, first_build_seconds=0.0), scope_key(A), [0]

    async def scan() -> Sequence[MemoryRecord]:
        scans[0] += 1
        return await store.scan(BANK, ScanQuery(now=T0, scope_key=key))

    version = await store.scope_version(BANK, key)
    assert await cache.stable_scope_index(store, BANK, key, version, T0, scan) is not None
    cache.paid_store(store, BANK, key, 1e6)
    assert await cache.stable_scope_index(store, BANK, key, version, T0, scan) is None
    assert scans == [1]


async def test_without_patience_a_dense_index_is_built_at_the_first_miss() -> None:
    store = await filled(3)
    cache, key = LexicalCache(patience=0.0), scope_key(A)

    async def scan() -> Sequence[MemoryRecord]:
        return await store.scan(BANK, ScanQuery(now=T0, scope_key=key))

    version = await store.scope_version(BANK, key)
    assert await cache.stable_scope_index(store, BANK, key, version, T0, scan) is not None


async def scope_bytes(store: ReferenceMemoryStore, scope: dict[str, str]) -> int:
    """The weight of the scope's index in a cache's budget."""
    return (await _Reads(LexicalCache(), store).index(scope)).nbytes


async def test_the_least_recently_used_scope_leaves_when_the_bytes_overflow() -> None:
    store = await filled(3)
    one_scope = await scope_bytes(store, A)
    reads = _Reads(LexicalCache(max_bytes=one_scope * 3 // 2), store)
    await reads.index(A)
    await reads.index(B)  # two scopes' bytes > the budget: A goes
    assert reads.scans == 2
    await reads.index(B)
    assert reads.scans == 2
    await reads.index(A)
    assert reads.scans == 3


async def test_a_scope_larger_than_the_budget_is_served_but_not_kept() -> None:
    store = await filled(3)
    reads = _Reads(LexicalCache(max_bytes=await scope_bytes(store, A) - 1), store)
    assert len((await reads.index(A)).memory_ids) == 3
    await reads.index(A)
    assert reads.scans == 2


async def test_a_clock_set_back_rebuilds_the_index() -> None:
    store = await filled(1)
    reads = _Reads(LexicalCache(), store)
    await reads.index(A, T0 + timedelta(days=1))
    await reads.index(A, T0 + timedelta(days=2))
    assert reads.scans == 1
    await reads.index(A, T0)
    assert reads.scans == 2


def test_expired_documents_are_those_whose_expiry_is_not_after_now() -> None:
    records = [
        memory("m0", unit(0), expire_time=T0 + timedelta(seconds=2)),
        memory("m1", unit(1)),
        memory("m2", unit(2), expire_time=T0 + timedelta(seconds=1)),
    ]
    index = ScopeIndex.of(records, "v", T0)
    assert index.live(T0) is None
    assert live_documents(index, T0 + timedelta(seconds=1)) == [0, 1]
    assert live_documents(index, T0 + timedelta(days=1)) == [1]


def live_documents(index: ScopeIndex, now: datetime) -> list[int]:
    mask = index.live(now)
    return list(range(len(index.memory_ids))) if mask is None else np.flatnonzero(mask).tolist()


def test_a_view_keeps_the_matches_and_still_leaves_out_the_expired() -> None:
    records = [
        memory("m0", unit(0), expire_time=T0 + timedelta(seconds=1), fact="keep"),
        memory("m1", unit(1), fact="drop"),
        memory("m2", unit(2), fact="keep"),
    ]
    index = ScopeIndex.of(records, "v", T0)
    view = index.filtered(Condition("fact", Op.EQ, "keep"))
    assert live_documents(view, T0) == [0, 2]
    assert live_documents(view, T0 + timedelta(seconds=1)) == [2]
    assert live_documents(index, T0) == [0, 1, 2]  # the index itself is unchanged


def test_an_index_keeps_the_views_of_its_last_filters_only() -> None:
    index = ScopeIndex.of([memory("m0", unit(0))], "v", T0)

    def fact_is(text: str) -> FilterExpr:
        return Condition("fact", Op.EQ, text)

    views = [index.filtered(fact_is(f"f{i}")) for i in range(MAX_VIEWS + 1)]
    assert index.filtered(fact_is("f1")) is views[1]  # f0 left when f16 came: f1 stays
    index.filtered(fact_is("again"))  # f1 was used last: f2 leaves
    assert index.filtered(fact_is("f1")) is views[1]
    assert index.filtered(fact_is("f2")) is not views[2]
    assert index.filtered(fact_is("f0")) is not views[0]


def test_a_filter_naming_another_scope_keeps_nothing_of_this_one() -> None:
    index = ScopeIndex.of([memory(f"m{i}", unit(i), scope=A) for i in range(3)], "v", T0)
    for text in ['scope.user_id = "b"', 'NOT scope.user_id = "a"', 'scope.app = "x"']:
        expr = parse_filter(text, allow_scope=True)
        assert expr is not None and live_documents(index.filtered(expr), T0) == [], text
    assert live_documents(index.filtered(Condition("scope.user_id", Op.NE, "b")), T0) == [0, 1, 2]


def test_values_equal_in_python_but_not_to_a_filter_get_their_own_views() -> None:
    index = ScopeIndex.of([memory("m0", unit(0), metadata={"x": True})], "v", T0)
    flag, number = Condition("metadata.x", Op.EQ, True), Condition("metadata.x", Op.EQ, 1.0)
    assert live_documents(index.filtered(flag), T0) == [0]
    assert live_documents(index.filtered(number), T0) == []


async def test_an_entry_weighs_its_vectors_its_facts_and_its_columns() -> None:
    store = await filled(3)
    index = await _Reads(LexicalCache(), store).index(A)
    assert index.vectors is not None and index.vectors.ids == index.memory_ids
    lexical = 3 * LEXICAL_BYTES_PER_FACT
    assert index.nbytes == lexical + index.vectors.nbytes + index.columns.nbytes
    assert index.vectors.nbytes > index.vectors.matrix.nbytes > 0
    dense = ScopeIndex.of(
        await store.scan(BANK, ScanQuery(now=T0, scope_key=scope_key(A))),
        "v",
        T0,
        with_lexical=False,
    )
    assert dense.lexical is None and dense.nbytes == dense.columns.nbytes


_TRACED_FRAMES = 64
"""Deep enough that every allocation under `_columns_bytes` keeps its frame in its traceback."""


def _columns_bytes(records: list[MemoryRecord]) -> int:
    """What building the columns of `records` allocates and keeps, with the facts' own bytes
    (kept alive by the columns once the records are gone).

    Only this call's allocations count: those still alive with this function on their stack
    (not another thread's, nor the snapshot's own), whatever else the process allocates.
    """
    tracemalloc.start(_TRACED_FRAMES)
    try:
        columns = ScopeColumns.of(records)
        snapshot = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    assert columns is not None
    ours = snapshot.filter_traces(
        [
            tracemalloc.Filter(True, __file__, all_frames=True),
            tracemalloc.Filter(False, tracemalloc.__file__),
        ]
    )
    kept = sum(trace.size for trace in ours.traces)
    return kept + sum(sys.getsizeof(record.fact) for record in records)


@pytest.mark.parametrize(
    "metadata",
    [
        lambda i: {},
        lambda i: {"tag": "ab"[i % 2]},
        lambda i: {"tag": f"value {i}", "n": float(i), "when": T0 + timedelta(seconds=i)},
        lambda i: {f"key{i}": True},  # a key per memory: a column each
    ],
)
def test_the_columns_weigh_at_least_what_they_hold(metadata: Any) -> None:
    """The budget must not undercount: distinct values per memory, many keys, topics."""
    topics = (TopicRef(managed="USER_PREFERENCES"), TopicRef(custom="work"))
    records = [
        memory(
            f"m{i}",
            unit(i),
            fact=f"Fact {i}: the user said something about item {i} today.",
            metadata=metadata(i),
            topics=topics[: i % 3],
            expire_time=T0 + timedelta(days=i) if i % 2 else None,
        )
        for i in range(200)
    ]
    assert ScopeColumns.of(records).nbytes >= _columns_bytes(records)


async def test_an_unversioned_index_serves_its_query_without_vectors() -> None:
    index = ScopeIndex.of([memory("m0", unit(0))], None, T0)
    assert index.vectors is None


def test_vectors_of_different_lengths_leave_the_index_without_vectors() -> None:
    records = [memory("m0", unit(0)), replace(memory("m1", unit(1)), embedding=(1.0, 0.0))]
    index = ScopeIndex.of(records, "v", T0, with_vectors=True)
    assert index.vectors is None and index.memory_ids == ("m0", "m1")


_VALUES: list[Any] = [
    "a",
    "b",
    "",
    "1",
    1.0,
    1,
    -0.0,
    0.0,
    2.5,
    math.nan,
    True,
    False,
    T0,
    T0 + timedelta(microseconds=400),
    T0 + timedelta(seconds=1),
    None,
]
"""Metadata values (None: the key is missing) and filter constants: values that Python finds
equal across types (1.0 == True == 1), NaN, timestamps equal to the whole second only."""
_FACTS = ["alpha beta", "Alpha", "beta 42", "", "gamma\ndelta", "x" * 30, "ünï 🙂"]
_PATTERNS = ["a", "^A", "\\d+", "(?i)alpha", "beta$", "", "ü|🙂", "a.b", "[xy]{30}"]
_TIMES = [T0 - timedelta(days=1), T0, T0 + timedelta(microseconds=1), T0 + timedelta(hours=5)]
_TOPICS = [
    TopicRef(managed="USER_PREFERENCES"),
    TopicRef(managed="KEY_CONVERSATION_DETAILS"),
    TopicRef(custom="work"),
    TopicRef(custom="Work"),
]
_SCOPES = [A, B, {"user_id": "a", "app": "x"}]


def _random_time(rng: random.Random) -> datetime:
    """One of a few instants, in UTC or at another offset (the same instant compares equal)."""
    when = rng.choice(_TIMES) + timedelta(microseconds=rng.choice([0, 0, -1, 1]))
    return when.astimezone(timezone(timedelta(hours=rng.choice([0, 2, -7]))))


def _random_record(rng: random.Random, i: int) -> MemoryRecord:
    chosen = {key: rng.choice(_VALUES) for key in "kl"}
    created = _random_time(rng)
    return memory(
        f"m{i}",
        unit(i),
        fact=rng.choice(_FACTS),
        scope=rng.choice(_SCOPES),
        create_time=created,
        update_time=rng.choice([created, _random_time(rng)]),
        expire_time=rng.choice([None, _random_time(rng)]),
        topics=tuple(rng.sample(_TOPICS, rng.randint(0, 2))),
        metadata={key: value for key, value in chosen.items() if value is not None},
    )


def _random_condition(rng: random.Random) -> Condition:
    """A condition on any field, with any comparator (also those the parser refuses there)."""
    op = rng.choice(list(Op))
    field = rng.choice(
        [
            "fact",
            "create_time",
            "update_time",
            "expire_time",
            "topics.managed_memory_topic",
            "topics.custom_memory_topic_label",
            "scope.user_id",
            "scope.app",
            "metadata.k",
            "metadata.l",
            "metadata.missing",
        ]
    )
    value: Any
    if field == "fact":
        value = rng.choice(_PATTERNS) if op is Op.REGEX else rng.choice(_FACTS + ["a", "42"])
    elif field.endswith("_time"):
        value = _random_time(rng)
    elif field == "topics.managed_memory_topic":
        value = rng.choice(
            ["USER_PREFERENCES", "KEY_CONVERSATION_DETAILS", "EXPLICIT_INSTRUCTIONS"]
        )
    elif field == "topics.custom_memory_topic_label":
        value = rng.choice(["work", "Work", "home"])
    elif field.startswith("scope."):
        value = rng.choice(["a", "b", "x", "A"])
    else:
        value = rng.choice([value for value in _VALUES if value is not None])
    return Condition(field, op, value)


def _random_expr(rng: random.Random, depth: int = 0) -> FilterExpr:
    kind = rng.random()
    if depth < 3 and kind < 0.2:
        return Not(_random_expr(rng, depth + 1))
    if depth < 3 and kind < 0.45:
        parts = tuple(_random_expr(rng, depth + 1) for _ in range(rng.randint(0, 3)))
        return rng.choice([And, Or])(parts)
    return _random_condition(rng)


@pytest.mark.parametrize("seed", range(60))
def test_the_index_evaluates_every_filter_exactly_as_matches(seed: int) -> None:
    """Random records and random filters over the whole language (facts by =, !=, :, regex;
    times at other offsets and a microsecond apart; topics; scopes; metadata of every type
    with every comparator; NOT, AND, OR nested, empty ones too): the index's view keeps
    exactly the documents `filters.matches` keeps."""
    rng = random.Random(seed)
    records = [_random_record(rng, i) for i in range(rng.randint(0, 40))]
    index = ScopeIndex.of(records, "v", T0 - timedelta(days=2))
    for _ in range(40):
        expr = _random_expr(rng)
        view = index.filtered(expr)
        assert index.filtered(expr) is view
        expected = [doc for doc, record in enumerate(records) if matches(expr, record)]
        assert live_documents(view, T0 - timedelta(days=2)) == expected, expr


def test_parsed_filters_are_evaluated_as_matches() -> None:
    """The same through the parser: its values (times, topics, regex) as a request has them."""
    rng = random.Random(7)
    records = [_random_record(rng, i) for i in range(60)]
    index = ScopeIndex.of(records, "v", T0 - timedelta(days=2))
    micros = (T0 - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    for text in [
        'fact = "Alpha" OR fact:"beta"',
        'NOT fact=~"^a.*a$" AND fact != ""',
        f'create_time >= "{T0.isoformat()}" AND update_time < {micros + 1}',
        f'expire_time > "{T0.isoformat()}" OR NOT expire_time <= "{T0.isoformat()}"',
        "topics.managed_memory_topic: user_preferences"
        " AND -topics.custom_memory_topic_label = work",
        'metadata.k = "a" OR (metadata.l = "b" AND NOT metadata.k = "1")',
    ]:
        expr = parse_filter(text)
        assert expr is not None
        expected = [doc for doc, record in enumerate(records) if matches(expr, record)]
        assert live_documents(index.filtered(expr), T0 - timedelta(days=2)) == expected, text
