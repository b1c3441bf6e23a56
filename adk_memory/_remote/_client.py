"""`RemoteAsyncClient`: `AsyncClient`'s surface, answered by a running `adk-memory serve`.

An `http://` or `https://` URI names an adk-memory REST server, which owns the store, the
embedder and generation; `AsyncClient(uri)` is then this class (`AsyncClient.__new__`). Each
method takes the same arguments as the in-process client and validates them into the same SDK
config models (so a typo is the same `InvalidArgument`, before anything is sent), then sends
the request through the official SDK's own request methods (`agentplatform`'s
`memories._create`, `_retrieve`, `memory_banks._get`, …: its URL templates, body converters and
response models) on google-genai's API client, over an httpx client of ours. Nothing here
builds a URL or a body by hand, except the routes the SDK has no method for (an operation by
name, our bank extensions and ingest streams), which go through the same API client.

Where the SDK's public methods differ from Memory Bank's contract the private request method is
used: its retrieve pager cannot send a page token (reference §2.7) and its memory create reads
the memory again; here every pager follows `next_page_token` and a memory create is one request.
Errors come back as the same typed errors (`adk_memory._remote._errors`).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
import hashlib
import hmac
import json
import logging
import os
import secrets
import ssl
from collections.abc import Awaitable, Collection
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import google.auth.credentials
import httpx
from pydantic import BaseModel

from adk_memory import types
from adk_memory._agent_engines import AgentEngine, FlatMemoryHelpers, engine_config
from adk_memory._hosts import is_loopback
from adk_memory._pagers import AsyncPager, first_page
from adk_memory._remote._errors import not_our_api, server_errors
from adk_memory._remote.owner import ServerRecord, recorded_server
from adk_memory._validation import parse_model
from adk_memory.errors import FailedPrecondition, InvalidArgument, StoreUnavailable, Unauthenticated
from adk_memory.extensions import EXTENSIONS_REST_FIELD, BankExtensions
from adk_memory.names import Names
from adk_memory.telemetry import traced_resource

if TYPE_CHECKING:
    from adk_memory.engine.ingest import StreamStatus

__all__ = [
    "CHALLENGE_SECONDS",
    "DEFAULT_TIMEOUT",
    "OWNER_PROOF_PATH",
    "RemoteAgentEngines",
    "RemoteConnection",
    "RemoteMemories",
    "RemoteMemoryBanks",
    "RemoteMemoryRevisions",
    "RemoteOperations",
    "owner_proof",
]

logger = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_TIMEOUT = 300.0
"""Seconds a request may take by default (generation calls a model; a hung server is not
waited on forever)."""
OWNER_PROOF_PATH = "/adk-memory/owner"
"""The route where a server holding an embedded folder proves it knows the folder's secret."""
CHALLENGE_SECONDS = 5.0
"""How long a folder's recorded server has to answer the owner challenge, all of it (a server
that answers byte by byte must not hold a command forever)."""
_MAX_PROOF_BYTES = 1024
"""The most of a challenge's answer read (a proof is 64 hex digits in a small JSON object)."""
BANK_ID_FIELD = "memoryBankId"
"""The create body field carrying a chosen bank id over REST (ours)."""
_NO_KEY = "adk-memory-no-key"
"""The bearer sent when no key is configured (the SDK always sends one; a keyless server
ignores it)."""


def owner_proof(secret: bytes, folder: str, challenge: str) -> str:
    """The answer a folder's owner gives to `challenge`: HMAC-SHA256 of both, hex.

    The secret never leaves the folder's owner-only record file; a server that answers right
    has read it, i.e. runs as the folder's owner.
    """
    message = b"adk-memory owner proof\x00" + folder.encode() + b"\x00" + challenge.encode()
    return hmac.new(secret, message, hashlib.sha256).hexdigest()


def _bank_name(name: str, field: str = "name") -> str:
    return f"reasoningEngines/{Names.parse_bank(name, field=field)}"


def _memory_name(name: str, field: str = "name") -> str:
    bank_id, memory_id = Names.parse_memory(name, field=field)
    return f"reasoningEngines/{bank_id}/memories/{memory_id}"


class RemoteConnection:
    """The SDK's async client aimed at one server, with our key, timeout and error mapping."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None,
        project: str,
        location: str,
        timeout: float,
        owner: ServerRecord | None = None,
    ) -> None:
        import agentplatform

        self.url = url
        self.api_key = api_key
        self.keyed = api_key is not None
        self._owner = owner
        self._verified = owner is None
        self._verify_lock = asyncio.Lock()
        host = urlsplit(url).hostname or ""
        if api_key is not None and url.startswith("http://") and not is_loopback(host):
            _warn_plain_key(url)
        tls = _tls_context()
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            follow_redirects=False,
            verify=tls,
            # Proxy settings of the environment are for the internet, not for a loopback server.
            trust_env=not is_loopback(host),
            event_hooks={"response": [self._json_object_answer]},
        )
        self.sdk = agentplatform.Client(
            project=project,
            location=location,
            credentials=_StaticToken(api_key or _NO_KEY),
            http_options={
                "base_url": url,
                "httpx_async_client": self.http,
                "timeout": int(timeout * 1000),
                # One TLS context per process (loading the CA bundle costs ~50 ms each time);
                # it also keeps the SDK from presenting a Google client certificate here.
                "client_args": {"verify": tls},
                "async_client_args": {"verify": tls, "ssl": tls},
            },
        ).aio

    async def call(self, request: Awaitable[T]) -> T:
        """Awaits one SDK request, its failures raised as our typed errors."""
        try:
            if self._owner is not None:
                await self._check_owner(self._owner)
            with server_errors(self.url):
                return await request
        except Unauthenticated as exc:
            if self.keyed:
                raise
            raise Unauthenticated(
                f"The adk-memory server at {self.url} requires an API key: set "
                "ADK_MEMORY_API_KEY (or pass api_key=… to the client).",
                field=exc.field,
            ) from None
        finally:
            if asyncio.iscoroutine(request):
                request.close()  # never awaited when verification failed: no warning about it

    async def raw(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """A request the SDK has no method for, through its API client; the JSON answer."""
        response = await self.call(
            self.sdk._api_client.async_request(method, path, body or {}, None)
        )
        return json.loads(response.body) if response.body else {}

    async def _check_owner(self, owner: ServerRecord) -> None:
        """Checks, before each request, that the folder still names its live holder here.

        Proved once, a server could still die between two calls and another program take its
        port (`adk-memory mcp` runs for hours): the folder's record is read again (no network),
        and a new server recorded at this URL (a restart) must prove itself in turn.

        Raises:
            StoreUnavailable: The server that held the folder has stopped; nothing was sent.
        """
        current = recorded_server(owner.folder)
        if current is None or (current.url, current.options) != (self.url, owner.options):
            raise StoreUnavailable(
                f"The adk-memory server that held {owner.folder} (pid {owner.pid}) has stopped "
                f"serving it at {self.url}; nothing was sent. Run the command again: it opens "
                "the folder itself, or goes through the server that holds it now."
            )
        if current.secret != owner.secret:
            self._owner, self._verified = current, False
        if not self._verified:
            await self._verify_owner()

    async def _verify_owner(self) -> None:
        """Checks, once, that the server knows the secret of the folder that named it."""
        async with self._verify_lock:
            if self._verified:
                return
            owner = self._owner
            assert owner is not None  # verified from the start without one
            challenge = secrets.token_hex(16)
            try:
                proof = await asyncio.wait_for(self._proof(challenge), CHALLENGE_SECONDS)
            except (httpx.HTTPError, ValueError, TimeoutError):
                proof = None
            expected = owner_proof(owner.secret, owner.folder, challenge)
            if not isinstance(proof, str) or not hmac.compare_digest(proof, expected):
                raise FailedPrecondition(
                    f"The folder {owner.folder} records a server at {self.url} (pid "
                    f"{owner.pid}) that could not prove it holds the folder; the record is "
                    "stale or forged and is not followed. Remove it with the process that "
                    "holds the folder stopped, or pass the server's URI yourself.",
                    field="uri",
                )
            self._verified = True

    async def _json_object_answer(self, response: httpx.Response) -> None:
        """Refuses a success that is not a JSON object, which is all the API answers.

        The SDK's converters would fail on it with an AttributeError, or take it for an empty
        result. The challenge's answer is left to `_proof`, which reads it streamed and bounded.
        """
        if not response.is_success or response.url.path.endswith(OWNER_PROOF_PATH):
            return
        body = await response.aread()
        if not body.lstrip().startswith(b"{"):
            shown = "an empty body" if not body.strip() else "a body that is not a JSON object"
            raise not_our_api(self.url, f"HTTP {response.status_code} with {shown}")

    async def _proof(self, challenge: str) -> object:
        """The server's answer to `challenge`, read up to `_MAX_PROOF_BYTES`, else None."""
        url = self.url + OWNER_PROOF_PATH
        async with self.http.stream("GET", url, params={"challenge": challenge}) as answer:
            if answer.status_code != 200:
                return None
            body = b""
            async for chunk in answer.aiter_bytes():
                body += chunk
                if len(body) > _MAX_PROOF_BYTES:
                    return None
        found = json.loads(body)
        return found.get("proof") if isinstance(found, dict) else None

    async def aclose(self) -> None:
        """Closes the connections."""
        await self.http.aclose()


@traced_resource("memories.revisions")
class RemoteMemoryRevisions:
    """`memory_banks.memories.revisions` over REST."""

    def __init__(self, connection: RemoteConnection) -> None:
        self._c = connection

    async def get(self, *, name: str, config: Any = None) -> types.MemoryRevision:
        """One revision by its full name."""
        checked = parse_model(types.GetMemoryRevisionConfig, config, field="config")
        bank_id, memory_id, revision_id = Names.parse_revision(name)
        short = f"reasoningEngines/{bank_id}/memories/{memory_id}/revisions/{revision_id}"
        revisions = self._c.sdk.memory_banks.memories.revisions
        found: types.MemoryRevision = await self._c.call(revisions.get(name=short, config=checked))
        return found

    async def list(self, *, name: str, config: Any = None) -> AsyncPager[types.MemoryRevision]:
        """The revisions of a memory (deleted or not), newest first."""
        checked = parse_model(types.ListMemoryRevisionsConfig, config, field="config")
        memory = _memory_name(name)
        revisions = self._c.sdk.memory_banks.memories.revisions

        async def fetch(token: str | None) -> tuple[list[types.MemoryRevision], str | None]:
            paged = checked.model_copy(update={"page_token": token})
            page = await self._c.call(revisions._list(name=memory, config=paged))
            return list(page.memory_revisions or ()), page.next_page_token or None

        return await first_page(fetch, checked.page_token)


@traced_resource("memories")
class RemoteMemories:
    """`memory_banks.memories` (also `agent_engines.memories`) over REST."""

    def __init__(self, connection: RemoteConnection) -> None:
        self._c = connection
        self.revisions = RemoteMemoryRevisions(connection)

    @property
    def _sdk(self) -> Any:
        return self._c.sdk.memory_banks.memories

    async def create(
        self, *, name: str, fact: str, scope: dict[str, str], config: Any = None
    ) -> types.MemoryOperation:
        """Creates a memory in the bank `name`; the operation is done when it returns."""
        checked = parse_model(types.MemoryConfig, config, field="config")
        operation: types.MemoryOperation = await self._c.call(
            self._sdk._create(name=_bank_name(name), fact=fact, scope=scope, config=checked)
        )
        return operation

    async def get(self, *, name: str, config: Any = None) -> types.Memory:
        """A live memory by its full or short name; `NotFound` if missing or expired."""
        checked = parse_model(types.GetMemoryConfig, config, field="config")
        memory: types.Memory = await self._c.call(
            self._sdk.get(name=_memory_name(name), config=checked)
        )
        return memory

    async def list(self, *, name: str, config: Any = None) -> AsyncPager[types.Memory]:
        """Every live memory of the bank, in pages (`filter` may name `scope.KEY`)."""
        checked = parse_model(types.ListMemoriesConfig, config, field="config")
        bank = _bank_name(name)

        async def fetch(token: str | None) -> tuple[list[types.Memory], str | None]:
            paged = checked.model_copy(update={"page_token": token})
            page = await self._c.call(self._sdk._list(name=bank, config=paged))
            return list(page.memories or ()), page.next_page_token or None

        return await first_page(fetch, checked.page_token)

    async def update(
        self,
        *,
        name: str,
        fact: str | None = None,
        scope: dict[str, str] | None = None,
        config: Any = None,
    ) -> types.MemoryOperation:
        """Updates the masked fields, or every field given when there is no `update_mask`."""
        checked = parse_model(types.UpdateMemoryConfig, config, field="config")
        operation: types.MemoryOperation = await self._c.call(
            self._sdk._update(name=_memory_name(name), fact=fact, scope=scope, config=checked)
        )
        return operation

    _update = update  # the SDK's (private) spelling

    async def delete(self, *, name: str, config: Any = None) -> types.DeleteMemoryOperation:
        """Deletes a memory; its revisions stay until they expire."""
        checked = parse_model(types.DeleteMemoryConfig, config, field="config")
        operation: types.DeleteMemoryOperation = await self._c.call(
            self._sdk.delete(name=_memory_name(name), config=checked)
        )
        return operation

    async def retrieve(
        self,
        *,
        name: str,
        scope: dict[str, str],
        similarity_search_params: Any = None,
        simple_retrieval_params: Any = None,
        config: Any = None,
    ) -> AsyncPager[types.RetrieveMemoriesResponseRetrievedMemory]:
        """Memories of exactly `scope`: the nearest `top_k`, all of them, or pages of them."""
        checked = parse_model(types.RetrieveMemoriesConfig, config, field="config")
        similarity = None
        if similarity_search_params is not None:
            similarity = parse_model(
                types.RetrieveMemoriesRequestSimilaritySearchParams,
                similarity_search_params,
                field="similarity_search_params",
            )
        simple = None
        if simple_retrieval_params is not None:
            simple = parse_model(
                types.RetrieveMemoriesRequestSimpleRetrievalParams,
                simple_retrieval_params,
                field="simple_retrieval_params",
            )
        bank = _bank_name(name)

        async def fetch(
            token: str | None,
        ) -> tuple[list[types.RetrieveMemoriesResponseRetrievedMemory], str | None]:
            params = None if simple is None else simple.model_copy(update={"page_token": token})
            found = await self._c.call(
                self._sdk._retrieve(
                    name=bank,
                    scope=scope,
                    similarity_search_params=similarity,
                    simple_retrieval_params=params,
                    config=checked,
                )
            )
            return list(found.retrieved_memories or ()), found.next_page_token or None

        return await first_page(fetch, simple.page_token if simple is not None else None)

    async def rollback(
        self, *, name: str, target_revision_id: str, config: Any = None
    ) -> types.RollbackMemoryOperation:
        """Restores a revision of the memory (recreating it if it was deleted)."""
        checked = parse_model(types.RollbackMemoryConfig, config, field="config")
        operation: types.RollbackMemoryOperation = await self._c.call(
            self._sdk._rollback(
                name=_memory_name(name), target_revision_id=target_revision_id, config=checked
            )
        )
        return operation

    async def purge(
        self,
        *,
        name: str,
        filter: str | None = None,
        filter_groups: builtins.list[Any] | None = None,
        force: bool = False,
        config: Any = None,
    ) -> types.PurgeMemoriesOperation:
        """Counts (`force=False`) or deletes (`force=True`) the memories the filters select."""
        checked = parse_model(types.PurgeMemoriesConfig, config, field="config")
        operation: types.PurgeMemoriesOperation = await self._c.call(
            self._sdk._purge(
                name=_bank_name(name),
                filter=filter,
                filter_groups=filter_groups,
                force=bool(force),
                config=checked,
            )
        )
        return operation

    async def generate(
        self,
        *,
        name: str,
        vertex_session_source: Any = None,
        direct_contents_source: Any = None,
        direct_memories_source: Any = None,
        scope: dict[str, str] | None = None,
        config: Any = None,
    ) -> types.GenerateMemoriesOperation:
        """Extracts memories from a conversation (or takes direct ones) and consolidates them.

        The server's model generates (the bank's `generation_config.model`, or the one
        `adk-memory serve --model` names).
        """
        checked = parse_model(types.GenerateMemoriesConfig, config, field="config")
        operation: types.GenerateMemoriesOperation = await self._c.call(
            self._sdk._generate(
                name=_bank_name(name),
                vertex_session_source=vertex_session_source,
                direct_contents_source=direct_contents_source,
                direct_memories_source=direct_memories_source,
                scope=scope,
                config=checked,
            )
        )
        return operation

    async def retrieve_profiles(
        self, *, name: str, scope: dict[str, str], config: Any = None
    ) -> types.RetrieveProfilesResponse:
        """The structured profiles of exactly `scope`, by schema id."""
        checked = parse_model(types.RetrieveMemoryProfilesConfig, config, field="config")
        found: types.RetrieveProfilesResponse = await self._c.call(
            self._sdk.retrieve_profiles(name=_bank_name(name), scope=scope, config=checked)
        )
        return found


@traced_resource("memory_banks")
class RemoteMemoryBanks:
    """`memory_banks` over REST."""

    def __init__(self, connection: RemoteConnection, *, embedding_model: str | None) -> None:
        self._c = connection
        self._embedding_model = embedding_model
        self.memories = RemoteMemories(connection)

    @property
    def _sdk(self) -> Any:
        return self._c.sdk.memory_banks

    async def create(
        self,
        *,
        managed_semantic_memory_config: Any = None,
        config: Any = None,
        memory_bank_id: str | None = None,
        extensions: Any = None,
    ) -> types.MemoryBank:
        """Creates a bank.

        Our extensions (the SDK has neither): `memory_bank_id`, a fixed id instead of a new one;
        `extensions`, an `adk_memory.extensions.BankExtensions` (e.g. hybrid retrieval).
        """
        checked = parse_model(types.CreateMemoryBankConfig, config, field="config")
        managed = parse_model(
            types.ManagedSemanticMemoryConfig,
            managed_semantic_memory_config,
            field="managed_semantic_memory_config",
        )
        if self._embedding_model and not _embedding_model_of(managed):
            data = managed.model_dump(exclude_none=True)
            search = {**data.get("similarity_search_config", {}), "embedding_model": None}
            search["embedding_model"] = self._embedding_model
            data["similarity_search_config"] = search
            managed = parse_model(
                types.ManagedSemanticMemoryConfig, data, field="managed_semantic_memory_config"
            )
        extra: dict[str, Any] = {}
        if memory_bank_id is not None:
            extra[BANK_ID_FIELD] = Names.parse_bank_id(memory_bank_id, field="memory_bank_id")
        if extensions is not None:
            extra[EXTENSIONS_REST_FIELD] = _extensions_json(extensions)
        return await self._changed(
            self._sdk._create(
                memory_bank_config=_wire_config(managed),
                config=_with_extra_body(checked, extra),
            )
        )

    async def get(self, *, name: str, config: Any = None) -> types.MemoryBank:
        """A bank with its config."""
        checked = parse_model(types.GetMemoryBankConfig, config, field="config")
        bank: types.MemoryBank = await self._c.call(
            self._sdk.get(name=_bank_name(name), config=checked)
        )
        return bank

    async def list(
        self, *, config: Any = None, bank_ids: Collection[str] | None = None
    ) -> AsyncPager[types.MemoryBank]:
        """Every bank the server's key may list, oldest first, in pages.

        `bank_ids` (ours): only the banks with these ids, kept from each of the server's pages
        (which the key already limits), so a page may hold fewer than `page_size`.
        """
        from agentplatform._genai._memory_bank_utils import _reasoning_engine_to_memory_bank

        checked = parse_model(types.ListMemoryBanksConfig, config, field="config")
        only = None if bank_ids is None else frozenset(bank_ids)

        async def fetch(token: str | None) -> tuple[list[types.MemoryBank], str | None]:
            paged = checked.model_copy(update={"page_token": token})
            page = await self._c.call(self._sdk._list(config=paged))
            banks = [_reasoning_engine_to_memory_bank(e) for e in page.reasoning_engines or ()]
            if only is not None:
                banks = [bank for bank in banks if (bank.name or "").rsplit("/", 1)[-1] in only]
            return banks, page.next_page_token or None

        return await first_page(fetch, checked.page_token)

    async def update(
        self,
        *,
        name: str,
        managed_semantic_memory_config: Any = None,
        config: Any = None,
        extensions: Any = None,
    ) -> types.MemoryBank:
        """Merges the non-empty top-level config fields given into the bank's config.

        `extensions` (ours) replaces the bank's `BankExtensions` when given.
        """
        checked = parse_model(types.UpdateMemoryBankConfig, config, field="config")
        managed = parse_model(
            types.ManagedSemanticMemoryConfig,
            managed_semantic_memory_config,
            field="managed_semantic_memory_config",
        )
        extra = {} if extensions is None else {EXTENSIONS_REST_FIELD: _extensions_json(extensions)}
        return await self._changed(
            self._sdk._update(
                name=_bank_name(name),
                memory_bank_config=_wire_config(managed),
                config=_with_extra_body(checked, extra),
            )
        )

    async def get_extensions(self, *, name: str) -> BankExtensions:
        """The bank's adk-memory extensions (ours; the SDK has no such call)."""
        found = await self._c.raw("get", _bank_name(name))
        return BankExtensions.model_validate(found.get(EXTENSIONS_REST_FIELD) or {})

    async def delete(
        self, *, name: str, force: bool | None = None, config: Any = None
    ) -> types.DeleteMemoryBankOperation:
        """Deletes a bank; one that still holds memories needs `force=True`."""
        checked = parse_model(types.DeleteMemoryBankConfig, config, field="config")
        operation: types.DeleteMemoryBankOperation = await self._c.call(
            self._sdk._delete(name=_bank_name(name), force=bool(force), config=checked)
        )
        return operation

    async def ingest_events(
        self,
        *,
        name: str,
        scope: dict[str, str],
        stream_id: str = "",
        direct_contents_source: Any = None,
        generation_trigger_config: Any = None,
        config: Any = None,
    ) -> types.MemoryBankIngestEventsOperation:
        """Buffers events on a stream; the server generates when its trigger fires.

        Returns at once with a pending operation, or, with `config.wait_for_completion`, once
        the server has generated from the events (polling the operation every 0.5 s).
        """
        checked = parse_model(types.IngestEventsConfig, config, field="config")
        operation: types.MemoryBankIngestEventsOperation = await self._c.call(
            self._sdk._ingest_events(
                name=_bank_name(name),
                scope=scope,
                stream_id=stream_id,
                direct_contents_source=direct_contents_source,
                generation_trigger_config=generation_trigger_config,
                config=checked,
            )
        )
        while checked.wait_for_completion and not operation.done and operation.name:
            await asyncio.sleep(0.5)
            operation = await self._c.call(
                self._sdk._get_memory_bank_operation(operation_name=operation.name)
            )
            operation = types.MemoryBankIngestEventsOperation.model_validate(
                operation.model_dump(exclude={"response"}, exclude_none=True)
            )
        return operation

    async def list_streams(
        self, *, name: str, scope: dict[str, str] | None = None
    ) -> builtins.list[StreamStatus]:
        """The bank's ingest streams holding events not generated from yet, oldest first (ours).

        With `scope`, only that scope's streams. Each carries its pending count, failures,
        last error and next retry (`adk-memory streams list`).
        """
        from adk_memory.engine.ingest import StreamStatus

        body = {} if scope is None else {"scope": scope}
        found = await self._c.raw("post", f"{_bank_name(name)}/memories:listStreams", body)
        return [StreamStatus.from_json(item) for item in found.get("streams") or ()]

    async def flush_stream(self, *, name: str, key: str) -> int:
        """Generates from a stream's pending events now, whatever its trigger and back-off (ours).

        Returns how many memories were created or changed (0 for a stream without pending
        events); a failed generation is raised after the stream records it.
        """
        body = {"key": key}
        found = await self._c.raw("post", f"{_bank_name(name)}/memories:flushStream", body)
        return int(found.get("changedMemories", 0))

    async def _changed(self, request: Awaitable[Any]) -> types.MemoryBank:
        """The bank a create or update made, read again.

        The operation answering them is done at once and carries the ReasoningEngine, of which
        the SDK's converter keeps only the name (reference §2.12); the bank's config comes from
        a get, converted as the SDK converts it.
        """
        operation = await self._c.call(request)
        if operation.error or operation.response is None or not operation.response.name:
            raise StoreUnavailable(
                f"The server at {self._c.url} answered a bank change without the bank "
                f"({operation.error or 'no response'})."
            )
        return await self.get(name=operation.response.name)


@traced_resource("agent_engines")
class RemoteAgentEngines(FlatMemoryHelpers):
    """The older `agent_engines` surface over REST; a memory bank is a reasoning engine."""

    def __init__(self, connection: RemoteConnection, banks: RemoteMemoryBanks) -> None:
        self._c = connection
        self.memories = banks.memories

    async def create(
        self, *, agent_engine: Any = None, agent: Any = None, config: Any = None
    ) -> AgentEngine:
        """Creates a bank from `config={"context_spec": {"memory_bank_config": …}, …}`."""
        spec, display_name, description = engine_config(config, agent_engine or agent)
        body = {"display_name": display_name, "description": description}
        operation = await self._c.call(
            self._c.sdk.memory_banks._create(memory_bank_config=spec, config=body)
        )
        return await self.get(name=operation.response.name)

    async def update(
        self, *, name: str, agent_engine: Any = None, agent: Any = None, config: Any = None
    ) -> AgentEngine:
        """Merges a new `context_spec.memory_bank_config` (and names) into the bank."""
        spec, display_name, description = engine_config(config, agent_engine or agent)
        body = {"display_name": display_name, "description": description}
        await self._c.call(
            self._c.sdk.memory_banks._update(
                name=_bank_name(name), memory_bank_config=spec, config=body
            )
        )
        return await self.get(name=name)

    async def get(self, *, name: str, config: Any = None) -> AgentEngine:
        """The bank as a reasoning engine."""
        engine = await self._c.call(self._c.sdk.memory_banks._get(name=_bank_name(name)))
        return AgentEngine(api_resource=engine)

    async def list(self, *, config: Any = None) -> list[AgentEngine]:
        """Every bank as a reasoning engine."""
        found: list[AgentEngine] = []
        token: str | None = None
        while True:
            page = await self._c.call(
                self._c.sdk.memory_banks._list(config={"page_token": token} if token else None)
            )
            found += [AgentEngine(api_resource=e) for e in page.reasoning_engines or ()]
            token = page.next_page_token
            if not token:
                return found

    async def delete(self, *, name: str, force: bool = False, config: Any = None) -> None:
        """Deletes the bank (`force` also deletes its memories)."""
        await self._c.call(self._c.sdk.memory_banks._delete(name=_bank_name(name), force=force))


@traced_resource("operations")
class RemoteOperations:
    """`operations.get` over REST."""

    def __init__(self, connection: RemoteConnection) -> None:
        self._c = connection

    async def record_bank(self, bank: types.MemoryBank) -> types.MemoryBankOperation:
        """Only the server records operations; this client cannot serve a REST API."""
        raise FailedPrecondition(
            "An http(s) client forwards to a server, which records its own operations; a REST "
            "server needs an in-process client (a store URI).",
            field="uri",
        )

    async def get(self, name: str) -> Any:
        """The operation, typed by what produced it (e.g. `PurgeMemoriesOperation`)."""
        bank_id, path = Names.parse_operation(name)
        payload = await self._c.raw("get", f"reasoningEngines/{bank_id}/{path}")
        with server_errors(self._c.url):
            return _typed_operation(payload, is_memory=path.startswith("memories/"))


def _typed_operation(payload: dict[str, Any], *, is_memory: bool) -> Any:
    """The SDK operation type a recorded operation's JSON has (the wire carries no type)."""
    from agentplatform._genai._memory_bank_utils import _reasoning_engine_to_memory_bank

    response = payload.get("response")
    if is_memory:
        model: type[BaseModel] = types.MemoryOperation if response else types.DeleteMemoryOperation
    elif isinstance(response, dict) and ("purgeCount" in response or "purge_count" in response):
        model = types.PurgeMemoriesOperation
    elif isinstance(response, dict) and "generatedMemories" in response:
        model = types.GenerateMemoriesOperation
    elif isinstance(response, dict) and ("contextSpec" in response or "name" in response):
        engine = types.ReasoningEngine.model_validate(response)
        bank = _reasoning_engine_to_memory_bank(engine)
        return types.MemoryBankOperation.model_validate(
            {**payload, "response": bank.model_dump(exclude_none=True)}
        )
    elif "streamId" in (payload.get("metadata") or {}):
        model = types.MemoryBankIngestEventsOperation
    elif response is None and str(payload.get("name", "")).endswith("/operations/delete"):
        model = types.DeleteMemoryBankOperation
    else:
        model = types.GenerateMemoriesOperation
    return model.model_validate(payload)


def _embedding_model_of(managed: Any) -> str | None:
    search = managed.similarity_search_config
    return search.embedding_model if search is not None else None


def _wire_config(managed: Any) -> Any:
    """The bank config as the REST body carries it (`customization_configs`, no nulls)."""
    data = managed.model_dump(exclude_none=True)
    if "unstructured_memory_configs" in data:
        data["customization_configs"] = data.pop("unstructured_memory_configs")
    return parse_model(types.ReasoningEngineContextSpecMemoryBankConfig, data, field="config")


def _extensions_json(extensions: Any) -> dict[str, Any]:
    checked = parse_model(BankExtensions, extensions, field="extensions")
    dumped: dict[str, Any] = checked.model_dump(mode="json")
    return dumped


def _with_extra_body(config: Any, extra: dict[str, Any]) -> Any:
    """`config` whose request also carries our own body fields `extra` (none: unchanged)."""
    if not extra:
        return config
    options = config.http_options.model_dump(exclude_none=True) if config.http_options else {}
    options["extra_body"] = {**(options.get("extra_body") or {}), **extra}
    return config.model_copy(update={"http_options": options})


class _StaticToken(google.auth.credentials.Credentials):
    """A bearer token that never expires and never refreshes: the key or signed token given.

    What `google.oauth2.credentials.Credentials(token=…)` is without an expiry, without that
    module's imports (a CLI call's start-up counts).
    """

    def __init__(self, token: str) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.token = token

    def refresh(self, request: Any) -> None:
        """Nothing to refresh: the server accepts the token or answers 401."""


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """The CA bundle google-genai would load (`SSL_CERT_FILE`/`SSL_CERT_DIR`, else certifi's)."""
    import certifi

    return ssl.create_default_context(
        cafile=os.environ.get("SSL_CERT_FILE", certifi.where()),
        capath=os.environ.get("SSL_CERT_DIR"),
    )


_WARNED_PLAIN: set[str] = set()


def _warn_plain_key(url: str) -> None:
    """Warns once per process and URL that a key goes unencrypted to another machine."""
    if url in _WARNED_PLAIN:
        return
    _WARNED_PLAIN.add(url)
    logger.warning(
        "The API key goes to %s unencrypted (http:// to another machine): anyone on the way "
        "can read and reuse it. Use https:// (e.g. adk-memory serve behind a TLS proxy).",
        url,
    )


def server_url(uri: str) -> str:
    """The base URL of a server URI: scheme, host, port and path, nothing else.

    A refused URI is never repeated in the error: it may carry a key (as credentials, in the
    query or mistyped as the port), and errors get logged.

    Raises:
        InvalidArgument: The URI is not `http(s)://host[:port][/path]`, or carries credentials,
            a query or a fragment (keys travel by `api_key` or `ADK_MEMORY_API_KEY`, never in
            a URI that gets logged).
    """
    parts = urlsplit(uri)
    if parts.username is not None or parts.password is not None:
        raise InvalidArgument(
            "A server URI must not carry credentials; pass the API key as api_key= or "
            "ADK_MEMORY_API_KEY.",
            field="uri",
        )
    http = parts.scheme.lower() in ("http", "https")
    if not http or not parts.hostname:
        raise InvalidArgument(
            "A server URI is http://host:port or https://host[:port][/path]; the one given "
            f"has {'no host' if http else 'another scheme'}.",
            field="uri",
        )
    if parts.query or parts.fragment or uri.endswith(("?", "#")):
        raise InvalidArgument(
            "A server URI takes no query parameters and no fragment; the server configures the "
            "store, and an API key goes in api_key= or ADK_MEMORY_API_KEY.",
            field="uri",
        )
    try:
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        raise InvalidArgument(
            f"The port of the server URI for {parts.hostname} is not a number from 0 to 65535.",
            field="uri",
        ) from None
    return urlunsplit((parts.scheme.lower(), parts.netloc, parts.path.rstrip("/"), "", ""))
