"""Connections the store opens are closed: by `aclose()`, or when a store nobody closed is dropped.

chromadb's HTTP client keeps an `httpx.Client` session for itself and one for its internal admin
client, and `Client.close()` closes neither (nor does chromadb's class-wide system cache let them
be collected), so each leaked store left sockets open until the interpreter exited
(`ResourceWarning: unclosed socket`).
"""

from __future__ import annotations

import gc
import uuid
from typing import Any

import httpx
from adk_memory_chroma import ChromaMemoryStore


def sessions(client: Any) -> list[httpx.Client]:
    owners = (client, getattr(client, "_admin_client", None))
    found = [getattr(getattr(owner, "_server", None), "_session", None) for owner in owners]
    return [session for session in found if isinstance(session, httpx.Client)]


async def test_aclose_closes_every_http_session_of_the_client(chroma_http_url: str) -> None:
    store = ChromaMemoryStore.from_uri(
        chroma_http_url, collection_prefix=f"l{uuid.uuid4().hex[:8]}"
    )
    await store.list_banks()
    client = store._chroma.client
    assert len(sessions(client)) == 2 and not any(s.is_closed for s in sessions(client))
    await store.aclose()
    assert all(session.is_closed for session in sessions(client))
    await store.list_banks()  # a closed store reconnects on its next call
    await store.aclose()


async def test_a_store_dropped_without_aclose_closes_its_sessions(chroma_http_url: str) -> None:
    store = ChromaMemoryStore.from_uri(
        chroma_http_url, collection_prefix=f"l{uuid.uuid4().hex[:8]}"
    )
    await store.list_banks()
    client = store._chroma.client
    del store
    gc.collect()
    assert all(session.is_closed for session in sessions(client))
