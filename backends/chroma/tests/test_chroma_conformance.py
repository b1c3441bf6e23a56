"""The shared store conformance suite, run on embedded Chroma and on a Chroma server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from adk_memory_chroma import ChromaMemoryStore

from adk_memory.testing.conformance import MemoryStoreConformance


class TestEmbeddedChromaConformance(MemoryStoreConformance):
    @pytest.fixture
    async def store(self, tmp_path: Path) -> AsyncIterator[ChromaMemoryStore]:
        store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
        try:
            yield store
        finally:
            await store.drop_all()
            await store.aclose()


class TestServerChromaConformance(MemoryStoreConformance):
    @pytest.fixture
    async def store(self, chroma_http_url: str) -> AsyncIterator[ChromaMemoryStore]:
        prefix = f"conf-{uuid.uuid4().hex[:8]}"  # a namespace of its own on the shared server
        store = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=prefix)
        try:
            yield store
        finally:
            await store.drop_all()
            await store.aclose()
