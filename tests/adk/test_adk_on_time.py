"""Automatic memory as an ADK developer expects it (issue 21), through real ADK `Runner`s.

Each case runs with the synchronous `Runner.run` (a new event loop per call, in a thread) and
with `run_async`, on every backend of `store_uri`. The agent's model and the memory model are
scripted; the memory model extracts from the prompt (not from call order).
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import warnings
from typing import Any, Literal

import pytest
from adk_helpers import APP, agent, create_every_fact, extraction, runner_for
from google.adk.agents import LlmAgent
from google.adk.agents.callback_context import CallbackContext
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.tools.load_memory_tool import LoadMemoryTool
from google.adk.tools.preload_memory_tool import PreloadMemoryTool
from google.genai import types as genai_types
from typer.testing import CliRunner

from adk_memory import AsyncClient, ModelUnavailable, StoreUnavailable
from adk_memory.adk import MemoryBankPlugin, MemoryBankService
from adk_memory.cli import app as cli_app
from adk_memory.engine.ingest import IngestOps
from adk_memory.testing.agent_models import ScriptedAgentModel, write_echo_agent
from adk_memory.testing.models import ScriptedMemoryModel

Mode = Literal["sync", "async"]
MODES = pytest.mark.parametrize("mode", ["sync", "async"])

TEA = "I like green tea."
SHOES = "My shoe size is 44."
BERLIN = "I live in Berlin."
CUES = {"green tea": TEA, '"shoe_size": 44': SHOES, "Berlin": BERLIN}
"""What the scripted memory model extracts when the conversation contains the cue."""


def extract_from_prompt(request: LlmRequest) -> dict[str, Any]:
    """Extraction computed from the conversation in the prompt, whatever the call order."""
    conversation = ScriptedMemoryModel.prompt_text(request).split("</conversation>")[-2]
    return extraction(*(fact for cue, fact in CUES.items() if cue in conversation))


@pytest.fixture
def memory_model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel(extract=extract_from_prompt, consolidate=create_every_fact)


async def turn(
    runner: Runner, mode: Mode, *, user_id: str, text: str, session: str | None = None
) -> str:
    """One turn, synchronous or async; returns the session id (a new session unless given)."""
    if session is None:
        made = await runner.session_service.create_session(app_name=APP, user_id=user_id)
        session = made.id
    message = genai_types.Content(role="user", parts=[genai_types.Part(text=text)])
    if mode == "sync":
        await asyncio.to_thread(
            lambda: list(runner.run(user_id=user_id, session_id=session, new_message=message))
        )
    else:
        async for _ in runner.run_async(user_id=user_id, session_id=session, new_message=message):
            pass
    return session


def last_request(model: ScriptedAgentModel) -> str:
    return ScriptedAgentModel.request_text(model.requests[-1])


async def remember_now(callback_context: CallbackContext) -> None:
    """ADK's documented after-agent callback."""
    await callback_context.add_session_to_memory()


# Case 1: memories on time


@MODES
async def test_plugin_a_new_session_sees_what_the_users_last_session_taught(
    service: MemoryBankService, mode: Mode
) -> None:
    """Default settings (60 s idle trigger): the next session's first turn already knows."""
    model = ScriptedAgentModel()
    runner = runner_for(agent(model), service, plugins=[MemoryBankPlugin()])

    await turn(runner, mode, user_id="u1", text="I love green tea, by the way.")
    await turn(runner, mode, user_id="u1", text="What should I drink?")
    assert TEA in last_request(model)
    await turn(runner, mode, user_id="u2", text="What should I drink?")
    assert TEA not in last_request(model)


@MODES
async def test_callback_alone_a_new_session_sees_the_last_one_through_preload_memory(
    service: MemoryBankService, mode: Mode
) -> None:
    model = ScriptedAgentModel()
    root = LlmAgent(
        name="assistant",
        model=model,
        instruction="Help.",
        tools=[PreloadMemoryTool()],
        after_agent_callback=remember_now,
    )
    runner = runner_for(root, service)

    await turn(runner, mode, user_id="u1", text="I love green tea, by the way.")
    await turn(runner, mode, user_id="u1", text="What should I drink?")
    assert TEA in last_request(model)


@MODES
async def test_plugin_and_callback_together_follow_the_same_rule_every_session(
    service: MemoryBankService, memory_model: ScriptedMemoryModel, mode: Mode
) -> None:
    """Not "at once the first time, then after 60 s": each session is seen by the next."""
    model = ScriptedAgentModel()
    root = LlmAgent(
        name="assistant", model=model, instruction="Help.", after_agent_callback=remember_now
    )
    runner = runner_for(root, service, plugins=[MemoryBankPlugin()])

    await turn(runner, mode, user_id="u1", text="I love green tea, by the way.")
    await turn(runner, mode, user_id="u1", text="I moved to Berlin last year.")
    await turn(runner, mode, user_id="u1", text="Any plans for me?")
    assert TEA in last_request(model) and BERLIN in last_request(model)
    await service.generate_pending(app_name=APP, user_id="u1")  # the last session's turn too
    await service.drain()
    found = await service.search_memory(app_name=APP, user_id="u1", query="me", top_k=10)
    # Each fact once: no event was generated from twice, even when a loop's end cut a flush.
    assert sorted(entry.content.parts[0].text for entry in found.memories) == [TEA, BERLIN]


# Case 2: durable ingest, off the turn


async def pending_streams(store: str, bank_id: str) -> list[tuple[str, int]]:
    """What another process reading the store sees: each stream holding events, and how many."""
    async with AsyncClient(store, embedding_model="hash-64", run_scheduler=False) as reader:
        streams = await reader.engine.ingest.streams(bank_id)
    return [(stream.stream_id, stream.pending_events) for stream in streams]


@MODES
async def test_a_runs_events_reach_the_store_after_the_run_returns(
    service: MemoryBankService, store: str, mode: Mode
) -> None:
    """The run hands its events over without waiting; the service's writer stores them even
    after a synchronous run's event loop has ended."""
    runner = runner_for(agent(ScriptedAgentModel()), service, plugins=[MemoryBankPlugin()])
    session = await turn(runner, mode, user_id="u1", text="I love green tea, by the way.")

    for _ in range(100):
        if await pending_streams(store, service.bank_id) == [(session, 2)]:
            break
        await asyncio.sleep(0.05)
    assert await pending_streams(store, service.bank_id) == [(session, 2)]
    await service.flush(app_name=APP, user_id="u1", session_id=session)
    found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
    assert [entry.content.parts[0].text for entry in found.memories] == [TEA]


# Case 3: tool traffic reaches generation


def lookup_profile() -> dict[str, Any]:
    """Looks up the user's profile."""
    return {"shoe_size": 44, "newsletter": False}


@MODES
async def test_a_fact_only_in_a_tool_response_is_remembered(
    service: MemoryBankService, memory_model: ScriptedMemoryModel, mode: Mode
) -> None:
    model = ScriptedAgentModel(
        replies=[{"function_call": {"name": "lookup_profile", "args": {}}}, "Found it."]
    )
    runner = runner_for(agent(model, tools=[lookup_profile]), service, plugins=[MemoryBankPlugin()])

    await turn(runner, mode, user_id="u1", text="Please look up my profile.")
    await turn(runner, mode, user_id="u1", text="Which shoes fit me?")
    assert SHOES in last_request(model)
    prompt = ScriptedMemoryModel.prompt_text(memory_model.requests[0])
    assert "[tool call lookup_profile: {}]" in prompt
    assert (
        '[tool lookup_profile returned: {"result": {"newsletter": false, "shoe_size": 44}}]'
        in (prompt)
        or '[tool lookup_profile returned: {"newsletter": false, "shoe_size": 44}]' in prompt
    )


# Cases 4 and 7: a down store never fails nor stalls the turn


@pytest.mark.parametrize(
    "down_uri", ["redis://127.0.0.1:9/0", "chroma+http://127.0.0.1:9?single_host=true"]
)
@MODES
async def test_a_down_store_never_fails_the_turn_and_runner_close_is_clean(
    down_uri: str, mode: Mode, caplog: pytest.LogCaptureFixture
) -> None:
    service = MemoryBankService(down_uri, bank="down-store", embedding_model="hash-64")
    model = ScriptedAgentModel()
    root = LlmAgent(
        name="assistant",
        model=model,
        instruction="Help.",
        tools=[PreloadMemoryTool()],
        after_agent_callback=remember_now,
    )
    runner = runner_for(root, service, plugins=[MemoryBankPlugin()])
    with caplog.at_level(logging.WARNING, logger="adk_memory"):
        session = None
        for text in ("I love green tea.", "And coffee.", "And water.", "Anything else?"):
            session = await turn(runner, mode, user_id="u1", text=text, session=session)
        await runner.close()
        await service.aclose()
    assert len(model.requests) == 4  # every turn was answered
    messages = [r.getMessage() for r in caplog.records if "down-store" in r.getMessage()]
    # Logged once: the breaker opens (at the start-up's failure), and holds.
    assert sum("agent turns skip memory until it answers again" in m for m in messages) == 1
    assert all("green tea" not in m for m in messages)
    assert not [r for r in caplog.records if r.exc_info], "no traceback for a known outage"


async def test_events_a_failed_write_kept_are_stored_later(
    service: MemoryBankService, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real_ingest = IngestOps.ingest_many
    failures = [StoreUnavailable("connection reset by the test")]

    async def cut_once(self: IngestOps, *args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return await real_ingest(self, *args, **kwargs)

    monkeypatch.setattr(IngestOps, "ingest_many", cut_once)
    model = ScriptedAgentModel()
    runner = runner_for(agent(model), service, plugins=[MemoryBankPlugin()])
    with caplog.at_level(logging.WARNING, logger="adk_memory"):
        session = await turn(runner, "async", user_id="u1", text="I love green tea, by the way.")
        await service.drain()  # the writer's first attempt failed; its retry stored them
    assert any("connection reset by the test" in r.getMessage() for r in caplog.records)
    await service.flush(app_name=APP, user_id="u1", session_id=session)  # sends what waited
    found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
    assert [entry.content.parts[0].text for entry in found.memories] == [TEA]


# Case 6: no stranded events


async def test_a_model_outage_strands_nothing_and_is_visible(
    service: MemoryBankService, memory_model: ScriptedMemoryModel, caplog: pytest.LogCaptureFixture
) -> None:
    down = {"on": True}

    def extract(request: LlmRequest) -> dict[str, Any]:
        if down["on"]:
            raise RuntimeError("the model service is down for maintenance")
        return extract_from_prompt(request)

    memory_model.extract = extract
    model = ScriptedAgentModel()
    root = LlmAgent(
        name="assistant", model=model, instruction="Help.", after_agent_callback=remember_now
    )
    runner = runner_for(root, service, plugins=[MemoryBankPlugin()])
    with caplog.at_level(logging.WARNING, logger="adk_memory"):
        session = await turn(runner, "async", user_id="u1", text="I love green tea, by the way.")
        for _ in range(6):  # past the point where the old code gave up for good
            with pytest.raises(ModelUnavailable):
                await service.flush(app_name=APP, user_id="u1", session_id=session)
    logged = [record.getMessage() for record in caplog.records]
    cause = "Calling the memory model failed"
    assert any("Ingest flush failed" in m and cause in m for m in logged)

    listed = await asyncio.to_thread(
        CliRunner().invoke,
        cli_app,
        ["streams", "list", "-b", service.bank_id, "--uri", service_uri(service), "--failed"]
        + ["--json"],
    )
    assert listed.exit_code == 0, listed.output
    [stream] = json.loads(listed.output)
    assert stream["streamId"] == session and stream["failures"] >= 6
    assert "Calling the memory model failed" in stream["lastError"]
    retried = await asyncio.to_thread(
        CliRunner().invoke,
        cli_app,
        ["streams", "retry", stream["key"][:8], "-b", service.bank_id]
        + ["--uri", service_uri(service)],
    )
    # The CLI's own model is the default Gemini, which has no credentials here.
    assert retried.exit_code == 1 and "FAILED_PRECONDITION" in retried.output
    assert "lack of credentials" in retried.output

    down["on"] = False
    await turn(runner, "async", user_id="u1", text="Hello again.")  # a new session retries it
    await service.drain()
    await turn(runner, "async", user_id="u1", text="What should I drink?")
    assert TEA in last_request(model)


def service_uri(service: MemoryBankService) -> str:
    return service._uri  # the shared store URI the CLI must open


# Case 8: what the model sees


@MODES
async def test_load_memory_shows_the_model_facts_and_no_plumbing(
    service: MemoryBankService, mode: Mode
) -> None:
    from google.adk.memory.memory_entry import MemoryEntry

    fact = genai_types.Content(role="user", parts=[genai_types.Part(text=TEA)])
    await service.add_memory(app_name=APP, user_id="u1", memories=[MemoryEntry(content=fact)])
    model = ScriptedAgentModel(
        replies=[{"function_call": {"name": "load_memory", "args": {"query": "tea"}}}, "Tea."]
    )
    runner = runner_for(agent(model, tools=[LoadMemoryTool()]), service)
    await turn(runner, mode, user_id="u1", text="What do I drink?")
    request = model.requests[-1]
    wire = json.dumps([content.model_dump(mode="json") for content in request.contents])
    for shown in (wire, last_request(model)):
        assert TEA in shown
        assert "reasoningEngines/" not in shown and "distance" not in shown


# Case 10: extraction scripted from the prompt


async def test_two_users_generating_at_once_each_get_their_own_facts(
    service: MemoryBankService,
) -> None:
    runner = runner_for(agent(ScriptedAgentModel()), service, plugins=[MemoryBankPlugin()])
    first, second = await asyncio.gather(
        turn(runner, "async", user_id="u1", text="I love green tea, by the way."),
        turn(runner, "async", user_id="u2", text="I moved to Berlin last year."),
    )
    await asyncio.gather(
        service.flush(app_name=APP, user_id="u1", session_id=first),
        service.flush(app_name=APP, user_id="u2", session_id=second),
    )
    for user, fact in (("u1", TEA), ("u2", BERLIN)):
        found = await service.search_memory(app_name=APP, user_id=user, query="what do I like")
        assert [entry.content.parts[0].text for entry in found.memories] == [fact]


# Issue 15: a client passed in, across event loops


def test_a_client_other_loops_cannot_reach_is_refused_at_construction() -> None:
    from adk_memory import InvalidArgument
    from adk_memory.reference_store import ReferenceMemoryStore

    with pytest.raises(InvalidArgument, match="other event loops"):
        built_on_a_store = AsyncClient(store=ReferenceMemoryStore(), embedding_model="hash-64")
        MemoryBankService(client=built_on_a_store)
    with pytest.raises(InvalidArgument, match="other event loops"):
        MemoryBankService(client=AsyncClient("memory://", embedding_model="hash-64"))


async def test_a_given_client_works_across_sync_runs_without_resource_warnings(
    store: str, memory_model: ScriptedMemoryModel
) -> None:
    client = AsyncClient(store, embedding_model="hash-64", generation_model=memory_model)
    service = MemoryBankService(client=client)
    model = ScriptedAgentModel()
    runner = runner_for(agent(model), service, plugins=[MemoryBankPlugin()])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        await turn(runner, "sync", user_id="u1", text="I love green tea, by the way.")
        await turn(runner, "sync", user_id="u1", text="What should I drink?")
        gc.collect()
    assert TEA in last_request(model)
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
    await client.aclose()


# Case 9: service options where ADK developers configure things


def test_service_options_come_from_the_uri_and_services_yaml(tmp_path: Any) -> None:
    (tmp_path / "services.yaml").write_text(
        "services:\n"
        "  - {scheme: redis, type: memory, class: adk_memory.adk.MemoryBankService}\n"
        "adk_memory:\n"
        "  generation_model: gemini-2.0-flash\n"
        "  idle_duration: 45s\n"
        "  bank: from-yaml\n"
        "  top_k: 4\n",
        encoding="utf-8",
    )
    # What ADK's services.yaml factory calls: the class with uri= and agents_dir=.
    service = MemoryBankService(
        uri="memory://options?top_k=6&generation_wait=2&embedding_model=hash-64",
        agents_dir=str(tmp_path),
    )
    assert service.bank_id == "from-yaml"
    assert service.top_k == 6  # the URI wins over the file
    assert service.generation_wait == 2.0
    assert service.generation_model == "gemini-2.0-flash"
    assert service.idle_trigger == {"generation_rule": {"idle_duration": "45s"}}
    chosen = MemoryBankService(
        uri="memory://options?generation_model=gemini-2.5-pro&embedding_model=hash-64",
        agents_dir=str(tmp_path),
        generation_model="gemini-2.5-flash",
    )
    assert chosen.generation_model == "gemini-2.5-flash"  # code wins over both
    from_uri = MemoryBankService(
        "memory://o?generation_model=gemini-2.5-pro&embedding_model=hash-64"
    )
    assert from_uri.generation_model == "gemini-2.5-pro"


def test_a_typo_in_the_services_yaml_options_is_refused_with_the_known_ones(tmp_path: Any) -> None:
    from adk_memory import InvalidArgument

    (tmp_path / "services.yaml").write_text(
        "adk_memory:\n  generaton_model: x\n  embedding_model: hash-64\n", encoding="utf-8"
    )
    with pytest.raises(InvalidArgument, match="generaton_model.*Known options: bank"):
        MemoryBankService(uri="memory://typo", agents_dir=str(tmp_path))
    with pytest.raises(InvalidArgument, match="idle_duration"):
        MemoryBankService("memory://typo?idle_duration=soon&embedding_model=hash-64")


@pytest.mark.parametrize(
    ("given", "stored"), [("45s", "45s"), ("1.5s", "1.5s"), ("1000000s", "1000000s")]
)
def test_the_idle_duration_is_stored_as_given_in_whole_or_fractional_seconds(
    given: str, stored: str
) -> None:
    service = MemoryBankService("memory://idle?embedding_model=hash-64", idle_duration=given)

    assert service.idle_trigger == {"generation_rule": {"idle_duration": stored}}


def test_the_service_and_the_plugin_refuse_the_same_idle_durations() -> None:
    from datetime import timedelta

    from adk_memory import InvalidArgument

    MemoryBankPlugin(idle_duration=timedelta(minutes=2))
    for bad in ("0s", "-5s", "soon", "60"):
        with pytest.raises(InvalidArgument, match="idle_duration"):
            MemoryBankService("memory://idle?embedding_model=hash-64", idle_duration=bad)
        with pytest.raises(InvalidArgument, match="idle_duration"):
            MemoryBankPlugin(idle_duration=bad)
    with pytest.raises(InvalidArgument, match="idle_duration"):
        MemoryBankPlugin(idle_duration=timedelta(0))


# Case 5: warm start

_COLD_START = """
import asyncio, json, sys
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from adk_memory.adk import MemoryBankPlugin, MemoryBankService
from adk_memory.testing.agent_models import ScriptedAgentModel, write_echo_agent

service = MemoryBankService(sys.argv[1])  # the default local embedding model, not loaded yet
warming = service.warming
model = ScriptedAgentModel()
runner = Runner(app_name="assistant", agent=LlmAgent(name="assistant", model=model),
                session_service=InMemorySessionService(), memory_service=service,
                plugins=[MemoryBankPlugin()])

async def main():
    session = await runner.session_service.create_session(app_name="assistant", user_id="u1")
    message = types.Content(role="user", parts=[types.Part(text="What should I drink?")])
    async for _ in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
        pass
    await runner.close()
    await service.aclose()
    seen = ScriptedAgentModel.request_text(model.requests[0])
    print(json.dumps({"warming": warming, "seen": seen}))

asyncio.run(main())
"""


@pytest.mark.slow
async def test_the_first_turn_after_a_start_has_its_memories(tmp_path: Any) -> None:
    """A new process, the default local embedder cold: the first turn still gets memories."""
    import os
    import subprocess
    import sys

    uri = f"chroma://{tmp_path / 'store'}"
    writer = MemoryBankService(uri)
    from google.adk.memory.memory_entry import MemoryEntry

    fact = genai_types.Content(role="user", parts=[genai_types.Part(text=TEA)])
    await writer.add_memory(app_name=APP, user_id="u1", memories=[MemoryEntry(content=fact)])
    await writer.aclose()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", _COLD_START, uri],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["warming"] is True
    assert TEA in outcome["seen"]


# adk api_server, driven over HTTP


_SERVICES_PY = """
from google.adk.cli.service_registry import get_service_registry
from adk_memory.adk import MemoryBankService
from adk_memory.testing.models import ScriptedMemoryModel

CUES = {"green tea": "I like green tea."}


def extract(request):
    conversation = ScriptedMemoryModel.prompt_text(request).split("</conversation>")[-2]
    facts = [fact for cue, fact in CUES.items() if cue in conversation]
    return {"memories": [{"fact": fact, "topics": ["USER_PREFERENCES"]} for fact in facts]}


def create_all(request):
    import re
    text = ScriptedMemoryModel.prompt_text(request)
    indexes = sorted({int(found) for found in re.findall(r"^\\[(\\d+)\\] ", text, re.MULTILINE)})
    return {"actions": [{"fact_index": index, "action": "CREATE"} for index in indexes]}


def factory(uri, **kwargs):
    model = ScriptedMemoryModel(extract=extract, consolidate=create_all)
    return MemoryBankService(uri, embedding_model="hash-64", generation_model=model, **kwargs)


get_service_registry().register_memory_service("chroma", factory)
"""


async def test_adk_api_server_next_session_remembers_over_http(tmp_path: Any) -> None:
    import os
    import socket
    import subprocess
    import sys
    from pathlib import Path

    import httpx

    agents = tmp_path / "agents"
    write_echo_agent(agents)
    (agents / "services.py").write_text(_SERVICES_PY, encoding="utf-8")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    adk = Path(sys.executable).parent / "adk"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    server = subprocess.Popen(
        [
            str(adk),
            "api_server",
            "--port",
            str(port),
            "--host",
            "127.0.0.1",
            f"--memory_service_uri=chroma://{tmp_path / 'store'}",
            str(agents),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=base, timeout=120) as http:
            for _ in range(600):
                try:
                    if (await http.get("/list-apps")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert server.poll() is None, "adk api_server exited"
                await asyncio.sleep(0.2)

            async def run(text: str) -> str:
                made = await http.post("/apps/echo_agent/users/u1/sessions", json={})
                made.raise_for_status()
                body = {
                    "appName": "echo_agent",
                    "userId": "u1",
                    "sessionId": made.json()["id"],
                    "newMessage": {"role": "user", "parts": [{"text": text}]},
                }
                events = (await http.post("/run", json=body)).raise_for_status().json()
                return str(events[-1]["content"]["parts"][0]["text"])

            first = await run("I love green tea, by the way.")
            second = await run("What should I drink?")
    finally:
        server.terminate()
        await asyncio.to_thread(server.wait, 60)
        assert server.stderr is not None
        log = server.stderr.read().decode(errors="replace")
        server.stderr.close()
    assert first == "remembered:", log[-3000:]
    assert TEA in second, log[-3000:]
