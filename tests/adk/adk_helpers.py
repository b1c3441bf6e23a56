"""Helpers of the ADK integration tests: scripted answers, a runner, one conversation turn."""

from __future__ import annotations

import re
import uuid
from typing import Any

from google.adk.agents import LlmAgent
from google.adk.events.event import Event
from google.adk.models.llm_request import LlmRequest
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types as genai_types

from adk_memory.testing.agent_models import ScriptedAgentModel
from adk_memory.testing.models import ScriptedMemoryModel

APP = "assistant"
_NEW_FACT = re.compile(r"^\[(\d+)\] ", re.MULTILINE)


def create_every_fact(request: LlmRequest) -> dict[str, Any]:
    """A consolidation answer that creates each new fact of the prompt."""
    text = ScriptedMemoryModel().prompt_text(request)
    indexes = sorted({int(found) for found in _NEW_FACT.findall(text)})
    return {"actions": [{"fact_index": index, "action": "CREATE"} for index in indexes]}


def extraction(*facts: str, topic: str = "USER_PREFERENCES") -> dict[str, Any]:
    """An extraction answer holding `facts`."""
    return {"memories": [{"fact": fact, "topics": [topic]} for fact in facts]}


def shared(store_uri: str) -> str:
    """A URI several clients in this process can share (`memory://` alone is private)."""
    return f"memory://shared-{uuid.uuid4().hex[:10]}" if store_uri == "memory://" else store_uri


def agent(model: ScriptedAgentModel, *, tools: list[Any] | None = None) -> LlmAgent:
    """An agent answering with the scripted agent model."""
    return LlmAgent(
        name="assistant", model=model, instruction="You are a helpful assistant.", tools=tools or []
    )


async def ask(
    runner: Runner, *, user_id: str, text: str, session_id: str | None = None
) -> tuple[str, list[Event]]:
    """Runs one turn; returns the session id (a new session unless given) and the events."""
    if session_id is None:
        session = await runner.session_service.create_session(
            app_name=runner.app_name, user_id=user_id
        )
        session_id = session.id
    message = genai_types.Content(role="user", parts=[genai_types.Part(text=text)])
    events = [
        event
        async for event in runner.run_async(
            user_id=user_id, session_id=session_id, new_message=message
        )
    ]
    return session_id, events


def runner_for(
    root: LlmAgent, memory: Any, *, app_name: str = APP, plugins: list[Any] | None = None
) -> Runner:
    """A real ADK runner with in-memory sessions."""
    return Runner(
        app_name=app_name,
        agent=root,
        session_service=InMemorySessionService(),
        memory_service=memory,
        plugins=plugins or [],
    )


def count_store_writes(service: Any) -> list[int]:
    """From now on, the number of hand-overs in each store write of `service`'s writer."""
    writes: list[int] = []
    write = service._ingest_many

    async def counted(requests: list[Any]) -> list[Any]:
        writes.append(len(requests))
        return await write(requests)

    service._ingest_many = counted
    return writes
