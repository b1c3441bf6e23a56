"""Conversions between the SDK's pydantic types and the engine's immutable records.

Inbound: topics, metadata, durations and timestamps from requests, validated with errors that
name the field. Outbound: records to `types.Memory`, `types.MemoryRevision`, `types.MemoryBank`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar

from pydantic import BaseModel

from adk_memory import types
from adk_memory._validation import check_unicode, parse_model
from adk_memory.bounds import bounded_duration, bounded_time
from adk_memory.errors import InvalidArgument
from adk_memory.names import Names
from adk_memory.store import MemoryRecord, MetadataValue, RevisionRecord, TopicRef

__all__ = [
    "MAX_FACT_LENGTH",
    "MAX_METADATA_ENTRIES",
    "check_unicode",
    "metadata_from_request",
    "metadata_to_sdk",
    "parse_duration",
    "parse_model",
    "to_memory",
    "to_revision",
    "to_utc",
    "topics_from_request",
    "topics_to_sdk",
]

MAX_FACT_LENGTH = 100_000
"""Longest fact accepted, in characters (a documented limit)."""
MAX_METADATA_ENTRIES = 100
"""Most metadata keys on one memory (a documented limit)."""
M = TypeVar("M", bound=BaseModel)
_DURATION = re.compile(r"\s*(\d+(?:\.\d{1,9})?)s\s*")


def parse_duration(value: Any, *, field: str) -> timedelta | None:
    """A protobuf JSON duration (`"86400s"`, `"1.5s"`) or a timedelta, bounded; None stays None.

    The bound is `adk_memory.bounds.MAX_DURATION`.
    """
    if value is None:
        return None
    if isinstance(value, timedelta):
        return bounded_duration(value, field=field)
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise InvalidArgument(
            f"{field} must be a duration in seconds such as '86400s', not {str(value)[:40]!r}.",
            field=field,
        )
    return bounded_duration(Decimal(match.group(1)), field=field)


def to_utc(value: datetime | None, *, field: str = "time") -> datetime | None:
    """An aware UTC datetime; a naive one is taken as UTC (the SDK sends naive times as-is)."""
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise InvalidArgument(f"{field} must be a timestamp.", field=field)
    return bounded_time(value, field=field)


def topics_from_request(
    topics: Sequence[types.MemoryTopicId] | None, *, field: str = "topics"
) -> tuple[TopicRef, ...]:
    """Validated topic references: exactly one of a managed enum or a custom label each."""
    result: list[TopicRef] = []
    for index, topic in enumerate(topics or ()):
        where = f"{field}[{index}]"
        managed = topic.managed_memory_topic
        custom = topic.custom_memory_topic_label
        if (managed is None) == (custom is None):
            raise InvalidArgument(
                f"{where} must set exactly one of managed_memory_topic and "
                "custom_memory_topic_label.",
                field=where,
            )
        if managed is not None:
            name = managed.value if hasattr(managed, "value") else str(managed)
            if name.upper() not in types.MANAGED_TOPIC_NAMES:
                raise InvalidArgument(
                    f"{where}: unknown managed topic {name[:40]!r}; use one of "
                    f"{', '.join(types.MANAGED_TOPIC_NAMES)}.",
                    field=where,
                )
            result.append(TopicRef(managed=name.upper()))
        elif not custom:
            raise InvalidArgument(f"{where}: a custom topic label must not be empty.", field=where)
        else:
            result.append(TopicRef(custom=custom))
    return tuple(dict.fromkeys(result))


def built(model: type[M], **values: Any) -> M:
    """An SDK model from values the engine already validated, without validating them again.

    The SDK's models check every field on construction (google-genai's type checks), which
    made up half of a retrieve's engine time; records read from a store are valid by
    construction. None values are left unset, as the SDK leaves absent fields.
    """
    return model.model_construct(
        **{key: value for key, value in values.items() if value is not None}
    )


def topics_to_sdk(topics: Sequence[TopicRef]) -> list[types.MemoryTopicId] | None:
    """SDK topic ids, or None when there are none (as the service omits empty lists)."""
    converted = [
        built(types.MemoryTopicId, managed_memory_topic=types.ManagedTopicEnum(topic.managed))
        if topic.managed
        else built(types.MemoryTopicId, custom_memory_topic_label=topic.custom)
        for topic in topics
    ]
    return converted or None


def metadata_from_request(
    metadata: Mapping[str, types.MemoryMetadataValue] | None, *, field: str = "metadata"
) -> dict[str, MetadataValue]:
    """Plain typed values (str, float, bool, aware datetime) from SDK metadata values."""
    if not metadata:
        return {}
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise InvalidArgument(
            f"{field} has {len(metadata)} entries; at most {MAX_METADATA_ENTRIES} are allowed.",
            field=field,
        )
    result: dict[str, MetadataValue] = {}
    for key, value in metadata.items():
        where = f"{field}.{key[:40]}"
        if not key:
            raise InvalidArgument(f"{field} keys must not be empty.", field=field)
        present = [
            (kind, getattr(value, kind))
            for kind in ("string_value", "double_value", "bool_value", "timestamp_value")
            if getattr(value, kind) is not None
        ]
        if len(present) != 1:
            raise InvalidArgument(
                f"{where} must set exactly one of string_value, double_value, bool_value and "
                "timestamp_value.",
                field=where,
            )
        kind, raw = present[0]
        if kind == "double_value":
            if not math.isfinite(raw):
                raise InvalidArgument(f"{where} must be a finite number.", field=where)
            result[key] = float(raw)
        elif kind == "timestamp_value":
            result[key] = to_utc(raw, field=where)  # type: ignore[assignment]
        else:
            result[key] = raw
    return result


def metadata_to_sdk(
    metadata: Mapping[str, MetadataValue],
) -> dict[str, types.MemoryMetadataValue] | None:
    """SDK metadata values, or None when empty."""
    converted: dict[str, types.MemoryMetadataValue] = {}
    for key, value in metadata.items():
        if isinstance(value, bool):
            converted[key] = built(types.MemoryMetadataValue, bool_value=value)
        elif isinstance(value, datetime):
            converted[key] = built(types.MemoryMetadataValue, timestamp_value=value)
        elif isinstance(value, float | int):
            converted[key] = built(types.MemoryMetadataValue, double_value=float(value))
        else:
            converted[key] = built(types.MemoryMetadataValue, string_value=value)
    return converted or None


def to_memory(record: MemoryRecord, bank_id: str, names: Names) -> types.Memory:
    """The SDK `Memory` for a stored record."""
    return built(
        types.Memory,
        name=names.memory(bank_id, record.memory_id),
        fact=record.fact,
        scope=dict(record.scope),
        topics=topics_to_sdk(record.topics),
        metadata=metadata_to_sdk(record.metadata),
        display_name=record.display_name,
        description=record.description,
        create_time=record.create_time,
        update_time=record.update_time,
        expire_time=record.expire_time,
        memory_type=types.MemoryType(record.memory_type) if record.schema_id else None,
        structured_content=built(
            types.MemoryStructuredContent,
            data=dict(record.structured_data or {}),
            schema_id=record.schema_id,
        )
        if record.schema_id
        else None,
    )


def to_revision(revision: RevisionRecord, bank_id: str, names: Names) -> types.MemoryRevision:
    """The SDK `MemoryRevision` for a stored revision."""
    return types.MemoryRevision(
        name=names.revision(bank_id, revision.memory_id, revision.revision_id),
        fact=revision.fact,
        create_time=revision.create_time,
        expire_time=revision.expire_time,
        labels=dict(revision.labels) or None,
        structured_data=dict(revision.structured_data)
        if revision.structured_data is not None
        else None,
        extracted_memories=[
            types.IntermediateExtractedMemory.model_validate(dict(item))
            for item in revision.extracted_memories
        ]
        or None,
    )
