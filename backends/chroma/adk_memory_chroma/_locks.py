"""The lock provider of a store: what serialises generation, journals and due entries.

Embedded: file locks next to the data, which every process on the host that opens the directory
shares. Server: the Redis of `lock_url` (needs `adk-memory-redis`); without it, file locks in the
temporary directory, which serialise only the processes of one host.
"""

from __future__ import annotations

import importlib
import tempfile
from pathlib import Path

from adk_memory.errors import FailedPrecondition
from adk_memory.locks import FileLockProvider, LockProvider
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._config import ChromaStoreConfig


class Locks:
    """The store's `LockProvider`, built on first use (no I/O) and closed with the store."""

    def __init__(self, config: ChromaStoreConfig) -> None:
        self._config = config
        self._provider: LockProvider | None = None

    def provider(self) -> LockProvider:
        """The locks that serialise generation on this store's data (no I/O here).

        Embedded: file locks in `<path>/.adk-memory-locks/<prefix>`, which every process on the
        host that opens the same directory shares. Server: the Redis of `lock_url` (needs
        `adk-memory-redis`); without `lock_url`, file locks in the temporary directory, which
        serialise only the processes of this host.
        """
        if self._provider is None:
            config = self._config
            if config.lock_url is not None:
                self._provider = _redis_locks(config.lock_url, config.collection_prefix)
            elif config.path is not None:
                folder = Path(config.path) / ".adk-memory-locks" / config.collection_prefix
                self._provider = FileLockProvider(folder)
            else:
                where = f"{config.location}|{config.tenant}|{config.database}"
                folder = Path(tempfile.gettempdir()) / "adk-memory-locks" / codec.digest(where)
                self._provider = FileLockProvider(folder / config.collection_prefix)
        return self._provider

    async def aclose(self) -> None:
        """Closes the provider if it holds connections (Redis); the next use builds another."""
        provider, self._provider = self._provider, None
        closer = getattr(provider, "aclose", None)
        if closer is not None:
            await closer()


def _redis_locks(url: str, prefix: str) -> LockProvider:
    """A `RedisLockProvider` on `url`; `FailedPrecondition` when adk-memory-redis is missing."""
    try:  # an optional dependency: imported by name so that type checkers do not require it
        redis_backend = importlib.import_module("adk_memory_redis")
    except ImportError as exc:
        raise FailedPrecondition(
            "lock_url names a Redis lock provider, which needs the Redis backend. Install it "
            "with: pip install 'adk-memory[redis]'"
        ) from exc
    provider: LockProvider = redis_backend.RedisLockProvider(url, key_prefix=f"{prefix}-chroma")
    return provider
