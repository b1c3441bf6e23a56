"""Configuration without code: ADK's service registry builds `MemoryBankService` from a URI."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from adk_helpers import APP
from google.adk.memory import InMemoryMemoryService
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types as genai_types

from adk_memory.adk import SCHEMES, MemoryBankService

SAMPLES = Path(__file__).resolve().parents[2] / "sample_agents"


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> Iterator[ModuleType]:
    """ADK's registry module with a fresh process-wide registry, as a new `adk web` has."""
    from google.adk.cli import service_registry

    monkeypatch.setattr(service_registry, "_service_registry_instance", None)
    monkeypatch.delitem(sys.modules, "services", raising=False)
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield service_registry
    sys.modules.pop("services", None)


def uris(tmp_path: Path) -> list[str]:
    # A service connects at construction: every server named here is a closed local port.
    return [
        f"chroma://{tmp_path}",
        "chroma+http://127.0.0.1:9",
        "chroma+https://127.0.0.1:9",
        "redis://127.0.0.1:9/0",
        "rediss://:secret@127.0.0.1:9/0?bank=prod",
        "redis+cluster://127.0.0.1:9,127.0.0.1:10",
        "rediss+cluster://:secret@127.0.0.1:9",
        "http://127.0.0.1:9",
        "https://127.0.0.1:9?bank=prod",
    ]


def built(service: object) -> object:
    """The service ADK built, closed (it started connecting when built)."""
    if isinstance(service, MemoryBankService):
        asyncio.run(service.aclose())
    return service


def test_shipped_services_yaml_lets_adk_build_the_service_for_each_scheme(
    registry: ModuleType, tmp_path: Path
) -> None:
    assert registry.get_service_registry().create_memory_service(f"chroma://{tmp_path}") is None
    registry.load_services_module(str(SAMPLES))  # what `adk web sample_agents` does
    made = registry.get_service_registry()
    for uri in uris(tmp_path):
        assert isinstance(
            built(made.create_memory_service(uri, agents_dir=str(SAMPLES))), MemoryBankService
        )
    assert {uri.split(":", 1)[0] for uri in uris(tmp_path)} == set(SCHEMES)
    assert isinstance(
        made.create_memory_service("memory://", agents_dir=str(SAMPLES)), InMemoryMemoryService
    )


def test_agent_folders_services_py_registers_for_adk_run(
    registry: ModuleType, tmp_path: Path
) -> None:
    registry.load_services_module(str(SAMPLES / "personal_assistant"))  # what `adk run` does
    made = registry.get_service_registry()
    for uri in uris(tmp_path):
        assert isinstance(
            built(made.create_memory_service(uri, agents_dir=str(SAMPLES))), MemoryBankService
        )
    assert isinstance(made.create_memory_service("memory://"), InMemoryMemoryService)


def test_adk_cli_options_build_the_service(registry: ModuleType, tmp_path: Path) -> None:
    from google.adk.cli.utils.service_factory import create_memory_service_from_options

    registry.load_services_module(str(SAMPLES))
    service = built(
        create_memory_service_from_options(
            base_dir=SAMPLES, memory_service_uri="redis://127.0.0.1:9/0?bank=cli"
        )
    )
    assert isinstance(service, MemoryBankService) and service.bank_id == "cli"
    own = create_memory_service_from_options(base_dir=SAMPLES, memory_service_uri="memory://")
    assert isinstance(own, InMemoryMemoryService)


async def test_a_service_built_by_the_registry_remembers(
    registry: ModuleType, store_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADK_MEMORY_EMBEDDING_MODEL", "hash-64")
    registry.load_services_module(str(SAMPLES))
    uri = f"{store_uri}{'&' if '?' in store_uri else '?'}bank=from-registry"
    service = registry.get_service_registry().create_memory_service(uri, agents_dir=str(SAMPLES))
    if store_uri == "memory://":
        # memory:// is ADK's own scheme: adk-memory never registers it.
        assert isinstance(service, InMemoryMemoryService)
        return
    assert isinstance(service, MemoryBankService) and service.bank_id == "from-registry"
    try:
        fact = genai_types.Content(role="user", parts=[genai_types.Part(text="I like green tea.")])
        await service.add_memory(app_name=APP, user_id="u1", memories=[MemoryEntry(content=fact)])
        found = await service.search_memory(app_name=APP, user_id="u1", query="tea")
        assert found.memories[0].name.startswith(service.bank_name)  # type: ignore[attr-defined]
    finally:
        await service.aclose()
