"""`http://` and `https://` URIs: a client of a running `adk-memory serve`, not a store.

`AsyncClient("http://127.0.0.1:8080")` (and `Client`, `MemoryBankService`, every CLI command,
`adk-memory mcp`) is a `RemoteAsyncClient`: the same resources, methods and errors, answered by
the server, which owns the store, the embedder and generation (`_client`). A process that holds
an embedded folder and serves it records where (`owner`), so that a command started on the folder
goes through that server instead of failing "in use"; the record is followed only once the
server proves it knows the folder's secret.

Why a client, not a `MemoryStore` backend: a store-level REST API would run the engine (its
rules, embeddings, generation, caches, locks) in every client process over a remote store,
so each would load the embedding model and each would need the store's locks; and it would
bypass the server's API keys, scopes and request guard. Forwarding each SDK-shaped call keeps one
engine, in the process that owns the store.
"""

from __future__ import annotations

from typing import Any, ClassVar, NoReturn

from adk_memory._remote._client import (
    DEFAULT_TIMEOUT,
    RemoteAgentEngines,
    RemoteConnection,
    RemoteMemoryBanks,
    RemoteOperations,
    server_url,
)
from adk_memory._remote.owner import ServerRecord
from adk_memory.errors import FailedPrecondition, InvalidArgument
from adk_memory.settings import default_uri, server_api_key

__all__ = ["RemoteAsyncClient"]


class RemoteAsyncClient:
    """The Memory Bank client of an adk-memory server (`http://` / `https://` URIs).

    `AsyncClient(uri)` returns one for a server URI, and `isinstance(it, AsyncClient)` holds (a
    virtual subclass): it is kept apart from the in-process class so that a process that only
    talks to a server never imports the engine (numpy, the lexical index, the embedders).
    """

    remote: ClassVar[bool] = True
    """Calls go to an adk-memory server; there is no `engine` here."""

    def __init__(
        self,
        uri: str | None = None,
        *,
        project: str = "local",
        location: str = "local",
        store: Any = None,
        embedding_model: str | None = None,
        genai_client: Any = None,
        generation_model: Any = None,
        session_service: Any = None,
        run_scheduler: bool = True,
        serving: bool = False,
        api_key: str | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        owner: ServerRecord | None = None,
        **store_options: Any,
    ) -> None:
        """Builds the client without I/O; the first call connects.

        Args:
            uri: `http://host:port` or `https://host[:port][/path]` of an `adk-memory serve`.
                Default: `ADK_MEMORY_URI`.
            project: The project segment of request paths (names in answers are the server's).
            location: The location segment of request paths.
            store: Not for a server URI (the server has the store).
            embedding_model: The model of banks this client creates without one.
            genai_client: Not for a server URI (the server embeds).
            generation_model: Not for a server URI (the server generates; `adk-memory serve
                --model` chooses its model).
            session_service: Not for a server URI.
            run_scheduler: Ignored: the server flushes due ingest streams itself.
            serving: Ignored: the server chose its own store's options.
            api_key: The API key or signed token the server expects (sent as a bearer token).
                Default: `ADK_MEMORY_API_KEY`, else none (a keyless server on loopback).
            timeout: Seconds one request may take before `StoreUnavailable`.
            owner: The folder record that named this server (`owner.find_server`); the server
                must prove it holds that folder before the first request goes out.
            **store_options: Not for a server URI (the server configures its store).

        Raises:
            InvalidArgument: A malformed URI, or an option only a store URI takes.
        """
        given = {
            "store": store,
            "genai_client": genai_client,
            "generation_model": generation_model,
            "session_service": session_service,
            **store_options,
        }
        refused = sorted(name for name, value in given.items() if value is not None)
        if refused:
            raise InvalidArgument(
                f"{refused[0]} does not apply to an adk-memory server URI: the server owns the "
                "store, the embedder and generation (adk-memory serve --model chooses its "
                "generation model). Use a store URI to run the engine in this process.",
                field=refused[0],
            )
        if timeout <= 0:
            raise InvalidArgument("timeout must be positive seconds.", field="timeout")
        self.uri = server_url(uri if uri is not None else default_uri())
        self.built_from_uri = True
        self._connection = RemoteConnection(
            self.uri,
            api_key=api_key if api_key is not None else server_api_key(),
            project=project,
            location=location,
            timeout=timeout,
            owner=owner,
        )
        self.memory_banks = RemoteMemoryBanks(self._connection, embedding_model=embedding_model)
        self.agent_engines = RemoteAgentEngines(self._connection, self.memory_banks)
        self.operations = RemoteOperations(self._connection)

    @property
    def api_key(self) -> str | None:
        """The API key or signed token this client sends (None: none)."""
        return self._connection.api_key

    @property
    def engine(self) -> NoReturn:
        """There is no engine here: the server runs it."""
        raise FailedPrecondition(
            f"This client talks to the adk-memory server at {self.uri}, which runs the engine; "
            "this command or call works on the store itself (export, import, reembed; the "
            "server flushes due ingest streams itself, so no worker is needed). Run it where the "
            "store is: with the store's URI on the server's machine (stop the server first if it "
            "holds an embedded folder), or against Redis or a Chroma server that both can reach.",
            field="uri",
        )

    @property
    def ingest_scheduler(self) -> NoReturn:
        """The server flushes due ingest streams; there is no scheduler here."""
        raise FailedPrecondition(
            f"The adk-memory server at {self.uri} flushes due ingest streams itself.", field="uri"
        )

    async def aclose(self) -> None:
        """Closes the connections to the server."""
        await self._connection.aclose()

    async def __aenter__(self) -> RemoteAsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()
