"""Fixtures for the REST server tests: real uvicorn servers on free loopback ports.

Every server runs in a background thread with its own event loop, over a `memory://` store with
the fast `hash-64` embedder and a scripted generation model. Clients are the official
`google-cloud-agentplatform` SDK pointed at the server (reference §8.2); no GOOGLE_* variable of
the environment reaches them, and a request hook fails any request that leaves 127.0.0.1.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import agentplatform
import httpx
import pytest
from google.oauth2.credentials import Credentials

from adk_memory import AsyncClient
from adk_memory.server import ApiKey
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.testing.rest_server import RunningRestServer, start_rest_server

ADMIN_KEY = "admin-key-0123456789abcdef"
AGENT_KEY = "agent-key-0123456789abcdef"
READER_KEY = "reader-key-0123456789abcdef"
LIMITED_KEY = "limited-key-0123456789abcdef"
LIMITED_BANK = "limited-bank"
OTHER_BANK = "other-bank"
TOKEN_SECRET = "users-token-secret-0123456789abcdef-0123"

KEYS = [
    ApiKey(name="admin", key=ADMIN_KEY, permissions=["*"]),
    ApiKey(
        name="agent",
        key=AGENT_KEY,
        permissions=["aiplatform.memories.generate", "memories.retrieve"],
    ),
    ApiKey(
        name="reader",
        key=READER_KEY,
        permissions=["memories.get", "memories.list", "reasoningEngines.list"],
    ),
    ApiKey(
        name="limited",
        key=LIMITED_KEY,
        permissions=["memories.*", "reasoningEngines.list"],
        banks=[LIMITED_BANK],
    ),
    ApiKey(
        name="users",
        token_secret=TOKEN_SECRET,
        permissions=["memories.*"],
        scope_claims={"user_id": "sub"},
    ),
]


@dataclass
class RunningServer:
    """A uvicorn server in a thread; `run` executes a coroutine on the server's own loop."""

    url: str
    client: AsyncClient
    model: ScriptedMemoryModel
    running: RunningRestServer
    keys: list[ApiKey] = field(default_factory=list)

    def run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return self.running.run(coro)

    def stop(self) -> None:
        self.running.stop()


def start_server(
    app_client: AsyncClient, model: ScriptedMemoryModel, **app_options: Any
) -> RunningServer:
    """Starts uvicorn on a free 127.0.0.1 port and waits until it accepts requests."""
    running = start_rest_server(app_client, **app_options)
    return RunningServer(
        running.url, app_client, model, running, list(app_options.get("api_keys") or [])
    )


@pytest.fixture(scope="session", autouse=True)
def _no_google_environment() -> Iterator[None]:
    """Keeps GOOGLE_*/GEMINI_* settings (project, keys, base URLs, mTLS) away from the SDK."""
    with pytest.MonkeyPatch.context() as patch:
        for name in list(os.environ):
            if name.startswith(("GOOGLE_", "GEMINI_")):
                patch.delenv(name)
        yield


def _new_server(**app_options: Any) -> Iterator[RunningServer]:
    model = ScriptedMemoryModel()
    client = AsyncClient("memory://", embedding_model="hash-64", generation_model=model)
    running = start_server(client, model, **app_options)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def open_server(_no_google_environment: None) -> Iterator[RunningServer]:
    """A server without keys (loopback only), as `adk-memory serve` runs by default."""
    yield from _new_server()


@pytest.fixture(scope="session")
def keyed_server(_no_google_environment: None) -> Iterator[RunningServer]:
    """A server with the KEYS above, and the two banks the limited key is about."""
    for running in _new_server(api_keys=KEYS):
        for bank_id in (LIMITED_BANK, OTHER_BANK):
            running.run(running.client.memory_banks.create(memory_bank_id=bank_id))
        yield running


def _only_loopback(request: httpx.Request) -> None:
    assert request.url.host == "127.0.0.1", f"the SDK tried to reach {request.url.host}"


async def _only_loopback_async(request: httpx.Request) -> None:
    _only_loopback(request)


def sdk_client(url: str, *, token: str = "local-dev-token", **options: Any) -> agentplatform.Client:
    """The official SDK pointed at a test server, as reference §8.2 recommends."""
    return agentplatform.Client(
        project="p",
        location="l",
        credentials=Credentials(token=token),
        http_options={
            "base_url": url,
            "client_args": {"event_hooks": {"request": [_only_loopback]}},
            "async_client_args": {"event_hooks": {"request": [_only_loopback_async]}},
            **options,
        },
    )


@pytest.fixture(scope="session")
def make_sdk() -> Callable[..., agentplatform.Client]:
    """`make_sdk(url, token=…, **http_options)`: the official SDK aimed at a test server."""
    return sdk_client


@pytest.fixture(scope="session")
def secrets() -> dict[str, str]:
    """The keyed server's secrets by key name, and the banks the `limited` key is about."""
    return {
        "admin": ADMIN_KEY,
        "agent": AGENT_KEY,
        "reader": READER_KEY,
        "limited": LIMITED_KEY,
        "limited_bank": LIMITED_BANK,
        "other_bank": OTHER_BANK,
        "token_secret": TOKEN_SECRET,
    }


@pytest.fixture
def sdk(open_server: RunningServer) -> agentplatform.Client:
    """The official SDK against the open server."""
    return sdk_client(open_server.url)


@pytest.fixture
def admin_sdk(keyed_server: RunningServer) -> agentplatform.Client:
    """The official SDK with the admin key, against the keyed server."""
    return sdk_client(keyed_server.url, token=ADMIN_KEY)


@pytest.fixture
def bank(sdk: agentplatform.Client) -> str:
    """A new, empty bank on the open server."""
    return sdk.memory_banks.create(config={"display_name": f"test-{uuid.uuid4().hex[:6]}"}).name


@pytest.fixture
def model(open_server: RunningServer) -> Iterator[ScriptedMemoryModel]:
    """The open server's scripted generation model, emptied after each test."""
    yield open_server.model
    open_server.model.extractions.clear()
    open_server.model.consolidations.clear()
    open_server.model.consolidate = None
    open_server.model.requests.clear()
