"""Expiry work in the due index: a tick sweeps only the banks whose expiry entry has come.

Each scenario runs on every backend (`store_uri`) with a simulated clock. A bank's entry must
never end later than the expiry of a row it stores (or the bank's next regular sweep, which
`sweep_seconds` puts after each sweep); these tests attack that with writes racing a sweep, two
schedulers, a deletion, an import, config changes and revisions.
"""

from __future__ import annotations

import asyncio
import io
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adk_memory import AsyncClient
from adk_memory.engine.context import utc_now
from adk_memory.scheduler import IngestScheduler
from adk_memory.store import EXPIRY_KEY, EXPIRY_KIND, MemoryRecord, MemoryStore, ScanQuery
from adk_memory.transfer import export_bank, import_bank

SCOPE = {"user_id": "u1"}
SWEEP = timedelta(seconds=300)
"""`sweep_seconds` of every scheduler here (the default): a sweep puts the next one after it."""
LATER_THAN_A_SWEEP = f"{2 * SWEEP.total_seconds()}s"
"""A TTL past the floor a sweep puts on its bank's entry (so the entry must follow the row)."""
_FAR = datetime(9999, 1, 1, tzinfo=UTC)


class Clock:
    """A simulated clock, moved by hand."""

    def __init__(self) -> None:
        self.now = utc_now()

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def uri(store_uri: str) -> str:
    """The backend's URI; memory:// is named so that two clients share it."""
    return "memory://expiry-" + uuid.uuid4().hex[:8] if store_uri == "memory://" else store_uri


@pytest.fixture
def clock() -> Clock:
    return Clock()


def connect(uri: str, clock: Clock) -> AsyncClient:
    made = AsyncClient(uri, embedding_model="hash-64", run_scheduler=False)
    made.engine.context.clock = clock
    return made


@pytest.fixture
async def client(uri: str, clock: Clock) -> AsyncIterator[AsyncClient]:
    async with connect(uri, clock) as made:
        yield made


def scheduler(client: AsyncClient) -> IngestScheduler:
    return IngestScheduler(client.engine, sweep_seconds=SWEEP.total_seconds())


async def new_bank(client: AsyncClient, ttl_config: dict[str, Any] | None = None) -> str:
    bank = await client.memory_banks.create(
        managed_semantic_memory_config={"ttl_config": ttl_config} if ttl_config else None
    )
    return str(bank.name).rsplit("/", 1)[-1]


async def remember(client: AsyncClient, bank_id: str, fact: str, **config: Any) -> str:
    """Creates a memory; returns its fact."""
    await client.memory_banks.memories.create(
        name=client.engine.names.bank(bank_id), fact=fact, scope=SCOPE, config=config or None
    )
    return fact


async def entries(client: AsyncClient) -> dict[str, datetime]:
    """Every bank's expiry entry, due or not."""
    found = await client.engine.store.due_documents(EXPIRY_KIND, _FAR)
    assert {entry.key for entry in found} <= {EXPIRY_KEY}
    return {entry.bank_id: entry.due for entry in found}


async def stored_records(client: AsyncClient, bank_id: str) -> list[MemoryRecord]:
    """The bank's memories still stored, expired or not."""
    long_ago = client.engine.context.clock() - timedelta(days=3650)
    return await client.engine.store.scan(bank_id, ScanQuery(long_ago))


async def stored(client: AsyncClient, bank_id: str) -> list[str]:
    """Facts of the bank's memories still stored, expired or not."""
    return sorted(record.fact for record in await stored_records(client, bank_id))


async def expiry_of(client: AsyncClient, bank_id: str, fact: str) -> datetime:
    """The expire time of the bank's memory with this fact."""
    (record,) = [r for r in await stored_records(client, bank_id) if r.fact == fact]
    assert record.expire_time is not None
    return record.expire_time


def spy(store: MemoryStore, name: str, before: Callable[..., Awaitable[None]]) -> list[Any]:
    """Runs `before(*args)` ahead of each call of `store.<name>` (the call itself is real);
    returns the list of the calls' first arguments."""
    real = getattr(store, name)
    calls: list[Any] = []

    async def spied(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        await before(*args)
        return await real(*args, **kwargs)

    setattr(store, name, spied)
    return calls


async def nothing(*_args: Any) -> None:
    return None


async def test_a_tick_sweeps_only_the_banks_whose_expiry_has_come(
    client: AsyncClient, clock: Clock
) -> None:
    """Ten banks, one with a memory about to expire: the next tick sweeps that one alone."""
    banks = [await new_bank(client) for _ in range(10)]
    ticking = scheduler(client)
    await ticking.run_once()  # the first tick sweeps every bank (nothing to reclaim yet)
    await remember(client, banks[3], "brief", ttl="60s")
    await remember(client, banks[3], "lasting")
    await remember(client, banks[5], "lasting")
    swept = spy(client.engine.store, "sweep_expired", nothing)
    await ticking.run_once()
    assert swept == []
    clock.advance(timedelta(seconds=61))
    await ticking.run_once()
    assert swept == [banks[3]]
    assert await stored(client, banks[3]) == ["lasting"]
    await ticking.run_once()
    assert swept == [banks[3]]  # not again: its entry is now a year away (the revisions)
    assert set(await entries(client)) == {banks[3], banks[5]}


async def test_a_bank_where_nothing_expires_is_never_swept(
    client: AsyncClient, clock: Clock
) -> None:
    bank_id = await new_bank(client)
    ticking = scheduler(client)
    await ticking.run_once()
    swept = spy(client.engine.store, "sweep_expired", nothing)
    for _ in range(3):
        clock.advance(SWEEP * 2)
        await ticking.run_once()
    assert swept == []
    assert bank_id not in await entries(client)


@pytest.mark.parametrize("raced_read", [0, 1])
async def test_a_write_racing_a_sweep_leaves_the_entry_no_later_than_its_expiry(
    client: AsyncClient, clock: Clock, raced_read: int
) -> None:
    """A memory created while the sweep reads the bank's earliest expiry (its first read, or the
    one after the entry was set), the read not seeing it: the entry still ends by its expiry.

    Without the second read (the first case) or the write's lowering after it stores its rows
    (the second), the entry would end a year away, at the bank's revisions' expiry."""
    bank_id = await new_bank(client)
    await remember(client, bank_id, "expired", ttl="1s")
    clock.advance(timedelta(seconds=2))
    store = client.engine.store
    real = store.earliest_expiry
    reads: list[str] = []
    written: list[str] = []

    async def racing(read_bank: str) -> datetime | None:
        found = await real(read_bank)
        reads.append(read_bank)
        if len(reads) == raced_read + 1:
            written.append(await remember(client, bank_id, "raced", ttl=LATER_THAN_A_SWEEP))
        return found

    setattr(store, "earliest_expiry", racing)  # noqa: B010 (an instance attribute, on purpose)
    await scheduler(client).run_once()
    del store.earliest_expiry
    assert await stored(client, bank_id) == ["raced"]
    assert (await entries(client))[bank_id] <= await expiry_of(client, bank_id, written[0])
    clock.advance(2 * SWEEP + timedelta(seconds=1))
    await scheduler(client).run_once()
    assert await stored(client, bank_id) == []


# memory:// and one Redis server lower the entry in the batch's own transaction: nothing can run
# between. Chroma (and a Redis Cluster, whose due sets live in other slots) use `expiry_around`.
@pytest.mark.parametrize("store_uri", ["chroma", "chroma_http"], indirect=True)
async def test_a_sweep_between_a_writes_first_lowering_and_its_rows_is_followed_by_its_second(
    uri: str, client: AsyncClient, clock: Clock
) -> None:
    """A whole tick runs after a write lowered the entry and before it stores its row: neither
    of the sweep's reads sees the row, so the write's lowering after storing it must catch up."""
    bank_id = await new_bank(client)
    await remember(client, bank_id, "expired", ttl="1s")
    clock.advance(timedelta(seconds=2))
    backend = getattr(client.engine.store, "inner", client.engine.store)  # under the tracing
    real = backend.set_due
    ticks: list[int] = []

    async def tick_after_the_first_lowering(
        bank: str, kind: str, dues: Any, *, only_earlier: bool = False
    ) -> None:
        await real(bank, kind, dues, only_earlier=only_earlier)
        if kind == EXPIRY_KIND and only_earlier and not ticks:
            ticks.append(0)
            await scheduler(client).run_once()

    setattr(backend, "set_due", tick_after_the_first_lowering)  # noqa: B010
    await remember(client, bank_id, "raced", ttl=LATER_THAN_A_SWEEP)
    del backend.set_due
    assert await stored(client, bank_id) == ["raced"]
    assert (await entries(client))[bank_id] <= await expiry_of(client, bank_id, "raced")


async def test_two_schedulers_sweeping_one_bank_agree(
    uri: str, client: AsyncClient, clock: Clock
) -> None:
    bank_id = await new_bank(client)
    for index in range(4):
        await remember(client, bank_id, f"brief-{index}", ttl="10s")
    kept = await remember(client, bank_id, "kept", ttl=f"{SWEEP.total_seconds() * 3}s")
    async with connect(uri, clock) as other:
        first, second = scheduler(client), scheduler(other)
        clock.advance(timedelta(seconds=11))
        await first.run_once()
        await second.run_once()
        await remember(client, bank_id, "brief-again", ttl="10s")
        clock.advance(timedelta(seconds=11))
        await asyncio.gather(first.run_once(), second.run_once())
    assert await stored(client, bank_id) == ["kept"]
    due = (await entries(client))[bank_id]
    assert clock.now + SWEEP <= due <= await expiry_of(client, bank_id, kept)


async def test_a_bank_deleted_while_due_loses_its_entry(client: AsyncClient, clock: Clock) -> None:
    """Deleted between the due listing and its sweep: the tick drops the entry, no error."""
    doomed, kept = await new_bank(client), await new_bank(client)
    for bank_id in (doomed, kept):
        await remember(client, bank_id, "brief", ttl="1s")
    clock.advance(timedelta(seconds=2))

    async def delete_doomed_first(bank_id: str, _now: datetime) -> None:
        if bank_id == doomed:
            await client.memory_banks.delete(name=client.engine.names.bank(doomed))

    spy(client.engine.store, "sweep_expired", delete_doomed_first)
    await scheduler(client).run_once()
    assert set(await entries(client)) == {kept}
    assert await stored(client, kept) == []


async def test_imported_rows_with_an_expiry_are_indexed_and_swept(
    client: AsyncClient, clock: Clock
) -> None:
    async with connect("memory://", clock) as source:
        bank_id = await new_bank(source)
        brief = await remember(source, bank_id, "brief", ttl="60s")
        await remember(source, bank_id, "lasting")
        buffer = io.StringIO()
        await export_bank(source.engine, bank_id, buffer.write)
        expires = await expiry_of(source, bank_id, brief)
    ticking = scheduler(client)
    await ticking.run_once()
    await import_bank(client.engine, buffer.getvalue().splitlines())
    assert (await entries(client))[bank_id] <= expires
    clock.advance(timedelta(seconds=61))
    await ticking.run_once()
    assert await stored(client, bank_id) == ["lasting"]


async def test_a_default_ttl_set_later_applies_to_later_writes(
    client: AsyncClient, clock: Clock
) -> None:
    """The bank's TTL is applied at write: rows written after the change are indexed by it."""
    bank_id = await new_bank(client)
    await remember(client, bank_id, "before")
    ticking = scheduler(client)
    await ticking.run_once()
    await client.memory_banks.update(
        name=client.engine.names.bank(bank_id),
        managed_semantic_memory_config={"ttl_config": {"default_ttl": "120s"}},
    )
    after = await remember(client, bank_id, "after")
    assert (await entries(client))[bank_id] <= await expiry_of(client, bank_id, after)
    clock.advance(timedelta(seconds=121))
    await ticking.run_once()
    assert await stored(client, bank_id) == ["before"]


async def test_expiring_revisions_are_indexed_and_swept(client: AsyncClient, clock: Clock) -> None:
    bank_id = await new_bank(client, {"memory_revision_default_ttl": LATER_THAN_A_SWEEP})
    await remember(client, bank_id, "kept")
    (memory_id,) = [record.memory_id for record in await stored_records(client, bank_id)]
    ticking = scheduler(client)
    await ticking.run_once()
    assert (await entries(client))[bank_id] == clock.now + 2 * SWEEP
    clock.advance(2 * SWEEP)
    await ticking.run_once()
    store = client.engine.store
    assert await store.list_revisions(bank_id, memory_id, clock.now - timedelta(days=1)) == []
    assert await stored(client, bank_id) == ["kept"]
    assert bank_id not in await entries(client)


async def test_rows_stored_before_the_index_are_swept_by_a_first_tick(
    client: AsyncClient, clock: Clock
) -> None:
    """An upgraded store's banks have no expiry entries; a scheduler's first tick sweeps every
    bank and indexes what is left."""
    bank_id = await new_bank(client)
    await remember(client, bank_id, "expired", ttl="1s")
    lasting = await remember(client, bank_id, "lasting", ttl="3600s")
    await client.engine.store.set_due(bank_id, EXPIRY_KIND, {EXPIRY_KEY: None})
    clock.advance(timedelta(seconds=2))
    await scheduler(client).run_once()
    assert await stored(client, bank_id) == ["lasting"]
    assert (await entries(client))[bank_id] == await expiry_of(client, bank_id, lasting)
