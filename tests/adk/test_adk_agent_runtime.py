"""`AdkApp` (Agent Runtime's ADK template) with adk-memory, run locally with scripted models."""

from __future__ import annotations

import os
import pickle
from collections.abc import Iterator

import pytest
from adk_helpers import APP, agent, extraction

from adk_memory.adk import (
    EphemeralStoreWarning,
    MemoryBankPlugin,
    MemoryBankService,
    MemoryServiceBuilder,
    memory_service_builder,
)
from adk_memory.testing.agent_models import ScriptedAgentModel
from adk_memory.testing.models import ScriptedMemoryModel

# Warnings of AdkApp's own imports, not of adk-memory: set_up() builds ADK's experimental
# InMemoryCredentialService (attributed to agentplatform's module), and async_stream_query
# imports google.api_core, which asks for the optional grpcio-status.
pytestmark = [
    pytest.mark.filterwarnings("ignore:\\[EXPERIMENTAL\\]:UserWarning"),
    pytest.mark.filterwarnings("ignore:Please install grpcio-status:ImportWarning"),
]


@pytest.fixture
def no_container(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Runs as on a laptop (this CI machine is itself a container), restoring the environment
    `AdkApp.set_up()` writes to."""
    monkeypatch.setattr("adk_memory.adk._agent_runtime.container_runtime", lambda: None)
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


class Recording:
    """Wraps a builder to keep what it built, so the test can close it."""

    def __init__(self, builder: MemoryServiceBuilder) -> None:
        self.builder = builder
        self.built: list[MemoryBankService] = []

    def __call__(self) -> MemoryBankService:
        self.built.append(self.builder())
        return self.built[-1]

    async def drain(self) -> None:
        for service in self.built:
            await service.drain()

    async def aclose(self) -> None:
        for service in self.built:
            await service.aclose()


async def test_adk_app_with_the_builder_remembers_between_queries(
    no_container: None, store: str, memory_model: ScriptedMemoryModel
) -> None:
    from agentplatform.frameworks.adk import AdkApp

    memory_model.extractions = [extraction("I like green tea.")]
    builder = Recording(
        memory_service_builder(store, embedding_model="hash-64", generation_model=memory_model)
    )
    plugin = MemoryBankPlugin()
    model = ScriptedAgentModel()
    app = AdkApp(agent=agent(model), app_name=APP, plugins=[plugin], memory_service_builder=builder)
    helper = MemoryBankService(store, embedding_model="hash-64", generation_model=memory_model)
    try:
        session = await app.async_create_session(user_id="u1")
        events = [
            event
            async for event in app.async_stream_query(
                message="I love green tea.", user_id="u1", session_id=session["id"]
            )
        ]
        assert events[-1]["content"]["parts"][0]["text"] == "OK."
        await plugin.drain()
        await helper.flush(app_name=APP, user_id="u1", session_id=session["id"])

        found = await app.async_search_memory(user_id="u1", query="tea")
        assert [memory.content.parts[0].text for memory in found.memories] == ["I like green tea."]
        async for _ in app.async_stream_query(message="What should I drink?", user_id="u1"):
            pass
        assert "I like green tea." in ScriptedAgentModel.request_text(model.requests[-1])
    finally:
        await plugin.drain()
        await builder.aclose()
        await helper.aclose()


async def test_adk_app_add_session_to_memory_goes_to_the_bank(
    no_container: None, store: str, memory_model: ScriptedMemoryModel
) -> None:
    from agentplatform.frameworks.adk import AdkApp

    memory_model.extractions = [extraction("I live in Berlin.")]
    builder = Recording(
        memory_service_builder(store, embedding_model="hash-64", generation_model=memory_model)
    )
    app = AdkApp(agent=agent(ScriptedAgentModel()), app_name=APP, memory_service_builder=builder)
    helper = MemoryBankService(store, embedding_model="hash-64", generation_model=memory_model)
    try:
        session = await app.async_create_session(user_id="u1")
        async for _ in app.async_stream_query(
            message="I moved to Berlin.", user_id="u1", session_id=session["id"]
        ):
            pass
        await app.async_add_session_to_memory(
            session=session
        )  # fetches the events, hands them over
        await builder.drain()  # stored in the store by the app's service, off the call
        await helper.flush(app_name=APP, user_id="u1", session_id=session["id"])
        found = await helper.search_memory(app_name=APP, user_id="u1", query="Berlin")
        assert [memory.content.parts[0].text for memory in found.memories] == ["I live in Berlin."]
    finally:
        await builder.aclose()
        await helper.aclose()


def test_builder_warns_when_an_embedded_store_would_live_in_a_container(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setattr("adk_memory.adk._agent_runtime.container_runtime", lambda: "Agent Runtime")
    with pytest.warns(EphemeralStoreWarning, match="Agent Runtime"):
        memory_service_builder(f"chroma://{tmp_path}")()
    monkeypatch.delenv("ADK_MEMORY_URI", raising=False)
    with pytest.warns(EphemeralStoreWarning):
        memory_service_builder()()  # the default store is embedded Chroma
    assert isinstance(memory_service_builder("redis://127.0.0.1:9/0")(), MemoryBankService)


def test_builder_is_picklable_and_checks_its_options_at_once() -> None:
    builder = memory_service_builder("redis://127.0.0.1:9/0", bank="prod", top_k=5)
    assert pickle.loads(pickle.dumps(builder)) == builder
    from adk_memory import InvalidArgument

    with pytest.raises(InvalidArgument):
        memory_service_builder("redis://127.0.0.1:9/0", customization_config=[])


def test_builder_uses_adk_memory_uri_where_it_runs(
    monkeypatch: pytest.MonkeyPatch, no_container: None
) -> None:
    builder = memory_service_builder(bank="prod")
    monkeypatch.setenv("ADK_MEMORY_URI", "redis://127.0.0.1:9/0?top_k=4")
    service = builder()
    assert service.bank_id == "prod" and service.top_k == 4
