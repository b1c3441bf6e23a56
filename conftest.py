"""Fixtures shared by every test tree (`tests/`, `backends/*/tests/`), declared once.

Declared here, a session-scoped server starts once per test run, whichever trees are selected.

`redis_cluster` / `redis_cluster_url`: one 3-primary Valkey cluster (or `REDIS_CLUSTER_URL`),
started only when a selected test uses it.
"""

from __future__ import annotations

from adk_memory.testing.servers import redis_cluster, redis_cluster_url

__all__ = ["redis_cluster", "redis_cluster_url"]
