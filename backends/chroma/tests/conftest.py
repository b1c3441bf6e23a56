"""Fixtures of the Chroma backend's tests: one throwaway `chroma run` server per test session,
a Redis for the tests whose locks are in Redis (`lock_url`), and an embedded store holding the
conformance suite's bank."""

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from adk_memory_chroma import ChromaMemoryStore

from adk_memory.testing.conformance import bank_record
from adk_memory.testing.servers import chroma_http_url, redis_url

__all__ = ["chroma_http_url", "redis_url", "store"]


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[ChromaMemoryStore]:
    """An embedded store in a fresh folder with the conformance suite's bank (`BANK`)."""
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'db'}")
    await store.create_bank(bank_record())
    try:
        yield store
    finally:
        await store.aclose()
