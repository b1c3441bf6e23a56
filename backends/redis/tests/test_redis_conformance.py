"""The store conformance suite on Redis, with a FLAT and an HNSW index (both must be exact)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest
from adk_memory_redis import RedisMemoryStore

from adk_memory.testing.conformance import MemoryStoreConformance


class TestRedisConformance(MemoryStoreConformance):
    @pytest.fixture(params=["FLAT", "HNSW"])
    async def store(
        self, request: pytest.FixtureRequest, redis_url: str
    ) -> AsyncIterator[RedisMemoryStore]:
        prefix = f"conf-{uuid.uuid4().hex[:8]}"
        store = RedisMemoryStore.from_uri(
            redis_url, key_prefix=prefix, index_algorithm=request.param
        )
        try:
            yield store
        finally:
            await store.drop_all()
            await store.aclose()
