"""Registers `MemoryBankService` in ADK's service registry, for adk-memory's URI schemes only.

After `register_services()`, `adk web --memory_service_uri=redis://…` (and `adk run`,
`adk api_server`) build a `MemoryBankService`. The agents folder runs it through a
`services.py`, or names `adk_memory.adk.MemoryBankService` in a `services.yaml` (ADK then calls
`MemoryBankService(uri=…, agents_dir=…)`). ADK's own schemes (`memory`, `rag`, `agentengine`,
`sqlite`) are never registered: that would silently replace ADK's services for every agent.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from adk_memory.adk._service import MemoryBankService

if TYPE_CHECKING:
    from google.adk.cli.service_registry import ServiceRegistry

__all__ = ["SCHEMES", "memory_service_factory", "register_services"]

SCHEMES = (
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "chroma",
    "chroma+http",
    "chroma+https",
    "http",
    "https",
)
"""The URI schemes adk-memory registers in ADK (never `memory://`: that one is ADK's);
`http(s)://` names a running `adk-memory serve` (ADK has no memory service of those schemes)."""


def memory_service_factory(uri: str, **kwargs: Any) -> MemoryBankService:
    """ADK's factory signature: `(uri, agents_dir=…)` to a `MemoryBankService`."""
    return MemoryBankService(uri=uri, **kwargs)


def register_services(registry: ServiceRegistry | None = None) -> None:
    """Registers the memory service for adk-memory's URI schemes (`SCHEMES`).

    Args:
        registry: The registry to fill; default: ADK's process-wide `get_service_registry()`.
    """
    if registry is None:
        from google.adk.cli.service_registry import get_service_registry

        registry = get_service_registry()
    for scheme in SCHEMES:
        registry.register_memory_service(scheme, memory_service_factory)
