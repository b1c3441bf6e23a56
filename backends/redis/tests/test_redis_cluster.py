"""The Redis store on a Redis Cluster (`redis+cluster://`): conformance, layout, failures.

The session's cluster has three primaries (one with a replica) started from the pip wheels, or is
`REDIS_CLUSTER_URL`.
The Redis-specific tests that apply to a cluster run on it from `test_redis_cluster_specific.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest
import redis
import redis.cluster
from adk_memory_redis import RedisMemoryStore
from adk_memory_redis._config import cluster_nodes, split_uri
from redis.asyncio.cluster import RedisCluster

from adk_memory import AsyncClient
from adk_memory._registry import store_class_for
from adk_memory.errors import Aborted, FailedPrecondition, InvalidArgument, StoreUnavailable
from adk_memory.scope import scope_key
from adk_memory.store import DocumentRecord, NearestQuery, OperationRecord, ScanQuery, WriteBatch
from adk_memory.testing._redis_server import ValkeyCluster
from adk_memory.testing.conformance import (
    MemoryStoreConformance,
    bank_record,
    memory,
    revision,
    unit,
)

T = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
SCOPE = {"user_id": "u1"}
KEY = scope_key(SCOPE)


class TestRedisClusterConformance(MemoryStoreConformance):
    @pytest.fixture(params=["FLAT", "HNSW"])
    async def store(
        self, request: pytest.FixtureRequest, redis_cluster_url: str
    ) -> AsyncIterator[RedisMemoryStore]:
        prefix = f"cc-{uuid.uuid4().hex[:8]}"
        store = RedisMemoryStore.from_uri(
            redis_cluster_url, key_prefix=prefix, index_algorithm=request.param
        )
        try:
            yield store
        finally:
            await store.drop_all()
            await store.aclose()


# Topology


@pytest.fixture
def topology(redis_cluster_url: str) -> Iterator[redis.cluster.RedisCluster]:
    """A plain (sync) cluster client, to ask who owns a slot and to inspect nodes directly."""
    parts = urlsplit(redis_cluster_url)
    client = redis.cluster.RedisCluster(
        startup_nodes=[
            redis.cluster.ClusterNode(host, port) for host, port in cluster_nodes(redis_cluster_url)
        ],
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        ssl=parts.scheme == "rediss+cluster",
    )
    try:
        yield client
    finally:
        client.close()


def _banks_per_primary(
    topology: redis.cluster.RedisCluster, prefix: str, per_primary: int
) -> dict[str, list[str]]:
    """Bank ids whose hash tag `{prefix:id}` lands on each primary, `per_primary` for each."""
    found: dict[str, list[str]] = {node.name: [] for node in topology.get_primaries()}
    index = 0
    while any(len(ids) < per_primary for ids in found.values()):
        bank_id = f"bank-{index}"
        owner = topology.get_node_from_key(f"{{{prefix}:{bank_id}}}:bank").name
        if len(found[owner]) < per_primary:
            found[owner].append(bank_id)
        index += 1
    return found


def _replicated(topology: redis.cluster.RedisCluster) -> set[str]:
    """The names of the primaries that have a replica."""
    nodes = _node_client(topology, topology.get_primaries()[0].name).cluster("NODES")
    names = {info["node_id"]: name for name, info in nodes.items()}
    return {
        names[info["master_id"]]
        for info in nodes.values()
        if "slave" in info["flags"] and info["master_id"] in names
    }


def _node_client(topology: redis.cluster.RedisCluster, name: str) -> redis.Redis:
    node = topology.get_node(node_name=name)
    assert node is not None and node.redis_connection is not None
    return node.redis_connection


async def test_every_key_and_index_of_a_bank_live_on_its_slot_owner(
    redis_cluster_url: str, topology: redis.cluster.RedisCluster
) -> None:
    """A bank on each primary, with memories, revisions, a document, an operation and a held
    engine lock (`generate:<bank>:…`): every key of the bank hashes to the bank's slot and sits on
    the slot's owner, next to the bank's index; the shared keys (the registry, a lock whose name
    names no bank) each sit alone on their own slot's owner."""
    prefix = f"lay-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore.from_uri(redis_cluster_url, key_prefix=prefix)
    placement = {ids[0]: node for node, ids in _banks_per_primary(topology, prefix, 1).items()}
    try:
        for bank_id in placement:
            await store.create_bank(bank_record(bank_id))
            batch = WriteBatch(
                inserts=(memory("m1", unit(0)), memory("m2", unit(1))),
                revisions=(revision("m1", "r1"),),
                documents=(DocumentRecord("notes", "k", {"v": 1}),),
            )
            await store.apply(bank_id, batch)
            await store.put_operation(OperationRecord(bank_id, "operations/o1", True, {}, T))
        locks = store.lock_provider()
        async with contextlib.AsyncExitStack() as held:
            await held.enter_async_context(locks.lock("shared-name"))
            for bank_id in placement:
                await held.enter_async_context(locks.lock(f"generate:{bank_id}:{KEY}"))
            for bank_id, owner in placement.items():
                node = _node_client(topology, owner)
                keys = [key.decode() for key in node.scan_iter(match=f"{{{prefix}:{bank_id}}}*")]
                assert len(keys) >= 9  # bank, 2 memories, revision, its set, rids, doc, op, lock
                assert f"{{{prefix}:{bank_id}}}:lock:generate:{bank_id}:{KEY}" in keys
                slots = {topology.keyslot(key) for key in keys}
                assert slots == {topology.keyslot(f"{{{prefix}:{bank_id}}}")}
                indexes = [name.decode() for name in node.execute_command("FT._LIST")]
                ours = [name for name in indexes if name.startswith(f"{{{prefix}:")]
                assert ours == [f"{{{prefix}:{bank_id}}}:{store._banks.cached[bank_id].epoch}:idx"]
            for shared in (f"{prefix}:banks", f"{prefix}:lock:shared-name"):
                owner = topology.get_node_from_key(shared).name
                assert _node_client(topology, owner).exists(shared) == 1
        banks = await store.list_banks()
        assert sorted(bank.bank_id for bank in banks) == sorted(placement)
        for bank_id in placement:
            hits = await store.nearest(bank_id, NearestQuery(KEY, unit(0), 5, T))
            assert [hit.record.memory_id for hit in hits] == ["m1", "m2"]
            listed = await store.scan(bank_id, ScanQuery(T, KEY))
            assert sorted(record.memory_id for record in listed) == ["m1", "m2"]
    finally:
        await store.drop_all()
        await store.aclose()
    for node in topology.get_primaries():
        leftovers = list(_node_client(topology, node.name).scan_iter(match=f"*{prefix}*"))
        assert leftovers == []


async def test_an_engine_lock_fences_its_banks_writes_from_inside_the_transaction(
    redis_cluster_url: str, topology: redis.cluster.RedisCluster
) -> None:
    """On a cluster the engine's lock of a bank lives in the bank's slot, so a write fenced by
    it can check it within the bank's transaction: once another holder has the lock, the write
    is Aborted and writes nothing."""
    prefix = f"fe-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore.from_uri(redis_cluster_url, key_prefix=prefix)
    try:
        await store.create_bank(bank_record("b1"))
        lease = await store.lock_provider().acquire("memory-id:b1:m1", lease_seconds=30)
        assert topology.keyslot(lease.key) == topology.keyslot(f"{{{prefix}:b1}}:bank")
        await store.apply("b1", WriteBatch(inserts=(memory("m1", unit(0)),), fences=(lease,)))
        topology.set(lease.key, "another-holder")  # the lease ran out and was taken over
        with pytest.raises(Aborted, match="no longer held"):
            await store.apply("b1", WriteBatch(inserts=(memory("m2", unit(1)),), fences=(lease,)))
        assert await store.get_memories("b1", ["m2"], T) == []
        assert await lease.release() is False
    finally:
        await store.drop_all()
        await store.aclose()


# Connecting


async def test_a_redis_url_at_a_cluster_node_fails_fast_naming_the_cluster_scheme(
    redis_cluster_url: str,
) -> None:
    """`redis://` aimed at one node would see MOVED on most banks; it is refused at once."""
    host, port = cluster_nodes(redis_cluster_url)[0]
    parts = urlsplit(redis_cluster_url)
    auth = parts.netloc.rpartition("@")[0]
    single = f"redis://{auth + '@' if auth else ''}{host}:{port}/0"
    store = RedisMemoryStore.from_uri(single, key_prefix=f"t-{uuid.uuid4().hex[:8]}")
    try:
        with pytest.raises(FailedPrecondition, match=r"redis\+cluster://"):
            await store.list_banks()
    finally:
        await store.aclose()


async def test_a_cluster_client_passed_in_is_used_and_left_open(
    redis_cluster_url: str, topology: redis.cluster.RedisCluster
) -> None:
    """A `RedisCluster` the caller built serves banks on every primary; aclose leaves it open."""
    host, port = cluster_nodes(redis_cluster_url)[0]
    parts = urlsplit(redis_cluster_url)
    client = RedisCluster(
        host=host,
        port=port,
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
    )
    prefix = f"cl-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore.from_uri(redis_cluster_url, client=client, key_prefix=prefix)
    try:
        for ids in _banks_per_primary(topology, prefix, 1).values():
            await store.create_bank(bank_record(ids[0]))
            await store.apply(ids[0], WriteBatch(inserts=(memory("m1", unit(0)),)))
            hits = await store.nearest(ids[0], NearestQuery(KEY, unit(0), 1, T))
            assert [hit.record.memory_id for hit in hits] == ["m1"]
        await store.drop_all()
        await store.aclose()
        assert await client.ping()
    finally:
        await client.aclose()


def test_a_decoding_cluster_client_is_refused() -> None:
    client = RedisCluster(host="127.0.0.1", port=1, decode_responses=True)
    with pytest.raises(InvalidArgument, match="decode_responses=False"):
        RedisMemoryStore(client=client)


def test_cluster_uris_name_nodes_and_refuse_what_a_cluster_lacks() -> None:
    """Node lists, credentials, TLS options and the database number of cluster URIs."""
    url, config = split_uri(
        "rediss+cluster://user:p%40ss@a.example:7000,b.example,[::1]:7002/0"
        "?key_prefix=prod&ssl_ca_certs=/ca.pem",
        {},
    )
    assert cluster_nodes(url) == [("a.example", 7000), ("b.example", 6379), ("::1", 7002)]
    assert config.key_prefix == "prod" and config.ssl_ca_certs == "/ca.pem"
    store = RedisMemoryStore.from_uri("redis+cluster://:secret@a:7000,b:7001")
    assert "secret" not in repr(store) and "a:7000,b:7001" in repr(store)
    with pytest.raises(InvalidArgument, match="only database 0"):
        split_uri("redis+cluster://a:7000/2", {})
    with pytest.raises(InvalidArgument, match="bad node"):
        split_uri("redis+cluster://a:7000,,b:7001", {})
    with pytest.raises(InvalidArgument, match="bad node"):
        split_uri("redis+cluster://a:notaport", {})
    with pytest.raises(InvalidArgument, match=r"rediss\+cluster://"):
        split_uri("redis+cluster://a:7000?ssl_ca_certs=/ca.pem", {})
    with pytest.raises(InvalidArgument, match=r"redis\+cluster://"):
        split_uri("cluster://a:7000", {})


async def test_names_cannot_break_out_of_the_bank_hash_tag() -> None:
    """A bank id or key prefix with a brace (or empty) could move keys of one bank to other slots;
    both are refused before any I/O."""
    store = RedisMemoryStore.from_uri("redis+cluster://127.0.0.1:1")
    for bank_id in ["a}b", "{a}", "a{", "", "}"]:
        with pytest.raises(InvalidArgument):
            await store.get_bank(bank_id)
    for prefix in ["p}", "{p", ""]:
        with pytest.raises(InvalidArgument):
            RedisMemoryStore.from_uri("redis+cluster://127.0.0.1:1", key_prefix=prefix)


def test_the_backend_is_registered_for_the_cluster_schemes() -> None:
    assert store_class_for("redis+cluster://a:7000,b:7001") is RedisMemoryStore
    assert store_class_for("rediss+cluster://a:7000") is RedisMemoryStore


# A primary that dies


async def _write_until_refused(store: RedisMemoryStore, bank_id: str, acked: list[str]) -> None:
    """Writes memory+revision batches until the store refuses one; records those acknowledged."""
    for index in range(100_000):
        memory_id = f"w{index}"
        batch = WriteBatch(
            inserts=(memory(memory_id, unit(index)),), revisions=(revision(memory_id, "r1"),)
        )
        try:
            await store.apply(bank_id, batch)
        except StoreUnavailable:
            return
        acked.append(memory_id)


async def _kill_under_writer(
    cluster: ValkeyCluster, port: int, store: RedisMemoryStore, bank_id: str
) -> list[str]:
    """Kills the node at `port` once 20 writes to the bank were acknowledged; returns those
    acknowledged before the store refused one."""
    acked: list[str] = []
    writer = asyncio.create_task(_write_until_refused(store, bank_id, acked))
    while len(acked) < 20:
        await asyncio.sleep(0.01)
    cluster.kill(port)
    await asyncio.wait_for(writer, timeout=60)
    return acked


async def _stored_and_revised(
    store: RedisMemoryStore, bank_id: str, acked: list[str]
) -> tuple[set[str], set[str]]:
    """Of the writer's memories (the acknowledged ones and the next, which may have landed),
    those stored and those with a revision."""
    tried = [f"w{index}" for index in range(len(acked) + 1)]
    stored = {record.memory_id for record in await store.get_memories(bank_id, tried, T)}
    revised = {
        memory_id
        for memory_id, revisions in (await store.list_revisions_many(bank_id, tried, T)).items()
        if revisions
    }
    return stored, revised


async def test_a_dead_primary_takes_only_its_banks_and_they_come_back_whole(
    redis_cluster: ValkeyCluster | None, topology: redis.cluster.RedisCluster
) -> None:
    """Kill (SIGKILL) the primary of one bank while a writer hammers it: that bank answers
    StoreUnavailable, a bank on another primary keeps reading and writing; once the primary is
    back (from its AOF) every acknowledged write is there and no write is half there."""
    if redis_cluster is None:
        pytest.skip("kills a node: needs the test's own cluster, not REDIS_CLUSTER_URL")
    prefix = f"fo-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore.from_uri(
        redis_cluster.url, key_prefix=prefix, socket_timeout=2, connection_retries=1
    )
    placement = _banks_per_primary(topology, prefix, 1)
    replicated = _replicated(topology)
    victim = next(name for name in placement if name not in replicated)  # no failover here
    doomed = placement[victim][0]
    survivor = next(ids[0] for name, ids in placement.items() if name != victim)
    victim_port = int(victim.rsplit(":", 1)[1])
    try:
        for bank_id in (doomed, survivor):
            await store.create_bank(bank_record(bank_id))
        acked = await _kill_under_writer(redis_cluster, victim_port, store, doomed)
        with pytest.raises(StoreUnavailable):
            await store.get_memories(doomed, ["w0"], T)
        with pytest.raises(StoreUnavailable):
            await store.list_banks()  # it reads every bank's record, the dead one's too
        await store.apply(survivor, WriteBatch(inserts=(memory("alive", unit(0)),)))
        hits = await store.nearest(survivor, NearestQuery(KEY, unit(0), 1, T))
        assert [hit.record.memory_id for hit in hits] == ["alive"]
        # A process that starts now (its first call checks every primary it can reach).
        latecomer = RedisMemoryStore.from_uri(redis_cluster.url, key_prefix=prefix)
        try:
            assert [r.memory_id for r in await latecomer.get_memories(survivor, ["alive"], T)] == [
                "alive"
            ]
            with pytest.raises(StoreUnavailable):
                await latecomer.get_bank(doomed)
        finally:
            await latecomer.aclose()
        redis_cluster.restart(victim_port)
        stored, revised = await _stored_and_revised(store, doomed, acked)
        assert set(acked) <= stored
        assert stored == revised  # a memory and its revision: both or neither
        hits = await store.nearest(doomed, NearestQuery(KEY, unit(0), 1, T))
        assert [hit.record.memory_id for hit in hits] == ["w0"]
    finally:
        redis_cluster.restart(victim_port)
        await store.drop_all()
        await store.aclose()


async def test_a_primary_with_a_replica_fails_over_and_its_bank_comes_back_whole(
    redis_cluster: ValkeyCluster | None, topology: redis.cluster.RedisCluster
) -> None:
    """Kill the primary that has a replica while a writer hammers its bank: the bank is
    StoreUnavailable until the replica takes over, a bank elsewhere keeps working, and after the
    failover the bank answers with no write half there (a memory and its revision, both or
    neither), what had reached the replica included, and takes new writes."""
    if redis_cluster is None:
        pytest.skip("kills a node: needs the test's own cluster, not REDIS_CLUSTER_URL")
    prefix = f"rf-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore.from_uri(
        redis_cluster.url, key_prefix=prefix, socket_timeout=2, connection_retries=1
    )
    placement = _banks_per_primary(topology, prefix, 1)
    victim = next(iter(_replicated(topology)))
    doomed = placement[victim][0]
    survivor = next(ids[0] for name, ids in placement.items() if name != victim)
    victim_port = int(victim.rsplit(":", 1)[1])
    try:
        for bank_id in (doomed, survivor):
            await store.create_bank(bank_record(bank_id))
        first = WriteBatch(
            inserts=(memory("first", unit(0)),), revisions=(revision("first", "r1"),)
        )
        await store.apply(doomed, first)
        victim_client = _node_client(topology, victim)
        assert await asyncio.to_thread(victim_client.execute_command, "WAIT", 1, 5000) == 1
        acked = await _kill_under_writer(redis_cluster, victim_port, store, doomed)
        with pytest.raises(StoreUnavailable):
            await store.get_memories(doomed, ["first"], T)
        await store.apply(survivor, WriteBatch(inserts=(memory("alive", unit(0)),)))
        deadline = asyncio.get_running_loop().time() + 30
        while True:  # the replica takes over after the node timeout (3 s) and an election
            try:
                found = await store.get_memories(doomed, ["first"], T)
                break
            except StoreUnavailable:
                assert asyncio.get_running_loop().time() < deadline, "no failover in 30 s"
                await asyncio.sleep(0.2)
        assert [record.memory_id for record in found] == ["first"]
        stored, revised = await _stored_and_revised(store, doomed, acked)
        assert stored == revised
        await store.apply(doomed, WriteBatch(inserts=(memory("after", unit(5)),)))
        hits = await store.nearest(doomed, NearestQuery(KEY, unit(5), 1, T))
        assert [hit.record.memory_id for hit in hits] == ["after"]
    finally:
        redis_cluster.restart(victim_port)  # it comes back as the new primary's replica
        await store.drop_all()
        await store.aclose()


# Resharding: a bank's slot moves to another primary


def _move_slot(
    topology: redis.cluster.RedisCluster,
    slot: int,
    source: str,
    target: str,
    *,
    first_keys: list[str] | None = None,
) -> Callable[[], None]:
    """Starts moving one slot from `source` to `target` as `valkey-cli --cluster reshard` does
    (IMPORTING/MIGRATING, then MIGRATE in batches) and returns the step that finishes it (the
    rest of the keys, then the new owner announced to every node). With `first_keys`, only those
    are migrated now, leaving the slot half moved; without, every key is."""
    source_client, target_client = _node_client(topology, source), _node_client(topology, target)
    source_id, target_id = (
        _text(c.execute_command("CLUSTER MYID")) for c in (source_client, target_client)
    )
    target_client.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", source_id)
    source_client.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", target_id)
    host, port = target.rsplit(":", 1)

    def migrate(keys: list[Any]) -> None:
        source_client.execute_command("MIGRATE", host, int(port), "", 0, 5000, "KEYS", *keys)

    def finish() -> None:
        while keys := source_client.execute_command("CLUSTER GETKEYSINSLOT", slot, 100):
            migrate(keys)
        for node in topology.get_primaries():
            _node_client(topology, node.name).execute_command(
                "CLUSTER SETSLOT", slot, "NODE", target_id
            )

    if first_keys is None:
        finish()
    else:
        migrate(first_keys)
    return finish


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def test_a_bank_whose_slot_moves_to_another_primary_answers_as_before(
    redis_cluster: ValkeyCluster | None, topology: redis.cluster.RedisCluster
) -> None:
    """Reshard a bank's slot to another primary under a running store: its next search meets
    MOVED, finds no index on the new owner, builds it from the moved documents (waiting until
    it has read them all) and answers exactly as before; writes and deletes go on."""
    if redis_cluster is None:
        pytest.skip("reshards slots: needs the test's own cluster, not REDIS_CLUSTER_URL")
    prefix = f"rs-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore.from_uri(redis_cluster.url, key_prefix=prefix)
    (source, [bank_id]), (target, _ids), *_rest = _banks_per_primary(topology, prefix, 1).items()
    scopes = [SCOPE, {"user_id": "u2"}]
    try:
        await store.create_bank(bank_record(bank_id))
        records = tuple(
            memory(f"m{i:03d}", unit(i % 8), scope=scopes[i % 2], fact=f"fact {i}")
            for i in range(300)
        )
        await store.apply(bank_id, WriteBatch(inserts=records, revisions=(revision("m000", "r1"),)))

        async def answers() -> list[Any]:
            hits = await store.nearest(bank_id, NearestQuery(KEY, unit(3), 20, T))
            listed = await store.scan(bank_id, ScanQuery(T, scope_key({"user_id": "u2"})))
            revisions = await store.list_revisions(bank_id, "m000", T)
            return [
                [(hit.record.memory_id, round(hit.distance, 6)) for hit in hits],
                [record.memory_id for record in listed],
                [rev.revision_id for rev in revisions],
            ]

        before = await answers()
        assert len(before[0]) == 20 and len(before[1]) == 150
        _move_slot(topology, topology.keyslot(f"{{{prefix}:{bank_id}}}"), source, target)
        # The first call after the move is a write: its transaction meets MOVED on the old owner.
        late = memory("late", unit(3), scope={"user_id": "u3"})
        await store.apply(bank_id, WriteBatch(inserts=(late,)))
        assert await answers() == before
        assert [r.memory_id for r in await store.get_memories(bank_id, ["late"], T)] == ["late"]
        fresh = RedisMemoryStore.from_uri(redis_cluster.url, key_prefix=prefix)
        try:
            await fresh.apply(bank_id, WriteBatch(deletes=("m003",)))
            u2 = scope_key({"user_id": "u2"})
            hits = await fresh.nearest(bank_id, NearestQuery(u2, unit(3), 1, T))
            assert [hit.record.memory_id for hit in hits] == ["m011"]
        finally:
            await fresh.aclose()
        await store.delete_bank(bank_id)
        assert await store.get_bank(bank_id) is None
    finally:
        await store.drop_all()
        await store.aclose()
    owner_keys = _node_client(topology, target).scan_iter(match=f"*{prefix}*")
    assert list(owner_keys) == []
    for name, expected in ((target, 0), (source, 1)):  # the old owner keeps an empty definition
        listed = _node_client(topology, name).execute_command("FT._LIST")
        assert sum(_text(index).startswith(f"{{{prefix}:") for index in listed) == expected


async def test_a_write_during_a_half_moved_slot_is_refused_whole_then_lands(
    redis_cluster: ValkeyCluster | None, topology: redis.cluster.RedisCluster
) -> None:
    """While a bank's slot is half moved (its bank key already on the new owner, its memories
    still on the old one), a write is refused with a typed error and leaves nothing behind; once
    the move is finished, the same write lands and the bank answers whole."""
    if redis_cluster is None:
        pytest.skip("reshards slots: needs the test's own cluster, not REDIS_CLUSTER_URL")
    prefix = f"hm-{uuid.uuid4().hex[:8]}"
    store = RedisMemoryStore.from_uri(redis_cluster.url, key_prefix=prefix, write_retries=3)
    (source, [bank_id]), (target, _ids), *_rest = _banks_per_primary(topology, prefix, 1).items()
    bank_key = f"{{{prefix}:{bank_id}}}:bank"
    try:
        await store.create_bank(bank_record(bank_id))
        await store.apply(bank_id, WriteBatch(inserts=(memory("m1", unit(0)),)))
        finish = _move_slot(
            topology, topology.keyslot(bank_key), source, target, first_keys=[bank_key]
        )
        batch = WriteBatch(inserts=(memory("m2", unit(1)),), revisions=(revision("m2", "r1"),))
        with pytest.raises(FailedPrecondition, match="slot"):
            await store.apply(bank_id, batch)
        finish()
        assert await store.get_memories(bank_id, ["m2"], T) == []
        assert await store.list_revisions(bank_id, "m2", T) == []
        await store.apply(bank_id, batch)
        hits = await store.nearest(bank_id, NearestQuery(KEY, unit(1), 5, T))
        assert [hit.record.memory_id for hit in hits] == ["m2", "m1"]
    finally:
        await store.drop_all()
        await store.aclose()


# Acceptance: five banks spread over the primaries give exactly the single-node results


FACT_WORDS = ["tea", "coffee", "Berlin", "Lisbon", "dog", "cat", "blue", "red", "peanut", "jazz"]
SCOPES = [{"user_id": "u1"}, {"user_id": "u2"}, {"user_id": "u1", "app": "x"}]


def _normalised(value: Any) -> Any:
    """A result with its timestamps dropped (the two runs write at different instants)."""
    dumped = value.model_dump(mode="json") if hasattr(value, "model_dump") else value
    if isinstance(dumped, dict):
        return {
            key: _normalised(item)
            for key, item in dumped.items()
            if key not in ("create_time", "update_time", "expire_time")
        }
    if isinstance(dumped, list):
        return [_normalised(item) for item in dumped]
    if isinstance(dumped, float):
        return round(dumped, 5)
    return dumped


async def _scenario(client: AsyncClient, bank_ids: list[str]) -> list[Any]:
    """Every public bank and memory call of the acceptance scenario; their results in order."""
    out: list[Any] = []
    banks = client.memory_banks
    memories = banks.memories
    names = [(await banks.create(memory_bank_id=bank_id)).name for bank_id in bank_ids]
    for bank in names:
        for index in range(50):
            words = f"{FACT_WORDS[index % 10]} and {FACT_WORDS[(index * 3 + 1) % 10]}"
            await memories.create(
                name=bank,
                fact=f"Fact {index}: I like {words}.",
                scope=SCOPES[index % 3],
                config={"memory_id": f"m{index:02d}"},
            )
    search = {"search_query": "I like tea and dogs", "top_k": 7}
    for bank in names:
        for scope in SCOPES:
            for params in (
                {},
                {"similarity_search_params": search},
                {"similarity_search_params": search, "config": {"filter": 'fact=~"Berlin|jazz"'}},
            ):
                pager = await memories.retrieve(name=bank, scope=scope, **params)
                out.append([hit async for hit in pager])
        for config in ({}, {"filter": 'scope.user_id="u2"'}, {"filter": 'fact:"coffee"'}):
            out.append([m async for m in await memories.list(name=bank, config=config or None)])
        await memories.delete(name=f"{bank}/memories/m07")
        dry = await memories.purge(name=bank, filter='fact=~"Lisbon"', force=False)
        forced = await memories.purge(name=bank, filter='fact=~"Lisbon"', force=True)
        out.append([dry.response.purge_count, forced.response.purge_count])
        out.append(sorted([m.name async for m in await memories.list(name=bank)]))
    out.append(sorted([bank.name async for bank in await banks.list()]))
    for bank in names[:2]:
        await banks.delete(name=bank, force=True)
    out.append(sorted([bank.name async for bank in await banks.list()]))
    return out


async def test_five_banks_spread_over_the_primaries_give_the_single_node_results(
    redis_url: str, redis_cluster_url: str, topology: redis.cluster.RedisCluster
) -> None:
    """Create, 50 memories each in 3 scopes, retrieve (all, top-k, filtered), list (all, scope
    and fact filters), delete, purge (dry run and forced), list banks and delete banks: the same
    answers through `redis+cluster://` as on one server, with the banks on every primary."""
    prefix = f"acc-{uuid.uuid4().hex[:8]}"
    per_primary = _banks_per_primary(topology, prefix, 2)
    bank_ids = sorted(bank_id for ids in per_primary.values() for bank_id in ids)[:5]
    owners = {topology.get_node_from_key(f"{{{prefix}:{b}}}:bank").name for b in bank_ids}
    assert len(owners) == len(topology.get_primaries())
    answers = []
    for url in (redis_url, redis_cluster_url):
        uri = f"{url}?key_prefix={prefix}&index_algorithm=FLAT"
        try:
            async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
                answers.append(_normalised(await _scenario(client, bank_ids)))
        finally:
            cleaner = RedisMemoryStore.from_uri(uri)
            await cleaner.drop_all()
            await cleaner.aclose()
    single, cluster = answers
    assert len(single) == 5 * (9 + 3 + 2) + 2
    assert sum(len(hits) for hits in single[:9]) > 0
    assert cluster == single


# The due index (store-wide, in another slot than the banks)


async def test_a_cut_after_the_document_write_leaves_its_due_entry_early_not_missing(
    redis_cluster_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The exact due write after a document (its own slot) is cut, as by a crash: the entry
    lowered before the document is there, for a `put_document` and for a batch alike."""
    store = RedisMemoryStore.from_uri(redis_cluster_url, key_prefix=f"due-{uuid.uuid4().hex[:8]}")
    exact_set = store.set_due

    async def cut_exact_writes(
        bank_id: str, kind: str, dues: Any, *, only_earlier: bool = False
    ) -> None:
        if not only_earlier:
            raise StoreUnavailable("cut after the document was written")
        await exact_set(bank_id, kind, dues, only_earlier=True)

    try:
        await store.create_bank(bank_record())
        await store.put_document("1234", "stream", "old", {"n": 0}, due=T + timedelta(hours=1))
        monkeypatch.setattr(store, "set_due", cut_exact_writes)
        with pytest.raises(StoreUnavailable):
            await store.put_document("1234", "stream", "old", {"n": 1}, due=T)
        with pytest.raises(StoreUnavailable):
            await store.apply(
                "1234", WriteBatch(documents=(DocumentRecord("stream", "new", {}, due=T),))
            )
        monkeypatch.undo()
        assert await store.get_document("1234", "stream", "new") == {}
        assert await store.get_document("1234", "stream", "old") == {"n": 1}
        assert [d.key for d in await store.due_documents("stream", T)] == ["new", "old"]
    finally:
        await store.drop_all()
        await store.aclose()


async def test_one_tick_flushes_the_due_streams_of_banks_on_every_primary_at_once(
    redis_cluster_url: str, topology: redis.cluster.RedisCluster
) -> None:
    """Six sessions' streams, in banks on each primary, are due together. One scheduler tick
    flushes them at once (every extraction waits until all six are in flight), and each event is
    generated from once: the concurrent flushes' locks, batches and due entries cross slots."""
    from adk_memory import types
    from adk_memory.scheduler import IngestScheduler
    from adk_memory.testing.models import ExtractionsTogether, ScriptedMemoryModel

    prefix = f"tick-{uuid.uuid4().hex[:8]}"
    bank_ids = [b for ids in _banks_per_primary(topology, prefix, 2).values() for b in ids]
    tokens = [f"tok-{bank_id}" for bank_id in bank_ids]
    together = ExtractionsTogether(len(tokens))
    model = ScriptedMemoryModel.one_fact(on_call=together)
    uri = f"{redis_cluster_url}?key_prefix={prefix}"
    try:
        async with AsyncClient(
            uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
        ) as client:
            for bank_id, token in zip(bank_ids, tokens, strict=True):
                await client.memory_banks.create(memory_bank_id=bank_id)
                events = [{"content": {"role": "user", "parts": [{"text": token}]}}]
                await client.engine.ingest.ingest(
                    bank_id,
                    scope=SCOPE,
                    stream_id="s",
                    source={"events": events},
                    trigger_config=None,
                    config=types.IngestEventsConfig(),
                )
            await IngestScheduler(client.engine).run_once()
            extracted = [
                token
                for request in model.requests
                if model.kind_of(request) == "extraction"
                for token in tokens
                if token in model.prompt_text(request)
            ]
            assert (together.most, sorted(extracted)) == (len(tokens), sorted(tokens))
            assert await client.engine.ingest.due_streams() == []
            for bank_id in bank_ids:
                found = await client.memory_banks.memories.retrieve(
                    name=client.engine.names.bank(bank_id), scope=SCOPE
                )
                assert [hit.memory.fact async for hit in found] == ["A fact."]
    finally:
        cleaner = RedisMemoryStore.from_uri(uri)
        await cleaner.drop_all()
        await cleaner.aclose()
