"""The due index under attack: writes during a tick, two schedulers, config changes, crashes.

Each scenario runs on every backend (`store_uri`), with a scripted model whose extraction
requests show which events were generated from, and how often.
"""

from __future__ import annotations

import asyncio
import collections
import re
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest

from adk_memory import AsyncClient, types
from adk_memory.engine.ingest import STREAM_KIND, stream_key
from adk_memory.errors import StoreUnavailable
from adk_memory.scheduler import _FLUSHES_AT_ONCE, IngestScheduler
from adk_memory.testing.models import ExtractionsTogether, ScriptedMemoryModel

_TOKEN = re.compile(r"tok-[0-9a-z-]+")
SCOPE = {"user_id": "u1"}


@pytest.fixture
def uri(store_uri: str) -> str:
    """The backend's URI; memory:// is named so that two clients share it."""
    return "memory://due-" + uuid.uuid4().hex[:8] if store_uri == "memory://" else store_uri


@pytest.fixture
def model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel.one_fact()


@pytest.fixture
async def client(uri: str, model: ScriptedMemoryModel) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(
        uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as made:
        yield made


def generated(model: ScriptedMemoryModel) -> collections.Counter[str]:
    """How many extraction requests carried each event token."""
    return collections.Counter(
        token
        for request in model.requests
        if model.kind_of(request) == "extraction"
        for token in set(_TOKEN.findall(model.prompt_text(request)))
    )


async def warmed_up(client: AsyncClient) -> IngestScheduler:
    """A scheduler past its first tick (whose maintenance indexes every stream), so its next
    ticks within `sweep_seconds` find streams through the due index alone."""
    scheduler = IngestScheduler(client.engine)
    await scheduler.run_once()
    return scheduler


async def new_bank(client: AsyncClient, rule: dict[str, Any] | None = None) -> str:
    config = {"generation_config": {"generation_trigger_config": {"generation_rule": rule}}}
    bank = await client.memory_banks.create(managed_semantic_memory_config=config if rule else None)
    return str(bank.name).rsplit("/", 1)[-1]


async def ingest(
    client: AsyncClient, bank_id: str, user: str, *tokens: str, stream_id: str = "s"
) -> None:
    """Buffers one event per token on the user's stream (no kick: only a tick flushes)."""
    events = [{"content": {"role": "user", "parts": [{"text": token}]}} for token in tokens]
    await client.engine.ingest.ingest(
        bank_id,
        scope={"user_id": user},
        stream_id=stream_id,
        source={"events": events},
        trigger_config=None,
        config=types.IngestEventsConfig(),
    )


async def test_a_stream_written_while_a_tick_runs_is_found_by_the_next(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """Written during a flush: another stream, and the flushed stream itself (after its batch)."""
    bank_id = await new_bank(client)
    scheduler = await warmed_up(client)
    await ingest(client, bank_id, "a", "tok-a1")
    late: list[asyncio.Task[None]] = []

    async def during_the_flush(kind: str) -> None:
        if kind == "extraction" and not late:
            await ingest(client, bank_id, "b", "tok-b1")
            late.append(asyncio.create_task(ingest(client, bank_id, "a", "tok-a2")))

    model.on_call = during_the_flush
    await scheduler.run_once()
    await asyncio.gather(*late)
    model.on_call = None
    await scheduler.run_once()
    assert generated(model) == {"tok-a1": 1, "tok-b1": 1, "tok-a2": 1}
    assert await client.engine.ingest.due_streams() == []


async def test_two_schedulers_on_one_store_generate_from_each_event_once(
    uri: str, model: ScriptedMemoryModel
) -> None:
    async with (
        AsyncClient(
            uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
        ) as first,
        AsyncClient(
            uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
        ) as second,
    ):
        bank_id = await new_bank(first)
        schedulers = [await warmed_up(first), await warmed_up(second)]
        tokens = [f"tok-{index}" for index in range(12)]
        for index, token in enumerate(tokens):
            await ingest(first if index % 2 else second, bank_id, f"user-{index}", token)
        for _ in range(3):
            await asyncio.gather(*(scheduler.run_once() for scheduler in schedulers))
        assert generated(model) == dict.fromkeys(tokens, 1)


async def test_a_bank_config_change_that_makes_streams_due_earlier_is_honoured(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """The change re-indexes the bank's streams: the next tick (no maintenance) flushes them."""
    bank_id = await new_bank(client, {"event_count": 100})
    await ingest(client, bank_id, "u1", "tok-waiting")
    scheduler = IngestScheduler(client.engine)
    await scheduler.run_once()  # the first tick: full maintenance, nothing is due
    assert generated(model) == {}
    await client.memory_banks.update(
        name=client.engine.names.bank(bank_id),
        managed_semantic_memory_config={
            "generation_config": {
                "generation_trigger_config": {"generation_rule": {"event_count": 1}}
            }
        },
    )
    await scheduler.run_once()
    assert generated(model) == {"tok-waiting": 1}


async def test_a_write_that_read_the_old_config_is_re_checked_after_a_config_change(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """An ingest that read the bank's config, then waited for the stream's lock (held by a
    flush) while the config changed, is re-indexed by the new config when it writes."""
    bank_id = await new_bank(client, {"fixed_interval": "3600s"})
    scheduler = await warmed_up(client)
    forced = types.IngestEventsConfig(force_flush=True)
    events = {"events": [{"content": {"role": "user", "parts": [{"text": "tok-first"}]}}]}
    await client.engine.ingest.ingest(
        bank_id, scope=SCOPE, stream_id="s", source=events, trigger_config=None, config=forced
    )
    waiting: list[asyncio.Task[None]] = []

    async def change_the_config_meanwhile(kind: str) -> None:
        if kind != "extraction" or waiting:
            return
        waiting.append(asyncio.create_task(ingest(client, bank_id, "u1", "tok-second")))
        await asyncio.sleep(0.2)  # it has read the old config and waits for the lock
        await client.memory_banks.update(
            name=client.engine.names.bank(bank_id),
            managed_semantic_memory_config={
                "generation_config": {
                    "generation_trigger_config": {"generation_rule": {"event_count": 1}}
                }
            },
        )

    model.on_call = change_the_config_meanwhile
    await scheduler.run_once()
    await asyncio.gather(*waiting)
    model.on_call = None
    await scheduler.run_once()
    assert generated(model) == {"tok-first": 1, "tok-second": 1}


async def test_an_early_entry_is_corrected_under_the_lock_and_a_later_one_is_kept(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """A config change making a stream due later leaves its entry early; a tick fixes it."""
    bank_id = await new_bank(client, {"idle_duration": "3600s"})
    await ingest(client, bank_id, "u1", "tok-idle")
    key = stream_key({"user_id": "u1"}, "s")
    store = client.engine.store
    soon = client.engine.context.clock() - timedelta(seconds=1)
    await store.set_due(bank_id, STREAM_KIND, {key: soon}, only_earlier=True)
    assert [entry.key for entry in await client.engine.ingest.due_streams()] == [key]
    await IngestScheduler(client.engine).run_once()
    assert generated(model) == {}
    (entry,) = await store.due_documents(STREAM_KIND, soon + timedelta(hours=2))
    assert entry.due > soon + timedelta(minutes=59)


async def test_a_failure_after_the_document_write_leaves_the_stream_findable(
    client: AsyncClient, model: ScriptedMemoryModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store whose due entry is written apart (Chroma; a Redis cluster) lowers it first.

    The exact write that follows the document is cut (as by a crash): the stream is still found.
    A store that writes both at once (memory://, one Redis server) has no such step to cut.
    """
    bank_id = await new_bank(client)
    scheduler = await warmed_up(client)
    store = client.engine.store
    backend = getattr(store, "inner", store)  # under the tracing wrapper
    exact_set = backend.set_due

    async def crash_on_exact_write(
        bank: str, kind: str, dues: Any, *, only_earlier: bool = False
    ) -> None:
        if not only_earlier:
            raise StoreUnavailable("cut after the document was written")
        await exact_set(bank, kind, dues, only_earlier=only_earlier)

    monkeypatch.setattr(backend, "set_due", crash_on_exact_write)
    try:
        await ingest(client, bank_id, "u1", "tok-cut")
    except StoreUnavailable:
        pass  # the document is stored; only the exact index write was cut
    monkeypatch.undo()
    assert await store.get_document(bank_id, STREAM_KIND, stream_key({"user_id": "u1"}, "s"))
    await scheduler.run_once()
    assert generated(model) == {"tok-cut": 1}


async def test_a_stream_stored_before_the_index_is_flushed_by_a_first_tick(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """An upgraded store's streams have no entries; a scheduler's first tick indexes them."""
    bank_id = await new_bank(client)
    now = client.engine.context.clock().isoformat()
    event = {"content": {"role": "user", "parts": [{"text": "tok-old"}]}, "event_time": now}
    legacy = {
        "scope": {"user_id": "u1"},
        "stream_id": "s",
        "pending": [event],
        "processed": [],
        "seen_ids": [],
        "operations": [],
        "created_at": now,
    }
    await client.engine.store.put_document(bank_id, STREAM_KIND, "legacy", legacy)
    assert await client.engine.ingest.due_streams() == []
    await IngestScheduler(client.engine).run_once()
    assert generated(model) == {"tok-old": 1}


async def test_streams_of_a_scope_are_read_by_scope(client: AsyncClient) -> None:
    """`streams(scope=...)` lists only that scope's pending streams, in that bank."""
    bank_id = await new_bank(client, {"event_count": 100})
    other_bank = await new_bank(client, {"event_count": 100})
    await ingest(client, bank_id, "u1", "tok-1")
    await ingest(client, bank_id, "u2", "tok-2")
    await ingest(client, bank_id, "U1", "tok-3")
    await ingest(client, other_bank, "u1", "tok-4")
    found = await client.engine.ingest.streams(bank_id, scope={"user_id": "u1"})
    assert [(status.scope, status.pending_events) for status in found] == [({"user_id": "u1"}, 1)]
    assert len(await client.engine.ingest.streams(bank_id)) == 3


async def test_maintenance_visits_a_share_of_the_banks_per_tick(
    client: AsyncClient,
) -> None:
    """All banks in a scheduler's first tick, then banks x poll / sweep_seconds per tick: each
    visit restores the entries of the bank's streams (here removed, as by a crash)."""
    banks = [await new_bank(client, {"idle_duration": "3600s"}) for _ in range(6)]
    key = stream_key({"user_id": "u1"}, "s")
    for bank_id in banks:
        await ingest(client, bank_id, "u1", "tok")
    scheduler = IngestScheduler(client.engine, poll_seconds=0.1, sweep_seconds=0.3)
    store = client.engine.store

    async def indexed() -> list[int]:
        later = client.engine.context.clock() + timedelta(days=1)
        found = {entry.bank_id for entry in await store.due_documents(STREAM_KIND, later)}
        return [int(bank_id in found) for bank_id in banks]

    async def forget_entries() -> None:
        for bank_id in banks:
            await store.set_due(bank_id, STREAM_KIND, {key: None})

    await forget_entries()
    await scheduler.run_once()
    assert await indexed() == [1] * 6
    await forget_entries()
    await asyncio.sleep(0.3)  # the next cycle: 3 ticks of 2 banks
    await scheduler.run_once()
    assert await indexed() == [1, 1, 0, 0, 0, 0]
    await scheduler.run_once()
    assert await indexed() == [1, 1, 1, 1, 0, 0]


async def test_a_tick_flushes_its_due_streams_eight_at_a_time(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """Ten streams are due. Each extraction waits until eight are in flight: a tick that flushed
    one stream after the other (with a real model, seconds each) would leave the first waiting
    alone, and the last stream its whole length late; one without a bound would have all ten
    in flight."""
    bank_id = await new_bank(client)
    scheduler = await warmed_up(client)
    tokens = [f"tok-{index}" for index in range(10)]
    for token in tokens:
        await ingest(client, bank_id, token, token)
    model.on_call = together = ExtractionsTogether(_FLUSHES_AT_ONCE)
    await scheduler.run_once()
    assert (together.most, generated(model)) == (_FLUSHES_AT_ONCE, dict.fromkeys(tokens, 1))
    assert await client.engine.ingest.due_streams() == []


async def test_two_due_streams_of_one_scope_flushed_at_once_consolidate_one_after_the_other(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """Two sessions of one user are due in one tick and flushed at once. Their extractions
    overlap; their consolidations take the scope's lock in turn, so the second sees the first's
    memory as a candidate, and each event is generated from once."""
    bank_id = await new_bank(client)
    scheduler = await warmed_up(client)
    for stream_id in ("s1", "s2"):
        await ingest(client, bank_id, SCOPE["user_id"], f"tok-{stream_id}", stream_id=stream_id)

    async def slowly(kind: str) -> None:
        await asyncio.sleep(0.2)  # both extractions are in flight together

    model.on_call = slowly
    await scheduler.run_once()
    assert generated(model) == {"tok-s1": 1, "tok-s2": 1}
    consolidations = [
        model.prompt_text(request)
        for request in model.requests
        if model.kind_of(request) == "consolidation"
    ]
    existing = [text.split("EXISTING MEMORIES:", 1)[-1] for text in consolidations]
    assert [('"A fact."' in listed) for listed in existing] == [False, True]
    assert await client.engine.ingest.due_streams() == []
