"""What memory costs an ADK agent's turn, and when memories become visible (issue 21).

Run: `python -m benchmarks.adk_turn [--turns 30]`. Models are scripted (no network), so the
figures are memory's own cost; the embedder is the default all-MiniLM-L6-v2.

* `turn`        median and p95 wall time of one `Runner.run_async` turn (5 users, one session
                each, after 10 warm-up turns) with no memory service, and with `MemoryBankPlugin`
                on a `MemoryBankService` (memory://, embedded Chroma): the difference is what
                memory adds per turn (search, storing the run's events).
* `visible`     from the end of a session's last turn to the end of the user's next session's
                first turn, which already sees the new memory: that first turn's time minus a
                plain turn's (generation with the scripted model, then the search).
* `cold start`  a new process: build the service, run the first turn (the embedder still
                loading in the background); the seconds it takes and whether the turn had the
                stored memory.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types

from adk_memory.adk import MemoryBankPlugin, MemoryBankService
from adk_memory.testing.agent_models import ScriptedAgentModel
from adk_memory.testing.models import ScriptedMemoryModel

TEA = "I like green tea."


def _extract(request: Any) -> dict[str, Any]:
    conversation = ScriptedMemoryModel.prompt_text(request).split("</conversation>")[-2]
    facts = [TEA] if "green tea" in conversation else []
    return {"memories": [{"fact": fact, "topics": ["USER_PREFERENCES"]} for fact in facts]}


def _create_each_new_fact(request: Any) -> dict[str, Any]:
    text = ScriptedMemoryModel.prompt_text(request)
    indexes = sorted({int(found) for found in re.findall(r"^\[(\d+)\] ", text, re.MULTILINE)})
    return {"actions": [{"fact_index": index, "action": "CREATE"} for index in indexes]}


def _runner(service: MemoryBankService | None, model: ScriptedAgentModel) -> Runner:
    return Runner(
        app_name="bench",
        agent=LlmAgent(name="bench", model=model, instruction="Help."),
        session_service=InMemorySessionService(),
        memory_service=service,
        plugins=[MemoryBankPlugin()] if service is not None else [],
    )


async def _turn(runner: Runner, user: str, text: str, session: str | None = None) -> float:
    if session is None:
        session = (await runner.session_service.create_session(app_name="bench", user_id=user)).id
    message = types.Content(role="user", parts=[types.Part(text=text)])
    started = time.perf_counter()
    async for _ in runner.run_async(user_id=user, session_id=session, new_message=message):
        pass
    return time.perf_counter() - started


def _ms(samples: list[float]) -> str:
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"{statistics.median(ordered) * 1000:.1f} ms (p95 {p95 * 1000:.1f})"


async def _turns(uri: str | None, turns: int) -> tuple[list[float], float]:
    service = None
    if uri is not None:
        model = ScriptedMemoryModel(extract=_extract, consolidate=_create_each_new_fact)
        service = MemoryBankService(uri, generation_model=model)
        fact = types.Content(role="user", parts=[types.Part(text=TEA)])
        memories = [MemoryEntry(content=fact)]
        await service.add_memory(app_name="bench", user_id="u0", memories=memories)
    runner = _runner(service, ScriptedAgentModel())
    sessions = [
        (await runner.session_service.create_session(app_name="bench", user_id=f"u{i}")).id
        for i in range(5)
    ]

    async def one(index: int) -> float:
        user = index % 5
        text = f"What should I drink today, question {index}?"
        return await _turn(runner, f"u{user}", text, session=sessions[user])

    for index in range(10):  # warm up: first model calls, caches
        await one(index)
    samples = [await one(index) for index in range(turns)]
    visible = 0.0
    if service is not None:
        await _turn(runner, "v1", "I love green tea, by the way.")  # the session that ends
        first = await _turn(runner, "v1", "What should I drink?")  # the next session's first
        found = await service.search_memory(app_name="bench", user_id="v1", query="tea")
        assert found.memories, "the next session did not see the memory"
        visible = first - statistics.median(samples)
        await runner.close()
        await service.aclose()
    return samples, visible


_COLD = """
import asyncio, json, sys, time
started = time.perf_counter()
from google.adk.agents import LlmAgent
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from adk_memory.adk import MemoryBankPlugin, MemoryBankService
from adk_memory.testing.agent_models import ScriptedAgentModel
imported = time.perf_counter()
service = MemoryBankService(sys.argv[1])
model = ScriptedAgentModel()
runner = Runner(app_name="bench", agent=LlmAgent(name="bench", model=model),
                session_service=InMemorySessionService(), memory_service=service,
                plugins=[MemoryBankPlugin()])

async def main():
    session = await runner.session_service.create_session(app_name="bench", user_id="u1")
    message = types.Content(role="user", parts=[types.Part(text="What should I drink?")])
    begun = time.perf_counter()
    async for _ in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
        pass
    done = time.perf_counter()
    await runner.close()
    await service.aclose()
    seen = "green tea" in ScriptedAgentModel.request_text(model.requests[0])
    print(json.dumps({"import_s": imported - started, "first_turn_s": done - begun, "seen": seen}))

asyncio.run(main())
"""


async def _cold_start(folder: str) -> dict[str, Any]:
    uri = f"chroma://{folder}"
    writer = MemoryBankService(uri)
    fact = types.Content(role="user", parts=[types.Part(text=TEA)])
    await writer.add_memory(app_name="bench", user_id="u1", memories=[MemoryEntry(content=fact)])
    await writer.aclose()
    done = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", _COLD, uri], capture_output=True, text=True
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=30)
    turns = parser.parse_args().turns
    plain, _ = await _turns(None, turns)
    print(f"turn, no memory service:        {_ms(plain)}")
    with tempfile.TemporaryDirectory() as folder:
        stores = (("memory://", "memory://bench"), ("embedded Chroma", f"chroma://{folder}"))
        for label, uri in stores:
            samples, visible = await _turns(uri, turns)
            added = (statistics.median(samples) - statistics.median(plain)) * 1000
            print(f"turn, plugin on {label:16s} {_ms(samples)}; added {added:+.1f} ms")
            print(f"  visible in the next session's first turn after +{visible * 1000:.0f} ms")
    with tempfile.TemporaryDirectory() as folder:
        print(f"cold start (new process, embedded Chroma): {await _cold_start(folder)}")


if __name__ == "__main__":
    asyncio.run(main())
