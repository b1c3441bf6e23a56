"""`MemoryBankService` as an ADK `BaseMemoryService`, on every backend."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
from adk_helpers import APP, count_store_writes, extraction
from google.adk.events.event import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.adk.tools.load_memory_tool import LoadMemoryResponse
from google.genai import types as genai_types

from adk_memory import AsyncClient, InvalidArgument, NotFound
from adk_memory.adk import MemoryBankEntry, MemoryBankService
from adk_memory.adk import _service as service_module
from adk_memory.engine.context import EngineContext
from adk_memory.engine.reembed import reembed
from adk_memory.testing.models import ScriptedMemoryModel


def entry(text: str, **fields: object) -> MemoryEntry:
    return MemoryEntry(
        content=genai_types.Content(role="user", parts=[genai_types.Part(text=text)]), **fields
    )


def event(author: str, text: str, *, at: float) -> Event:
    role = "user" if author == "user" else "model"
    return Event(
        author=author,
        invocation_id="inv",
        timestamp=at,
        content=genai_types.Content(role=role, parts=[genai_types.Part(text=text)]),
    )


def said(user: str, text: str, *, session_id: str) -> Session:
    """A session of `user` in which the user said `text`."""
    session = Session(id=session_id, app_name=APP, user_id=user)
    session.events.append(event("user", text, at=1.0))
    return session


def conversation_of(model: ScriptedMemoryModel, index: int) -> str:
    """The text of the `index`-th extraction request."""
    extractions = [request for request in model.requests if model.kind_of(request) == "extraction"]
    return model.prompt_text(extractions[index]).split("</conversation>")[-2]


async def test_default_bank_is_created_once_when_services_start_together(
    make_service: Callable[..., MemoryBankService], store: str
) -> None:
    services = [make_service() for _ in range(4)]
    try:
        await asyncio.gather(
            *(svc.search_memory(app_name=APP, user_id="u1", query="anything") for svc in services)
        )
        async with AsyncClient(store, embedding_model="hash-64") as client:
            banks = [bank.name async for bank in await client.memory_banks.list()]
        assert banks.count(services[0].bank_name) == 1
        assert services[0].bank_name.endswith("/reasoningEngines/adk-default")
    finally:
        for svc in services:
            await svc.aclose()


async def test_bank_created_by_another_process_meanwhile_is_used(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = AsyncClient(store, embedding_model="hash-64")
    service = MemoryBankService(client=client)
    other_process = AsyncClient(store, embedding_model="hash-64")

    async def get_just_before_the_other_process_creates_it(**kwargs: object) -> object:
        await other_process.memory_banks.create(memory_bank_id=service.bank_id)
        raise NotFound("not yet")

    monkeypatch.setattr(client.memory_banks, "get", get_just_before_the_other_process_creates_it)
    try:
        await service.add_memory(app_name=APP, user_id="u1", memories=[entry("I like green tea.")])
        assert (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories
    finally:
        await service.aclose()
        await client.aclose()
        await other_process.aclose()


async def test_search_returns_names_timestamps_metadata_and_distance(
    service: MemoryBankService,
) -> None:
    await service.add_memory(
        app_name=APP,
        user_id="u1",
        memories=[entry("I like green tea.", id="tea-1")],
        custom_metadata={"source": "profile", "weight": 2},
    )
    found = (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories
    assert len(found) == 1
    memory = found[0]
    assert isinstance(memory, MemoryBankEntry)
    assert memory.id == "tea-1"
    assert memory.name == f"{service.bank_name}/memories/tea-1"
    assert memory.author == "user"
    assert memory.content.parts[0].text == "I like green tea."
    assert memory.timestamp and memory.timestamp.startswith("20")
    assert memory.custom_metadata == {"source": "profile", "weight": 2.0}
    assert isinstance(memory.distance, float)
    # What ADK's load_memory shows the model: facts, no resource names, no distances.
    shown = json.dumps(LoadMemoryResponse(memories=found).model_dump(mode="json"))
    assert service.bank_name not in shown and "distance" not in shown
    assert "I like green tea." in shown


async def test_delete_memory_accepts_the_ids_search_returns(service: MemoryBankService) -> None:
    await service.add_memory(
        app_name=APP,
        user_id="u1",
        memories=[entry("I like green tea."), entry("I live in Berlin.")],
    )
    found = (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories
    assert len(found) == 2
    await service.delete_memory(app_name=APP, user_id="u1", memory_id=found[0].id)
    left = (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories
    assert [memory.id for memory in left] == [found[1].id]
    full_name = found[1].name  # type: ignore[attr-defined]
    await service.delete_memory(app_name=APP, user_id="u1", memory_id=full_name)
    assert not (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories


async def test_delete_memory_of_another_user_or_app_is_not_found(
    service: MemoryBankService,
) -> None:
    await service.add_memory(app_name=APP, user_id="u1", memories=[entry("I like green tea.")])
    memory_id = (
        (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories[0].id
    )
    with pytest.raises(NotFound):
        await service.delete_memory(app_name=APP, user_id="u2", memory_id=memory_id)
    with pytest.raises(NotFound):
        await service.delete_memory(app_name="other-app", user_id="u1", memory_id=memory_id)
    with pytest.raises(InvalidArgument):
        await service.delete_memory(app_name=APP, user_id="u1", memory_id=None)
    assert (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories


async def test_memories_never_cross_users_or_apps(service: MemoryBankService) -> None:
    await service.add_memory(app_name=APP, user_id="u1", memories=[entry("I like green tea.")])
    assert (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories
    assert not (await service.search_memory(app_name=APP, user_id="u2", query="tea")).memories
    assert not (await service.search_memory(app_name="other", user_id="u1", query="tea")).memories


async def test_search_honours_top_k(service: MemoryBankService) -> None:
    facts = [entry(f"Fact number {index}.") for index in range(6)]
    await service.add_memory(app_name=APP, user_id="u1", memories=facts)
    assert (
        len((await service.search_memory(app_name=APP, user_id="u1", query="fact")).memories) == 3
    )
    more = await service.search_memory(app_name=APP, user_id="u1", query="fact", top_k=5)
    assert len(more.memories) == 5
    assert not (await service.search_memory(app_name=APP, user_id="u1", query="  ")).memories


async def test_add_memory_with_consolidation_goes_through_generate(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    await service.add_memory(
        app_name=APP,
        user_id="u1",
        memories=[entry("I like green tea."), entry("I live in Berlin.")],
        custom_metadata={"enable_consolidation": True, "wait_for_completion": True},
    )
    kinds = [memory_model.kind_of(request) for request in memory_model.requests]
    assert kinds == ["consolidation"]
    found = await service.search_memory(app_name=APP, user_id="u1", query="tea", top_k=5)
    assert sorted(memory.content.parts[0].text for memory in found.memories) == [
        "I like green tea.",
        "I live in Berlin.",
    ]


async def test_add_memory_consolidation_runs_in_background_until_drained(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    await service.add_memory(
        app_name=APP,
        user_id="u1",
        memories=[entry("I like green tea.")],
        custom_metadata={"enable_consolidation": True},
    )
    await service.drain()
    assert (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories


async def test_add_memory_refuses_what_it_cannot_honour(service: MemoryBankService) -> None:
    with pytest.raises(InvalidArgument):
        await service.add_memory(app_name=APP, user_id="u1", memories=[])
    with pytest.raises(InvalidArgument):
        await service.add_memory(app_name=APP, user_id="u1", memories=[entry("  ")])
    with pytest.raises(InvalidArgument):
        await service.add_memory(
            app_name=APP,
            user_id="u1",
            memories=[entry("x")],
            custom_metadata={"revision_labels": {"a": "b"}},
        )
    with pytest.raises(InvalidArgument):
        await service.add_memory(
            app_name=APP, user_id="u1", memories=[entry("x")], custom_metadata={"note": None}
        )


async def test_add_session_to_memory_generates_from_each_event_once(
    service: MemoryBankService,
    make_service: Callable[..., MemoryBankService],
    memory_model: ScriptedMemoryModel,
) -> None:
    memory_model.extractions = [extraction("I like green tea."), extraction("I live in Berlin.")]
    session = Session(id="s1", app_name=APP, user_id="u1")
    session.events += [
        event("user", "I love green tea.", at=1.0),
        event("assistant", "Noted!", at=2.0),
    ]
    await service.add_session_to_memory(session)
    await service.add_session_to_memory(session)  # nothing new: nothing is sent, nothing generated
    await service.drain()
    session.events += [event("user", "I moved to Berlin.", at=3.0)]
    await service.add_session_to_memory(session)
    await service.drain()
    # A second process knows nothing of what this one sent; the stream still drops seen ids.
    other = make_service()
    try:
        await other.add_session_to_memory(session)
        await other.flush(app_name=APP, user_id="u1", session_id="s1")
    finally:
        await other.aclose()

    assert [memory_model.kind_of(r) for r in memory_model.requests].count("extraction") == 2
    first, second = conversation_of(memory_model, 0), conversation_of(memory_model, 1)
    assert "I love green tea." in first and "Noted!" in first
    assert "I moved to Berlin." in second and "green tea" not in second
    found = await service.search_memory(app_name=APP, user_id="u1", query="tea", top_k=5)
    assert sorted(memory.content.parts[0].text for memory in found.memories) == [
        "I like green tea.",
        "I live in Berlin.",
    ]


async def test_add_events_to_memory_appends_to_the_sessions_stream(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    memory_model.extractions = [extraction("I like green tea.")]
    events = [event("user", "I love green tea.", at=1.0), Event(author="user", invocation_id="inv")]
    await service.add_events_to_memory(
        app_name=APP,
        user_id="u1",
        events=events,
        session_id="s1",
        custom_metadata={
            "generation_trigger_config": {"generation_rule": {"idle_duration": "3600s"}}
        },
    )
    await service.drain()
    assert not memory_model.requests  # waiting for the idle trigger
    await service.flush(app_name=APP, user_id="u1", session_id="s1")
    assert (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories


async def test_add_events_to_memory_with_generate_keys_calls_generate(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    memory_model.extractions = [extraction("I like green tea.")]
    await service.add_events_to_memory(
        app_name=APP,
        user_id="u1",
        events=[event("user", "I love green tea.", at=1.0)],
        custom_metadata={"ttl": "600s", "channel": "web", "wait_for_completion": True},
    )
    found = (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories
    assert found[0].custom_metadata["channel"] == "web"


async def test_add_events_to_memory_refuses_unknown_or_mixed_keys(
    service: MemoryBankService,
) -> None:
    events = [event("user", "I love green tea.", at=1.0)]
    with pytest.raises(InvalidArgument, match="stream_idd"):
        await service.add_events_to_memory(
            app_name=APP, user_id="u1", events=events, custom_metadata={"stream_idd": "x"}
        )
    with pytest.raises(InvalidArgument):
        await service.add_events_to_memory(
            app_name=APP,
            user_id="u1",
            events=events,
            custom_metadata={"ttl": "60s", "stream_id": "x"},
        )


async def test_bank_config_creates_and_updates_the_named_bank(
    make_service: Callable[..., MemoryBankService], store: str
) -> None:
    topics = {
        "memory_topics": [
            {"custom_memory_topic": {"label": "business_feedback", "description": "Feedback."}}
        ]
    }
    first = make_service(bank="coffee-shop", customization_configs=[topics])
    second = None
    try:
        await first.search_memory(app_name=APP, user_id="u1", query="x")
        # Built once the first has ensured the bank: two services starting together race to
        # ensure it, and the later start-up's configuration is the one that stays.
        second = make_service(
            bank="coffee-shop",
            customization_configs=[{**topics, "enable_third_person_memories": True}],
        )
        await second.search_memory(app_name=APP, user_id="u1", query="x")
        async with AsyncClient(store, embedding_model="hash-64") as client:
            bank = await client.memory_banks.get(name=first.bank_name)
    finally:
        await first.aclose()
        if second is not None:
            await second.aclose()
    config = bank.managed_semantic_memory_config.unstructured_memory_configs[0]
    assert config.memory_topics[0].custom_memory_topic.label == "business_feedback"
    assert config.enable_third_person_memories is True


def test_constructor_reads_uri_env_and_service_parameters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "ADK_MEMORY_URI", "redis://localhost:6379/0?bank=from-uri&top_k=7&key_prefix=p"
    )
    service = MemoryBankService(agents_dir="/agents")  # ADK's registry passes agents_dir
    assert service.bank_id == "from-uri"
    assert service.top_k == 7
    monkeypatch.setenv("ADK_MEMORY_BANK", "from-env")
    assert MemoryBankService("chroma:///tmp/x").bank_id == "from-env"
    assert MemoryBankService("chroma:///tmp/x", bank="reasoningEngines/given").bank_id == "given"


def test_constructor_rejects_bad_arguments() -> None:
    with pytest.raises(InvalidArgument, match="bank_config"):
        MemoryBankService("memory://", customization_config=[{}])  # typo of customization_configs
    with pytest.raises(InvalidArgument):
        MemoryBankService("memory://", bank="Not A Bank")
    with pytest.raises(InvalidArgument):
        MemoryBankService("memory://", top_k=0)
    with pytest.raises(InvalidArgument):
        MemoryBankService("memory://", client=AsyncClient("memory://"))


async def test_hand_overs_of_turns_ending_together_share_one_store_write(
    make_service: Callable[..., MemoryBankService], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five sessions end a millisecond apart: the writer, idle until the first, waits for the
    others (`HANDOVER_GATHER_SECONDS`; 20 ms, here 300 ms, so that a busy machine pausing this
    thread between two sessions does not split them) and stores all five in one write. (The
    writer's timed poll, every second, takes what is handed over without gathering: moved out of
    the way here, as it split the five now and then.)"""
    monkeypatch.setattr(service_module, "HANDOVER_GATHER_SECONDS", 0.3)
    monkeypatch.setattr(service_module, "DEFAULT_POLL_SECONDS", 600.0)
    service = make_service()

    def ended(user: str) -> Session:
        return said(user, f"I am {user}.", session_id=f"s-{user}")

    try:
        await service.remember_session(ended("warm-up"))  # the writer's first pass, a poll
        await service.drain()
        writes = count_store_writes(service)
        deadline = time.monotonic() + 10
        while not (service._writer is not None and service._writer.idle):
            assert time.monotonic() < deadline, "the writer never came to rest"
            await asyncio.sleep(0.01)  # drain's own wake: its pass, gathered, is under way
        for user in ("u1", "u2", "u3", "u4", "u5"):
            await service.remember_session(ended(user))
            time.sleep(0.001)  # lets the writer's thread wake between them (the GIL is free)
        await service.drain()
        assert writes == [5]
    finally:
        await service.aclose()


async def test_a_search_reads_the_bank_once(
    make_service: Callable[..., MemoryBankService], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The query is embedded before the retrieve with the bank's model as the service last
    read it: each search reads the bank once (its retrieve's), not twice."""
    service = make_service(run_scheduler=False)  # no background reads meanwhile
    try:
        await service.add_memory(app_name=APP, user_id="u1", memories=[entry("I like tea.")])
        await service.search_memory(app_name=APP, user_id="u1", query="tea")
        reads: list[str] = []
        load_bank = EngineContext.load_bank

        async def counted(context: EngineContext, bank_id: str) -> Any:
            reads.append(bank_id)
            return await load_bank(context, bank_id)

        monkeypatch.setattr(EngineContext, "load_bank", counted)
        for query in ("tea", "green", "drinks"):
            assert (await service.search_memory(app_name=APP, user_id="u1", query=query)).memories
        assert reads == [service.bank_id] * 3
    finally:
        await service.aclose()


async def test_a_search_after_the_banks_model_changed_elsewhere_uses_the_new_model(
    service: MemoryBankService, store: str
) -> None:
    """The service remembers the bank's model (hash-64); another process re-embeds the bank
    with another (hash-32). The service's next search ranks and scores with the new model,
    exactly as a fresh client does."""
    facts = ["I like green tea.", "My dog is called Rex.", "I live in Lisbon."]
    await service.add_memory(app_name=APP, user_id="u1", memories=[entry(f) for f in facts])
    await service.search_memory(app_name=APP, user_id="u1", query="tea")
    async with AsyncClient(store, embedding_model="hash-64") as other_process:
        await reembed(other_process.engine, service.bank_id, "hash-32")
    async with AsyncClient(store, embedding_model="hash-64") as fresh:
        pager = await fresh.memory_banks.memories.retrieve(
            name=service.bank_name,
            scope={"app_name": APP, "user_id": "u1"},
            similarity_search_params={"search_query": "a dog called Rex", "top_k": 3},
        )
        expected = [(hit.memory.fact, hit.distance) for hit in pager.page if hit.memory]
    found = await service.search_memory(app_name=APP, user_id="u1", query="a dog called Rex")
    got = [(m.content.parts[0].text, m.distance) for m in found.memories]  # type: ignore[union-attr]
    assert [fact for fact, _ in got] == [fact for fact, _ in expected]
    assert [d for _, d in got] == pytest.approx([d for _, d in expected])


async def test_a_search_waiting_for_handed_over_events_does_not_wait_for_the_gathering(
    make_service: Callable[..., MemoryBankService],
    memory_model: ScriptedMemoryModel,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The writer gathers hand-overs for `HANDOVER_GATHER_SECONDS` (here a minute, and no poll
    comes meanwhile) before a pass; a search that must see the user's handed-over events ends
    that wait at once."""
    monkeypatch.setattr(service_module, "DEFAULT_POLL_SECONDS", 60.0)
    service = make_service()
    try:
        await service.search_memory(app_name=APP, user_id="warm-up", query="tea")  # started
        await service.drain()
        await asyncio.sleep(0.2)  # the writer waits for a wake, not gathering already
        monkeypatch.setattr(service_module, "HANDOVER_GATHER_SECONDS", 60.0)
        memory_model.extractions.append(extraction("I like green tea."))
        session = said("u1", "I like green tea.", session_id="s1")
        await service.add_session_to_memory(session)  # the writer wakes and gathers
        await asyncio.sleep(0.1)
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="adk_memory"):
            found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
        assert time.monotonic() - started < 30, "the search waited out the writer's gathering"
        # Nor through the store's deadline: the write was not waited out as a sick store's.
        assert "did not answer" not in caplog.text
        assert service.memory_available
        assert [m.content.parts[0].text for m in found.memories] == ["I like green tea."]  # type: ignore[index]
    finally:
        await service.aclose()
