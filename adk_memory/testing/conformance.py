"""The conformance suite every `MemoryStore` runs against itself (like LangChain's standard tests).

Subclass `MemoryStoreConformance` in your backend's tests and override the `store` fixture so it
yields an EMPTY store and deletes its data afterwards. Edit no test: a subclass that overrides a
test without marking it `pytest.mark.xfail(reason=...)` fails at collection.

```python
class TestMyConformance(MemoryStoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[MyMemoryStore]:
        store = MyMemoryStore.from_uri("my://…", key_prefix=f"conf-{uuid.uuid4().hex[:8]}")
        try:
            yield store
        finally:
            await store.drop_all()
            await store.aclose()
```

Each test uses only the protocol in `adk_memory.store`. Retrieval results are compared with the
reference store on random data: same ids, same order, distances within 1e-4.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adk_memory.errors import Aborted, AlreadyExists, InvalidArgument, NotFound
from adk_memory.filters import And, Condition, FilterExpr, Not, Op, Or, family_of
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.scope import scope_key
from adk_memory.store import (
    EXPIRY_KEY,
    EXPIRY_KIND,
    BankRecord,
    DocumentRecord,
    Expectation,
    MemoryRecord,
    MemoryStore,
    NearestQuery,
    OperationRecord,
    RevisionRecord,
    ScanCursor,
    ScanQuery,
    SortKey,
    TopicRef,
    WriteBatch,
    cursor_of,
)

__all__ = ["DIM", "T0", "MemoryStoreConformance", "bank_record", "memory", "revision", "unit"]

DIM = 8
T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
BANK = "1234"
OTHER_BANK = "conformance-other"
SCOPE = {"user_id": "u1"}
KEY = scope_key(SCOPE)

CRAFTED_SCOPES: list[dict[str, str]] = [
    {"user_id": "u1", "app": "x"},
    {"user_id": "U1"},
    {"user_id": 'u1" OR 1=1 --'},
    {"user_id": "u1}|{@scope_key:{"},
    {"user_id": "u1\\"},
    {"user_id": "u1 | @fact:*"},
    {"user_id": "ü1🙂"},
    {"user_id": "u1" + "x" * 5000},
    {"user id": "u1"},
    {"user_id": "$u1"},
]


def unit(index: int, dim: int = DIM) -> tuple[float, ...]:
    """The unit vector along axis `index`."""
    return tuple(1.0 if i == index % dim else 0.0 for i in range(dim))


def bank_record(bank_id: str = BANK, *, dim: int = DIM) -> BankRecord:
    """A bank with a test embedding model of `dim` dimensions."""
    return BankRecord(
        bank_id=bank_id,
        config={"similarity_search_config": {"embedding_model": f"hash-{dim}"}},
        embedding_model=f"hash-{dim}",
        embedding_dimension=dim,
        create_time=T0,
        update_time=T0,
        display_name="conformance bank",
    )


def memory(memory_id: str, vector: tuple[float, ...], **fields: Any) -> MemoryRecord:
    """A memory in `SCOPE` created at T0, with any field overridden."""
    scope = fields.pop("scope", SCOPE)
    values: dict[str, Any] = {
        "memory_id": memory_id,
        "scope_key": scope_key(scope),
        "scope": scope,
        "fact": f"fact of {memory_id}",
        "embedding": vector,
        "create_time": T0,
        "update_time": T0,
    }
    values.update(fields)
    return MemoryRecord(**values)


def revision(memory_id: str, revision_id: str, **fields: Any) -> RevisionRecord:
    """A revision of a memory in `SCOPE`."""
    values: dict[str, Any] = {
        "memory_id": memory_id,
        "revision_id": revision_id,
        "scope_key": KEY,
        "scope": SCOPE,
        "fact": f"fact of {memory_id} at {revision_id}",
        "create_time": T0,
    }
    values.update(fields)
    return RevisionRecord(**values)


def _mixed_revisions(now: datetime) -> tuple[RevisionRecord, ...]:
    """Revisions of several memories, some of them expired at `now`, written out of order."""
    second = T0 + timedelta(seconds=1)
    return (
        revision("many", "r2b", create_time=second),
        revision("many", "r1", labels={"src": "chat"}),
        revision("many", "r3", create_time=T0 + timedelta(seconds=2), metadata={"k": 1.5}),
        revision("many", "r2a", create_time=second),
        revision("deleted", "r1"),
        revision("deleted", "r2", create_time=second, deleted=True),
        revision("expiring", "r1", expire_time=now + timedelta(seconds=1)),
        revision("expiring", "r2", create_time=second, expire_time=now),
        revision("expired", "r1", expire_time=now - timedelta(seconds=1)),
    )


def _random_unit(rng: random.Random, dim: int = DIM) -> tuple[float, ...]:
    values = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = sum(v * v for v in values) ** 0.5
    return tuple(v / norm for v in values)


class MemoryStoreConformance:
    """Behaviour every `MemoryStore` must show. Subclass it and provide `store`; edit no test."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name, value in vars(cls).items():
            if not name.startswith("test_") or not hasattr(MemoryStoreConformance, name):
                continue
            marks = getattr(value, "pytestmark", [])
            if not any(mark.name == "xfail" and mark.kwargs.get("reason") for mark in marks):
                raise TypeError(
                    f"{cls.__name__}.{name} overrides a conformance test; fix the backend or mark "
                    "the override pytest.mark.xfail(reason=...)."
                )

    @pytest.fixture
    async def store(self) -> AsyncIterator[MemoryStore]:
        """An EMPTY store whose data is deleted in `finally`; every backend overrides this."""
        pytest.fail("Override the `store` fixture; see the MemoryStoreConformance docstring.")
        yield  # pragma: no cover

    @pytest.fixture
    async def bank(self, store: MemoryStore) -> str:
        """The id of a freshly created bank."""
        await store.create_bank(bank_record())
        return BANK

    # Banks

    async def test_bank_round_trips(self, store: MemoryStore) -> None:
        """A created bank reads back equal, appears in the list, and is gone after delete."""
        record = bank_record()
        await store.create_bank(record)
        assert await store.get_bank(BANK) == record
        assert [bank.bank_id for bank in await store.list_banks()] == [BANK]
        await store.delete_bank(BANK)
        assert await store.get_bank(BANK) is None
        assert await store.list_banks() == []

    async def test_bank_id_taken_is_already_exists(self, store: MemoryStore) -> None:
        """Creating a bank twice raises `AlreadyExists` and keeps the first."""
        await store.create_bank(bank_record())
        with pytest.raises(AlreadyExists):
            await store.create_bank(bank_record())
        assert await store.get_bank(BANK) == bank_record()

    async def test_update_bank_replaces_the_record(self, store: MemoryStore, bank: str) -> None:
        """`update_bank` replaces config and names."""
        changed = BankRecord(
            bank_id=bank,
            config={"ttl_config": {"default_ttl": "60s"}},
            embedding_model=f"hash-{DIM}",
            embedding_dimension=DIM,
            create_time=T0,
            update_time=T0 + timedelta(seconds=5),
            display_name="renamed",
            description="new",
        )
        await store.update_bank(changed)
        assert await store.get_bank(bank) == changed

    async def test_delete_bank_removes_memories_revisions_and_operations(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A re-created bank of the same id starts empty."""
        await store.apply(
            bank, WriteBatch(inserts=(memory("m1", unit(0)),), revisions=(revision("m1", "r1"),))
        )
        await store.put_operation(OperationRecord(bank, "operations/o1", True, {"done": True}, T0))
        await store.delete_bank(bank)
        await store.create_bank(bank_record())
        assert await store.get_memories(bank, ["m1"], T0) == []
        assert await store.list_revisions(bank, "m1", T0) == []
        assert await store.list_revision_memory_ids(bank, T0) == []
        assert await store.get_operation(bank, "operations/o1") is None

    async def test_banks_are_isolated(self, store: MemoryStore, bank: str) -> None:
        """A memory of one bank is invisible in another bank."""
        await store.create_bank(bank_record(OTHER_BANK))
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))
        assert await store.get_memories(OTHER_BANK, ["m1"], T0) == []
        assert await store.nearest(OTHER_BANK, NearestQuery(KEY, unit(0), 3, T0)) == []
        assert await store.scan(OTHER_BANK, ScanQuery(T0)) == []

    # Writes

    async def test_memory_round_trips_every_field(self, store: MemoryStore, bank: str) -> None:
        """Every field, including unicode, topics and typed metadata, reads back equal."""
        record = memory(
            "m-1",
            unit(1),
            fact='Ich trinke gern Kaffee ☕ "mit Milch" | {braces} \\ 🙂',
            expire_time=T0 + timedelta(days=3),
            topics=(TopicRef(managed="USER_PREFERENCES"), TopicRef(custom="coffee_talk")),
            metadata={
                "s": "text value",
                "n": 123.456,
                "b": True,
                "t": T0 - timedelta(days=1),
                "weird key | {x}": "ok",
            },
            display_name="display",
            description="desc",
        )
        await store.apply(bank, WriteBatch(inserts=(record,)))
        [found] = await store.get_memories(bank, ["m-1"], T0)
        assert found == record
        assert isinstance(found.metadata["b"], bool)
        assert isinstance(found.metadata["n"], float)

    async def test_profile_fields_round_trip(self, store: MemoryStore, bank: str) -> None:
        """A structured profile's type, schema id and JSON data read back equal, with revisions."""
        data = {"name": "Ada", "age": 36, "tags": ["a", "ü"], "nested": {"ok": True, "none": None}}
        record = memory(
            "profile-1",
            unit(2),
            memory_type="STRUCTURED_PROFILE",
            schema_id="user-profile",
            structured_data=data,
        )
        rev = revision("profile-1", "r1", structured_data=data)
        await store.apply(bank, WriteBatch(inserts=(record,), revisions=(rev,)))
        [found] = await store.get_memories(bank, ["profile-1"], T0)
        assert found == record
        assert await store.list_revisions(bank, "profile-1", T0) == [rev]
        [scanned] = await store.scan(bank, ScanQuery(T0))
        assert (scanned.memory_type, scanned.schema_id, scanned.structured_data) == (
            "STRUCTURED_PROFILE",
            "user-profile",
            data,
        )

    async def test_insert_of_a_live_id_fails_the_whole_batch(
        self, store: MemoryStore, bank: str
    ) -> None:
        """`AlreadyExists` for one insert leaves every other part of the batch unwritten."""
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))
        batch = WriteBatch(
            inserts=(memory("m2", unit(1)), memory("m1", unit(2), fact="replacement")),
            revisions=(revision("m2", "r1"),),
        )
        with pytest.raises(AlreadyExists):
            await store.apply(bank, batch)
        assert [r.fact for r in await store.get_memories(bank, ["m1", "m2"], T0)] == ["fact of m1"]
        assert await store.list_revisions(bank, "m2", T0) == []

    async def test_a_vector_of_another_dimension_is_refused(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A batch whose vector length is not the bank's dimension fails whole, writing nothing."""
        wrong = memory("wrong", tuple(1.0 for _ in range(DIM + 1)))
        with pytest.raises(InvalidArgument):
            await store.apply(bank, WriteBatch(inserts=(memory("ok", unit(0)), wrong)))
        assert await store.get_memories(bank, ["ok", "wrong"], T0) == []

    async def test_insert_over_an_expired_memory_succeeds(
        self, store: MemoryStore, bank: str
    ) -> None:
        """An expired memory no longer holds its id."""
        await store.apply(
            bank,
            WriteBatch(inserts=(memory("m1", unit(0), expire_time=T0 + timedelta(seconds=1)),)),
        )
        later = T0 + timedelta(seconds=2)
        await store.apply(
            bank,
            WriteBatch(
                inserts=(memory("m1", unit(1), fact="new", create_time=later, update_time=later),)
            ),
        )
        [found] = await store.get_memories(bank, ["m1"], later)
        assert found.fact == "new"

    async def test_upsert_replaces_and_delete_removes(self, store: MemoryStore, bank: str) -> None:
        """Upsert replaces the whole record; delete removes the memory but keeps revisions."""
        await store.apply(
            bank, WriteBatch(inserts=(memory("m1", unit(0)),), revisions=(revision("m1", "r1"),))
        )
        updated = memory("m1", unit(3), fact="changed", update_time=T0 + timedelta(seconds=1))
        await store.apply(
            bank,
            WriteBatch(
                upserts=(updated,),
                revisions=(revision("m1", "r2", create_time=T0 + timedelta(seconds=1)),),
            ),
        )
        assert await store.get_memories(bank, ["m1"], T0) == [updated]
        await store.apply(bank, WriteBatch(deletes=("m1",)))
        assert await store.get_memories(bank, ["m1"], T0) == []
        assert [r.revision_id for r in await store.list_revisions(bank, "m1", T0)] == ["r2", "r1"]

    async def test_get_memories_keeps_the_order_asked(self, store: MemoryStore, bank: str) -> None:
        """Found memories come back in the order of the ids asked; missing ones are skipped."""
        await store.apply(
            bank, WriteBatch(inserts=tuple(memory(f"m{i}", unit(i)) for i in range(4)))
        )
        found = await store.get_memories(bank, ["m3", "missing", "m0", "m2"], T0)
        assert [r.memory_id for r in found] == ["m3", "m0", "m2"]

    # Expiry

    async def test_expired_memory_is_never_returned(self, store: MemoryStore, bank: str) -> None:
        """From the instant it expires, no read returns a memory."""
        expires = T0 + timedelta(seconds=10)
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0), expire_time=expires),)))
        before = expires - timedelta(microseconds=1)
        assert len(await store.get_memories(bank, ["m1"], before)) == 1
        assert len(await store.nearest(bank, NearestQuery(KEY, unit(0), 3, before))) == 1
        for now in (expires, expires + timedelta(days=1)):
            assert await store.get_memories(bank, ["m1"], now) == []
            assert await store.nearest(bank, NearestQuery(KEY, unit(0), 3, now)) == []
            assert await store.scan(bank, ScanQuery(now)) == []

    async def test_sweep_reclaims_expired_memories_and_revisions(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Sweeping removes what has expired and nothing else."""
        soon = T0 + timedelta(seconds=5)
        await store.apply(
            bank,
            WriteBatch(
                inserts=(memory("gone", unit(0), expire_time=soon), memory("kept", unit(1))),
                revisions=(revision("gone", "r1", expire_time=soon), revision("kept", "r1")),
            ),
        )
        await store.sweep_expired(bank, soon + timedelta(seconds=1))
        assert [r.memory_id for r in await store.scan(bank, ScanQuery(T0))] == ["kept"]
        assert await store.list_revisions(bank, "gone", T0) == []
        assert len(await store.list_revisions(bank, "kept", T0)) == 1

    async def test_a_write_of_an_expiring_row_lowers_its_banks_expiry_entry(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Memories and revisions alike, to the earliest; a later one or none leaves it."""
        await store.create_bank(bank_record(OTHER_BANK))

        async def entries() -> list[tuple[str, str, datetime]]:
            found = await store.due_documents(EXPIRY_KIND, T0 + timedelta(days=9999))
            return [(entry.bank_id, entry.key, entry.due) for entry in found]

        await store.apply(bank, WriteBatch(inserts=(memory("forever", unit(0)),)))
        assert await entries() == []
        day, hour = T0 + timedelta(days=1), T0 + timedelta(hours=1)
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(1), expire_time=day),)))
        assert await entries() == [(bank, EXPIRY_KEY, day)]
        await store.apply(
            bank,
            WriteBatch(
                upserts=(memory("m1", unit(1), expire_time=day + timedelta(days=1)),),
                revisions=(revision("m1", "r1", expire_time=hour),),
            ),
        )
        assert await entries() == [(bank, EXPIRY_KEY, hour)]
        await store.apply(OTHER_BANK, WriteBatch(revisions=(revision("o", "r1", expire_time=day),)))
        await store.apply(bank, WriteBatch(revisions=(revision("m1", "r2", expire_time=day),)))
        assert await entries() == [(bank, EXPIRY_KEY, hour), (OTHER_BANK, EXPIRY_KEY, day)]
        await store.delete_bank(OTHER_BANK)
        assert await entries() == [(bank, EXPIRY_KEY, hour)]

    async def test_earliest_expiry_covers_memories_and_revisions_until_swept(
        self, store: MemoryStore, bank: str
    ) -> None:
        """None without an expiring row; expired rows count until a sweep reclaims them."""
        assert await store.earliest_expiry(bank) is None
        await store.apply(bank, WriteBatch(inserts=(memory("forever", unit(0)),)))
        assert await store.earliest_expiry(bank) is None
        times = [T0 + timedelta(minutes=minutes, microseconds=123457) for minutes in (1, 2, 3)]
        await store.apply(
            bank,
            WriteBatch(
                inserts=(memory("m2", unit(1), expire_time=times[1]),),
                revisions=(revision("m2", "r1", expire_time=times[0]),),
            ),
        )
        await store.apply(bank, WriteBatch(revisions=(revision("m2", "r2", expire_time=times[2]),)))
        assert await store.earliest_expiry(bank) == times[0]
        await store.sweep_expired(bank, times[0])
        assert await store.earliest_expiry(bank) == times[1]
        await store.sweep_expired(bank, times[1])
        assert await store.earliest_expiry(bank) == times[2]
        await store.sweep_expired(bank, times[2])
        assert await store.earliest_expiry(bank) is None
        with pytest.raises(NotFound):
            await store.earliest_expiry("no-such-bank")

    # Scope versions

    async def test_scope_version_changes_with_every_write_to_its_scope(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Insert, upsert, delete, a move to another scope and a sweep each give a new version."""
        other = scope_key({"user_id": "u2"})
        versions = [await store.scope_version(bank, KEY)]
        assert versions[0] is not None
        assert await store.scope_version(bank, KEY) == versions[0]
        soon = T0 + timedelta(seconds=5)
        writes = [
            WriteBatch(inserts=(memory("m1", unit(0)), memory("m2", unit(1), expire_time=soon))),
            WriteBatch(upserts=(memory("m1", unit(2), fact="changed"),)),
            WriteBatch(deletes=("m1",)),
            WriteBatch(inserts=(memory("m3", unit(3)),)),
            WriteBatch(upserts=(memory("m3", unit(3), scope={"user_id": "u2"}),)),
        ]
        other_before = await store.scope_version(bank, other)
        for batch in writes:
            await store.apply(bank, batch)
            versions.append(await store.scope_version(bank, KEY))
            assert await store.scope_version(bank, KEY) == versions[-1]
        assert await store.scope_version(bank, other) != other_before  # m3 moved in
        await store.sweep_expired(bank, soon)
        versions.append(await store.scope_version(bank, KEY))  # m2 swept
        assert len(set(versions)) == len(versions), versions

    async def test_scope_version_ignores_other_scopes_and_banks(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Writes to another scope or another bank, and reads, leave a scope's version alone."""
        await store.create_bank(bank_record(OTHER_BANK))
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))
        mine = await store.scope_version(bank, KEY)
        theirs = await store.scope_version(OTHER_BANK, KEY)
        other_scope = {"user_id": "u2"}
        await store.apply(bank, WriteBatch(inserts=(memory("o1", unit(1), scope=other_scope),)))
        await store.apply(bank, WriteBatch(deletes=("o1", "never-existed")))
        await store.apply(OTHER_BANK, WriteBatch(inserts=(memory("m1", unit(0)),)))
        await store.apply(bank, WriteBatch(revisions=(revision("m1", "r1"),)))
        await store.nearest(bank, NearestQuery(KEY, unit(0), 3, T0))
        await store.scan(bank, ScanQuery(T0, scope_key=KEY))
        assert await store.scope_version(bank, KEY) == mine
        assert await store.scope_version(OTHER_BANK, KEY) != theirs
        await store.apply(bank, WriteBatch(deletes=("m1",)))
        assert await store.scope_version(OTHER_BANK, KEY) != theirs
        assert await store.scope_version(bank, KEY) != mine

    async def test_scope_version_is_never_reused_by_a_recreated_bank(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A bank deleted and created again does not repeat a version its scopes had."""
        seen = set()
        for _ in range(2):
            await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))
            seen.add(await store.scope_version(bank, KEY))
            await store.delete_bank(bank)
            await store.create_bank(bank_record())
            assert await store.scope_version(bank, KEY) not in seen
        assert len(seen) == 2

    # Nearest

    async def test_nearest_is_ascending_true_euclidean(self, store: MemoryStore, bank: str) -> None:
        """Distances are the true L2 distance (not squared), ascending."""
        far = tuple(v * -1.0 for v in unit(0))
        await store.apply(
            bank,
            WriteBatch(
                inserts=(memory("same", unit(0)), memory("orth", unit(1)), memory("opposite", far))
            ),
        )
        hits = await store.nearest(bank, NearestQuery(KEY, unit(0), 3, T0))
        assert [hit.record.memory_id for hit in hits] == ["same", "orth", "opposite"]
        assert hits[0].distance == pytest.approx(0.0, abs=1e-4)
        assert hits[1].distance == pytest.approx(2**0.5, abs=1e-4)
        assert hits[2].distance == pytest.approx(2.0, abs=1e-4)

    async def test_nearest_ties_break_by_memory_id(self, store: MemoryStore, bank: str) -> None:
        """Equal distances order by memory id."""
        await store.apply(
            bank, WriteBatch(inserts=tuple(memory(name, unit(1)) for name in ("mc", "ma", "mb")))
        )
        hits = await store.nearest(bank, NearestQuery(KEY, unit(0), 3, T0))
        assert [hit.record.memory_id for hit in hits] == ["ma", "mb", "mc"]

    async def test_nearest_never_crosses_scopes(self, store: MemoryStore, bank: str) -> None:
        """A memory with the same vector in another scope is never returned.

        Troubleshooting: match the stored `scope_key` by exact equality (TAG or metadata `$eq`);
        never build a query string from scope text.
        """
        others = [
            memory(f"other{i}", unit(0), scope=scope) for i, scope in enumerate(CRAFTED_SCOPES)
        ]
        await store.apply(bank, WriteBatch(inserts=(memory("mine", unit(1)), *others)))
        hits = await store.nearest(bank, NearestQuery(KEY, unit(0), 100, T0))
        assert [hit.record.memory_id for hit in hits] == ["mine"]
        for i, scope in enumerate(CRAFTED_SCOPES):
            hits = await store.nearest(bank, NearestQuery(scope_key(scope), unit(0), 100, T0))
            assert [hit.record.memory_id for hit in hits] == [f"other{i}"]
            assert hits[0].record.scope == scope

    async def test_nearest_respects_k(self, store: MemoryStore, bank: str) -> None:
        """At most k results, the k nearest."""
        await store.apply(
            bank, WriteBatch(inserts=tuple(memory(f"m{i}", unit(i)) for i in range(DIM)))
        )
        hits = await store.nearest(bank, NearestQuery(KEY, unit(2), 1, T0))
        assert [hit.record.memory_id for hit in hits] == ["m2"]

    async def test_nearest_matches_the_reference_on_random_data(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Same ids, order and distances (1e-4) as exact search, across scopes and k."""
        rng = random.Random(7)
        scopes = [{"user_id": f"u{i}"} for i in range(3)]
        records = tuple(
            memory(f"m{i:03d}", _random_unit(rng), scope=scopes[i % 3]) for i in range(300)
        )
        reference = ReferenceMemoryStore()
        await reference.create_bank(bank_record())
        for target in (store, reference):
            for start in range(0, len(records), 100):
                await target.apply(BANK, WriteBatch(inserts=records[start : start + 100]))
        for trial in range(12):
            query = NearestQuery(
                scope_key(scopes[trial % 3]),
                _random_unit(rng),
                k=(1, 3, 10, 100)[trial % 4],
                now=T0,
            )
            got = await store.nearest(bank, query)
            want = await reference.nearest(BANK, query)
            assert [hit.record.memory_id for hit in got] == [hit.record.memory_id for hit in want]
            for mine, exact in zip(got, want, strict=True):
                assert mine.distance == pytest.approx(exact.distance, abs=1e-4)

    async def test_nearest_applies_pushed_filters_before_top_k(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Each supported filter is applied before the k nearest are taken.

        And by a scan of the scope (never another scope's memories).
        """
        records = (
            memory(
                "near",
                unit(0),
                fact="coffee black",
                topics=(TopicRef(managed="USER_PREFERENCES"),),
                metadata={"lang": "de", "n": 1.0, "ok": True, "t": T0},
            ),
            memory(
                "mid",
                tuple(0.9 if i == 0 else (0.1 if i == 1 else 0.0) for i in range(DIM)),
                fact="tea green",
                topics=(TopicRef(custom="drinks"),),
                metadata={"lang": "en", "n": 5.0, "ok": False, "t": T0 + timedelta(days=1)},
                create_time=T0 + timedelta(hours=1),
            ),
            memory(
                "far",
                unit(1),
                fact="coffee with milk",
                metadata={"n": 9.0},
                create_time=T0 + timedelta(hours=2),
            ),
            memory(  # another scope's: matches most filters, never found through KEY
                "elsewhere",
                unit(0),
                scope={"user_id": "u2"},
                fact="coffee black tea green",
                topics=(TopicRef(managed="USER_PREFERENCES"), TopicRef(custom="drinks")),
                metadata={"lang": "en", "n": 5.0, "ok": True, "t": T0 + timedelta(days=1)},
            ),
        )
        await store.apply(bank, WriteBatch(inserts=records))
        cases: list[tuple[FilterExpr, list[str]]] = [
            (Condition("fact", Op.EQ, "tea green"), ["mid"]),
            (Condition("fact", Op.NE, "tea green"), ["near", "far"]),
            (Condition("fact", Op.HAS, "coffee"), ["near", "far"]),
            (Condition("fact", Op.REGEX, "^coffee.*milk$"), ["far"]),
            (Condition("create_time", Op.GE, T0 + timedelta(hours=1)), ["mid", "far"]),
            (Condition("create_time", Op.LT, T0 + timedelta(hours=1)), ["near"]),
            (Condition("topics.managed_memory_topic", Op.EQ, "USER_PREFERENCES"), ["near"]),
            (Condition("topics.custom_memory_topic_label", Op.EQ, "drinks"), ["mid"]),
            (Condition("metadata.lang", Op.EQ, "en"), ["mid"]),
            (Not(Condition("metadata.lang", Op.EQ, "en")), ["near", "far"]),
            (Condition("metadata.n", Op.GT, 3.0), ["mid", "far"]),
            (Condition("metadata.n", Op.LT, 3.0), ["near"]),
            (Condition("metadata.ok", Op.EQ, True), ["near"]),
            (Condition("metadata.t", Op.GT, T0), ["mid"]),
            (
                Or((Condition("metadata.lang", Op.EQ, "de"), Condition("metadata.n", Op.EQ, 9.0))),
                ["near", "far"],
            ),
            (
                And(
                    (Condition("fact", Op.HAS, "coffee"), Not(Condition("metadata.n", Op.LT, 3.0)))
                ),
                ["far"],
            ),
        ]
        supported = store.capabilities.pushdown
        tried = 0
        for expr, expected in cases:
            if not _pushable(expr, supported):
                continue
            tried += 1
            hits = await store.nearest(bank, NearestQuery(KEY, unit(0), 3, T0, filter=expr))
            assert [hit.record.memory_id for hit in hits] == expected, expr
            scanned = await store.scan(
                bank,
                ScanQuery(
                    T0,
                    scope_key=KEY,
                    filter=expr,
                    order_by=(SortKey("create_time", descending=False),),
                ),
            )
            assert [record.memory_id for record in scanned] == expected, expr
        assert tried or not supported

    async def test_an_upsert_replaces_the_whole_record(self, store: MemoryStore, bank: str) -> None:
        """Metadata keys, topics and an expiry the new record lacks are gone, not kept.

        (Chroma's upsert merges metadata: a field left out stayed, and filters still saw it.)
        """
        first = memory(
            "m",
            unit(0),
            topics=(TopicRef(managed="USER_PREFERENCES"),),
            metadata={"color": "red", "n": 1.0},
            expire_time=T0 + timedelta(days=1),
        )
        await store.apply(bank, WriteBatch(inserts=(first,)))
        later = T0 + timedelta(hours=1)
        second = replace(first, metadata={"n": 2.0}, topics=(), expire_time=None, update_time=later)
        await store.apply(bank, WriteBatch(upserts=(second,)))
        [stored] = await store.get_memories(bank, ["m"], later)
        assert (stored.metadata, stored.topics, stored.expire_time) == ({"n": 2.0}, (), None)
        for expr in (
            Condition("metadata.color", Op.EQ, "red"),
            Condition("topics.managed_memory_topic", Op.EQ, "USER_PREFERENCES"),
        ):
            if not _pushable(expr, store.capabilities.pushdown):
                continue
            hits = await store.nearest(bank, NearestQuery(KEY, unit(0), 3, later, filter=expr))
            assert hits == [], expr
            query = ScanQuery(later, scope_key=KEY, filter=expr)
            assert await store.scan(bank, query) == [], expr
        a_year_on = T0 + timedelta(days=365)
        assert [record.memory_id for record in await store.scan(bank, ScanQuery(a_year_on))] == [
            "m"
        ]

    # Scan

    async def test_scan_orders_and_slices(self, store: MemoryStore, bank: str) -> None:
        """Scan orders by the sort keys, then id; a cursor and a limit cut that order."""
        records = tuple(
            memory(
                f"m{i}",
                unit(i),
                create_time=T0 + timedelta(seconds=i // 2),
                update_time=T0 + timedelta(seconds=10 - i),
            )
            for i in range(6)
        )
        await store.apply(bank, WriteBatch(inserts=records))
        newest_first = await store.scan(bank, ScanQuery(T0))
        assert [r.memory_id for r in newest_first] == ["m4", "m5", "m2", "m3", "m0", "m1"]
        by_update = await store.scan(
            bank, ScanQuery(T0, order_by=(SortKey("update_time", descending=False),))
        )
        assert [r.memory_id for r in by_update] == ["m5", "m4", "m3", "m2", "m1", "m0"]
        after_m5 = ScanCursor((T0 + timedelta(seconds=2),), "m5")
        page = await store.scan(bank, ScanQuery(T0, after=after_m5, limit=3))
        assert [r.memory_id for r in page] == ["m2", "m3", "m0"]
        past_end = ScanCursor((T0,), "m1")
        assert await store.scan(bank, ScanQuery(T0, after=past_end, limit=3)) == []

    async def test_scan_cursor_resumes_between_ties(self, store: MemoryStore, bank: str) -> None:
        """Memories sharing every sort value are cut at the cursor's id, in both directions."""
        await store.apply(
            bank, WriteBatch(inserts=tuple(memory(f"t{i}", unit(i)) for i in range(5)))
        )
        for descending in (True, False):
            order = (SortKey("create_time", descending=descending),)
            after = ScanCursor((T0,), "t1")
            page = await store.scan(bank, ScanQuery(T0, order_by=order, after=after, limit=2))
            assert [r.memory_id for r in page] == ["t2", "t3"], descending
        two_keys = (SortKey("update_time"), SortKey("create_time", descending=False))
        after = ScanCursor((T0, T0), "t3")
        rest = await store.scan(bank, ScanQuery(T0, order_by=two_keys, after=after))
        assert [r.memory_id for r in rest] == ["t4"]

    async def test_scan_cursor_of_a_deleted_memory(self, store: MemoryStore, bank: str) -> None:
        """A cursor needs no memory at its position: writes between pages repeat or skip none."""
        records = tuple(
            memory(f"k{i}", unit(i), create_time=T0 + timedelta(seconds=i)) for i in range(6)
        )
        await store.apply(bank, WriteBatch(inserts=records))
        order = (SortKey("create_time", descending=False),)
        first = await store.scan(bank, ScanQuery(T0, order_by=order, limit=3))
        assert [r.memory_id for r in first] == ["k0", "k1", "k2"]
        before = memory("a-new", unit(0), create_time=T0 - timedelta(seconds=1))
        between = memory("k2b", unit(1), create_time=T0 + timedelta(seconds=2))
        await store.apply(bank, WriteBatch(inserts=(before, between), deletes=("k2",)))
        after = cursor_of(first[-1], order)
        second = await store.scan(bank, ScanQuery(T0, order_by=order, after=after))
        assert [r.memory_id for r in second] == ["k2b", "k3", "k4", "k5"]

    async def test_scan_cursor_at_unusual_ids(self, store: MemoryStore, bank: str) -> None:
        """Tied ids with quotes, backslashes, capitals or non-ASCII are cut exactly at a cursor.

        An import can hold any id, so a store must page past any of them.
        """
        ids = ["a", "b'c", "b\\c", "b\\'c", 'b"c', "b c", "b\u00e9", "B", "c|d", "b\\"]
        await store.apply(bank, WriteBatch(inserts=tuple(memory(i, unit(0)) for i in ids)))
        for order in ((SortKey("create_time"),), (SortKey("update_time", descending=False),)):
            whole = [r.memory_id for r in await store.scan(bank, ScanQuery(T0, order_by=order))]
            assert whole == sorted(ids)
            walked: list[str] = []
            cursor = None
            while True:
                query = ScanQuery(T0, order_by=order, after=cursor, limit=2)
                page = await store.scan(bank, query)
                walked += [r.memory_id for r in page]
                if len(page) < 2:
                    break
                cursor = cursor_of(page[-1], order)
            assert walked == whole, order

    async def test_scan_hostile_cursors(self, store: MemoryStore, bank: str) -> None:
        """A cursor of any id and any time the engine accepts selects by position, nothing else.

        Page tokens reach the store as cursors; one hand-made with an id that looks like query
        syntax or a time at the ends of the range must neither fail nor widen the scan.
        """
        records = tuple(
            memory(f"h{i}", unit(i), create_time=T0 + timedelta(seconds=i)) for i in range(4)
        )
        other = memory("x", unit(0), scope={"user_id": "other"})
        await store.apply(bank, WriteBatch(inserts=(*records, other)))
        first, last = datetime(1, 1, 1, tzinfo=UTC), datetime(9999, 12, 31, tzinfo=UTC)
        hostile = ["' || 1 == 1 || '", "*", "@memory_id", "}{)(", "\\' || '", "h1\x00", "é" * 200]
        for memory_id in hostile:
            for when, everything in ((first, False), (last, True)):
                for descending in (True, False):
                    order = (SortKey("create_time", descending=descending),)
                    query = ScanQuery(
                        T0, scope_key=KEY, order_by=order, after=ScanCursor((when,), memory_id)
                    )
                    found = {r.memory_id for r in await store.scan(bank, query)}
                    expected = {r.memory_id for r in records} if everything == descending else set()
                    assert found == expected, (memory_id, when, descending)

    async def test_scan_keyset_walks_the_whole_scan(self, store: MemoryStore, bank: str) -> None:
        """Pages chained by cursors return exactly the unpaged scan (filtered and scoped)."""
        other = {"user_id": "u2"}
        records = tuple(
            memory(
                f"w{i:02d}",
                unit(i),
                scope=SCOPE if i % 3 else other,
                create_time=T0 + timedelta(seconds=i // 4),
                update_time=T0 + timedelta(seconds=i % 5),
            )
            for i in range(40)
        )
        await store.apply(bank, WriteBatch(inserts=records))
        order = (SortKey("update_time"), SortKey("create_time", descending=False))
        query = ScanQuery(T0, scope_key=KEY, order_by=order)
        whole = [r.memory_id for r in await store.scan(bank, query)]
        assert len(whole) == len([i for i in range(40) if i % 3])
        walked: list[str] = []
        cursor = None
        while True:
            page = await store.scan(bank, replace(query, after=cursor, limit=4))
            walked += [r.memory_id for r in page]
            if len(page) < 4:
                break
            cursor = cursor_of(page[-1], order)
        assert walked == whole

    async def test_scan_by_scope_and_across_scopes(self, store: MemoryStore, bank: str) -> None:
        """A scan with a scope key sees only that scope; without one it sees the bank."""
        other = {"user_id": "u2"}
        await store.apply(
            bank, WriteBatch(inserts=(memory("a", unit(0)), memory("b", unit(1), scope=other)))
        )
        assert [r.memory_id for r in await store.scan(bank, ScanQuery(T0, scope_key=KEY))] == ["a"]
        assert sorted(r.memory_id for r in await store.scan(bank, ScanQuery(T0))) == ["a", "b"]
        if ("scope", "=") in store.capabilities.pushdown:
            expr = Condition("scope.user_id", Op.EQ, "u2")
            assert [r.memory_id for r in await store.scan(bank, ScanQuery(T0, filter=expr))] == [
                "b"
            ]

    # Revisions

    async def test_revisions_newest_first_and_by_id(self, store: MemoryStore, bank: str) -> None:
        """Revisions list newest first; each can be read by id; tombstones keep their flag."""
        revisions = (
            revision(
                "m1",
                "r1",
                labels={"src": "chat"},
                extracted_memories=({"fact": "x", "context": "y"},),
                topics=(TopicRef(managed="USER_PERSONAL_INFO"),),
                metadata={"k": 1.5},
            ),
            revision("m1", "r2", create_time=T0 + timedelta(seconds=1), deleted=True),
        )
        await store.apply(bank, WriteBatch(revisions=revisions))
        assert await store.list_revisions(bank, "m1", T0) == [revisions[1], revisions[0]]
        assert await store.get_revision(bank, "m1", "r1", T0) == revisions[0]
        assert await store.get_revision(bank, "m1", "nope", T0) is None
        assert await store.get_revision(bank, "m2", "r1", T0) is None

    async def test_expired_revisions_are_hidden(self, store: MemoryStore, bank: str) -> None:
        """A revision past its expiry is not listed or returned."""
        soon = T0 + timedelta(seconds=1)
        await store.apply(bank, WriteBatch(revisions=(revision("m1", "r1", expire_time=soon),)))
        assert await store.list_revisions(bank, "m1", soon) == []
        assert await store.get_revision(bank, "m1", "r1", soon) is None

    async def test_list_revisions_many_is_list_revisions_of_each_id(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Each id asked maps to exactly its `list_revisions`, `[]` when it has none live.

        Troubleshooting: key the result by every distinct id asked (missing ids too), read only
        this bank's revisions, hide expired ones as `list_revisions` does and order each list
        newest first (create time, then revision id).
        """
        now = T0 + timedelta(seconds=10)
        await store.create_bank(bank_record(OTHER_BANK))
        await store.apply(
            OTHER_BANK, WriteBatch(revisions=(revision("elsewhere", "r1"), revision("many", "r9")))
        )
        await store.apply(bank, WriteBatch(inserts=(memory("deleted", unit(0)),)))
        await store.apply(bank, WriteBatch(inserts=(memory("no-history", unit(1)),)))
        await store.apply(bank, WriteBatch(revisions=_mixed_revisions(now)))
        await store.apply(bank, WriteBatch(deletes=("deleted",)))
        asked = ["many", "no-history", "unknown", "deleted", "expiring", "expired", "elsewhere"]
        found = await store.list_revisions_many(bank, [*asked, "many", "expired"], now)
        assert found == {i: await store.list_revisions(bank, i, now) for i in asked}
        assert [r.revision_id for r in found["many"]] == ["r3", "r2b", "r2a", "r1"]
        assert [r.revision_id for r in found["deleted"]] == ["r2", "r1"]
        assert [r.revision_id for r in found["expiring"]] == ["r1"]
        assert found["no-history"] == found["unknown"] == found["expired"] == []
        assert found["elsewhere"] == []

    async def test_list_revisions_many_of_no_ids_is_empty(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Asking for no ids returns an empty mapping."""
        await store.apply(bank, WriteBatch(revisions=(revision("m1", "r1"),)))
        assert await store.list_revisions_many(bank, [], T0) == {}

    async def test_revision_memory_ids_include_deleted_memories_of_this_bank_only(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Every memory with a live revision is listed, deleted or not; nothing else.

        Troubleshooting: the ids come from the revisions (not the memories), filtered by the
        revisions' expiry like `list_revisions`; a memory without revisions is never listed.
        """
        await store.create_bank(bank_record(OTHER_BANK))
        await store.apply(
            OTHER_BANK, WriteBatch(revisions=(revision("elsewhere", "r1"), revision("kept", "r9")))
        )
        await store.apply(
            bank,
            WriteBatch(
                inserts=(memory("kept", unit(0)), memory("deleted", unit(1))),
                revisions=(revision("kept", "r1"), revision("deleted", "r1")),
            ),
        )
        await store.apply(bank, WriteBatch(inserts=(memory("no-history", unit(2)),)))
        await store.apply(
            bank,
            WriteBatch(
                deletes=("deleted",),
                revisions=(
                    revision("deleted", "r2", create_time=T0 + timedelta(seconds=1), deleted=True),
                    revision("only-revisions", "r1"),
                ),
            ),
        )
        listed = await store.list_revision_memory_ids(bank, T0)
        assert sorted(listed) == ["deleted", "kept", "only-revisions"]
        assert sorted(await store.list_revision_memory_ids(OTHER_BANK, T0)) == [
            "elsewhere",
            "kept",
        ]

    async def test_revision_memory_ids_page_without_repeats_or_gaps(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Pages of `limit` ids, continued with `after`, add up to the whole list in its order.

        Troubleshooting: the order is the store's own but must be total and stable, and `after`
        must resume strictly after the given id in that order (a keyset, not an offset).
        """
        ids = ["a", "m:1", "m:10", "m1", "zz", "ü-1", "b" * 60, "m9", "c"]
        await store.apply(
            bank, WriteBatch(revisions=tuple(revision(i, f"r{n}") for n, i in enumerate(ids)))
        )
        whole = await store.list_revision_memory_ids(bank, T0, limit=100)
        assert sorted(whole) == sorted(ids)
        for limit in (1, 2, 4):
            pages = [await store.list_revision_memory_ids(bank, T0, limit=limit)]
            while len(pages[-1]) == limit:
                after = pages[-1][-1]
                pages.append(
                    await store.list_revision_memory_ids(bank, T0, after=after, limit=limit)
                )
            assert [memory_id for page in pages for memory_id in page] == whole
        assert await store.list_revision_memory_ids(bank, T0, after=whole[3]) == whole[4:]
        assert await store.list_revision_memory_ids(bank, T0, after=whole[-1]) == []

    async def test_revision_memory_ids_follow_revision_expiry(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A memory is listed while one of its revisions is live, and not from then on."""
        soon, later = T0 + timedelta(seconds=5), T0 + timedelta(seconds=50)
        await store.apply(
            bank,
            WriteBatch(
                revisions=(
                    revision("brief", "r1", expire_time=soon),
                    revision("mixed", "r1", expire_time=soon),
                    revision("mixed", "r2", expire_time=later),
                    revision("forever", "r1"),
                )
            ),
        )
        just_before = soon - timedelta(microseconds=1)
        assert sorted(await store.list_revision_memory_ids(bank, just_before)) == [
            "brief",
            "forever",
            "mixed",
        ]
        assert sorted(await store.list_revision_memory_ids(bank, soon)) == ["forever", "mixed"]
        assert await store.list_revision_memory_ids(bank, later) == ["forever"]
        await store.sweep_expired(bank, later)
        assert await store.list_revision_memory_ids(bank, T0) == ["forever"]

    # Operations

    async def test_operations_round_trip(self, store: MemoryStore, bank: str) -> None:
        """An operation reads back as written and can be replaced."""
        pending = OperationRecord(
            bank, "memories/m1/operations/op1", False, {"metadata": {"a": 1}}, T0
        )
        await store.put_operation(pending)
        assert await store.get_operation(bank, pending.operation_path) == pending
        done = OperationRecord(
            bank, pending.operation_path, True, {"done": True, "response": {"name": "x"}}, T0
        )
        await store.put_operation(done)
        assert await store.get_operation(bank, pending.operation_path) == done
        assert await store.get_operation(bank, "operations/missing") is None

    # Documents and locks

    async def test_documents_round_trip_by_kind_and_key(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Documents are JSON mappings kept per (bank, kind, key), listed by key."""
        body = {"events": [{"text": 'héllo \u2603 "q"'}], "n": 3, "ok": True, "none": None}
        await store.put_document(bank, "stream", "b-key", body)
        await store.put_document(bank, "stream", "a-key", {"n": 1})
        await store.put_document(bank, "journal", "a-key", {"other": "kind"})
        assert await store.get_document(bank, "stream", "b-key") == body
        assert [key for key, _ in await store.list_documents(bank, "stream")] == ["a-key", "b-key"]
        await store.put_document(bank, "stream", "a-key", {"n": 2})
        assert await store.get_document(bank, "stream", "a-key") == {"n": 2}
        await store.delete_document(bank, "stream", "a-key")
        assert await store.get_document(bank, "stream", "a-key") is None
        assert await store.get_document(bank, "journal", "a-key") == {"other": "kind"}
        await store.delete_bank(bank)
        await store.create_bank(bank_record())
        assert await store.list_documents(bank, "stream") == []

    async def test_documents_in_a_batch_are_written_with_its_memories(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A batch's documents are visible after `apply`, together with its memories."""
        body = {"pending": [], "processed": [{"text": "héllo \u2603"}], "n": 2, "ok": True}
        await store.apply(
            bank,
            WriteBatch(
                inserts=(memory("m1", unit(0)),),
                upserts=(memory("m2", unit(1)),),
                revisions=(revision("m1", "r1"), revision("m2", "r1")),
                documents=(
                    DocumentRecord("stream", "s1", body),
                    DocumentRecord("journal", "s1", {"other": "kind"}),
                ),
            ),
        )
        assert [r.memory_id for r in await store.get_memories(bank, ["m1", "m2"], T0)] == [
            "m1",
            "m2",
        ]
        assert [r.revision_id for r in await store.list_revisions(bank, "m1", T0)] == ["r1"]
        assert await store.get_document(bank, "stream", "s1") == body
        assert await store.get_document(bank, "journal", "s1") == {"other": "kind"}
        assert await store.list_documents(bank, "stream") == [("s1", body)]
        await store.apply(bank, WriteBatch(documents=(DocumentRecord("stream", "s2", {"n": 1}),)))
        assert [key for key, _ in await store.list_documents(bank, "stream")] == ["s1", "s2"]

    async def test_a_failed_batch_writes_none_of_its_documents(
        self, store: MemoryStore, bank: str
    ) -> None:
        """`AlreadyExists` for one insert leaves the batch's documents unwritten (and unchanged)."""
        await store.put_document(bank, "stream", "kept", {"n": 1})
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))
        batch = WriteBatch(
            inserts=(memory("m2", unit(1)), memory("m1", unit(2), fact="replacement")),
            revisions=(revision("m2", "r1"),),
            documents=(
                DocumentRecord("stream", "kept", {"n": 2}),
                DocumentRecord("stream", "new", {"n": 3}),
            ),
        )
        with pytest.raises(AlreadyExists):
            await store.apply(bank, batch)
        assert await store.get_document(bank, "stream", "kept") == {"n": 1}
        assert await store.get_document(bank, "stream", "new") is None
        assert await store.get_memories(bank, ["m2"], T0) == []

    async def test_operations_in_a_batch_are_written_with_its_memories_or_not_at_all(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A create's memory, revision and operation are all stored, or none of them is.

        All three are there after `apply`; none is after a batch that failed.
        """
        created = OperationRecord(
            bank, "memories/m1/operations/o1", True, {"kind": "memory", "operation": {}}, T0
        )
        await store.apply(
            bank,
            WriteBatch(
                inserts=(memory("m1", unit(0)),),
                revisions=(revision("m1", "r1"),),
                operations=(created,),
            ),
        )
        assert await store.get_operation(bank, created.operation_path) == created
        assert [r.revision_id for r in await store.list_revisions(bank, "m1", T0)] == ["r1"]
        refused = replace(created, operation_path="memories/m1/operations/o2")
        with pytest.raises(AlreadyExists):
            await store.apply(
                bank,
                WriteBatch(
                    inserts=(memory("m1", unit(1), fact="again"),),
                    revisions=(revision("m1", "r2"),),
                    operations=(refused,),
                ),
            )
        assert await store.get_operation(bank, refused.operation_path) is None
        assert [r.revision_id for r in await store.list_revisions(bank, "m1", T0)] == ["r1"]

    async def test_a_batch_replaces_an_existing_document(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A document in a batch replaces the one stored under its kind and key, whole."""
        await store.put_document(bank, "stream", "s1", {"pending": [1, 2], "extra": "old"})
        await store.apply(
            bank,
            WriteBatch(
                upserts=(memory("m1", unit(0)),),
                revisions=(revision("m1", "r1"),),
                documents=(DocumentRecord("stream", "s1", {"pending": []}),),
            ),
        )
        assert await store.get_document(bank, "stream", "s1") == {"pending": []}
        await store.apply(bank, WriteBatch(documents=(DocumentRecord("stream", "s1", {"n": 9}),)))
        assert await store.list_documents(bank, "stream") == [("s1", {"n": 9})]

    # The due index and scoped documents

    async def test_due_documents_come_earliest_first_from_every_bank(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Entries with due <= now, of one kind, across banks: by due, then bank, then key."""
        await store.create_bank(bank_record(OTHER_BANK))
        at = {minutes: T0 + timedelta(minutes=minutes) for minutes in (1, 2, 3, 9)}
        await store.put_document(bank, "stream", "late", {"n": 1}, due=at[9])
        await store.put_document(bank, "stream", "b", {"n": 2}, due=at[2])
        await store.put_document(OTHER_BANK, "stream", "a", {"n": 3}, due=at[2])
        await store.put_document(bank, "stream", "first", {"n": 4}, due=at[1])
        await store.put_document(bank, "stream", "idle", {"n": 5})
        await store.put_document(bank, "journal", "other-kind", {"n": 6}, due=at[1])
        await store.apply(
            bank, WriteBatch(documents=(DocumentRecord("stream", "batched", {}, due=at[3]),))
        )
        found = await store.due_documents("stream", at[3])
        assert [(d.bank_id, d.key) for d in found] == [
            (bank, "first"),
            (bank, "b"),
            (OTHER_BANK, "a"),
            (bank, "batched"),
        ]
        assert [d.due for d in found] == [at[1], at[2], at[2], at[3]]
        assert [d.key for d in await store.due_documents("stream", at[3], limit=2)] == [
            "first",
            "b",
        ]
        assert await store.due_documents("stream", T0) == []
        assert [d.key for d in await store.due_documents("journal", at[9])] == ["other-kind"]

    async def test_a_rewritten_document_moves_its_due_entry(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Each write sets the entry to its own due (later, earlier, or none), put or batch."""
        soon, later = T0 + timedelta(seconds=5), T0 + timedelta(hours=1)

        async def due_keys(now: datetime) -> list[str]:
            return [d.key for d in await store.due_documents("stream", now)]

        await store.put_document(bank, "stream", "s1", {"n": 1}, due=soon)
        assert await due_keys(soon) == ["s1"]
        await store.put_document(bank, "stream", "s1", {"n": 2}, due=later)
        assert await due_keys(soon) == []
        assert await due_keys(later) == ["s1"]
        await store.apply(
            bank, WriteBatch(documents=(DocumentRecord("stream", "s1", {"n": 3}, due=soon),))
        )
        assert await due_keys(soon) == ["s1"]
        await store.apply(bank, WriteBatch(documents=(DocumentRecord("stream", "s1", {"n": 4}),)))
        assert await due_keys(later) == []
        await store.put_document(bank, "stream", "s1", {"n": 5}, due=later)
        await store.put_document(bank, "stream", "s1", {"n": 6})
        assert await due_keys(later) == []
        assert await store.get_document(bank, "stream", "s1") == {"n": 6}

    async def test_a_deleted_document_leaves_the_due_index(
        self, store: MemoryStore, bank: str
    ) -> None:
        """`delete_document` removes the document's entry; another key's stays."""
        await store.put_document(bank, "stream", "gone", {"n": 1}, due=T0)
        await store.put_document(bank, "stream", "kept", {"n": 2}, due=T0)
        await store.delete_document(bank, "stream", "gone")
        assert [d.key for d in await store.due_documents("stream", T0)] == ["kept"]

    async def test_set_due_sets_or_only_lowers_entries(self, store: MemoryStore, bank: str) -> None:
        """Exact `set_due` moves an entry either way or removes it; `only_earlier` only lowers."""
        soon, later = T0 + timedelta(seconds=5), T0 + timedelta(hours=1)
        await store.put_document(bank, "stream", "s1", {"n": 1}, due=soon)
        await store.put_document(bank, "stream", "s2", {"n": 2})
        await store.set_due(bank, "stream", {"s1": later, "s2": later}, only_earlier=True)
        found = await store.due_documents("stream", later)
        assert [(d.key, d.due) for d in found] == [("s1", soon), ("s2", later)]
        await store.set_due(bank, "stream", {"s2": soon, "s1": None}, only_earlier=True)
        found = await store.due_documents("stream", later)
        assert [(d.key, d.due) for d in found] == [("s1", soon), ("s2", soon)]
        await store.set_due(bank, "stream", {"s1": later, "s2": None})
        found = await store.due_documents("stream", later)
        assert [(d.key, d.due) for d in found] == [("s1", later)]
        assert await store.get_document(bank, "stream", "s1") == {"n": 1}

    async def test_deleting_a_bank_removes_its_due_entries(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A deleted (and re-created) bank has no entries; another bank's are untouched."""
        await store.create_bank(bank_record(OTHER_BANK))
        await store.put_document(bank, "stream", "s1", {"n": 1}, due=T0)
        await store.apply(bank, WriteBatch(documents=(DocumentRecord("stream", "s2", {}, due=T0),)))
        await store.put_document(OTHER_BANK, "stream", "s1", {"n": 2}, due=T0)
        await store.delete_bank(bank)
        assert [(d.bank_id, d.key) for d in await store.due_documents("stream", T0)] == [
            (OTHER_BANK, "s1")
        ]
        await store.create_bank(bank_record())
        assert [d.bank_id for d in await store.due_documents("stream", T0)] == [OTHER_BANK]
        await store.set_due(bank, "stream", {"s1": None})  # an entry of a bank gone: no error

    async def test_documents_are_listed_by_scope_key(self, store: MemoryStore, bank: str) -> None:
        """`list_documents(scope_key=...)` returns exactly that scope's documents of the bank."""
        other = scope_key(CRAFTED_SCOPES[1])
        await store.create_bank(bank_record(OTHER_BANK))
        await store.put_document(bank, "stream", "mine-b", {"n": 1}, scope_key=KEY)
        await store.apply(
            bank,
            WriteBatch(documents=(DocumentRecord("stream", "mine-a", {"n": 2}, scope_key=KEY),)),
        )
        await store.put_document(bank, "stream", "theirs", {"n": 3}, scope_key=other)
        await store.put_document(bank, "stream", "untagged", {"n": 4})
        await store.put_document(bank, "journal", "mine-c", {"n": 5}, scope_key=KEY)
        await store.put_document(OTHER_BANK, "stream", "mine-x", {"n": 6}, scope_key=KEY)
        assert await store.list_documents(bank, "stream", scope_key=KEY) == [
            ("mine-a", {"n": 2}),
            ("mine-b", {"n": 1}),
        ]
        assert [k for k, _ in await store.list_documents(bank, "stream", scope_key=other)] == [
            "theirs"
        ]
        await store.put_document(bank, "stream", "mine-b", {"n": 7}, scope_key=other)
        await store.delete_document(bank, "stream", "mine-a")
        assert await store.list_documents(bank, "stream", scope_key=KEY) == []
        assert [k for k, _ in await store.list_documents(bank, "stream", scope_key=other)] == [
            "mine-b",
            "theirs",
        ]
        assert len(await store.list_documents(bank, "stream")) == 3

    # Conditional writes

    async def test_a_changed_memory_aborts_a_batch_that_expected_it_unchanged(
        self, store: MemoryStore, bank: str
    ) -> None:
        """An expectation of an older update time fails the whole batch with `Aborted`."""
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))
        changed = memory("m1", unit(1), fact="changed", update_time=T0 + timedelta(seconds=1))
        await store.apply(bank, WriteBatch(upserts=(changed,)))
        stale = WriteBatch(
            inserts=(memory("m2", unit(2)),),
            upserts=(memory("m1", unit(3), fact="blind", update_time=T0 + timedelta(seconds=2)),),
            revisions=(revision("m1", "r9"),),
            documents=(DocumentRecord("stream", "s1", {"n": 1}),),
            expect=(Expectation("m1", T0, update_time=T0),),
        )
        with pytest.raises(Aborted, match="changed"):
            await store.apply(bank, stale)
        assert await store.get_memories(bank, ["m1", "m2"], T0) == [changed]
        assert await store.list_revisions(bank, "m1", T0) == []
        assert await store.get_document(bank, "stream", "s1") is None

    async def test_a_deleted_memory_is_not_resurrected_by_an_expecting_upsert(
        self, store: MemoryStore, bank: str
    ) -> None:
        """An upsert expecting a memory that was deleted since is `Aborted`; it stays deleted."""
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))
        await store.apply(bank, WriteBatch(deletes=("m1",)))
        revive = WriteBatch(
            upserts=(memory("m1", unit(0), fact="revived", update_time=T0 + timedelta(seconds=1)),),
            expect=(Expectation("m1", T0, update_time=T0),),
        )
        with pytest.raises(Aborted, match="deleted"):
            await store.apply(bank, revive)
        assert await store.get_memories(bank, ["m1"], T0) == []

    async def test_an_expected_absence_holds_only_while_no_live_memory_has_the_id(
        self, store: MemoryStore, bank: str
    ) -> None:
        """`update_time=None` fails on a live memory; an expired one counts as absent."""
        await store.apply(
            bank,
            WriteBatch(inserts=(memory("m1", unit(0), expire_time=T0 + timedelta(seconds=5)),)),
        )
        fresh = memory("m1", unit(1), fact="fresh", update_time=T0 + timedelta(seconds=9))
        with pytest.raises(Aborted, match="created"):
            await store.apply(bank, WriteBatch(upserts=(fresh,), expect=(Expectation("m1", T0),)))
        later = T0 + timedelta(seconds=9)
        await store.apply(bank, WriteBatch(upserts=(fresh,), expect=(Expectation("m1", later),)))
        assert await store.get_memories(bank, ["m1"], later) == [fresh]

    async def test_expectations_that_hold_let_the_whole_batch_through(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Expectations of an unchanged memory and of a free id both hold: everything is written."""
        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))
        updated = memory("m1", unit(1), fact="updated", update_time=T0 + timedelta(seconds=1))
        await store.apply(
            bank,
            WriteBatch(
                upserts=(updated, memory("m2", unit(2))),
                revisions=(revision("m1", "r1"),),
                expect=(Expectation("m1", T0, update_time=T0), Expectation("m2", T0)),
            ),
        )
        assert await store.get_memories(bank, ["m1", "m2"], T0) == [updated, memory("m2", unit(2))]
        unchanged = Expectation("m1", T0, update_time=updated.update_time)
        await store.apply(bank, WriteBatch(deletes=("m1",), expect=(unchanged,)))
        assert await store.get_memories(bank, ["m1"], T0) == []

    async def test_racing_conditional_writes_of_one_version_let_exactly_one_through(
        self, store: MemoryStore, bank: str
    ) -> None:
        """Concurrent batches expecting the same version: one commits, the others are `Aborted`."""
        import asyncio

        await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),)))

        async def write(index: int) -> MemoryRecord:
            record = memory(
                "m1", unit(index), fact=f"writer {index}", update_time=T0 + timedelta(seconds=index)
            )
            delete = index % 2 == 0
            batch = WriteBatch(
                upserts=() if delete else (record,),
                deletes=("m1",) if delete else (),
                expect=(Expectation("m1", T0, update_time=T0),),
            )
            await store.apply(bank, batch)
            return record

        outcomes = await asyncio.gather(*(write(i) for i in range(1, 6)), return_exceptions=True)
        winners = [o for o in outcomes if isinstance(o, MemoryRecord)]
        assert len(winners) == 1, outcomes
        assert all(isinstance(o, Aborted) for o in outcomes if o not in winners)
        found = await store.get_memories(bank, ["m1"], T0)
        won = outcomes.index(winners[0]) + 1
        assert found == ([] if won % 2 == 0 else [winners[0]])

    async def test_a_write_fenced_by_a_lock_no_longer_held_is_aborted(
        self, store: MemoryStore, bank: str
    ) -> None:
        """A batch carrying the lease of a lock it no longer holds writes nothing."""
        async with store.lock_provider().lock("fenced", wait_seconds=5) as lease:
            await store.apply(bank, WriteBatch(inserts=(memory("m1", unit(0)),), fences=(lease,)))
        with pytest.raises(Aborted, match="no longer held"):
            await store.apply(bank, WriteBatch(inserts=(memory("m2", unit(1)),), fences=(lease,)))
        assert [r.memory_id for r in await store.get_memories(bank, ["m1", "m2"], T0)] == ["m1"]

    async def test_lock_provider_excludes_concurrent_holders(self, store: MemoryStore) -> None:
        """Two holders of the same lock name never overlap; different names do not wait."""
        import asyncio

        provider = store.lock_provider()
        inside: list[str] = []
        overlaps: list[bool] = []

        async def hold(name: str, tag: str) -> None:
            async with provider.lock(name, lease_seconds=10, wait_seconds=10):
                overlaps.append(bool(inside))
                inside.append(tag)
                await asyncio.sleep(0.05)
                inside.remove(tag)

        await asyncio.gather(*(hold("scope-lock", f"t{i}") for i in range(4)))
        assert overlaps == [False] * 4
        async with provider.lock("scope-a", wait_seconds=1):
            async with provider.lock("scope-b", wait_seconds=1):
                pass


def _pushable(expr: FilterExpr, supported: frozenset[tuple[str, str]]) -> bool:
    if isinstance(expr, Condition):
        return (family_of(expr), expr.op.value) in supported
    if isinstance(expr, Not):
        return _pushable(expr.part, supported)
    return all(_pushable(part, supported) for part in expr.parts)
