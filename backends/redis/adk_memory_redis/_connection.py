"""The store's Redis client, its checks, and the boundary every call runs inside.

A client passed in is checked (and a cluster one adapted); otherwise one is built on first use.
The query engine is checked before the first call; every call runs inside `redis_errors`
(`Connection.call`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import redis.asyncio as aredis
import redis.exceptions
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot
from redis.utils import DEFAULT_RESP_VERSION

from adk_memory.errors import FailedPrecondition, InvalidArgument
from adk_memory_redis._codec import text
from adk_memory_redis._config import (
    RedisClient,
    RedisStoreConfig,
    adapt_cluster_client,
    connect,
    connection_kwargs,
    describe,
)
from adk_memory_redis._errors import NO_SEARCH_MODULE, redis_errors


class Connection:
    """The client of one store, and whether it is ready for the store's calls.

    Args:
        url: `redis://…` without query parameters, or None with `client`.
        config: The store's settings.
        client: A client the caller built; used as is (a cluster one adapted) and never closed.
    """

    def __init__(
        self, url: str | None, config: RedisStoreConfig, client: RedisClient | None
    ) -> None:
        if url is None and client is None:
            raise InvalidArgument("RedisMemoryStore needs a redis:// URL or a client.")
        if client is not None:
            _check_client(client, config)
        self._url = url
        self._config = config
        self._client = client
        self._owns_client = client is None
        self._search_checked = False
        self.where = describe(url, client)
        """`host:port` of the server, for messages (never the password)."""

    def client(self) -> RedisClient:
        """The client, created (without connecting) on first use."""
        if self._client is None:
            assert self._url is not None
            self._client = connect(self._url, self._config)
        return self._client

    def on_cluster(self) -> bool:
        """Whether the store talks to a Redis Cluster (whose keys live in many slots)."""
        return isinstance(self.client(), RedisCluster)

    def in_slot_of(self, key: str, bank_key: str) -> bool:
        """Whether a transaction of the bank may include `key` (always, on one server)."""
        if not self.on_cluster():
            return True
        return key_slot(key.encode()) == key_slot(bank_key.encode())

    async def ready(self, action: str) -> RedisClient:
        """The client, once the query engine is checked.

        On a cluster, every primary that answers is checked (one that is down fails the calls on
        its own banks only). A one-server client is also checked not to point at a cluster node.
        """
        client = self.client()
        if not self._search_checked:
            with redis_errors(self.where, action):
                if not isinstance(client, RedisCluster):
                    await self._refuse_cluster_node(client)
                try:
                    await list_indexes(client, reachable_only=True)
                except redis.exceptions.ResponseError as exc:
                    if "unknown command" in str(exc).lower():
                        raise FailedPrecondition(NO_SEARCH_MODULE.format(where=self.where)) from exc
                    raise
            self._search_checked = True
        return client

    async def _refuse_cluster_node(self, client: aredis.Redis) -> None:
        """`FailedPrecondition` when a one-server client reaches a node of a Redis Cluster."""
        info = await client.info("cluster")
        if str(info.get("cluster_enabled", "0")) == "1":
            raise FailedPrecondition(
                f"Redis at {self.where} is a node of a Redis Cluster, which a redis:// URI "
                "cannot use (the bank's keys may live on other nodes). Use "
                "redis+cluster://host:port[,host:port…] (or rediss+cluster:// for TLS)."
            )

    @asynccontextmanager
    async def call(self, action: str) -> AsyncIterator[RedisClient]:
        """The ready client, its driver errors translated (`action` words the messages)."""
        client = await self.ready(action)
        with redis_errors(self.where, action):
            yield client

    async def aclose(self) -> None:
        """Closes the client the store built (never a client passed in)."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            with redis_errors(self.where, "close the connection pool"):
                await client.aclose()


def _check_client(client: RedisClient, config: RedisStoreConfig) -> None:
    """`InvalidArgument` for a client the store cannot use; adapts a cluster client in place."""
    if not isinstance(client, aredis.Redis | RedisCluster):
        raise InvalidArgument(
            "RedisMemoryStore takes a redis.asyncio.Redis or redis.asyncio.RedisCluster "
            f"client (not a sync one); got {type(client).__name__}."
        )
    if connection_kwargs(client).get("decode_responses"):
        raise InvalidArgument(
            "The Redis client decodes responses, which would corrupt stored vectors; "
            "build it with decode_responses=False."
        )
    if isinstance(client, RedisCluster):
        adapt_cluster_client(client)
    if config.query_timeout_ms and not _speaks_resp3(client):
        raise InvalidArgument(
            "query_timeout_ms needs a client speaking RESP3 (redis.asyncio.Redis(..., "
            "protocol=3)): over RESP2 RediSearch returns a timed-out search's partial result "
            "without saying so. Pass a RESP3 client or leave query_timeout_ms at 0.",
            field="uri.query_timeout_ms",
        )


def _speaks_resp3(client: RedisClient) -> bool:
    protocol = connection_kwargs(client).get("protocol")
    return int(protocol or DEFAULT_RESP_VERSION) == 3


async def command(client: RedisClient, *args: Any) -> Any:
    """A raw command (redis-py leaves `execute_command` unannotated)."""
    execute: Callable[..., Any] = client.execute_command
    return await execute(*args)


async def list_indexes(client: RedisClient, *, reachable_only: bool = False) -> list[str]:
    """The names of the search indexes, of every primary of a cluster.

    With `reachable_only`, primaries that cannot be reached are left out, as long as one
    answers.
    """
    if not isinstance(client, RedisCluster):
        return [text(name) for name in await command(client, "FT._LIST")]
    await client.initialize()
    primaries = client.get_primaries()
    names: set[str] = set()
    unreachable: list[Exception] = []
    for node in primaries:
        try:
            names.update(text(name) for name in await node.execute_command("FT._LIST"))
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            unreachable.append(exc)
    if unreachable and (not reachable_only or len(unreachable) == len(primaries)):
        raise unreachable[0]
    return sorted(names)
