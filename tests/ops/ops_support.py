"""Helpers of the operations tests: the REST app served by uvicorn in a thread."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from adk_memory import AsyncClient


@dataclass
class RunningServer:
    """`adk-memory serve` in a thread: a uvicorn server over an `AsyncClient`."""

    url: str
    client: AsyncClient
    loop: asyncio.AbstractEventLoop
    server: uvicorn.Server
    thread: threading.Thread

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Runs a coroutine on the server's loop (where its client lives)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)


def start_server(client: AsyncClient, **app_options: Any) -> Iterator[RunningServer]:
    """Starts the REST app on a free loopback port; stops it when the generator closes."""
    from adk_memory.server import create_app

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(create_app(client, **app_options), log_level="warning", lifespan="on")
    )
    loop = asyncio.new_event_loop()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.serve(sockets=[sock]))
        loop.close()

    thread = threading.Thread(target=run, name=f"ops-server-{port}", daemon=True)
    thread.start()
    for _ in range(400):
        if server.started:
            break
        threading.Event().wait(0.02)
    else:
        raise RuntimeError("the test server did not start within 8 s")
    try:
        yield RunningServer(f"http://127.0.0.1:{port}", client, loop, server, thread)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
