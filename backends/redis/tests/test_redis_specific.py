"""Behaviour specific to the Redis backend, beyond the shared conformance suite.

HNSW against FLAT, native key expiry, hostile text in filters, paging past one search chunk,
the lock, deployments (password, TLS, a server without the query engine, an unreachable one),
and atomicity when the connection dies in the middle of a multi-key write.
"""

from __future__ import annotations

import asyncio
import random
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import adk_memory_redis
import pytest
import redis.asyncio as aredis
from adk_memory_redis import RedisLockProvider, RedisMemoryStore
from adk_memory_redis._writer import BatchWriter

from adk_memory._registry import store_class_for
from adk_memory.errors import (
    Aborted,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    StoreUnavailable,
)
from adk_memory.filters import And, Condition, FilterExpr, Not, Op, Or, matches
from adk_memory.scope import scope_key
from adk_memory.store import (
    EXPIRY_KEY,
    EXPIRY_KIND,
    MemoryRecord,
    NearestQuery,
    ScanCursor,
    ScanQuery,
    SortKey,
    TopicRef,
    WriteBatch,
)
from adk_memory.testing._redis_server import redis_server
from adk_memory.testing.conformance import T0, bank_record, memory, revision

BANK = "1234"
SCOPE = {"user_id": "u1"}
KEY = scope_key(SCOPE)
HOSTILE = [
    'a" OR 1=1 --',
    "x}|{@scope_key:*}",
    "@fact:* | -@memory_id:{x}",
    "$BLOB",
    "=>[KNN 100 @embedding $BLOB]",
    "back\\slash\\",
    "comma,separated,tag",
    "ünï©ødé 🙂 \u202e",
    "*",
    "",
    "x" * 5000,
    "UPPER",
    "upper",
]


@contextmanager
def _private_server(**options: Any) -> Iterator[str]:
    """A server of the test's own (even when REDIS_URL is set), or a skip saying what to install."""
    try:
        server = redis_server(use_env=False, **options)
        url = server.__enter__()
    except RuntimeError as exc:
        pytest.skip(f"needs a private server from the test wheels: {exc}")
    try:
        yield url
    finally:
        server.__exit__(None, None, None)


def _store(url: str, **options: Any) -> RedisMemoryStore:
    return RedisMemoryStore.from_uri(url, key_prefix=f"t-{uuid.uuid4().hex[:8]}", **options)


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[RedisMemoryStore]:
    store = _store(redis_url, index_algorithm="FLAT")
    try:
        await store.create_bank(bank_record(BANK))
        yield store
    finally:
        await store.drop_all()
        await store.aclose()


def _unit_vector(rng: random.Random, dim: int) -> tuple[float, ...]:
    values = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = sum(v * v for v in values) ** 0.5
    return tuple(v / norm for v in values)


# Index algorithms


@pytest.mark.parametrize("graph_from", [0, 5000], ids=["graph", "brute-force"])
async def test_hnsw_agrees_with_exact_flat_search(redis_url: str, graph_from: int) -> None:
    """HNSW brute-forces small scopes (results equal FLAT's) and walks the graph for large ones
    (over-fetched, ranked by exact distances: near-perfect recall, exact distances, ascending)."""
    rng = random.Random(11)
    dim = 32
    scopes = [{"user_id": f"u{i}"} for i in range(3)]
    records = [
        memory(
            f"m{i:05d}", _unit_vector(rng, dim), scope=scopes[i % 3], metadata={"even": i % 2 == 0}
        )
        for i in range(3000)
    ]
    by_id = {record.memory_id: record for record in records}
    flat, hnsw = (
        _store(redis_url, index_algorithm="FLAT"),
        _store(redis_url, index_algorithm="HNSW", hnsw_graph_from=graph_from),
    )
    found = wanted = 0
    try:
        for target in (flat, hnsw):
            await target.create_bank(bank_record(BANK, dim=dim))
            for start in range(0, len(records), 500):
                await target.apply(BANK, WriteBatch(inserts=tuple(records[start : start + 500])))
        for trial in range(24):
            query = NearestQuery(
                scope_key(scopes[trial % 3]),
                _unit_vector(rng, dim),
                k=(1, 5, 20, 100)[trial % 4],
                now=datetime.now(UTC),
                filter=Condition("metadata.even", Op.EQ, True) if trial % 5 == 0 else None,
            )
            exact = await flat.nearest(BANK, query)
            approx = await hnsw.nearest(BANK, query)
            assert len(exact) == len(approx) == query.k
            if graph_from:  # brute force over the scope: exact
                assert [h.record.memory_id for h in approx] == [h.record.memory_id for h in exact]
            found += len({h.record.memory_id for h in approx} & {h.record.memory_id for h in exact})
            wanted += query.k
            for hit in approx:
                stored = by_id[hit.record.memory_id].embedding
                true = sum((a - b) ** 2 for a, b in zip(stored, query.vector, strict=True)) ** 0.5
                assert hit.distance == pytest.approx(true, abs=1e-6)
            assert [h.distance for h in approx] == sorted(h.distance for h in approx)
        assert found / wanted >= 0.97
    finally:
        for target in (flat, hnsw):
            await target.drop_all()
            await target.aclose()


async def test_float64_vectors_read_back_bit_for_bit(redis_url: str) -> None:
    """With vector_dtype=float64 an embedding reads back exactly as written."""
    store = _store(redis_url, vector_dtype="float64")
    try:
        await store.create_bank(bank_record(BANK))
        vector = _unit_vector(random.Random(3), 8)
        await store.apply(BANK, WriteBatch(inserts=(memory("m1", vector),)))
        [found] = await store.get_memories(BANK, ["m1"], datetime.now(UTC))
        assert found.embedding == vector
    finally:
        await store.drop_all()
        await store.aclose()


# Expiry


async def _memory_keys(client: aredis.Redis, prefix: str) -> list[bytes]:
    return [key async for key in client.scan_iter(match=f"{{{prefix}:*}}:*:m:*")]


async def test_native_expiry_removes_the_key(redis_url: str) -> None:
    """A memory and its revision expiring in a second are gone from Redis itself afterwards."""
    store = _store(redis_url)
    client = aredis.Redis.from_url(redis_url)
    try:
        await store.create_bank(bank_record(BANK))
        now = datetime.now(UTC)
        soon = now + timedelta(seconds=1)
        await store.apply(
            BANK,
            WriteBatch(
                inserts=(
                    memory("m1", (1.0,) + (0.0,) * 7, expire_time=soon),
                    memory("kept", (0.0, 1.0) + (0.0,) * 6),
                ),
                revisions=(revision("m1", "r1", expire_time=soon),),
            ),
        )
        assert len(await store.nearest(BANK, NearestQuery(KEY, (1.0,) + (0.0,) * 7, 5, now))) == 2
        assert await store.list_revision_memory_ids(BANK, now) == ["m1"]
        [key] = [
            k for k in await _memory_keys(client, store.config.key_prefix) if k.endswith(b":m:m1")
        ]
        assert 0 < await client.pttl(key) <= 1000
        await asyncio.sleep(1.3)
        assert not await client.exists(key)
        assert len(await _memory_keys(client, store.config.key_prefix)) == 1
        later = datetime.now(UTC)
        assert await store.list_revisions(BANK, "m1", later) == []
        assert [r.memory_id for r in await store.scan(BANK, ScanQuery(later))] == ["kept"]
        # The listing finds the evicted revision set and forgets its id.
        [ids_key] = [k async for k in client.scan_iter(match=f"{{{store.config.key_prefix}:*:rids")]
        assert await client.zrange(ids_key, 0, -1) == [b"m1"]
        assert await store.list_revision_memory_ids(BANK, now) == []
        assert not await client.exists(ids_key)
    finally:
        await store.drop_all()
        await store.aclose()
        await client.aclose()


async def test_expired_memory_is_hidden_before_redis_evicts_it(redis_url: str) -> None:
    """The read-time check hides a memory from its expiry instant, while its key still exists."""
    store = _store(redis_url)
    client = aredis.Redis.from_url(redis_url)
    try:
        await store.create_bank(bank_record(BANK))
        expires = datetime.now(UTC) + timedelta(minutes=5)
        await store.apply(
            BANK, WriteBatch(inserts=(memory("m1", (1.0,) + (0.0,) * 7, expire_time=expires),))
        )
        [key] = await _memory_keys(client, store.config.key_prefix)
        assert await client.pttl(key) > 0
        assert await store.get_memories(BANK, ["m1"], expires) == []
        assert await store.nearest(BANK, NearestQuery(KEY, (1.0,) + (0.0,) * 7, 3, expires)) == []
        assert await store.scan(BANK, ScanQuery(expires)) == []
        assert await client.exists(key)
    finally:
        await store.drop_all()
        await store.aclose()
        await client.aclose()


async def test_a_write_lowers_its_banks_expiry_entry_and_never_raises_it(
    store: RedisMemoryStore,
) -> None:
    """One server lowers the entry inside the write's transaction; a cluster, where the entry
    lives in another slot, around it (a transaction naming it would be refused there). Either
    way the entry ends at the earliest expiry written."""
    soon = datetime.now(UTC) + timedelta(days=1)
    vector = (1.0,) + (0.0,) * 7

    async def entry() -> list[datetime]:
        due = await store.due_documents(EXPIRY_KIND, soon + timedelta(days=30))
        return [found.due for found in due if (found.bank_id, found.key) == (BANK, EXPIRY_KEY)]

    await store.apply(BANK, WriteBatch(inserts=(memory("m1", vector),)))
    assert await entry() == []
    await store.apply(
        BANK, WriteBatch(inserts=(memory("m2", vector, expire_time=soon + timedelta(days=1)),))
    )
    assert await entry() == [soon + timedelta(days=1)]
    await store.apply(BANK, WriteBatch(inserts=(memory("m3", vector, expire_time=soon),)))
    assert await entry() == [soon]
    await store.apply(
        BANK, WriteBatch(upserts=(memory("m1", vector, expire_time=soon + timedelta(days=2)),))
    )
    assert await entry() == [soon]
    assert {record.memory_id for record in await store.scan(BANK, ScanQuery(T0))} == {
        "m1",
        "m2",
        "m3",
    }


# Filters and queries


def _hostile_records() -> list[MemoryRecord]:
    records = []
    for i, text in enumerate(HOSTILE):
        records.append(
            memory(
                f"h{i:02d}",
                _unit_vector(random.Random(i), 8),
                fact=text or "empty",
                topics=(TopicRef(custom=text or "none"),),
                metadata={
                    text: text,
                    "k": text,
                    "n": float(i),
                    "b": i % 2 == 0,
                    "t": datetime(2026, 1, 1, 0, 0, i, tzinfo=UTC),
                },
                scope={"user_id": "u1", "tag": text or "none"},
            )
        )
    return records


def _hostile_filters() -> list[FilterExpr]:
    filters: list[FilterExpr] = []
    for text in HOSTILE:
        filters += [
            Condition("fact", Op.EQ, text),
            Condition("fact", Op.NE, text),
            Condition("metadata.k", Op.EQ, text),
            Condition(f"metadata.{text}", Op.EQ, text),
            Not(Condition("metadata.k", Op.EQ, text)),
            Condition("metadata.k", Op.NE, text),
            Condition("topics.custom_memory_topic_label", Op.EQ, text),
            Condition("topics.custom_memory_topic_label", Op.NE, text),
            Condition("scope.tag", Op.EQ, text),
            Condition(f"scope.{text}", Op.NE, text),
        ]
    filters += [
        Condition("metadata.n", Op.EQ, 3.0),
        Condition("metadata.n", Op.NE, 3.0),
        Condition("metadata.n", Op.EQ, float("nan")),
        Condition("metadata.n", Op.NE, float("nan")),
        Condition("metadata.k", Op.EQ, 1.0),
        Condition("metadata.b", Op.EQ, False),
        Condition("metadata.b", Op.NE, True),
        Condition("metadata.t", Op.EQ, datetime(2026, 1, 1, 0, 0, 4, 999_999, tzinfo=UTC)),
        Condition("metadata.t", Op.NE, datetime(2026, 1, 1, 0, 0, 4, tzinfo=UTC)),
        Condition("create_time", Op.NE, datetime(2026, 1, 1, 12, tzinfo=UTC)),
        Condition("expire_time", Op.NE, datetime(2026, 1, 1, 12, tzinfo=UTC)),
        Not(Condition("expire_time", Op.LT, datetime(2030, 1, 1, tzinfo=UTC))),
        And(()),
        Or(()),
        Not(Or(())),
        Or((Condition("fact", Op.EQ, HOSTILE[0]), Not(Condition("metadata.b", Op.EQ, True)))),
        And(
            (
                Or((Condition("metadata.n", Op.EQ, 1.0), Condition("metadata.n", Op.EQ, 2.0))),
                Not(Condition("fact", Op.EQ, HOSTILE[2])),
            )
        ),
    ]
    return filters


async def test_hostile_text_in_filters_matches_exactly_like_the_engine(
    store: RedisMemoryStore,
) -> None:
    """Quotes, braces, query syntax, separators, unicode and 5,000 characters are plain values."""
    records = _hostile_records()
    await store.apply(BANK, WriteBatch(inserts=tuple(records)))
    key = scope_key(records[0].scope)
    now = records[0].create_time
    for expr in _hostile_filters():
        expected = sorted(r.memory_id for r in records if matches(expr, r))
        scanned = await store.scan(BANK, ScanQuery(now, filter=expr))
        assert sorted(r.memory_id for r in scanned) == expected, expr
        in_scope = [r.memory_id for r in records if matches(expr, r) and r.scope_key == key]
        hits = await store.nearest(
            BANK, NearestQuery(key, records[0].embedding, 100, now, filter=expr)
        )
        assert sorted(h.record.memory_id for h in hits) == sorted(in_scope), expr
    assert [r.fact for r in await store.get_memories(BANK, ["h10"], now)] == ["x" * 5000]


async def test_scan_pages_past_one_search_chunk(store: RedisMemoryStore) -> None:
    """Scans without a limit, and cursors across internal chunks, keep the total order."""
    records = tuple(
        memory(
            f"m{i:04d}",
            (1.0,) + (0.0,) * 7,
            create_time=datetime(2026, 1, 1, tzinfo=UTC) + timedelta(seconds=i // 3),
        )
        for i in range(2500)
    )
    for start in range(0, len(records), 500):
        await store.apply(BANK, WriteBatch(inserts=records[start : start + 500]))
    now = datetime(2027, 1, 1, tzinfo=UTC)
    order = sorted(records, key=lambda r: (-r.create_time.timestamp(), r.memory_id))
    everything = await store.scan(BANK, ScanQuery(now))
    assert [r.memory_id for r in everything] == [r.memory_id for r in order]
    after = ScanCursor((order[989].create_time,), order[989].memory_id)
    page = await store.scan(BANK, ScanQuery(now, after=after, limit=1020))
    assert [r.memory_id for r in page] == [r.memory_id for r in order[990:2010]]
    ascending = await store.scan(
        BANK, ScanQuery(now, order_by=(SortKey("create_time", descending=False),), limit=4)
    )
    assert [r.memory_id for r in ascending] == ["m0000", "m0001", "m0002", "m0003"]


class _RecordingRedis(aredis.Redis):
    """A client that notes every command queued on its pipelines."""

    sent: list[tuple[Any, ...]]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        pipe = super().pipeline(transaction=transaction, shard_hint=shard_hint)
        queue = pipe.execute_command

        def record(*args: Any, **options: Any) -> Any:
            self.sent.append(args)
            return queue(*args, **options)

        pipe.execute_command = record  # type: ignore[method-assign]
        return pipe


async def test_deep_scans_send_no_offset(redis_url: str) -> None:
    """Every chunk of a scan is LIMIT 0 n after a keyset bound: no offset grows with depth, so
    RediSearch's offset cap (1,000,000) never limits how deep a listing goes."""
    client = _RecordingRedis.from_url(redis_url)
    client.sent = []
    store = RedisMemoryStore.from_uri(redis_url, client=client, key_prefix=f"t-{uuid.uuid4().hex}")
    try:
        await _fill(store, 2500)
        now = T_FILL + timedelta(days=1)
        everything = await store.scan(BANK, ScanQuery(now))
        deep = ScanCursor((everything[2200].create_time,), everything[2200].memory_id)
        tail = await store.scan(BANK, ScanQuery(now, after=deep))
        assert [r.memory_id for r in tail] == [r.memory_id for r in everything[2201:]]
        aggregates = [args for args in client.sent if args[0] == "FT.AGGREGATE"]
        assert len(aggregates) >= 4
        for args in aggregates:
            limit = args.index("LIMIT")
            assert args[limit + 1] == 0, args
    finally:
        await store.drop_all()
        await store.aclose()
        await client.aclose()


async def test_missing_bank_is_not_found(store: RedisMemoryStore) -> None:
    """Every read and write of a bank that does not exist says so."""
    now = datetime.now(UTC)
    with pytest.raises(NotFound):
        await store.apply("nope", WriteBatch(inserts=(memory("m1", (1.0,) + (0.0,) * 7),)))
    with pytest.raises(NotFound):
        await store.nearest("nope", NearestQuery(KEY, (1.0,) + (0.0,) * 7, 3, now))
    with pytest.raises(NotFound):
        await store.scan("nope", ScanQuery(now))
    with pytest.raises(NotFound):
        await store.get_memories("nope", ["m1"], now)
    assert await store.get_operation("nope", "operations/x") is None


async def test_a_bank_deleted_elsewhere_is_seen_at_once(redis_url: str) -> None:
    """A second store (another process) deleting and re-creating a bank is never stale here."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    first = RedisMemoryStore.from_uri(redis_url, key_prefix=prefix)
    second = RedisMemoryStore.from_uri(redis_url, key_prefix=prefix)
    try:
        await first.create_bank(bank_record(BANK))
        await first.apply(BANK, WriteBatch(inserts=(memory("m1", (1.0,) + (0.0,) * 7),)))
        now = datetime.now(UTC)
        assert len(await first.get_memories(BANK, ["m1"], now)) == 1
        await second.delete_bank(BANK)
        with pytest.raises(NotFound):
            await first.get_memories(BANK, ["m1"], now)
        await second.create_bank(bank_record(BANK))
        assert await first.get_memories(BANK, ["m1"], now) == []
        assert await first.nearest(BANK, NearestQuery(KEY, (1.0,) + (0.0,) * 7, 3, now)) == []
        await first.apply(BANK, WriteBatch(inserts=(memory("m1", (1.0,) + (0.0,) * 7),)))
        assert len(await second.get_memories(BANK, ["m1"], now)) == 1
    finally:
        await first.drop_all()
        await first.aclose()
        await second.aclose()


async def test_resp2_client_gives_the_same_answers(redis_url: str) -> None:
    """A caller's client speaking RESP2 works like the default RESP3 one, and stays open."""
    client = aredis.Redis.from_url(redis_url, protocol=2)
    store = RedisMemoryStore.from_uri(
        redis_url, client=client, key_prefix=f"t-{uuid.uuid4().hex[:8]}"
    )
    try:
        await store.create_bank(bank_record(BANK))
        await store.apply(
            BANK,
            WriteBatch(
                inserts=(memory("a", (1.0,) + (0.0,) * 7), memory("b", (0.0, 1.0) + (0.0,) * 6))
            ),
        )
        now = datetime.now(UTC)
        hits = await store.nearest(BANK, NearestQuery(KEY, (1.0,) + (0.0,) * 7, 2, now))
        assert [(h.record.memory_id, round(h.distance, 4)) for h in hits] == [
            ("a", 0.0),
            ("b", 1.4142),
        ]
        assert [r.memory_id for r in await store.scan(BANK, ScanQuery(now))] == ["a", "b"]
        await store.drop_all()
        await store.aclose()
        assert await client.ping()
    finally:
        await client.aclose()


async def _fill(store: RedisMemoryStore, count: int) -> None:
    await store.create_bank(bank_record(BANK))
    for start in range(0, count, 1000):
        batch = tuple(
            memory(f"m{i:05d}", (1.0,) + (0.0,) * 7, create_time=T_FILL + timedelta(microseconds=i))
            for i in range(start, min(start + 1000, count))
        )
        await store.apply(BANK, WriteBatch(inserts=batch))


T_FILL = datetime(2026, 1, 1, tzinfo=UTC)
TIMEOUT_DOCS = 6000


async def test_a_search_that_times_out_raises_instead_of_returning_less(redis_url: str) -> None:
    """query_timeout_ms=1 over 6,000 memories: every scan is complete or StoreUnavailable."""
    store = _store(redis_url, index_algorithm="FLAT", query_timeout_ms=1)
    outcomes: list[str] = []
    try:
        await _fill(store, TIMEOUT_DOCS)
        now = T_FILL + timedelta(days=1)
        for _ in range(5):
            try:
                found = await store.scan(BANK, ScanQuery(now))
            except StoreUnavailable as exc:
                assert "query_timeout_ms" in str(exc)
                outcomes.append("timed out")
            else:
                assert len(found) == TIMEOUT_DOCS, "a timed-out search returned partial results"
                outcomes.append("complete")
    finally:
        await store.drop_all()
        await store.aclose()
    assert "timed out" in outcomes  # the limit was really reached, so the check was exercised


async def test_a_resp2_client_cannot_take_a_query_time_limit(redis_url: str) -> None:
    """Over RESP2 the server's timeout warning never arrives: such a store is refused."""
    client = aredis.Redis.from_url(redis_url, protocol=2)
    try:
        with pytest.raises(InvalidArgument, match="RESP3"):
            RedisMemoryStore.from_uri(redis_url, client=client, query_timeout_ms=1)
        resp3 = aredis.Redis.from_url(redis_url, protocol=3)
        RedisMemoryStore.from_uri(redis_url, client=resp3, query_timeout_ms=1)
        await resp3.aclose()
    finally:
        await client.aclose()


async def test_a_decoding_client_is_refused() -> None:
    """A client with decode_responses=True would corrupt vectors, so it is refused up front."""
    client = aredis.Redis(decode_responses=True)
    with pytest.raises(InvalidArgument, match="decode_responses"):
        RedisMemoryStore.from_uri("redis://localhost:6379/0", client=client)
    await client.aclose()


async def test_connections_are_pooled(store: RedisMemoryStore, redis_url: str) -> None:
    """Many calls reuse pooled connections instead of opening one per call."""
    probe = aredis.Redis.from_url(redis_url)
    try:
        await store.get_bank(BANK)
        before = (await probe.info("clients"))["connected_clients"]
        for _ in range(30):
            await store.nearest(BANK, NearestQuery(KEY, (1.0,) + (0.0,) * 7, 3, datetime.now(UTC)))
        await asyncio.gather(*(store.get_bank(BANK) for _ in range(20)))
        after = (await probe.info("clients"))["connected_clients"]
        assert after - before <= 20
        for _ in range(30):
            await store.get_bank(BANK)
        assert (await probe.info("clients"))["connected_clients"] == after
    finally:
        await probe.aclose()


# Configuration and deployment


def test_uri_options_and_keywords_configure_the_store() -> None:
    """Query parameters configure the store, keywords win, typos and misuse are errors."""
    store = RedisMemoryStore.from_uri(
        "redis://:s3cret@db.internal:6380/2?index_algorithm=HNSW&key_prefix=x&overfetch=3",
        key_prefix="y",
    )
    assert (store.config.index_algorithm, store.config.key_prefix, store.config.overfetch) == (
        "HNSW",
        "y",
        3.0,
    )
    assert "s3cret" not in repr(store) and "db.internal:6380" in repr(store)
    with pytest.raises(InvalidArgument, match="index_algoritm"):
        RedisMemoryStore.from_uri("redis://h/0?index_algoritm=FLAT")
    with pytest.raises(InvalidArgument, match="index_algorithm"):
        RedisMemoryStore.from_uri("redis://h/0?index_algorithm=IVF")
    with pytest.raises(InvalidArgument, match="rediss://"):
        RedisMemoryStore.from_uri("redis://h/0?ssl_ca_certs=/ca.pem")
    with pytest.raises(InvalidArgument, match="key_prefix"):
        RedisMemoryStore.from_uri("redis://h/0", key_prefix="{bad}")
    assert (
        RedisMemoryStore.from_uri("rediss://h:6380/0?ssl_cert_reqs=none").config.ssl_cert_reqs
        == "none"
    )


def test_public_names_are_pinned() -> None:
    """The package exports exactly these names."""
    assert adk_memory_redis.__all__ == [
        "RedisLock",
        "RedisLockProvider",
        "RedisMemoryStore",
        "RedisStoreConfig",
    ]


def test_the_backend_is_registered_for_both_schemes() -> None:
    """The core finds this store for redis:// and rediss:// through its entry points."""
    assert store_class_for("redis://localhost:6379/0") is RedisMemoryStore
    assert store_class_for("rediss://localhost:6380/0") is RedisMemoryStore


async def test_password_in_the_url_authenticates() -> None:
    """The URL's password is used; a wrong one fails with a message that does not repeat it."""
    with _private_server(password="p@ss:w/rd") as url:
        good = _store(url)
        bad = _store(url.replace("p%40ss%3Aw%2Frd", "wrong-secret"))
        try:
            await good.create_bank(bank_record(BANK))
            assert (await good.get_bank(BANK)) == bank_record(BANK)
            with pytest.raises(StoreUnavailable) as failure:
                await bad.get_bank(BANK)
            assert "wrong-secret" not in str(failure.value)
            assert "password" in str(failure.value)
        finally:
            await good.drop_all()
            await good.aclose()
            await bad.aclose()


async def test_a_server_without_the_query_engine_is_a_failed_precondition() -> None:
    """A plain Redis fails with an error naming the module and the ways to get it."""
    with _private_server(modules=False) as url:
        store = _store(url)
        try:
            with pytest.raises(FailedPrecondition) as failure:
                await store.create_bank(bank_record(BANK))
            message = str(failure.value)
            assert "RediSearch" in message and "Redis 8" in message and "--loadmodule" in message
        finally:
            await store.aclose()
        locks = RedisLockProvider.from_uri(url)  # the lock needs no module
        try:
            async with locks.lock("plain"):
                pass
        finally:
            await locks.aclose()


async def test_an_unreachable_server_is_store_unavailable() -> None:
    """Constructing does no I/O; the first call fails with `StoreUnavailable`."""
    store = RedisMemoryStore.from_uri(
        f"redis://127.0.0.1:{_free_port()}/0?socket_connect_timeout=0.5"
    )
    try:
        with pytest.raises(StoreUnavailable, match="could not be reached"):
            await store.get_bank(BANK)
    finally:
        await store.aclose()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


# A proxy that can cut the connection mid-transaction, or terminate TLS

_MULTI = b"*1\r\n$5\r\nMULTI\r\n"
_EXEC = b"*1\r\n$4\r\nEXEC\r\n"


class _Proxy:
    """Forwards TCP to Redis; in a cut mode it kills the connection that carries a MULTI.

    `before_exec`: forwards `fraction` of the transaction's bytes (never its final byte), then
    resets both sides: Redis never sees a complete EXEC. `after_exec`: forwards the whole
    transaction, then drops the connection to the client before any reply reaches it.
    `reply_delay` holds each reply from Redis that long before the client gets it;
    `request_delay` holds the client's next bytes that carry `request_marker` (a command) that
    long, once (bytes already sent still arrive after the client hangs up).
    """

    def __init__(self, upstream: str, *, tls: ssl.SSLContext | None = None) -> None:
        host_port = upstream.split("//")[1].split("/")[0].rsplit("@", 1)[-1]
        self.host, port = host_port.split(":")
        self.upstream_port = int(port)
        self.tls = tls
        self.mode = "pass"
        self.fraction = 0.5
        self.cuts = 0
        self.reply_delay = 0.0
        self.request_delay = 0.0
        self.request_marker = b""
        self.server: asyncio.Server | None = None
        self.port = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0, ssl=self.tls)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.upstream_port)
        cut = asyncio.Event()

        async def to_client() -> None:
            while not cut.is_set() and (data := await up_reader.read(65536)):
                await asyncio.sleep(self.reply_delay)
                if cut.is_set():
                    return
                writer.write(data)
                await writer.drain()

        async def to_server() -> None:
            pending = b""
            while data := await reader.read(65536):
                if self.request_delay and self.request_marker in data:
                    delay, self.request_delay = self.request_delay, 0.0
                    await asyncio.sleep(delay)
                pending += data
                start = pending.find(_MULTI) if self.mode != "pass" else -1
                if start < 0:
                    up_writer.write(pending)
                    await up_writer.drain()
                    pending = b""
                    continue
                end = pending.find(_EXEC, start)
                if end < 0:
                    continue  # wait for the whole transaction
                end += len(_EXEC)
                self.cuts += 1
                cut.set()
                if self.mode == "before_exec":
                    up_writer.write(pending[: start + int((end - 1 - start) * self.fraction)])
                    await up_writer.drain()
                    up_writer.transport.abort()
                else:
                    up_writer.write(pending[:end])
                    await up_writer.drain()
                    asyncio.get_running_loop().call_later(0.5, up_writer.close)
                writer.transport.abort()
                return
            up_writer.close()

        await asyncio.gather(to_client(), to_server(), return_exceptions=True)
        writer.close()


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[_Proxy]:
    proxy = _Proxy(redis_url)
    await proxy.start()
    yield proxy
    await proxy.stop()


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 0.9, 1.0])
async def test_connection_killed_before_exec_writes_nothing(
    proxy: _Proxy, redis_url: str, fraction: float
) -> None:
    """Cut anywhere inside MULTI…EXEC: the memory and its revision are both absent."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    through = RedisMemoryStore.from_uri(f"redis://127.0.0.1:{proxy.port}/0", key_prefix=prefix)
    direct = RedisMemoryStore.from_uri(redis_url, key_prefix=prefix)
    record = memory("m1", (1.0,) + (0.0,) * 7)
    batch = WriteBatch(
        inserts=(record, memory("m2", (0.0, 1.0) + (0.0,) * 6)), revisions=(revision("m1", "r1"),)
    )
    try:
        await through.create_bank(bank_record(BANK))
        proxy.mode, proxy.fraction = "before_exec", fraction
        with pytest.raises(StoreUnavailable, match="nothing was changed"):
            await through.apply(BANK, batch)
        assert proxy.cuts == 1
        now = datetime.now(UTC)
        assert await direct.get_memories(BANK, ["m1", "m2"], now) == []
        assert await direct.list_revisions(BANK, "m1", now) == []
        proxy.mode = "pass"
        await through.apply(BANK, batch)  # the same connection pool recovers
        assert len(await direct.get_memories(BANK, ["m1", "m2"], now)) == 2
        assert len(await direct.list_revisions(BANK, "m1", now)) == 1
    finally:
        await direct.drop_all()
        await direct.aclose()
        await through.aclose()


async def test_connection_killed_after_exec_keeps_the_whole_write(
    proxy: _Proxy, redis_url: str
) -> None:
    """Cut after EXEC reached Redis: the write is whole, and the call reports success."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    through = RedisMemoryStore.from_uri(f"redis://127.0.0.1:{proxy.port}/0", key_prefix=prefix)
    direct = RedisMemoryStore.from_uri(redis_url, key_prefix=prefix)
    try:
        await through.create_bank(bank_record(BANK))
        proxy.mode = "after_exec"
        await through.apply(
            BANK,
            WriteBatch(
                inserts=(memory("m1", (1.0,) + (0.0,) * 7),), revisions=(revision("m1", "r1"),)
            ),
        )
        assert proxy.cuts == 1
        now = datetime.now(UTC)
        assert [r.memory_id for r in await direct.get_memories(BANK, ["m1"], now)] == ["m1"]
        assert [r.revision_id for r in await direct.list_revisions(BANK, "m1", now)] == ["r1"]
    finally:
        await direct.drop_all()
        await direct.aclose()
        await through.aclose()


async def test_concurrent_inserts_of_one_id_admit_exactly_one(store: RedisMemoryStore) -> None:
    """WATCH makes the duplicate check race-free: of ten racing inserts, one wins."""
    batches = [
        WriteBatch(
            inserts=(memory("same", (1.0,) + (0.0,) * 7, fact=f"v{i}"),),
            revisions=(revision("same", f"r{i}"),),
        )
        for i in range(10)
    ]
    results = await asyncio.gather(*(store.apply(BANK, b) for b in batches), return_exceptions=True)
    assert sum(r is None for r in results) == 1
    now = datetime.now(UTC)
    [winner] = await store.get_memories(BANK, ["same"], now)
    [rev] = await store.list_revisions(BANK, "same", now)
    assert rev.revision_id == f"r{winner.fact[1:]}"


async def test_more_concurrent_calls_than_connections_wait_for_one(redis_url: str) -> None:
    """Two connections, forty creates and reads at once (a burst of users on one server): each
    waits for a free connection; none fails for want of one."""
    busy = _store(redis_url, index_algorithm="FLAT", max_connections=2)
    try:
        await busy.create_bank(bank_record(BANK))
        batches = [
            WriteBatch(
                inserts=(memory(f"m{i}", (1.0,) + (0.0,) * 7, fact=f"v{i}"),),
                revisions=(revision(f"m{i}", f"r{i}"),),
            )
            for i in range(20)
        ]
        now = datetime.now(UTC)
        results = await asyncio.gather(
            *(busy.apply(BANK, batch) for batch in batches),
            *(busy.get_memories(BANK, [f"m{i}"], now) for i in range(20)),
            return_exceptions=True,
        )
        assert not [r for r in results if isinstance(r, BaseException)], results
        stored = await busy.get_memories(BANK, [f"m{i}" for i in range(20)], now)
        assert sorted(m.memory_id for m in stored) == sorted(f"m{i}" for i in range(20))
    finally:
        await busy.drop_all()
        await busy.aclose()


def _tls_context(tmp_path: Path) -> tuple[ssl.SSLContext, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("TLS test needs the openssl command to make a certificate; install openssl.")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=DNS:localhost,IP:127.0.0.1",
            "-keyout",
            str(key),
            "-out",
            str(cert),
        ],
        check=True,
        capture_output=True,
    )
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context, cert


async def test_rediss_verifies_the_server_certificate(redis_url: str, tmp_path: Path) -> None:
    """rediss:// talks TLS, verifying the server against ssl_ca_certs (and refusing otherwise)."""
    context, cert = _tls_context(tmp_path)
    proxy = _Proxy(redis_url, tls=context)
    await proxy.start()
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    trusted = RedisMemoryStore.from_uri(
        f"rediss://localhost:{proxy.port}/0?ssl_ca_certs={cert}", key_prefix=prefix
    )
    untrusted = RedisMemoryStore.from_uri(f"rediss://localhost:{proxy.port}/0", key_prefix=prefix)
    try:
        await trusted.create_bank(bank_record(BANK))
        assert await trusted.get_bank(BANK) == bank_record(BANK)
        with pytest.raises(StoreUnavailable):
            await untrusted.get_bank(BANK)
    finally:
        await trusted.drop_all()
        await trusted.aclose()
        await untrusted.aclose()
        await proxy.stop()


# The lock


@pytest.fixture
async def locks(redis_url: str) -> AsyncIterator[Callable[..., RedisLockProvider]]:
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    made: list[RedisLockProvider] = []

    def make(**options: Any) -> RedisLockProvider:
        provider = RedisLockProvider.from_uri(redis_url, key_prefix=prefix, **options)
        made.append(provider)
        return provider

    yield make
    for provider in made:
        await provider.aclose()


async def test_lock_excludes_holders_on_other_connections(
    locks: Callable[..., RedisLockProvider], redis_url: str
) -> None:
    """Read-modify-write under the lock from two providers never loses an update."""
    first, second = locks(), locks()
    counter = aredis.Redis.from_url(redis_url)
    name = f"counter-{uuid.uuid4().hex}"

    async def bump(provider: RedisLockProvider) -> None:
        async with provider.lock(name, lease_seconds=5, wait_seconds=10):
            value = int(await counter.get(name) or 0)
            await asyncio.sleep(0.005)
            await counter.set(name, value + 1)

    try:
        await asyncio.gather(*(bump(first if i % 2 else second) for i in range(30)))
        assert int(await counter.get(name)) == 30
    finally:
        await counter.delete(name)
        await counter.aclose()


async def test_lock_wait_runs_out_with_resource_exhausted(
    locks: Callable[..., RedisLockProvider],
) -> None:
    """A lock held elsewhere makes a short wait fail with `ResourceExhausted`."""
    first, second = locks(), locks()
    async with first.lock("busy", lease_seconds=5):
        started = time.monotonic()
        with pytest.raises(ResourceExhausted, match="busy"):
            async with second.lock("busy", wait_seconds=0.2):
                pass
        assert 0.15 < time.monotonic() - started < 2
    async with second.lock("busy", wait_seconds=0.2):
        pass


async def test_renewal_keeps_a_long_holder_and_release_frees_at_once(
    locks: Callable[..., RedisLockProvider],
) -> None:
    """Work longer than the lease keeps the lock while renewed; release frees it immediately."""
    first, second = locks(), locks()
    async with first.lock("long", lease_seconds=0.3):
        await asyncio.sleep(0.8)
        with pytest.raises(ResourceExhausted):
            await second.acquire("long", wait_seconds=0.05)
    started = time.monotonic()
    async with second.lock("long", wait_seconds=1):
        assert time.monotonic() - started < 0.2


async def test_the_store_lends_its_server_for_locks(
    store: RedisMemoryStore, redis_url: str
) -> None:
    """`lock_provider()` locks on the store's server: a second process's provider waits."""
    other = RedisLockProvider.from_uri(redis_url, key_prefix=store.config.key_prefix)
    try:
        async with store.lock_provider().lock("scope-x", wait_seconds=1):
            with pytest.raises(ResourceExhausted):
                await other.acquire("scope-x", wait_seconds=0.05)
        async with other.lock("scope-x", wait_seconds=0.05):
            pass
    finally:
        await other.aclose()


async def test_release_after_the_lease_ran_out_never_frees_the_next_holder(
    locks: Callable[..., RedisLockProvider], redis_url: str
) -> None:
    """A holder that stalled past its lease cannot delete the new holder's lock."""
    stalled, other = locks(renew=False), locks()
    old = await stalled.acquire("stale", lease_seconds=0.2)
    await asyncio.sleep(0.35)
    new = await other.acquire("stale", wait_seconds=0.5)
    assert await old.release() is False
    assert old.lost
    with pytest.raises(FailedPrecondition):
        old.check()
    with pytest.raises(ResourceExhausted):
        await stalled.acquire("stale", wait_seconds=0.05)
    assert await new.release() is True


async def test_an_acquire_cut_after_redis_took_the_lock_frees_it(
    proxy: _Proxy, redis_url: str
) -> None:
    """The task is cancelled (as `asyncio.run` does at its end) after the SET reached Redis but
    before its reply: the lock must not stay held for the whole lease with nobody to free it."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    cut = RedisLockProvider.from_uri(
        f"redis://127.0.0.1:{proxy.port}/0", key_prefix=prefix, socket_timeout=5
    )
    other = RedisLockProvider.from_uri(redis_url, key_prefix=prefix)
    raw = aredis.Redis.from_url(redis_url)
    try:
        async with cut.lock("warm-up", wait_seconds=1):
            pass  # the connection exists: the next SET goes out at once
        proxy.reply_delay = 0.3
        taking = asyncio.create_task(cut.acquire("cut", lease_seconds=60))
        await asyncio.sleep(0.1)
        assert await raw.exists(f"{prefix}:lock:cut"), "the SET reached Redis by now"
        taking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taking
        async with other.lock("cut", wait_seconds=1):
            pass
    finally:
        proxy.reply_delay = 0.0
        await cut.aclose()
        await other.aclose()
        await raw.aclose()


_HOLDER = """
import asyncio, sys
from adk_memory_redis import RedisLockProvider
async def main():
    locks = RedisLockProvider.from_uri(sys.argv[1], key_prefix=sys.argv[2])
    await locks.acquire("crash", lease_seconds=0.5)  # held, never released
    print("held", flush=True)
    await asyncio.sleep(60)
asyncio.run(main())
"""


async def test_lock_of_a_killed_process_frees_itself_after_the_lease(redis_url: str) -> None:
    """Another process holds the lock, dies without releasing; the lease then frees it."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, redis_url, prefix], stdout=subprocess.PIPE, text=True
    )
    locks = RedisLockProvider.from_uri(redis_url, key_prefix=prefix)
    try:
        assert holder.stdout is not None
        assert await asyncio.to_thread(holder.stdout.readline) == "held\n"
        with pytest.raises(ResourceExhausted):
            await locks.acquire("crash", wait_seconds=0.05)
        holder.kill()
        holder.wait()
        started = time.monotonic()
        async with locks.lock("crash", wait_seconds=3):
            assert time.monotonic() - started < 1.0
    finally:
        holder.kill()
        holder.wait()
        await locks.aclose()


async def test_a_holder_whose_lease_lapsed_cannot_commit(
    store: RedisMemoryStore, redis_url: str
) -> None:
    """The lease runs out (no renewal) and another process takes the lock: the first holder's
    write is `Aborted`, checked inside its transaction, and the new holder's write goes through."""
    locks = store.lock_provider()
    other = RedisLockProvider.from_uri(redis_url, key_prefix=store.config.key_prefix)
    locks.renew = False
    try:
        async with locks.lock("scope-f", lease_seconds=0.2) as stale:
            await asyncio.sleep(0.4)  # a long model call: the lease lapses meanwhile
            async with other.lock("scope-f", wait_seconds=1) as current:
                with pytest.raises(Aborted, match="no longer held"):
                    late = memory("late", _unit_vector(random.Random(0), 8))
                    await store.apply(BANK, WriteBatch(inserts=(late,), fences=(stale,)))
                fresh = memory("fresh", _unit_vector(random.Random(1), 8))
                await store.apply(BANK, WriteBatch(inserts=(fresh,), fences=(current,)))
        found = await store.get_memories(BANK, ["late", "fresh"], T0)
        assert [record.memory_id for record in found] == ["fresh"]
    finally:
        locks.renew = True
        await other.aclose()


async def test_a_lock_taken_over_between_check_and_commit_discards_the_transaction(
    store: RedisMemoryStore, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lock key is WATCHed: a takeover after the in-transaction check, before EXEC, makes
    Redis discard the transaction, and the re-check refuses the write."""
    import redis as sync_redis

    original = BatchWriter._check
    takeover = sync_redis.Redis.from_url(redis_url)
    taken: list[str] = []

    def check_then_take_over(*args: Any) -> Any:
        result = original(*args)
        if not taken:
            key = args[3][0].key
            takeover.set(key, "someone-else")
            taken.append(key)
        return result

    monkeypatch.setattr(BatchWriter, "_check", staticmethod(check_then_take_over))
    try:
        async with store.lock_provider().lock("scope-g", lease_seconds=30) as lease:
            with pytest.raises(Aborted, match="no longer held"):
                vector = _unit_vector(random.Random(0), 8)
                batch = WriteBatch(inserts=(memory("m", vector),), fences=(lease,))
                await store.apply(BANK, batch)
        assert taken
        assert await store.get_memories(BANK, ["m"], T0) == []
    finally:
        takeover.close()
