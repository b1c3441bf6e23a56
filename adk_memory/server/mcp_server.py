"""`adk-memory mcp`: the memory engine as an MCP server (stdio or streamable HTTP).

Every tool works on one bank and one scope, and neither is ever a tool argument: the bank and
the scope's fixed entries come from the server's configuration (`--bank`, `--scope`), and over
HTTP with keys the caller's key adds the entries it is bound to (`auth.ApiKey.scope`, or a signed
token's claims). A prompt-injected model can pass any text as a memory id or a query and still
reaches only memories of that scope: a memory named by id passes `auth.load_in_scope`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, Field
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from adk_memory import types
from adk_memory._async_client import AsyncClient
from adk_memory.errors import (
    AdkMemoryError,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    Unauthenticated,
)
from adk_memory.names import Names
from adk_memory.scope import validate_scope
from adk_memory.server.auth import (
    ApiKeys,
    Principal,
    RequestGuard,
    is_loopback,
    load_in_scope,
    principal_of,
)
from adk_memory.server.wire import error_response

__all__ = ["McpBinding", "create_mcp_server", "mcp_endpoint", "mcp_http_app", "serve_mcp"]

_MemoryId = Annotated[
    str,
    Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
        description="The memory_id a tool returned (lowercase letters, digits and '-').",
    ),
]


@dataclass(frozen=True)
class McpBinding:
    """The bank and scope every tool call is confined to, fixed when the server starts."""

    bank: str
    """`reasoningEngines/{id}`."""
    scope: Mapping[str, str]
    """Scope entries set by the server's configuration (may be empty when keys add them)."""
    api_keys: ApiKeys | None = None
    """Over HTTP: the accepted keys; a caller's bound scope entries join `scope`."""

    def __post_init__(self) -> None:
        if not self.scope and self.api_keys is None:
            raise InvalidArgument(
                "Whose memories? Give --scope KEY=VALUE (e.g. --scope user_id=me; on adk-memory "
                "serve, --mcp-scope), or serve HTTP with --keys whose keys are bound to a scope.",
                field="scope",
            )


class MemoryOut(BaseModel):
    """A memory as a tool returns it."""

    memory_id: str
    fact: str
    update_time: str | None = None
    distance: float | None = Field(None, description="Retrieval only: smaller is closer.")


class RevisionOut(BaseModel):
    """A revision of a memory."""

    revision_id: str
    fact: str | None
    create_time: str | None


class Message(BaseModel):
    """One turn of a conversation to remember."""

    role: Literal["user", "model"]
    text: str = Field(min_length=1)


def _memory_out(memory: types.Memory, distance: float | None = None) -> MemoryOut:
    return MemoryOut(
        memory_id=(memory.name or "").rsplit("/", 1)[-1],
        fact=memory.fact or "",
        update_time=memory.update_time.isoformat() if memory.update_time else None,
        distance=distance,
    )


def _call_scope(ctx: Context, binding: McpBinding, permission: str) -> dict[str, str]:
    """The exact scope of this call, once the caller's key is checked for `permission`.

    Raises:
        PermissionDenied: The key's scope entries contradict the server's, no scope at all, or
            the key lacks the permission on the bank.
    """
    request = ctx.request_context.request
    principal = getattr(getattr(request, "state", None), "principal", None) or Principal(None)
    scope = dict(binding.scope)
    for entry, value in (principal.scope or {}).items():
        if scope.setdefault(entry, value) != value:
            raise PermissionDenied(
                f"The API key {principal.label!r} is bound to {entry}={value!r}, which this "
                f"server's --scope sets otherwise.",
                field="scope",
            )
    if not scope:
        raise PermissionDenied(
            "This MCP server has no scope for the caller: start it with --scope KEY=VALUE, "
            "or call it with a key bound to a scope.",
            field="scope",
        )
    checked = validate_scope(scope)
    principal.require(permission, Names.parse_bank(binding.bank))
    return checked


_Tool = TypeVar("_Tool", bound=Callable[..., Awaitable[Any]])


def _register(
    server: MCPServer, client: AsyncClient, binding: McpBinding, generation: bool
) -> None:
    memories, bank = client.memory_banks.memories, binding.bank

    def tool(function: _Tool) -> _Tool:
        # Our typed errors are answered with their message (the SDK hides other errors).

        @functools.wraps(function)
        async def telling(*args: Any, **kwargs: Any) -> Any:
            try:
                return await function(*args, **kwargs)
            except AdkMemoryError as exc:
                raise ToolError(f"{exc.status}: {exc}") from None

        server.tool()(telling)
        return function

    async def own_memory(ctx: Context, permission: str, memory_id: str) -> str:
        # Exactly the call's scope, as retrieval matches: the server's entries may be only part.
        scope = _call_scope(ctx, binding, permission)
        name = f"{bank}/memories/{memory_id}"
        await load_in_scope(client, name, scope.__eq__)
        return name

    @tool
    async def retrieve_memories(
        ctx: Context,
        query: Annotated[str, Field(min_length=1, description="What to look for, in words.")],
        top_k: Annotated[int, Field(ge=1, le=100)] = 5,
    ) -> list[MemoryOut]:
        """Search the user's long-term memories by meaning and return the closest ones.

        Call it before answering anything that may depend on what the user said in earlier
        conversations (preferences, facts about them, past decisions).
        """
        scope = _call_scope(ctx, binding, "memories.retrieve")
        pager = await memories.retrieve(
            name=bank,
            scope=scope,
            similarity_search_params={"search_query": query, "top_k": top_k},
        )
        return [_memory_out(hit.memory, hit.distance) for hit in pager.page if hit.memory]

    @tool
    async def list_memories(
        ctx: Context,
        page_size: Annotated[int, Field(ge=1, le=100)] = 20,
        page_token: Annotated[str | None, Field(description="From the previous page.")] = None,
    ) -> dict[str, Any]:
        """List the user's memories, newest first, a page at a time (next_page_token: more)."""
        scope = _call_scope(ctx, binding, "memories.retrieve")
        params = {"page_size": page_size, "page_token": page_token or None}
        pager = await memories.retrieve(name=bank, scope=scope, simple_retrieval_params=params)
        page = [_memory_out(hit.memory).model_dump() for hit in pager.page if hit.memory]
        return {"memories": page, "next_page_token": pager.next_page_token or None}

    @tool
    async def get_memory(ctx: Context, memory_id: _MemoryId) -> MemoryOut:
        """Read one memory by the memory_id another tool returned."""
        name = await own_memory(ctx, "memories.get", memory_id)
        return _memory_out(await memories.get(name=name))

    @tool
    async def create_memory(
        ctx: Context,
        fact: Annotated[
            str, Field(min_length=1, description="One self-contained fact about the user.")
        ],
    ) -> MemoryOut:
        """Remember a fact about the user for later conversations (one fact per call)."""
        scope = _call_scope(ctx, binding, "memories.create")
        operation = await memories.create(name=bank, fact=fact, scope=scope)
        assert operation.response is not None  # a done create always carries its memory
        return _memory_out(operation.response)

    @tool
    async def update_memory(
        ctx: Context, memory_id: _MemoryId, fact: Annotated[str, Field(min_length=1)]
    ) -> MemoryOut:
        """Replace the fact of a memory (the old text stays in its revisions)."""
        name = await own_memory(ctx, "memories.update", memory_id)
        operation = await memories.update(name=name, fact=fact)
        assert operation.response is not None
        return _memory_out(operation.response)

    @tool
    async def delete_memory(ctx: Context, memory_id: _MemoryId) -> str:
        """Forget a memory (for instance when the user asks to); its revisions remain."""
        name = await own_memory(ctx, "memories.delete", memory_id)
        await memories.delete(name=name)
        return f"Deleted memory {memory_id}."

    @tool
    async def list_revisions(ctx: Context, memory_id: _MemoryId) -> list[RevisionOut]:
        """The earlier versions of a memory, newest first (for rollback_memory)."""
        name = await own_memory(ctx, "memoryRevisions.list", memory_id)
        pager = await memories.revisions.list(name=name, config={"page_size": 100})
        return [
            RevisionOut(
                revision_id=(revision.name or "").rsplit("/", 1)[-1],
                fact=revision.fact,
                create_time=revision.create_time.isoformat() if revision.create_time else None,
            )
            for revision in pager.page
        ]

    @tool
    async def rollback_memory(ctx: Context, memory_id: _MemoryId, revision_id: str) -> MemoryOut:
        """Restore a memory to one of its revisions (see list_revisions)."""
        name = await own_memory(ctx, "memoryRevisions.rollback", memory_id)
        await memories.rollback(name=name, target_revision_id=revision_id)
        return _memory_out(await memories.get(name=name))

    if not generation:
        return

    @tool
    async def remember_conversation(
        ctx: Context, messages: Annotated[list[Message], Field(min_length=1, max_length=200)]
    ) -> list[dict[str, str]]:
        """Extract what is worth remembering from a conversation and store it.

        New facts are created, and existing memories they change are updated or deleted; the
        answer lists each memory with its action (CREATED, UPDATED, DELETED).
        """
        scope = _call_scope(ctx, binding, "memories.generate")
        events = [{"content": {"role": m.role, "parts": [{"text": m.text}]}} for m in messages]
        operation = await memories.generate(
            name=bank, direct_contents_source={"events": events}, scope=scope
        )
        generated = operation.response.generated_memories if operation.response else None
        return [
            {
                "memory_id": (g.memory.name or "").rsplit("/", 1)[-1] if g.memory else "",
                "action": str(g.action.value if g.action else ""),
            }
            for g in generated or []
        ]


async def create_mcp_server(client: AsyncClient, binding: McpBinding) -> MCPServer:
    """An MCP server whose tools work on `binding`'s bank and scope.

    The generation tool (`remember_conversation`) is offered when the client has a generation
    model or the bank's config names one.

    Raises:
        NotFound: The bank does not exist.
        InvalidArgument: The configured scope is not a valid scope (checked per call when keys
            add entries).
    """
    if binding.scope:
        validate_scope(dict(binding.scope), field="scope")
    bank = await client.memory_banks.get(name=binding.bank)
    config = bank.managed_semantic_memory_config
    model = config.generation_config.model if config and config.generation_config else None
    # Over http(s) the server's own model (`adk-memory serve --model`) is unknown here.
    local_model = None if client.remote else client.engine.context.generation_model
    generation = local_model is not None or bool(model)
    server: MCPServer = MCPServer(
        name="adk-memory",
        instructions=(
            "Long-term memory about the user you are talking to. Before answering, call "
            "retrieve_memories with what the question is about; when the user tells you "
            "something worth keeping, call create_memory (or remember_conversation). Every tool "
            "sees only this user's memories."
        ),
    )
    _register(server, client, binding, generation)
    return server


def mcp_http_app(server: MCPServer, keys: ApiKeys | None, *, host: str = "127.0.0.1") -> ASGIApp:
    """The streamable HTTP app (`/mcp`) behind the key check (401 without a valid key).

    Stateless: every request is authenticated on its own, so a session id is never a credential.
    """

    async def authenticated(request: Request, call_next: RequestResponseEndpoint) -> Response:
        try:
            request.state.principal = await principal_of(request, keys)
        except Unauthenticated as exc:
            return error_response(exc)
        return await call_next(request)

    app = server.streamable_http_app(stateless_http=True, json_response=True, host=host)
    app.add_middleware(BaseHTTPMiddleware, dispatch=authenticated)
    return app


@contextlib.asynccontextmanager
async def mcp_endpoint(
    client: AsyncClient, binding: McpBinding, *, keys: ApiKeys | None, guard: RequestGuard
) -> AsyncIterator[ASGIApp]:
    """The MCP endpoint `adk-memory serve --mcp-bank` serves at `/mcp`, while the block runs.

    Streamable HTTP, stateless, behind the REST server's own request guard (Host and Origin)
    and keys: a caller's key is checked for each tool's permission, and a key bound to a scope
    adds its entries, as on `adk-memory mcp --transport http`. The bank is created if missing.
    """
    await _ensure_bank(client, binding)
    server = await create_mcp_server(client, binding)
    # The REST server's guard checks Host and Origin, with its own --allowed-host names.
    security = TransportSecuritySettings(enable_dns_rebinding_protection=False)
    app = server.streamable_http_app(
        stateless_http=True, json_response=True, transport_security=security
    )

    async def endpoint(scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        try:
            guard.check(request.headers.get("host"), request.headers.get("origin"))
            principal = await principal_of(request, keys)
        except AdkMemoryError as exc:
            await error_response(exc)(scope, receive, send)
            return
        scope.setdefault("state", {})["principal"] = principal
        await app(scope, receive, send)

    async with server.session_manager.run():
        yield endpoint


async def _ensure_bank(client: AsyncClient, binding: McpBinding) -> None:
    try:
        await client.memory_banks.get(name=binding.bank)
    except NotFound:
        await client.memory_banks.create(memory_bank_id=Names.parse_bank(binding.bank))


async def serve_mcp(
    client: AsyncClient,
    binding: McpBinding,
    *,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
) -> None:
    """Serves the MCP server on stdio, or on `http://host:port/mcp`, until stopped.

    The bank is created first if it does not exist.

    Raises:
        FailedPrecondition: HTTP on a non-loopback address without keys.
    """
    if binding.api_keys is None and transport == "http" and not is_loopback(host):
        raise FailedPrecondition(
            f"Refusing to serve MCP on {host!r} without API keys: anyone who can reach it could "
            "read and change the memories. Pass --keys FILE, or bind --host 127.0.0.1.",
            field="host",
        )
    await _ensure_bank(client, binding)
    server = await create_mcp_server(client, binding)
    if transport == "stdio":
        await server.run_stdio_async()
        return
    import uvicorn

    app = mcp_http_app(server, binding.api_keys, host=host)
    config = uvicorn.Config(app, host=host, port=port, access_log=False, server_header=False)
    await uvicorn.Server(config).serve()
