"""The `adk-memory` command line (typer + rich).

Errors print one clear line and exit non-zero, never a traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer
from rich.console import Console

from adk_memory.errors import AdkMemoryError
from adk_memory.settings import api_keys_file, default_uri

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


@app.command()
def serve(
    uri: UriOption = None,
    host: Annotated[
        str, typer.Option(help="Address to bind; anything but loopback needs --keys.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8080,
    keys: Annotated[
        str | None,
        typer.Option(
            "--keys", help="API key file, YAML or JSON (default: $ADK_MEMORY_API_KEYS_FILE)."
        ),
    ] = None,
) -> None:
    """Serve the Memory Bank REST API for the official SDK and ADK (FastAPI + uvicorn)."""
    try:
        import uvicorn  # noqa: F401 - checked here so that a missing extra is one line

        from adk_memory.server import ApiKeys
        from adk_memory.server import serve as run_server
    except ImportError as exc:
        Console(stderr=True).print(
            f"[red]error:[/red] the REST server needs {exc.name or 'fastapi and uvicorn'}. "
            "Install it with: pip install 'adk-memory[server]'",
            soft_wrap=True,
        )
        sys.exit(1)
    try:
        keys_path = keys or api_keys_file()
        api_keys = ApiKeys.from_file(keys_path) if keys_path else None
        run_server(uri or default_uri(), host=host, port=port, api_keys=api_keys)
    except AdkMemoryError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc.code}: {exc}", soft_wrap=True)
        sys.exit(1)


@app.command()
def worker(
    uri: UriOption = None,
    poll_seconds: Annotated[float, typer.Option(help="Seconds between scans.")] = 1.0,
    once: Annotated[bool, typer.Option(help="Flush what is due once, then exit.")] = False,
) -> None:
    """Flush due ingest streams (IngestEvents) until stopped: the scheduler for deployments."""
    import asyncio

    from adk_memory import AsyncClient
    from adk_memory.scheduler import IngestScheduler

    async def run() -> None:
        async with AsyncClient(uri or default_uri(), run_scheduler=False) as client:
            scheduler = IngestScheduler(client.engine, poll_seconds=poll_seconds)
            if once:
                changed = await scheduler.run_once()
                Console().print(f"Flushed due streams: {changed} memories changed.")
            else:
                Console().print(f"adk-memory worker on {client.uri}: flushing due ingest streams.")
                await scheduler.run_forever()

    try:
        asyncio.run(run())
    except KeyboardInterrupt:
        pass
    except AdkMemoryError as exc:
        Console(stderr=True).print(f"[red]error:[/red] {exc.code}: {exc}", soft_wrap=True)
        sys.exit(1)


if __name__ == "__main__":
    app()
