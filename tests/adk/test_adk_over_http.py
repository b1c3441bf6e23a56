"""`MemoryBankService("http://…")`: ADK's memory service through an `adk-memory serve`.

The server owns the store, the embedder and generation; the service forwards each call, and a
search waits (bounded) for the generation this process asked the server for by polling the
ingest operation. The server here runs in a thread of this process with the scripted memory
model, so that a test scripts its answers.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from adk_helpers import APP, create_every_fact, extraction
from google.adk.events.event import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions.session import Session
from google.genai import types as genai_types

from adk_memory import AsyncClient, InvalidArgument, NotFound
from adk_memory.adk import MemoryBankService
from adk_memory.server.auth import ApiKey
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.testing.proxies import HangingProxy
from adk_memory.testing.rest_server import RunningRestServer, rest_server


@pytest.fixture
def memory_model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel(consolidate=create_every_fact)


@pytest.fixture
def server(memory_model: ScriptedMemoryModel) -> Iterator[RunningRestServer]:
    client = AsyncClient("memory://", embedding_model="hash-64", generation_model=memory_model)
    with rest_server(client) as running:
        yield running


@pytest.fixture
async def service(server: RunningRestServer) -> AsyncIterator[MemoryBankService]:
    made = MemoryBankService(server.url, embedding_model="hash-64")
    try:
        yield made
    finally:
        await made.aclose()


def event(author: str, text: str, *, at: float) -> Event:
    content = genai_types.Content(role=author, parts=[genai_types.Part(text=text)])
    return Event(author=author, content=content, timestamp=at, invocation_id="inv")


async def test_a_session_added_through_the_server_is_found_by_the_next_search(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    """add_session_to_memory asks the server to generate now; the next search waits for it."""
    memory_model.extractions = [extraction("I like green tea.")]
    session = Session(id="s1", app_name=APP, user_id="u1")
    session.events += [event("user", "I love green tea.", at=1.0)]
    await service.add_session_to_memory(session)
    found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
    assert [memory.content.parts[0].text for memory in found.memories] == ["I like green tea."]
    assert not service.warming  # no embedding model loads in this process


async def test_add_memory_search_and_delete_through_the_server(service: MemoryBankService) -> None:
    entries = [
        MemoryEntry(content=genai_types.Content(parts=[genai_types.Part(text="I like tea.")]))
    ]
    await service.add_memory(app_name=APP, user_id="u1", memories=entries)
    found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
    [memory] = found.memories
    with pytest.raises(NotFound):  # another user's id reveals nothing
        await service.delete_memory(app_name=APP, user_id="u2", memory_id=memory.id)
    await service.delete_memory(app_name=APP, user_id="u1", memory_id=memory.id)
    assert not (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories


async def test_flush_generates_buffered_events_on_the_server(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    memory_model.extractions = [extraction("I live in Berlin.")]
    await service.add_events_to_memory(
        app_name=APP,
        user_id="u1",
        events=[event("user", "I moved to Berlin.", at=1.0)],
        session_id="s1",
        custom_metadata={
            "generation_trigger_config": {"generation_rule": {"idle_duration": "3600s"}}
        },
    )
    assert not memory_model.requests  # the stream waits for its idle trigger on the server
    assert await service.flush(app_name=APP, user_id="u1", session_id="s1") == 1
    found = await service.search_memory(app_name=APP, user_id="u1", query="Berlin")
    assert [memory.content.parts[0].text for memory in found.memories] == ["I live in Berlin."]


async def test_a_generation_model_with_a_server_uri_is_refused(server: RunningRestServer) -> None:
    with pytest.raises(InvalidArgument, match="the server generates"):
        MemoryBankService(server.url, generation_model="gemini-2.5-flash")


async def test_a_server_that_went_away_is_skipped_and_opens_the_breaker(
    server: RunningRestServer,
) -> None:
    """The turn path treats a server down like a store down: searches find nothing instead of
    failing the turn, and the breaker opens (memory skipped until a probe sees it answer)."""
    made = MemoryBankService(server.url, embedding_model="hash-64", search_timeout=0.5)
    try:
        await made.search_memory(app_name=APP, user_id="u1", query="warm up")  # started
        assert made.memory_available
        server.stop()
        for _ in range(3):
            found = await made.search_memory(app_name=APP, user_id="u1", query="tea")
            assert not found.memories
        assert not made.memory_available
    finally:
        await made.aclose()


@pytest.fixture
async def hanging(server: RunningRestServer) -> AsyncIterator[HangingProxy]:
    """A proxy in front of the server that accepts and never answers until healed."""
    made = HangingProxy(int(server.url.rsplit(":", 1)[1]))
    await made.start()
    yield made
    await made.stop()


async def test_a_hung_server_costs_a_turn_one_deadline_then_memory_comes_back(
    hanging: HangingProxy,
) -> None:
    """A server that accepts and never answers: the first search waits `search_timeout`, later
    ones skip memory at once; once it answers, memory comes back without a restart."""
    service = MemoryBankService(
        f"http://127.0.0.1:{hanging.port}", embedding_model="hash-64", search_timeout=0.5
    )
    try:
        took = []
        for _ in range(3):
            started = time.perf_counter()
            found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
            took.append(time.perf_counter() - started)
            assert not found.memories
        assert not service.memory_available
        assert took[0] < 0.5 * 3 + 1.0 and max(took[1:]) < 0.5
        hanging.hung = False
        deadline = time.monotonic() + 30
        while not service.memory_available and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        assert service.memory_available, "memory did not come back after the server healed"
        entry = MemoryEntry(content=genai_types.Content(parts=[genai_types.Part(text="Tea.")]))
        await service.add_memory(app_name=APP, user_id="u1", memories=[entry])
        found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
        assert [memory.content.parts[0].text for memory in found.memories] == ["Tea."]
    finally:
        await service.aclose()


def test_adk_builds_the_service_for_a_server_uri(server: Any) -> None:
    from google.adk.cli.service_registry import ServiceRegistry

    from adk_memory.adk import register_services

    registry = ServiceRegistry()
    register_services(registry)
    made = registry.create_memory_service(server.url)
    assert isinstance(made, MemoryBankService)


async def test_a_new_session_served_by_another_process_sees_the_users_earlier_session(
    server: RunningRestServer, memory_model: ScriptedMemoryModel
) -> None:
    """Two services (two agent processes behind one server): the user's session buffered by the
    first is generated, on the server, before the second's search in a new session."""
    memory_model.extractions = [extraction("I like green tea.")]
    first = MemoryBankService(server.url, embedding_model="hash-64")
    second = MemoryBankService(server.url, embedding_model="hash-64")
    try:
        session = Session(id="s1", app_name=APP, user_id="u1")
        session.events += [event("user", "I love green tea.", at=1.0)]
        assert await first.remember_session(session)  # buffered, waiting for its idle trigger
        # Another process sees only what the first has stored: its writer stores the hand-over
        # off the turn, so wait for that (without it the second may list the stream too early).
        await first.drain()
        assert not memory_model.requests
        await second.generate_pending(app_name=APP, user_id="u1", except_session_id="s2")
        found = await second.search_memory(app_name=APP, user_id="u1", query="tea")
        assert [memory.content.parts[0].text for memory in found.memories] == ["I like green tea."]
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_service_given_a_server_client_sends_that_clients_key(
    memory_model: ScriptedMemoryModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`MemoryBankService(client=AsyncClient(url, api_key=K))` on a server with keys: the clients
    the service builds for its own loops send K too (not only `ADK_MEMORY_API_KEY`)."""
    monkeypatch.delenv("ADK_MEMORY_API_KEY", raising=False)
    key = "k-adk-service-0123456789"
    engine = AsyncClient("memory://", embedding_model="hash-64", generation_model=memory_model)
    keys = [ApiKey(name="agents", key=key, permissions=["*"])]
    memory_model.extractions = [extraction("I like green tea.")]
    with rest_server(engine, api_keys=keys) as running:
        async with AsyncClient(running.url, api_key=key) as client:
            service = MemoryBankService(client=client)
            try:
                session = Session(id="s1", app_name=APP, user_id="u1")
                session.events += [event("user", "I love green tea.", at=1.0)]
                await service.add_session_to_memory(session)
                await service.drain()
                await service.generate_pending(app_name=APP, user_id="u1")
                found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
            finally:
                await service.aclose()
    assert [memory.content.parts[0].text for memory in found.memories] == ["I like green tea."]


async def hand_over_sessions(service: MemoryBankService, count: int) -> None:
    """Hands over one event of each of user u1's sessions s0, s1, … (not stored yet)."""
    for number in range(count):
        session = Session(id=f"s{number}", app_name=APP, user_id="u1")
        session.events += [event("user", f"Note {number}.", at=1.0)]
        assert await service.remember_session(session)


async def test_hand_overs_of_many_sessions_go_to_the_server_at_once(
    server: RunningRestServer, service: MemoryBankService
) -> None:
    """A server has no `ingest_many`: the writer sends each session's events in a call of its
    own, and those of different sessions at once (one after another, 20 sessions handed over
    together waited 20 round trips before a new session could generate)."""
    banks = server.app.state.client.memory_banks
    forward = banks.ingest_events
    in_flight, most = 0, 0

    async def held(**request: Any) -> Any:
        nonlocal in_flight, most
        in_flight += 1
        most = max(most, in_flight)
        try:
            await asyncio.sleep(0.3)  # long enough for the other sessions to queue behind
            return await forward(**request)
        finally:
            in_flight -= 1

    banks.ingest_events = held
    try:
        await hand_over_sessions(service, 5)
        await service.drain()
    finally:
        del banks.ingest_events
    assert most >= 2
    async with AsyncClient(server.url) as reader:
        streams = await reader.memory_banks.list_streams(name=service.bank_name)
    assert sorted(stream.stream_id for stream in streams) == [f"s{n}" for n in range(5)]


async def test_a_session_refused_for_a_moment_is_resent_and_the_others_not_doubled(
    server: RunningRestServer, service: MemoryBankService
) -> None:
    """Hand-overs going at once, one fails (the server's store unavailable): the whole batch is
    put back and resent once the breaker's probe finds the server answering; the sessions stored
    the first time keep each event once (the stream drops the event ids it has seen)."""
    from adk_memory import StoreUnavailable

    banks = server.app.state.client.memory_banks
    forward = banks.ingest_events
    refused: list[str] = []

    async def flaky(**request: Any) -> Any:
        if request["stream_id"] == "s2" and not refused:
            refused.append("s2")
            raise StoreUnavailable("injected: the store went away for a moment")
        await asyncio.sleep(0.05)
        return await forward(**request)

    banks.ingest_events = flaky
    try:
        await hand_over_sessions(service, 5)
        async with AsyncClient(server.url) as reader:
            for _ in range(150):
                streams = await reader.memory_banks.list_streams(name=service.bank_name)
                if len(streams) == 5:
                    break
                await asyncio.sleep(0.1)
        await service.drain()
    finally:
        del banks.ingest_events
    assert refused == ["s2"]
    assert sorted((s.stream_id, s.pending_events) for s in streams) == [
        (f"s{n}", 1) for n in range(5)
    ]
