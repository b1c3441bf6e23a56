from collections.abc import AsyncIterator

import pytest

from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.testing.conformance import MemoryStoreConformance


class TestReferenceConformance(MemoryStoreConformance):
    @pytest.fixture
    async def store(self) -> AsyncIterator[ReferenceMemoryStore]:
        store = ReferenceMemoryStore.from_uri("memory://")
        try:
            yield store
        finally:
            await store.drop_all()
            await store.aclose()
