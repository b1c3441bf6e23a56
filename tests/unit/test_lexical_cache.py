"""The per-process cache of scope indexes: bounded by facts, rebuilt when it cannot serve."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import numpy as np
import pytest

from adk_memory.engine.lexical_cache import (
    LEXICAL_BYTES_PER_FACT,
    MAX_VIEWS,
    LexicalCache,
    ScopeIndex,
)
from adk_memory.filters import And, Condition, FilterExpr, Not, Op, Or, matches
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.scope import scope_key
from adk_memory.store import MemoryRecord, ScanQuery, WriteBatch
from adk_memory.testing.conformance import BANK, T0, bank_record, memory, unit

A, B = {"user_id": "a"}, {"user_id": "b"}


class _Reads:
    """Index lookups through the cache that count the scans they needed."""

    def __init__(self, cache: LexicalCache, store: ReferenceMemoryStore) -> None:
        self.cache, self.store, self.scans = cache, store, 0

    async def index(self, scope: dict[str, str], now: datetime = T0) -> ScopeIndex:
        key = scope_key(scope)

        async def scan() -> Sequence[MemoryRecord]:
            self.scans += 1
            return await self.store.scan(BANK, ScanQuery(now=now, scope_key=key))

        version = await self.store.scope_version(BANK, key)
        return await self.cache.scope_index(self.store, BANK, key, version, now, scan)


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
        memory("m0", unit(0), expire_time=T0 + timedelta(seconds=1)),
        memory("m1", unit(1)),
        memory("m2", unit(2)),
    ]
    index = ScopeIndex.of(records, "v", T0)
    view = index.restricted("f", {"m0", "m2", "elsewhere"}, T0)
    assert live_documents(view, T0) == [0, 2]
    assert live_documents(view, T0 + timedelta(seconds=1)) == [2]
    assert live_documents(index, T0) == [0, 1, 2]  # the index itself is unchanged


def test_a_view_is_served_again_for_its_filter_only_and_never_to_an_earlier_query() -> None:
    index = ScopeIndex.of([memory("m0", unit(0)), memory("m1", unit(1))], "v", T0)
    view = index.restricted("f", {"m1"}, T0 + timedelta(seconds=5))
    assert index.view("f", T0 + timedelta(seconds=5)) is view
    assert index.view("f", T0 + timedelta(days=1)) is view
    assert index.view("g", T0 + timedelta(days=1)) is None
    # Ids read at T0+5s leave out what had expired then; an earlier clock could see it live.
    assert index.view("f", T0) is None
    assert ScopeIndex.of([memory("m0", unit(0))], "v", T0).view("f", T0 + timedelta(1)) is None


def test_an_index_keeps_the_views_of_its_last_filters_only() -> None:
    index = ScopeIndex.of([memory("m0", unit(0))], "v", T0)
    views = [index.restricted(f"f{i}", {"m0"}, T0) for i in range(MAX_VIEWS + 1)]
    assert index.view("f0", T0) is None
    assert index.view("f1", T0) is views[1]
    index.restricted("again", set(), T0)  # f1 was used last: f2 leaves, f1 stays
    assert index.view("f1", T0) is views[1] and index.view("f2", T0) is None


async def test_an_entry_weighs_its_vectors_and_its_facts() -> None:
    store = await filled(3)
    index = await _Reads(LexicalCache(), store).index(A)
    assert index.vectors is not None and index.vectors.ids == index.memory_ids
    assert index.nbytes == 3 * LEXICAL_BYTES_PER_FACT + index.vectors.nbytes
    assert index.vectors.nbytes > index.vectors.matrix.nbytes > 0


def test_an_entry_weighs_its_metadata_values() -> None:
    """Each distinct (key, value) costs an entry: a value per memory must not go uncounted."""
    plain = ScopeIndex.of([memory(f"m{i}", unit(i)) for i in range(4)], "v", T0)
    shared = [memory(f"m{i}", unit(i), metadata={"tag": "a"}) for i in range(4)]
    distinct = [memory(f"m{i}", unit(i), metadata={"tag": f"t{i}"}) for i in range(4)]
    one_value = ScopeIndex.of(shared, "v", T0).nbytes - plain.nbytes
    four_values = ScopeIndex.of(distinct, "v", T0).nbytes - plain.nbytes
    assert one_value == 4 * 8 + 260 and four_values == 4 * (8 + 260)


async def test_an_unversioned_index_serves_its_query_without_vectors() -> None:
    index = ScopeIndex.of([memory("m0", unit(0))], None, T0)
    assert index.vectors is None


def test_vectors_of_different_lengths_leave_the_index_without_vectors() -> None:
    records = [memory("m0", unit(0)), replace(memory("m1", unit(1)), embedding=(1.0, 0.0))]
    index = ScopeIndex.of(records, "v", T0, with_vectors=True)
    assert index.vectors is None and index.memory_ids == ("m0", "m1")


_VALUES: list[Any] = ["a", "b", "", "1", 1.0, 1, -0.0, 0.0, math.nan, True, False, T0, None]
"""Metadata values (None: the key is missing) and filter constants: values that Python finds
equal across types (1.0 == True == 1), NaN, a datetime (left to the store)."""


def _random_expr(rng: random.Random, depth: int = 0) -> FilterExpr:
    kind = rng.random()
    if depth < 3 and kind < 0.2:
        return Not(_random_expr(rng, depth + 1))
    if depth < 3 and kind < 0.45:
        parts = tuple(_random_expr(rng, depth + 1) for _ in range(rng.randint(2, 3)))
        return rng.choice([And, Or])(parts)
    if kind < 0.52:
        return Condition("fact", Op.HAS, "a")
    value = rng.choice([value for value in _VALUES if value is not None])
    op = rng.choice([Op.EQ, Op.EQ, Op.EQ, Op.LT, Op.GT])
    return Condition(f"metadata.{rng.choice('kl')}", op, value)


def _supported(expr: FilterExpr) -> bool:
    if isinstance(expr, And | Or):
        return all(_supported(part) for part in expr.parts)
    if isinstance(expr, Not):
        return _supported(expr.part)
    field, value = expr.field, expr.value
    return field.startswith("metadata.") and not isinstance(value, datetime) and expr.op is Op.EQ


@pytest.mark.parametrize("seed", range(30))
def test_the_index_evaluates_metadata_equalities_exactly_as_matches(seed: int) -> None:
    """What the index answers itself equals `filters.matches` on every document; any other
    condition (another op, a non-string constant, a fact) leaves the answer to the store."""
    rng = random.Random(seed)
    records = []
    for i in range(rng.randint(0, 30)):
        chosen = {key: rng.choice(_VALUES) for key in "kl"}
        metadata = {key: value for key, value in chosen.items() if value is not None}
        records.append(memory(f"m{i}", unit(i), metadata=metadata, fact=rng.choice("ab")))
    index = ScopeIndex.of(records, "v", T0)
    for _ in range(20):
        expr = _random_expr(rng)
        view = index.filtered(repr(expr), expr)
        if not _supported(expr):
            assert view is None, expr
            continue
        assert view is not None and index.view(repr(expr), T0) is view
        expected = [doc for doc, record in enumerate(records) if matches(expr, record)]
        assert live_documents(view, T0) == expected, expr
