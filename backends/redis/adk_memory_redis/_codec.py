r"""How records become Redis hashes and back, and the digest tokens that filters match on.

A memory is one HASH. Fields that queries match on are either integers (times in microseconds
since the epoch, exact in a NUMERIC double up to the year 2255) or digest tokens: the first 128
bits of BLAKE2b over typed parts joined by `\x1f` (for example `v\x1fs\x1flang\x1fde` for the
metadata string `lang = "de"`). A digest is lower-case hex, so it needs no escaping in a TAG
query, is case-sensitive by nature, cannot contain the TAG separator, and makes a 5,000-character
value as cheap to match as a short one. User text is stored only in fields no query reads as
syntax (JSON blobs and the fact).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np

from adk_memory.errors import InvalidArgument
from adk_memory.scope import ScopeKey
from adk_memory.store import (
    BankRecord,
    MemoryRecord,
    MetadataValue,
    OperationRecord,
    RevisionRecord,
    TopicRef,
)

__all__ = [
    "LIVE_FOREVER",
    "MEMORY_FIELDS",
    "bank_from_json",
    "bank_to_json",
    "check_scope_key",
    "decode_memory",
    "decode_revision",
    "encode_memory",
    "encode_revision",
    "from_us",
    "metadata_key_token",
    "metadata_value_token",
    "operation_from_json",
    "operation_to_json",
    "fact_token",
    "is_nan",
    "scope_token",
    "to_us",
    "topic_token",
]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
LIVE_FOREVER = "inf"
"""`live_until` of a memory that never expires (RediSearch parses it as +infinity)."""

MEMORY_FIELDS = ("doc", "fact")
"""Hash fields that rebuild a `MemoryRecord` (with `embedding` for its vector): few, so that
search replies stay small (each returned field costs the client parsing time)."""

_SCOPE_KEY = re.compile(r"[0-9a-f]{64}")


def to_us(when: datetime) -> int:
    """Microseconds since the epoch, exactly (a naive datetime is taken as UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // _MICROSECOND


def from_us(micros: int) -> datetime:
    """The UTC datetime of microseconds since the epoch."""
    return _EPOCH + timedelta(microseconds=micros)


def text(raw: Any) -> str:
    """A reply's bytes (or any other value) as text."""
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def live_at(live_until: Any, now_us: int) -> bool:
    """Whether a stored `live_until` (µs, or `inf`; None for an evicted key) is after `now`."""
    if live_until is None:
        return False
    return text(live_until) == LIVE_FOREVER or int(live_until) > now_us


def check_scope_key(key: str) -> ScopeKey:
    """The scope key if it is a hex sha256 digest (the only form a query may contain)."""
    if not isinstance(key, str) or not _SCOPE_KEY.fullmatch(key):
        raise InvalidArgument(
            "A scope key must be the hex sha256 digest made by adk_memory.scope.scope_key().",
            field="scope_key",
        )
    return ScopeKey(key)


def _utf8(text: str) -> bytes:
    # surrogatepass: any Python string round-trips, even one with a lone surrogate.
    return text.encode("utf-8", "surrogatepass")


def _text(raw: bytes | str) -> str:
    return raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else raw


def _token(*parts: str) -> str:
    return hashlib.blake2b(b"\x1f".join(map(_utf8, parts)), digest_size=16).hexdigest()


def fact_token(fact: str) -> str:
    """The TAG token of an exact fact (`fact = "…"`)."""
    return _token("f", fact)


def scope_token(key: str, value: str) -> str:
    """The TAG token of one scope pair (`scope.KEY = "…"`)."""
    return _token("s", key, value)


def topic_token(*, managed: str | None = None, custom: str | None = None) -> str:
    """The TAG token of a managed topic or a custom label."""
    return _token("m", managed) if managed is not None else _token("c", custom or "")


def _metadata_kind(value: object) -> str:
    if isinstance(value, bool):  # bool is an int subclass: check it first
        return "b"
    if isinstance(value, datetime):
        return "t"
    if isinstance(value, int | float):
        return "n"
    return "s"


def _canonical(kind: str, value: Any) -> str:
    """One spelling per equivalence class of `adk_memory.filters`' equality for that type."""
    if kind == "b":
        return "1" if value else "0"
    if kind == "t":
        return str(to_us(value) // 1_000_000)  # metadata timestamps compare by whole seconds
    if kind == "n":
        return repr(float(value) + 0.0)  # + 0.0 folds -0.0 into 0.0, which compare equal
    return str(value)


def metadata_key_token(key: str, value: object) -> str:
    """The TAG token saying a memory has metadata `key` with a value of `value`'s type."""
    return _token("k", _metadata_kind(value), key)


def metadata_value_token(key: str, value: object) -> str:
    """The TAG token of metadata `key` equal to `value` under the filter semantics."""
    kind = _metadata_kind(value)
    return _token("v", kind, key, _canonical(kind, value))


def _tags(tokens: Iterable[str]) -> str:
    return ",".join(sorted(set(tokens)))


def _metadata_items(metadata: Mapping[str, MetadataValue]) -> list[list[Any]]:
    """Metadata as JSON-ready [key, kind, value] triples that keep each value's type."""
    items: list[list[Any]] = []
    for key, value in metadata.items():
        kind = _metadata_kind(value)
        if kind == "t":
            encoded: Any = to_us(cast(datetime, value))
        elif kind == "n":
            encoded = float(cast(float, value))
        else:
            encoded = value
        items.append([key, kind, encoded])
    return items


def _metadata_from_items(items: Iterable[list[Any]]) -> dict[str, MetadataValue]:
    metadata: dict[str, MetadataValue] = {}
    for key, kind, value in items:
        if kind == "t":
            metadata[key] = from_us(int(value))
        elif kind == "n":
            metadata[key] = float(value)
        elif kind == "b":
            metadata[key] = bool(value)
        else:
            metadata[key] = str(value)
    return metadata


def _json_object(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


def encode_memory(record: MemoryRecord, *, dtype: str) -> dict[str, bytes | str | int]:
    """The hash of a memory: a JSON document, the fact, the vector and the indexed fields."""
    check_scope_key(record.scope_key)
    expire_us = None if record.expire_time is None else to_us(record.expire_time)
    create_us, update_us = to_us(record.create_time), to_us(record.update_time)
    document = {
        "memory_id": record.memory_id,
        "scope_key": record.scope_key,
        "scope": dict(record.scope),
        "create_us": create_us,
        "update_us": update_us,
        "expire_us": expire_us,
        "topics": [[topic.managed, topic.custom] for topic in record.topics],
        "metadata": _metadata_items(record.metadata),
        "display_name": record.display_name,
        "description": record.description,
        "memory_type": record.memory_type,
        "schema_id": record.schema_id,
        "structured_data": _json_object(record.structured_data),
    }
    fields: dict[str, bytes | str | int] = {
        "doc": json.dumps(document),
        "fact": _utf8(record.fact),
        "embedding": np.asarray(record.embedding, dtype=dtype).tobytes(),
        "memory_id": record.memory_id,
        "scope_key": record.scope_key,
        "scope_tags": _tags(scope_token(k, v) for k, v in record.scope.items()),
        "fact_tag": fact_token(record.fact),
        "create_us": create_us,
        "update_us": update_us,
        "live_until": LIVE_FOREVER if expire_us is None else expire_us,
    }
    if expire_us is not None:
        fields["expire_us"] = expire_us
    topic_tags = _tags(topic_token(managed=t.managed, custom=t.custom) for t in record.topics)
    if topic_tags:
        fields["topic_tags"] = topic_tags
    meta_tags = _tags(
        token
        for key, value in record.metadata.items()
        for token in (metadata_key_token(key, value), metadata_value_token(key, value))
    )
    if meta_tags:
        fields["meta_tags"] = meta_tags
    return fields


def decode_memory(
    doc: bytes | str, fact: bytes | str, *, embedding: bytes | None, dtype: str
) -> MemoryRecord:
    """Rebuilds a memory from its document, fact and vector (no vector: empty embedding)."""
    data = json.loads(doc)
    vector: tuple[float, ...] = ()
    if embedding:
        vector = tuple(np.frombuffer(embedding, dtype=dtype).astype(np.float64).tolist())
    expire = data["expire_us"]
    return MemoryRecord(
        memory_id=data["memory_id"],
        scope_key=ScopeKey(data["scope_key"]),
        scope=data["scope"],
        fact=_text(fact),
        embedding=vector,
        create_time=from_us(data["create_us"]),
        update_time=from_us(data["update_us"]),
        expire_time=None if expire is None else from_us(expire),
        topics=tuple(TopicRef(managed=m, custom=c) for m, c in data["topics"]),
        metadata=_metadata_from_items(data["metadata"]),
        display_name=data["display_name"],
        description=data["description"],
        memory_type=data.get("memory_type", "NATURAL_LANGUAGE_COLLECTION"),
        schema_id=data.get("schema_id"),
        structured_data=data.get("structured_data"),
    )


def encode_revision(revision: RevisionRecord) -> dict[str, str | int]:
    """The hash of a revision: a JSON document and its expiry for server-side checks."""
    check_scope_key(revision.scope_key)
    document = {
        "memory_id": revision.memory_id,
        "revision_id": revision.revision_id,
        "scope_key": revision.scope_key,
        "scope": dict(revision.scope),
        "fact": revision.fact,
        "create_us": to_us(revision.create_time),
        "expire_us": None if revision.expire_time is None else to_us(revision.expire_time),
        "topics": [[t.managed, t.custom] for t in revision.topics],
        "metadata": _metadata_items(revision.metadata),
        "labels": dict(revision.labels),
        "extracted_memories": [dict(item) for item in revision.extracted_memories],
        "deleted": revision.deleted,
        "structured_data": _json_object(revision.structured_data),
    }
    live_until: str | int = LIVE_FOREVER
    if revision.expire_time is not None:
        live_until = to_us(revision.expire_time)
    return {"data": json.dumps(document), "live_until": live_until}


def decode_revision(raw: bytes | str) -> RevisionRecord:
    """Rebuilds a revision from its JSON document."""
    doc = json.loads(raw)
    return RevisionRecord(
        memory_id=doc["memory_id"],
        revision_id=doc["revision_id"],
        scope_key=ScopeKey(doc["scope_key"]),
        scope=doc["scope"],
        fact=doc["fact"],
        create_time=from_us(doc["create_us"]),
        expire_time=None if doc["expire_us"] is None else from_us(doc["expire_us"]),
        topics=tuple(TopicRef(managed=m, custom=c) for m, c in doc["topics"]),
        metadata=_metadata_from_items(doc["metadata"]),
        labels=doc["labels"],
        extracted_memories=tuple(doc["extracted_memories"]),
        deleted=doc["deleted"],
        structured_data=doc.get("structured_data"),
    )


def bank_to_json(bank: BankRecord) -> str:
    """The JSON of a bank record."""
    return json.dumps(
        {
            "bank_id": bank.bank_id,
            "config": bank.config,
            "embedding_model": bank.embedding_model,
            "embedding_dimension": bank.embedding_dimension,
            "create_us": to_us(bank.create_time),
            "update_us": to_us(bank.update_time),
            "display_name": bank.display_name,
            "description": bank.description,
        }
    )


def bank_from_json(raw: bytes | str) -> BankRecord:
    """Rebuilds a bank record from its JSON."""
    doc = json.loads(raw)
    return BankRecord(
        bank_id=doc["bank_id"],
        config=doc["config"],
        embedding_model=doc["embedding_model"],
        embedding_dimension=doc["embedding_dimension"],
        create_time=from_us(doc["create_us"]),
        update_time=from_us(doc["update_us"]),
        display_name=doc["display_name"],
        description=doc["description"],
    )


def operation_to_json(operation: OperationRecord) -> str:
    """The JSON of an operation record."""
    return json.dumps(
        {
            "bank_id": operation.bank_id,
            "operation_path": operation.operation_path,
            "done": operation.done,
            "payload": operation.payload,
            "create_us": to_us(operation.create_time),
        }
    )


def operation_from_json(raw: bytes | str) -> OperationRecord:
    """Rebuilds an operation record from its JSON."""
    doc = json.loads(raw)
    return OperationRecord(
        bank_id=doc["bank_id"],
        operation_path=doc["operation_path"],
        done=doc["done"],
        payload=doc["payload"],
        create_time=from_us(doc["create_us"]),
    )


def is_nan(value: object) -> bool:
    """Whether a metadata filter value is a float NaN (equal to nothing, unequal to all)."""
    return isinstance(value, float) and math.isnan(value)
