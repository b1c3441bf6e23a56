"""How records become Chroma rows and back: ids, documents, metadata fields and payloads.

Every Chroma row carries a JSON payload (`p`) from which the record is rebuilt exactly, plus
flat metadata fields that exist only so that `where` clauses can select rows. User text is only
ever a *value* of such a field, never part of a field name: a user's metadata key or scope key
becomes a field name through a digest (`m.s.<digest>`, `s.<digest>`), so no key can collide with a
system field or with another type's field.

Memory rows (collection `<prefix>.<bank>.mem`, id = memory id, document = fact):

=============  ==============================================================================
`sk`           the `ScopeKey` digest; the only way a scope is matched (`$eq`)
`live_us`      expiry in microseconds since the epoch, `NEVER_US` when the memory never expires
`ct_us` …      create / update time in microseconds; `et_us` expiry (only when set)
`fh`           sha256 of the fact (`fact =` and `!=`)
`tp`           topic tokens `m:<ENUM>` / `c:<label>` (plus `_`, as Chroma refuses empty lists)
`mk`           names of the optional fields the row has (plus `_`), so that a negated filter
               can match a missing key; `<field>!nan`, `!+inf`, `!-inf` for numbers Chroma
               cannot index
`m.s.<d>` …    metadata by type: string `m.s`, number `m.n`, bool `m.b`, timestamp `m.t`
               (whole seconds since the epoch); `<d>` is a digest of the key
`s.<d>`        scope values, so that list and purge filters can name them
`p`            the JSON payload
=============  ==============================================================================

Revision, operation, engine-document and journal rows live in `<prefix>.<bank>.aux` (told apart
by `k`), bank rows in `<prefix>.banks`; those collections are never searched by vector, so their
rows carry a 1-d placeholder vector. A revision row (id `r:<len>:<memory>:<revision>`) also has
`mid`, its memory id, `live_us`, and `mh`, 48 bits of a digest of the memory id: Chroma cannot
compare strings, so the ids of memories with revisions are paged by ranges of `mh`.

Journal rows (the write-ahead journal of `apply`; `_store` explains the protocol). What a replay
must (re-)write is serialised as one ASCII JSON text,
`{"v": 1, "m": [[id, vector, fact, metadata], …], "r": [[id, metadata], …], "d": [id, …]}`,
vectors as base64 of little-endian float32 (what Chroma stores, so a replayed vector is
bit-identical to a directly written one), cut into part rows `<head>:<i>` (`k` = `jpart`, `p` =
the text) under a commit row `<head>` (`jb` = batch id, `jn` = number of parts); a text of at
most `inline_chars` is kept in the commit row itself (`jn` = 0, `p` = the text). Homes:

* `j:slot` (`k` = `jslot`), in aux: the bank's journal slot, overwritten by each batch that writes
  or deletes a few memories, written together with its revisions; it holds the memory rows and
  deletions (no revisions), and its probes `jw` (its first memory row's id, each of its memory rows
  carrying `jb`) and `jx` (the last id it deletes), "" for none (`slot_complete`);
* `j:slot` (`k` = `jslot`) in the memory collection and `j:done` (`k` = `jdone`) in aux: the
  slot of a batch of many memory rows (of every batch before issue 18's fast writes), written
  with the memories (a unit vector of the bank's dimension, no `sk` or `live_us`, so no memory
  read matches it); it holds the revisions and deletions, and is pending while `j:done` names
  another batch;
* `j:<batch>` (`k` = `jnl`), in aux: the journal of a batch too large for one request, deleted
  once applied.

Scope index rows (layout 2), in aux, written by the batch that changes the scope: with its
revisions, so they are journaled and replayed with them (`_store`, "Layout"). Per scope digest
`<sk>`:

* `x:<sk>` (`k` = `xh`): the scope's head; `v`, its version, a new unique token at every write
  that inserts, replaces or deletes a memory of the scope (`scope_version`);
* `x:<sk>:<b>` (`k` = `xb`), `b` in [0, SCOPE_BUCKETS): `p` = JSON `{memory id: live_us}` of the
  scope's memories whose id falls in bucket `b` (`scope_bucket`), so a write rewrites one
  bucket, not the whole list. An id listed whose memory is gone is harmless (reads fetch by id).

They are aux rows (1-d placeholder vectors) because Chroma re-indexes the vector of every row an
upsert replaces: about 4 ms per 384-d row against 0.2 ms per 1-d row. `j:layout` (`k` =
`layout`, `v` = `LAYOUT_VERSION`) in aux marks a bank whose index is complete; a bank without it
is indexed on first use (`_store`, "Migration").
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

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
    "NEVER_US",
    "Row",
    "bank_row",
    "decode_bank",
    "decode_document",
    "decode_journal",
    "NewerJournal",
    "decode_memory",
    "decode_operation",
    "decode_revision",
    "digest",
    "document_id",
    "document_row",
    "encoding",
    "batch_head_id",
    "bucket_ids",
    "decode_bucket",
    "index_rows",
    "layout_row",
    "scope_bucket",
    "scope_bucket_id",
    "scope_head_id",
    "done_row",
    "journal_rows",
    "part_id",
    "memory_row",
    "memory_hash",
    "metadata_field",
    "micros",
    "operation_id",
    "operation_row",
    "revision_id",
    "revision_memory_id",
    "revision_row",
    "scope_field",
    "special_token",
    "topic_token",
]

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
NEVER_US = 2**62
"""`live_us` of a memory or revision that never expires (year ~148,000; fits Chroma's int64)."""
SENTINEL = "_"
"""First element of every list field: Chroma refuses empty lists."""

# Field names of memory rows; see the module docstring.
SCOPE_KEY = "sk"
LIVE_US = "live_us"
CREATE_US = "ct_us"
UPDATE_US = "ut_us"
EXPIRE_US = "et_us"
FACT_HASH = "fh"
TOPICS = "tp"
PRESENT = "mk"
PAYLOAD = "p"
# Aux and registry rows.
KIND = "k"
MEMORY_ID = "mid"
MEMORY_HASH = "mh"
HASH_SPACE = 2**48
"""`mh` values lie in [0, HASH_SPACE): exact in Chroma's int64 and in a float64."""
STATE = "st"
KIND_REVISION = "rev"
KIND_OPERATION = "op"
KIND_BANK = "bank"
KIND_DOCUMENT = "doc"
DOCUMENT_KIND = "dk"
KIND_JOURNAL = "jnl"
KIND_JOURNAL_SLOT = "jslot"
KIND_JOURNAL_PART = "jpart"
KIND_JOURNAL_DONE = "jdone"
JOURNAL_BATCH = "jb"
JOURNAL_PARTS = "jn"
JOURNAL_VERSION = 1
JOURNAL_WRITTEN = "jw"
"""Of a slot journal: the id of one memory its batch writes (each written row carries `jb`)."""
JOURNAL_DELETED = "jx"
"""Of a slot journal: the id of the last memory its batch deletes."""
SLOT_ID = "j:slot"
"""Commit row of a bank's journal slot in aux (one per bank, overwritten per batch), and of the
memory collection's slot (batches of many memories), closed by `DONE_ID`."""
DONE_ID = "j:done"
"""Aux row naming the last batch whose slot journal in the memory collection was completed."""
KIND_SCOPE_HEAD = "xh"
KIND_SCOPE_BUCKET = "xb"
KIND_LAYOUT = "layout"
SCOPE_VERSION = "v"
SCOPE_BUCKETS = 16
"""Bucket rows per scope: a write of one memory in a scope of n rewrites about n / 16 entries."""
LAYOUT_ID = "j:layout"
LAYOUT_VERSION = 2
"""1: no scope index (before issue 18); 2: scope index rows in the memory collection."""
REBUILD_ID = "i:rebuild"
"""Never a row (no other id starts with `i:`, no memory id has a colon): deleted to make Chroma
rebuild a vector index it evicted (`Chroma.get`)."""
STATE_LIVE = "live"
STATE_DELETING = "deleting"

_NATURAL_LANGUAGE = "NATURAL_LANGUAGE_COLLECTION"
"""`memory_type` of rows written before profiles existed (their payload has no `mt`)."""

_TYPE_TAGS = {"string": "s", "number": "n", "bool": "b", "timestamp": "t"}

Row = tuple[str, list[float], str | None, dict[str, Any]]
"""(id, embedding, document, metadata) as Chroma takes them."""


def digest(text: str) -> str:
    """A 128-bit hex digest of user text, for field names (lone surrogates are tolerated)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def micros(when: datetime) -> int:
    """Microseconds since the epoch, exactly (a naive datetime is taken as UTC)."""
    aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(microseconds=1)


def metadata_field(kind: str, key: str) -> str:
    """The field holding metadata `key` of type `kind` (string, number, bool or timestamp)."""
    return f"m.{_TYPE_TAGS[kind]}.{digest(key)}"


def scope_field(key: str) -> str:
    """The field holding the value of scope key `key`."""
    return f"s.{digest(key)}"


def special_token(field: str, value: float) -> str:
    """The `mk` token marking a number Chroma cannot index (NaN or an infinity)."""
    if math.isnan(value):
        return f"{field}!nan"
    return f"{field}!{'+' if value > 0 else '-'}inf"


def topic_token(*, managed: str | None = None, custom: str | None = None) -> str:
    """The `tp` token of a managed topic or a custom label."""
    return f"m:{managed}" if managed is not None else f"c:{custom}"


def revision_id(memory_id: str, rev_id: str) -> str:
    """Chroma id of a revision row; the length prefix keeps any pair of ids distinct."""
    return f"r:{len(memory_id)}:{memory_id}:{rev_id}"


def revision_memory_id(row_id: str) -> str:
    """The memory id inside the Chroma id of a revision row (`revision_id`'s inverse)."""
    _kind, length, rest = row_id.split(":", 2)
    return rest[: int(length)]


def memory_hash(memory_id: str) -> int:
    """The `mh` of a memory's revision rows: its place in `list_revision_memory_ids`."""
    return int(digest(memory_id)[:12], 16)


def document_id(kind: str, key: str) -> str:
    """Chroma id of an engine document row."""
    return f"d:{len(kind)}:{kind}:{key}"


def operation_id(operation_path: str) -> str:
    """Chroma id of an operation row."""
    return f"o:{operation_path}"


def placeholder_vector(row_id: str) -> list[float]:
    """A 1-d vector for rows never searched by vector, spread so HNSW sees no duplicates."""
    return [int(digest(row_id)[:8], 16) / 2**32]


# Memories


def memory_row(record: MemoryRecord) -> Row:
    """The Chroma row of a memory."""
    present = [SENTINEL]
    meta: dict[str, Any] = {
        SCOPE_KEY: record.scope_key,
        CREATE_US: micros(record.create_time),
        UPDATE_US: micros(record.update_time),
        LIVE_US: NEVER_US if record.expire_time is None else micros(record.expire_time),
        FACT_HASH: digest(record.fact),
        TOPICS: [SENTINEL]
        + sorted(
            {topic_token(managed=t.managed) for t in record.topics if t.managed is not None}
            | {topic_token(custom=t.custom) for t in record.topics if t.custom is not None}
        ),
    }
    if record.expire_time is not None:
        meta[EXPIRE_US] = meta[LIVE_US]
        present.append(EXPIRE_US)
    for scope_name, scope_value in record.scope.items():
        meta[scope_field(scope_name)] = scope_value
    for key, value in record.metadata.items():
        kind, indexed = _index_value(value)
        field = metadata_field(kind, key)
        present.append(field)
        if isinstance(indexed, float) and not math.isfinite(indexed):
            present.append(special_token(field, indexed))  # Chroma drops non-finite numbers
        else:
            meta[field] = indexed
    meta[PRESENT] = present
    meta[PAYLOAD] = _dumps(
        {
            "scope": dict(record.scope),
            "ct": record.create_time.isoformat(),
            "ut": record.update_time.isoformat(),
            "et": _iso(record.expire_time),
            "topics": _topics(record.topics),
            "md": _metadata(record.metadata),
            "dn": record.display_name,
            "ds": record.description,
            "mt": record.memory_type,
            "sid": record.schema_id,
            "sd": None if record.structured_data is None else dict(record.structured_data),
        }
    )
    return record.memory_id, [float(v) for v in record.embedding], record.fact, meta


def decode_memory(
    memory_id: str,
    document: str | None,
    meta: Mapping[str, Any],
    embedding: Any = None,
) -> MemoryRecord:
    """The memory of a Chroma row; `embedding` is () when the row was read without vectors."""
    payload = json.loads(meta[PAYLOAD])
    return MemoryRecord(
        memory_id=memory_id,
        scope_key=ScopeKey(str(meta[SCOPE_KEY])),
        scope=payload["scope"],
        fact=document or "",
        embedding=() if embedding is None else tuple(np.asarray(embedding, np.float64).tolist()),
        create_time=datetime.fromisoformat(payload["ct"]),
        update_time=datetime.fromisoformat(payload["ut"]),
        expire_time=_from_iso(payload["et"]),
        topics=_from_topics(payload["topics"]),
        metadata=_from_metadata(payload["md"]),
        display_name=payload["dn"],
        description=payload["ds"],
        memory_type=payload.get("mt", _NATURAL_LANGUAGE),
        schema_id=payload.get("sid"),
        structured_data=payload.get("sd"),
    )


# Revisions, operations, banks


def revision_row(record: RevisionRecord) -> Row:
    """The aux row of a revision."""
    row_id = revision_id(record.memory_id, record.revision_id)
    meta = {
        KIND: KIND_REVISION,
        MEMORY_ID: record.memory_id,
        MEMORY_HASH: memory_hash(record.memory_id),
        LIVE_US: NEVER_US if record.expire_time is None else micros(record.expire_time),
        PAYLOAD: _dumps(
            {
                "mid": record.memory_id,
                "rid": record.revision_id,
                "sk": record.scope_key,
                "scope": dict(record.scope),
                "fact": record.fact,
                "ct": record.create_time.isoformat(),
                "et": _iso(record.expire_time),
                "topics": _topics(record.topics),
                "md": _metadata(record.metadata),
                "labels": dict(record.labels),
                "extracted": [dict(item) for item in record.extracted_memories],
                "deleted": record.deleted,
                "sd": None if record.structured_data is None else dict(record.structured_data),
            }
        ),
    }
    return row_id, placeholder_vector(row_id), None, meta


def decode_revision(meta: Mapping[str, Any]) -> RevisionRecord:
    """The revision of an aux row."""
    payload = json.loads(meta[PAYLOAD])
    return RevisionRecord(
        memory_id=payload["mid"],
        revision_id=payload["rid"],
        scope_key=ScopeKey(payload["sk"]),
        scope=payload["scope"],
        fact=payload["fact"],
        create_time=datetime.fromisoformat(payload["ct"]),
        expire_time=_from_iso(payload["et"]),
        topics=_from_topics(payload["topics"]),
        metadata=_from_metadata(payload["md"]),
        labels=payload["labels"],
        extracted_memories=tuple(payload["extracted"]),
        deleted=payload["deleted"],
        structured_data=payload.get("sd"),
    )


def operation_row(record: OperationRecord) -> Row:
    """The aux row of an operation."""
    row_id = operation_id(record.operation_path)
    meta = {
        KIND: KIND_OPERATION,
        PAYLOAD: _dumps(
            {
                "path": record.operation_path,
                "done": record.done,
                "payload": dict(record.payload),
                "ct": record.create_time.isoformat(),
            }
        ),
    }
    return row_id, placeholder_vector(row_id), None, meta


def decode_operation(bank_id: str, meta: Mapping[str, Any]) -> OperationRecord:
    """The operation of an aux row."""
    payload = json.loads(meta[PAYLOAD])
    return OperationRecord(
        bank_id=bank_id,
        operation_path=payload["path"],
        done=payload["done"],
        payload=payload["payload"],
        create_time=datetime.fromisoformat(payload["ct"]),
    )


def document_row(kind: str, key: str, body: Mapping[str, Any]) -> Row:
    """The aux row of an engine document (a JSON mapping kept per kind and key)."""
    row_id = document_id(kind, key)
    meta = {KIND: KIND_DOCUMENT, DOCUMENT_KIND: kind, PAYLOAD: _dumps({"key": key, "body": body})}
    return row_id, placeholder_vector(row_id), None, meta


def decode_document(meta: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The (key, body) of a document row."""
    payload = json.loads(meta[PAYLOAD])
    return payload["key"], payload["body"]


def bank_row(record: BankRecord, *, state: str = STATE_LIVE) -> Row:
    """The registry row of a bank (`state` marks a delete in progress)."""
    meta = {
        KIND: KIND_BANK,
        STATE: state,
        PAYLOAD: _dumps(
            {
                "config": record.config,
                "model": record.embedding_model,
                "dim": record.embedding_dimension,
                "ct": record.create_time.isoformat(),
                "ut": record.update_time.isoformat(),
                "dn": record.display_name,
                "ds": record.description,
            }
        ),
    }
    return record.bank_id, placeholder_vector(record.bank_id), None, meta


def decode_bank(bank_id: str, meta: Mapping[str, Any]) -> BankRecord:
    """The bank of a registry row."""
    payload = json.loads(meta[PAYLOAD])
    return BankRecord(
        bank_id=bank_id,
        config=payload["config"],
        embedding_model=payload["model"],
        embedding_dimension=payload["dim"],
        create_time=datetime.fromisoformat(payload["ct"]),
        update_time=datetime.fromisoformat(payload["ut"]),
        display_name=payload["dn"],
        description=payload["ds"],
    )


# The scope index


def scope_head_id(scope_key: str) -> str:
    """Id of a scope's head row (its version) in the memory collection."""
    return f"x:{scope_key}"


def scope_bucket_id(scope_key: str, bucket: int) -> str:
    """Id of one bucket row of a scope's index."""
    return f"x:{scope_key}:{bucket}"


def scope_bucket(memory_id: str) -> int:
    """The bucket of a scope's index that lists `memory_id`."""
    return int(digest(memory_id)[:8], 16) % SCOPE_BUCKETS


def bucket_ids(scope_key: str) -> list[str]:
    """The ids of every bucket row of a scope's index."""
    return [scope_bucket_id(scope_key, bucket) for bucket in range(SCOPE_BUCKETS)]


def index_rows(scope_key: str, version: str, buckets: Mapping[int, Mapping[str, int]]) -> list[Row]:
    """The head row of a scope with `version`, and the bucket rows given (`{id: live_us}`)."""
    head_id = scope_head_id(scope_key)
    head = {KIND: KIND_SCOPE_HEAD, SCOPE_VERSION: version}
    rows: list[Row] = [(head_id, placeholder_vector(head_id), None, head)]
    for bucket, members in sorted(buckets.items()):
        row_id = scope_bucket_id(scope_key, bucket)
        meta = {KIND: KIND_SCOPE_BUCKET, PAYLOAD: _dumps(dict(members))}
        rows.append((row_id, placeholder_vector(row_id), None, meta))
    return rows


def decode_bucket(meta: Mapping[str, Any]) -> dict[str, int]:
    """The `{memory id: live_us}` of a bucket row."""
    members: dict[str, int] = json.loads(meta[PAYLOAD])
    return members


def layout_row() -> Row:
    """The aux row marking a bank whose scope index is complete."""
    meta = {KIND: KIND_LAYOUT, SCOPE_VERSION: LAYOUT_VERSION}
    return LAYOUT_ID, placeholder_vector(LAYOUT_ID), None, meta


# The write-ahead journal


def journal_rows(
    head_id: str,
    batch_id: str,
    memory_rows: list[Row],
    revision_rows: list[Row],
    deletes: list[str],
    *,
    kind: str,
    chunk_chars: int,
    inline_chars: int = 0,
    dimension: int | None = None,
) -> list[Row]:
    """The journal of one batch: its part rows, then its commit row (see the module docstring).

    Args:
        head_id: Id of the commit row: `batch_head_id(batch_id)`, or `SLOT_ID` for the journal
            slot of a memory collection; part `i` is `part_id(head_id, i)`.
        batch_id: Unique per batch.
        memory_rows: Memory rows a replay must (re-)write.
        revision_rows: Aux rows (revisions and documents) a replay must (re-)write.
        deletes: Memory ids a replay must (re-)delete. Parts of the batch written in the same
            Chroma call as the journal are left out of all three.
        kind: `KIND_JOURNAL` or `KIND_JOURNAL_SLOT`, the `k` of the commit row.
        chunk_chars: Journal text per part row.
        inline_chars: A text up to this long goes into the commit row itself (`jn` = 0), which
            is then the only row.
        dimension: None for a journal in the aux collection (1-d placeholder vectors), else the
            dimension of the memory collection that holds it.

    Raises:
        TypeError, ValueError: A metadata value JSON cannot hold.
    """
    text = json.dumps(
        {
            "v": JOURNAL_VERSION,
            "m": [
                [row_id, _pack_vector(vector), document, meta]
                for row_id, vector, document, meta in memory_rows
            ],
            "r": [[row_id, meta] for row_id, _vector, _document, meta in revision_rows],
            "d": deletes,
        },
        ensure_ascii=True,  # one character is one byte, so parts are bounded in bytes too
        allow_nan=False,
        separators=(",", ":"),
    )
    head: dict[str, Any] = {KIND: kind, JOURNAL_BATCH: batch_id}
    if len(text) <= inline_chars:  # the common case: one row
        head.update({JOURNAL_PARTS: 0, PAYLOAD: text})
        return [(head_id, _journal_vector(head_id, dimension), None, head)]
    rows: list[Row] = []
    for index, start in enumerate(range(0, len(text), chunk_chars), start=1):
        part = part_id(head_id, index)
        meta = {
            KIND: KIND_JOURNAL_PART,
            JOURNAL_BATCH: batch_id,
            PAYLOAD: text[start : start + chunk_chars],
        }
        rows.append((part, _journal_vector(part, dimension), None, meta))
    head[JOURNAL_PARTS] = len(rows)
    rows.append((head_id, _journal_vector(head_id, dimension), None, head))
    return rows


def slot_rows(
    batch_id: str,
    memory_rows: list[Row],
    deletes: list[str],
    *,
    chunk_chars: int,
    inline_chars: int,
) -> list[Row]:
    """A bank's slot journal in aux: the memory rows and deletions of a batch, with its probes.

    The memory rows must carry `jb` = `batch_id`. The probes (`jw`, `jx`) tell a completed batch
    from an interrupted one without a closing write: the memory rows are written in one call and
    the deletions after it, in order, so the batch is complete once its first memory row carries
    its `jb` and its last deleted id is gone.
    """
    rows = journal_rows(
        SLOT_ID,
        batch_id,
        memory_rows,
        [],
        deletes,
        kind=KIND_JOURNAL_SLOT,
        chunk_chars=chunk_chars,
        inline_chars=inline_chars,
    )
    row_id, vector, document, head = rows[-1]
    probes = {  # "" for none: an upsert keeps the fields of the replaced row that it lacks
        JOURNAL_WRITTEN: memory_rows[0][0] if memory_rows else "",
        JOURNAL_DELETED: deletes[-1] if deletes else "",
    }
    rows[-1] = (row_id, vector, document, {**head, **probes})
    return rows


def slot_complete(head: Mapping[str, Any], probed: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the batch of a slot journal is fully written, from the memory rows it probes.

    `probed`: the metadata of the memory rows among the head's probes that exist, by id.
    """
    written = str(head[JOURNAL_WRITTEN])
    if written:
        row = probed.get(written)
        if row is None or row.get(JOURNAL_BATCH) != head[JOURNAL_BATCH]:
            return False
    deleted = str(head[JOURNAL_DELETED])
    return not deleted or deleted not in probed


def slot_probes(head: Mapping[str, Any]) -> list[str]:
    """The memory ids `slot_complete` needs to read."""
    return [str(head[key]) for key in (JOURNAL_WRITTEN, JOURNAL_DELETED) if head[key]]


def done_row(batch_id: str) -> Row:
    """The aux row naming the last batch whose slot journal was completed."""
    meta = {KIND: KIND_JOURNAL_DONE, JOURNAL_BATCH: batch_id}
    return DONE_ID, placeholder_vector(DONE_ID), None, meta


def batch_head_id(batch_id: str) -> str:
    """Id of the commit row of a batch's journal in the aux collection."""
    return f"j:{batch_id}"


def part_id(head_id: str, index: int) -> str:
    """Id of part row `index` (from 1) of the journal whose commit row is `head_id`."""
    return f"{head_id}:{index}"


class NewerJournal(ValueError):
    """A journal written by a later version of the backend, in a format this one cannot read."""


def decode_journal(chunks: list[str]) -> tuple[list[Row], list[Row], list[str]]:
    """The memory rows, revision rows and deleted ids of a journal, from its parts in order.

    Every row is checked to have the shape this module writes and chromadb's client accepts
    (unique non-empty string ids, a vector, metadata of scalars or non-empty lists of one
    scalar type under non-empty keys): the client refuses anything else with a `ValueError`,
    which cannot be told from a failing Chroma, so a replay would fail at every attempt.

    Raises:
        NewerJournal: The journal is of a later format.
        ValueError: The journal is not one any version of the backend writes (corrupt).
    """
    body = json.loads("".join(chunks))
    version = body.get("v") if isinstance(body, dict) else None
    if isinstance(version, int) and version > JOURNAL_VERSION:
        raise NewerJournal(f"journal format {version}, this version reads {JOURNAL_VERSION}")
    if version != JOURNAL_VERSION:
        raise ValueError(f"journal format {version!r}, expected {JOURNAL_VERSION}")
    memory_rows: list[Row] = [
        (_row_id(row_id), _unpack_vector(vector), _document(document), _row_meta(meta))
        for row_id, vector, document, meta in body["m"]
    ]
    revision_rows: list[Row] = [
        (_row_id(row_id), placeholder_vector(row_id), None, _row_meta(meta))
        for row_id, meta in body["r"]
    ]
    deletes = [_row_id(row_id) for row_id in body["d"]]
    for rows in (memory_rows, revision_rows):
        if len({row[0] for row in rows}) != len(rows) or any(not row[1] for row in rows):
            raise ValueError("a journal names a row twice, or a row without a vector")
    return memory_rows, revision_rows, deletes


def _row_id(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError("a journal row id is not a string")
    return value


def _document(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise ValueError("a journal row's document is not a string")
    return value


def _row_meta(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and key and _meta_value(item) for key, item in value.items()
    ):
        raise ValueError("a journal row's metadata is not what Chroma takes")
    return value


def _meta_value(item: Any) -> bool:
    """Whether chromadb's client takes `item` as a metadata value (None removes the field)."""
    if item is None or isinstance(item, str | int | float):  # bool is an int
        return True
    return (
        isinstance(item, list)
        and bool(item)
        and isinstance(item[0], str | int | float)
        and all(type(element) is type(item[0]) for element in item)
    )


def _journal_vector(row_id: str, dimension: int | None) -> list[float]:
    """The vector of a journal row: a placeholder in aux, else a unit vector of `dimension`.

    In a memory collection the direction is drawn from the id (the row has no `sk` or `live_us`,
    so no memory read ever matches it).
    """
    if dimension is None:
        return placeholder_vector(row_id)
    direction = np.random.default_rng(int(digest(row_id)[:16], 16)).normal(size=dimension)
    values: list[float] = (direction / np.linalg.norm(direction)).tolist()
    return values


def _pack_vector(vector: list[float]) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _unpack_vector(text: str) -> list[float]:
    values: list[float] = np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4").tolist()
    return values


# Helpers


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.isoformat()


def _from_iso(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)


def _topics(topics: tuple[TopicRef, ...]) -> list[list[str | None]]:
    return [[t.managed, t.custom] for t in topics]


def _from_topics(items: list[list[str | None]]) -> tuple[TopicRef, ...]:
    return tuple(TopicRef(managed=managed, custom=custom) for managed, custom in items)


def _index_value(value: MetadataValue) -> tuple[str, str | float | bool | int]:
    """The metadata type of a value and what its filter field holds."""
    if isinstance(value, bool):  # bool is an int subclass: check it first
        return "bool", value
    if isinstance(value, datetime):
        return "timestamp", micros(value) // 1_000_000  # SPEC §3: timestamps by whole seconds
    if isinstance(value, int | float):
        return "number", float(value)
    return "string", str(value)


def _metadata(metadata: Mapping[str, MetadataValue]) -> list[list[Any]]:
    items: list[list[Any]] = []
    for key, value in metadata.items():
        if isinstance(value, bool):
            items.append([key, "b", value])
        elif isinstance(value, datetime):
            items.append([key, "t", value.isoformat()])
        elif isinstance(value, int | float):
            items.append([key, "n", float(value)])
        else:
            items.append([key, "s", str(value)])
    return items


def _from_metadata(items: list[list[Any]]) -> dict[str, MetadataValue]:
    metadata: dict[str, MetadataValue] = {}
    for key, tag, value in items:
        if tag == "t":
            metadata[key] = datetime.fromisoformat(value)
        elif tag == "n":
            metadata[key] = float(value)
        else:
            metadata[key] = value
    return metadata


@contextlib.contextmanager
def encoding(what: str) -> Iterator[None]:
    """Turns a value that JSON cannot hold into `InvalidArgument`, before anything is written."""
    try:
        yield
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(
            f"{what} holds a value that cannot be stored as JSON ({type(exc).__name__}); use "
            "strings, numbers, booleans, lists and mappings."
        ) from exc
