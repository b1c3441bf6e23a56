"""Configuration of the Redis store: one frozen model, filled from keyword arguments and the URI.

Precedence: keyword arguments, then the URI's query parameters, then the defaults below. The
URI keeps what redis-py understands (user, password, host, port, database number); every query
parameter must be a field of `RedisStoreConfig`, so a typo is an error instead of a silent no-op.

```
redis://:secret@cache.internal:6379/0?index_algorithm=HNSW&key_prefix=prod
rediss://default:secret@redis.example.com:6380/0?ssl_ca_certs=/etc/ssl/ca.pem
redis+cluster://:secret@node-a:6379,node-b:6379,node-c:6379?key_prefix=prod
```

`redis+cluster://` and `rediss+cluster://` name one or more nodes of a Redis Cluster (any node
will do: the client discovers the others and follows the slot map). A cluster has only database
0, so the path must be empty or `/0`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, TypeAlias
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

import redis.asyncio as aredis
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from redis._parsers.commands import (
    AsyncCommandsParser,
    CommandPolicies,
    RequestPolicy,
    ResponsePolicy,
)
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.commands.policies import AsyncDynamicPolicyResolver
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from adk_memory.errors import InvalidArgument

__all__ = [
    "RedisClient",
    "RedisStoreConfig",
    "adapt_cluster_client",
    "cluster_nodes",
    "connect",
    "connection_kwargs",
    "describe",
    "is_cluster",
    "make_config",
    "split_uri",
]

RedisClient: TypeAlias = aredis.Redis | RedisCluster
"""The clients the store and the lock work with: one server, or a cluster."""

_SCHEMES = ("redis", "rediss", "redis+cluster", "rediss+cluster")
_TLS_SCHEMES = ("rediss", "rediss+cluster")

# RediSearch commands whose first argument is the index name, which open-source RediSearch treats
# as a key (COMMAND INFO gives first key 1): routed to the owner of the index name's slot, where
# the bank's documents live. redis-py's static policies send them to one default node instead.
_SEARCH_BY_INDEX = ("create", "search", "aggregate", "dropindex", "info", "alter", "explain")


class RedisStoreConfig(BaseModel):
    """How the Redis store lays out its keys, builds its indexes and connects."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_prefix: str = Field(default="adkmem", pattern=r"^[A-Za-z0-9_.\-]{1,64}$")
    """Namespace of every key and index this store writes (letters, digits, `_`, `.`, `-`).
    Two stores with different prefixes share a server without seeing each other."""

    index_algorithm: Literal["FLAT", "HNSW"] = "FLAT"
    """The vector index of a bank, chosen when the bank is created. FLAT is exact and cheapest
    to write; because every query is filtered to one scope first, its cost grows with the size
    of that scope, not of the bank. HNSW pays off only when single scopes hold tens of thousands
    of memories (see `hnsw_graph_from`); graph results are ranked by exact distance within an
    over-fetched candidate window."""

    hnsw_m: int = Field(default=16, ge=2, le=512)
    """HNSW: edges per node (more is better recall, more memory)."""

    hnsw_ef_construction: int = Field(default=200, ge=1, le=4096)
    """HNSW: candidate list size while building the graph."""

    hnsw_ef_runtime: int = Field(default=64, ge=1, le=4096)
    """HNSW: candidate list size per query (raised to the candidate window when that is larger)."""

    hnsw_graph_from: int = Field(default=5000, ge=0)
    """HNSW: a scope with at least this many memories is searched through the graph (RediSearch
    policy BATCHES); a smaller one by brute force over its own memories (ADHOC_BF), which is
    exact and, for small scopes, faster. RediSearch's own choice (it is asked per query) tends
    to brute-force whole large scopes. Scope sizes are counted once per `scope_size_ttl`."""

    scope_size_ttl: float = Field(default=30.0, ge=0)
    """HNSW: seconds a counted scope size is reused before it is counted again."""

    overfetch: float = Field(default=2.0, ge=1.0, le=100.0)
    """Candidates fetched per requested result before exact re-ranking (HNSW recall, and room to
    resolve ties at the k-th place on either algorithm)."""

    vector_dtype: Literal["float32", "float64"] = "float32"
    """Storage type of embeddings. float32 halves memory; embeddings then read back rounded to
    float32 (distances stay well within 1e-4 of exact). float64 reads back bit for bit."""

    full_text: bool = True
    """Index the fact as a TEXT field too (for full-text and hybrid queries run directly on the
    index; exact filters use a digest TAG and do not need it)."""

    max_connections: int = Field(default=50, ge=1, le=10_000)
    """Size of the connection pool the store opens (ignored when a client is passed in); a
    call finding them all busy waits for one, up to `socket_timeout`. On a cluster, the size of
    each primary's write pool (redis-py's cluster client caps nothing else)."""

    socket_timeout: float | None = Field(default=10.0, gt=0)
    """Seconds to wait for a reply before the call fails with `StoreUnavailable`."""

    socket_connect_timeout: float | None = Field(default=5.0, gt=0)
    """Seconds to wait for a connection."""

    health_check_interval: int = Field(default=30, ge=0)
    """Seconds a pooled connection may idle before it is checked with PING when next used."""

    query_timeout_ms: int = Field(default=0, ge=0)
    """Server-side limit for one search in milliseconds, 0 for none. A search that reaches it
    raises `StoreUnavailable`, never a partial answer: RediSearch flags a timed-out (partial)
    reply only in RESP3, so a limit needs a client speaking RESP3 (the store's own always does)."""

    connection_retries: int = Field(default=2, ge=0, le=10)
    """Times a command is sent again on a fresh connection after a connection error (a pooled
    connection the server dropped, e.g. after a restart). Never for a WATCHed transaction, whose
    outcome redis-py cannot know; the store's writes are those."""

    write_retries: int = Field(default=8, ge=1, le=100)
    """Attempts of an optimistic (WATCH) write that collides with a concurrent writer."""

    ssl_ca_certs: str | None = None
    """`rediss://` only: a PEM file of CA certificates to verify the server with."""

    ssl_certfile: str | None = None
    """`rediss://` only: the client certificate (mutual TLS)."""

    ssl_keyfile: str | None = None
    """`rediss://` only: the client certificate's private key."""

    ssl_cert_reqs: Literal["required", "optional", "none"] = "required"
    """`rediss://` only: whether the server certificate must verify."""

    ssl_check_hostname: bool = True
    """`rediss://` only: whether the server certificate must name the host."""


def split_uri(uri: str, options: Mapping[str, Any]) -> tuple[str, RedisStoreConfig]:
    """Splits a store URI into the connection URL and the store configuration.

    Args:
        uri: `redis://[[user]:password@]host[:port][/db][?param=value&…]`, `rediss://…`, or
            `redis+cluster://[[user]:password@]host[:port][,host[:port]…][?…]` (TLS:
            `rediss+cluster://…`).
        options: Keyword overrides of `RedisStoreConfig` fields.

    Returns:
        The URL without query parameters, and the merged configuration.

    Raises:
        InvalidArgument: The scheme is wrong, a parameter is unknown or a value is invalid.
    """
    parts = urlsplit(uri)
    if parts.scheme not in _SCHEMES:
        raise InvalidArgument(
            "The Redis store takes redis://, rediss://, redis+cluster:// or rediss+cluster:// "
            f"URIs, not {parts.scheme or 'no'!r} scheme.",
            field="uri",
        )
    if is_cluster(uri):
        cluster_nodes(uri)  # validates the host list
        if parts.path not in ("", "/", "/0"):
            raise InvalidArgument(
                f"A Redis Cluster has only database 0; drop {parts.path!r} from the URI.",
                field="uri",
            )
    elif not parts.hostname:
        raise InvalidArgument(
            "The Redis URI names no host; write redis://host:6379/0.", field="uri"
        )
    values: dict[str, Any] = {}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in values:
            raise InvalidArgument(f"The Redis URI sets {name!r} twice; keep one.", field="uri")
        values[name] = value
    values.update(options)
    config = make_config(values)
    tls_options = {
        "ssl_ca_certs",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_cert_reqs",
        "ssl_check_hostname",
    } & config.model_fields_set
    if tls_options and parts.scheme not in _TLS_SCHEMES:
        raise InvalidArgument(
            f"TLS option(s) {', '.join(sorted(tls_options))} need a rediss:// or "
            "rediss+cluster:// URI.",
            field="uri",
        )
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")), config


def is_cluster(url: str) -> bool:
    """Whether the URL names a Redis Cluster (`redis+cluster://`, `rediss+cluster://`)."""
    return urlsplit(url).scheme.endswith("+cluster")


def cluster_nodes(url: str) -> list[tuple[str, int]]:
    """The (host, port) pairs of a cluster URL's comma-separated node list.

    Raises:
        InvalidArgument: The list is empty or a node has no host or a bad port.
    """
    netloc = urlsplit(url).netloc.rpartition("@")[2]
    nodes: list[tuple[str, int]] = []
    for item in netloc.split(","):
        try:
            node = urlsplit(f"//{item}")
            host, port = node.hostname, node.port or 6379
        except ValueError:
            host, port = None, 0
        if not host:
            raise InvalidArgument(
                f"The Redis Cluster URI has a bad node {item[:60]!r}; write "
                "redis+cluster://host:port[,host:port…].",
                field="uri",
            )
        nodes.append((host, port))
    return nodes


def describe(url: str | None, client: RedisClient | None = None) -> str:
    """`host:port` (or a cluster's nodes) of a URL or else a client, for messages; no password."""
    if url is not None and is_cluster(url):
        return ",".join(f"{host}:{port}" for host, port in cluster_nodes(url))
    if url is not None:
        parts = urlsplit(url)
        return f"{parts.hostname}:{parts.port or 6379}"
    if isinstance(client, RedisCluster):
        return ",".join(client.nodes_manager.startup_nodes)
    kwargs = connection_kwargs(client) if client is not None else {}
    return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def connection_kwargs(client: RedisClient) -> dict[str, Any]:
    """The options the client opens its connections with (`decode_responses`, `host`, …)."""
    if isinstance(client, RedisCluster):
        return dict(client.get_connection_kwargs())
    return dict(client.connection_pool.connection_kwargs)


def make_config(values: Mapping[str, Any]) -> RedisStoreConfig:
    """Validates options into a config, or raises `InvalidArgument` naming the bad one."""
    unknown = sorted(set(values) - set(RedisStoreConfig.model_fields))
    if unknown:
        raise InvalidArgument(
            f"Unknown Redis store option(s) {', '.join(map(repr, unknown))}; the options are "
            f"{', '.join(sorted(RedisStoreConfig.model_fields))}.",
            field="uri",
        )
    try:
        config = RedisStoreConfig.model_validate(values)
    except ValidationError as exc:
        first = exc.errors()[0]
        name = ".".join(str(loc) for loc in first["loc"]) or "uri"
        raise InvalidArgument(
            f"Redis store option {name!r} is invalid: {first['msg']}.", field=f"uri.{name}"
        ) from None
    return config


def connect(url: str, config: RedisStoreConfig) -> RedisClient:
    """A client for `url` with the config's pool, timeouts, retries and TLS (connects lazily)."""
    kwargs: dict[str, Any] = {
        "socket_timeout": config.socket_timeout,
        "socket_connect_timeout": config.socket_connect_timeout,
        "health_check_interval": config.health_check_interval,
        "retry": Retry(ExponentialBackoff(cap=0.5, base=0.05), config.connection_retries),
        "decode_responses": False,
        "protocol": 3,  # RediSearch reports a timed-out, partial result only in RESP3
    }
    if urlsplit(url).scheme in _TLS_SCHEMES:
        kwargs.update(
            ssl_ca_certs=config.ssl_ca_certs,
            ssl_certfile=config.ssl_certfile,
            ssl_keyfile=config.ssl_keyfile,
            ssl_cert_reqs=config.ssl_cert_reqs,
            ssl_check_hostname=config.ssl_check_hostname,
        )
    if not is_cluster(url):
        # A caller finding every connection busy waits for one (up to `socket_timeout`) instead
        # of failing: more concurrent calls than connections is a busy server, not a sick one.
        pool = aredis.BlockingConnectionPool.from_url(
            url,
            max_connections=config.max_connections,
            timeout=config.socket_timeout,
            retry_on_error=[RedisConnectionError],
            **kwargs,
        )
        return aredis.Redis.from_pool(pool)
    # redis-py's cluster client cannot wait for a connection (it raises past its cap), so its
    # per-node cap is left at redis-py's default; the write pools (`_writer`) wait.
    parts = urlsplit(url)
    cluster = RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in cluster_nodes(url)],
        username=unquote(parts.username) if parts.username else None,
        password=unquote(parts.password) if parts.password is not None else None,
        ssl=parts.scheme in _TLS_SCHEMES,
        # A primary that is down takes only its own slots with it; the others keep answering.
        require_full_coverage=False,
        **kwargs,
    )
    return adapt_cluster_client(cluster)


def adapt_cluster_client(client: RedisCluster) -> RedisCluster:
    """Makes a cluster client route index commands by slot and survive a dead first primary.

    redis-py's static policies send `FT.SEARCH` and friends to one default node; here they go to
    the owner of the index name's slot, where the bank's documents are. And redis-py reads its
    command table from the first primary on every re-initialisation, so while that one primary is
    down the client could not re-initialise and even the live slots would fail; here the table
    comes from the first node that answers. redis-py has no public setter for the resolver.
    """
    if isinstance(client.commands_parser, _LiveNodeCommandsParser):
        return client  # adapted already (a client shared by several stores)
    keyed = CommandPolicies(
        request_policy=RequestPolicy.DEFAULT_KEYED, response_policy=ResponsePolicy.DEFAULT_KEYED
    )
    client._policy_resolver = AsyncDynamicPolicyResolver(
        {"ft": {command: keyed for command in _SEARCH_BY_INDEX}}, client._policy_resolver
    )
    client.commands_parser = _LiveNodeCommandsParser(client)
    return client


class _LiveNodeCommandsParser(AsyncCommandsParser):
    """A command table read from the first node that answers, the default node first."""

    def __init__(self, client: RedisCluster) -> None:
        super().__init__()
        self._client = client

    async def initialize(self, node: ClusterNode | None = None) -> None:
        candidates = [node] if node is not None else []
        candidates += [other for other in self._client.get_nodes() if other is not node]
        failure: Exception = RedisConnectionError("No node of the Redis Cluster answered.")
        for candidate in candidates:
            try:
                await super().initialize(candidate)
                return
            except (RedisConnectionError, RedisTimeoutError) as exc:
                failure = exc
        raise failure
