"""README claims of "Use with ADK" no other test exercised (the audit of 2026-12-02)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence

import pytest
from adk_helpers import agent, ask, runner_for
from google.adk.events import Event
from google.adk.memory import BaseMemoryService, InMemoryMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.sessions import Session

from adk_memory.adk import EphemeralStoreWarning, MemoryBankPlugin, memory_service_builder
from adk_memory.testing.agent_models import ScriptedAgentModel


async def test_the_plugin_warns_that_adks_in_memory_service_forgets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ "Without --memory_service_uri, ADK gives the runner its in-memory service … (the plugin
    logs a warning)": once, and the turns are answered."""
    model = ScriptedAgentModel()
    runner = runner_for(agent(model), InMemoryMemoryService(), plugins=[MemoryBankPlugin()])
    with caplog.at_level(logging.WARNING, logger="adk_memory"):
        session, _ = await ask(runner, user_id="u1", text="I like tea.")
        await ask(runner, user_id="u1", text="And coffee.", session_id=session)
    await runner.close()
    warnings = [r.getMessage() for r in caplog.records if "in-memory" in r.getMessage()]
    assert len(warnings) == 1 and "memories last only as long as this process" in warnings[0]
    assert len(model.requests) == 2


class HangingMemoryService(BaseMemoryService):
    """An ADK memory service whose writes never finish (a store that hangs)."""

    async def add_session_to_memory(self, session: Session) -> None:
        await asyncio.Event().wait()

    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        await asyncio.Event().wait()

    async def search_memory(
        self, *, app_name: str, user_id: str, query: str
    ) -> SearchMemoryResponse:
        return SearchMemoryResponse()


async def test_runner_close_waits_at_most_4_s_for_the_plugins_writes(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """ "`Runner.close()` waits at most 4 s for the plugin (ADK allows 5)"; the run itself
    waits `ingest_timeout`, then returns with the write still running."""
    plugin = MemoryBankPlugin(ingest_timeout=0.2)
    runner = runner_for(agent(ScriptedAgentModel()), HangingMemoryService(), plugins=[plugin])
    started = time.monotonic()
    await ask(runner, user_id="u1", text="I like tea.")
    ran = time.monotonic() - started
    with caplog.at_level(logging.WARNING, logger="adk_memory"):
        started = time.monotonic()
        await runner.close()
        closed = time.monotonic() - started
    assert ran < 3
    assert 3.9 <= closed < 5
    assert any(
        "closed with 1 memory writes still running" in r.getMessage() for r in caplog.records
    )


@pytest.mark.parametrize(
    ("variable", "platform"),
    [
        ("GOOGLE_CLOUD_AGENT_ENGINE_ID", "Agent Runtime"),
        ("K_SERVICE", "Cloud Run"),
        ("KUBERNETES_SERVICE_HOST", "Kubernetes"),
    ],
)
async def test_the_builder_names_the_platform_an_embedded_store_would_die_with(
    monkeypatch: pytest.MonkeyPatch, variable: str, platform: str
) -> None:
    """The variables each platform sets are what the builder's warning reads."""
    for other in ("GOOGLE_CLOUD_AGENT_ENGINE_ID", "K_SERVICE", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(other, raising=False)
    monkeypatch.setenv(variable, "set-by-the-platform")
    with pytest.warns(EphemeralStoreWarning, match=platform):
        service = memory_service_builder("memory://replica", embedding_model="hash-64")()
    await service.aclose()
