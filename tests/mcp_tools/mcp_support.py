"""Helpers of the MCP tests: tool calls through the SDK's client, the HTTP app on a loopback
port, sessions over streamable HTTP, and HS256 tokens."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2
import uvicorn
from joserfc import jwt
from joserfc.jwk import OctKey
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.types import ASGIApp


class ToolFailed(Exception):
    """A tool answered with isError; the text the model reads."""


async def call(session: Client, tool: str, **arguments: Any) -> Any:
    """The structured result of a tool (a list result unwrapped), or ToolFailed."""
    result = await session.call_tool(tool, arguments)
    if result.is_error:
        raise ToolFailed(" ".join(getattr(block, "text", "") for block in result.content))
    content = result.structured_content
    if isinstance(content, dict) and set(content) == {"result"}:
        return content["result"]
    return content


def free_port() -> int:
    """A loopback port nobody listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def served(app: ASGIApp) -> AsyncIterator[str]:
    """`app` served by uvicorn on this loop at a free loopback port; yields its base URL."""
    port = free_port()
    running = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    task = asyncio.create_task(running.serve())
    while not running.started:
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        running.should_exit = True
        await task


@asynccontextmanager
async def http_session(url: str, headers: dict[str, str]) -> AsyncIterator[Client]:
    """An MCP session over streamable HTTP at `url` (the `/mcp` endpoint), sending `headers`."""
    async with httpx2.AsyncClient(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http)) as session:
            yield session


def hs256_token(subject: str, secret: str, expires_in: int = 3600) -> str:
    """A token of `subject` signed with `secret`, expiring `expires_in` seconds from now."""
    claims = {"sub": subject, "exp": int(time.time()) + expires_in}
    return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(secret))


async def post_tools_list(url: str, headers: dict[str, str]) -> httpx2.Response:
    """A bare JSON-RPC `tools/list` POST to the `/mcp` endpoint at `url` (no MCP session)."""
    async with httpx2.AsyncClient(headers=headers) as http:
        return await http.post(
            url,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"accept": "application/json, text/event-stream"},
        )
