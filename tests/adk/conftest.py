"""Fixtures of the ADK integration tests: a memory service on every backend, two scripted models.

The *agent's* model (`ScriptedAgentModel`) records the requests ADK sends it; the *memory* model
(`ScriptedMemoryModel`) answers the extraction and consolidation calls of memory generation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from adk_helpers import create_every_fact, shared

from adk_memory.adk import MemoryBankService
from adk_memory.testing.models import ScriptedMemoryModel


@pytest.fixture
def memory_model() -> ScriptedMemoryModel:
    """The memory LLM: tests script its extractions; consolidation creates every new fact."""
    return ScriptedMemoryModel(consolidate=create_every_fact)


@pytest.fixture
def store(store_uri: str) -> str:
    """The test's store URI, shareable by several services in this process."""
    return shared(store_uri)


@pytest.fixture
async def service(
    store: str, memory_model: ScriptedMemoryModel
) -> AsyncIterator[MemoryBankService]:
    """A memory service on each backend, with the fast test embedder and the scripted memory LLM."""
    made = MemoryBankService(store, embedding_model="hash-64", generation_model=memory_model)
    try:
        yield made
    finally:
        await made.aclose()


@pytest.fixture
def make_service(store: str, memory_model: ScriptedMemoryModel) -> Callable[..., MemoryBankService]:
    """Builds more services on the same store (closed by the caller)."""

    def build(**options: Any) -> MemoryBankService:
        return MemoryBankService(
            store, embedding_model="hash-64", generation_model=memory_model, **options
        )

    return build
