"""README claims of "Use with ADK" no other test exercised (the audit of 2026-12-02)."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Mapping, Sequence

import pytest
from adk_helpers import APP, agent, ask, runner_for
from google.adk.events import Event
from google.adk.memory import BaseMemoryService, InMemoryMemoryService
from google.adk.memory.base_memory_service import SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions import Session
from google.genai import types as genai_types

from adk_memory.adk import (
    EphemeralStoreWarning,
    MemoryBankPlugin,
    MemoryBankService,
    memory_service_builder,
)
from adk_memory.testing.agent_models import ScriptedAgentModel
from adk_memory.testing.models import ScriptedMemoryModel


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


async def test_add_memory_with_consolidation_sends_five_facts_per_generate_call(
    memory_model: ScriptedMemoryModel,
) -> None:
    service = MemoryBankService(
        f"memory://five-{uuid.uuid4().hex[:8]}",
        embedding_model="hash-64",
        generation_model=memory_model,
    )
    facts = [f"Fact number {index}." for index in range(7)]
    try:
        await service.add_memory(
            app_name=APP,
            user_id="u1",
            memories=[_entry(fact) for fact in facts],
            custom_metadata={"enable_consolidation": True, "wait_for_completion": True},
        )
        found = await service.search_memory(app_name=APP, user_id="u1", query="fact", top_k=10)
    finally:
        await service.aclose()
    new_facts = [
        ScriptedMemoryModel.prompt_text(request).split("NEW FACTS:", 1)[1].split("EXISTING")[0]
        for request in memory_model.requests
    ]
    assert [sum(fact in section for fact in facts) for section in new_facts] == [5, 2]
    assert sorted(entry.content.parts[0].text for entry in found.memories) == facts


def _entry(text: str) -> MemoryEntry:
    return MemoryEntry(
        content=genai_types.Content(role="user", parts=[genai_types.Part(text=text)])
    )


def _multimodal_session() -> Session:
    parts = [
        genai_types.Part(text="Here is my cat."),
        genai_types.Part(text="SECRET THOUGHT", thought=True),
        genai_types.Part(inline_data=genai_types.Blob(mime_type="image/png", data=b"PNG-CAT")),
        genai_types.Part(
            file_data=genai_types.FileData(mime_type="application/pdf", file_uri="gs://b/menu.pdf")
        ),
    ]
    said = genai_types.Content(role="user", parts=parts)
    return Session(
        id="s1",
        app_name=APP,
        user_id="u1",
        events=[Event(author="user", invocation_id="i1", content=said)],
    )


async def _extraction_request(model: ScriptedMemoryModel) -> genai_types.Content:
    service = MemoryBankService(
        f"memory://parts-{uuid.uuid4().hex[:8]}", embedding_model="hash-64", generation_model=model
    )
    try:
        await service.add_session_to_memory(_multimodal_session())
        await service.flush(app_name=APP, user_id="u1", session_id="s1")
    finally:
        await service.aclose()
    [request] = [r for r in model.requests if model.kind_of(r) == "extraction"]
    return request.contents[-1]


async def test_images_and_files_reach_a_model_that_reads_them_as_adks_vertex_sends_them() -> None:
    """ADK's Vertex service sends an event's content whole: the inline image and the file
    reference reach the extraction call, each after its label; the thought never does."""
    content = await _extraction_request(ScriptedMemoryModel(extractions=[{"memories": []}]))
    text = content.parts[0].text or ""
    conversation = text.rsplit("<conversation>", 1)[1].split("</conversation>")[0]
    assert conversation.strip() == (
        "user: Here is my cat. [attachment 1: image/png] [attachment 2: application/pdf]"
    )
    assert [part.text for part in content.parts[1::2]] == ["[attachment 1]:", "[attachment 2]:"]
    image, document = content.parts[2], content.parts[4]
    assert image.inline_data is not None and image.inline_data.data == b"PNG-CAT"
    assert image.inline_data.mime_type == "image/png"
    assert document.file_data is not None and document.file_data.file_uri == "gs://b/menu.pdf"
    assert all("SECRET THOUGHT" not in (part.text or "") for part in content.parts)


async def test_a_text_only_model_gets_the_text_and_a_note_instead_of_attachments() -> None:
    model = ScriptedMemoryModel(extractions=[{"memories": []}], accepts_attachments=False)
    content = await _extraction_request(model)
    assert len(content.parts) == 1
    text = content.parts[0].text or ""
    assert "[attachment 1: image/png]" in text and "Here is my cat." in text
    assert "2 attachment(s) of the conversation are not shown" in text
