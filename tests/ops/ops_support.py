"""Helpers of the operations tests: the REST app served by uvicorn in a thread."""

from __future__ import annotations

from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

from adk_memory import AsyncClient
from adk_memory.testing.rest_server import RunningRestServer, rest_server


@dataclass
class RunningServer:
    """`adk-memory serve` in a thread: a uvicorn server over an `AsyncClient`."""

    url: str
    client: AsyncClient
    running: RunningRestServer

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Runs a coroutine on the server's loop (where its client lives)."""
        return self.running.run(coro)


def start_server(client: AsyncClient, **app_options: Any) -> Iterator[RunningServer]:
    """Starts the REST app on a free loopback port; stops it when the generator closes."""
    with rest_server(client, **app_options) as running:
        yield RunningServer(running.url, client, running)
