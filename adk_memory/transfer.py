"""Export and import of a memory bank as JSON Lines, exactly, between any two stores.

Export and import go through the store layer (`MemoryStore` records), not the public API: the
public `create` would assign new names and times, while a transfer must keep every memory's
name, create/update/expire times, topics, metadata, vector and revisions as they were. So the
same bank read from Chroma and written into Redis (or `memory://`) is the same bank.

The file is one JSON object per line, each with a `kind`, in this order:

* `export`: the header: `format` (`adk-memory-bank`), `version` (2), `exported_at`, `bank_id`.
* `bank`: the bank record: id, config (the wire-form `memoryBankConfig` JSON, snake_case),
  embedding model and dimension, create/update time, display name, description.
* `memory`, then that memory's `revision`s, oldest first, for each live memory in
  `create_time` order. A memory's vector is `embedding_f64`: its float64 values, little-endian,
  base64 (exact, and half the size of decimal text), with `vector_digest` (`vector_digest`:
  sha256 of the bank's model, the fact and the vector); `export(vectors=False)` leaves both out
  and import re-embeds.
* `revision`s of the memories that are no longer live (deleted, or expired) but still have
  live revisions, oldest first per memory, so that after import they can be listed and rolled
  back to as in the source. Their ids come from `MemoryStore.list_revision_memory_ids`.
* `document`: the bank's ingest streams (events buffered for generation), so pending
  `ingest_events` survive the move. Operations are not exported (a log of past calls whose
  names point at the old store); nor are re-embedding work documents.
* `end`: how many memories, revisions and documents the file holds. Import checks it, so a file
  cut short is reported, not taken as complete.

Reads are streamed (pages of `page_size` memories in `create_time` order, keyset-paginated so
that concurrent writes neither repeat nor skip a memory, then keyset pages of the ids that have
revisions) and so are writes (batches of `batch_size` memories, revisions and streams, one
`WriteBatch` each).

What import checks. Nothing in the file is trusted; a problem is an `InvalidArgument` naming the
line and field, never a value:

* every field is checked as the API checks a request: ids in their stored forms, scopes, facts,
  times (with a zone, in range; times something happened at leave room for any duration),
  topics, metadata, display names, the bank's config (as `memory_banks.create` validates it),
  revision labels and extracted memories, a stream's events, trigger and generate settings;
* whatever can be derived is derived and compared: scope digests from scopes, a profile's id
  from its scope and schema and its fact from its data, a stream's key from its scope and stream
  id (`ingest.checked_stream`), the bank's embedding model and dimension from its config;
* every vector written has the bank's dimension and only finite values within float32's range,
  and belongs to its fact (`vector_digest`; a file of version 1 has none): one that does not is
  refused, or with `reembed` computed from the fact;
* a merge never gives one memory id records of two scopes.

Into a new bank an import is all or nothing: when it fails, the bank it created is removed.
Into an existing bank (`merge`), batches are written as they fill, and a failure names the lines
written.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import logging
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from adk_memory import types
from adk_memory.bounds import bounded_event_time, bounded_time
from adk_memory.embeddings import canonical_model_name
from adk_memory.engine.banks import check_display_name, validate_bank_config
from adk_memory.engine.context import split_config
from adk_memory.engine.convert import (
    check_unicode,
    metadata_from_request,
    parse_model,
)
from adk_memory.engine.ingest import STREAM_KIND, checked_stream, stream_document
from adk_memory.engine.memories import owner_scopes, validate_fact
from adk_memory.engine.profiles import (
    PROFILE_ID_PREFIX,
    SCHEMA_ID,
    canonical_json,
    profile_memory_id,
)
from adk_memory.errors import (
    AdkMemoryError,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    StoreUnavailable,
)
from adk_memory.extensions import EXTENSIONS_KEY, BankExtensions
from adk_memory.filters import Condition, Op, partition
from adk_memory.names import Names, validate_revision_id, validate_stored_memory_id
from adk_memory.scope import ScopeKey, profile_scope_key, scope_key, validate_scope
from adk_memory.store import (
    BankRecord,
    DocumentRecord,
    MemoryRecord,
    MemoryStore,
    MetadataValue,
    RevisionRecord,
    ScanQuery,
    SortKey,
    TopicRef,
    WriteBatch,
)
from adk_memory.vectors import unstorable_value

if TYPE_CHECKING:
    from adk_memory.engine import MemoryEngine

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "TransferSummary",
    "bank_from_json",
    "bank_to_json",
    "export_bank",
    "import_bank",
    "iter_export",
    "memory_from_json",
    "memory_to_json",
    "revision_from_json",
    "revision_to_json",
    "scan_pages",
    "to_micros",
    "vector_digest",
    "vector_from_text",
    "vector_to_text",
]

logger = logging.getLogger(__name__)

FORMAT = "adk-memory-bank"
"""The `format` of the header line."""
FORMAT_VERSION = 2
"""The version of the line format this module writes (and the highest it reads). Version 2 adds
each memory line's `vector_digest`; a version 1 file's vectors cannot be checked against their
facts, so importing one with vectors needs `reembed`."""

DEFAULT_PAGE_SIZE = 500
DEFAULT_BATCH_SIZE = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ASCENDING = (SortKey("create_time", descending=False),)
_PROFILE = "STRUCTURED_PROFILE"
_NATURAL_LANGUAGE = "NATURAL_LANGUAGE_COLLECTION"
_SimilaritySearchConfig = types.ReasoningEngineContextSpecMemoryBankConfigSimilaritySearchConfig

Progress = Callable[[int, int | None], None]
"""Called with (memories done, memories in total or None)."""


@dataclass(frozen=True, slots=True)
class TransferSummary:
    """What an export or import moved."""

    bank_id: str
    memories: int = 0
    revisions: int = 0
    documents: int = 0
    reembedded: int = 0
    """Memories whose vectors were computed on import (another model, or exported without)."""


# Times, vectors and records as JSON


def to_micros(when: datetime) -> int:
    """Microseconds since the epoch, exactly (no float rounding)."""
    return (when - _EPOCH) // timedelta(microseconds=1)


def _from_micros(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _time(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _parse_time(value: Any, where: str) -> datetime | None:
    """An ISO 8601 time with its zone, in UTC and within the timestamps every store holds."""
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where} is not an ISO 8601 time.", field=where) from None
    if parsed.tzinfo is None:
        raise InvalidArgument(f"{where} has no time zone.", field=where)
    return bounded_time(parsed, field=where)


def _event_time(data: Mapping[str, Any], key: str, where: str) -> datetime:
    """A required time something happened at (a create or update): see `bounded_event_time`."""
    parsed = _parse_time(data[key], f"{where}.{key}")
    if parsed is None:
        raise InvalidArgument(f"{where}.{key} is required.", field=f"{where}.{key}")
    return bounded_event_time(parsed, field=f"{where}.{key}")


def vector_to_text(vector: tuple[float, ...]) -> str:
    """A vector as base64 of its little-endian float64 values (exact)."""
    return base64.b64encode(np.asarray(vector, dtype="<f8").tobytes()).decode("ascii")


def vector_from_text(text: Any, where: str) -> tuple[float, ...]:
    """The vector of `vector_to_text`; `InvalidArgument` naming `where` if malformed."""
    try:
        raw = base64.b64decode(text, validate=True)
        return tuple(np.frombuffer(raw, dtype="<f8").tolist())
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where} is not base64 float64 data.", field=where) from None


def vector_digest(model: str, fact: str, vector: tuple[float, ...]) -> str:
    """The `vector_digest` of a memory line: sha256 of the model, the fact and the vector.

    Hex of sha256 over the JSON text `[model, fact]`, a newline, then the vector's little-endian
    float64 bytes (what `embedding_f64` holds). Import recomputes it from the line: a fact
    edited after the export (or a vector moved to another fact) no longer matches.
    """
    head = json.dumps([model, fact], ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(head + b"\n" + np.asarray(vector, dtype="<f8").tobytes()).hexdigest()


def _metadata_to_json(metadata: Mapping[str, MetadataValue]) -> dict[str, dict[str, Any]]:
    encoded: dict[str, dict[str, Any]] = {}
    for key, value in metadata.items():
        if isinstance(value, bool):  # before float: bool is an int
            encoded[key] = {"bool_value": value}
        elif isinstance(value, int | float):
            encoded[key] = {"double_value": float(value)}
        elif isinstance(value, datetime):
            encoded[key] = {"timestamp_value": value.isoformat()}
        else:
            encoded[key] = {"string_value": str(value)}
    return encoded


def _metadata_from_json(data: Any, where: str) -> dict[str, MetadataValue]:
    """Metadata of a line, checked as `memories.create` checks a request's (the same form)."""
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise InvalidArgument(f"{where} must be a JSON object.", field=where)
    values: dict[str, types.MemoryMetadataValue] = {}
    for key, value in data.items():
        at = f"{where}.{key[:40]}"
        if not isinstance(value, dict) or len(value) != 1:
            raise InvalidArgument(f"{at} must hold one typed value.", field=at)
        values[key] = parse_model(types.MemoryMetadataValue, value, field=at)
    return metadata_from_request(values, field=where)


def _plain(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


def _topics_to_json(topics: tuple[TopicRef, ...]) -> list[dict[str, str]]:
    return [
        {"managed": topic.managed} if topic.managed is not None else {"custom": topic.custom or ""}
        for topic in topics
    ]


def _topics_from_json(data: Any, where: str) -> tuple[TopicRef, ...]:
    """Topics of a line: exactly one of a managed topic name or a non-empty custom label each."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise InvalidArgument(f"{where} must be a list.", field=where)
    topics = []
    for index, item in enumerate(data):
        at = f"{where}[{index}]"
        managed = item.get("managed") if isinstance(item, dict) else None
        custom = item.get("custom") if isinstance(item, dict) else None
        if (
            not isinstance(item, dict)
            or set(item) - {"managed", "custom"}
            or (managed is None) == (custom is None)
        ):
            raise InvalidArgument(f"{at} must be {{managed: ENUM}} or {{custom: label}}.", field=at)
        if managed is not None and (
            not isinstance(managed, str) or managed not in types.MANAGED_TOPIC_NAMES
        ):
            raise InvalidArgument(
                f"{at}: unknown managed topic; use one of {', '.join(types.MANAGED_TOPIC_NAMES)}.",
                field=at,
            )
        if custom is not None and (not isinstance(custom, str) or not custom):
            raise InvalidArgument(f"{at}: a custom topic label must be a string.", field=at)
        check_unicode(custom, field=at)
        topics.append(TopicRef(managed=managed, custom=custom))
    return tuple(dict.fromkeys(topics))


def _optional_text(data: Mapping[str, Any], key: str, where: str) -> str | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{where}.{key} must be a string.", field=f"{where}.{key}")
    check_unicode(value, field=f"{where}.{key}")
    return value


def _json_object(value: Any, where: str) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, dict):
        raise InvalidArgument(f"{where} must be a JSON object.", field=where)
    check_unicode(value, field=where)
    return value


def bank_to_json(bank: BankRecord) -> dict[str, Any]:
    """A bank record as JSON (the `bank` line without its `kind`)."""
    return {
        "bank_id": bank.bank_id,
        "config": dict(bank.config),
        "embedding_model": bank.embedding_model,
        "embedding_dimension": bank.embedding_dimension,
        "create_time": _time(bank.create_time),
        "update_time": _time(bank.update_time),
        "display_name": bank.display_name,
        "description": bank.description,
    }


def bank_from_json(data: Mapping[str, Any], *, where: str = "bank") -> BankRecord:
    """The bank record of a `bank` line, every field checked as `memory_banks.create` checks it.

    The config is validated and stored in its canonical form; whether its embedding model and
    dimension are the ones the model gives is checked by import, which builds the model.
    """
    bank_id = data["bank_id"]
    if not isinstance(bank_id, str):
        raise InvalidArgument(f"{where}.bank_id must be a string.", field=f"{where}.bank_id")
    Names.parse_bank(f"reasoningEngines/{bank_id}", field=f"{where}.bank_id")
    model, dimension = data["embedding_model"], data["embedding_dimension"]
    if not isinstance(model, str) or model != canonical_model_name(model):
        raise InvalidArgument(
            f"{where}.embedding_model must be a canonical model name.",
            field=f"{where}.embedding_model",
        )
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise InvalidArgument(
            f"{where}.embedding_dimension must be a positive integer.",
            field=f"{where}.embedding_dimension",
        )
    config = _json_object(data.get("config"), f"{where}.config") or {}
    wire = {key: value for key, value in config.items() if key != EXTENSIONS_KEY}
    parsed = parse_model(
        types.ReasoningEngineContextSpecMemoryBankConfig, wire, field=f"{where}.config"
    )
    validate_bank_config(parsed)
    search = parsed.similarity_search_config
    if search is None or not search.embedding_model:  # recorded, as `memory_banks.create` does
        parsed = parsed.model_copy(
            update={"similarity_search_config": _SimilaritySearchConfig(embedding_model=model)}
        )
    checked = parsed.model_dump(mode="json", exclude_none=True)
    if config.get(EXTENSIONS_KEY):
        extensions = parse_model(BankExtensions, config[EXTENSIONS_KEY], field=f"{where}.config")
        checked[EXTENSIONS_KEY] = extensions.model_dump(mode="json")
    display_name = _optional_text(data, "display_name", where)
    check_display_name(display_name)
    return BankRecord(
        bank_id=bank_id,
        config=checked,
        embedding_model=model,
        embedding_dimension=dimension,
        create_time=_event_time(data, "create_time", where),
        update_time=_event_time(data, "update_time", where),
        display_name=display_name,
        description=_optional_text(data, "description", where),
    )


def _checked_id(
    data: Mapping[str, Any],
    scope: Mapping[str, str],
    profile_digest: bool,
    where: str,
    *,
    revision: bool,
) -> str:
    """The line's memory id, if it fits the line's kind.

    A profile's id is the one generate derives from its scope and schema, so a file cannot plant
    a record where a profile will be looked for; no other memory may take that form, and it
    carries the plain scope digest. A revision carries its memory's digest.
    """
    memory_id = validate_stored_memory_id(data.get("memory_id"), field=f"{where}.memory_id")
    profile_id = memory_id.startswith(PROFILE_ID_PREFIX)
    if revision:
        fits = profile_digest == profile_id
    elif data.get("memory_type") == _PROFILE:
        schema_id = data.get("schema_id")
        fits = (
            profile_digest
            and isinstance(schema_id, str)
            and SCHEMA_ID.fullmatch(schema_id) is not None
            and memory_id == profile_memory_id(scope, schema_id)
        )
    else:
        fits = not profile_id and not profile_digest
    if not fits:
        raise InvalidArgument(
            f"{where}: memory_id {memory_id!r} does not fit its memory type and scope (a "
            "profile's id is derived from its scope and schema; no other id may take that "
            "form); the file was altered.",
            field=f"{where}.memory_id",
        )
    return memory_id


def _checked_scope(data: Mapping[str, Any], where: str) -> tuple[dict[str, str], ScopeKey, bool]:
    """The scope, its digest, and whether that digest is the profile one of the same scope."""
    scope = validate_scope(data["scope"], field=f"{where}.scope")
    plain, profile = scope_key(scope), profile_scope_key(scope)
    given = data.get("scope_key")
    if given is None:
        is_profile = data.get("memory_type") == _PROFILE
        return scope, profile if is_profile else plain, is_profile
    if given not in (plain, profile):
        raise InvalidArgument(
            f"{where}: scope_key does not match its scope; the file was altered.",
            field=f"{where}.scope_key",
        )
    return scope, ScopeKey(given), given == profile


def memory_to_json(record: MemoryRecord, *, vector: bool = True) -> dict[str, Any]:
    """A memory record as JSON (the `memory` line without its `kind` and `vector_digest`)."""
    data: dict[str, Any] = {
        "memory_id": record.memory_id,
        "scope_key": record.scope_key,
        "scope": dict(record.scope),
        "fact": record.fact,
        "create_time": _time(record.create_time),
        "update_time": _time(record.update_time),
        "expire_time": _time(record.expire_time),
        "topics": _topics_to_json(record.topics),
        "metadata": _metadata_to_json(record.metadata),
        "display_name": record.display_name,
        "description": record.description,
        "memory_type": record.memory_type,
        "schema_id": record.schema_id,
        "structured_data": _plain(record.structured_data),
    }
    if vector and record.embedding:
        data["embedding_f64"] = vector_to_text(record.embedding)
    return data


def memory_from_json(data: Mapping[str, Any], *, where: str = "memory") -> MemoryRecord:
    """The memory record of a `memory` line (an empty embedding when it has none).

    Every field is checked as `memories.create` (or generate, for a profile) checks it, and every
    derived one (scope digest, a profile's id and fact) is recomputed and compared. The vector is
    only decoded: whether it can be stored, and belongs to its fact, is import's to check.
    """
    scope, digest, profile_digest = _checked_scope(data, where)
    memory_type = data.get("memory_type", _NATURAL_LANGUAGE)
    memory_type = _NATURAL_LANGUAGE if memory_type is None else memory_type
    if memory_type not in (_NATURAL_LANGUAGE, _PROFILE):
        raise InvalidArgument(
            f"{where}.memory_type must be {_NATURAL_LANGUAGE} or {_PROFILE}.",
            field=f"{where}.memory_type",
        )
    fact = validate_fact(data["fact"], field=f"{where}.fact")
    structured = _json_object(data.get("structured_data"), f"{where}.structured_data")
    schema_id = data.get("schema_id")
    if memory_type == _PROFILE:
        if structured is None or fact != canonical_json(structured):
            raise InvalidArgument(
                f"{where}: a profile's fact is its structured_data as canonical JSON; the file "
                "was altered.",
                field=f"{where}.fact",
            )
    elif structured is not None or schema_id is not None:
        raise InvalidArgument(
            f"{where}: only a profile has schema_id and structured_data.", field=where
        )
    raw_vector = data.get("embedding_f64")
    return MemoryRecord(
        memory_id=_checked_id(data, scope, profile_digest, where, revision=False),
        scope_key=digest,
        scope=scope,
        fact=fact,
        embedding=() if raw_vector is None else vector_from_text(raw_vector, where),
        create_time=_event_time(data, "create_time", where),
        update_time=_event_time(data, "update_time", where),
        expire_time=_parse_time(data.get("expire_time"), f"{where}.expire_time"),
        topics=_topics_from_json(data.get("topics"), f"{where}.topics"),
        metadata=_metadata_from_json(data.get("metadata"), f"{where}.metadata"),
        display_name=_optional_text(data, "display_name", where),
        description=_optional_text(data, "description", where),
        memory_type=memory_type,
        schema_id=schema_id,
        structured_data=structured,
    )


def revision_to_json(revision: RevisionRecord) -> dict[str, Any]:
    """A revision record as JSON (the `revision` line without its `kind`)."""
    return {
        "memory_id": revision.memory_id,
        "revision_id": revision.revision_id,
        "scope_key": revision.scope_key,
        "scope": dict(revision.scope),
        "fact": revision.fact,
        "create_time": _time(revision.create_time),
        "expire_time": _time(revision.expire_time),
        "topics": _topics_to_json(revision.topics),
        "metadata": _metadata_to_json(revision.metadata),
        "labels": dict(revision.labels),
        "extracted_memories": [dict(item) for item in revision.extracted_memories],
        "deleted": revision.deleted,
        "structured_data": _plain(revision.structured_data),
    }


def revision_from_json(data: Mapping[str, Any], *, where: str = "revision") -> RevisionRecord:
    """The revision record of a `revision` line, every field checked."""
    scope, digest, profile_digest = _checked_scope(data, where)
    labels = data.get("labels")
    labels = {} if labels is None else labels
    if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
        raise InvalidArgument(
            f"{where}.labels must map strings to strings.", field=f"{where}.labels"
        )
    check_unicode(labels, field=f"{where}.labels")
    extracted = data.get("extracted_memories")
    extracted = [] if extracted is None else extracted
    if not isinstance(extracted, list) or not all(isinstance(item, dict) for item in extracted):
        raise InvalidArgument(
            f"{where}.extracted_memories must be a list of objects.",
            field=f"{where}.extracted_memories",
        )
    structured = _json_object(data.get("structured_data"), f"{where}.structured_data")
    if structured is not None and not profile_digest:
        raise InvalidArgument(
            f"{where}: only a profile's revision has structured_data.",
            field=f"{where}.structured_data",
        )
    deleted = data.get("deleted", False)
    if not isinstance(deleted, bool):
        raise InvalidArgument(f"{where}.deleted must be true or false.", field=f"{where}.deleted")
    return RevisionRecord(
        memory_id=_checked_id(data, scope, profile_digest, where, revision=True),
        revision_id=validate_revision_id(data.get("revision_id"), field=f"{where}.revision_id"),
        scope_key=digest,
        scope=scope,
        fact=validate_fact(data["fact"], field=f"{where}.fact"),
        create_time=_event_time(data, "create_time", where),
        expire_time=_parse_time(data.get("expire_time"), f"{where}.expire_time"),
        topics=_topics_from_json(data.get("topics"), f"{where}.topics"),
        metadata=_metadata_from_json(data.get("metadata"), f"{where}.metadata"),
        labels=labels,
        extracted_memories=tuple(
            parse_model(
                types.IntermediateExtractedMemory, item, field=f"{where}.extracted_memories"
            ).model_dump(mode="json", exclude_none=True)
            for item in extracted
        ),
        deleted=deleted,
        structured_data=structured,
    )


# Streamed reads


async def scan_pages(
    store: MemoryStore,
    bank_id: str,
    *,
    now: datetime,
    page_size: int = DEFAULT_PAGE_SIZE,
    after_micros: int | None = None,
) -> AsyncIterator[tuple[list[MemoryRecord], int]]:
    """Every live memory of a bank, oldest first, in pages (records without vectors).

    Keyset pagination on `create_time`: each page continues after the last create time of the
    previous one, and the memories sharing a page's last create time are all returned in that
    page, so no memory is repeated or skipped, whatever is written meanwhile (a memory created
    during the scan has a later create time and comes last).

    Args:
        store: The store.
        bank_id: The bank.
        now: Liveness is judged at this instant.
        page_size: About how many memories per page (more when many share a create time).
        after_micros: Resume after this create time (microseconds since the epoch).

    Yields:
        (page, cursor): the records, and the create time to resume after.
    """
    pushdown = store.capabilities.pushdown
    native = all(
        partition(Condition("create_time", op, _EPOCH), pushdown)[1] is None
        for op in (Op.GT, Op.EQ)
    )
    if not native:
        # A store that cannot filter by time: one full scan, paged here.
        everything = await store.scan(bank_id, ScanQuery(now=now, order_by=_ASCENDING))
        if after_micros is not None:
            everything = [r for r in everything if to_micros(r.create_time) > after_micros]
        for start in range(0, len(everything), page_size):
            page = everything[start : start + page_size]
            yield page, to_micros(page[-1].create_time)
        return
    cursor = after_micros
    while True:
        expr = None if cursor is None else Condition("create_time", Op.GT, _from_micros(cursor))
        page = await store.scan(
            bank_id, ScanQuery(now=now, filter=expr, order_by=_ASCENDING, limit=page_size)
        )
        if not page:
            return
        last = page[-1].create_time
        if len(page) == page_size:
            # Memories sharing the last create time may continue past the page: take them all.
            ties = await store.scan(
                bank_id,
                ScanQuery(
                    now=now, filter=Condition("create_time", Op.EQ, last), order_by=_ASCENDING
                ),
            )
            page = [record for record in page if record.create_time != last] + ties
        cursor = to_micros(last)
        yield page, cursor
        if len(page) < page_size:
            return


# Export


async def iter_export(
    engine: MemoryEngine,
    bank_id: str,
    *,
    vectors: bool = True,
    page_size: int = DEFAULT_PAGE_SIZE,
    progress: Progress | None = None,
) -> AsyncIterator[dict[str, Any]]:
    """The lines of a bank's export, as dicts, streamed page by page.

    Args:
        engine: The engine over the source store.
        bank_id: The bank to export.
        vectors: Include each memory's vector (import then needs no embedding model).
        page_size: Memories read per store round trip.
        progress: Called after each page with (memories exported, memories in the bank).

    Yields:
        Each line's object; `json.dumps` it and add a newline.

    Raises:
        NotFound: The bank does not exist.
    """
    store = engine.store
    now = engine.context.clock()
    bank = await store.get_bank(bank_id)
    if bank is None:
        raise NotFound(
            f"Memory bank {bank_id!r} does not exist in this store; list them with "
            "`adk-memory banks list`.",
            field="bank",
        )
    total = len(await store.scan(bank_id, ScanQuery(now=now))) if progress else None
    yield {
        "kind": "export",
        "format": FORMAT,
        "version": FORMAT_VERSION,
        "exported_at": _time(now),
        "bank_id": bank_id,
    }
    yield {"kind": "bank", **bank_to_json(bank)}
    counts = {"memory": 0, "revision": 0, "document": 0}

    def page_done() -> None:
        if progress is not None:
            progress(counts["memory"], total)

    parts = (
        _live_memory_lines(
            store,
            bank_id,
            now=now,
            vectors=vectors,
            model=bank.embedding_model,
            page_size=page_size,
            page_done=page_done,
        ),
        _gone_memory_lines(store, bank_id, now=now, page_size=page_size),
        _stream_lines(store, bank_id),
    )
    for part in parts:
        async for line in part:
            counts[line["kind"]] += 1
            yield line
    yield {
        "kind": "end",
        "memories": counts["memory"],
        "revisions": counts["revision"],
        "documents": counts["document"],
    }
    logger.info(
        "Exported bank %s: %d memories, %d revisions, %d documents",
        bank_id,
        counts["memory"],
        counts["revision"],
        counts["document"],
    )


async def _histories(
    store: MemoryStore, bank_id: str, memory_ids: list[str], now: datetime
) -> list[list[RevisionRecord]]:
    """Each memory's live revisions, oldest first (one batched read for the page)."""
    newest_first = await store.list_revisions_many(bank_id, memory_ids, now)
    return [newest_first[memory_id][::-1] for memory_id in memory_ids]


async def _live_memory_lines(
    store: MemoryStore,
    bank_id: str,
    *,
    now: datetime,
    vectors: bool,
    model: str,
    page_size: int,
    page_done: Callable[[], None],
) -> AsyncIterator[dict[str, Any]]:
    """Each live memory, oldest first, followed by its revisions; `page_done` after a page.

    A memory line with a vector carries its `vector_digest` under the bank's `model`.
    """
    async for page, _cursor in scan_pages(store, bank_id, now=now, page_size=page_size):
        ids = [record.memory_id for record in page]
        if vectors:
            full = {r.memory_id: r for r in await store.get_memories(bank_id, ids, now)}
        else:
            full = {record.memory_id: record for record in page}
        for record, history in zip(page, await _histories(store, bank_id, ids, now), strict=True):
            found = full.get(record.memory_id)
            if found is None:
                continue  # deleted between the scan and the read
            line = {"kind": "memory", **memory_to_json(found, vector=vectors)}
            if "embedding_f64" in line:
                line["vector_digest"] = vector_digest(model, found.fact, found.embedding)
            yield line
            for revision in history:
                yield {"kind": "revision", **revision_to_json(revision)}
        page_done()


async def _gone_memory_lines(
    store: MemoryStore, bank_id: str, *, now: datetime, page_size: int
) -> AsyncIterator[dict[str, Any]]:
    """The revisions of memories that are not live (deleted or expired), oldest first each.

    Keyset pages of `list_revision_memory_ids`, less the ids of live memories. A memory deleted
    while the export runs may already be in the file, live, with its revisions: they are then
    written twice, and import writes them once (a revision is keyed by its ids).
    """
    after: str | None = None
    while True:
        ids = await store.list_revision_memory_ids(bank_id, now, after=after, limit=page_size)
        live = {record.memory_id for record in await store.get_memories(bank_id, ids, now)}
        gone = [memory_id for memory_id in ids if memory_id not in live]
        for history in await _histories(store, bank_id, gone, now):
            for revision in history:
                yield {"kind": "revision", **revision_to_json(revision)}
        if len(ids) < page_size:
            return
        after = ids[-1]


async def _stream_lines(store: MemoryStore, bank_id: str) -> AsyncIterator[dict[str, Any]]:
    """The bank's ingest streams (documents of kind `stream`), by key."""
    for key, body in await store.list_documents(bank_id, STREAM_KIND):
        yield {"kind": "document", "document_kind": STREAM_KIND, "key": key, "body": dict(body)}


async def export_bank(
    engine: MemoryEngine,
    bank_id: str,
    write: Callable[[str], object],
    *,
    vectors: bool = True,
    page_size: int = DEFAULT_PAGE_SIZE,
    progress: Progress | None = None,
) -> TransferSummary:
    """Writes a bank's export as JSON Lines through `write` (e.g. `file.write`).

    Returns:
        What was exported.
    """
    counts = {"memory": 0, "revision": 0, "document": 0}
    async for line in iter_export(
        engine, bank_id, vectors=vectors, page_size=page_size, progress=progress
    ):
        write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        if line["kind"] in counts:
            counts[line["kind"]] += 1
    return TransferSummary(
        bank_id, counts["memory"], counts["revision"], counts["document"], reembedded=0
    )


# Import


@dataclass(slots=True)
class _Batch:
    """Records waiting to be written together, with the lines they came from."""

    memories: list[MemoryRecord] = field(default_factory=list)
    revisions: list[RevisionRecord] = field(default_factory=list)
    documents: list[DocumentRecord] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    embed: list[int] = field(default_factory=list)
    """Indexes into `memories` of those whose vector is computed from the fact."""

    def __len__(self) -> int:
        return len(self.memories) + len(self.revisions) + len(self.documents)


class _Importer:
    """The state of one import: the target bank, its embedder, the pending batch, what is done."""

    def __init__(
        self,
        engine: MemoryEngine,
        *,
        bank_id: str | None,
        merge: bool,
        embedding_model: str | None,
        reembed: bool,
        batch_size: int,
        progress: Progress | None,
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.target = bank_id
        self.merge = merge
        self.embedding_model = embedding_model
        self.reembed = reembed
        self.batch_size = batch_size
        self.progress = progress
        self.version = 0
        """The file's format version (0 until its header is read)."""
        self.header_bank: Any = None
        """The bank id the header names (the `bank` line must name the same)."""
        self.exported: BankRecord | None = None
        """The bank as the file describes it (its vectors are of this model and dimension)."""
        self.bank: BankRecord | None = None
        """The bank written into."""
        self.created = False
        """Whether this import created `bank` (and must remove it if it fails)."""
        self.reembed_all = False
        self.pending = _Batch()
        self.counts = {"memory": 0, "revision": 0, "document": 0, "reembedded": 0}
        self.written: list[int] = []
        """The lines whose records are stored."""
        self.unsure: list[int] = []
        """The lines of a batch whose write failed in a way that hides whether it happened."""
        self.ended: dict[str, Any] | None = None

    async def line(self, number: int, text: str) -> None:
        if not text.strip():
            return
        where = f"line {number}"
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidArgument(
                f"{where} is not JSON (column {exc.colno}); is this an adk-memory export?",
                field="file",
            ) from None
        except RecursionError:
            raise InvalidArgument(f"{where} is nested too deeply.", field="file") from None
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise InvalidArgument(f"{where} has no `kind`.", field="file")
        kind = data["kind"]
        if self.ended is not None:
            raise InvalidArgument(f"{where} follows the `end` line.", field="file")
        if not self.version:
            self._check_header(data, where)
            return
        try:
            if kind == "bank":
                await self._bank(data, where)
            elif self.bank is None:
                raise InvalidArgument(f"{where}: the `bank` line must come first.", field="file")
            elif kind == "memory":
                self._memory(data, where)
            elif kind == "revision":
                self.pending.revisions.append(revision_from_json(data, where=where))
            elif kind == "document":
                self._document(data, where)
            elif kind == "end":
                self._end(data, where)
                return
            else:
                raise InvalidArgument(f"{where} has an unknown kind {kind[:20]!r}.", field="file")
        except KeyError as exc:
            raise InvalidArgument(
                f"{where} lacks the field {str(exc.args[0])[:40]!r}.", field="file"
            ) from None
        if kind != "bank":
            self.pending.lines.append(number)
        if len(self.pending) >= self.batch_size:
            await self.flush()

    def _check_header(self, data: Mapping[str, Any], where: str) -> None:
        if data.get("kind") != "export" or data.get("format") != FORMAT:
            raise InvalidArgument(
                f"{where} is not an adk-memory export header; the file must start with a "
                '`{"kind": "export", "format": "adk-memory-bank", …}` line.',
                field="file",
            )
        version = data.get("version")
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise InvalidArgument(f"{where}: `version` must be a positive integer.", field="file")
        if version > FORMAT_VERSION:
            raise FailedPrecondition(
                f"The export has format version {version!r}; this adk-memory reads up to "
                f"{FORMAT_VERSION}. Upgrade adk-memory to import it.",
                field="file",
            )
        _parse_time(data.get("exported_at"), f"{where}.exported_at")
        self.header_bank = data.get("bank_id")
        self.version = version

    async def _bank(self, data: Mapping[str, Any], where: str) -> None:
        if self.bank is not None:
            raise InvalidArgument(
                f"{where}: the file holds more than one `bank` line.", field="file"
            )
        exported = bank_from_json(data, where=where)
        if self.header_bank is not None and self.header_bank != exported.bank_id:
            raise InvalidArgument(
                f"{where}: bank_id differs from the header's; the file was altered.",
                field=f"{where}.bank_id",
            )
        record = replace(exported, bank_id=self.target or exported.bank_id)
        # The model and dimension are derived from the config, as `memory_banks.create` does.
        configured = _configured_model(exported)
        embedder = self.engine.context.embedder(configured)
        if (canonical_model_name(embedder.model), embedder.dimension) != (
            exported.embedding_model,
            exported.embedding_dimension,
        ):
            raise InvalidArgument(
                f"{where}: the bank's embedding_model and embedding_dimension are not what its "
                f"configured model gives ({canonical_model_name(embedder.model)!r}, "
                f"{embedder.dimension} dimensions); the file was altered.",
                field=f"{where}.embedding_model",
            )
        self.exported = exported
        if self.embedding_model is not None:
            embedder = self.engine.context.embedder(self.embedding_model)
            if canonical_model_name(embedder.model) != exported.embedding_model:
                config = dict(record.config)
                search = dict(config.get("similarity_search_config") or {})
                search["embedding_model"] = self.embedding_model
                config["similarity_search_config"] = search
                record = replace(
                    record,
                    config=config,
                    embedding_model=canonical_model_name(embedder.model),
                    embedding_dimension=embedder.dimension,
                )
                self.reembed_all = True
        existing = await self.store.get_bank(record.bank_id)
        if existing is not None:
            if not self.merge:
                raise AlreadyExists(
                    f"Memory bank {record.bank_id!r} already exists in the target store; import "
                    "under another id (--bank NEW_ID), delete it first, or pass --merge to "
                    "write the file's memories into it.",
                    field="bank",
                )
            if (existing.embedding_model, existing.embedding_dimension) != (
                record.embedding_model,
                record.embedding_dimension,
            ):
                raise FailedPrecondition(
                    f"Memory bank {record.bank_id!r} uses {existing.embedding_model!r} "
                    f"({existing.embedding_dimension} dimensions), the file "
                    f"{record.embedding_model!r} ({record.embedding_dimension}); merge only into "
                    "a bank with the same embedding model (or pass --embedding-model).",
                    field="bank",
                )
            self.bank = existing
        else:
            await self.store.create_bank(record)
            self.bank, self.created = record, True

    def _memory(self, data: Mapping[str, Any], where: str) -> None:
        """Queues a memory, with the file's vector if it can be stored and belongs to the fact.

        The vector must have the exported bank's dimension and hold only values every store
        can hold (else the file is refused, whatever the options: it is malformed). It belongs
        to its fact when the line's `vector_digest` is that of the exported model, the fact and
        the vector; one that does not is refused, or re-embedded with `reembed`.
        """
        assert self.exported is not None
        record = memory_from_json(data, where=where)
        embed = not record.embedding or self.reembed_all
        if record.embedding:
            vector = record.embedding
            if len(vector) != self.exported.embedding_dimension:
                raise InvalidArgument(
                    f"{where}: embedding_f64 has {len(vector)} values; the bank's model gives "
                    f"{self.exported.embedding_dimension}. The file was altered; export it "
                    "again, or remove the line's embedding_f64 to have the fact embedded.",
                    field=f"{where}.embedding_f64",
                )
            found = unstorable_value(vector)
            if found is not None:
                raise InvalidArgument(
                    f"{where}: embedding_f64 holds {found[1]!r} at position {found[0]}; every "
                    "value must be a finite number within float32's range (about ±3.4e38). The "
                    "file was altered; export it again, or remove the line's embedding_f64 to "
                    "have the fact embedded.",
                    field=f"{where}.embedding_f64",
                )
            given = data.get("vector_digest")
            if not embed and given != vector_digest(
                self.exported.embedding_model, record.fact, vector
            ):
                if not self.reembed:
                    raise InvalidArgument(
                        f"{where}: the vector does not belong to the fact ("
                        + (
                            "the line has no vector_digest: an export of format version 1, or "
                            "an edited line"
                            if given is None
                            else "vector_digest, which covers the model, the fact and the "
                            "vector, does not match: was the fact edited?"
                        )
                        + "). Pass --reembed (reembed=True) to compute such vectors from their "
                        "facts, or export the bank again.",
                        field=f"{where}.vector_digest",
                    )
                embed = True
        if embed:
            self.pending.embed.append(len(self.pending.memories))
        self.pending.memories.append(record)

    def _document(self, data: Mapping[str, Any], where: str) -> None:
        kind = data["document_kind"]
        if kind != STREAM_KIND:
            raise InvalidArgument(
                f"{where}: unknown document kind {str(kind)[:30]!r}.",
                field=f"{where}.document_kind",
            )
        assert self.bank is not None
        body = checked_stream(data["key"], data["body"], where=where)
        config, _extensions = split_config(self.bank.config)
        self.pending.documents.append(stream_document(str(data["key"]), body, config))

    def _end(self, data: Mapping[str, Any], where: str) -> None:
        counts = [data.get(name) for name in ("memories", "revisions", "documents")]
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            raise InvalidArgument(
                f"{where}: the `end` line's memories, revisions and documents must be counts.",
                field="file",
            )
        self.ended = dict(data)

    async def flush(self) -> None:
        """Writes the pending records as one atomic batch (vectors computed first where due)."""
        pending = self.pending
        if self.bank is None or not len(pending):
            return
        bank = self.bank
        embed = pending.embed
        if embed:
            embedder = self.engine.context.embedder(self.embedding_model or _configured_model(bank))
            vectors = await embedder.embed_documents([pending.memories[i].fact for i in embed])
            for index, vector in zip(embed, vectors, strict=True):
                pending.memories[index] = replace(pending.memories[index], embedding=vector)
        await self._check_one_scope_per_id(bank.bank_id)
        batch = WriteBatch(
            upserts=tuple(pending.memories),
            revisions=tuple(pending.revisions),
            documents=tuple(pending.documents),
        )
        try:
            await self.store.apply(bank.bank_id, batch)
        except StoreUnavailable:
            self.unsure = list(pending.lines)  # it may have been stored before the failure
            raise
        self.written += pending.lines
        self.counts["memory"] += len(pending.memories)
        self.counts["revision"] += len(pending.revisions)
        self.counts["document"] += len(pending.documents)
        self.counts["reembedded"] += len(embed)
        self.pending = _Batch()
        if self.progress is not None:
            self.progress(self.counts["memory"], None)

    async def _check_one_scope_per_id(self, bank_id: str) -> None:
        """Refuses a batch that would give one memory id records of two scopes.

        A memory's revisions belong to its one scope (as for `memories.create`): a merge must not
        add another scope's memory or revisions to an id whose history the bank holds.
        """
        incoming: dict[str, set[ScopeKey]] = {}
        items: list[MemoryRecord | RevisionRecord] = [
            *self.pending.memories,
            *self.pending.revisions,
        ]
        for item in items:
            incoming.setdefault(item.memory_id, set()).add(item.scope_key)
        if not incoming:
            return
        now = self.engine.context.clock()
        owners = await owner_scopes(self.store, bank_id, list(incoming), now)
        for memory_id, scopes in incoming.items():
            if memory_id in owners:
                scopes = scopes | {owners[memory_id][0]}
            if len(scopes) > 1:
                raise AlreadyExists(
                    f"Memory id {memory_id!r} would hold records of {len(scopes)} scopes (the "
                    "file's, or the file's and the bank's); a memory and its revisions belong "
                    "to one scope. Nothing of this batch was written; import into another bank "
                    "or remove that memory from the file.",
                    field="file",
                )

    async def finish(self) -> TransferSummary:
        """Writes what is pending and checks the file was whole; the summary."""
        if self.bank is None:
            raise InvalidArgument(
                "The file holds no bank; is it an adk-memory export?", field="file"
            )
        await self.flush()
        summary = self.summary()
        ended = self.ended
        if ended is None:
            raise InvalidArgument(
                "The file ends before its `end` line: the export was cut short; export the "
                "bank again.",
                field="file",
            )
        expected = (ended["memories"], ended["revisions"], ended["documents"])
        if expected != (summary.memories, summary.revisions, summary.documents):
            raise InvalidArgument(
                f"The file's `end` line announces {expected[0]} memories, {expected[1]} "
                f"revisions and {expected[2]} documents, but it held {summary.memories}, "
                f"{summary.revisions} and {summary.documents}; the file was altered.",
                field="file",
            )
        return summary

    async def failed(self, error: BaseException) -> str:
        """Undoes or reports what a failed import wrote; what to add to its error message.

        A bank this import created is removed, so a failed import leaves nothing behind (and
        can be run again as it was). In a bank that existed (a merge), the lines already
        written stay: the message names them.
        """
        if self.bank is None:
            return ""
        bank_id = self.bank.bank_id
        if self.created:
            try:
                await self.store.delete_bank(bank_id)
            except Exception as exc:  # the import's own error is the one to raise
                logger.warning("could not remove bank %s after a failed import: %s", bank_id, exc)
                return (
                    f"Bank {bank_id!r}, which this import created, could not be removed "
                    f"({type(exc).__name__}); delete it with `adk-memory banks delete -b "
                    f"{bank_id} --force` before importing again."
                )
            logger.warning("Import into new bank %s failed; the bank was removed", bank_id)
            return (
                f"Nothing was imported: bank {bank_id!r}, which this import created, was removed."
            )
        written = (
            f"Lines {_line_ranges(self.written)} were written into bank {bank_id!r}; no other "
            "line was"
            if self.written
            else f"No line was written into bank {bank_id!r}"
        )
        if self.unsure:
            written += (
                f" (whether lines {_line_ranges(self.unsure)} were is unknown: the store failed "
                "while writing them)"
            )
        logger.warning("Merge into bank %s failed: %s", bank_id, written)
        return (
            f"{written}. Fix the file and import it again with --merge (lines written again are "
            "replaced)."
        )

    def summary(self) -> TransferSummary:
        assert self.bank is not None
        return TransferSummary(
            self.bank.bank_id,
            self.counts["memory"],
            self.counts["revision"],
            self.counts["document"],
            self.counts["reembedded"],
        )


def _line_ranges(numbers: Sequence[int], *, limit: int = 20) -> str:
    """`1-3, 5, 8-9` for [1, 2, 3, 5, 8, 9]; at most `limit` ranges, then how many more."""
    ranges: list[list[int]] = []
    for number in sorted(set(numbers)):
        if ranges and number == ranges[-1][1] + 1:
            ranges[-1][1] = number
        else:
            ranges.append([number, number])
    shown = [f"{a}-{b}" if b > a else str(a) for a, b in ranges[:limit]]
    more = f" and {len(ranges) - limit} more ranges" if len(ranges) > limit else ""
    return ", ".join(shown) + more


def _configured_model(bank: BankRecord) -> str:
    search = bank.config.get("similarity_search_config") or {}
    return str(search.get("embedding_model") or bank.embedding_model)


async def import_bank(
    engine: MemoryEngine,
    lines: Iterable[str] | AsyncIterable[str],
    *,
    bank_id: str | None = None,
    merge: bool = False,
    embedding_model: str | None = None,
    reembed: bool = False,
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> TransferSummary:
    """Writes an export into the engine's store, keeping every name, time and revision.

    Nothing of the file is trusted: each line is checked as the API checks a request, and every
    key, digest and id form is recomputed from the line's own content (see the module
    docstring, "What import checks"). Into a new bank, an import is all or nothing: when it
    fails, the bank it created is removed. Into an existing bank (`merge`), batches are written
    as they fill, and a failure names the lines written.

    Args:
        engine: The engine over the target store.
        lines: The export's lines (a text file, a list, or an async iterator of lines).
        bank_id: Import under this id instead of the exported one.
        merge: Write into an existing bank with the same embedding model (memories with the
            same id are replaced); also how to resume an interrupted import.
        embedding_model: Give the bank this model and embed every fact with it, instead of
            taking the exported vectors.
        reembed: Compute the vector of each memory whose `vector_digest` does not match (its
            fact was edited, or the export predates digests) from its fact, instead of refusing
            the file.
        batch_size: Memories, revisions and streams per write.
        progress: Called after each write with (memories imported, None).

    Returns:
        What was imported.

    Raises:
        InvalidArgument: A line is malformed or altered (its number is named, never its
            content), or the file ends without its `end` line or with counts that differ from it.
        AlreadyExists: The bank exists and `merge` is not set, or a memory id would hold
            records of two scopes.
        FailedPrecondition: The file is from a newer format, or `merge` into a bank of another
            embedding model.
    """
    if batch_size < 1:
        raise InvalidArgument("batch_size must be positive.", field="batch_size")
    if bank_id is not None:
        Names.parse_bank(f"reasoningEngines/{bank_id}", field="bank_id")
    importer = _Importer(
        engine,
        bank_id=bank_id,
        merge=merge,
        embedding_model=embedding_model,
        reembed=reembed,
        batch_size=batch_size,
        progress=progress,
    )
    try:
        number = 0
        if isinstance(lines, AsyncIterable):
            async for text in lines:
                number += 1
                await importer.line(number, text)
        else:
            for text in lines:
                number += 1
                await importer.line(number, text)
        summary = await importer.finish()
    except BaseException as exc:
        # Cancelled or interrupted too: the clean-up runs to its end first.
        note = await _uncancelled(importer.failed(exc))
        if note and isinstance(exc, AdkMemoryError):
            raise type(exc)(f"{exc.template} {note}", field=exc.field) from exc
        raise
    logger.info(
        "Imported bank %s: %d memories, %d revisions, %d documents, %d re-embedded",
        summary.bank_id,
        summary.memories,
        summary.revisions,
        summary.documents,
        summary.reembedded,
    )
    return summary


async def _uncancelled(work: Awaitable[str]) -> str:
    """Awaits `work` to its end even if the caller is cancelled meanwhile."""
    task = asyncio.ensure_future(work)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done():
                raise
