"""The REST wire format: request bodies and query strings in, camelCase JSON and errors out.

FastAPI validates each request into these models (and documents them in `/openapi.json`). Bodies
are proto3 JSON as the official SDK sends them (reference §1.2): top-level keys in
camelCase, nested keys in snake_case, and, from older SDKs, camelCase at every level. Each body
model here accepts both spellings at every level (the SDK's own nested types do, and these
models use the same alias generator) and forbids unknown fields, so a typo is a 400 that names
the field instead of a silent no-op. The body of each method is the SDK's config model for that
method without its client-only fields (`http_options`, `wait_for_completion`) plus the method's
own fields, so the server accepts exactly what the SDK can send. Query parameters are models
too, in both casings. Nothing here calls the engine.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    create_model,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel, to_snake
from starlette.responses import JSONResponse

from adk_memory import types
from adk_memory.errors import AdkMemoryError, InvalidArgument, Unimplemented
from adk_memory.wording import Surface, render

__all__ = [
    "Body",
    "CreateMemoryBody",
    "CreateMemoryQuery",
    "DeleteBankBody",
    "DeleteBankQuery",
    "ErrorEnvelope",
    "FlushStreamBody",
    "GenerateMemoriesBody",
    "IngestEventsBody",
    "ListStreamsBody",
    "PageQuery",
    "PayloadTooLarge",
    "PurgeMemoriesBody",
    "ReasoningEngineBody",
    "ReasoningEngineOperation",
    "RetrieveMemoriesBody",
    "RetrieveProfilesBody",
    "RollbackMemoryBody",
    "UnsupportedMediaType",
    "UpdateBankQuery",
    "UpdateMemoryBody",
    "UpdateMemoryQuery",
    "error_envelope",
    "error_response",
    "invalid_request",
    "mask_bank_update",
    "reasoning_engine_json",
    "to_json",
]

_CLIENT_ONLY = frozenset({"http_options", "wait_for_completion"})
"""Config fields the SDK keeps on the client and never sends (reference §1.2)."""


class PayloadTooLarge(InvalidArgument):
    """The request body is larger than the server accepts."""

    code = 413


class UnsupportedMediaType(InvalidArgument):
    """The request body is not JSON (a form, text/plain, …)."""

    code = 415


class _Wire(BaseModel):
    """Both casings in at every level, unknown fields refused, only storable text."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    @model_validator(mode="wrap")
    @classmethod
    def _only_text(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        try:  # JSON may escape a lone surrogate ("\ud800"), which is not text anything can store
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                "a string is not valid Unicode (a lone surrogate such as \\ud800); send UTF-8 text"
            ) from None
        except RecursionError:
            raise ValueError("the body is nested too deeply") from None
        except (TypeError, ValueError):
            pass  # not JSON data (a model instance): nothing came off the wire
        try:
            return handler(data)
        except (AttributeError, TypeError):
            # google-genai's enums look a non-string value up with `.upper()`; the AttributeError
            # this raises is not turned into a ValidationError.
            raise ValueError(
                "a value has the wrong type: an enum field takes one of its names as a string, "
                "and lists and objects go only where the API reference shows them"
            ) from None


class Body(_Wire):
    """The body of a method that takes the SDK's config model for it."""

    own_fields: ClassVar[tuple[str, ...]] = ()
    """The method's own arguments; every other field belongs to its config."""


def _body(
    name: str,
    doc: str,
    config: type[BaseModel],
    *,
    drop: frozenset[str] = frozenset(),
    **fields: Any,
) -> type[Body]:
    """A body model: the method's own `fields` plus `config`'s fields the SDK sends in the body."""
    inherited: dict[str, Any] = {
        field_name: (info.annotation, copy.deepcopy(info))
        for field_name, info in config.model_fields.items()
        if field_name not in _CLIENT_ONLY | drop
    }
    model: type[Body] = create_model(name, __base__=Body, __doc__=doc, **inherited, **fields)
    model.own_fields = tuple(fields)
    return model


Scope = dict[str, str]

if TYPE_CHECKING:  # mypy cannot see fields made at runtime: it checks these as their base
    CreateMemoryBody = Body
    UpdateMemoryBody = Body
    GenerateMemoriesBody = Body
    RetrieveMemoriesBody = Body
    RetrieveProfilesBody = Body
    RollbackMemoryBody = Body
    PurgeMemoriesBody = Body
    IngestEventsBody = Body
else:
    CreateMemoryBody = _body(
        "CreateMemoryBody",
        "POST {bank}/memories: the Memory to create (`memoryId` travels in the query).",
        types.MemoryConfig,
        drop=frozenset({"memory_id"}),
        fact=(str, Field(description="Required. The fact.")),
        scope=(Scope, Field(description="Required. Immutable. 1-5 string pairs.")),
    )
    UpdateMemoryBody = _body(
        "UpdateMemoryBody",
        "PATCH {memory}: the fields to change (`updateMask` and `memoryId` travel in the query).",
        types.UpdateMemoryConfig,
        drop=frozenset({"memory_id", "update_mask"}),
        fact=(str | None, None),
        scope=(Scope | None, Field(None, description="Immutable: must equal the memory's scope.")),
    )
    GenerateMemoriesBody = _body(
        "GenerateMemoriesBody",
        "POST {bank}/memories:generate: exactly one source, the scope and generation options.",
        types.GenerateMemoriesConfig,
        vertex_session_source=(types.GenerateMemoriesRequestVertexSessionSource | None, None),
        direct_contents_source=(types.GenerateMemoriesRequestDirectContentsSource | None, None),
        direct_memories_source=(types.GenerateMemoriesRequestDirectMemoriesSource | None, None),
        scope=(Scope | None, None),
    )
    RetrieveMemoriesBody = _body(
        "RetrieveMemoriesBody",
        "POST {bank}/memories:retrieve: the memories of exactly `scope`.",
        types.RetrieveMemoriesConfig,
        scope=(Scope, Field(description="Required. Only memories with exactly this scope match.")),
        similarity_search_params=(types.RetrieveMemoriesRequestSimilaritySearchParams | None, None),
        simple_retrieval_params=(types.RetrieveMemoriesRequestSimpleRetrievalParams | None, None),
    )
    RetrieveProfilesBody = _body(
        "RetrieveProfilesBody",
        "POST {bank}/memories:retrieveProfiles: the structured profiles of exactly `scope`.",
        types.RetrieveMemoryProfilesConfig,
        scope=(Scope, Field(description="Required.")),
    )
    RollbackMemoryBody = _body(
        "RollbackMemoryBody",
        "POST {memory}:rollback: the revision id (last segment of its name) to restore.",
        types.RollbackMemoryConfig,
        target_revision_id=(str, Field(description="Required. A revision id, not its full name.")),
    )
    PurgeMemoriesBody = _body(
        "PurgeMemoriesBody",
        "POST {bank}/memories:purge: `filter` and/or `filterGroups`; `force` deletes, else counts.",
        types.PurgeMemoriesConfig,
        filter=(str | None, None),
        filter_groups=(list[types.MemoryConjunctionFilter] | None, None),
        force=(bool | None, None),
    )
    IngestEventsBody = _body(
        "IngestEventsBody",
        "POST {bank}/memories:ingestEvents: events for a stream; generation when it triggers.",
        types.IngestEventsConfig,
        scope=(Scope, Field(description="Required.")),
        stream_id=(str | None, Field(None, description='The stream; "" is the default stream.')),
        direct_contents_source=(types.IngestionDirectContentsSource | None, None),
        generation_trigger_config=(types.MemoryGenerationTriggerConfig | None, None),
    )


class ListStreamsBody(_Wire):
    """POST {bank}/memories:listStreams (adk-memory's own): streams holding unflushed events."""

    scope: Scope | None = Field(None, description="Only this scope's streams.")


class FlushStreamBody(_Wire):
    """POST {bank}/memories:flushStream (adk-memory's own): generate from one stream now."""

    key: str = Field(pattern=r"^[0-9a-f]{40}$", description="The stream's key, as listed.")


class DeleteBankBody(_Wire):
    """DELETE {bank}: `force` (also accepted as a query parameter) deletes its memories too."""

    force: bool | None = None


class ContextSpecBody(_Wire):
    """`contextSpec` of a ReasoningEngine; a Memory Bank has only `memoryBankConfig`."""

    memory_bank_config: types.ReasoningEngineContextSpecMemoryBankConfig | None = None


_UNSUPPORTED_ENGINE_FIELDS = {
    "spec": "agent deployment (spec)",
    "encryption_spec": "customer-managed encryption keys (encryptionSpec)",
    "labels": "resource labels (labels)",
    "traffic_config": "agent traffic splitting (trafficConfig)",
    "revision_garbage_collection_strategy": "agent revisions (revisionGarbageCollectionStrategy)",
}


class ReasoningEngineBody(_Wire):
    """POST reasoningEngines / PATCH {bank}: a ReasoningEngine that is a Memory Bank."""

    context_spec: ContextSpecBody | None = None
    display_name: str | None = None
    description: str | None = None
    spec: dict[str, Any] | None = None
    encryption_spec: dict[str, Any] | None = None
    labels: dict[str, str] | None = None
    traffic_config: dict[str, Any] | None = None
    revision_garbage_collection_strategy: Any = None
    memory_bank_id: str | None = None
    """adk-memory's own (create only): the new bank's id, not a generated one."""
    adk_memory_extensions: dict[str, Any] | None = None
    """adk-memory's own: the bank's extensions (e.g. hybrid retrieval), replaced when given."""
    # Output-only fields, ignored on input as Google APIs ignore them.
    name: str | None = None
    etag: str | None = None
    create_time: str | None = None
    update_time: str | None = None

    def refuse_unsupported(self) -> None:
        """Raises Unimplemented for agent-deployment fields this server does not host."""
        for field_name, what in _UNSUPPORTED_ENGINE_FIELDS.items():
            if getattr(self, field_name) is not None:
                raise Unimplemented(
                    f"adk-memory hosts Memory Bank only; {what} is not supported. Run your agent "
                    "yourself and point its memory service at this server.",
                    field=to_camel(field_name),
                )

    @property
    def bank_config(self) -> types.ReasoningEngineContextSpecMemoryBankConfig | None:
        """`contextSpec.memoryBankConfig`, if given."""
        return self.context_spec.memory_bank_config if self.context_spec is not None else None


# Responses that exist only on the wire (documented in the OpenAPI description).


class ReasoningEngineOperation(_Wire):
    """The operation of a bank create or update; `response` is the ReasoningEngine."""

    name: str
    done: bool
    metadata: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    response: types.ReasoningEngine | None = None


class _Status(_Wire):
    code: int
    message: str
    status: str
    details: list[dict[str, Any]] | None = None


class ErrorEnvelope(_Wire):
    """Every error: `{"error": {"code": 400, "message": "...", "status": "INVALID_ARGUMENT"}}`."""

    error: _Status


# Query parameters


class _Query(BaseModel):
    """Query parameters in camelCase or snake_case; an empty value is no value."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == "" else value


class PageQuery(_Query):
    """`pageSize`, `pageToken`, `filter` and `orderBy` of a list."""

    page_size: int | None = None
    page_token: str | None = None
    filter: str | None = None
    order_by: str | None = None


class CreateMemoryQuery(_Query):
    """`memoryId`: the id to give the new memory (a letter first)."""

    memory_id: str | None = None


class UpdateBankQuery(_Query):
    """`updateMask`: the fields to change, comma-separated."""

    update_mask: str | None = None


class UpdateMemoryQuery(UpdateBankQuery):
    """`updateMask` and `memoryId`."""

    memory_id: str | None = None


class DeleteBankQuery(_Query):
    """`force`: delete the bank's memories too."""

    force: bool | None = None


def invalid_request(errors: Sequence[Any]) -> InvalidArgument:
    """The InvalidArgument for FastAPI's validation errors, naming the first bad field."""
    if not errors:
        return InvalidArgument("The request is malformed.", field="body")
    first = errors[0]
    loc = [str(part) for part in first.get("loc", ())]
    where = ".".join(loc[1:] if loc and loc[0] in ("body", "query", "path") else loc) or "body"
    kind, message = first.get("type"), first.get("msg", "invalid")
    if kind == "json_invalid":
        error = first.get("ctx", {}).get("error", "")
        return InvalidArgument(f"The request body is not valid JSON: {error}.", field="body")
    if kind == "extra_forbidden":
        message = "unknown field; check its spelling against the API reference"
    elif kind == "missing":
        message = "this field is required" if loc[1:] else "the request needs a JSON body"
    elif kind == "model_attributes_type":
        message = "expected a JSON object"
    message = message.removeprefix("Value error, ")
    more = len(errors) - 1
    plural = "s" if more > 1 else ""
    suffix = f" ({more} more problem{plural} after fixing this one)" if more else ""
    return InvalidArgument(f"Invalid value at '{where}': {message}.{suffix}", field=where)


_CONFIG = "context_spec.memory_bank_config"
_MASKABLE = frozenset(
    {"display_name", "description"}
    | {
        f"{_CONFIG}.{name}"
        for name in types.ReasoningEngineContextSpecMemoryBankConfig.model_fields
    }
)


def mask_bank_update(body: ReasoningEngineBody, update_mask: str | None) -> ReasoningEngineBody:
    """The body reduced to the fields `update_mask` names (all given fields without a mask).

    The engine merges the non-empty fields it is given, so a masked field the body does not set
    would be a silent no-op; that is refused instead of pretending to clear it.
    """
    if update_mask is None or not update_mask.strip():
        return body
    config = body.bank_config.model_dump(exclude_none=True) if body.bank_config else {}
    given = {"display_name": body.display_name, "description": body.description}
    given |= {f"{_CONFIG}.{name}": value for name, value in config.items()}
    kept: dict[str, Any] = {}
    for raw in update_mask.split(","):
        path = ".".join(to_snake(part.strip()) for part in raw.split("."))
        if path in ("context_spec", _CONFIG):
            kept |= {name: value for name, value in given.items() if name.startswith(_CONFIG)}
        elif path not in _MASKABLE:
            raise InvalidArgument(
                f"updateMask names {raw.strip()[:60]!r}, which cannot be updated; use "
                "displayName, description, contextSpec.memoryBankConfig or "
                "contextSpec.memoryBankConfig.<field>.",
                field="updateMask",
            )
        elif given.get(path) is None:
            raise InvalidArgument(
                f"updateMask names {path!r} but the body does not set it; clearing a field is "
                "not supported. Send the new value, or leave the field out of the mask.",
                field="updateMask",
            )
        else:
            kept[path] = given[path]
    masked = {name.removeprefix(f"{_CONFIG}."): v for name, v in kept.items() if "." in name}
    return ReasoningEngineBody(
        display_name=kept.get("display_name"),
        description=kept.get("description"),
        context_spec=ContextSpecBody(
            memory_bank_config=types.ReasoningEngineContextSpecMemoryBankConfig.model_validate(
                masked
            )
        ),
    )


# Output


def to_json(model: BaseModel) -> dict[str, Any]:
    """Proto3-style JSON of an SDK model: camelCase keys, RFC 3339 times, no nulls."""
    payload: dict[str, Any] = model.model_dump(mode="json", by_alias=True, exclude_none=True)
    return payload


def reasoning_engine_json(bank: types.MemoryBank) -> dict[str, Any]:
    """The ReasoningEngine JSON of a bank, as the REST API returns banks.

    `contextSpec.memoryBankConfig` is always present (the SDK crashes on a `contextSpec`
    without it, reference §2.15), the customization list is `customizationConfigs`, and a
    schema config's schema is `schema`, the name the SDK reads (its model calls it
    `memory_schema`, whose alias `memorySchema` the SDK's converter would drop).
    """
    managed = bank.managed_semantic_memory_config
    data = managed.model_dump(exclude_none=True) if managed is not None else {}
    if "unstructured_memory_configs" in data:
        data["customization_configs"] = data.pop("unstructured_memory_configs")
    engine = types.ReasoningEngine(
        name=bank.name,
        display_name=bank.display_name,
        description=bank.description,
        create_time=bank.create_time,
        update_time=bank.update_time,
        context_spec=types.ReasoningEngineContextSpec(
            memory_bank_config=types.ReasoningEngineContextSpecMemoryBankConfig.model_validate(data)
        ),
    )
    payload = to_json(engine)
    config = payload.setdefault("contextSpec", {}).setdefault("memoryBankConfig", {})
    for structured in config.get("structuredMemoryConfigs", []):
        for schema_config in structured.get("schemaConfigs", []):
            if "memorySchema" in schema_config:
                schema_config["schema"] = schema_config.pop("memorySchema")
    return payload


def error_envelope(error: AdkMemoryError, surface: Surface = "rest") -> dict[str, Any]:
    """The Google error envelope for an error, with a BadRequest field violation if it names one.

    The message is in `surface`'s terms: REST's, or MCP's for the MCP server's HTTP refusals.
    An `ErrorInfo` (domain `adk-memory`) is added when a client needs more than the status to
    rebuild the error: its `reason` when the class has one (`ModelUnavailable`:
    `MODEL_UNAVAILABLE`, told from `StoreUnavailable`, which has the same status), and, when the
    message names an operation or option (`adk_memory.wording`), the marked template in
    `metadata.template`, so that an `http://` client words its advice in its own surface's terms.
    """
    message = render(error, surface)
    status: dict[str, Any] = {"code": error.code, "message": message, "status": error.status}
    details: list[dict[str, Any]] = []
    if error.field and error.code in (400, 413, 415):
        details.append(
            {
                "@type": "type.googleapis.com/google.rpc.BadRequest",
                "fieldViolations": [{"field": error.field, "description": message}],
            }
        )
    marked = error.template != error.message
    if error.reason or marked:
        info: dict[str, Any] = {
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": error.reason or error.status,
            "domain": "adk-memory",
        }
        if marked:
            info["metadata"] = {"template": error.template}
        details.append(info)
    if details:
        status["details"] = details
    return {"error": status}


def error_response(error: AdkMemoryError) -> JSONResponse:
    """The HTTP response of an error: its envelope, its status, and a 401's challenge."""
    headers = {"www-authenticate": "Bearer"} if error.code == 401 else None
    return JSONResponse(error_envelope(error), status_code=error.code, headers=headers)
