"""Memory through a real ADK `Runner`: `PreloadMemoryTool`, `LoadMemoryTool` and the plugin."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from adk_helpers import APP, agent, ask, extraction, runner_for
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.memory import InMemoryMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.tools.load_memory_tool import LoadMemoryTool
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types as genai_types

from adk_memory.adk import MemoryBankPlugin, MemoryBankService
from adk_memory.testing.agent_models import ScriptedAgentModel
from adk_memory.testing.models import ScriptedMemoryModel

TEA = "I like green tea."


def tea() -> MemoryEntry:
    return MemoryEntry(content=genai_types.Content(role="user", parts=[genai_types.Part(text=TEA)]))


def seen(model: ScriptedAgentModel) -> list[str]:
    """The text of every request the agent's model received."""
    return [ScriptedAgentModel.request_text(request) for request in model.requests]


async def test_memory_reaches_the_users_next_session_through_preload_memory_tool(
    service: MemoryBankService,
) -> None:
    await service.add_memory(app_name=APP, user_id="u1", memories=[tea()])
    model = ScriptedAgentModel()
    runner = runner_for(agent(model, tools=[PreloadMemoryTool()]), service)

    await ask(runner, user_id="u1", text="What tea should I order?")
    assert TEA in seen(model)[-1]
    await ask(runner, user_id="u2", text="What tea should I order?")
    assert TEA not in seen(model)[-1]
    other_app = runner_for(agent(model, tools=[PreloadMemoryTool()]), service, app_name="other")
    await ask(other_app, user_id="u1", text="What tea should I order?")
    assert TEA not in seen(model)[-1]


async def test_memory_reaches_every_model_request_of_the_invocation_through_the_plugin(
    service: MemoryBankService,
) -> None:
    await service.add_memory(app_name=APP, user_id="u1", memories=[tea()])
    model = ScriptedAgentModel(
        replies=[{"function_call": {"name": "load_memory", "args": {"query": "tea"}}}, "Green tea."]
    )
    plugin = MemoryBankPlugin(service=service, ingest=False)
    runner = runner_for(agent(model, tools=[LoadMemoryTool()]), service, plugins=[plugin])

    await ask(runner, user_id="u1", text="What tea should I order?")
    first, second = seen(model)
    assert "<MEMORIES>" in first and TEA in first
    assert "<MEMORIES>" in second and TEA in second
    # ... and LoadMemoryTool's answer, through the same service, is in the second request.
    assert second.count(TEA) == 2

    model.requests.clear()
    await ask(runner, user_id="u2", text="What tea should I order?")
    assert all(TEA not in text for text in seen(model))


async def test_plugin_does_not_repeat_what_preload_memory_tool_added(
    service: MemoryBankService,
) -> None:
    await service.add_memory(app_name=APP, user_id="u1", memories=[tea()])
    model = ScriptedAgentModel()
    app = App(
        name=APP,
        root_agent=agent(model, tools=[PreloadMemoryTool()]),
        plugins=[MemoryBankPlugin(ingest=False)],
    )
    runner = Runner(app=app, session_service=InMemorySessionService(), memory_service=service)

    await ask(runner, user_id="u1", text="What tea should I order?")
    request = seen(model)[-1]
    assert request.count(TEA) == 1
    assert "<PAST_CONVERSATIONS>" in request and "<MEMORIES>" not in request


async def test_plugin_generation_after_a_session_is_seen_by_the_next_session(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    memory_model.extractions = [extraction(TEA)]
    model = ScriptedAgentModel()
    plugin = MemoryBankPlugin(service=service)
    runner = runner_for(agent(model), service, plugins=[plugin])

    session_id, events = await ask(runner, user_id="u1", text="I love green tea, by the way.")
    assert events[-1].content.parts[0].text == "OK."
    await plugin.drain()  # the ingest (the idle trigger has not fired: 60 s by default)
    assert not memory_model.requests
    await service.flush(app_name=APP, user_id="u1", session_id=session_id)
    conversation = memory_model.prompt_text(memory_model.requests[0])
    assert "I love green tea, by the way." in conversation and "OK." in conversation

    await ask(runner, user_id="u1", text="What should I drink?")
    assert TEA in seen(model)[-1]
    await ask(runner, user_id="u2", text="What should I drink?")
    assert TEA not in seen(model)[-1]


async def test_plugin_idle_trigger_generates_without_any_help(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    memory_model.extractions = [extraction(TEA)]
    plugin = MemoryBankPlugin(service=service, idle_duration="0.5s")
    runner = runner_for(agent(ScriptedAgentModel()), service, plugins=[plugin])

    await ask(runner, user_id="u1", text="I love green tea, by the way.")
    await plugin.drain()
    deadline = time.monotonic() + 20
    while not (await service.search_memory(app_name=APP, user_id="u1", query="tea")).memories:
        assert time.monotonic() < deadline, "the idle trigger never generated memories"
        await asyncio.sleep(0.2)


async def test_plugin_sends_a_turn_once_even_across_turns(
    service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    memory_model.extractions = [extraction(TEA), extraction("I live in Berlin.")]
    plugin = MemoryBankPlugin(service=service)
    runner = runner_for(agent(ScriptedAgentModel()), service, plugins=[plugin])

    session_id, _ = await ask(runner, user_id="u1", text="I love green tea.")
    await plugin.drain()
    await service.flush(app_name=APP, user_id="u1", session_id=session_id)
    await ask(runner, user_id="u1", text="I moved to Berlin.", session_id=session_id)
    await plugin.drain()
    await service.flush(app_name=APP, user_id="u1", session_id=session_id)

    conversations = [
        memory_model.prompt_text(r)
        for r in memory_model.requests
        if memory_model.kind_of(r) == "extraction"
    ]
    assert len(conversations) == 2
    assert (
        "I moved to Berlin." in conversations[1]
        and "I love green tea." not in conversations[1].split("</conversation>")[-2]
    )


class _SlowOrBrokenMemory(InMemoryMemoryService):
    """ADK's in-memory service whose search fails and whose ingest waits for a signal."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.ingested: list[Mapping[str, object] | None] = []

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        raise RuntimeError("search is down")

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        await self.release.wait()
        self.ingested.append(custom_metadata)
        raise RuntimeError("ingest is down")


async def test_plugin_never_delays_the_reply_nor_raises_into_the_agent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = _SlowOrBrokenMemory()
    plugin = MemoryBankPlugin(idle_duration="30s", ingest_timeout=0.05)
    runner = runner_for(agent(ScriptedAgentModel()), memory, plugins=[plugin])

    with caplog.at_level(logging.WARNING, logger="adk_memory"):
        session_id, events = await ask(runner, user_id="u1", text="Hello there.")
        assert events[-1].content.parts[0].text == "OK."  # replied while the ingest still waits
        assert not memory.ingested
        memory.release.set()
        await plugin.drain()
    assert memory.ingested == [
        {
            "stream_id": session_id,
            "generation_trigger_config": {"generation_rule": {"idle_duration": "30s"}},
        }
    ]
    messages = [record.getMessage() for record in caplog.records]
    assert any("Memory search failed (RuntimeError)" in message for message in messages)
    assert any("Background memory ingest failed: RuntimeError" in message for message in messages)
    assert any("memories last only as long as this process" in message for message in messages)
    assert all("Hello there" not in message for message in messages)


def test_plugin_rejects_bad_settings() -> None:
    from adk_memory import InvalidArgument

    with pytest.raises(InvalidArgument):
        MemoryBankPlugin(top_k=0)
    with pytest.raises(InvalidArgument):
        MemoryBankPlugin(idle_duration="soon")
    with pytest.raises(InvalidArgument):
        MemoryBankPlugin(search_timeout=0)


async def test_sync_runner_run_works_across_event_loops(service: MemoryBankService) -> None:
    await service.add_memory(app_name=APP, user_id="u1", memories=[tea()])
    model = ScriptedAgentModel()
    runner = runner_for(
        agent(model), service, plugins=[MemoryBankPlugin(service=service, ingest=False)]
    )
    session = await runner.session_service.create_session(app_name=APP, user_id="u1")
    message = genai_types.Content(role="user", parts=[genai_types.Part(text="Which tea?")])

    def run_on_new_loop() -> list[Any]:
        return list(runner.run(user_id="u1", session_id=session.id, new_message=message))

    events = await asyncio.to_thread(run_on_new_loop)
    assert events and TEA in seen(model)[-1]
