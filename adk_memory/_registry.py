"""Finds the storage backend for a URI through the `adk_memory.backends` entry-point group.

Backends are separate distributions; each registers its URI schemes. The core's reference store
(`memory://`) is found the same way, so that path is always exercised.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from adk_memory.errors import FailedPrecondition, InvalidArgument

if TYPE_CHECKING:  # the store module imports numpy, which a client of a server never needs
    from adk_memory.store import MemoryStore

__all__ = ["BACKENDS_GROUP", "SERVER_SCHEMES", "is_server_uri", "store_class_for", "store_from_uri"]

BACKENDS_GROUP = "adk_memory.backends"
SERVER_SCHEMES = ("http", "https")
"""Schemes that name a running `adk-memory serve`, not a store: `AsyncClient` makes a client of
that server for them (`adk_memory._remote`) before it would look for a backend."""

_INSTALL_HINTS = {
    "redis": " Install it with: pip install 'adk-memory[redis]'",
    "rediss": " Install it with: pip install 'adk-memory[redis]'",
    "redis+cluster": " Install it with: pip install 'adk-memory[redis]'",
    "rediss+cluster": " Install it with: pip install 'adk-memory[redis]'",
    "chroma": " Install it with: pip install 'adk-memory[chroma]'",
    "chroma+http": " Install it with: pip install 'adk-memory[chroma]'",
    "chroma+https": " Install it with: pip install 'adk-memory[chroma]'",
    "http": " An http(s) URI names an adk-memory server: give it to Client or AsyncClient.",
    "https": " An http(s) URI names an adk-memory server: give it to Client or AsyncClient.",
}


def is_server_uri(uri: str) -> bool:
    """Whether `uri` names an adk-memory server (`http://`, `https://`) rather than a store."""
    return urlsplit(uri).scheme.lower() in SERVER_SCHEMES


def store_class_for(uri: str) -> type[MemoryStore]:
    """Returns the installed backend class registered for the URI's scheme."""
    scheme = urlsplit(uri).scheme
    if not scheme:
        raise InvalidArgument(
            f"Storage URI {uri[:60]!r} has no scheme; use memory://, chroma:///path, "
            "chroma+http://host:port, redis://host:port, rediss://host:port, or an adk-memory "
            "server's http://host:port.",
            field="uri",
        )
    found = entry_points(group=BACKENDS_GROUP, name=scheme)
    if not found:
        installed = sorted({ep.name for ep in entry_points(group=BACKENDS_GROUP)})
        if scheme in _INSTALL_HINTS:
            raise FailedPrecondition(
                f"No installed storage backend handles {scheme!r} URIs.{_INSTALL_HINTS[scheme]}",
                field="uri",
            )
        raise InvalidArgument(
            f"No storage backend handles {scheme[:20]!r} URIs. Installed schemes: "
            f"{', '.join(f'{name}://' for name in installed)}.",
            field="uri",
        )
    if len(found) > 1:
        raise FailedPrecondition(
            f"{len(found)} storage backends handle {scheme!r} URIs: "
            f"{', '.join(sorted(ep.value for ep in found))}. Uninstall all but one."
        )
    store_class: type[MemoryStore] = next(iter(found)).load()
    return store_class


def store_from_uri(uri: str, *, serving: bool = False, **options: Any) -> MemoryStore:
    """Builds (without connecting) the store for a URI.

    Args:
        uri: The store URI.
        serving: The store serves many callers in a long-lived process (an ADK service, a
            server): a backend's `serving_options(uri)` classmethod, if it has one, adds what it
            wants then (embedded Chroma: a child process). The URI and `options` win over it.
        **options: The backend's `from_uri` options.
    """
    store_class = store_class_for(uri)
    serving_options = getattr(store_class, "serving_options", None) if serving else None
    if serving_options is not None:
        options = {**serving_options(uri), **options}
    return store_class.from_uri(uri, **options)
