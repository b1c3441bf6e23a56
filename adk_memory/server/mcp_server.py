"""`adk-memory mcp`: the memory engine as an MCP server (stdio or streamable HTTP).

Every tool works on one bank and one scope, and neither is ever a tool argument: the bank and
the scope's fixed entries come from the server's configuration (`--bank`, `--scope`), and over
HTTP with keys the caller's key adds the entries it is bound to (`auth.ApiKey.scope`, or a signed
token's claims). A prompt-injected model can pass any text as a memory id or a query and still
reaches only memories of that scope: a memory named by id passes `auth.check_in_scope`.

Tools carry MCP annotations (read-only, destructive, idempotent) so that hosts can approve reads
and warn before a change, and a failure reads in the tools' own terms (`_ToolInOwnTerms`): an
argument the schema refuses is one line naming it, and our errors render for the `mcp` surface
(`adk_memory.wording`). Over HTTP a missing, wrong or expired key is a 401 and a key that may do
nothing on the bank a 403, each with a `WWW-Authenticate` challenge pointing at the RFC 9728
protected-resource metadata (`/.well-known/oauth-protected-resource/mcp`).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.transport_security import TransportSecuritySettings
from mcp_types import ToolAnnotations
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from adk_memory import __version__, types
from adk_memory._async_client import AsyncClient
from adk_memory.bounds import MAX_DURATION
from adk_memory.embeddings import warm_up
from adk_memory.engine.convert import MAX_FACT_LENGTH, MAX_METADATA_ENTRIES, to_memory
from adk_memory.engine.paging import tokens_for
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
    GuardMiddleware,
    Principal,
    RequestGuard,
    check_in_scope,
    is_loopback,
    principal_of,
)
from adk_memory.server.wire import error_envelope
from adk_memory.wording import render

__all__ = ["McpBinding", "create_mcp_server", "mcp_endpoint", "mcp_http_app", "serve_mcp"]

MAX_BATCH = 20
"""Memories `create_memories` stores in one call (one atomic write)."""
METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"
"""The RFC 9728 metadata of the `/mcp` resource (the path-suffixed form the MCP spec uses)."""
_PERMISSIONS = (
    "memories.retrieve",
    "memories.get",
    "memories.create",
    "memories.update",
    "memories.delete",
    "memories.generate",
    "memoryRevisions.list",
    "memoryRevisions.rollback",
)
"""What the tools need; a key granted none of them on the bank is refused with 403."""
_RESOURCE_NAME = re.compile(
    r"projects/[^/\s']+/locations/[^/\s']+/reasoningEngines/[^/\s']+/memories/"
)

_MemoryId = Annotated[
    str,
    Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
        description="The memory_id a tool returned (lowercase letters, digits and '-').",
    ),
]
_Fact = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_FACT_LENGTH,
        description="One self-contained fact, in the third person, that makes sense without "
        "this conversation (e.g. 'The user is vegetarian since 2024.').",
    ),
]
_Topics = Annotated[
    list[Annotated[str, Field(min_length=1, max_length=200)]],
    Field(
        max_length=20,
        description="What the fact is about: USER_PERSONAL_INFO, USER_PREFERENCES, "
        "KEY_CONVERSATION_DETAILS, EXPLICIT_INSTRUCTIONS, or a label of your own.",
    ),
]


def _scalar(value: object) -> object:
    """A metadata value as Memory Bank stores one (a number is a double), or one clear error."""
    if isinstance(value, str | bool):
        return value
    if isinstance(value, int | float) and math.isfinite(value):
        return float(value)
    raise ValueError("must be a string, a finite number or a boolean")


_MetadataKey = Annotated[str, Field(min_length=1, max_length=200)]
_MetadataValue = Annotated[str | bool | float, BeforeValidator(_scalar)]
_Metadata = Annotated[
    dict[_MetadataKey, _MetadataValue],
    Field(
        max_length=MAX_METADATA_ENTRIES,
        description="Labels to filter on later (string, number or boolean values), e.g. "
        '{"source": "chat", "confidence": 0.9}.',
    ),
]
_TtlSeconds = Annotated[
    int,
    Field(
        ge=1,
        le=int(MAX_DURATION.total_seconds()),
        description="Forget the memory this many seconds from now (e.g. 604800 for a week); "
        "leave it out for a lasting fact.",
    ),
]
_Filter = Annotated[
    str,
    Field(
        max_length=10_000,
        description='An AIP-160 filter: fact : "tea" (contains), '
        "topics.managed_memory_topic = USER_PREFERENCES, topics.custom_memory_topic_label = "
        'work, metadata.source = "chat", create_time > "2025-01-01T00:00:00Z"; join with AND, '
        "OR, NOT and parentheses.",
    ),
]


class MetadataCondition(BaseModel):
    """One comparison of a metadata value; a memory without the key never matches."""

    model_config = ConfigDict(extra="forbid")

    key: _MetadataKey
    op: Literal["=", ">", "<"] = "="
    value: _MetadataValue
    negate: bool = Field(False, description="True: the memories the comparison does not match.")

    def as_filter(self) -> dict[str, Any]:
        """The Memory Bank metadata filter of the condition."""
        return {
            "key": self.key,
            "op": _OPERATORS[self.op],
            "value": {_KINDS[type(self.value)]: self.value},
            "negate": self.negate,
        }


_OPERATORS = {"=": "EQUAL", ">": "GREATER_THAN", "<": "LESS_THAN"}
_KINDS = {bool: "bool_value", str: "string_value", float: "double_value", int: "double_value"}
_MetadataFilters = Annotated[
    list[MetadataCondition],
    Field(
        min_length=1,
        max_length=20,
        description="Metadata comparisons, all of which must hold, e.g. "
        '[{"key": "confidence", "op": ">", "value": 0.5}].',
    ),
]


def _retrieve_config(
    filter: str | None, metadata_filters: Sequence[MetadataCondition] | None
) -> dict[str, Any]:
    groups = [{"filters": [c.as_filter() for c in metadata_filters]}] if metadata_filters else None
    return {"filter": filter, "filter_groups": groups}


_READ = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
_ADD = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
_CHANGE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
_DELETE = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)


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
    topics: list[str] = Field(default_factory=list)
    metadata: dict[str, str | bool | float] = Field(default_factory=dict)
    update_time: str | None = None
    expire_time: str | None = Field(None, description="When it will be forgotten, if ever.")
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


class NewMemory(BaseModel):
    """One memory for `create_memories`."""

    model_config = ConfigDict(extra="forbid")

    fact: _Fact
    topics: _Topics | None = None
    metadata: _Metadata | None = None
    ttl_seconds: _TtlSeconds | None = None

    def config(self) -> dict[str, Any]:
        """The create config of its topics, metadata and TTL."""
        return _config_of(self.topics, self.metadata, self.ttl_seconds)


def _config_of(
    topics: Sequence[str] | None,
    metadata: Mapping[str, str | bool | float] | None,
    ttl_seconds: int | None,
) -> dict[str, Any]:
    """The create or update config setting what is given (a managed topic by its name)."""
    config: dict[str, Any] = {}
    if topics is not None:
        config["topics"] = [
            {"managed_memory_topic": label.upper()}
            if label.upper() in types.MANAGED_TOPIC_NAMES
            else {"custom_memory_topic_label": label}
            for label in topics
        ]
    if metadata is not None:
        config["metadata"] = {key: {_KINDS[type(value)]: value} for key, value in metadata.items()}
    if ttl_seconds is not None:
        config["ttl"] = f"{ttl_seconds}s"
    return config


def _topic_label(topic: types.MemoryTopicId) -> str:
    managed = topic.managed_memory_topic
    return (
        str(getattr(managed, "value", managed))
        if managed
        else topic.custom_memory_topic_label or ""
    )


def _metadata_value(value: types.MemoryMetadataValue) -> str | bool | float:
    if value.timestamp_value is not None:
        return str(value.timestamp_value.isoformat())
    given: str | bool | float | None = next(
        (v for v in (value.bool_value, value.double_value) if v is not None), None
    )
    return value.string_value or "" if given is None else given


def _memory_out(memory: types.Memory, distance: float | None = None) -> MemoryOut:
    return MemoryOut(
        memory_id=(memory.name or "").rsplit("/", 1)[-1],
        fact=memory.fact or "",
        topics=[_topic_label(topic) for topic in memory.topics or ()],
        metadata={key: _metadata_value(v) for key, v in (memory.metadata or {}).items()},
        update_time=memory.update_time.isoformat() if memory.update_time else None,
        expire_time=memory.expire_time.isoformat() if memory.expire_time else None,
        distance=distance,
    )


_PLAIN = {
    "missing": "required",
    "string_pattern_mismatch": "not a memory_id (lowercase letters, digits and '-')",
}
"""Pydantic's wordings replaced for the model (the only pattern is the memory id's)."""


def _argument_errors(error: ValidationError) -> str:
    """A refused argument list as one line: `top_k: must be ≥ 1; query: required`."""
    problems = []
    for item in error.errors(include_url=False, include_input=False):
        where = "".join(
            f"[{part}]" if isinstance(part, int) else f".{part}" for part in item["loc"]
        ).lstrip(".")
        what = _PLAIN.get(item["type"]) or item["msg"].removeprefix("Value error, ")
        problems.append(f"{where or 'arguments'}: {what}")
    return "INVALID_ARGUMENT: " + "; ".join(problems) + "."


class _ToolInOwnTerms(Tool):
    """A tool whose failures read in MCP terms: arguments by name, never SDK calls or URLs.

    Our typed errors are answered with their status and message (the SDK hides other errors).
    """

    async def run(
        self, arguments: dict[str, Any], context: Any, convert_result: bool = False
    ) -> Any:
        try:
            return await super().run(arguments, context, convert_result)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(_argument_errors(cause)) from cause
            if isinstance(cause, AdkMemoryError):
                text = _RESOURCE_NAME.sub("", render(cause, "mcp"))
                raise ToolError(f"{cause.status}: {text}") from None
            raise


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


_Fn = TypeVar("_Fn", bound=Callable[..., Awaitable[Any]])


def _tools(client: AsyncClient, binding: McpBinding, generation: bool) -> list[Tool]:
    memories, bank = client.memory_banks.memories, binding.bank
    made: list[Tool] = []

    def tool(annotations: ToolAnnotations, title: str) -> Callable[[_Fn], _Fn]:
        def register(function: _Fn) -> _Fn:
            made.append(
                _ToolInOwnTerms.from_function(
                    function,
                    title=title,
                    annotations=annotations.model_copy(update={"title": title}),
                )
            )
            return function

        return register

    async def own_memory(ctx: Context, permission: str, memory_id: str) -> str:
        # Exactly the call's scope, as retrieval matches: the server's entries may be only part.
        scope = _call_scope(ctx, binding, permission)
        name = f"{bank}/memories/{memory_id}"
        await check_in_scope(client, name, scope.__eq__)
        return name

    @tool(_READ, "Recall memories")
    async def retrieve_memories(
        ctx: Context,
        query: Annotated[
            str, Field(min_length=1, max_length=10_000, description="What to look for, in words.")
        ],
        top_k: Annotated[int, Field(ge=1, le=100)] = 5,
        filter: _Filter | None = None,
        metadata_filters: _MetadataFilters | None = None,
        max_distance: Annotated[
            float | None,
            Field(ge=0, description="Leave out memories farther than this (0 is identical)."),
        ] = None,
    ) -> list[MemoryOut]:
        """Search the user's long-term memories by meaning; the closest come first.

        Call it before answering anything that may depend on what the user said in earlier
        conversations (preferences, facts about them, past decisions), and before storing a
        fact, to update an existing memory instead of repeating it. `filter` and
        `metadata_filters` narrow the search first (by topic, metadata or time);
        `max_distance` drops weak matches.
        """
        scope = _call_scope(ctx, binding, "memories.retrieve")
        pager = await memories.retrieve(
            name=bank,
            scope=scope,
            similarity_search_params={"search_query": query, "top_k": top_k},
            config=_retrieve_config(filter, metadata_filters),
        )
        return [
            _memory_out(hit.memory, hit.distance)
            for hit in pager.page
            if hit.memory
            and (
                max_distance is None or (hit.distance is not None and hit.distance <= max_distance)
            )
        ]

    @tool(_READ, "List memories")
    async def list_memories(
        ctx: Context,
        page_size: Annotated[int, Field(ge=1, le=100)] = 20,
        page_token: Annotated[str | None, Field(description="From the previous page.")] = None,
        filter: _Filter | None = None,
        metadata_filters: _MetadataFilters | None = None,
    ) -> dict[str, Any]:
        """List the user's memories, newest first, a page at a time (next_page_token: more).

        For "what do you remember about me?"; to find something, retrieve_memories is better.
        """
        scope = _call_scope(ctx, binding, "memories.retrieve")
        params = {"page_size": page_size, "page_token": page_token or None}
        pager = await memories.retrieve(
            name=bank,
            scope=scope,
            simple_retrieval_params=params,
            config=_retrieve_config(filter, metadata_filters),
        )
        page = [_memory_out(hit.memory).model_dump() for hit in pager.page if hit.memory]
        return {"memories": page, "next_page_token": pager.next_page_token or None}

    @tool(_READ, "Read a memory")
    async def get_memory(ctx: Context, memory_id: _MemoryId) -> MemoryOut:
        """Read one memory by the memory_id another tool returned."""
        name = await own_memory(ctx, "memories.get", memory_id)
        return _memory_out(await memories.get(name=name))

    @tool(_ADD, "Remember a fact")
    async def create_memory(
        ctx: Context,
        fact: _Fact,
        topics: _Topics | None = None,
        metadata: _Metadata | None = None,
        ttl_seconds: _TtlSeconds | None = None,
    ) -> MemoryOut:
        """Remember one fact about the user for later conversations.

        Store a fact when the user tells you something lasting about themselves (preferences,
        background, plans, decisions) or asks you to remember it; not small talk, not what you
        can look up, never secrets such as passwords or card numbers. A good memory is one
        short, self-contained sentence that still makes sense in another conversation: name
        the user instead of "I" or "he", and write dates instead of "yesterday". If
        retrieve_memories finds a memory that already says it, call update_memory instead.
        """
        scope = _call_scope(ctx, binding, "memories.create")
        config = _config_of(topics, metadata, ttl_seconds)
        operation = await memories.create(name=bank, fact=fact, scope=scope, config=config)
        assert operation.response is not None  # a done create always carries its memory
        return _memory_out(operation.response)

    @tool(_ADD, "Remember several facts")
    async def create_memories(
        ctx: Context,
        memories: Annotated[list[NewMemory], Field(min_length=1, max_length=MAX_BATCH)],
    ) -> list[MemoryOut]:
        """Remember several facts at once (each as create_memory describes): all or none.

        Use it when one message holds several separate facts, one memory per fact.
        """
        scope = _call_scope(ctx, binding, "memories.create")
        bank_id = Names.parse_bank(bank)
        records = await client.engine.memories.create_many(
            bank_id,
            scope=scope,
            memories=[(item.fact, types.MemoryConfig(**item.config())) for item in memories],
        )
        return [_memory_out(to_memory(r, bank_id, client.engine.names)) for r in records]

    @tool(_CHANGE, "Change a memory")
    async def update_memory(
        ctx: Context,
        memory_id: _MemoryId,
        fact: _Fact | None = None,
        topics: _Topics | None = None,
        metadata: _Metadata | None = None,
        ttl_seconds: _TtlSeconds | None = None,
    ) -> MemoryOut:
        """Change a memory when the user corrects or updates it (what is left out stays).

        The old text stays in its revisions (list_revisions, rollback_memory).
        """
        changes = _config_of(topics, metadata, ttl_seconds)
        if fact is None and not changes:
            raise InvalidArgument(
                "Give what changes: fact, topics, metadata or ttl_seconds.", field="fact"
            )
        name = await own_memory(ctx, "memories.update", memory_id)
        operation = await memories.update(name=name, fact=fact, config=changes)
        assert operation.response is not None
        return _memory_out(operation.response)

    @tool(_DELETE, "Forget a memory")
    async def delete_memory(ctx: Context, memory_id: _MemoryId) -> str:
        """Forget a memory, when the user asks you to or it is no longer true.

        Its revisions remain for a while, so rollback_memory can bring it back.
        """
        name = await own_memory(ctx, "memories.delete", memory_id)
        await memories.delete(name=name)
        return f"Deleted memory {memory_id}."

    @tool(_READ, "A memory's history")
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

    @tool(_CHANGE, "Restore a memory")
    async def rollback_memory(
        ctx: Context,
        memory_id: _MemoryId,
        revision_id: Annotated[
            str, Field(min_length=1, max_length=64, description="From list_revisions.")
        ],
    ) -> MemoryOut:
        """Restore a memory to one of its revisions (see list_revisions), even a deleted one."""
        name = await own_memory(ctx, "memoryRevisions.rollback", memory_id)
        await memories.rollback(name=name, target_revision_id=revision_id)
        return _memory_out(await memories.get(name=name))

    if not generation:
        return made

    @tool(_CHANGE, "Remember a conversation")
    async def remember_conversation(
        ctx: Context, messages: Annotated[list[Message], Field(min_length=1, max_length=200)]
    ) -> list[dict[str, str]]:
        """Extract what is worth remembering from a conversation and store it.

        Call it at the end of a conversation, or when several turns held facts worth keeping;
        the server's model picks the facts and merges them with what is stored. New facts are
        created, and existing memories they change are updated or deleted; the answer lists
        each memory with its action (CREATED, UPDATED, DELETED).
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

    return made


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
    search = config.similarity_search_config if config else None
    if not client.remote:  # over http(s) the server embeds: no model is loaded here
        # Loads in the background while the server starts; the first retrieve waits if need be.
        warm_up(
            (search.embedding_model if search else None)
            or client.engine.context.default_embedding_model
        )
    model = config.generation_config.model if config and config.generation_config else None
    # Over http(s) the server's own model (`adk-memory serve --model`) is unknown here.
    local_model = None if client.remote else client.engine.context.generation_model
    generation = local_model is not None or bool(model)
    return MCPServer(
        name="adk-memory",
        version=__version__,
        instructions=_INSTRUCTIONS,
        tools=_tools(client, binding, generation),
    )


_INSTRUCTIONS = (
    "Long-term memory about the user you are talking to; every tool sees only this user's "
    "memories. Before answering anything that may depend on earlier conversations, call "
    "retrieve_memories with what the question is about. When the user tells you something "
    "lasting about themselves (a preference, a fact, a plan, a decision) or asks you to "
    "remember it, store it with create_memory: one short, self-contained fact per memory, "
    "naming the user rather than 'I', with dates instead of 'yesterday', and never secrets. "
    "If a memory already says it, update_memory instead; when the user asks you to forget "
    "something, delete_memory."
)


def mcp_http_app(
    server: MCPServer,
    keys: ApiKeys | None,
    *,
    allowed_hosts: Sequence[str] | None = None,
    bank: str | None = None,
) -> ASGIApp:
    """The streamable HTTP app (`/mcp`) behind the REST server's guard and the key check.

    Every request passes `auth.GuardMiddleware` first, as on the REST server: the `Host` must be
    one served (`allowed_hosts`; None: loopback names only without keys, whatever address is
    bound) and, without keys, the `Origin` this server's own. It replaces the MCP SDK's own
    check, which knows only 127.0.0.1, localhost and ::1 and would refuse `allowed_hosts`. Then
    a request without a valid key is 401 and, when `bank` is given, one whose key may use no
    tool on it is 403; both carry a `WWW-Authenticate: Bearer` challenge whose
    `resource_metadata` points at `METADATA_PATH` (RFC 9728), which is served without a key.
    Stateless: every request is authenticated on its own, so a session id is never a credential.

    Raises:
        FailedPrecondition: `*` in `allowed_hosts` without keys.
        InvalidArgument: A malformed host name.
    """
    policy = RequestGuard.of(allowed_hosts, (), keyless=keys is None)
    return GuardMiddleware(_keyed_app(server, keys, bank), policy=policy)


def _keyed_app(server: MCPServer, keys: ApiKeys | None, bank: str | None) -> ASGIApp:
    """The streamable HTTP app (`/mcp`, stateless) behind the key check, with its metadata.

    The 401 / 403 refusals and the RFC 9728 metadata route of `mcp_http_app`; the caller puts
    the request guard in front (`mcp_http_app` its own, `adk-memory serve` the REST app's).
    """

    async def authenticated(request: Request, call_next: RequestResponseEndpoint) -> Response:
        if request.url.path == METADATA_PATH:
            return await call_next(request)
        try:
            principal = await principal_of(request, keys)
            if bank is not None:
                _require_any_tool(principal, Names.parse_bank(bank))
        except (Unauthenticated, PermissionDenied) as exc:
            return _refusal(request, exc)
        request.state.principal = principal
        with tokens_for(principal.audience):  # the tools' page tokens are the caller's own
            return await call_next(request)

    app = server.streamable_http_app(
        stateless_http=True,
        json_response=True,
        # The guard in front checks Host and Origin, with the operator's --allowed-host names.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    app.router.routes.append(Route(METADATA_PATH, _resource_metadata, methods=["GET"]))
    app.add_middleware(BaseHTTPMiddleware, dispatch=authenticated)
    return app


def _require_any_tool(principal: Principal, bank_id: str) -> None:
    """Raises the first refusal when the key has none of the tools' permissions on the bank."""
    refusals: list[PermissionDenied] = []
    for permission in _PERMISSIONS:
        try:
            principal.require(permission, bank_id)
        except PermissionDenied as exc:
            refusals.append(exc)
        else:
            return
    raise refusals[0]


def _refusal(request: Request, error: Unauthenticated | PermissionDenied) -> Response:
    """A 401 or 403 in the MCP client's terms, with the RFC 6750 / RFC 9728 challenge."""
    metadata = str(request.base_url).rstrip("/") + METADATA_PATH
    if isinstance(error, PermissionDenied):
        problem = ' error="insufficient_scope",'
    elif error.field == "credentials":  # a key or token was sent, and is wrong or expired
        problem = ' error="invalid_token",'
    else:
        problem = ""
    challenge = f'Bearer realm="adk-memory",{problem} resource_metadata="{metadata}"'
    return JSONResponse(
        error_envelope(error, "mcp"),
        status_code=error.code,
        headers={"www-authenticate": challenge},
    )


async def _resource_metadata(request: Request) -> Response:
    """RFC 9728 protected-resource metadata of `/mcp`.

    No `authorization_servers`: keys and tokens come from the operator's key file, not from an
    OAuth authorization server, so a client is configured with its header instead.
    """
    base = str(request.base_url).rstrip("/")
    return JSONResponse(
        {
            "resource": f"{base}/mcp",
            "resource_name": "adk-memory",
            "bearer_methods_supported": ["header"],
            "scopes_supported": list(_PERMISSIONS),
        }
    )


@contextlib.asynccontextmanager
async def mcp_endpoint(
    client: AsyncClient, binding: McpBinding, *, keys: ApiKeys | None
) -> AsyncIterator[ASGIApp]:
    """The MCP endpoint `adk-memory serve --mcp-bank` serves at `/mcp`, while the block runs.

    Streamable HTTP, stateless, with the keys, refusals (401 / 403 with their RFC 9728
    challenge) and metadata of `mcp_http_app`; the REST app's `GuardMiddleware`, which wraps
    every route of `adk-memory serve`, checks Host and Origin first. A caller's key is checked
    for each tool's permission, and a key bound to a scope adds its entries, as on
    `adk-memory mcp --transport http`. The bank is created if missing.
    """
    await _ensure_bank(client, binding)
    server = await create_mcp_server(client, binding)
    app = _keyed_app(server, keys, binding.bank)
    async with server.session_manager.run():
        yield app


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
    allowed_hosts: Sequence[str] | None = None,
) -> None:
    """Serves the MCP server on stdio, or on `http://host:port/mcp`, until stopped.

    `allowed_hosts` are the `Host` names the HTTP transport answers (see `mcp_http_app`).

    The bank is created first if it does not exist.

    Raises:
        InvalidArgument: A malformed host name.
        FailedPrecondition: HTTP on a non-loopback address, or for every Host name (`*`),
            without keys.
    """
    if binding.api_keys is None and transport == "http" and not is_loopback(host):
        raise FailedPrecondition(
            f"Refusing to serve MCP on {host!r} without API keys: anyone who can reach it could "
            "read and change the memories. Pass --keys FILE, or bind --host 127.0.0.1.",
            field="host",
        )
    if transport == "http":  # a refused --allowed-host, before the store is touched
        RequestGuard.of(allowed_hosts, (), keyless=binding.api_keys is None)
    await _ensure_bank(client, binding)
    server = await create_mcp_server(client, binding)
    if transport == "stdio":
        await server.run_stdio_async()
        return
    import uvicorn

    app = mcp_http_app(server, binding.api_keys, allowed_hosts=allowed_hosts, bank=binding.bank)
    config = uvicorn.Config(app, host=host, port=port, access_log=False, server_header=False)
    await uvicorn.Server(config).serve()
