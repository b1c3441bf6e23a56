"""Fixtures of the reliability suite.

An async client and a bank on each backend, URIs of stores that several processes share, and
servers that a test may kill and start again (`restartable.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote

import pytest
from restartable import RestartableChroma, RestartableRedis

from adk_memory import AsyncClient

SHARED = ["redis", "redis_cluster", "chroma_http_redis_lock"]


@pytest.fixture
async def aclient(store_uri: str) -> AsyncIterator[AsyncClient]:
    """An async client on each backend in turn, with the fast test embedder."""
    async with AsyncClient(uri=store_uri, embedding_model="hash-64") as made:
        yield made


@pytest.fixture
async def bank(aclient: AsyncClient) -> str:
    """A new bank's name."""
    return (await aclient.memory_banks.create()).name


@pytest.fixture(params=SHARED)
def shared_uri(request: pytest.FixtureRequest) -> str:
    """A store that several processes share: Redis, a Redis Cluster, or a Chroma server with the
    Redis lock."""
    prefix = f"r{uuid.uuid4().hex[:10]}"
    if request.param == "redis_cluster":
        cluster_url = request.getfixturevalue("redis_cluster_url")
        return f"{cluster_url}?key_prefix={prefix}&index_algorithm=FLAT"
    redis_url = request.getfixturevalue("redis_url")
    if request.param == "redis":
        return f"{redis_url}?key_prefix={prefix}&index_algorithm=FLAT"
    chroma = request.getfixturevalue("chroma_http_url").split("?")[0]  # locks in Redis instead
    return f"{chroma}?collection_prefix={prefix}&lock_url={quote(redis_url, safe='')}"


@pytest.fixture(scope="module")
def restartable_redis() -> Iterator[RestartableRedis]:
    """A Valkey of this module's own that persists every write (appendfsync always)."""
    server = RestartableRedis()
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def restartable_chroma() -> Iterator[RestartableChroma]:
    """A Chroma server of this module's own on a persistent folder."""
    server = RestartableChroma()
    server.start()
    try:
        yield server
    finally:
        server.close()
