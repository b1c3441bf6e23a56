"""The shared store conformance suite, run on embedded Chroma (in this process and in a child
process) and on a Chroma server."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from adk_memory_chroma import ChromaMemoryStore, _folder

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


@pytest.fixture(scope="class")
def child_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder this process holds for the whole class, so that its stores share one child."""
    path = tmp_path_factory.mktemp("child")
    key = _folder.hold(str(path))
    try:
        yield path
    finally:
        _folder.release(key)


class TestChildChromaConformance(MemoryStoreConformance):
    @pytest.fixture
    async def store(self, child_folder: Path) -> AsyncIterator[ChromaMemoryStore]:
        prefix = f"conf-{uuid.uuid4().hex[:8]}"  # a namespace of its own in the shared folder
        store = ChromaMemoryStore.from_uri(
            f"chroma://{child_folder}?process=child", collection_prefix=prefix
        )
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
