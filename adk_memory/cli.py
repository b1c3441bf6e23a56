"""The `adk-memory` command line (typer + rich).

Errors print one clear line and exit non-zero, never a traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from adk_memory.errors import AdkMemoryError
from adk_memory.settings import default_uri

__all__ = ["app"]

app = typer.Typer(help="adk-memory: a self-hosted Memory Bank.", no_args_is_help=True)

UriOption = Annotated[
    str | None,
    typer.Option("--uri", help="Store URI (default: $ADK_MEMORY_URI, else chroma://~/.adk-memory)."),
]


@app.callback()
def main() -> None:
    """A self-hosted Memory Bank: long-term memory for AI agents."""


@app.command()
def quickstart(
    uri: UriOption = None,
    keep: Annotated[bool, typer.Option(help="Keep the quickstart bank afterwards.")] = False,
) -> None:
    """A one-minute tour on embedded Chroma: memories, retrieval, filters, revisions, TTL."""
    from adk_memory.quickstart import run_quickstart

    try:
        run_quickstart(uri or default_uri(), keep=keep)
    except AdkMemoryError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc.code}: {exc}")
        sys.exit(1)
