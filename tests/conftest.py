"""Fixtures shared by the core test suite: every backend behind one `store_uri` fixture.

`api_uri` adds `adk-memory serve` over embedded Chroma and over Redis, reached through
`http://` (one server per session each), for the suites of the public API.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

from adk_memory import AsyncClient, Client
from adk_memory.testing.rest_server import rest_server
from adk_memory.testing.servers import chroma_http_url, redis_url

__all__ = ["chroma_http_url", "redis_url"]

BACKENDS = ["memory", "chroma", "chroma_http", "redis"]
SERVED = ["http_chroma", "http_redis"]
"""`adk-memory serve` over embedded Chroma / Redis, through an `http://` client."""

# Reproducible and load-independent property tests: the same examples on every run, no per-example
# deadline (CI machines are shared), no example database written into the checkout.
settings.register_profile(
    "adk-memory",
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("adk-memory")

# The ADK service's store deadline (2 s) is for production turns; on a shared, loaded CI machine
# a healthy store can take longer, which would skip memory for a turn. Tests of the deadline
# pass `search_timeout=` themselves.
os.environ.setdefault("ADK_MEMORY_SEARCH_TIMEOUT", "10")


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch) -> None:
    """HF_HUB_OFFLINE=1, and any attempt to open a network connection fails the test."""
    # huggingface_hub reads HF_HUB_OFFLINE once, at import: imported under this fixture, it
    # would stay offline for every later test of the session.
    import huggingface_hub.constants  # noqa: F401

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: Any) -> None:
        if self.family in (socket.AF_INET, socket.AF_INET6):
            pytest.fail(f"network access from an offline model: {address!r}")
        real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


def _store_uri(kind: str, request: pytest.FixtureRequest, tmp: pytest.TempPathFactory) -> str:
    prefix = f"t{uuid.uuid4().hex[:10]}"
    if kind == "memory":
        return "memory://"
    if kind == "chroma":
        return f"chroma://{tmp.mktemp('chroma')}"
    if kind == "chroma_http":
        return f"{request.getfixturevalue('chroma_http_url')}&collection_prefix={prefix}"
    if kind in SERVED:
        return str(request.getfixturevalue(f"served_{kind.removeprefix('http_')}_url"))
    return f"{request.getfixturevalue('redis_url')}?key_prefix={prefix}&index_algorithm=FLAT"


@pytest.fixture(params=BACKENDS)
def store_uri(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A URI of an empty store, for each backend in turn."""
    return _store_uri(request.param, request, tmp_path_factory)


@pytest.fixture(params=[*BACKENDS, *SERVED])
def api_uri(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """`store_uri`'s stores, then `adk-memory serve` on embedded Chroma and on Redis (http://).

    A served store is shared by the session (tests make banks of their own).
    """
    return _store_uri(request.param, request, tmp_path_factory)


@contextlib.contextmanager
def _served(uri: str) -> Iterator[str]:
    client = AsyncClient(uri, embedding_model="hash-64", serving=True)  # as `adk-memory serve`
    with rest_server(client) as running:
        try:
            yield running.url
        finally:
            running.run(client.aclose())


@pytest.fixture(scope="session")
def served_chroma_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The `http://` URL of an `adk-memory serve` over embedded Chroma, for the session."""
    with _served(f"chroma://{tmp_path_factory.mktemp('served-chroma')}") as url:
        yield url


@pytest.fixture(scope="session")
def served_redis_url(redis_url: str) -> Iterator[str]:
    """The `http://` URL of an `adk-memory serve` over Redis, for the session."""
    prefix = f"served{uuid.uuid4().hex[:8]}"
    with _served(f"{redis_url}?key_prefix={prefix}&index_algorithm=FLAT") as url:
        yield url


@pytest.fixture
def client(store_uri: str) -> Iterator[Client]:
    """A blocking client on each backend, with the fast deterministic test embedder."""
    with Client(uri=store_uri, embedding_model="hash-64") as made:
        yield made
