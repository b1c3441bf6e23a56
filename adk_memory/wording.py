"""An error's advice in the terms of the surface that shows it.

An engine message that tells the caller what to call or set names it through a marker, not
through one surface's spelling: `call("memory_banks.delete")` and `option("force")` stand for
`memory_banks.delete()` and `force=True` in Python, `adk-memory banks delete` and `--force` on
the command line, the `DELETE` request and `?force=true` over REST, a tool and its argument over
MCP. `AdkMemoryError` keeps the marked template and renders its Python wording as its message;
each surface renders the template again with `render(error, surface)`.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from adk_memory.errors import AdkMemoryError

__all__ = ["Surface", "call", "option", "render", "render_text"]

Surface = Literal["python", "rest", "cli", "mcp"]

_MARKER = re.compile(r"\[\[(call|option):([a-z_.]+)\]\]")

# What each surface calls an operation the engine's advice names.
_CALLS: dict[str, dict[Surface, str]] = {
    "memory_banks.create": {
        "python": "memory_banks.create()",
        "rest": "POST …/reasoningEngines",
        "cli": "adk-memory banks create",
        "mcp": "adk-memory mcp (it creates its bank when missing)",
    },
    "memory_banks.delete": {
        "python": "memory_banks.delete(name, force=True)",
        "rest": "DELETE …/reasoningEngines/{bank}?force=true",
        "cli": "adk-memory banks delete --force",
        "mcp": "adk-memory banks delete --force (no tool deletes a bank)",
    },
    "memories.revisions.list": {
        "python": "memories.revisions.list()",
        "rest": "GET …/memories/{memory}/revisions",
        "cli": "adk-memory revisions list",
        "mcp": "the list_revisions tool",
    },
}

# What each surface calls a request option the engine's advice names.
_OPTIONS: dict[str, dict[Surface, str]] = {
    "force": {
        "python": "force=True",
        "rest": "force=true",
        "cli": "--force",
        "mcp": "force: true",
    },
    "credentials": {
        "python": "credentials.token, which the official SDK sends as a bearer token",
        "rest": "the request's headers",
        "cli": "the request's headers",
        "mcp": "the headers of this server's entry in your MCP client's configuration",
    },
    "filter_groups": {
        "python": "filter_groups",
        "rest": '"filterGroups"',
        "cli": "the Python or REST API's filter_groups",
        "mcp": "metadata_filters",
    },
    "filters": {
        "python": "filter or filter_groups",
        "rest": '"filter" or "filterGroups"',
        "cli": "--filter or --scope",
        "mcp": "a filter",
    },
}


def call(operation: str) -> str:
    """The marker of an operation (a key of the call table) inside an error message."""
    if operation not in _CALLS:
        raise KeyError(f"no wording for the call {operation!r}")
    return f"[[call:{operation}]]"


def option(name: str) -> str:
    """The marker of a request option (a key of the option table) inside an error message."""
    if name not in _OPTIONS:
        raise KeyError(f"no wording for the option {name!r}")
    return f"[[option:{name}]]"


def render_text(template: str, surface: Surface) -> str:
    """A marked message in one surface's terms.

    Messages quote what the caller sent (an id, a filter token), which may look like a marker:
    one naming no known operation or option is left as written, so that building an error
    never fails on the text it quotes.
    """

    def spell(found: re.Match[str]) -> str:
        table = _CALLS if found.group(1) == "call" else _OPTIONS
        spelled = table.get(found.group(2))
        return found.group(0) if spelled is None else spelled[surface]

    return _MARKER.sub(spell, template)


def render(error: AdkMemoryError, surface: Surface) -> str:
    """The error's message in one surface's terms."""
    return render_text(error.template, surface)
