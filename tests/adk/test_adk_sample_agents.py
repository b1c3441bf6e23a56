"""The sample agents load as `adk run`/`adk web` load them and remember, with scripted models."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from adk_helpers import ask, extraction
from google.adk.apps import App
from google.adk.cli.utils.agent_loader import AgentLoader
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService

from adk_memory import AsyncClient
from adk_memory.adk import MemoryBankPlugin, MemoryBankService
from adk_memory.testing.agent_models import ScriptedAgentModel
from adk_memory.testing.models import ScriptedMemoryModel

SAMPLES = Path(__file__).resolve().parents[2] / "sample_agents"


@pytest.fixture
def loader(monkeypatch: pytest.MonkeyPatch) -> Iterator[AgentLoader]:
    """ADK's own agent loader over `sample_agents/` (what `adk web sample_agents` uses)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield AgentLoader(agents_dir=str(SAMPLES))
    for name in [
        name
        for name in sys.modules
        if name.split(".")[0] in {"personal_assistant", "coffee_shop_feedback"}
    ]:
        del sys.modules[name]


def scripted(app: App, model: ScriptedAgentModel, *, plugins: list[Any] | None = None) -> App:
    """The sample app with the agent's Gemini model replaced by a scripted one."""
    root = app.root_agent.clone(update={"model": model})
    return App(
        name=app.name, root_agent=root, plugins=plugins if plugins is not None else app.plugins
    )


async def test_personal_assistant_remembers_the_user_across_sessions(
    loader: AgentLoader, service: MemoryBankService, memory_model: ScriptedMemoryModel
) -> None:
    app = loader.load_agent("personal_assistant")
    assert isinstance(app, App)
    assert [type(plugin) for plugin in app.plugins] == [MemoryBankPlugin]
    memory_model.extractions = [extraction("My name is Ada.", topic="USER_PERSONAL_INFO")]
    model = ScriptedAgentModel()
    runner = Runner(
        app=scripted(app, model), session_service=InMemorySessionService(), memory_service=service
    )

    session_id, _ = await ask(runner, user_id="ada", text="Hi, I'm Ada.")
    await app.plugins[0].drain()
    await service.flush(app_name=app.name, user_id="ada", session_id=session_id)
    await ask(runner, user_id="ada", text="Do you remember me?")
    assert "My name is Ada." in ScriptedAgentModel.request_text(model.requests[-1])
    await ask(runner, user_id="bob", text="Do you remember me?")
    assert "My name is Ada." not in ScriptedAgentModel.request_text(model.requests[-1])
    await runner.close()


async def test_coffee_shop_files_feedback_under_its_custom_topic(
    loader: AgentLoader, store: str, memory_model: ScriptedMemoryModel
) -> None:
    app = loader.load_agent("coffee_shop_feedback")
    module = sys.modules["coffee_shop_feedback.agent"]
    assert isinstance(app, App) and module.memory.bank_id == "coffee-shop-feedback"
    service = MemoryBankService(
        store,
        bank=module.BANK_ID,
        customization_configs=[module.COFFEE_SHOP_MEMORY],
        embedding_model="hash-64",
        generation_model=memory_model,
    )
    memory_model.extractions = [
        extraction("The user felt the espresso was too bitter.", topic="business_feedback")
    ]
    plugin = MemoryBankPlugin(service=service)
    model = ScriptedAgentModel()
    runner = Runner(
        app=scripted(app, model, plugins=[plugin]), session_service=InMemorySessionService()
    )
    try:
        session_id, _ = await ask(
            runner, user_id="c1", text="The espresso was way too bitter today."
        )
        await plugin.drain()
        await service.flush(app_name=app.name, user_id="c1", session_id=session_id)

        prompt = memory_model.prompt_text(memory_model.requests[0])
        assert "business_feedback" in prompt and "service speed, cleanliness" in prompt
        assert "The user reported that the drip coffee was lukewarm." in prompt  # few-shot example
        assert "Thanks for the coffee." in prompt  # the nothing-to-remember example
        async with AsyncClient(store, embedding_model="hash-64") as client:
            memories = [
                memory
                async for memory in await client.memory_banks.memories.list(name=service.bank_name)
            ]
        assert [topic.custom_memory_topic_label for topic in memories[0].topics] == [
            "business_feedback"
        ]
        assert memories[0].scope == {"app_name": "coffee_shop_feedback", "user_id": "c1"}

        await ask(runner, user_id="c1", text="Hi again!")
        assert "The user felt the espresso was too bitter." in ScriptedAgentModel.request_text(
            model.requests[-1]
        )
    finally:
        await runner.close()  # waits for the plugin's last ingest
        await service.aclose()
