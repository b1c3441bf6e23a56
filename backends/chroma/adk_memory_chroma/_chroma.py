"""The connection to Chroma: the client, the collections' names and handles, every driver call.

Nothing connects until the first call (`Chroma.connection`). Embedded, the directory is held for
this process first (`_folder`: Chroma's embedded mode is single-process), and the store is told
(`on_embedded`) so that it can share its per-directory state with this process's other stores.
A client the store built is closed by `close` (or by a finalizer if the store is dropped); one
passed in is used as is and never closed.

Blocking. The embedded client and the HTTP client of chromadb are blocking; every call runs in
`asyncio.to_thread` (`Chroma.call`). (chromadb's `AsyncHttpClient` keeps one httpx client per
event loop in a class-wide table that any instance's close empties, so it is not used here; a
caller may still pass one as `client=`.) Every driver error is re-raised as an `adk_memory` error
by `driver_errors`; a collection that no longer exists is `Gone`, which the store turns into
`NotFound` or a retry on a fresh handle.

Collections: per bank, `<prefix>.<bank>.mem` (`MEM`) and `<prefix>.<bank>.aux` (`AUX`); store-wide,
`<prefix>.banks` (`REGISTRY`) and `<prefix>.due` (`DUE`). Writes are cut to the request limits
(`_sizing`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import weakref
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import chromadb
import httpx
from chromadb.api import AsyncClientAPI, ClientAPI
from chromadb.api.shared_system_client import SharedSystemClient
from chromadb.config import Settings
from chromadb.errors import (
    ChromaError,
    InvalidArgumentError,
    InvalidDimensionException,
    NotFoundError,
)

from adk_memory.errors import AdkMemoryError, InvalidArgument, StoreUnavailable
from adk_memory_chroma import _codec as codec
from adk_memory_chroma import _folder
from adk_memory_chroma._child import ChildClient, ChildGone, ChildProcess
from adk_memory_chroma._config import ChromaStoreConfig
from adk_memory_chroma._sizing import REQUEST_BYTES, Limits, requests

logger = logging.getLogger(__name__)

_T = TypeVar("_T")
MEM = "mem"
AUX = "aux"
REGISTRY = "banks"
DUE = "due"

_DEFAULT_BATCH = 1000
_SYNC_THRESHOLD = 128
"""Log entries after which Chroma saves a collection's HNSW index (its default is 1,000). Every
write re-reads the collection's write-ahead log from the last save (Chroma 1.5's
`LocalCompactionManager` backfill), so a create paid for every unsaved entry: 5-45 ms per call
at 1,000 (create p50 grew from 19 to 75 ms over a bank's first 1,000 creates). A save rewrites
the id map, about 2 ms per 1,000 rows of the collection, so a lower threshold costs large banks
more saves (`benchmarks/NOTES.md`, "sync_threshold"). Set at creation only: Chroma's `modify`
does not change it for the running index, so older banks keep 1,000."""
IN_CHUNK = 1000
"""Distinct ids per `$in` list. Chroma documents no bound, but the embedded store binds one SQLite
variable per value and fails past SQLite's limit (32766) with 'too many SQL variables'."""

Namespace = tuple[str, str, str]
"""(tenant, database, collection prefix): what the store's data is, within one directory."""


class Gone(Exception):
    """A collection this store had cached (or expected) no longer exists in Chroma."""


class Chroma:
    """One store's client, its collection handles and its driver calls."""

    def __init__(
        self,
        config: ChromaStoreConfig,
        client: ClientAPI | AsyncClientAPI | None,
        on_embedded: Callable[[str, Namespace], None],
    ) -> None:
        """Builds the connection without connecting.

        Args:
            config: Where the data lives.
            client: A chromadb client the caller built (sync or async); never closed by us.
            on_embedded: A method of the store, called once connected to an embedded directory
                with the directory this process now holds and the store's namespace in it.
        """
        self._config = config
        self.client: Any = client
        self._owns_client = client is None
        self._is_async = isinstance(client, AsyncClientAPI)
        # Weak: the store owns this connection, and a cycle back to it would delay the
        # finalizers below (closing the client, releasing the directory) to a garbage collection.
        self._on_embedded = weakref.WeakMethod(on_embedded)
        self._connect_lock = threading.Lock()
        self._collections: dict[str, Any] = {}
        self._max_batch: int | None = None
        self._finalizer: weakref.finalize[Any, Any] | None = None
        """Closes the client we built if the store is dropped without `aclose()`."""
        self._folder_release: weakref.finalize[Any, Any] | None = None
        """Gives back this process's lock on the embedded directory (`_folder`), once."""

    @property
    def location(self) -> str:
        """Where the data lives, for messages."""
        return self._config.location

    def _connect_sync(self) -> Any:
        with self._connect_lock:
            if self.client is None:
                settings = Settings(anonymized_telemetry=False)
                if self._config.path is not None:
                    self.client = self._open_folder(self._config.path, settings)
                else:
                    self.client = self._open_server(settings)
                # A store dropped without `aclose()` (say, by code that forgets an event loop's
                # client) still releases its sockets and files when it is collected; server
                # sessions are also closed at interpreter exit.
                self._finalizer = weakref.finalize(
                    self, close_quietly, self.client, self._config.location
                )
                self._finalizer.atexit = self._config.host is not None
            return self.client

    def _open_folder(self, path: str, settings: Settings) -> Any:
        """An embedded client on `path`, once this process holds the directory."""
        config = self._config
        logger.debug("opening embedded Chroma at %s", path)
        # Embedded Chroma is single-process: refuse a directory another process holds.
        folder = _folder.hold(path)
        try:
            if _folder.first_hold(folder) and not _chroma_has_open(folder):
                _folder.use_write_ahead_log(folder)
            _folder.raise_open_file_limit()
            client = self._folder_client(folder, settings)
        except BaseException:
            _folder.release(folder)
            raise
        self._folder_release = weakref.finalize(self, _folder.release, folder)
        share = self._on_embedded()
        if share is not None:
            share(folder, (config.tenant, config.database, config.collection_prefix))
        return client

    def _folder_client(self, folder: str, settings: Settings) -> Any:
        """The directory's client for this process: the first store's `process` decides for all.

        Two Chromas on one directory would each keep a copy of its index, so a child is started
        once per directory (shared by the process's stores, ended when the last one releases the
        directory), and never on a directory this process's chromadb already has open.
        """
        config = self._config
        process = _folder.shared(folder, "process", lambda: config.process)
        if process == "child" and not _chroma_has_open(folder):
            child = _folder.shared(
                folder, "child", lambda: ChildProcess(folder), close=ChildProcess.shutdown
            )
            return ChildClient(child, config.tenant, config.database)
        if process != config.process:
            logger.info("embedded Chroma at %s already runs %s in this process", folder, process)
        return chromadb.PersistentClient(
            path=folder, settings=settings, tenant=config.tenant, database=config.database
        )

    def _open_server(self, settings: Settings) -> Any:
        config = self._config
        logger.debug("connecting to %s", config.location)
        return chromadb.HttpClient(
            host=str(config.host),
            port=config.port,
            ssl=config.ssl,
            headers=dict(config.headers) or None,
            settings=settings,
            tenant=config.tenant,
            database=config.database,
        )

    async def connection(self) -> Any:
        if self.client is not None:
            return self.client
        with self.driver_errors("connect"):
            return await asyncio.to_thread(self._connect_sync)

    @contextlib.contextmanager
    def driver_errors(self, action: str) -> Iterator[None]:
        """Re-raises chromadb, httpx and OS errors as `adk_memory` errors (httpx's pattern)."""
        try:
            yield
        except (AdkMemoryError, Gone):
            raise
        except NotFoundError as exc:
            raise Gone(action) from exc
        except (InvalidArgumentError, InvalidDimensionException) as exc:
            raise InvalidArgument(
                f"{self._config.location} refused to {action} ({type(exc).__name__}): a vector "
                "whose dimension differs from the bank's memories', or that holds NaN, ±inf or "
                "a value beyond float32, is refused so."
            ) from exc
        except ChildGone as exc:  # our own message, which quotes nothing stored
            raise StoreUnavailable(f"{self._config.location} failed to {action}: {exc}.") from exc
        except (ChromaError, ValueError, OSError, RuntimeError, ConnectionError) as exc:
            # Messages of the driver may quote stored values, so only the type is repeated.
            raise StoreUnavailable(
                f"{self._config.location} failed to {action} ({type(exc).__name__}). Check "
                "that the server is running or the directory is writable."
            ) from exc
        except Exception as exc:
            if type(exc).__module__.split(".")[0] in ("httpx", "httpcore", "chromadb"):
                raise StoreUnavailable(
                    f"{self._config.location} failed to {action} ({type(exc).__name__})."
                ) from exc
            raise

    async def call(self, action: str, method: Callable[..., Any], **kwargs: Any) -> Any:
        """Calls a chromadb method: awaited if async, else in a worker thread."""
        with self.driver_errors(action):
            if self._is_async:
                return await cast(Callable[..., Awaitable[Any]], method)(**kwargs)
            return await asyncio.to_thread(method, **kwargs)

    async def get(self, action: str, collection: Any, **kwargs: Any) -> Any:
        """`collection.get(**kwargs)`, read again once if Chroma had evicted its vector index.

        For every read that includes embeddings (the only reads that use the index). Chroma
        keeps a bounded number of indexes in memory and drops the least recently used one
        without saving it; reading its vectors then fails (`_EVICTED`) until the collection's
        next write, which replays the collection's unsaved log entries (kept in its SQLite log
        until the index is saved) into a fresh index. So on that failure, and only on it, this
        deletes `REBUILD_ID`, which no row has (a one-row write that changes nothing), and
        reads once more; any other error, or a second failure, is raised as it is.
        """
        try:
            return await self.call(action, collection.get, **kwargs)
        except StoreUnavailable as exc:
            if not _index_evicted(exc):
                raise
            logger.info("Chroma evicted the vector index of %s; rebuilding it", collection.name)
        await self.call(
            "rebuild an evicted vector index", collection.delete, ids=[codec.REBUILD_ID]
        )
        return await self.call(action, collection.get, **kwargs)

    def name(self, bank_id: str | None, kind: str) -> str:
        prefix = self._config.collection_prefix
        if bank_id is None:
            return f"{prefix}.{kind}"
        # Bank ids are numeric or [a-z0-9-] (SPEC §2); anything else is hashed so the name stays
        # inside Chroma's alphabet and cannot run into another bank's.
        plain = bank_id if _is_plain_bank_id(bank_id) else f"x{codec.digest(bank_id)}"
        return f"{prefix}.{plain}.{kind}"

    async def collection(self, name: str, *, create: bool = False, memories: bool = False) -> Any:
        cached = self._collections.get(name)
        if cached is not None:
            return cached
        client = await self.connection()
        if create:
            configuration: dict[str, Any] = {
                "hnsw": {"space": "l2", "sync_threshold": _SYNC_THRESHOLD}
            }
            if memories:
                configuration["hnsw"].update(
                    ef_construction=self._config.hnsw_ef_construction,
                    ef_search=self._config.hnsw_ef_search,
                    max_neighbors=self._config.hnsw_max_neighbors,
                )
            collection = await self.call(
                "create a collection",
                client.get_or_create_collection,
                name=name,
                configuration=configuration,
                embedding_function=None,
            )
        else:
            collection = await self.call(
                "open a collection", client.get_collection, name=name, embedding_function=None
            )
        self._collections[name] = collection
        return collection

    def forget_collection(self, name: str) -> None:
        """Drops a cached handle: the next use opens the collection again."""
        self._collections.pop(name, None)

    def forget_collections(self) -> None:
        self._collections.clear()

    async def delete_collection(self, name: str) -> None:
        """Deletes a collection (`Gone` if there is none) and its cached handle."""
        client = await self.connection()
        await self.call("delete a collection", client.delete_collection, name=name)
        self._collections.pop(name, None)

    async def on_store_wide(self, work: Callable[[Any], Awaitable[_T]], kind: str) -> _T:
        """Runs `work` on a store-wide collection, re-opening it once if it was dropped meanwhile.

        The bank registry (`REGISTRY`), or the due index (`DUE`).
        """
        name = self.name(None, kind)
        for attempt in range(2):
            try:
                return await work(await self.collection(name, create=True))
            except Gone as exc:
                self._collections.pop(name, None)
                if attempt:
                    raise StoreUnavailable(
                        f"The bank registry of {self._config.location} vanished twice while "
                        "in use; is another process dropping collections?"
                    ) from exc
        raise AssertionError("unreachable")

    async def limits(self) -> Limits:
        """Rows and (for a server) estimated bytes one write request may carry."""
        max_rows = await self.batch_size()
        return max_rows, REQUEST_BYTES if self.on_server() else None

    def on_server(self) -> bool:
        """Whether the store talks to a Chroma server (built from a URI or a client passed in)."""
        return self._config.host is not None or _is_http_client(self.client)

    async def batch_size(self) -> int:
        if self._max_batch is None:
            client = await self.connection()
            size = await self.call("read the batch limit", client.get_max_batch_size)
            self._max_batch = int(size) if size and size > 0 else _DEFAULT_BATCH
        return self._max_batch

    async def write(self, action: str, collection: Any, rows: Sequence[codec.Row]) -> None:
        """Upserts rows in as few calls as Chroma's batch limit and `REQUEST_BYTES` allow."""
        for chunk in requests(rows, await self.limits()):
            await self.call(action, collection.upsert, **upsert_arguments(chunk))

    async def delete_ids(self, action: str, collection: Any, ids: Sequence[str]) -> None:
        size = await self.batch_size()
        for start in range(0, len(ids), size):
            await self.call(action, collection.delete, ids=list(ids[start : start + size]))

    async def read_metadata(
        self, collection: Any, ids: Sequence[str], action: str = "read the rows a write changes"
    ) -> dict[str, Any]:
        """The metadata of the rows among `ids` that exist, by id (`IN_CHUNK` ids a call)."""
        unique = list(dict.fromkeys(ids))
        stored: dict[str, Any] = {}
        for start in range(0, len(unique), IN_CHUNK):
            found = await self.call(
                action,
                collection.get,
                ids=unique[start : start + IN_CHUNK],
                include=["metadatas"],
            )
            stored.update(zip(found["ids"], found["metadatas"], strict=True))
        return stored

    async def close(self) -> None:
        """Closes the client this connection built (never one passed in), then the directory."""
        self._collections.clear()
        client = self.client
        self.client = None if self._owns_client else client
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.detach()
        release, self._folder_release = self._folder_release, None
        try:
            if self._owns_client and client is not None:
                with self.driver_errors("close the client"):
                    await asyncio.to_thread(close_client, client)
        finally:
            if release is not None:
                release()  # after the client is closed: then another process may open it


def upsert_arguments(rows: Sequence[codec.Row]) -> dict[str, Any]:
    """A chromadb `upsert`'s keyword arguments for `rows`."""
    documents = [row[2] for row in rows]
    return {
        "ids": [row[0] for row in rows],
        "embeddings": [row[1] for row in rows],
        "documents": documents if any(doc is not None for doc in documents) else None,
        "metadatas": [row[3] for row in rows],
    }


def close_client(client: Any) -> None:
    """Closes a chromadb client, including the HTTP session its `close()` leaves open.

    chromadb 1.5's `Client.close()` releases the shared system, but the HTTP API objects of the
    client and of its internal admin client keep their `httpx.Client` sessions (and sockets)
    open until garbage collection.
    """
    client.close()
    for owner in (client, getattr(client, "_admin_client", None)):
        session = getattr(getattr(owner, "_server", None), "_session", None)
        if isinstance(session, httpx.Client):
            session.close()


def close_quietly(client: Any, location: str) -> None:
    """`close_client` for a finalizer: errors are logged, never raised into the collector."""
    try:
        close_client(client)
    except Exception:  # a finalizer must not raise
        logger.debug("closing the client of %s on collection failed", location, exc_info=True)


def _chroma_has_open(folder: str) -> bool:
    """Whether a chromadb client of this process (ours or the caller's) has `folder` open."""
    systems = getattr(SharedSystemClient, "_identifier_to_system", None)
    if systems is None:  # another chromadb version: assume the worst
        return True
    return any(
        identifier and Path(identifier).expanduser().resolve() == Path(folder)
        for identifier in list(systems)
    )


_EVICTED = (
    "Nothing found on disk",  # never saved yet: no index files
    "Error finding id",  # loaded from its last save, without the rows written since
)
"""How chromadb 1.5 reports a read of an index it evicted (see `Chroma.get`)."""


def _index_evicted(error: StoreUnavailable) -> bool:
    cause = error.__cause__
    return isinstance(cause, ChromaError) and any(sign in str(cause) for sign in _EVICTED)


def _is_http_client(client: Any) -> bool:
    """Whether a chromadb client (built here or passed in) talks to a server."""
    if isinstance(client, AsyncClientAPI):
        return True
    server = getattr(client, "_server", None)
    return server is not None and type(server).__module__.startswith("chromadb.api.fastapi")


def _is_plain_bank_id(bank_id: str) -> bool:
    return (
        0 < len(bank_id) <= 128
        and bank_id.isascii()
        and all(char.isdigit() or char.islower() or char == "-" for char in bank_id)
    )
