"""`adk-memory serve` inside a test: the REST app on uvicorn in a thread, on a free loopback port.

```python
with rest_server(AsyncClient("memory://", embedding_model="hash-64")) as server:
    client = Client(server.url)   # an http:// client of that server
```

The server runs its own event loop in a daemon thread (`RunningRestServer.run` executes a
coroutine there, e.g. to reach the server's client directly); `served_url` is set, so on an
embedded folder the server records itself there as `adk-memory serve` does.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["RunningRestServer", "rest_server", "start_rest_server"]


@dataclass
class RunningRestServer:
    """A uvicorn server in a thread; `run` executes a coroutine on the server's own loop."""

    url: str
    app: Any
    loop: asyncio.AbstractEventLoop
    server: Any
    thread: threading.Thread

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        """What `coroutine` returns, run on the server's loop."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=timeout)

    def stop(self) -> None:
        """Asks the server to exit and waits for its thread (its lifespan shuts down)."""
        self.server.should_exit = True
        self.thread.join(timeout=15)


def start_rest_server(client_or_uri: Any, **app_options: Any) -> RunningRestServer:
    """Starts `create_app(client_or_uri, **app_options)` and waits until it serves."""
    import uvicorn

    from adk_memory.server import create_app

    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and
    # without it every response waits ~40 ms for a delayed ACK (Nagle).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = create_app(client_or_uri, served_url=url, **app_options)
    server = uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
    )
    loop = asyncio.new_event_loop()
    failed: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.serve(sockets=[sock]))
        except BaseException as exc:  # noqa: BLE001 - reported to the starting thread
            failed.append(exc)
        finally:
            loop.close()

    thread = threading.Thread(target=run, name=f"adk-memory-rest-{url}", daemon=True)
    thread.start()
    for _ in range(1000):
        if server.started or not thread.is_alive():
            break
        threading.Event().wait(0.01)
    if not server.started:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        raise RuntimeError(f"the test server did not start: {failed[0] if failed else 'timeout'}")
    return RunningRestServer(url, app, loop, server, thread)


@contextlib.contextmanager
def rest_server(client_or_uri: Any, **app_options: Any) -> Iterator[RunningRestServer]:
    """A started server for the block; stopped afterwards."""
    running = start_rest_server(client_or_uri, **app_options)
    try:
        yield running
    finally:
        running.stop()
