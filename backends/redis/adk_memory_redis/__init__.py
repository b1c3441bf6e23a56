"""Redis storage backend for adk-memory (`redis://`, `rediss://`).

Memories live in Redis hashes indexed by one RediSearch vector index per bank (through redisvl),
with native key expiry, atomic multi-key writes and a Redis lock for generation. Install with
`pip install 'adk-memory[redis]'`; the server needs the query engine (Redis 8+, Redis Stack, or
RediSearch loaded as a module).
"""

from __future__ import annotations

from adk_memory_redis._config import RedisStoreConfig
from adk_memory_redis._store import RedisMemoryStore
from adk_memory_redis.lock import RedisLock, RedisLockProvider

__all__ = ["RedisLock", "RedisLockProvider", "RedisMemoryStore", "RedisStoreConfig"]
