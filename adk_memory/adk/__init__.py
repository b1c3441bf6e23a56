"""ADK integration: adk-memory as the `memory_service` of Google's Agent Development Kit.

- `MemoryBankService`: a `google.adk.memory.BaseMemoryService` running Memory Bank in-process on
  the store a URI names (`chroma:///path`, `chroma+http://…`, `redis://…`, `memory://`).
- `MemoryBankPlugin`: automatic memory for a `Runner`/`App`: memories in every model request,
  each run ingested in the background.
- `register_services()`: lets `adk web --memory_service_uri=redis://…` build the service
  (`SCHEMES`; ADK's own `memory://` stays ADK's).
- `memory_service_builder()`: the `memory_service_builder` for `AdkApp` on Agent Runtime.
- `SelfHostedVertexMemoryBankService`: ADK's own `VertexAiMemoryBankService` pointed at an
  `adk-memory serve` endpoint.
- `user_token_headers()`: the `header_provider` of an `McpToolset` against `adk-memory mcp`
  that confines each ADK user to their own scope.

Names are resolved lazily, so importing `adk_memory` never imports ADK.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adk_memory.adk._agent_runtime import (
        EphemeralStoreWarning,
        MemoryServiceBuilder,
        memory_service_builder,
    )
    from adk_memory.adk._mcp import user_token_headers
    from adk_memory.adk._plugin import MemoryBankPlugin
    from adk_memory.adk._registry import SCHEMES, memory_service_factory, register_services
    from adk_memory.adk._self_hosted import SelfHostedVertexMemoryBankService
    from adk_memory.adk._service import DEFAULT_TOP_K, MemoryBankEntry, MemoryBankService

__all__ = [
    "DEFAULT_TOP_K",
    "SCHEMES",
    "EphemeralStoreWarning",
    "MemoryBankEntry",
    "MemoryBankPlugin",
    "MemoryBankService",
    "MemoryServiceBuilder",
    "SelfHostedVertexMemoryBankService",
    "memory_service_builder",
    "memory_service_factory",
    "register_services",
    "user_token_headers",
]

_LAZY = {
    "MemoryBankEntry": "adk_memory.adk._service",
    "DEFAULT_TOP_K": "adk_memory.adk._service",
    "EphemeralStoreWarning": "adk_memory.adk._agent_runtime",
    "MemoryBankPlugin": "adk_memory.adk._plugin",
    "MemoryBankService": "adk_memory.adk._service",
    "MemoryServiceBuilder": "adk_memory.adk._agent_runtime",
    "SCHEMES": "adk_memory.adk._registry",
    "SelfHostedVertexMemoryBankService": "adk_memory.adk._self_hosted",
    "memory_service_builder": "adk_memory.adk._agent_runtime",
    "memory_service_factory": "adk_memory.adk._registry",
    "register_services": "adk_memory.adk._registry",
    "user_token_headers": "adk_memory.adk._mcp",
}


def __getattr__(name: str) -> Any:
    """Imports each public name (and ADK with it) on first use."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module), name)


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
