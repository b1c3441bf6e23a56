"""The Memory Bank REST API over an `AsyncClient` (FastAPI, served by uvicorn).

Every path of reference §2 is served under `/v1beta1/projects/{p}/locations/{l}/…` and, for the
SDK's API-key ("express") mode, under `/v1beta1/…` without the project and location. Each route
checks the caller's key (401, 403), parses the body (`wire`), calls one `AsyncClient` method and
returns its result as camelCase JSON with HTTP 200; every failure is the Google error envelope
with the error's own status. Memory Bank's rules live in the engine, never here.

Resource names in responses carry the client's project and location (`local` by default); the
project and location in a request path may be anything, as with the client's short names.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse, RedirectResponse, Response
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from adk_memory import types
from adk_memory._async_client import AsyncClient
from adk_memory.errors import (
    AdkMemoryError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unimplemented,
)
from adk_memory.names import Names
from adk_memory.server import wire
from adk_memory.server.auth import ApiKey, ApiKeys, Principal, authenticate, is_loopback

__all__ = ["DEFAULT_MAX_BODY_BYTES", "create_app", "serve"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 10 * 1024 * 1024
"""The largest request body accepted by default (10 MiB): far above any real request (a fact is
at most 100,000 characters, an ingest request at most 1,000 events), far below what would hurt."""

_PREFIXES = ("/v1beta1/projects/{project}/locations/{location}/", "/v1beta1/")


@dataclass(frozen=True, slots=True)
class _Call:
    """One request, authenticated, as the handlers see it."""

    request: Request
    principal: Principal
    client: AsyncClient

    def param(self, name: str) -> str:
        value: str = self.request.path_params[name]
        return value

    @property
    def query(self) -> Any:
        return self.request.query_params

    async def body(self, model: type[wire.M]) -> wire.M:
        return wire.parse_body(model, await self.request.body())

    @property
    def bank(self) -> str:
        return f"reasoningEngines/{self.param('bank')}"

    @property
    def memory(self) -> str:
        return f"{self.bank}/memories/{self.param('memory')}"


Handler = Callable[[_Call], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class _Route:
    """One REST method: where it lives, what it needs, what it takes and returns."""

    method: str
    path: str
    permission: str | None
    handler: Handler
    operation_id: str
    summary: str
    body: type[BaseModel] | None = None
    response: type[BaseModel] | None = None
    query: tuple[str, ...] = ()


# Handlers: parse, call one client method, shape the answer.


async def _create_bank(call: _Call) -> dict[str, Any]:
    body = await call.body(wire.ReasoningEngineBody)
    body.refuse_unsupported()
    bank = await call.client.memory_banks.create(
        managed_semantic_memory_config=body.bank_config,
        config={"display_name": body.display_name, "description": body.description},
    )
    return await _bank_operation(call.client, bank)


async def _get_bank(call: _Call) -> dict[str, Any]:
    return wire.reasoning_engine_json(await call.client.memory_banks.get(name=call.bank))


async def _list_banks(call: _Call) -> dict[str, Any]:
    if wire.query_str(call.query, "filter"):
        raise Unimplemented("Listing memory banks does not support a filter.", field="filter")
    pager = await call.client.memory_banks.list(
        config={
            "page_size": wire.query_int(call.query, "pageSize"),
            "page_token": wire.query_str(call.query, "pageToken"),
        }
    )
    banks = [
        wire.reasoning_engine_json(bank)
        for bank in pager.page
        if call.principal.may_use_bank(Names.parse_bank(bank.name or ""))
    ]
    return _page("reasoningEngines", banks, pager.next_page_token)


async def _update_bank(call: _Call) -> dict[str, Any]:
    body = await call.body(wire.ReasoningEngineBody)
    body.refuse_unsupported()
    body = wire.mask_bank_update(body, wire.query_str(call.query, "updateMask"))
    bank = await call.client.memory_banks.update(
        name=call.bank,
        managed_semantic_memory_config=body.bank_config,
        config={"display_name": body.display_name, "description": body.description},
    )
    return await _bank_operation(call.client, bank)


async def _delete_bank(call: _Call) -> dict[str, Any]:
    body = await call.body(wire.DeleteBankBody)
    force = body.force if body.force is not None else wire.query_bool(call.query, "force")
    return wire.to_json(await call.client.memory_banks.delete(name=call.bank, force=force))


async def _bank_operation(client: AsyncClient, bank: types.MemoryBank) -> dict[str, Any]:
    """A done bank operation, recorded so that the SDK's follow-up GET finds it (§2.12)."""
    operation = types.MemoryBankOperation(done=True, response=bank)
    bank_id = Names.parse_bank(bank.name or "")
    operation.name = await client.engine.context.record_operation(bank_id, "", "bank", operation)
    return {"name": operation.name, "done": True, "response": wire.reasoning_engine_json(bank)}


async def _create_memory(call: _Call) -> dict[str, Any]:
    values = (await call.body(wire.CreateMemoryBody)).model_dump(exclude_none=True)
    fact, scope = values.pop("fact"), values.pop("scope")
    values["memory_id"] = wire.query_str(call.query, "memoryId")
    operation = await call.client.memory_banks.memories.create(
        name=call.bank, fact=fact, scope=scope, config=values
    )
    return wire.to_json(operation)


async def _get_memory(call: _Call) -> dict[str, Any]:
    return wire.to_json(await call.client.memory_banks.memories.get(name=call.memory))


async def _list_memories(call: _Call) -> dict[str, Any]:
    config = {
        "page_size": wire.query_int(call.query, "pageSize"),
        "page_token": wire.query_str(call.query, "pageToken"),
        "filter": wire.query_str(call.query, "filter"),
        "order_by": wire.query_str(call.query, "orderBy"),
    }
    pager = await call.client.memory_banks.memories.list(name=call.bank, config=config)
    return _page("memories", [wire.to_json(memory) for memory in pager.page], pager.next_page_token)


async def _update_memory(call: _Call) -> dict[str, Any]:
    values = (await call.body(wire.UpdateMemoryBody)).model_dump(exclude_none=True)
    fact, scope = values.pop("fact", None), values.pop("scope", None)
    values["update_mask"] = wire.query_str(call.query, "updateMask")
    values["memory_id"] = wire.query_str(call.query, "memoryId")
    operation = await call.client.memory_banks.memories.update(
        name=call.memory, fact=fact, scope=scope, config=values
    )
    return wire.to_json(operation)


async def _delete_memory(call: _Call) -> dict[str, Any]:
    return wire.to_json(await call.client.memory_banks.memories.delete(name=call.memory))


async def _generate(call: _Call) -> dict[str, Any]:
    values = (await call.body(wire.GenerateMemoriesBody)).model_dump(exclude_none=True)
    operation = await call.client.memory_banks.memories.generate(
        name=call.bank,
        vertex_session_source=values.pop("vertex_session_source", None),
        direct_contents_source=values.pop("direct_contents_source", None),
        direct_memories_source=values.pop("direct_memories_source", None),
        scope=values.pop("scope", None),
        config=values,
    )
    return wire.to_json(operation)


async def _retrieve(call: _Call) -> dict[str, Any]:
    values = (await call.body(wire.RetrieveMemoriesBody)).model_dump(exclude_none=True)
    pager = await call.client.memory_banks.memories.retrieve(
        name=call.bank,
        scope=values.pop("scope"),
        similarity_search_params=values.pop("similarity_search_params", None),
        simple_retrieval_params=values.pop("simple_retrieval_params", None),
        config=values,
    )
    return _page(
        "retrievedMemories", [wire.to_json(hit) for hit in pager.page], pager.next_page_token
    )


async def _retrieve_profiles(call: _Call) -> dict[str, Any]:
    values = (await call.body(wire.RetrieveProfilesBody)).model_dump(exclude_none=True)
    scope = values.pop("scope")
    response = await call.client.memory_banks.memories.retrieve_profiles(
        name=call.bank, scope=scope, config=values
    )
    return wire.to_json(response)


async def _rollback(call: _Call) -> dict[str, Any]:
    values = (await call.body(wire.RollbackMemoryBody)).model_dump(exclude_none=True)
    target = values.pop("target_revision_id")
    operation = await call.client.memory_banks.memories.rollback(
        name=call.memory, target_revision_id=target, config=values
    )
    return wire.to_json(operation)


async def _purge(call: _Call) -> dict[str, Any]:
    values = (await call.body(wire.PurgeMemoriesBody)).model_dump(exclude_none=True)
    operation = await call.client.memory_banks.memories.purge(
        name=call.bank,
        filter=values.pop("filter", None),
        filter_groups=values.pop("filter_groups", None),
        force=bool(values.pop("force", False)),
        config=values,
    )
    return wire.to_json(operation)


async def _ingest_events(call: _Call) -> dict[str, Any]:
    values = (await call.body(wire.IngestEventsBody)).model_dump(exclude_none=True)
    operation = await call.client.memory_banks.ingest_events(
        name=call.bank,
        scope=values.pop("scope"),
        stream_id=values.pop("stream_id", ""),
        direct_contents_source=values.pop("direct_contents_source", None),
        generation_trigger_config=values.pop("generation_trigger_config", None),
        config=values,
    )
    return wire.to_json(operation)


async def _list_revisions(call: _Call) -> dict[str, Any]:
    config = {
        "page_size": wire.query_int(call.query, "pageSize"),
        "page_token": wire.query_str(call.query, "pageToken"),
        "filter": wire.query_str(call.query, "filter"),
    }
    pager = await call.client.memory_banks.memories.revisions.list(name=call.memory, config=config)
    return _page(
        "memoryRevisions",
        [wire.to_json(revision) for revision in pager.page],
        pager.next_page_token,
    )


async def _get_revision(call: _Call) -> dict[str, Any]:
    name = f"{call.memory}/revisions/{call.param('revision')}"
    return wire.to_json(await call.client.memory_banks.memories.revisions.get(name=name))


async def _get_bank_operation(call: _Call) -> dict[str, Any]:
    return await _operation(call, f"{call.bank}/operations/{call.param('operation')}")


async def _get_memory_operation(call: _Call) -> dict[str, Any]:
    return await _operation(call, f"{call.memory}/operations/{call.param('operation')}")


async def _operation(call: _Call, name: str) -> dict[str, Any]:
    operation = await call.client.operations.get(name)
    payload = wire.to_json(operation)
    if isinstance(operation, types.MemoryBankOperation) and isinstance(
        operation.response, types.MemoryBank
    ):
        payload["response"] = wire.reasoning_engine_json(operation.response)
    return payload


def _page(key: str, items: list[Any], next_page_token: str | None) -> dict[str, Any]:
    payload: dict[str, Any] = {key: items}
    if next_page_token:
        payload["nextPageToken"] = next_page_token
    return payload


_BANK = "reasoningEngines/{bank}"
_MEMORY = "reasoningEngines/{bank}/memories/{memory}"
_LIST = ("pageSize", "pageToken")

_ROUTES: tuple[_Route, ...] = (
    _Route(
        "POST",
        "reasoningEngines",
        "reasoningEngines.create",
        _create_bank,
        "memoryBanks.create",
        "Create a memory bank (a ReasoningEngine with contextSpec.memoryBankConfig).",
        wire.ReasoningEngineBody,
        wire.ReasoningEngineOperation,
    ),
    _Route(
        "GET",
        "reasoningEngines",
        "reasoningEngines.list",
        _list_banks,
        "memoryBanks.list",
        "List memory banks.",
        None,
        wire.ListReasoningEnginesResponse,
        _LIST,
    ),
    _Route(
        "GET",
        _BANK,
        "reasoningEngines.get",
        _get_bank,
        "memoryBanks.get",
        "Get a memory bank.",
        None,
        types.ReasoningEngine,
    ),
    _Route(
        "PATCH",
        _BANK,
        "reasoningEngines.update",
        _update_bank,
        "memoryBanks.update",
        "Update a memory bank; without updateMask the non-empty fields given are merged.",
        wire.ReasoningEngineBody,
        wire.ReasoningEngineOperation,
        ("updateMask",),
    ),
    _Route(
        "DELETE",
        _BANK,
        "reasoningEngines.delete",
        _delete_bank,
        "memoryBanks.delete",
        "Delete a memory bank; one that holds memories needs force.",
        wire.DeleteBankBody,
        types.DeleteMemoryBankOperation,
        ("force",),
    ),
    _Route(
        "GET",
        f"{_BANK}/operations/{{operation}}",
        None,
        _get_bank_operation,
        "operations.getBank",
        "Get an operation of a bank (generate, purge, ingestEvents, create, update).",
        None,
        types.MemoryBankOperation,
    ),
    _Route(
        "POST",
        f"{_BANK}/memories",
        "memories.create",
        _create_memory,
        "memories.create",
        "Create a memory.",
        wire.CreateMemoryBody,
        types.MemoryOperation,
        ("memoryId",),
    ),
    _Route(
        "GET",
        f"{_BANK}/memories",
        "memories.list",
        _list_memories,
        "memories.list",
        "List the memories of a bank.",
        None,
        types.ListMemoriesResponse,
        (*_LIST, "filter", "orderBy"),
    ),
    _Route(
        "POST",
        f"{_BANK}/memories:generate",
        "memories.generate",
        _generate,
        "memories.generate",
        "Generate memories from a conversation or direct facts.",
        wire.GenerateMemoriesBody,
        types.GenerateMemoriesOperation,
    ),
    _Route(
        "POST",
        f"{_BANK}/memories:retrieve",
        "memories.retrieve",
        _retrieve,
        "memories.retrieve",
        "Retrieve the memories of one scope (similarity search, or all, or pages).",
        wire.RetrieveMemoriesBody,
        types.RetrieveMemoriesResponse,
    ),
    _Route(
        "POST",
        f"{_BANK}/memories:retrieveProfiles",
        "memories.retrieve",
        _retrieve_profiles,
        "memories.retrieveProfiles",
        "Retrieve the structured profiles of one scope.",
        wire.RetrieveProfilesBody,
        types.RetrieveProfilesResponse,
    ),
    _Route(
        "POST",
        f"{_BANK}/memories:purge",
        "memories.delete",
        _purge,
        "memories.purge",
        "Count (force=false) or delete (force=true) the memories the filters select.",
        wire.PurgeMemoriesBody,
        types.PurgeMemoriesOperation,
    ),
    _Route(
        "POST",
        f"{_BANK}/memories:ingestEvents",
        "memories.generate",
        _ingest_events,
        "memoryBanks.ingestEvents",
        "Append events to a stream; memories are generated when its trigger fires.",
        wire.IngestEventsBody,
        types.MemoryBankIngestEventsOperation,
    ),
    _Route(
        "GET",
        _MEMORY,
        "memories.get",
        _get_memory,
        "memories.get",
        "Get a memory.",
        None,
        types.Memory,
    ),
    _Route(
        "PATCH",
        _MEMORY,
        "memories.update",
        _update_memory,
        "memories.update",
        "Update a memory (the masked fields, or every field given).",
        wire.UpdateMemoryBody,
        types.MemoryOperation,
        ("updateMask", "memoryId"),
    ),
    _Route(
        "DELETE",
        _MEMORY,
        "memories.delete",
        _delete_memory,
        "memories.delete",
        "Delete a memory; its revisions remain until they expire.",
        None,
        types.DeleteMemoryOperation,
    ),
    _Route(
        "POST",
        f"{_MEMORY}:rollback",
        "memoryRevisions.rollback",
        _rollback,
        "memories.rollback",
        "Restore a revision of a memory (recreating a deleted one).",
        wire.RollbackMemoryBody,
        types.RollbackMemoryOperation,
    ),
    _Route(
        "GET",
        f"{_MEMORY}/operations/{{operation}}",
        None,
        _get_memory_operation,
        "operations.getMemory",
        "Get an operation of a memory (create, update, delete, rollback).",
        None,
        types.MemoryOperation,
    ),
    _Route(
        "GET",
        f"{_MEMORY}/revisions",
        "memoryRevisions.list",
        _list_revisions,
        "memories.revisions.list",
        "List the revisions of a memory, newest first.",
        None,
        types.ListMemoryRevisionsResponse,
        (*_LIST, "filter"),
    ),
    _Route(
        "GET",
        f"{_MEMORY}/revisions/{{revision}}",
        "memoryRevisions.get",
        _get_revision,
        "memories.revisions.get",
        "Get a revision of a memory.",
        None,
        types.MemoryRevision,
    ),
)


# Errors and the request-size limit


def _error_response(error: AdkMemoryError) -> JSONResponse:
    headers = {"www-authenticate": "Bearer"} if error.http_status == 401 else None
    return JSONResponse(wire.error_envelope(error), status_code=error.http_status, headers=headers)


def _internal_error() -> JSONResponse:
    envelope = {
        "error": {
            "code": 500,
            "message": "Internal error; the server log has the details.",
            "status": "INTERNAL",
        }
    }
    return JSONResponse(envelope, status_code=500)


class _BodyLimit:
    """Refuses request bodies over `max_bytes` with 413, before and while they are read."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or ()).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            response = _error_response(self._too_large())
            await response(scope, receive, send)
            return
        seen = 0

        async def limited() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise self._too_large()
            return message

        await self.app(scope, limited, send)

    def _too_large(self) -> wire.PayloadTooLarge:
        return wire.PayloadTooLarge(
            f"The request body exceeds this server's limit of {self.max_bytes} bytes; send less "
            "per request (e.g. fewer events per ingestEvents call).",
            field="body",
        )


# The app


def _endpoint(
    route: _Route, client: AsyncClient, keys: ApiKeys | None
) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        started = time.perf_counter()
        label = "-"
        try:
            principal = authenticate(
                keys,
                api_key=request.headers.get("x-goog-api-key"),
                authorization=request.headers.get("authorization"),
            )
            label = principal.label
            principal.require(route.permission, request.path_params.get("bank"))
            response: Response = JSONResponse(
                await route.handler(_Call(request, principal, client))
            )
        except AdkMemoryError as error:
            response = _error_response(error)
        except Exception:
            logger.exception("Unhandled error in %s (key %s)", route.operation_id, label)
            response = _internal_error()
        logger.info(
            "%s %s -> %d in %.1f ms (key %s)",
            route.method,
            route.operation_id,
            response.status_code,
            (time.perf_counter() - started) * 1000,
            label,
        )
        return response

    endpoint.__name__ = route.operation_id.replace(".", "_")
    return endpoint


def create_app(
    client_or_uri: AsyncClient | str,
    *,
    api_keys: ApiKeys | Sequence[ApiKey] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The Memory Bank REST API as an ASGI app.

    Args:
        client_or_uri: An `AsyncClient` (the app runs its ingest scheduler while it serves but
            never closes it), or a store URI for a client the app builds and closes at shutdown.
        api_keys: The accepted keys with their permissions; None serves everyone (bind it to
            loopback only: `serve` refuses anything else).
        max_body_bytes: The largest request body accepted; larger ones get 413.

    Returns:
        A FastAPI app with the routes of reference §2, `/openapi.json` and `/healthz`.
    """
    if isinstance(client_or_uri, str):
        client, owned = AsyncClient(client_or_uri), True
    elif isinstance(client_or_uri, AsyncClient):
        client, owned = client_or_uri, False
    else:
        raise InvalidArgument(
            "create_app needs an AsyncClient or a store URI; a blocking Client runs on its own "
            "event loop and cannot serve requests (use Client(...).aio only inside that loop).",
            field="client_or_uri",
        )
    if max_body_bytes <= 0:
        raise InvalidArgument("max_body_bytes must be positive.", field="max_body_bytes")
    keys = ApiKeys.of(api_keys) if api_keys is not None else None

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with _background_work(client):
                yield
        finally:
            if owned:
                await client.aclose()

    app = FastAPI(
        title="adk-memory",
        summary="A self-hosted Memory Bank: the Agent Platform Memory Bank REST API (v1beta1).",
        version=_version(),
        lifespan=lifespan,
        docs_url="/docs",
        redoc_url=None,
        openapi_url="/openapi.json",
        # A path with a trailing slash is a 404 in the error envelope, not a 307 to a Location
        # built from the request's Host header (`/ui/` has its own redirect below).
        redirect_slashes=False,
    )
    for route in _ROUTES:
        for prefix in _PREFIXES:
            app.add_api_route(
                prefix + route.path,
                _endpoint(route, client, keys),
                methods=[route.method],
                summary=route.summary,
                operation_id=f"{route.operation_id}{'' if 'projects' in prefix else '.express'}",
                tags=[route.operation_id.split(".")[0]],
                include_in_schema="projects" in prefix,
                openapi_extra=_openapi_operation(route),
            )

    @app.get("/healthz", include_in_schema=False)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    _add_browser(app)

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        if status == 404:
            error: AdkMemoryError = NotFound(
                f"No method at {request.method} {request.url.path[:200]}; "
                "see /openapi.json for the routes.",
            )
        elif status == 405:
            error = _MethodNotAllowed(
                f"{request.method} is not supported on {request.url.path[:200]}."
            )
        else:
            error = InvalidArgument(f"The request could not be served (HTTP {status}).")
        return _error_response(error)

    async def validation_error(request: Request, exc: Exception) -> Response:
        return _error_response(InvalidArgument("The request is malformed.", field="body"))

    async def unhandled(request: Request, exc: Exception) -> Response:
        if isinstance(exc, AdkMemoryError):
            return _error_response(exc)
        logger.error("Unhandled %s on %s", type(exc).__name__, request.method, exc_info=exc)
        return _internal_error()

    app.add_exception_handler(HTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(Exception, unhandled)
    app.add_middleware(_BodyLimit, max_bytes=max_body_bytes)
    app.openapi = _openapi_builder(app, secured=keys is not None)  # type: ignore[method-assign]
    return app


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
    static = resources.files("adk_memory.server") / "static"
    for path, (filename, media_type) in _UI_FILES.items():
        content = (static / filename).read_bytes()

        async def serve_file(content: bytes = content, media_type: str = media_type) -> Response:
            return Response(content, media_type=media_type, headers=_UI_HEADERS)

        app.add_api_route(path, serve_file, methods=["GET"], include_in_schema=False)

    async def slash() -> Response:
        return RedirectResponse("/ui", status_code=308)

    app.add_api_route("/ui/", slash, methods=["GET"], include_in_schema=False)


class _MethodNotAllowed(AdkMemoryError):
    code = "UNIMPLEMENTED"
    http_status = 405


@asynccontextmanager
async def _background_work(client: AsyncClient) -> AsyncIterator[None]:
    """Runs the ingest scheduler for the server's whole life (SPEC §3 "Ingest events").

    It starts with the server, not with the first `ingestEvents`, so that streams left due by
    an earlier process (an idle trigger, a restart) are flushed too. Its tasks live on the
    server's event loop, so it stops before that loop ends, letting running flushes finish.
    """
    client.ingest_scheduler.start()
    try:
        yield
    finally:
        await client.ingest_scheduler.stop()


def _version() -> str:
    from adk_memory import __version__

    return __version__


# OpenAPI


def _openapi_operation(route: _Route) -> dict[str, Any]:
    path_params = [
        part[1:-1] for part in route.path.replace(":", "/").split("/") if part.startswith("{")
    ]
    parameters: list[dict[str, Any]] = [
        {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
        for name in ("project", "location", *path_params)
    ]
    for name in route.query:
        kind = "integer" if name == "pageSize" else "boolean" if name == "force" else "string"
        parameters.append(
            {"name": name, "in": "query", "required": False, "schema": {"type": kind}}
        )
    operation: dict[str, Any] = {
        "parameters": parameters,
        "responses": {
            "200": {"description": "Success (every success is HTTP 200)."},
            "default": {"description": "An error in the Google error envelope."},
        },
        "x-permission": f"aiplatform.{route.permission}"
        if route.permission
        else "any permission on the bank",
    }
    if route.body is not None:
        operation["requestBody"] = {
            "required": route.body is not wire.DeleteBankBody,
            "content": {},
        }
    return operation


def _openapi_builder(app: FastAPI, *, secured: bool) -> Callable[[], dict[str, Any]]:
    def build() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, summary=app.summary, routes=app.routes
        )
        models: list[type[BaseModel]] = [wire.ErrorEnvelope]
        for route in _ROUTES:
            models.extend(model for model in (route.body, route.response) if model is not None)
        unique = list(dict.fromkeys(models))
        refs, defs = models_json_schema(
            [(model, "validation") for model in unique],
            by_alias=True,
            ref_template="#/components/schemas/{model}",
        )
        components = schema.setdefault("components", {})
        components.setdefault("schemas", {}).update(defs.get("$defs", {}))

        def ref(model: type[BaseModel]) -> dict[str, str]:
            return {"$ref": refs[(model, "validation")]["$ref"]}

        by_id = {route.operation_id: route for route in _ROUTES}
        for path_item in schema.get("paths", {}).values():
            for operation in path_item.values():
                found = by_id.get(operation.get("operationId", ""))
                if found is None:
                    continue
                route = found
                operation["responses"]["default"]["content"] = {
                    "application/json": {"schema": ref(wire.ErrorEnvelope)}
                }
                if route.response is not None:
                    operation["responses"]["200"]["content"] = {
                        "application/json": {"schema": ref(route.response)}
                    }
                if route.body is not None:
                    operation["requestBody"]["content"] = {
                        "application/json": {"schema": ref(route.body)}
                    }
        if secured:
            components["securitySchemes"] = {
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-goog-api-key"},
                "bearer": {"type": "http", "scheme": "bearer"},
            }
            schema["security"] = [{"apiKey": []}, {"bearer": []}]
        app.openapi_schema = schema
        return schema

    return build


# Serving


def serve(
    uri: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    api_keys: ApiKeys | Sequence[ApiKey] | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    log_level: str = "info",
) -> None:
    """Serves the REST API with uvicorn until interrupted.

    Args:
        uri: The store URI.
        host: The address to bind; anything but loopback needs `api_keys`.
        port: The TCP port.
        api_keys: The accepted keys; None serves everyone (loopback only).
        max_body_bytes: The largest request body accepted.
        log_level: uvicorn's and adk-memory's log level (`info` logs one line per request).

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

    app = create_app(uri, api_keys=api_keys, max_body_bytes=max_body_bytes)
    log_config = copy.deepcopy(LOGGING_CONFIG)
    log_config["loggers"]["adk_memory"] = {
        "handlers": ["default"],
        "level": log_level.upper(),
        "propagate": False,
    }
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
