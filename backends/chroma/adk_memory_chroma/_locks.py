"""The lock provider of a store: what serialises writes, generation, journals and due entries.

Embedded: locks of this process (`adk_memory.locks.InProcessLockProvider`), one provider for
every store of the process on the directory (`embedded_locks`): the directory is this process's
alone (`_folder` holds it), so no other process writes under these locks. They were file locks
next to the data: with 20 ADK users at once, the writer's group write of hand-overs spent
40-160 ms taking 20 stream locks one after the other (a file opened, locked and closed each,
and a lock held by a flush polled every 20 ms); a thread lock costs microseconds and is handed
to its next waiter on release. Server (a `chroma+http(s)` URI, or an HTTP client passed in), one of:

* `lock_url`: the Redis of that URL (needs `adk-memory-redis`), which every host can reach.
* `single_host=true`: file locks in `<lock_dir>/<server id>/<prefix>`, for servers whose
  writers all run on one host. The server id is the id Chroma gave the collection
  `adk-memory-lock-id` of the store's database when the first store created it (an atomic
  get-or-create: 8 racing calls got one id in 30 of 30 rounds), so the folder depends on
  neither the URI's spelling (`127.0.0.1`, `localhost`, a proxy) nor the temporary directory.
  It is read again once each lock is held: if the collection was deleted, or the server's data
  replaced, the lock is taken again under the id the server has now, so stores move to a new
  id together (only a lock held while the id changes can overlap one taken under the new id).
* neither: every write is refused with `FailedPrecondition` naming both (`Locks.require`).
  Reads need no lock.

Why no lock in Chroma itself: Chroma's only atomic primitive is a collection name's uniqueness
(chromadb 1.5.9: of 8 racing `create_collection` calls, exactly one succeeded in 30 of 30
rounds). A lock made of a collection would need a lease, so that a crashed holder's lock ends:
Chroma has no TTL, so waiters would judge it themselves, by the clocks of several hosts or by
watching a heartbeat the holder writes. It would also cost a collection create and delete per
lock (12 + 23 ms measured, where a whole one-memory write takes ~20 ms). Redis gives a lease in
one round trip.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import threading
import weakref
from collections.abc import AsyncIterator
from pathlib import Path

from adk_memory.errors import FailedPrecondition
from adk_memory.locks import (
    DEFAULT_LEASE_SECONDS,
    DEFAULT_WAIT_SECONDS,
    FileLockProvider,
    HeldLock,
    InProcessLockProvider,
    LockProvider,
)
from adk_memory_chroma._chroma import Chroma
from adk_memory_chroma._config import ChromaStoreConfig

logger = logging.getLogger(__name__)

SERVER_ID_COLLECTION = "adk-memory-lock-id"
"""The collection whose Chroma id names a server's (database's) single-host lock folder. No
`.` in the name, so no store's `drop_all` (`<prefix>.…`) deletes it."""


class Locks:
    """The store's `LockProvider`, built on first use (no I/O) and closed with the store."""

    def __init__(self, config: ChromaStoreConfig, chroma: Chroma) -> None:
        self._config = config
        self._chroma = chroma
        self._provider: LockProvider | None = None

    def require(self) -> None:
        """Raises `FailedPrecondition` if this store may not write: a server without locks.

        Every write of the store calls it (most through `provider`), before any I/O.
        """
        config = self._config
        if config.lock_url is None and not config.single_host and self._chroma.on_server():
            raise FailedPrecondition(
                f"Writes to {_server(config)} need locks that every process writing to it "
                "shares, and none is configured. Add lock_url=redis://… (percent-encoded) to "
                "the URI, a Redis that every host writing to the server reaches (needs "
                "adk-memory[redis]), or single_host=true if every such process runs on this "
                f"host (file locks in lock_dir, {config.lock_dir} by default).",
                field="uri",
            )

    def provider(self) -> LockProvider:
        """The locks that serialise writes and generation on this store's data (no I/O here).

        See the module docstring. Raises `FailedPrecondition` for a server without locks.
        """
        if self._provider is None:
            self.require()
            config = self._config
            if config.lock_url is not None:
                self._provider = _redis_locks(config.lock_url, config.collection_prefix)
            elif config.single_host:
                self._provider = ServerFileLocks(self._chroma, config)
            else:  # a directory, or an embedded client passed in: this process's data alone
                where = (
                    os.path.realpath(config.path)
                    if config.path is not None
                    else f"{config.location}|{config.tenant}|{config.database}"
                )
                self._provider = embedded_locks(f"{where}|{config.collection_prefix}")
        return self._provider

    async def aclose(self) -> None:
        """Closes the provider if it holds connections (Redis); the next use builds another."""
        provider, self._provider = self._provider, None
        closer = getattr(provider, "aclose", None)
        if closer is not None:
            await closer()


_embedded: weakref.WeakValueDictionary[str, InProcessLockProvider] = weakref.WeakValueDictionary()
_embedded_guard = threading.Lock()


def embedded_locks(where: str) -> InProcessLockProvider:
    """The lock provider of every store of this process on one embedded directory and prefix.

    Kept while a store uses it. A forked child starts with none: the parent's holders are not
    its own.
    """
    with _embedded_guard:
        provider = _embedded.get(where)
        if provider is None:
            provider = _embedded[where] = InProcessLockProvider()
        return provider


def _forget_in_child() -> None:
    global _embedded_guard
    _embedded.clear()
    _embedded_guard = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


class ServerFileLocks:
    """`single_host`'s locks: file locks in `<lock_dir>/<server id>/<prefix>` (module docstring)."""

    def __init__(self, chroma: Chroma, config: ChromaStoreConfig) -> None:
        self._chroma = chroma
        self._config = config
        self._server_id: str | None = None

    async def server_id(self) -> str:
        """The server's id (one get-or-create of `SERVER_ID_COLLECTION`, ~1 ms), remembered."""
        client = await self._chroma.connection()
        found = await self._chroma.call(
            "read the server's lock id",
            client.get_or_create_collection,
            name=SERVER_ID_COLLECTION,
            embedding_function=None,
        )
        server_id = str(found.id)
        if self._server_id not in (None, server_id):
            logger.warning(
                "The lock id of %s changed (its %s collection was deleted or the data replaced); "
                "locking under the new one.",
                self._chroma.location,
                SERVER_ID_COLLECTION,
            )
        self._server_id = server_id
        return server_id

    @contextlib.asynccontextmanager
    async def lock(
        self,
        name: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> AsyncIterator[HeldLock]:
        """Holds `name` for the block, in the folder of the id the server has once it is held."""
        server_id = self._server_id or await self.server_id()
        while True:
            folder = Path(self._config.lock_dir) / server_id / self._config.collection_prefix
            files = FileLockProvider(folder)
            async with contextlib.AsyncExitStack() as stack:
                try:
                    lease = await stack.enter_async_context(
                        files.lock(name, lease_seconds=lease_seconds, wait_seconds=wait_seconds)
                    )
                except OSError as exc:
                    raise FailedPrecondition(
                        f"Cannot lock in {folder} ({type(exc).__name__}), where single_host "
                        f"keeps the locks of {_server(self._config)}. Set lock_dir to a "
                        "folder that every process writing to the server can write.",
                        field="lock_dir",
                    ) from exc
                current = await self.server_id()
                if current == server_id:
                    yield lease
                    return
            server_id = current


def _server(config: ChromaStoreConfig) -> str:
    """The server, for messages: `the Chroma server http://h:p`, or the client's."""
    if config.host is None:
        return "the Chroma server of the client passed in"
    return f"the {config.location}"


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
