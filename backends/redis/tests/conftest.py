"""Fixtures of the Redis backend's tests: one search-capable server per session.

`redis_url` is `REDIS_URL` when set (a Redis 8 / Redis Stack you run), else a Valkey server with
RediSearch and RedisJSON started from pip-installed wheels on a free port and stopped afterwards.
`redis_cluster_url` (from the repository's root `conftest.py`) is `REDIS_CLUSTER_URL` when set, else
a 3-primary Valkey cluster from the same wheels, started only when a selected test needs it.
"""

from __future__ import annotations

from adk_memory.testing.servers import redis_url

__all__ = ["redis_url"]
