"""The Memory Bank REST API over an `AsyncClient`, on FastAPI's own machinery (served by uvicorn).

Every path of reference §2 is served under `/v1beta1/projects/{p}/locations/{l}/…` and, for the
SDK's API-key ("express") mode, under `/v1beta1/…` without the project and location. Each route
declares its body and query parameters as `wire` models, its permission as a security scope of
`auth.authorize`, calls one `AsyncClient` method and returns camelCase JSON with HTTP 200; every
failure is the Google error envelope with the error's own status. FastAPI validates requests and
generates `/openapi.json` from these declarations. Memory Bank's rules live in the engine.

Bodies must be JSON (415 otherwise; a body without a content type is read as JSON). Every request
passes `auth.GuardMiddleware` (Host allow-list; without keys, same-origin or a configured CORS
origin), the same guard as the MCP app's.

Resource names in responses carry the client's project and location (`local` by default); the
project and location in a request path may be anything, as with the client's short names.
"""

from __future__ import annotations

import contextlib
import copy
import email.message
import functools
import ipaddress
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from importlib import resources
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.types import DecoratedCallable
from google.genai.errors import ClientError
from pydantic import BaseModel
from starlette.exceptions import HTTPException
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adk_memory import types
from adk_memory._async_client import AsyncClient
from adk_memory._pagers import AsyncPager
from adk_memory._registry import is_server_uri
from adk_memory._remote._client import OWNER_PROOF_PATH, owner_proof
from adk_memory._remote.owner import ServerRecord, embedded_folder, remove_record, write_record
from adk_memory.embeddings import warm_up
from adk_memory.errors import (
    AdkMemoryError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    StoreUnavailable,
    Unimplemented,
)
from adk_memory.extensions import EXTENSIONS_REST_FIELD, BankExtensions
from adk_memory.filters import is_blank, request_filter
from adk_memory.server import wire
from adk_memory.server.auth import (
    ApiKey,
    ApiKeys,
    GuardMiddleware,
    Principal,
    RequestGuard,
    authorize,
    check_in_scope,
    is_loopback,
)

if TYPE_CHECKING:
    from adk_memory.server.mcp_server import McpBinding

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app", "serve"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
"""The largest request body accepted by default (10 MiB): far above any real request (a fact is
at most 100,000 characters, an ingest request at most 1,000 events), far below what would hurt."""


# The dependencies are `async def` though most await nothing: FastAPI runs a plain `def` one in
# its thread pool, a thread hop per dependency and request (a fifth of the server's CPU under load).


async def _client(request: Request) -> AsyncClient:
    client: AsyncClient = request.app.state.client
    return client


async def _bank_name(bank: str) -> str:
    return f"reasoningEngines/{bank}"


async def _caller(request: Request) -> Principal:
    principal: Principal = request.state.principal  # set by `authorize`, which every route runs
    return principal


async def _memory_name(request: Request, bank: str, memory: str) -> str:
    """The memory of the path; for a caller bound to a scope, only one of that scope.

    A deleted memory whose revisions are kept is still its scope's (for its revisions and a
    rollback); the route itself answers NotFound for what needs a live memory.
    """
    name = f"reasoningEngines/{bank}/memories/{memory}"
    principal = await _caller(request)
    if principal.scope is not None:
        await check_in_scope(await _client(request), name, principal.covers)
    return name


async def _json_only(request: Request) -> None:
    """Refuses a body that is not JSON: a web page can send text/plain without a preflight."""
    declared = request.headers.get("content-type")
    if declared is None or request.method in ("GET", "HEAD"):
        return
    parsed = email.message.Message()
    parsed["content-type"] = declared
    subtype = parsed.get_content_subtype()
    if parsed.get_content_maintype() != "application" or not (
        subtype == "json" or subtype.endswith("+json")
    ):
        raise wire.UnsupportedMediaType(
            f"The request body must be JSON (content-type: application/json), not "
            f"{declared[:80]!r}.",
            field="content-type",
        )


Client = Annotated[AsyncClient, Depends(_client)]
Bank = Annotated[str, Depends(_bank_name)]
"""The bank of the path, as `reasoningEngines/{bank}`."""
Memory = Annotated[str, Depends(_memory_name)]
"""The memory of the path, as `reasoningEngines/{bank}/memories/{memory}`; for a caller bound to
a scope, NotFound unless it (live, or deleted with its revisions kept) is of that scope."""
Caller = Annotated[Principal, Depends(_caller)]
Page = Annotated[wire.PageQuery, Query()]

router = APIRouter(dependencies=[Depends(_json_only)], strict_content_type=False)
_BANK = "/reasoningEngines/{bank}"
_MEMORIES = f"{_BANK}/memories"
_MEMORY = f"{_MEMORIES}/{{memory}}"
_REVISIONS = f"{_MEMORY}/revisions"
_OPERATION = "/operations/{operation}"


def _permission(name: str | None) -> Any:
    return Security(authorize, scopes=[name] if name else [])


def _route(
    method: str,
    path: str,
    permission: str | None,
    operation_id: str | None = None,
    *,
    documented: type[BaseModel] | None = None,
) -> Callable[[DecoratedCallable], DecoratedCallable]:
    """Registers a handler on `router`, needing `permission` on the bank (None: any).

    A handler returns the SDK model its annotation names, which FastAPI documents and dumps as
    proto3 JSON (camelCase, no nulls), or a `JSONResponse` for the shapes the SDK has no model of
    (then `documented` is the model the OpenAPI description gives). The operation id, also
    logged, defaults to the permission's name with `reasoningEngines` called `memoryBanks`.
    """
    operation_id = operation_id or str(permission).replace("reasoningEngines.", "memoryBanks.")
    success: dict[int | str, dict[str, Any]] = {200: {"model": documented}} if documented else {}
    return router.api_route(
        path,
        methods=[method],
        operation_id=operation_id,
        tags=[operation_id.split(".")[0]],
        dependencies=[_permission(permission)],
        response_model_exclude_none=True,
        responses={**success, "default": {"model": wire.ErrorEnvelope}},
        openapi_extra={
            "x-permission": f"aiplatform.{permission}"
            if permission
            else "any permission on the bank"
        },
    )


def _scope_of(body: BaseModel) -> Any:
    """The `scope` field of a request body (None when not given)."""
    return body.model_dump(include={"scope"}).get("scope")


def _split(body: wire.Body) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the method's own arguments, the rest as its config) of a body; None fields left out."""
    values = body.model_dump(exclude_none=True)
    return {name: values.pop(name) for name in body.own_fields if name in values}, values


async def _bank_operation(client: AsyncClient, bank: types.MemoryBank) -> JSONResponse:
    operation = await client.operations.record_bank(bank)
    payload = {"name": operation.name, "done": True}
    return JSONResponse({**payload, "response": wire.reasoning_engine_json(bank)})


async def _operation(client: AsyncClient, name: str) -> JSONResponse:
    operation = await client.operations.get(name)
    payload = wire.to_json(operation)
    if isinstance(operation, types.MemoryBankOperation) and isinstance(
        operation.response, types.MemoryBank
    ):
        payload["response"] = wire.reasoning_engine_json(operation.response)
    return JSONResponse(payload)


_ENGINE_OPERATION = wire.ReasoningEngineOperation


@_route("POST", "/reasoningEngines", "reasoningEngines.create", documented=_ENGINE_OPERATION)
async def create_bank(client: Client, body: wire.ReasoningEngineBody) -> JSONResponse:
    """Create a memory bank (a ReasoningEngine with contextSpec.memoryBankConfig)."""
    body.refuse_unsupported()
    bank = await client.memory_banks.create(
        managed_semantic_memory_config=body.bank_config,
        config={"display_name": body.display_name, "description": body.description},
        memory_bank_id=body.memory_bank_id,
        extensions=body.adk_memory_extensions,
    )
    return await _bank_operation(client, bank)


@_route(
    "GET",
    "/reasoningEngines",
    "reasoningEngines.list",
    documented=types.ListReasoningEnginesResponse,
)
async def list_banks(
    client: Client,
    query: Page,
    principal: Annotated[Principal, _permission("reasoningEngines.list")],
) -> JSONResponse:
    """List the memory banks the key may use."""
    if not is_blank(query.filter):
        raise Unimplemented("Listing memory banks does not support a filter.", field="filter")
    config = {"page_size": query.page_size, "page_token": query.page_token}
    pager = await client.memory_banks.list(config=config, bank_ids=principal.banks)
    payload: dict[str, Any] = {
        "reasoningEngines": [wire.reasoning_engine_json(b) for b in pager.page]
    }
    if pager.next_page_token:
        payload["nextPageToken"] = pager.next_page_token
    return JSONResponse(payload)


@_route("GET", _BANK, "reasoningEngines.get", documented=types.ReasoningEngine)
async def get_bank(client: Client, bank: Bank) -> JSONResponse:
    """Get a memory bank (with `adkMemoryExtensions` when it has extensions)."""
    payload = wire.reasoning_engine_json(await client.memory_banks.get(name=bank))
    extensions = await client.memory_banks.get_extensions(name=bank)
    if extensions != BankExtensions():
        payload[EXTENSIONS_REST_FIELD] = extensions.model_dump(mode="json")
    return JSONResponse(payload)


@_route("PATCH", _BANK, "reasoningEngines.update", documented=_ENGINE_OPERATION)
async def update_bank(
    client: Client,
    bank: Bank,
    body: wire.ReasoningEngineBody,
    query: Annotated[wire.UpdateBankQuery, Query()],
) -> JSONResponse:
    """Update a memory bank; without updateMask the non-empty fields given are merged."""
    body.refuse_unsupported()
    if body.memory_bank_id is not None:
        raise InvalidArgument("A bank's id cannot change.", field="memoryBankId")
    extensions = body.adk_memory_extensions
    body = wire.mask_bank_update(body, query.update_mask)
    updated = await client.memory_banks.update(
        name=bank,
        managed_semantic_memory_config=body.bank_config,
        config={"display_name": body.display_name, "description": body.description},
        extensions=extensions,
    )
    return await _bank_operation(client, updated)


@_route("DELETE", _BANK, "reasoningEngines.delete")
async def delete_bank(
    client: Client,
    bank: Bank,
    query: Annotated[wire.DeleteBankQuery, Query()],
    body: wire.DeleteBankBody | None = None,
) -> types.DeleteMemoryBankOperation:
    """Delete a memory bank; one that holds memories needs force (in the body or the query)."""
    force = body.force if body is not None and body.force is not None else query.force
    return await client.memory_banks.delete(name=bank, force=force)


@_route(
    "GET",
    _BANK + _OPERATION,
    None,
    "operations.getBank",
    documented=types.MemoryBankOperation,
)
async def get_bank_operation(
    client: Client, caller: Caller, bank: Bank, operation: str
) -> JSONResponse:
    """Get an operation of a bank (generate, purge, ingestEvents, create, update)."""
    if caller.scope is not None:
        raise PermissionDenied(
            f"The API key {caller.label!r} is bound to a scope, and a bank's operations hold "
            "memories of every scope; the generate, purge and ingestEvents answers are already "
            "done operations with their results.",
            field="name",
        )
    return await _operation(client, f"{bank}/operations/{operation}")


@_route("POST", _MEMORIES, "memories.create")
async def create_memory(
    client: Client,
    caller: Caller,
    bank: Bank,
    body: wire.CreateMemoryBody,
    query: Annotated[wire.CreateMemoryQuery, Query()],
) -> types.MemoryOperation:
    """Create a memory (a caller bound to a scope chooses ids in that scope's namespace)."""
    caller.check_scope(_scope_of(body))
    own, config = _split(body)
    config["memory_id"] = caller.memory_id_for(query.memory_id, own["scope"])
    return await client.memory_banks.memories.create(name=bank, **own, config=config)


@_route("GET", _MEMORIES, "memories.list")
async def list_memories(
    client: Client, caller: Caller, bank: Bank, query: Page
) -> types.ListMemoriesResponse:
    """List memories (for a caller bound to a scope, of that scope only)."""
    config = query.model_dump(exclude_none=True)
    confined = caller.confine_filter(query.filter)
    if confined is not None:
        config["filter"] = confined
    pager = await client.memory_banks.memories.list(name=bank, config=config)
    return types.ListMemoriesResponse(memories=pager.page, next_page_token=_token(pager))


@_route("POST", _MEMORIES + ":generate", "memories.generate")
async def generate(
    client: Client, caller: Caller, bank: Bank, body: wire.GenerateMemoriesBody
) -> types.GenerateMemoriesOperation:
    """Generate memories from a session, contents or memories (a done operation)."""
    caller.check_scope(_scope_of(body))
    own, config = _split(body)
    return await client.memory_banks.memories.generate(name=bank, **own, config=config)


@_route("POST", _MEMORIES + ":retrieve", "memories.retrieve")
async def retrieve(
    client: Client, caller: Caller, bank: Bank, body: wire.RetrieveMemoriesBody
) -> types.RetrieveMemoriesResponse:
    """Retrieve the memories of one scope (similarity search, or all, or pages)."""
    caller.check_scope(_scope_of(body))
    own, config = _split(body)
    pager = await client.memory_banks.memories.retrieve(name=bank, **own, config=config)
    return types.RetrieveMemoriesResponse(
        retrieved_memories=pager.page, next_page_token=_token(pager)
    )


@_route("POST", _MEMORIES + ":retrieveProfiles", "memories.retrieve", "memories.retrieveProfiles")
async def retrieve_profiles(
    client: Client, caller: Caller, bank: Bank, body: wire.RetrieveProfilesBody
) -> types.RetrieveProfilesResponse:
    """Retrieve the structured profiles of one scope."""
    caller.check_scope(_scope_of(body))
    own, config = _split(body)
    return await client.memory_banks.memories.retrieve_profiles(name=bank, **own, config=config)


@_route("POST", _MEMORIES + ":purge", "memories.delete", "memories.purge")
async def purge(
    client: Client, caller: Caller, bank: Bank, body: wire.PurgeMemoriesBody
) -> types.PurgeMemoriesOperation:
    """Count (force=false) or delete (force=true) the memories the filters select.

    For a caller bound to a scope, the filter is ANDed with that scope.
    """
    own, config = _split(body)
    stated = request_filter(own.get("filter"), own.get("filter_groups"), allow_scope=True)
    if stated is not None:  # else the engine refuses: confining no condition would purge all
        own["filter"] = caller.confine_filter(own.get("filter"))
    own["force"] = bool(own.get("force", False))
    return await client.memory_banks.memories.purge(name=bank, **own, config=config)


@_route("POST", _MEMORIES + ":ingestEvents", "memories.generate", "memoryBanks.ingestEvents")
async def ingest_events(
    client: Client, caller: Caller, bank: Bank, body: wire.IngestEventsBody
) -> types.MemoryBankIngestEventsOperation:
    """Append events to a stream; memories are generated when its trigger fires."""
    caller.check_scope(_scope_of(body))
    own, config = _split(body)
    return await client.memory_banks.ingest_events(name=bank, **own, config=config)


@_route("POST", _MEMORIES + ":listStreams", "memories.generate", "memoryBanks.listStreams")
async def list_streams(
    client: Client, caller: Caller, bank: Bank, body: wire.ListStreamsBody | None = None
) -> JSONResponse:
    """adk-memory's own: the ingest streams holding events not generated from yet.

    For a caller bound to a scope, only streams of scopes carrying its entries.
    """
    scope = body.scope if body is not None else None
    if scope is not None:
        caller.check_scope(scope)
    streams = await client.memory_banks.list_streams(name=bank, scope=scope)
    visible = [stream.to_json() for stream in streams if caller.covers(stream.scope)]
    return JSONResponse({"streams": visible})


@_route("POST", _MEMORIES + ":flushStream", "memories.generate", "memoryBanks.flushStream")
async def flush_stream(
    client: Client, caller: Caller, bank: Bank, body: wire.FlushStreamBody
) -> JSONResponse:
    """adk-memory's own: generate from one stream's pending events now (the count changed).

    A stream without pending events, or of a scope the caller may not see, changes nothing.
    """
    if caller.scope is not None:
        streams = await client.memory_banks.list_streams(name=bank)
        if not any(s.key == body.key and caller.covers(s.scope) for s in streams):
            return JSONResponse({"changedMemories": 0})
    changed = await client.memory_banks.flush_stream(name=bank, key=body.key)
    return JSONResponse({"changedMemories": changed})


@_route("GET", _MEMORY, "memories.get")
async def get_memory(client: Client, memory: Memory) -> types.Memory:
    """Get a memory."""
    return await client.memory_banks.memories.get(name=memory)


@_route("PATCH", _MEMORY, "memories.update")
async def update_memory(
    client: Client,
    caller: Caller,
    memory: Memory,
    body: wire.UpdateMemoryBody,
    query: Annotated[wire.UpdateMemoryQuery, Query()],
) -> types.MemoryOperation:
    """Update a memory (the masked fields, or every field given)."""
    if _scope_of(body) is not None:
        caller.check_scope(_scope_of(body))
    own, config = _split(body)
    config.update(update_mask=query.update_mask, memory_id=query.memory_id)
    return await client.memory_banks.memories.update(name=memory, **own, config=config)


@_route("DELETE", _MEMORY, "memories.delete")
async def delete_memory(client: Client, memory: Memory) -> types.DeleteMemoryOperation:
    """Delete a memory; its revisions remain until they expire."""
    return await client.memory_banks.memories.delete(name=memory)


@_route("POST", _MEMORY + ":rollback", "memoryRevisions.rollback", "memories.rollback")
async def rollback(
    client: Client, memory: Memory, body: wire.RollbackMemoryBody
) -> types.RollbackMemoryOperation:
    """Restore a revision of a memory (recreating a deleted one)."""
    own, config = _split(body)
    return await client.memory_banks.memories.rollback(name=memory, **own, config=config)


@_route(
    "GET",
    _MEMORY + _OPERATION,
    None,
    "operations.getMemory",
    documented=types.MemoryOperation,
)
async def get_memory_operation(client: Client, memory: Memory, operation: str) -> JSONResponse:
    """Get an operation of a memory (create, update, delete, rollback)."""
    return await _operation(client, f"{memory}/operations/{operation}")


@_route("GET", _REVISIONS, "memoryRevisions.list", "memories.revisions.list")
async def list_revisions(
    client: Client, memory: Memory, query: Page
) -> types.ListMemoryRevisionsResponse:
    """List the revisions of a memory, newest first."""
    config = query.model_dump(exclude_none=True, exclude={"order_by"})
    pager = await client.memory_banks.memories.revisions.list(name=memory, config=config)
    return types.ListMemoryRevisionsResponse(
        memory_revisions=pager.page, next_page_token=_token(pager)
    )


@_route("GET", _REVISIONS + "/{revision}", "memoryRevisions.get", "memories.revisions.get")
async def get_revision(client: Client, memory: Memory, revision: str) -> types.MemoryRevision:
    """Get a revision of a memory."""
    revisions = client.memory_banks.memories.revisions
    return await revisions.get(name=f"{memory}/revisions/{revision}")


def _token(pager: AsyncPager[Any]) -> str | None:
    """The pager's next page token, None (left out of the JSON) on the last page."""
    return pager.next_page_token or None


async def _project_and_location(project: str, location: str) -> None:
    """Declares the path parameters of the full prefix (any project and location is served)."""


# Errors


class _MethodNotAllowed(AdkMemoryError, ClientError):
    code = 405
    status = "UNIMPLEMENTED"


async def _on_error(request: Request, exc: Exception) -> Response:
    """Every failure as the Google error envelope, with the error's own status."""
    if isinstance(exc, RequestValidationError):
        exc = wire.invalid_request(exc.errors())
    elif isinstance(exc, HTTPException):
        exc = _http_error(request, exc.status_code, exc.detail)
    elif not isinstance(exc, AdkMemoryError):
        logger.error("Unhandled %s on %s", type(exc).__name__, request.method, exc_info=exc)
        exc = AdkMemoryError("Internal error; the server log has the details.")  # a 500
    return wire.error_response(exc)


def _http_error(request: Request, status: int, detail: str) -> AdkMemoryError:
    where = f"{request.method} {request.url.path[:200]}"
    if status == 404:
        return NotFound(f"No method at {where}; see /openapi.json for the routes.")
    if status == 405:
        return _MethodNotAllowed(f"{request.method} is not supported on {request.url.path[:200]}.")
    if status == 413:
        return _too_large(request.app.state.max_body_bytes)
    return InvalidArgument(f"The request could not be served (HTTP {status}): {detail}.")


def _too_large(max_bytes: int) -> wire.PayloadTooLarge:
    return wire.PayloadTooLarge(
        f"The request body exceeds this server's limit of {max_bytes} bytes; send less per "
        "request (e.g. fewer events per ingestEvents call).",
        field="body",
    )


class _Perimeter:
    """Refuses bodies over `max_bytes` (413, before and while they are read); logs each request.

    The log line holds method, operation id, status, time and key name, never the query string
    (list filters can quote facts and scopes) or a body.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started, status, seen = time.perf_counter(), 500, 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise HTTPException(413)
            return message

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        declared = dict(scope.get("headers") or ()).get(b"content-length")
        try:
            if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
                await wire.error_response(_too_large(self.max_bytes))(scope, receive, sent)
            else:
                await self.app(scope, limited, sent)
        finally:
            route = scope.get("route")
            logger.info(
                "%s %s -> %d in %.1f ms (key %s)",
                scope["method"],
                getattr(route, "operation_id", None) or getattr(route, "path", "-"),
                status,
                (time.perf_counter() - started) * 1000,
                scope.get("state", {}).get("key_label", "-"),
            )


# The app


def create_app(
    client_or_uri: AsyncClient | str,
    *,
    api_keys: ApiKeys | Sequence[ApiKey] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_hosts: Sequence[str] | None = None,
    cors_origins: Sequence[str] = (),
    served_url: str | None = None,
    mcp: McpBinding | None = None,
    generation_model: Any = None,
) -> FastAPI:
    """The Memory Bank REST API as an ASGI app.

    Args:
        client_or_uri: An `AsyncClient` (the app runs its ingest scheduler while it serves but
            never closes it), or a store URI for a client the app builds and closes at shutdown.
        api_keys: The accepted keys with their permissions; None serves everyone (bind it to
            loopback only: `serve` refuses anything else).
        max_body_bytes: The largest request body accepted; larger ones get 413.
        allowed_hosts: The `Host` names served (`*` for any, with keys only). None: loopback
            names only without keys (a web page cannot rebind a name of its own to this server),
            any with keys.
        cors_origins: Origins whose web pages may call the API (CORS); none by default. Without
            keys, requests from any other origin than the server's own are refused.
        served_url: The loopback URL the app is served at (also `app.state.served_url`, which
            `serve` sets from its host and port). On an embedded folder (`chroma:///path`) the
            app then records it in the folder once it holds it, so that commands started on
            the folder go through this server (`adk_memory._remote.owner`).
        mcp: A bank and scope to also serve to MCP clients at `/mcp` (streamable HTTP, behind
            the same keys and request guard; needs `adk-memory[mcp]`).
        generation_model: With a store URI: the model (a name or an ADK `BaseLlm`) that
            generates memories, overriding every bank's `generation_config.model`
            (`AsyncClient(generation_model=…)`).

    Returns:
        A FastAPI app with the routes of reference §2, `/openapi.json`, `/healthz`, the memory
        browser at `/ui` and, with `mcp`, the MCP endpoint at `/mcp`.

    Raises:
        FailedPrecondition: `*` in `allowed_hosts` or `cors_origins` without keys.
        InvalidArgument: A malformed host or origin, a bad `max_body_bytes`, or a server URI
            (`http://…`) instead of a store to serve.
    """
    remote = client_or_uri.remote if isinstance(client_or_uri, AsyncClient) else False
    if remote or isinstance(client_or_uri, str) and is_server_uri(client_or_uri):
        raise InvalidArgument(
            "create_app needs a store to serve, not another adk-memory server: give it the "
            "store's URI (chroma://…, redis://…, memory://).",
            field="client_or_uri",
        )
    if isinstance(client_or_uri, str):
        client, owned = (
            AsyncClient(client_or_uri, generation_model=generation_model, serving=True),
            True,
        )
    elif isinstance(client_or_uri, AsyncClient) and generation_model is None:
        client, owned = client_or_uri, False
    else:
        raise InvalidArgument(
            "create_app needs an AsyncClient or a store URI (with generation_model, a URI); a "
            "blocking Client runs on its own event loop and cannot serve requests (use "
            "Client(...).aio only inside that loop).",
            field="client_or_uri",
        )
    if max_body_bytes <= 0:
        raise InvalidArgument("max_body_bytes must be positive.", field="max_body_bytes")
    # The local model loads in the background while the server starts (requests that need no
    # embedding never wait; the first that does waits for the load, not for a second one).
    warm_up(client.engine.context.default_embedding_model)
    keys = ApiKeys.of(api_keys) if api_keys is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The ingest scheduler runs for the server's whole life (SPEC §3 "Ingest events"), so
        # that streams left due by an earlier process are flushed too, and stops before the
        # server's event loop ends, letting running flushes finish.
        client.ingest_scheduler.start()
        try:
            async with contextlib.AsyncExitStack() as stack:
                record = await _record_folder(client, app.state.served_url)
                if record is not None:
                    stack.callback(remove_record, record)
                    app.state.owner = record
                if mcp is not None:
                    from adk_memory.server.mcp_server import mcp_endpoint

                    endpoint = mcp_endpoint(client, mcp, keys=keys)
                    app.state.mcp = await stack.enter_async_context(endpoint)
                yield
        finally:
            await client.ingest_scheduler.stop()
            if owned:
                await client.aclose()

    app = FastAPI(
        title="adk-memory",
        summary="A self-hosted Memory Bank: the Agent Platform Memory Bank REST API (v1beta1).",
        version=_version(),
        lifespan=lifespan,
        docs_url=None,  # `_add_docs` serves /docs with its assets (no CDN)
        redoc_url=None,
        # A path with a trailing slash is a 404 in the error envelope, not a 307 to a Location
        # built from the request's Host header (`/ui/` has its own redirect below).
        redirect_slashes=False,
    )
    app.state.client = client
    app.state.api_keys = keys
    app.state.max_body_bytes = max_body_bytes
    policy = RequestGuard.of(allowed_hosts, cors_origins, keyless=keys is None)
    app.state.guard = policy
    app.state.served_url = served_url
    app.state.owner = None
    app.state.mcp = None
    app.include_router(
        router,
        prefix="/v1beta1/projects/{project}/locations/{location}",
        dependencies=[Depends(_project_and_location)],
    )
    app.include_router(router, prefix="/v1beta1", include_in_schema=False)

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get(OWNER_PROOF_PATH, include_in_schema=False)
    async def prove_owner(
        challenge: Annotated[str, Query(pattern=r"^[0-9a-f]{32,128}$")],
    ) -> dict[str, str]:
        """Proves that this server holds the folder whose record names it (no key needed)."""
        record: ServerRecord | None = app.state.owner
        if record is None:
            raise NotFound("This server records no embedded folder.", field="challenge")
        return {"proof": owner_proof(record.secret, record.folder, challenge)}

    if mcp is not None:
        # An ASGI endpoint (the MCP transport streams its own answers), not a FastAPI route;
        # it serves its RFC 9728 metadata too. GuardMiddleware below guards both.
        from adk_memory.server.mcp_server import METADATA_PATH

        app.router.routes.append(Route("/mcp", _McpRoute(), methods=["GET", "POST", "DELETE"]))
        app.router.routes.append(Route(METADATA_PATH, _McpRoute(), methods=["GET"]))

    if keys is None:
        app.openapi = functools.partial(_keyless_openapi, app)  # type: ignore[method-assign]
    _add_browser(app)
    _add_docs(app)
    for failure in (AdkMemoryError, HTTPException, RequestValidationError, Exception):
        app.add_exception_handler(failure, _on_error)
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST", "PATCH", "DELETE"],
            allow_headers=["content-type", "authorization", "x-goog-api-key"],
        )
    app.add_middleware(GuardMiddleware, policy=policy)  # outside CORS: preflights too
    app.add_middleware(_Perimeter, max_bytes=max_body_bytes)
    return app


async def _record_folder(client: AsyncClient, served_url: str | None) -> ServerRecord | None:
    """Records `served_url` in the embedded folder the client's store holds (opened here)."""
    if served_url is None or not client.built_from_uri:
        return None
    found = embedded_folder(client.uri)
    if found is None:
        return None
    await client.memory_banks.list()  # opens the store: the folder is this process's from now
    folder, options = found
    try:
        return write_record(folder, served_url, options)
    except OSError as exc:
        logger.warning("Could not record in %s where this server serves it: %s", folder, exc)
        return None


class _McpRoute:
    """`/mcp`: the MCP endpoint the lifespan started (`mcp_server.mcp_endpoint`), as ASGI."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint: ASGIApp | None = scope["app"].state.mcp
        if endpoint is None:
            error = StoreUnavailable("The MCP endpoint is starting or stopping; try again.")
            await wire.error_response(error)(scope, receive, send)
            return
        await endpoint(scope, receive, send)


def _keyless_openapi(app: FastAPI) -> dict[str, Any]:
    """The OpenAPI description without the API-key schemes, which a keyless server ignores."""
    if app.openapi_schema is None:
        described = FastAPI.openapi(app)
        described.get("components", {}).pop("securitySchemes", None)
        for operations in described["paths"].values():
            for operation in operations.values():
                operation.pop("security", None)
    return app.openapi_schema or {}


# The memory browser (/ui): one static page that calls the REST API above with the caller's key.

_UI_FILES = {
    "/ui": ("index.html", "text/html; charset=utf-8"),
    "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/ui/app.css": ("app.css", "text/css; charset=utf-8"),
}
_UI_HEADERS = {
    # The page holds no data and no secret; everything it shows comes from the API, which
    # checks the key. It runs only its own script and talks only to this server.
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
    "cache-control": "no-cache",
}


def _add_browser(app: FastAPI) -> None:
    """Serves the memory browser's three static files (no build step, no external resource)."""
    for path, (filename, media_type) in _UI_FILES.items():
        read = functools.partial(_static_file, "adk_memory.server", filename)
        handler = _static_handler(read, media_type, _UI_HEADERS)
        app.add_api_route(path, handler, methods=["GET"], include_in_schema=False)

    async def slash() -> Response:
        return RedirectResponse("/ui", status_code=308)

    app.add_api_route("/ui/", slash, methods=["GET"], include_in_schema=False)


# The API's interactive description (/docs): Swagger UI, its script and style served from the
# fastapi-offline package (a dependency of the `server` extra), so that it works offline.

_DOCS_ASSETS = {
    "/docs/swagger-ui-bundle.js": ("swagger-ui-bundle.js", "text/javascript; charset=utf-8"),
    "/docs/swagger-ui.css": ("swagger-ui.css", "text/css; charset=utf-8"),
    "/docs/favicon.png": ("favicon.png", "image/png"),
}
_DOCS_HEADERS = {
    # Swagger UI's page starts it with an inline script and styles itself inline; it loads
    # nothing from elsewhere and talks only to this server.
    "content-security-policy": (
        "default-src 'none'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; "
        "frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


@functools.cache
def _static_file(package: str, filename: str) -> bytes:
    """A file of a package's `static` folder, read once."""
    try:
        folder = resources.files(package) / "static"
    except ModuleNotFoundError:
        raise FailedPrecondition(
            f"The {package} package is missing (/docs needs fastapi_offline): "
            "pip install 'adk-memory[server]'."
        ) from None
    return (folder / filename).read_bytes()


def _add_docs(app: FastAPI) -> None:
    """Serves Swagger UI at /docs with its assets from the installed fastapi-offline package."""

    async def docs() -> Response:
        page = get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} · REST API",
            swagger_js_url="/docs/swagger-ui-bundle.js",
            swagger_css_url="/docs/swagger-ui.css",
            swagger_favicon_url="/docs/favicon.png",
            swagger_ui_parameters={"validatorUrl": None},  # no badge from validator.swagger.io
        )
        page.headers.update(_DOCS_HEADERS)
        return page

    app.add_api_route("/docs", docs, methods=["GET"], include_in_schema=False)
    headers = {**_DOCS_HEADERS, "cache-control": "public, max-age=86400"}
    for path, (filename, media_type) in _DOCS_ASSETS.items():
        read = functools.partial(_static_file, "fastapi_offline", filename)
        handler = _static_handler(read, media_type, headers)
        app.add_api_route(path, handler, methods=["GET"], include_in_schema=False)


def _static_handler(
    read: Callable[[], bytes], media_type: str, headers: dict[str, str]
) -> Callable[[], Awaitable[Response]]:
    """A route handler serving `read()`.

    It takes no parameters: a default argument would be a query parameter, letting a link choose
    what the page serves.
    """

    async def serve() -> Response:
        return Response(read(), media_type=media_type, headers=headers)

    return serve


def _version() -> str:
    from adk_memory import __version__

    return __version__


# Serving


def serve(
    uri: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_keys: ApiKeys | Sequence[ApiKey] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    allowed_hosts: Sequence[str] | None = None,
    cors_origins: Sequence[str] = (),
    log_level: str = "info",
    mcp: McpBinding | None = None,
    generation_model: Any = None,
) -> None:
    """Serves `create_app(uri, …)` with uvicorn on `host:port` until interrupted.

    `log_level` is uvicorn's and adk-memory's (`info` logs one line per request). With `mcp`,
    the MCP endpoint is served at `/mcp` too; `generation_model` (a name or an ADK `BaseLlm`)
    overrides every bank's `generation_config.model`. On an embedded folder the server records
    the loopback URL it serves there (when it listens on a loopback or every address), so that
    `adk-memory` commands started on the folder go through it.

    Raises:
        FailedPrecondition: `host` is not a loopback address and no API keys are configured.
    """
    if api_keys is None and not is_loopback(host):
        raise FailedPrecondition(
            f"Refusing to listen on {host!r} without API keys: anyone who can reach it could read "
            "and change every memory. Pass --keys FILE (or set ADK_MEMORY_API_KEYS_FILE), or "
            "bind --host 127.0.0.1.",
            field="host",
        )
    import uvicorn
    from uvicorn.config import LOGGING_CONFIG

    app = create_app(
        uri,
        generation_model=generation_model,
        api_keys=api_keys,
        max_body_bytes=max_body_bytes,
        allowed_hosts=allowed_hosts,
        cors_origins=cors_origins,
        mcp=mcp,
    )
    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["loggers"]["adk_memory"] = {
        "handlers": ["default"],
        "level": log_level.upper(),
        "propagate": False,
    }
    app.state.served_url = _loopback_url(host, port) if port else None  # 0: not known yet
    # Access logs would print query strings, which can hold list filters over facts and scope
    # values; the app logs method, route, status and key name instead.
    uvicorn.run(
        app,
        host=host,
        port=port,
        access_log=False,
        server_header=False,
        log_level=log_level,
        log_config=log_config,
    )


def _loopback_url(host: str, port: int) -> str | None:
    """The URL a process on this machine reaches a server bound to `host:port` at, if any."""
    bare = host.strip("[]")
    if bare in ("", "0.0.0.0") or (is_loopback(bare) and not _is_address(bare)):
        return f"http://127.0.0.1:{port}"  # every address, or a name: uvicorn binds it on IPv4
    if bare == "::":
        return f"http://[::1]:{port}"
    if is_loopback(bare):  # that very address (127.0.0.2 is not 127.0.0.1)
        return f"http://[{bare}]:{port}" if ":" in bare else f"http://{bare}:{port}"
    return None


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
