"""`HangingProxy`: a TCP listener that plays a store which accepts connections and never answers.

While `hung`, it accepts every connection and reads what the client sends without ever replying
(the client waits until its own deadline); once healed (`hung = False`), it forwards new
connections to the upstream port. Connections made while hung stay hung until their client drops
them, as with a real server that recovers. Used by the ADK adapter's tests and benchmark.
"""

from __future__ import annotations

import asyncio

__all__ = ["HangingProxy"]


class HangingProxy:
    """Accepts on 127.0.0.1 (`port`); hangs while `hung`, else forwards to `upstream_port`."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.hung = True
        self.port = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        """Starts listening on a free port (`port`)."""
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stops accepting (open connections end with their clients)."""
        if self._server is not None:
            self._server.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.hung:
            while await reader.read(65536):
                pass  # swallowed: the client waits for an answer that never comes
            writer.close()
            return
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            while data := await source.read(65536):
                sink.write(data)
                await sink.drain()
            sink.close()

        await asyncio.gather(
            pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True
        )
