"""Conversions between ADK's memory types and Memory Bank requests, as ADK's Vertex service does.

ADK's `VertexAiMemoryBankService` (reference §6) decides from `custom_metadata` which Memory Bank
call to make and how to fill its config; `MemoryBankService` accepts the same keys with the same
meaning. Where ADK logs a warning and drops a value it cannot send, these helpers raise
`InvalidArgument` instead (SPEC §4: never pretend a value took effect).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from google.genai import types as genai_types

from adk_memory import types
from adk_memory.errors import InvalidArgument

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.memory.memory_entry import MemoryEntry

__all__ = [
    "ENABLE_CONSOLIDATION_KEY",
    "INGEST_KEYS",
    "batches",
    "create_config",
    "event_for_ingest",
    "generate_config",
    "memory_entry_fact",
    "memory_id_of_entry",
    "stored_content",
    "uses_generate",
]

ENABLE_CONSOLIDATION_KEY = "enable_consolidation"
"""`add_memory`: consolidate the given facts with existing memories (`memories.generate`)."""

INGEST_KEYS = frozenset({"stream_id", "force_flush", "generation_trigger_config"})
"""`custom_metadata` keys of the `ingest_events` path (as ADK's Vertex service has them)."""

_GENERATE_ONLY_KEYS = frozenset(
    {
        "allowed_topics",
        "disable_consolidation",
        "disable_memory_revisions",
        "http_options",
        "metadata",
        "metadata_merge_strategy",
        "revision_expire_time",
        "revision_labels",
        "revision_ttl",
        "ttl",
        "wait_for_completion",
    }
)
"""Keys that switch `add_events_to_memory` to `memories.generate` (ADK's fallback key set)."""

_AUTH_FUNCTION_NAMES = frozenset({"adk_request_credential"})
"""Function calls ADK uses to ask for credentials; ADK's Vertex service never stores them."""

_METADATA_VALUE_KEYS = frozenset({"bool_value", "double_value", "string_value", "timestamp_value"})


def uses_generate(custom_metadata: Mapping[str, object]) -> bool:
    """Whether `add_events_to_memory` goes through `memories.generate` (as ADK decides it)."""
    return any(key in _GENERATE_ONLY_KEYS and key not in INGEST_KEYS for key in custom_metadata)


def stored_content(event: Event) -> genai_types.Content | None:
    """The content of an event worth remembering, or None for events memory generation skips.

    As ADK's Vertex service sends them: text, tool calls and tool responses, code and its
    results, inline data (images, audio) and file references, which reach generation (a model
    that reads text only gets a note instead). Empty events and ADK's credential requests are
    skipped. Thoughts are dropped (extraction never reads them); a tool response is kept as
    plain JSON.
    """
    content = event.content
    if content is None or not content.parts:
        return None
    for part in content.parts:
        call = part.function_call or part.function_response
        if call is not None and call.name in _AUTH_FUNCTION_NAMES:
            return None
    kept = [_kept_part(part) for part in content.parts if not part.thought]
    parts = [part for part in kept if part is not None]
    if not parts:
        return None
    role = content.role or ("user" if event.author == "user" else "model")
    return genai_types.Content(role=role, parts=parts)


def _kept_part(part: genai_types.Part) -> genai_types.Part | None:
    if part.text:
        return genai_types.Part(text=part.text)
    if part.function_call is not None:
        call = part.function_call
        return genai_types.Part(
            function_call=genai_types.FunctionCall(
                name=call.name, args=_plain(call.args or {}), id=call.id
            )
        )
    if part.function_response is not None:
        response = part.function_response
        return genai_types.Part(
            function_response=genai_types.FunctionResponse(
                name=response.name, response=_plain(response.response or {}), id=response.id
            )
        )
    if part.executable_code is not None or part.code_execution_result is not None:
        return genai_types.Part(
            executable_code=part.executable_code, code_execution_result=part.code_execution_result
        )
    if part.inline_data is not None:
        return genai_types.Part(inline_data=part.inline_data)
    if part.file_data is not None:
        return genai_types.Part(file_data=part.file_data)
    return None


def _plain(value: dict[str, Any]) -> dict[str, Any]:
    """A tool payload as plain JSON (tools may return pydantic models or other objects)."""
    plain = json.loads(json.dumps(value, default=_jsonable))
    return plain if isinstance(plain, dict) else {"result": plain}


def _jsonable(value: object) -> object:
    dump = getattr(value, "model_dump", None)
    return dump(mode="json") if callable(dump) else str(value)


def event_for_ingest(event: Event, content: genai_types.Content) -> dict[str, Any]:
    """An `ingest_events` event: the content, ADK's event id (dedup key) and its time."""
    moment = datetime.fromtimestamp(event.timestamp, tz=UTC) if event.timestamp else None
    return {"content": content, "event_id": event.id or None, "event_time": moment}


def memory_entry_fact(entry: MemoryEntry, *, index: int) -> str:
    """The fact of a `MemoryEntry`: its text parts, stripped and joined by newlines."""
    texts = []
    for part in entry.content.parts or ():
        if part.inline_data is not None or part.file_data is not None:
            raise InvalidArgument(
                f"memories[{index}] holds binary data; a memory is text only.",
                field=f"memories[{index}].content",
            )
        if part.text and part.text.strip():
            texts.append(part.text.strip())
    if not texts:
        raise InvalidArgument(
            f"memories[{index}] has no text; give its fact as a text part.",
            field=f"memories[{index}].content",
        )
    return "\n".join(texts)


def memory_id_of_entry(entry: MemoryEntry) -> str | None:
    """The memory id a `MemoryEntry.id` asks for (the last segment of a full memory name)."""
    if not entry.id:
        return None
    return entry.id.rsplit("/memories/", 1)[-1]


def create_config(custom_metadata: Mapping[str, object]) -> dict[str, Any]:
    """A `memories.create` config: `MemoryConfig` keys as given, any other key as metadata."""
    if custom_metadata.get("revision_labels") is not None:
        raise InvalidArgument(
            "custom_metadata['revision_labels'] cannot be honoured: memories.create takes no "
            "revision labels in the Memory Bank API. Use enable_consolidation=True "
            "(memories.generate accepts them) or drop the key.",
            field="custom_metadata.revision_labels",
        )
    return _config(custom_metadata, types.MemoryConfig.model_fields, skip={"revision_labels"})


def generate_config(custom_metadata: Mapping[str, object]) -> dict[str, Any]:
    """A `memories.generate` config built as ADK builds it (`ttl` is `revision_ttl`)."""
    mixed = sorted(key for key in custom_metadata if key in INGEST_KEYS)
    if mixed:
        raise InvalidArgument(
            f"custom_metadata mixes ingest_events keys ({', '.join(mixed)}) with keys only "
            "memories.generate takes; memories.generate has no stream or trigger. Send them "
            "in separate calls.",
            field=f"custom_metadata.{mixed[0]}",
        )
    values = dict(custom_metadata)
    ttl = values.pop("ttl", None)
    if ttl is not None and values.get("revision_ttl") is None:
        values["revision_ttl"] = ttl  # ADK: the only TTL memories.generate accepts
    return _config(values, types.GenerateMemoriesConfig.model_fields, skip=set())


def _config(
    custom_metadata: Mapping[str, object], fields: Iterable[str], *, skip: set[str]
) -> dict[str, Any]:
    known = set(fields)
    config: dict[str, Any] = {}
    extra: dict[str, object] = {}
    for key, value in custom_metadata.items():
        if key == ENABLE_CONSOLIDATION_KEY or key in skip:
            continue
        if key == "metadata":
            if value is None:
                continue
            if not isinstance(value, Mapping):
                raise InvalidArgument(
                    "custom_metadata['metadata'] must be a mapping of key to value.",
                    field="custom_metadata.metadata",
                )
            config["metadata"] = {**config.get("metadata", {}), **to_metadata_values(value)}
        elif key in known:
            if value is not None:
                config[key] = value
        else:
            extra[key] = value
    if extra:
        # ADK folds keys the config does not know into the memory's metadata (they win).
        config["metadata"] = {**config.get("metadata", {}), **to_metadata_values(extra)}
    return config


def to_metadata_values(values: Mapping[Any, object]) -> dict[str, dict[str, object]]:
    """Memory Bank metadata values from plain Python values, converted as ADK converts them."""
    converted: dict[str, dict[str, object]] = {}
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgument(
                "Metadata keys must be non-empty strings.", field="custom_metadata"
            )
        converted[key] = _metadata_value(key, value)
    return converted


def _metadata_value(key: str, value: object) -> dict[str, object]:
    if isinstance(value, bool):
        return {"bool_value": value}
    if isinstance(value, int | float):
        return {"double_value": float(value)}
    if isinstance(value, str):
        return {"string_value": value}
    if isinstance(value, datetime):
        return {"timestamp_value": value}
    if isinstance(value, Mapping):
        if value and set(value) <= _METADATA_VALUE_KEYS:
            return dict(value)
        return {"string_value": str(dict(value))}
    if value is None:
        raise InvalidArgument(
            f"Metadata value {key!r} is None; Memory Bank metadata holds strings, numbers, "
            "booleans and timestamps. Drop the key or give it a value.",
            field=f"custom_metadata.{key}",
        )
    return {"string_value": str(value)}


def batches(items: Sequence[Any], size: int) -> list[Sequence[Any]]:
    """`items` in consecutive slices of at most `size`."""
    return [items[start : start + size] for start in range(0, len(items), size)]
