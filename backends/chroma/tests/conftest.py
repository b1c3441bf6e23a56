"""Fixtures of the Chroma backend's tests: one throwaway `chroma run` server per test session,
a Redis for the tests whose locks are in Redis (`lock_url`), and an embedded store holding the
conformance suite's bank."""

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from adk_memory_chroma import ChromaMemoryStore

from adk_memory.testing.conformance import bank_record
from adk_memory.testing.servers import chroma_http_url, redis_url

__all__ = ["child_store", "chroma_http_url", "redis_url", "store"]


@contextlib.asynccontextmanager
async def store_with_bank(uri: str) -> AsyncIterator[ChromaMemoryStore]:
    """A store on `uri` holding the conformance suite's bank (`BANK`), closed on exit."""
    store = ChromaMemoryStore.from_uri(uri)
    await store.create_bank(bank_record())
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ChromaMemoryStore]:
    """An embedded store in a fresh folder with the conformance suite's bank (`BANK`)."""
    async with store_with_bank(f"chroma://{tmp_path / 'db'}") as store:
        yield store


@pytest.fixture
async def child_store(tmp_path: Path) -> AsyncIterator[ChromaMemoryStore]:
    """The same in a folder whose Chroma runs in a child process (`process=child`)."""
    async with store_with_bank(f"chroma://{tmp_path}?process=child") as store:
        yield store
