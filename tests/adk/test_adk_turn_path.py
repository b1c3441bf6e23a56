"""The ADK turn path with a sick store, many users and odd input (issue 29), through real Runners.

A store that accepts connections and never answers, then heals; a typo in the service's URI;
a message longer than retrieve's query limit; a turn carrying an image. Timings are figures of
`benchmarks/adk_users.py`; these tests assert behaviour.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from adk_helpers import (
    APP,
    agent,
    ask,
    count_store_writes,
    create_every_fact,
    extraction,
    runner_for,
)
from adk_memory_chroma import _child as chroma_child
from adk_memory_chroma import _store as chroma_store
from google.adk.agents import LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types as genai_types

from adk_memory import AsyncClient, InvalidArgument
from adk_memory.adk import MemoryBankPlugin, MemoryBankService
from adk_memory.adk import _service as service_module
from adk_memory.engine.ingest import stream_key
from adk_memory.testing.agent_models import ScriptedAgentModel
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.testing.processes import children_running, stopped
from adk_memory.testing.proxies import HangingProxy

TEA = "I like green tea."
BERLIN = "I live in Berlin."


def extract_from_prompt(request: LlmRequest) -> dict[str, Any]:
    conversation = ScriptedMemoryModel.prompt_text(request).split("</conversation>")[-2]
    cues = {"green tea": TEA, "Berlin": BERLIN}
    return extraction(*(fact for cue, fact in cues.items() if cue in conversation))


async def remember_now(callback_context: CallbackContext) -> None:
    await callback_context.add_session_to_memory()


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[HangingProxy]:
    made = HangingProxy(int(redis_url.split("//")[1].split("/")[0].rsplit(":", 1)[1]))
    await made.start()
    yield made
    await made.stop()


async def _taught_exactly_once(
    runner: Runner, model: ScriptedAgentModel, service: MemoryBankService
) -> None:
    """u1's new session sees the tea, and u1's memories are the tea and Berlin, each once."""
    await ask(runner, user_id="u1", text="What do I like?")
    assert TEA in ScriptedAgentModel.request_text(model.requests[-1])
    await service.generate_pending(app_name=APP, user_id="u1")
    await service.drain()
    found = await service.search_memory(app_name=APP, user_id="u1", query="me", top_k=10)
    facts = sorted(entry.content.parts[0].text for entry in found.memories)  # type: ignore[union-attr]
    assert facts == sorted([TEA, BERLIN])  # each once: nothing lost, nothing twice


def _runner(pattern: str, model: ScriptedAgentModel, service: MemoryBankService) -> Runner:
    if pattern == "plugin":
        return runner_for(agent(model), service, plugins=[MemoryBankPlugin()])
    root = LlmAgent(
        name="assistant",
        model=model,
        instruction="Help.",
        tools=[PreloadMemoryTool()],
        after_agent_callback=remember_now,
    )
    return runner_for(root, service)


@pytest.mark.parametrize("pattern", ["plugin", "callback"])
async def test_a_hung_store_is_skipped_then_memory_comes_back_by_itself_exactly_once(
    proxy: HangingProxy, pattern: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Hung from the start: every turn completes, the first waits one deadline, later turns skip
    memory at once (logged once); the events handed over meanwhile wait in the process. Healed:
    memory comes back without a restart, and each fact is generated exactly once."""
    prefix = f"hung-{uuid.uuid4().hex[:8]}"
    memory_model = ScriptedMemoryModel(extract=extract_from_prompt, consolidate=create_every_fact)
    service = MemoryBankService(
        f"redis://127.0.0.1:{proxy.port}/0?key_prefix={prefix}",
        bank=prefix,  # the log lines of this service name it
        embedding_model="hash-64",
        generation_model=memory_model,
        search_timeout=0.5,
    )
    model = ScriptedAgentModel()
    runner = _runner(pattern, model, service)
    try:
        with caplog.at_level(logging.WARNING, logger="adk_memory"):
            took = []
            session = None
            for text in ("I love green tea.", "And I moved to Berlin.", "Thanks.", "Bye."):
                started = time.perf_counter()
                session, _ = await ask(runner, user_id="u1", text=text, session_id=session)
                took.append(time.perf_counter() - started)
            assert not service.memory_available
            # The first turn waited for the deadline; the others skipped memory at once.
            assert took[0] < 0.5 * 3 + 1.0
            assert max(took[1:]) < 0.5
            messages = [r.getMessage() for r in caplog.records if prefix in r.getMessage()]
            assert sum("agent turns skip memory until it answers again" in m for m in messages) == 1

            proxy.hung = False
            deadline = time.monotonic() + 30
            while not service.memory_available and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert service.memory_available, "memory did not come back after the store healed"
            assert any("answers again" in m.getMessage() for m in caplog.records)

        # The session's events, handed over while the store hung, reach it now; a new session
        # of the user sees what the hung session taught.
        await _taught_exactly_once(runner, model, service)
    finally:
        await runner.close()
        await service.aclose()


async def test_a_store_that_hangs_mid_run_costs_one_deadline(
    proxy: HangingProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """Healthy first, then hung: one turn waits the deadline, the next ones skip memory."""
    proxy.hung = False
    prefix = f"hung-{uuid.uuid4().hex[:8]}"
    service = MemoryBankService(
        f"redis://127.0.0.1:{proxy.port}/0?key_prefix={prefix}",
        embedding_model="hash-64",
        search_timeout=0.5,
    )
    model = ScriptedAgentModel()
    runner = _runner("callback", model, service)
    try:
        await ask(runner, user_id="u1", text="Hello.")
        assert service.memory_available
        proxy.hung = True
        await service.aclose()  # new connections from here on: they hang
        with caplog.at_level(logging.WARNING, logger="adk_memory"):
            took = []
            for _ in range(4):
                started = time.perf_counter()
                await ask(runner, user_id="u1", text="Anything?")
                took.append(time.perf_counter() - started)
        assert len(model.requests) == 5
        assert took[0] < 0.5 * 3 + 1.0 and max(took[1:]) < 0.5
        assert not service.memory_available
    finally:
        await runner.close()
        await service.aclose()


def _chroma_children() -> set[int]:
    """The pids of this process's embedded-Chroma children (`process=child`); a test compares
    them before and after, as other tests' services may still be closing theirs."""
    return set(children_running("adk_memory_chroma/_child.py"))


async def _available(service: MemoryBankService, within: float = 30.0) -> None:
    deadline = time.monotonic() + within
    while not service.memory_available and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    assert service.memory_available, f"memory did not come back within {within} s"


def _service_with_a_child(folder: Path) -> MemoryBankService:
    """A service on embedded Chroma in a child process, with a 0.5 s search deadline."""
    return MemoryBankService(
        f"chroma://{folder}",
        embedding_model="hash-64",
        generation_model=ScriptedMemoryModel(
            extract=extract_from_prompt, consolidate=create_every_fact
        ),
        search_timeout=0.5,
    )


@pytest.mark.parametrize("pattern", ["plugin", "callback"])
async def test_a_chroma_child_that_stops_answering_is_skipped_then_memory_comes_back(
    tmp_path: Path, pattern: str
) -> None:
    """The service runs embedded Chroma in a child process; stopped (SIGSTOP: alive, silent,
    like a hung server), no turn waits for it beyond one deadline: a user whose scope the
    process knows is searched from what it committed, a new user's search costs one deadline and
    later turns skip memory. Continued, memory comes back by itself, and what the turns taught
    meanwhile is generated exactly once."""
    before = _chroma_children()
    service = _service_with_a_child(tmp_path)
    model = ScriptedAgentModel()
    runner = _runner(pattern, model, service)
    child = 0
    try:
        session, _ = await ask(runner, user_id="u1", text="I love green tea.")
        # A first turn on a busy machine may outlast this test's short deadline (a fresh folder's
        # collections are created then): the breaker closes by itself, as asserted below.
        await _available(service)
        [child] = _chroma_children() - before
        os.kill(child, signal.SIGSTOP)
        took = []
        for user, text in [("u1", "And I moved to Berlin."), ("u2", "Hi."), ("u1", "Thanks.")]:
            started = time.perf_counter()
            await ask(runner, user_id=user, text=text, session_id=session if user == "u1" else None)
            took.append(time.perf_counter() - started)
        assert not service.memory_available  # u2's scope had to be read from Chroma
        assert max(took) < 0.5 * 3 + 1.0 and took[-1] < 0.5

        os.kill(child, signal.SIGCONT)
        await _available(service)
        await _taught_exactly_once(runner, model, service)
    finally:
        if child:
            os.kill(child, signal.SIGCONT)
        await runner.close()
        await service.aclose()
    assert child and child not in _chroma_children(), "the child outlived the service"


async def _closing_time(runner: Runner, service: MemoryBankService) -> float:
    """Seconds to close the runner, then the service."""
    started = time.perf_counter()
    await asyncio.wait_for(runner.close(), 30)
    await asyncio.wait_for(service.aclose(), 40)
    return time.perf_counter() - started


def _short_close_deadlines(monkeypatch: pytest.MonkeyPatch) -> None:
    """The waits of a close with a hung child: the drain's check, the store's last write and
    the child's exit (5, 5 and 30 s), shorter."""
    monkeypatch.setattr(service_module, "WRITE_TIMEOUT", 2.0)
    monkeypatch.setattr(chroma_store, "_CLOSE_WRITE_SECONDS", 1.0)
    monkeypatch.setattr(chroma_child, "_STOP_SECONDS", 1.0)


async def test_closing_while_the_chroma_child_hangs_ends_within_its_deadlines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A service closed (a host shutting down) while its Chroma child is stopped, with a turn's
    calls stuck in it: the close ends within its deadlines, and the child with it."""
    _short_close_deadlines(monkeypatch)
    before = _chroma_children()
    service = _service_with_a_child(tmp_path)
    runner = _runner("callback", ScriptedAgentModel(), service)
    session, _ = await ask(runner, user_id="u1", text="I love green tea.")
    await _available(service)
    [child] = _chroma_children() - before
    with stopped(child):
        await ask(runner, user_id="u1", text="And I moved to Berlin.", session_id=session)
        await ask(runner, user_id="u2", text="Hi.")
        took = await _closing_time(runner, service)
    assert took < 10, f"closing took {took:.1f} s"
    assert child not in _chroma_children(), "the stopped child outlived the service"


async def test_closing_while_a_flush_is_stuck_in_a_hung_child_ends_within_its_deadlines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child stops while a generation is under way and no turn searches afterwards: no
    bounded call fails, the breaker stays closed, and the close waits for the stuck flush only
    until a probe of the store times out."""
    _short_close_deadlines(monkeypatch)
    flushing, release, held = _held_extractions()
    before = _chroma_children()
    service, _, runner = _callback_runner(f"chroma://{tmp_path}", held)
    await ask(runner, user_id="u1", text="I love green tea.")
    assert await asyncio.to_thread(flushing.wait, 20), "the turn's flush never started"
    [child] = _chroma_children() - before
    with stopped(child):
        release.set()  # the generation goes on to the store, and sticks there
        await asyncio.sleep(0.5)
        assert service.memory_available
        took = await _closing_time(runner, service)
    assert took < 12, f"closing took {took:.1f} s"
    await asyncio.sleep(2.5)  # the stuck flush would record its failure through a new child
    assert not _chroma_children() - before, "the closed service's work started a child again"


async def test_a_killed_chroma_child_is_started_again_and_memory_comes_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed (SIGKILL, as the out-of-memory killer ends the process holding the indexes), the
    service's Chroma child is replaced by a new one: turns go on meanwhile, memory comes back by
    itself, and what the turns taught is generated exactly once."""
    monkeypatch.setattr(chroma_child, "_RESTART_SECONDS", 0.5)
    memory_model = ScriptedMemoryModel(extract=extract_from_prompt, consolidate=create_every_fact)
    before = _chroma_children()
    service = MemoryBankService(
        f"chroma://{tmp_path}", embedding_model="hash-64", generation_model=memory_model
    )
    model = ScriptedAgentModel()
    runner = _runner("callback", model, service)
    try:
        session, _ = await ask(runner, user_id="u1", text="I love green tea.")
        await _available(service)
        [child] = _chroma_children() - before
        os.kill(child, signal.SIGKILL)
        await ask(runner, user_id="u1", text="And I moved to Berlin.", session_id=session)
        await ask(runner, user_id="u2", text="Hi.")
        await _available(service)
        await _taught_exactly_once(runner, model, service)
        [replaced] = _chroma_children() - before
        assert replaced != child
    finally:
        await runner.close()
        await service.aclose()
    assert not _chroma_children() - before, "a child outlived the service"


# Configuration errors fail at start


def test_a_typo_in_the_uri_options_fails_at_construction_naming_the_option() -> None:
    """`?idle_duraton=1s` used to start a server whose every search failed at turn time."""
    with pytest.raises(InvalidArgument, match="idle_duraton") as raised:
        MemoryBankService("memory://typo?idle_duraton=1s", embedding_model="hash-64")
    assert "did you mean 'idle_duration'" in raised.value.message
    assert "generation_wait" in raised.value.message  # the valid options are listed


@pytest.mark.parametrize(
    "uri", ["redis://127.0.0.1:9/0?key_prefx=a", "chroma:///tmp/unused?colection_prefix=a"]
)
def test_an_unknown_store_option_fails_at_construction_listing_both_kinds(uri: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        MemoryBankService(uri, embedding_model="hash-64")
    message = raised.value.message
    assert uri.split("?")[1].split("=")[0] in message
    assert "idle_duration" in message  # the service's own options
    assert "collection_prefix" in message or "key_prefix" in message  # the store's


def test_memory_uris_take_no_store_options() -> None:
    with pytest.raises(InvalidArgument, match="takes no options"):
        MemoryBankService("memory://typo?colour=blue", embedding_model="hash-64")


@pytest.mark.parametrize(
    ("value", "option"),
    [("top_k=0", "top_k"), ("search_timeout=-1", "search_timeout"), ("idle_duration=x", "idle")],
)
def test_a_bad_value_fails_at_construction(value: str, option: str) -> None:
    with pytest.raises(InvalidArgument, match=option):
        MemoryBankService(f"memory://bad?{value}", embedding_model="hash-64")


def test_a_misspelt_services_yaml_section_fails_at_construction(tmp_path: Any) -> None:
    (tmp_path / "services.yaml").write_text("adk-memory:\n  top_k: 4\n", encoding="utf-8")
    with pytest.raises(InvalidArgument, match="did you mean 'adk_memory'"):
        MemoryBankService("memory://yaml", embedding_model="hash-64", agents_dir=str(tmp_path))


# Long messages


@pytest.mark.parametrize("pattern", ["plugin", "callback"])
async def test_a_message_longer_than_the_query_limit_still_gets_memories(
    service: MemoryBankService, pattern: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Retrieve refuses queries over 10,000 characters; the turn's search keeps the end."""
    from google.adk.memory.memory_entry import MemoryEntry

    fact = genai_types.Content(role="user", parts=[genai_types.Part(text=TEA)])
    await service.add_memory(app_name=APP, user_id="u1", memories=[MemoryEntry(content=fact)])
    model = ScriptedAgentModel()
    runner = _runner(pattern, model, service)
    pasted = "Here is a log I pasted. " * 800  # about 19,000 characters
    with caplog.at_level(logging.WARNING, logger="adk_memory"):
        await ask(runner, user_id="u1", text=pasted + "Which tea do I like?")
    assert TEA in ScriptedAgentModel.request_text(model.requests[-1])
    assert not [r for r in caplog.records if "search_query is limited" in r.getMessage()]
    found = await service.search_memory(app_name=APP, user_id="u1", query="x" * 20_000 + " tea")
    assert [entry.content.parts[0].text for entry in found.memories] == [TEA]


# Images


@pytest.mark.parametrize("pattern", ["plugin", "callback"])
async def test_an_image_in_a_turn_reaches_generation(store: str, pattern: str) -> None:
    """A user's message with a photo, through a real Runner: the extraction call gets the image
    bytes after the conversation, as ADK's Vertex service would send them."""
    memory_model = ScriptedMemoryModel(
        extractions=[extraction("I have a grey cat.")], consolidate=create_every_fact
    )
    service = MemoryBankService(store, embedding_model="hash-64", generation_model=memory_model)
    runner = _runner(pattern, ScriptedAgentModel(), service)
    photo = genai_types.Part(inline_data=genai_types.Blob(mime_type="image/jpeg", data=b"JPEG-CAT"))
    message = genai_types.Content(
        role="user", parts=[genai_types.Part(text="This is my cat."), photo]
    )
    try:
        session = await runner.session_service.create_session(app_name=APP, user_id="u1")
        async for _ in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
            pass
        await service.flush(app_name=APP, user_id="u1", session_id=session.id)
        [request] = [r for r in memory_model.requests if memory_model.kind_of(r) == "extraction"]
        parts = request.contents[-1].parts or []
        images = [part.inline_data for part in parts if part.inline_data is not None]
        assert [(image.mime_type, image.data) for image in images] == [("image/jpeg", b"JPEG-CAT")]
        assert "This is my cat. [attachment 1: image/jpeg]" in (parts[0].text or "")
        found = await service.search_memory(app_name=APP, user_id="u1", query="cat")
        assert [entry.content.parts[0].text for entry in found.memories] == ["I have a grey cat."]
    finally:
        await runner.close()
        await service.aclose()


# Whose generation a turn waits for


async def test_a_warm_turn_skips_waiting_for_its_own_sessions_generation_a_new_session_waits(
    store: str,
) -> None:
    """Callback pattern with a slow memory model: the session's next turn does not wait for the
    generation its last turn started (those events are in its conversation); the user's next
    session does, and sees the fact."""

    async def thinking(kind: str) -> None:
        await asyncio.sleep(1.0)

    memory_model = ScriptedMemoryModel(
        extract=extract_from_prompt, consolidate=create_every_fact, on_call=thinking
    )
    service = MemoryBankService(
        store, embedding_model="hash-64", generation_model=memory_model, generation_wait=10
    )
    model = ScriptedAgentModel()
    runner = _runner("callback", model, service)
    try:
        session, _ = await ask(runner, user_id="u1", text="I love green tea.")
        started = time.perf_counter()
        await ask(runner, user_id="u1", text="Anything else?", session_id=session)
        assert time.perf_counter() - started < 1.0  # no wait for its own generation (2 s)
        await ask(runner, user_id="u1", text="What do I like?")  # a new session
        assert TEA in ScriptedAgentModel.request_text(model.requests[-1])
    finally:
        await runner.close()
        await service.aclose()


# A stream being flushed does not hold up the others


def _held_extractions() -> tuple[
    threading.Event, threading.Event, Callable[[str], Coroutine[Any, Any, None]]
]:
    """`on_call` for a memory model whose extractions wait for `release` (a real model takes
    seconds); `flushing` is set once one waits."""
    flushing, release = threading.Event(), threading.Event()

    async def held(kind: str) -> None:
        if kind == "extraction" and not release.is_set():
            flushing.set()
            await asyncio.to_thread(release.wait, 20)

    return flushing, release, held


def _callback_runner(
    store: str, on_call: Callable[[str], Coroutine[Any, Any, None]]
) -> tuple[MemoryBankService, ScriptedAgentModel, Runner]:
    """ADK's callback pattern on `store`; the memory model's calls go through `on_call`."""
    model = ScriptedMemoryModel(
        extract=extract_from_prompt, consolidate=create_every_fact, on_call=on_call
    )
    service = MemoryBankService(store, embedding_model="hash-64", generation_model=model)
    agent_model = ScriptedAgentModel()
    return service, agent_model, _runner("callback", agent_model, service)


async def _pending(store: str, bank_id: str) -> dict[str, int]:
    async with AsyncClient(store, embedding_model="hash-64", run_scheduler=False) as reader:
        return {s.stream_id: s.pending_events for s in await reader.engine.ingest.streams(bank_id)}


async def test_a_stream_a_flush_holds_does_not_hold_up_other_sessions_events(store: str) -> None:
    """The writer stores the sessions' hand-overs in one group write. A stream whose lock a flush
    holds (through its model calls: seconds with a real model) is left for a later pass; the
    other sessions' events are stored at once, and the one left is stored once the lock is
    free, each event once."""
    service = MemoryBankService(
        store, embedding_model="hash-64", generation_model=ScriptedMemoryModel()
    )
    runner = _runner("plugin", ScriptedAgentModel(), service)
    try:
        first, _ = await ask(runner, user_id="u1", text="I love green tea.")
        await service.drain()
        assert await _pending(store, service.bank_id) == {first: 2}
        async with AsyncClient(store, embedding_model="hash-64", run_scheduler=False) as other:
            locks = other.engine.context.store.lock_provider()
            key = stream_key({"app_name": APP, "user_id": "u1"}, first)
            async with locks.lock(f"stream:{service.bank_id}:{key}"):
                await ask(runner, user_id="u1", text="Anything else?", session_id=first)
                await asyncio.sleep(0.2)  # the writer's pass finds u1's stream locked
                second, _ = await ask(runner, user_id="u2", text="I live in Berlin.")
                for _ in range(60):
                    if second in await _pending(store, service.bank_id):
                        break
                    await asyncio.sleep(0.05)
                assert await _pending(store, service.bank_id) == {first: 2, second: 2}
        await service.drain()
        assert await _pending(store, service.bank_id) == {first: 4, second: 2}
    finally:
        await runner.close()
        await service.aclose()


async def test_a_search_waiting_behind_a_flush_does_not_spin_the_writer(store: str) -> None:
    """ADK's callback pattern: u1's first turn starts a generation whose model call does not
    answer yet; the second turn's hand-over waits for that flush (its stream is locked), and a
    new session's search waits for both. Meanwhile the writer is not woken pass after pass to
    find the stream locked again (it was: a busy loop on the loop the flush itself runs on); once
    the model answers, the search sees the fact and every event is stored once."""
    flushing, release, held = _held_extractions()
    service, agent_model, runner = _callback_runner(store, held)
    try:
        first, _ = await ask(runner, user_id="u1", text="I like green tea.")
        assert await asyncio.to_thread(flushing.wait, 20), "the first turn's flush never started"
        await ask(runner, user_id="u1", text="Thanks!", session_id=first)
        writes = count_store_writes(service)
        asking = asyncio.ensure_future(ask(runner, user_id="u1", text="What do I like?"))
        await asyncio.sleep(0.5)
        assert not asking.done()  # the search waits for the flush
        # The writer's poll (a pass a second) and a wake or two; it was a thousand passes.
        assert len(writes) <= 4, f"{len(writes)} writer passes while the stream was locked"
        release.set()
        await asyncio.wait_for(asking, 20)
        assert TEA in ScriptedAgentModel.request_text(agent_model.requests[-1])
        await service.drain()
        assert await _pending(store, service.bank_id) == {}  # both turns generated, once
    finally:
        release.set()
        await runner.close()
        await service.aclose()


async def test_a_search_waits_for_a_slow_generation_without_blaming_the_store(
    store: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A real model takes seconds: u1's first turn's generation outlasts the write deadline
    (5 s; here 0.3 s) and the second turn's hand-over waits behind it. A new session's search
    waits for both generations, within `generation_wait` (it gave up at the write deadline,
    without the second turn's fact, and counted the wait as a store failure towards the
    breaker), and sees both facts."""
    monkeypatch.setattr(service_module, "WRITE_TIMEOUT", 0.3)
    slowed: list[str] = []

    async def slow_first(kind: str) -> None:
        if kind == "extraction" and not slowed:
            slowed.append(kind)
            await asyncio.sleep(1.0)

    service, agent_model, runner = _callback_runner(store, slow_first)
    try:
        first, _ = await ask(runner, user_id="u1", text="I like green tea.")
        await ask(runner, user_id="u1", text="I live in Berlin.", session_id=first)
        with caplog.at_level(logging.WARNING):
            await ask(runner, user_id="u1", text="What do you know about me?")
        seen = ScriptedAgentModel.request_text(agent_model.requests[-1])
        assert TEA in seen and BERLIN in seen
        assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
        assert slowed and service.memory_available
    finally:
        await runner.close()
        await service.aclose()


async def test_a_scheduler_flush_does_not_hold_up_other_sessions_events(store: str) -> None:
    """u1's session goes idle and the scheduler flushes it; its model call does not answer
    (a real model takes seconds). u2's turn meanwhile hands its events over: they are stored at
    once, not after u1's generation."""
    flushing, release, held = _held_extractions()
    model = ScriptedMemoryModel(
        extract=lambda request: extraction("The user loves green tea."),
        consolidate=create_every_fact,
        on_call=held,
    )
    service = MemoryBankService(
        store, embedding_model="hash-64", generation_model=model, idle_duration="1s"
    )
    runner = _runner("plugin", ScriptedAgentModel(), service)
    try:
        first, _ = await ask(runner, user_id="u1", text="I love green tea.")
        assert await asyncio.to_thread(flushing.wait, 20), "the scheduler never flushed u1"
        second, _ = await ask(runner, user_id="u2", text="I live in Berlin.")
        for _ in range(60):
            if second in await _pending(store, service.bank_id):
                break
            await asyncio.sleep(0.05)
        pending = await _pending(store, service.bank_id)
        assert not release.is_set() and pending == {first: 2, second: 2}  # u1's still generating
        release.set()
        await service.drain()
        assert first not in await _pending(store, service.bank_id)  # generated, once released
    finally:
        release.set()
        await runner.close()
        await service.aclose()


async def test_the_services_chroma_child_starting_is_warming_not_a_sick_store(
    tmp_path: Path,
) -> None:
    """A child process takes about a second to start, longer than this service's deadline: the
    first search, right after construction, waits for it as for the model's load, and memory
    stays on."""
    before = _chroma_children()
    service = MemoryBankService(
        f"chroma://{tmp_path}", embedding_model="hash-64", search_timeout=0.2
    )
    try:
        found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
        assert found.memories == [] and service.memory_available
        assert len(_chroma_children() - before) == 1
        tea = MemoryEntry(content=genai_types.Content(parts=[genai_types.Part(text=TEA)]))
        await service.add_memory(app_name=APP, user_id="u1", memories=[tea])
        found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
        assert [m.content.parts[0].text for m in found.memories] == [TEA]  # type: ignore[union-attr]
    finally:
        await service.aclose()
