"""Issue 14, cases 1-3, from the attacker's side, on every backend.

1. A reused memory id never hands one scope's history to another (create, rollback, revisions,
   import). 2. A profile's id cannot be squatted, and generate trusts no record that is not the
   scope's profile. 3. No concurrent write undoes a delete or overwrites a newer write blind
   (update, delete, rollback, purge, generate).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from adk_memory import AlreadyExists, AsyncClient, InvalidArgument, NotFound, types
from adk_memory.embeddings import HashEmbedder
from adk_memory.engine.profiles import profile_memory_id
from adk_memory.errors import Aborted, FailedPrecondition
from adk_memory.names import Names
from adk_memory.scope import scope_key
from adk_memory.store import MemoryRecord, RevisionRecord, WriteBatch
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.transfer import export_bank, import_bank

ALICE = {"user_id": "alice"}
MALLORY = {"user_id": "mallory"}
PROFILE_CONFIG = {
    "structured_memory_configs": [
        {
            "scope_keys": ["user_id"],
            "schema_configs": [
                {
                    "id": "user-profile",
                    "schema": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
                }
            ],
        }
    ]
}


@pytest.fixture
def model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel()


@pytest.fixture
async def client(store_uri: str, model: ScriptedMemoryModel) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(store_uri, embedding_model="hash-64", generation_model=model) as made:
        yield made


@pytest.fixture
async def bank(client: AsyncClient) -> str:
    return str((await client.memory_banks.create()).name)


async def facts_of(client: AsyncClient, bank: str, scope: dict[str, str]) -> list[str]:
    pager = await client.memory_banks.memories.retrieve(name=bank, scope=scope)
    return sorted([hit.memory.fact async for hit in pager if hit.memory and hit.memory.fact])


async def revision_facts(client: AsyncClient, name: str) -> list[str]:
    pager = await client.memory_banks.memories.revisions.list(name=name)
    return [revision.fact async for revision in pager if revision.fact]


async def create(
    client: AsyncClient, bank: str, fact: str, scope: dict[str, str], memory_id: str, **config: Any
) -> None:
    memories = client.memory_banks.memories
    await memories.create(
        name=bank, fact=fact, scope=scope, config={"memory_id": memory_id, **config}
    )


def said(text: str) -> dict[str, Any]:
    """A `direct_contents_source` of one user message."""
    return {"events": [{"content": {"role": "user", "parts": [{"text": text}]}}]}


def direct(*facts: str) -> dict[str, Any]:
    """A `direct_memories_source`."""
    return {"direct_memories": [{"fact": fact} for fact in facts]}


def paused_embedding(
    monkeypatch: pytest.MonkeyPatch, marker: str
) -> tuple[asyncio.Event, asyncio.Event]:
    """(reached, release): embedding a text containing `marker` waits for `release`."""
    reached, release = asyncio.Event(), asyncio.Event()
    original = HashEmbedder._embed

    async def embed(self: HashEmbedder, texts: list[str], *, query: bool) -> Any:
        if any(marker in text for text in texts):
            reached.set()
            await release.wait()
        return await original(self, texts, query=query)

    monkeypatch.setattr(HashEmbedder, "_embed", embed)
    return reached, release


async def while_paused(
    call: Awaitable[Any],
    reached: asyncio.Event,
    release: asyncio.Event,
    meanwhile: Callable[[], Awaitable[Any]],
) -> Any:
    """Runs `call` until it pauses, runs `meanwhile`, then lets `call` finish (its result/error)."""
    task = asyncio.ensure_future(call)
    await asyncio.wait_for(reached.wait(), 30)
    await meanwhile()
    release.set()
    return (await asyncio.gather(task, return_exceptions=True))[0]


# 1. Reused memory ids


async def test_a_reused_memory_id_never_hands_over_another_scopes_history(
    client: AsyncClient, bank: str
) -> None:
    """Alice's deleted `note` keeps its revisions; Mallory cannot take the id, and nothing he can
    do (create, rollback, list) puts Alice's fact into his scope."""
    memories = client.memory_banks.memories
    name = f"{bank}/memories/note"
    await create(client, bank, "Alice's PIN is 4711.", ALICE, "note")
    await memories.update(name=name, fact="Alice's PIN is 1234.")
    await memories.delete(name=name)
    with pytest.raises(AlreadyExists, match="revisions are kept for rollback") as refused:
        await create(client, bank, "Mallory's note.", MALLORY, "note")
    assert "frees up" not in str(refused.value)  # when Alice's revisions expire is hers
    pager = await memories.revisions.list(name=name)
    revisions = [revision async for revision in pager]
    facts = [revision.fact for revision in revisions]
    assert facts == ["Alice's PIN is 1234.", "Alice's PIN is 4711."]
    oldest = revisions[-1].name.rsplit("/", 1)[-1]
    await memories.rollback(name=name, target_revision_id=oldest)
    assert (await memories.get(name=name)).scope == ALICE
    assert await facts_of(client, bank, MALLORY) == []
    assert await facts_of(client, bank, ALICE) == ["Alice's PIN is 4711."]


async def test_the_refusal_says_when_the_id_frees_up_to_its_own_scope_only(
    client: AsyncClient, bank: str
) -> None:
    memories = client.memory_banks.memories
    config = {"memory_id": "note", "revision_ttl": "3600s"}
    await memories.create(name=bank, fact="Alice's fact.", scope=ALICE, config=config)
    await memories.delete(name=f"{bank}/memories/note")
    with pytest.raises(AlreadyExists, match="frees up at 20") as refused:
        await create(client, bank, "Alice's again.", ALICE, "note")
    with pytest.raises(AlreadyExists) as foreign:
        await create(client, bank, "Mallory's.", MALLORY, "note")
    assert refused.value.field == foreign.value.field == "config.memory_id"
    assert " 20" not in str(foreign.value) and "frees up" not in str(foreign.value)


async def test_an_id_without_revisions_starts_a_fresh_history(
    client: AsyncClient, bank: str
) -> None:
    """With revisions disabled nothing outlives the memory, so its id is free once deleted."""
    memories = client.memory_banks.memories
    no_history = {"memory_id": "note", "disable_memory_revisions": True}
    await memories.create(name=bank, fact="Alice's fact.", scope=ALICE, config=no_history)
    await memories.delete(name=f"{bank}/memories/note")
    await create(client, bank, "Mallory's fact.", MALLORY, "note")
    assert await revision_facts(client, f"{bank}/memories/note") == ["Mallory's fact."]
    assert await facts_of(client, bank, ALICE) == []


async def test_another_scopes_revisions_under_an_id_are_never_shown_or_restored(
    client: AsyncClient, bank: str
) -> None:
    """A store holding another scope's revisions under a live memory's id (as a create racing a
    delete could leave it): list, get and rollback see only the memory's own scope."""
    bank_id = Names.parse_bank(bank)
    store = client.engine.context.store
    now = client.engine.context.clock()
    alice = RevisionRecord(
        "note", "00000000000000001", scope_key(ALICE), ALICE, "Alice's secret.", now
    )
    await store.apply(bank_id, WriteBatch(revisions=(alice,)))
    mallory = MemoryRecord(
        "note", scope_key(MALLORY), MALLORY, "Mallory's fact.", (1.0,) + (0.0,) * 63, now, now
    )
    await store.apply(bank_id, WriteBatch(upserts=(mallory,)))
    memories = client.memory_banks.memories
    name = f"{bank}/memories/note"
    assert await revision_facts(client, name) == []
    with pytest.raises(NotFound):
        await memories.revisions.get(name=f"{name}/revisions/{alice.revision_id}")
    with pytest.raises(NotFound):
        await memories.rollback(name=name, target_revision_id=alice.revision_id)
    assert await facts_of(client, bank, MALLORY) == ["Mallory's fact."]


async def test_import_never_merges_another_scopes_records_into_an_id(
    client: AsyncClient, bank: str
) -> None:
    memories = client.memory_banks.memories
    await create(client, bank, "Alice's fact.", ALICE, "note")
    other = str((await client.memory_banks.create()).name)
    await create(client, other, "Mallory's fact.", MALLORY, "note")
    await memories.delete(name=f"{other}/memories/note")
    lines: list[str] = []
    await export_bank(client.engine, Names.parse_bank(bank), lines.append)
    with pytest.raises(AlreadyExists, match="'note' would hold records of 2 scopes"):
        await import_bank(client.engine, lines, bank_id=Names.parse_bank(other), merge=True)
    assert await facts_of(client, other, ALICE) == []
    assert await revision_facts(client, f"{other}/memories/note") == ["Mallory's fact."]


# 2. Profiles


async def test_a_profile_id_cannot_be_squatted(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """Mallory knows Alice's user id and the schema id: he can neither take her profile's id nor
    make her next generate write her profile into his scope."""
    made = await client.memory_banks.create(managed_semantic_memory_config=PROFILE_CONFIG)
    bank = str(made.name)
    memories = client.memory_banks.memories
    squat = profile_memory_id(ALICE, "user-profile")
    with pytest.raises(InvalidArgument, match="reserved for structured profiles"):
        await create(client, bank, "mine", MALLORY, squat)
    legacy = "p" + squat.rsplit("-", 1)[-1][:30]  # the id form profiles had before
    await create(client, bank, "Mallory's bait.", MALLORY, legacy)
    model.extractions.append({"memories": [], "profiles": {"user-profile": {"city": "Oslo"}}})
    await memories.generate(
        name=bank,
        scope=ALICE,
        direct_contents_source=said("I live in Oslo."),
    )
    alice = await memories.retrieve_profiles(name=bank, scope=ALICE)
    assert alice.profiles["user-profile"].profile == {"city": "Oslo"}
    assert (await memories.retrieve_profiles(name=bank, scope=MALLORY)).profiles == {}
    assert (await memories.get(name=f"{bank}/memories/{legacy}")).fact == "Mallory's bait."
    assert await facts_of(client, bank, MALLORY) == ["Mallory's bait."]


async def test_generate_trusts_no_record_at_a_profile_id_that_is_not_the_scopes_profile(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """A record of another scope or type at the profile's id (only a crafted import can put one
    there) is refused, never taken for the profile nor overwritten."""
    made = await client.memory_banks.create(managed_semantic_memory_config=PROFILE_CONFIG)
    bank = str(made.name)
    bank_id = Names.parse_bank(bank)
    now = client.engine.context.clock()
    crafted = MemoryRecord(
        profile_memory_id(ALICE, "user-profile"),
        scope_key(MALLORY),
        MALLORY,
        "Mallory's record.",
        (1.0,) + (0.0,) * 63,
        now,
        now,
    )
    await client.engine.context.store.apply(bank_id, WriteBatch(upserts=(crafted,)))
    model.extractions.append({"memories": [], "profiles": {"user-profile": {"city": "Oslo"}}})
    with pytest.raises(FailedPrecondition, match="not that profile"):
        await client.memory_banks.memories.generate(
            name=bank,
            scope=ALICE,
            direct_contents_source=said("Oslo."),
        )
    [stored] = await client.engine.context.store.get_memories(bank_id, [crafted.memory_id], now)
    assert stored.fact == "Mallory's record." and stored.scope == MALLORY
    profiles = await client.memory_banks.memories.retrieve_profiles(name=bank, scope=ALICE)
    assert profiles.profiles == {}


async def test_a_profile_rolls_back_whole_and_is_never_rolled_back_into_a_plain_memory(
    client: AsyncClient, model: ScriptedMemoryModel
) -> None:
    """Rollback restores a profile's JSON with its text; a deleted profile is not recreated as a
    natural-language memory under the reserved id (generate would then refuse the scope)."""
    made = await client.memory_banks.create(managed_semantic_memory_config=PROFILE_CONFIG)
    bank = str(made.name)
    memories = client.memory_banks.memories
    for city in ("Oslo", "Bergen"):
        model.extractions.append({"memories": [], "profiles": {"user-profile": {"city": city}}})
        await memories.generate(name=bank, scope=ALICE, direct_contents_source=said(city))
    name = f"{bank}/memories/{profile_memory_id(ALICE, 'user-profile')}"
    pager = await memories.revisions.list(name=name)
    oldest = [revision async for revision in pager][-1].name.rsplit("/", 1)[-1]
    await memories.rollback(name=name, target_revision_id=oldest)
    profiles = await memories.retrieve_profiles(name=bank, scope=ALICE)
    assert profiles.profiles["user-profile"].profile == {"city": "Oslo"}
    await memories.delete(name=name)
    with pytest.raises(FailedPrecondition, match="deleted structured profile"):
        await memories.rollback(name=name, target_revision_id=oldest)
    model.extractions.append({"memories": [], "profiles": {"user-profile": {"city": "Tromsø"}}})
    await memories.generate(name=bank, scope=ALICE, direct_contents_source=said("Tromsø"))
    profiles = await memories.retrieve_profiles(name=bank, scope=ALICE)
    assert profiles.profiles["user-profile"].profile == {"city": "Tromsø"}


# 3. Races


async def test_an_update_racing_a_delete_never_revives_the_memory(
    client: AsyncClient, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = client.memory_banks.memories
    await create(client, bank, "old fact", ALICE, "m1")
    name = f"{bank}/memories/m1"
    reached, release = paused_embedding(monkeypatch, "NEW")
    outcome = await while_paused(
        memories.update(name=name, fact="NEW fact"),
        reached,
        release,
        lambda: memories.delete(name=name),
    )
    assert isinstance(outcome, Aborted) and "deleted" in str(outcome)
    with pytest.raises(NotFound):
        await memories.get(name=name)
    assert "NEW fact" not in await revision_facts(client, name)
    assert await facts_of(client, bank, ALICE) == []


async def test_gathered_update_and_delete_always_leave_the_memory_deleted(
    client: AsyncClient, bank: str
) -> None:
    memories = client.memory_banks.memories
    for round_ in range(4):
        name = f"{bank}/memories/g{round_}"
        await create(client, bank, "before", ALICE, f"g{round_}")
        calls = [memories.update(name=name, fact=f"after {round_}"), memories.delete(name=name)]
        ordered = calls if round_ % 2 else calls[::-1]
        results = await asyncio.gather(*ordered, return_exceptions=True)
        errors = [result for result in results if isinstance(result, BaseException)]
        assert all(isinstance(error, (Aborted, NotFound)) for error in errors), errors
        with pytest.raises(NotFound):
            await memories.get(name=name)
    assert await facts_of(client, bank, ALICE) == []


async def test_an_update_racing_an_update_is_retried_on_the_newer_memory(
    client: AsyncClient, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two updates of different fields: both land (serially), neither overwrites the other."""
    memories = client.memory_banks.memories
    await create(client, bank, "old fact", ALICE, "m1")
    name = f"{bank}/memories/m1"
    reached, release = paused_embedding(monkeypatch, "NEW")
    outcome = await while_paused(
        memories.update(name=name, fact="NEW fact"),
        reached,
        release,
        lambda: memories.update(name=name, config={"metadata": {"k": {"string_value": "v"}}}),
    )
    assert not isinstance(outcome, BaseException), outcome
    stored = await memories.get(name=name)
    assert stored.fact == "NEW fact" and stored.metadata["k"].string_value == "v"


async def test_a_delete_racing_an_update_is_retried_and_the_memory_is_gone(
    client: AsyncClient, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An update lands between the delete's read and its write: the delete reads again and
    deletes the updated memory (the caller asked for it gone)."""
    memories = client.memory_banks.memories
    await create(client, bank, "old fact", ALICE, "m1")
    name = f"{bank}/memories/m1"
    store = client.engine.context.store
    apply = store.apply
    attempts: list[WriteBatch] = []

    async def update_first(bank_id: str, batch: WriteBatch) -> None:
        attempts.append(batch)
        if len(attempts) == 1:
            await memories.update(name=name, fact="newer fact")
        await apply(bank_id, batch)

    monkeypatch.setattr(store, "apply", update_first)
    await memories.delete(name=name)
    delete_attempts = [batch for batch in attempts if batch.deletes]
    assert len(delete_attempts) == 2  # the first, expecting the old version, was refused
    with pytest.raises(NotFound):
        await memories.get(name=name)


async def test_a_rollback_racing_an_update_is_aborted_and_the_update_stands(
    client: AsyncClient, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An update lands between the rollback's read of the memory and its write."""
    memories = client.memory_banks.memories
    await create(client, bank, "FIRST fact", ALICE, "m1")
    name = f"{bank}/memories/m1"
    await memories.update(name=name, fact="second fact")
    pager = await memories.revisions.list(name=name)
    first = [revision async for revision in pager][-1].name.rsplit("/", 1)[-1]
    store = client.engine.context.store
    apply = store.apply

    async def update_first(bank_id: str, batch: WriteBatch) -> None:
        monkeypatch.setattr(store, "apply", apply)
        await memories.update(name=name, fact="third fact")
        await apply(bank_id, batch)

    monkeypatch.setattr(store, "apply", update_first)
    with pytest.raises(Aborted, match="changed"):
        await memories.rollback(name=name, target_revision_id=first)
    assert (await memories.get(name=name)).fact == "third fact"


async def test_a_purge_never_deletes_a_memory_that_stopped_matching_meanwhile(
    client: AsyncClient, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = client.memory_banks.memories
    tagged = {"metadata": {"tier": {"string_value": "trash"}}}
    for memory_id in ("a", "b"):
        await create(client, bank, f"fact {memory_id}", ALICE, memory_id, **tagged)
    store = client.engine.context.store
    scan = store.scan
    kept = {"metadata": {"tier": {"string_value": "keep"}}}

    async def scan_then_retag(*args: Any, **kwargs: Any) -> Any:
        found = await scan(*args, **kwargs)
        monkeypatch.setattr(store, "scan", scan)
        await memories.update(name=f"{bank}/memories/b", config=kept)
        return found

    monkeypatch.setattr(store, "scan", scan_then_retag)
    purged = await memories.purge(name=bank, filter='metadata.tier="trash"', force=True)
    assert purged.response.purge_count == 1
    assert await facts_of(client, bank, ALICE) == ["fact b"]


async def test_generate_never_revives_a_memory_deleted_while_the_model_ran(
    client: AsyncClient, bank: str, model: ScriptedMemoryModel
) -> None:
    memories = client.memory_banks.memories
    await create(client, bank, "I like tea.", ALICE, "tea")
    name = f"{bank}/memories/tea"

    async def delete_during_consolidation(kind: str) -> None:
        if kind == "consolidation":
            await memories.delete(name=name)

    model.on_call = delete_during_consolidation
    model.consolidations.append(
        {
            "actions": [
                {"fact_index": 0, "action": "UPDATE", "memory_id": "tea", "fact": "I love tea."}
            ]
        }
    )
    operation = await memories.generate(
        name=bank, scope=ALICE, direct_memories_source=direct("I love tea.")
    )
    assert not (operation.response and operation.response.generated_memories)
    with pytest.raises(NotFound):
        await memories.get(name=name)
    assert "I love tea." not in await revision_facts(client, name)


async def test_generate_never_overwrites_an_update_made_while_the_model_ran(
    client: AsyncClient, bank: str, model: ScriptedMemoryModel
) -> None:
    memories = client.memory_banks.memories
    await create(client, bank, "I like tea.", ALICE, "tea")
    name = f"{bank}/memories/tea"

    async def update_during_consolidation(kind: str) -> None:
        if kind == "consolidation":
            await memories.update(name=name, fact="I drink only coffee now.")

    model.on_call = update_during_consolidation
    model.consolidations.append(
        {
            "actions": [
                {"fact_index": 0, "action": "UPDATE", "memory_id": "tea", "fact": "I love tea."},
                {"fact_index": 1, "action": "CREATE", "fact": "I live in Oslo."},
            ]
        }
    )
    operation = await memories.generate(
        name=bank,
        scope=ALICE,
        direct_memories_source=direct("I love tea.", "I live in Oslo."),
    )
    assert [(g.action, g.memory.fact) for g in operation.response.generated_memories] == [
        (types.GenerateMemoriesResponseGeneratedMemoryAction.CREATED, "I live in Oslo.")
    ]
    assert (await memories.get(name=name)).fact == "I drink only coffee now."
    assert await facts_of(client, bank, ALICE) == ["I drink only coffee now.", "I live in Oslo."]


async def test_adk_add_memory_cannot_hand_an_entry_id_to_another_user(store_uri: str) -> None:
    """ADK's `add_memory` takes the memory id from `MemoryEntry.id`: the same rule applies."""
    from google.adk.memory.memory_entry import MemoryEntry
    from google.genai import types as genai_types

    from adk_memory.adk import MemoryBankService

    def entry(text: str) -> MemoryEntry:
        content = genai_types.Content(role="user", parts=[genai_types.Part(text=text)])
        return MemoryEntry(id="note", content=content)

    # A service serves every event loop, so its store must be reachable by name (memory://NAME).
    uri = f"memory://integrity-{uuid.uuid4().hex[:10]}" if store_uri == "memory://" else store_uri
    service = MemoryBankService(uri, embedding_model="hash-64")
    alice = [entry("Alice's PIN is 4711.")]
    await service.add_memory(app_name="app", user_id="alice", memories=alice)
    await service.delete_memory(app_name="app", user_id="alice", memory_id="note")
    with pytest.raises(AlreadyExists, match="kept for rollback"):
        await service.add_memory(app_name="app", user_id="mallory", memories=[entry("Mallory's.")])
    found = await service.search_memory(app_name="app", user_id="mallory", query="PIN")
    await service.aclose()
    assert found.memories == []


async def test_a_generate_whose_redis_lock_lease_lapsed_cannot_commit(redis_url: str) -> None:
    """The scope lock's lease runs out during a long model call and another holder takes it
    (simulated by overwriting the lock's token): the stale holder's batch is `Aborted`, with
    nothing written."""
    import uuid

    import redis.asyncio as aredis

    prefix = f"t{uuid.uuid4().hex[:10]}"
    model = ScriptedMemoryModel()
    uri = f"{redis_url}?key_prefix={prefix}&index_algorithm=FLAT"
    thief = aredis.Redis.from_url(redis_url)

    async def take_over_the_lock(kind: str) -> None:
        if kind == "consolidation":
            [key] = [key async for key in thief.scan_iter(match=f"{prefix}:lock:generate:*")]
            await thief.set(key, "the-next-holder")

    model.on_call = take_over_the_lock
    late = {"fact_index": 0, "action": "CREATE", "fact": "late"}
    model.consolidations.append({"actions": [late]})
    try:
        async with AsyncClient(uri, embedding_model="hash-64", generation_model=model) as client:
            bank = str((await client.memory_banks.create()).name)
            memories = client.memory_banks.memories
            await memories.create(name=bank, fact="an existing memory", scope=ALICE)
            with pytest.raises(Aborted, match="no longer held"):
                await memories.generate(
                    name=bank, scope=ALICE, direct_memories_source=direct("late")
                )
            assert await facts_of(client, bank, ALICE) == ["an existing memory"]
    finally:
        await thief.aclose()


async def test_an_ingest_flush_whose_stream_lock_lapsed_writes_nothing_and_loses_no_event(
    redis_url: str,
) -> None:
    """The stream lock is taken over while the model extracts: the flush's batch (memories and
    stream together) is refused, the events stay pending, and the next flush generates from them
    exactly once."""
    import uuid

    import redis.asyncio as aredis

    prefix = f"t{uuid.uuid4().hex[:10]}"
    model = ScriptedMemoryModel(
        consolidate=lambda request: {"actions": [{"fact_index": 0, "action": "CREATE"}]}
    )
    thief = aredis.Redis.from_url(redis_url)
    stolen: list[bytes] = []

    async def take_over_the_stream_lock(kind: str) -> None:
        if kind == "extraction" and not stolen:
            [key] = [key async for key in thief.scan_iter(match=f"{prefix}:lock:stream:*")]
            await thief.set(key, "the-next-holder", px=100)
            stolen.append(key)

    model.on_call = take_over_the_stream_lock
    model.extractions += [
        {"memories": [{"fact": "I like tea.", "topics": ["USER_PREFERENCES"]}]} for _ in range(2)
    ]
    uri = f"{redis_url}?key_prefix={prefix}&index_algorithm=FLAT"
    flush = {"force_flush": True, "wait_for_completion": True}
    events = {"events": [{"content": {"role": "user", "parts": [{"text": "I like tea"}]}}]}
    try:
        async with AsyncClient(
            uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
        ) as client:
            banks = client.memory_banks
            bank = str((await banks.create()).name)
            first = await banks.ingest_events(
                name=bank, scope=ALICE, stream_id="s", direct_contents_source=events, config=flush
            )
            assert stolen and not first.done
            assert await facts_of(client, bank, ALICE) == []
            await asyncio.sleep(0.2)  # the thief's lease ends
            await banks.ingest_events(
                name=bank, scope=ALICE, stream_id="s", direct_contents_source={}, config=flush
            )
            assert await facts_of(client, bank, ALICE) == ["I like tea."]
            assert (await client.operations.get(name=first.name)).done
            assert len(model.requests) == 4  # two flushes, each one extraction + one consolidation
    finally:
        await thief.aclose()
