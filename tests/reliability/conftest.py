"""Fixtures of the reliability suite: URIs of stores that several processes share."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest

SHARED = ["redis", "chroma_http_redis_lock"]


@pytest.fixture(params=SHARED)
def shared_uri(request: pytest.FixtureRequest) -> str:
    """A store that several processes share: Redis, or a Chroma server with the Redis lock."""
    prefix = f"r{uuid.uuid4().hex[:10]}"
    redis_url = request.getfixturevalue("redis_url")
    if request.param == "redis":
        return f"{redis_url}?key_prefix={prefix}&index_algorithm=FLAT"
    chroma = request.getfixturevalue("chroma_http_url")
    return f"{chroma}?collection_prefix={prefix}&lock_url={quote(redis_url, safe='')}"
