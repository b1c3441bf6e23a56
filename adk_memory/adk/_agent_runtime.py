"""`memory_service_builder`: the memory service for `AdkApp` on Agent Runtime (or any container).

`AdkApp(agent=…, memory_service_builder=…)` calls the builder once per replica in `set_up()`,
after the app was pickled and shipped, so the builder is a small picklable object and resolves
`ADK_MEMORY_URI` where it runs. An embedded store (`chroma:///path`, `memory://`) inside a
container lives on that replica's disk or heap: each replica remembers different things and
everything is lost when the container stops. The builder warns when it sees that.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from adk_memory.adk._service import MemoryBankService
from adk_memory.settings import container_runtime, default_uri

__all__ = ["EphemeralStoreWarning", "MemoryServiceBuilder", "memory_service_builder"]

logger = logging.getLogger(__name__)

_EMBEDDED_SCHEMES = frozenset({"chroma", "memory"})


class EphemeralStoreWarning(UserWarning):
    """The memory store is embedded in a container: per replica, and lost when it stops."""


@dataclass(frozen=True)
class MemoryServiceBuilder:
    """A picklable zero-argument callable that builds a `MemoryBankService`."""

    uri: str | None = None
    """The store URI; None resolves `ADK_MEMORY_URI` (else embedded Chroma) when called."""
    options: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments for `MemoryBankService` (`bank`, `top_k`, models, bank config)."""

    def __call__(self) -> MemoryBankService:
        """Builds the service, warning if its store would be embedded in a container."""
        uri = self.uri or default_uri()
        platform = container_runtime()
        scheme = urlsplit(uri).scheme
        if platform is not None and scheme in _EMBEDDED_SCHEMES:
            message = (
                f"adk-memory: the {scheme}:// store is embedded in this process, which runs on "
                f"{platform}. Each replica keeps its own memories and loses them when the "
                "container stops. Point ADK_MEMORY_URI (or the builder's uri) at a shared store: "
                "redis://…, or chroma+http://…?lock_url=redis… (replicas are several hosts)."
            )
            logger.warning(message)
            warnings.warn(message, EphemeralStoreWarning, stacklevel=2)
        return MemoryBankService(uri, **self.options)


def memory_service_builder(uri: str | None = None, **options: Any) -> MemoryServiceBuilder:
    """The `memory_service_builder` for `AdkApp`, e.g. `memory_service_builder("redis://h:6379")`.

    Args:
        uri: The store URI. Default: `ADK_MEMORY_URI` where the app runs, else embedded Chroma.
        **options: Keyword arguments for `MemoryBankService` (`bank=`, `top_k=`,
            `embedding_model=`, `generation_model=`, bank config fields). They are checked now.

    Returns:
        A picklable callable; each call builds a new `MemoryBankService`.

    Raises:
        InvalidArgument: The options are not valid for `MemoryBankService`.
    """
    MemoryBankService.check(uri, **options)  # validate now (no I/O), not on the first query
    return MemoryServiceBuilder(uri=uri, options=dict(options))
