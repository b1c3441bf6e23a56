"""Export and import of a memory bank as JSON Lines, exactly, between any two stores.

Export and import go through the store layer (`MemoryStore` records), not the public API: the
public `create` would assign new names and times, while a transfer must keep every memory's
name, create/update/expire times, topics, metadata, vector and revisions as they were. So the
same bank read from Chroma and written into Redis (or `memory://`) is the same bank.

The file is one JSON object per line, each with a `kind`, in this order:

* `export`: the header: `format` (`adk-memory-bank`), `version` (1), `exported_at`, `bank_id`.
* `bank`: the bank record: id, config (the wire-form `memoryBankConfig` JSON, snake_case),
  embedding model and dimension, create/update time, display name, description.
* `memory`, then that memory's `revision`s, oldest first, for each live memory in
  `create_time` order. A memory's vector is `embedding_f64`: its float64 values, little-endian,
  base64 (exact, and half the size of decimal text); `export(vectors=False)` leaves it out and
  import re-embeds.
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
revisions) and so are writes (batches of `batch_size` memories and revisions, one `WriteBatch`
each).
"""

from __future__ import annotations

import base64
import json
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np

from adk_memory.embeddings import canonical_model_name
from adk_memory.engine.context import split_config
from adk_memory.engine.ingest import STREAM_KIND, stream_document
from adk_memory.engine.memories import owner_scopes
from adk_memory.engine.profiles import PROFILE_ID_PREFIX, profile_memory_id
from adk_memory.errors import AlreadyExists, FailedPrecondition, InvalidArgument, NotFound
from adk_memory.filters import Condition, Op, partition
from adk_memory.names import validate_revision_id, validate_stored_memory_id
from adk_memory.scope import ScopeKey, profile_scope_key, scope_key, validate_scope
from adk_memory.store import (
    BankRecord,
    MemoryRecord,
    MemoryStore,
    MetadataValue,
    RevisionRecord,
    ScanQuery,
    SortKey,
    TopicRef,
    WriteBatch,
)

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
    "vector_from_text",
    "vector_to_text",
]

logger = logging.getLogger(__name__)

FORMAT = "adk-memory-bank"
"""The `format` of the header line."""
FORMAT_VERSION = 1
"""The version of the line format this module writes (and the highest it reads)."""

DEFAULT_PAGE_SIZE = 500
DEFAULT_BATCH_SIZE = 1000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ASCENDING = (SortKey("create_time", descending=False),)
_PROFILE = "STRUCTURED_PROFILE"
_NATURAL_LANGUAGE = "NATURAL_LANGUAGE_COLLECTION"

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
    if value is None:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{where} is not an ISO 8601 time.", field=where) from None
    if parsed.tzinfo is None:
        raise InvalidArgument(f"{where} has no time zone.", field=where)
    return parsed


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
    decoded: dict[str, MetadataValue] = {}
    for key, value in dict(data or {}).items():
        if not isinstance(value, dict) or len(value) != 1:
            raise InvalidArgument(f"{where}.{key} must hold one typed value.", field=where)
        [(kind, raw)] = value.items()
        if kind == "bool_value" and isinstance(raw, bool):
            decoded[key] = raw
        elif kind == "double_value" and isinstance(raw, int | float) and not isinstance(raw, bool):
            decoded[key] = float(raw)
        elif kind == "timestamp_value":
            decoded[key] = _parse_time(raw, f"{where}.{key}")  # type: ignore[assignment]
        elif kind == "string_value" and isinstance(raw, str):
            decoded[key] = raw
        else:
            raise InvalidArgument(f"{where}.{key} has an unknown value type.", field=where)
    return decoded


def _plain(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    return None if value is None else dict(value)


def _topics_to_json(topics: tuple[TopicRef, ...]) -> list[dict[str, str]]:
    return [
        {"managed": topic.managed} if topic.managed is not None else {"custom": topic.custom or ""}
        for topic in topics
    ]


def _topics_from_json(data: Any) -> tuple[TopicRef, ...]:
    return tuple(TopicRef(managed=item.get("managed"), custom=item.get("custom")) for item in data)


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


def bank_from_json(data: Mapping[str, Any]) -> BankRecord:
    """The bank record of a `bank` line."""
    return BankRecord(
        bank_id=str(data["bank_id"]),
        config=dict(data.get("config") or {}),
        embedding_model=str(data["embedding_model"]),
        embedding_dimension=int(data["embedding_dimension"]),
        create_time=_parse_time(data["create_time"], "bank.create_time"),  # type: ignore[arg-type]
        update_time=_parse_time(data["update_time"], "bank.update_time"),  # type: ignore[arg-type]
        display_name=data.get("display_name"),
        description=data.get("description"),
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
        fits = profile_digest and memory_id == profile_memory_id(scope, str(data.get("schema_id")))
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
    scope = validate_scope(data["scope"])
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
    """A memory record as JSON (the `memory` line without its `kind`)."""
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
    """The memory record of a `memory` line (an empty embedding when it has none)."""
    scope, digest, profile_digest = _checked_scope(data, where)
    raw_vector = data.get("embedding_f64")
    return MemoryRecord(
        memory_id=_checked_id(data, scope, profile_digest, where, revision=False),
        scope_key=digest,
        scope=scope,
        fact=str(data["fact"]),
        embedding=() if raw_vector is None else vector_from_text(raw_vector, where),
        create_time=_parse_time(data["create_time"], f"{where}.create_time"),  # type: ignore[arg-type]
        update_time=_parse_time(data["update_time"], f"{where}.update_time"),  # type: ignore[arg-type]
        expire_time=_parse_time(data.get("expire_time"), f"{where}.expire_time"),
        topics=_topics_from_json(data.get("topics") or ()),
        metadata=_metadata_from_json(data.get("metadata"), f"{where}.metadata"),
        display_name=data.get("display_name"),
        description=data.get("description"),
        memory_type=str(data.get("memory_type") or _NATURAL_LANGUAGE),
        schema_id=data.get("schema_id"),
        structured_data=data.get("structured_data"),
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
    """The revision record of a `revision` line."""
    scope, digest, profile_digest = _checked_scope(data, where)
    return RevisionRecord(
        memory_id=_checked_id(data, scope, profile_digest, where, revision=True),
        revision_id=validate_revision_id(data.get("revision_id"), field=f"{where}.revision_id"),
        scope_key=digest,
        scope=scope,
        fact=str(data["fact"]),
        create_time=_parse_time(data["create_time"], f"{where}.create_time"),  # type: ignore[arg-type]
        expire_time=_parse_time(data.get("expire_time"), f"{where}.expire_time"),
        topics=_topics_from_json(data.get("topics") or ()),
        metadata=_metadata_from_json(data.get("metadata"), f"{where}.metadata"),
        labels={str(k): str(v) for k, v in dict(data.get("labels") or {}).items()},
        extracted_memories=tuple(dict(item) for item in data.get("extracted_memories") or ()),
        deleted=bool(data.get("deleted", False)),
        structured_data=data.get("structured_data"),
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
            store, bank_id, now=now, vectors=vectors, page_size=page_size, page_done=page_done
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
    page_size: int,
    page_done: Callable[[], None],
) -> AsyncIterator[dict[str, Any]]:
    """Each live memory, oldest first, followed by its revisions; `page_done` after a page."""
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
            yield {"kind": "memory", **memory_to_json(found, vector=vectors)}
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


class _Importer:
    """The state of one import: the target bank, its embedder and the pending batch."""

    def __init__(
        self,
        engine: MemoryEngine,
        *,
        bank_id: str | None,
        merge: bool,
        embedding_model: str | None,
        batch_size: int,
        progress: Progress | None,
    ) -> None:
        self.engine = engine
        self.store = engine.store
        self.target = bank_id
        self.merge = merge
        self.embedding_model = embedding_model
        self.batch_size = batch_size
        self.progress = progress
        self.bank: BankRecord | None = None
        self.reembed_all = False
        self.memories: list[MemoryRecord] = []
        self.revisions: list[RevisionRecord] = []
        self.counts = {"memory": 0, "revision": 0, "document": 0, "reembedded": 0}
        self.header = False
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
        if not isinstance(data, dict) or not isinstance(data.get("kind"), str):
            raise InvalidArgument(f"{where} has no `kind`.", field="file")
        kind = data["kind"]
        if self.ended is not None:
            raise InvalidArgument(f"{where} follows the `end` line.", field="file")
        if not self.header:
            self._check_header(data, where)
            return
        try:
            if kind == "bank":
                await self._bank(data)
            elif self.bank is None:
                raise InvalidArgument(f"{where}: the `bank` line must come first.", field="file")
            elif kind == "memory":
                self.memories.append(memory_from_json(data, where=where))
            elif kind == "revision":
                self.revisions.append(revision_from_json(data, where=where))
            elif kind == "document":
                await self._document(data, where)
            elif kind == "end":
                self.ended = data
            else:
                raise InvalidArgument(f"{where} has an unknown kind {kind[:20]!r}.", field="file")
        except KeyError as exc:
            raise InvalidArgument(
                f"{where} lacks the field {exc.args[0]!r}.", field="file"
            ) from None
        if len(self.memories) + len(self.revisions) >= self.batch_size:
            await self.flush()

    def _check_header(self, data: Mapping[str, Any], where: str) -> None:
        if data.get("kind") != "export" or data.get("format") != FORMAT:
            raise InvalidArgument(
                f"{where} is not an adk-memory export header; the file must start with a "
                '`{"kind": "export", "format": "adk-memory-bank", …}` line.',
                field="file",
            )
        version = data.get("version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise FailedPrecondition(
                f"The export has format version {version!r}; this adk-memory reads up to "
                f"{FORMAT_VERSION}. Upgrade adk-memory to import it.",
                field="file",
            )
        self.header = True

    async def _bank(self, data: Mapping[str, Any]) -> None:
        if self.bank is not None:
            raise InvalidArgument("The file holds more than one `bank` line.", field="file")
        exported = bank_from_json(data)
        record = replace(exported, bank_id=self.target or exported.bank_id)
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
            record = existing
        else:
            await self.store.create_bank(record)
        self.bank = record

    async def _document(self, data: Mapping[str, Any], where: str) -> None:
        kind = data["document_kind"]
        if kind != STREAM_KIND:
            raise InvalidArgument(f"{where}: unknown document kind {kind!r:.30}.", field="file")
        assert self.bank is not None
        config, _extensions = split_config(self.bank.config)
        try:
            document = stream_document(str(data["key"]), data["body"], config)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidArgument(f"{where}: a malformed stream document.", field="file") from exc
        await self.store.put_document(
            self.bank.bank_id,
            kind,
            document.key,
            document.body,
            scope_key=document.scope_key,
            due=document.due,
        )
        self.counts["document"] += 1

    async def flush(self) -> None:
        if self.bank is None or not (self.memories or self.revisions):
            return
        bank = self.bank
        missing = [
            index
            for index, record in enumerate(self.memories)
            if self.reembed_all or len(record.embedding) != bank.embedding_dimension
        ]
        if missing:
            embedder = self.engine.context.embedder(self.embedding_model or _configured_model(bank))
            vectors = await embedder.embed_documents([self.memories[i].fact for i in missing])
            for index, vector in zip(missing, vectors, strict=True):
                self.memories[index] = replace(self.memories[index], embedding=vector)
            self.counts["reembedded"] += len(missing)
        await self._check_one_scope_per_id(bank.bank_id)
        batch = WriteBatch(upserts=tuple(self.memories), revisions=tuple(self.revisions))
        await self.store.apply(bank.bank_id, batch)
        self.counts["memory"] += len(self.memories)
        self.counts["revision"] += len(self.revisions)
        self.memories, self.revisions = [], []
        if self.progress is not None:
            self.progress(self.counts["memory"], None)

    async def _check_one_scope_per_id(self, bank_id: str) -> None:
        """Refuses a batch that would give one memory id records of two scopes.

        A memory's revisions belong to its one scope (as for `memories.create`): a merge must not
        add another scope's memory or revisions to an id whose history the bank holds.
        """
        incoming: dict[str, set[ScopeKey]] = {}
        items: list[MemoryRecord | RevisionRecord] = [*self.memories, *self.revisions]
        for item in items:
            incoming.setdefault(item.memory_id, set()).add(item.scope_key)
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

    def summary(self) -> TransferSummary:
        assert self.bank is not None
        return TransferSummary(
            self.bank.bank_id,
            self.counts["memory"],
            self.counts["revision"],
            self.counts["document"],
            self.counts["reembedded"],
        )


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
    batch_size: int = DEFAULT_BATCH_SIZE,
    progress: Progress | None = None,
) -> TransferSummary:
    """Writes an export into the engine's store, keeping every name, time and revision.

    Args:
        engine: The engine over the target store.
        lines: The export's lines (a text file, a list, or an async iterator of lines).
        bank_id: Import under this id instead of the exported one.
        merge: Write into an existing bank with the same embedding model (memories with the
            same id are replaced); also how to resume an interrupted import.
        embedding_model: Give the bank this model and embed every fact with it, instead of
            taking the exported vectors.
        batch_size: Memories and revisions per write.
        progress: Called after each write with (memories imported, None).

    Returns:
        What was imported.

    Raises:
        InvalidArgument: A line is malformed (its number is named, never its content), or the
            file ends without its `end` line or with counts that differ from it (then what the
            file held has been written).
        AlreadyExists: The bank exists and `merge` is not set.
        FailedPrecondition: The file is from a newer format, or `merge` into a bank of another
            embedding model.
    """
    if batch_size < 1:
        raise InvalidArgument("batch_size must be positive.", field="batch_size")
    importer = _Importer(
        engine,
        bank_id=bank_id,
        merge=merge,
        embedding_model=embedding_model,
        batch_size=batch_size,
        progress=progress,
    )
    number = 0
    if isinstance(lines, AsyncIterable):
        async for text in lines:
            number += 1
            await importer.line(number, text)
    else:
        for text in lines:
            number += 1
            await importer.line(number, text)
    if importer.bank is None:
        raise InvalidArgument("The file holds no bank; is it an adk-memory export?", field="file")
    await importer.flush()
    summary = importer.summary()
    ended = importer.ended
    if ended is None:
        raise InvalidArgument(
            f"The file ends before its `end` line: the export was cut short. Imported what it "
            f"held ({summary.memories} memories, {summary.revisions} revisions) into bank "
            f"{summary.bank_id!r}; export again and re-import with --merge.",
            field="file",
        )
    expected = (ended.get("memories"), ended.get("revisions"), ended.get("documents"))
    if expected != (summary.memories, summary.revisions, summary.documents):
        raise InvalidArgument(
            f"The file's `end` line announces {expected[0]} memories, {expected[1]} revisions "
            f"and {expected[2]} documents, but it held {summary.memories}, {summary.revisions} "
            f"and {summary.documents}; the file was altered.",
            field="file",
        )
    logger.info(
        "Imported bank %s: %d memories, %d revisions, %d documents, %d re-embedded",
        summary.bank_id,
        summary.memories,
        summary.revisions,
        summary.documents,
        summary.reembedded,
    )
    return summary
