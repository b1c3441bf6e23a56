"""The Redis store on a Redis Cluster (`redis+cluster://`): conformance, layout, failures.

The session's cluster has three primaries started from the pip wheels (or is `REDIS_CLUSTER_URL`).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from adk_memory_redis import RedisMemoryStore

from adk_memory.testing.conformance import MemoryStoreConformance


class TestRedisClusterConformance(MemoryStoreConformance):
    @pytest.fixture(params=["FLAT", "HNSW"])
    async def store(
        self, request: pytest.FixtureRequest, redis_cluster_url: str
    ) -> AsyncIterator[RedisMemoryStore]:
        prefix = f"cc-{uuid.uuid4().hex[:8]}"
        store = RedisMemoryStore.from_uri(
            redis_cluster_url, key_prefix=prefix, index_algorithm=request.param
        )
        try:
            yield store
        finally:
            await store.drop_all()
            await store.aclose()
