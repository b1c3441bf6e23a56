"""IngestEvents: events buffered per (bank, scope, stream) in the store, flushed by trigger rules.

A stream is one store document. `ingest` appends events (ignoring an `event_id` already seen,
within a bounded retention), stores the request's trigger config on the stream and records a
pending operation. A stream is due when `force_flush` was asked, when no trigger rule applies
(neither the stream's nor the bank's `generation_trigger_config`), when `event_count` events are
pending, after `idle_duration` without events, or every `fixed_interval`. `flush` runs
GenerateMemories over the pending events (plus the last `overlap_event_count` processed ones)
under the stream's lock; the stream, updated to record those events as flushed, is written in
the same atomic `WriteBatch` as the memories they produce (alone when they produce none). Then
the pending operations are completed (reports, retried through a store restart).
Nothing is lost across restarts: events are in the store before `ingest` returns, and any
process's scheduler can flush them; the stream's lock lets one flush at a time take them.

Every write of a stream carries its due time (`due_at`: when `is_due` turns true if nothing else
is written) into the store's due index, so a scheduler finds what is due without reading every
bank, and its scope key, so `streams(scope=...)` reads only that scope's streams. An index entry
earlier than its stream is harmless: `flush` re-checks under the lock and corrects it. A bank
config change lowers its streams' entries (`reindex_streams`), and a stream write re-reads the
config after it, so a write that read the old config cannot undo that; the scheduler's
maintenance re-checks every bank once per sweep cycle, which also indexes streams written before
the index existed.

Each event is generated from exactly once: a flush's memories and its stream are stored
together or not at all. When the batch's store call fails in a way that hides whether it
committed (`StoreUnavailable`), the flush re-reads the stream: if it carries the flush's
`last_flush_id` the flush was stored, else the failure is recorded on the stream (if the store
cannot be read, nothing is written and the next flush reads whichever state is stored).

A failed flush keeps its events and is retried with back-off (2 s doubling to 5 min) for as long
as the stream exists; its last error is recorded on the stream (`streams` lists it). After
`MAX_FLUSH_FAILURES` failures the stream's pending operations are reported failed, so a caller
waiting on one learns of it, but the retries go on.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import hashlib
import logging
import re
import secrets
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from google.genai import types as genai_types

from adk_memory import types
from adk_memory.bounds import bounded_event_time
from adk_memory.engine.context import EngineContext, LoadedBank
from adk_memory.engine.convert import (
    check_unicode,
    parse_duration,
    parse_model,
    to_utc,
)
from adk_memory.engine.generate import GenerateOps, check_generate_settings
from adk_memory.errors import (
    Aborted,
    AdkMemoryError,
    InvalidArgument,
    ResourceExhausted,
    StoreUnavailable,
)
from adk_memory.scope import scope_key, validate_scope
from adk_memory.store import DocumentRecord, DueDocument, OperationRecord, WriteBatch

__all__ = [
    "STREAM_KIND",
    "IngestOps",
    "IngestRequest",
    "IngestResult",
    "StreamStatus",
    "TriggerRule",
    "checked_stream",
    "due_at",
    "reindex_streams",
    "stream_document",
]

logger = logging.getLogger(__name__)

STREAM_KIND = "stream"
SEEN_ID_RETENTION = 10_000
MAX_EVENTS_PER_REQUEST = 1_000
MAX_PENDING_EVENTS = 10_000
MAX_FLUSH_FAILURES = 5
MAX_RETRY_SECONDS = 300
_COMMIT_RETRY_DELAYS = (0.1, 0.3, 1.0, 2.0, 4.0)
"""Pauses between attempts to complete the operations of a stored flush (7.4 s in all)."""
_OPERATION_PATH = re.compile(r"operations/[0-9a-f]{16}")
"""The form of the operation names `ingest` records on a stream (`operations/{16 hex}`)."""
_FLUSH_ID = re.compile(r"[0-9a-f]{16}")
_IMMEDIATELY = datetime(1970, 1, 1, tzinfo=UTC)
"""The due time of a stream due whenever it is looked at (before any clock's `now`)."""
_GENERATE_FIELDS = (
    "revision_labels",
    "revision_expire_time",
    "revision_ttl",
    "disable_memory_revisions",
    "metadata",
    "metadata_merge_strategy",
)


@dataclass(frozen=True, slots=True)
class TriggerRule:
    """A stream's generation rule; all None means "flush at once"."""

    event_count: int | None = None
    fixed_interval: timedelta | None = None
    idle_duration: timedelta | None = None
    overlap_event_count: int = 0

    @classmethod
    def from_config(
        cls, config: types.MemoryGenerationTriggerConfig | None, *, field: str
    ) -> TriggerRule | None:
        """The rule of a trigger config, or None when it has no `generation_rule`."""
        rule = config.generation_rule if config else None
        if rule is None:
            return None
        if rule.event_count is not None and rule.event_count < 1:
            raise InvalidArgument(f"{field}.generation_rule.event_count must be >= 1.", field=field)
        if rule.overlap_event_count is not None and rule.overlap_event_count < 0:
            raise InvalidArgument(
                f"{field}.generation_rule.overlap_event_count must be >= 0.", field=field
            )
        return cls(
            event_count=rule.event_count,
            fixed_interval=parse_duration(
                rule.fixed_interval, field=f"{field}.generation_rule.fixed_interval"
            ),
            idle_duration=parse_duration(
                rule.idle_duration, field=f"{field}.generation_rule.idle_duration"
            ),
            overlap_event_count=rule.overlap_event_count or 0,
        )

    @property
    def flushes_at_once(self) -> bool:
        """True when no condition is set."""
        return (
            self.event_count is None and self.fixed_interval is None and self.idle_duration is None
        )


@dataclass(frozen=True, slots=True)
class StreamStatus:
    """What an operator needs to know about one ingest stream."""

    key: str
    scope: dict[str, str]
    stream_id: str
    pending_events: int
    failures: int
    generate_now: bool
    """Generation was asked for at once (`force_flush`)."""
    last_error: str | None
    retry_after: str | None
    last_event_at: str | None

    def to_json(self) -> dict[str, Any]:
        """The stream as camelCase JSON (REST's `memories:listStreams`, the CLI's `--json`)."""
        return {
            "key": self.key,
            "scope": self.scope,
            "streamId": self.stream_id,
            "pendingEvents": self.pending_events,
            "failures": self.failures,
            "generateNow": self.generate_now,
            "lastError": self.last_error,
            "retryAfter": self.retry_after,
            "lastEventTime": self.last_event_at,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StreamStatus:
        """The stream `to_json` wrote."""
        return cls(
            key=str(data["key"]),
            scope={str(k): str(v) for k, v in dict(data.get("scope") or {}).items()},
            stream_id=str(data.get("streamId") or ""),
            pending_events=int(data.get("pendingEvents") or 0),
            failures=int(data.get("failures") or 0),
            generate_now=bool(data.get("generateNow")),
            last_error=data.get("lastError"),
            retry_after=data.get("retryAfter"),
            last_event_at=data.get("lastEventTime"),
        )


def stream_key(scope: dict[str, str], stream_id: str) -> str:
    """The document key of a stream (a digest: scope text never becomes a key)."""
    return hashlib.sha256(f"{scope_key(scope)}\x1f{stream_id}".encode()).hexdigest()[:40]


def stream_rule(
    stream: Mapping[str, Any], bank_config: types.ReasoningEngineContextSpecMemoryBankConfig
) -> TriggerRule | None:
    """The trigger rule of a stream: its own, else the bank's (None: flush at once)."""
    if stream.get("trigger"):
        return TriggerRule.from_config(
            types.MemoryGenerationTriggerConfig.model_validate(stream["trigger"]),
            field="generation_trigger_config",
        )
    generation = bank_config.generation_config
    return TriggerRule.from_config(
        generation.generation_trigger_config if generation else None,
        field="generation_config.generation_trigger_config",
    )


def due_at(
    stream: Mapping[str, Any], bank_config: types.ReasoningEngineContextSpecMemoryBankConfig
) -> datetime | None:
    """From when the stream is due if nothing else is written to it (None: never).

    `is_due(now)` is exactly `now >= due_at`: held back until `retry_after`, then due at once
    when forced, without a rule or with `event_count` events pending, else at the earlier of
    `last_event_at + idle_duration` and `last_flush_at + fixed_interval`.
    """
    if not stream.get("pending"):
        return None
    rule = stream_rule(stream, bank_config)
    if (
        stream.get("force")
        or rule is None
        or rule.flushes_at_once
        or (rule.event_count is not None and len(stream["pending"]) >= rule.event_count)
    ):
        due: datetime | None = _IMMEDIATELY
    else:
        created = stream["created_at"]
        times = []
        if rule.idle_duration is not None:
            times.append(_moment(stream.get("last_event_at") or created) + rule.idle_duration)
        if rule.fixed_interval is not None:
            times.append(_moment(stream.get("last_flush_at") or created) + rule.fixed_interval)
        due = min(times, default=None)
    if due is not None and stream.get("retry_after"):
        return max(due, _moment(stream["retry_after"]))
    return due


async def reindex_streams(context: EngineContext, bank_id: str) -> int:
    """Lowers the due-index entries of the bank's streams to what the streams say now.

    Needs no lock (an entry only moves earlier): run after a bank config change, and by the
    scheduler once per sweep cycle for every bank, which also indexes streams stored before the
    index existed or whose entry a config change raced with. Returns how many streams are pending.
    """
    bank = await context.load_bank(bank_id)
    documents = await context.store.list_documents(bank_id, STREAM_KIND)
    dues = {key: due_at(body, bank.config) for key, body in documents}
    pending = {key: due for key, due in dues.items() if due is not None}
    if pending:
        await context.store.set_due(bank_id, STREAM_KIND, pending, only_earlier=True)
    return len(pending)


def _moment(text: str) -> datetime:
    """A stored ISO time (UTC when it names no zone)."""
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def stream_document(
    key: str,
    stream: Mapping[str, Any],
    bank_config: types.ReasoningEngineContextSpecMemoryBankConfig,
) -> DocumentRecord:
    """The stream as a document, with its scope key and due time."""
    return DocumentRecord(
        STREAM_KIND,
        key,
        stream,
        scope_key=scope_key(stream["scope"]),
        due=due_at(stream, bank_config),
    )


def checked_stream(key: object, body: object, *, where: str) -> dict[str, Any]:
    """A stream document from outside (an import), rebuilt from its own checked fields.

    Its key must be the one `ingest` derives from its scope and stream id, so that no stream can
    carry one scope's conversation into another's memories; every field `ingest`, `flush` and
    `due_at` read is checked as `ingest` checks a request (events, trigger, generate config,
    times, operation names), so that an imported stream cannot fail every flush. Fields no
    version writes are dropped.

    Raises:
        InvalidArgument: A field is malformed or the key is not the stream's (`where` and the
            field are named, never a value).
    """
    field = f"{where}.body"
    if not isinstance(body, Mapping):
        raise InvalidArgument(f"{field} must be a JSON object.", field=field)
    check_unicode(body, field=field)
    checked_scope = validate_scope(body.get("scope"), field=f"{field}.scope")
    stream_id = body.get("stream_id")
    if not isinstance(stream_id, str) or len(stream_id) > 256:
        raise InvalidArgument(
            f"{field}.stream_id must be a string of at most 256 characters.",
            field=f"{field}.stream_id",
        )
    if key != stream_key(checked_scope, stream_id):
        raise InvalidArgument(
            f"{where}: key is not the key of the stream's scope and stream id (the key of a "
            "stream is derived from both); the file was altered.",
            field=f"{where}.key",
        )
    stream: dict[str, Any] = {
        "scope": checked_scope,
        "stream_id": stream_id,
        "pending": _checked_events(body.get("pending"), f"{field}.pending"),
        "processed": _checked_events(body.get("processed"), f"{field}.processed"),
        "seen_ids": _strings(body.get("seen_ids"), f"{field}.seen_ids", SEEN_ID_RETENTION),
        "operations": _strings(
            body.get("operations"), f"{field}.operations", MAX_PENDING_EVENTS, _OPERATION_PATH
        ),
        "created_at": _checked_time(body.get("created_at"), f"{field}.created_at"),
    }
    for name in ("last_event_at", "last_flush_at", "retry_after"):
        if body.get(name) is not None:
            stream[name] = _checked_time(body[name], f"{field}.{name}")
    if body.get("trigger") is not None:
        if not isinstance(body["trigger"], Mapping):
            raise InvalidArgument(
                f"{field}.trigger must be a JSON object.", field=f"{field}.trigger"
            )
        trigger = parse_model(
            types.MemoryGenerationTriggerConfig, dict(body["trigger"]), field=f"{field}.trigger"
        )
        TriggerRule.from_config(trigger, field=f"{field}.trigger")
        if dumped := trigger.model_dump(mode="json", exclude_none=True):
            stream["trigger"] = dumped
    config = {} if body.get("config") is None else body["config"]
    if not isinstance(config, Mapping) or not set(config) <= set(_GENERATE_FIELDS):
        raise InvalidArgument(
            f"{field}.config may hold only {', '.join(_GENERATE_FIELDS)}.", field=f"{field}.config"
        )
    stream["config"] = _checked_generate_config(
        parse_model(types.GenerateMemoriesConfig, dict(config), field=f"{field}.config"),
        field=f"{field}.config",
    )
    force, failures = body.get("force", False), body.get("failures", 0)
    if not isinstance(force, bool):
        raise InvalidArgument(f"{field}.force must be true or false.", field=f"{field}.force")
    if isinstance(failures, bool) or not isinstance(failures, int) or not 0 <= failures <= 10**6:
        raise InvalidArgument(
            f"{field}.failures must be a count from 0 to 1000000.", field=f"{field}.failures"
        )
    stream.update(force=force, failures=failures)
    last_error, flush_id = body.get("last_error"), body.get("last_flush_id")
    if last_error is not None:
        if not isinstance(last_error, str):
            raise InvalidArgument(
                f"{field}.last_error must be a string.", field=f"{field}.last_error"
            )
        stream["last_error"] = last_error[:1_000]
    if flush_id is not None:
        if not isinstance(flush_id, str) or not _FLUSH_ID.fullmatch(flush_id):
            raise InvalidArgument(
                f"{field}.last_flush_id must be 16 hex digits.", field=f"{field}.last_flush_id"
            )
        stream["last_flush_id"] = flush_id
    return stream


def _checked_generate_config(
    config: types.GenerateMemoriesConfig | types.IngestEventsConfig, *, field: str
) -> dict[str, Any]:
    """The generate settings a stream keeps, as JSON, checked as a flush will use them.

    The one check of a stream's settings, for a request (`ingest`, `ingest_many`) as for an
    imported stream: `check_generate_settings`, as `generate` checks its own.

    Raises:
        InvalidArgument: A setting a flush could not use, naming it under `field`.
    """
    check_generate_settings(config, field=field)
    checked: dict[str, Any] = config.model_dump(
        mode="json", include=set(_GENERATE_FIELDS), exclude_none=True
    )
    return checked


def _checked_events(value: object, field: str) -> list[dict[str, Any]]:
    """Stored events (content, event_id, event_time) as `ingest` writes them."""
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_PENDING_EVENTS:
        raise InvalidArgument(
            f"{field} must be a list of at most {MAX_PENDING_EVENTS} events.", field=field
        )
    events = []
    for index, event in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(event, Mapping):
            raise InvalidArgument(f"{where} must be a JSON object.", field=where)
        content = parse_model(genai_types.Content, event.get("content"), field=f"{where}.content")
        event_id = event.get("event_id")
        if event_id is not None and not isinstance(event_id, str):
            raise InvalidArgument(f"{where}.event_id must be a string.", field=f"{where}.event_id")
        events.append(
            {
                "content": content.model_dump(mode="json", exclude_none=True),
                "event_id": event_id or None,
                "event_time": _checked_time(event.get("event_time"), f"{where}.event_time"),
            }
        )
    return events


def _strings(
    value: object, field: str, limit: int, form: re.Pattern[str] | None = None
) -> list[str]:
    if value is None:
        return []
    if (
        not isinstance(value, list)
        or len(value) > limit
        or not all(isinstance(item, str) for item in value)
        or (form is not None and not all(form.fullmatch(item) for item in value))
    ):
        shape = f" of the form {form.pattern}" if form is not None else ""
        raise InvalidArgument(
            f"{field} must be a list of at most {limit} strings{shape}.", field=field
        )
    return list(value)


def _checked_time(value: object, field: str) -> str:
    """An ISO 8601 time as `ingest` writes it (UTC), from a stored one."""
    try:
        moment = _moment(value) if isinstance(value, str) else None
    except ValueError:
        moment = None
    if moment is None:
        raise InvalidArgument(f"{field} must be an ISO 8601 time.", field=field)
    return bounded_event_time(moment, field=field).isoformat()


class IngestOps:
    """The streaming half of generation."""

    def __init__(self, context: EngineContext, generation: GenerateOps) -> None:
        self._context = context
        self._generation = generation

    async def ingest(
        self,
        bank_id: str,
        *,
        scope: Any,
        stream_id: str,
        source: Any,
        trigger_config: Any,
        config: types.IngestEventsConfig,
    ) -> tuple[str, OperationRecord, bool]:
        """Buffers the events; returns the stream key, the operation, whether it is due now.

        The stream and the operation are one store write: a crash leaves both or neither (an
        operation left pending would name events no stream holds).
        """
        request = _CheckedRequest.of(
            IngestRequest(scope, stream_id, source, trigger_config, config)
        )
        key = request.key
        bank = await self._context.load_bank(bank_id)
        now = self._context.clock()
        async with self._context.store.lock_provider().lock(f"stream:{bank_id}:{key}"):
            stream = dict(
                await self._context.store.get_document(bank_id, STREAM_KIND, key)
                or _new_stream(request.scope, request.stream_id, now)
            )
            fresh = _add_events(stream, request, now=now)
            operation_path = f"operations/{secrets.token_hex(8)}"
            waiting = bool(stream["pending"])
            if waiting:
                stream["operations"].append(operation_path)
            metadata = {"streamId": stream_id, "eventsAccepted": fresh}
            operation = OperationRecord(
                bank_id,
                operation_path,
                not waiting,
                {"kind": "ingest", "operation": {"done": not waiting, "metadata": metadata}},
                now,
            )
            await self._put(
                bank, stream_document(key, stream, bank.config), operations=(operation,)
            )
        return key, operation, self.is_due(stream, bank.config, now)

    async def ingest_many(
        self, bank_id: str, requests: Sequence[IngestRequest], *, skip_busy: bool = False
    ) -> list[IngestResult | AdkMemoryError]:
        """Buffers the events of many requests in ONE atomic store write (group commit).

        For a caller that hands over the events of many streams at once (the ADK adapter's
        writer): the streams are locked in key order, read concurrently, updated request by
        request in the order given (several requests may name one stream), and written together
        with one `apply`, so N turns cost one store write, not N. No operation is recorded: the
        caller polls no operation (`ingest` records one for the API). A request that is invalid
        or would overfill its stream gets its error in its place and writes nothing; the others
        go on. Store failures are raised for the whole call, and nothing is written.

        `skip_busy`: a stream whose lock another holder has (a flush generating from it, for as
        long as its model calls take) is not waited for: its requests get `ResourceExhausted`
        in their place and write nothing, and the other streams are written at once. Without
        it, the call waits for each lock in turn.

        Returns:
            Per request, in order: its stream key and whether the stream is due now, or the
            error that refused it.
        """
        now = self._context.clock()
        results: list[IngestResult | AdkMemoryError] = []
        checked: list[_CheckedRequest] = []
        for index, request in enumerate(requests):
            try:
                checked.append(_CheckedRequest.of(request, index=index))
            except AdkMemoryError as error:
                results.append(error)
                continue
            results.append(IngestResult(checked[-1].key, False))
        if not checked:
            return results
        bank = await self._context.load_bank(bank_id)
        locks = self._context.store.lock_provider()
        async with contextlib.AsyncExitStack() as held:
            keys: list[str] = []
            # In key order: two group commits never wait on each other.
            for key in sorted({one.key for one in checked}):
                name = f"stream:{bank_id}:{key}"
                lock = locks.lock(name, wait_seconds=0) if skip_busy else locks.lock(name)
                try:
                    await held.enter_async_context(lock)
                except ResourceExhausted:
                    if not skip_busy:
                        raise
                    for one in checked:
                        if one.key == key:
                            results[one.index] = _busy(key)
                    continue
                keys.append(key)
            checked = [one for one in checked if one.key in keys]
            if not checked:
                return results
            found = await asyncio.gather(
                *(self._context.store.get_document(bank_id, STREAM_KIND, key) for key in keys)
            )
            streams: dict[str, dict[str, Any]] = {}
            for one in checked:
                stored = streams.get(one.key) or dict(
                    found[keys.index(one.key)] or _new_stream(one.scope, one.stream_id, now)
                )
                candidate = copy.deepcopy(stored)
                try:
                    _add_events(candidate, one, now=now)
                except AdkMemoryError as error:
                    results[one.index] = error
                    streams.setdefault(one.key, stored)
                    continue
                streams[one.key] = candidate
            documents = tuple(
                stream_document(key, stream, bank.config) for key, stream in streams.items()
            )
            await self._context.store.apply(bank_id, WriteBatch(documents=documents))
        await self._recheck_dues(bank, documents)
        return [
            IngestResult(result.key, self.is_due(streams[result.key], bank.config, now))
            if isinstance(result, IngestResult)
            else result
            for result in results
        ]

    def is_due(
        self,
        stream: dict[str, Any],
        bank_config: types.ReasoningEngineContextSpecMemoryBankConfig,
        now: datetime,
    ) -> bool:
        """Whether the stream's trigger says to flush now."""
        due = due_at(stream, bank_config)
        return due is not None and now >= due

    async def due_streams(self, *, limit: int = 1000) -> list[DueDocument]:
        """Streams of every bank whose due-index entry has come (earliest first, at most `limit`).

        An entry may be early; `flush` re-checks the stream and corrects it.
        """
        return await self._context.store.due_documents(
            STREAM_KIND, self._context.clock(), limit=limit
        )

    async def streams(
        self, bank_id: str, *, scope: dict[str, str] | None = None
    ) -> list[StreamStatus]:
        """The bank's streams that hold unflushed events (of one scope when given), oldest first.

        With a scope, only that scope's streams are read (a stream stored before streams carried
        their scope key is listed once it is next written, by `ingest` or a flush).
        """
        documents = await self._context.store.list_documents(
            bank_id, STREAM_KIND, scope_key=None if scope is None else scope_key(scope)
        )
        found = [
            StreamStatus(
                key=key,
                scope=dict(body.get("scope") or {}),
                stream_id=str(body.get("stream_id", "")),
                pending_events=len(body.get("pending") or ()),
                failures=int(body.get("failures", 0)),
                generate_now=bool(body.get("force")),
                last_error=body.get("last_error"),
                retry_after=body.get("retry_after"),
                last_event_at=body.get("last_event_at"),
            )
            for key, body in documents
            if body.get("pending") and (scope is None or dict(body.get("scope") or {}) == scope)
        ]
        return sorted(found, key=lambda status: status.last_event_at or "")

    async def flush(
        self,
        bank_id: str,
        key: str,
        *,
        wait_seconds: float = 60.0,
        now_or_never: bool = False,
        raise_failure: bool = False,
    ) -> int:
        """Generates from the stream's pending events; returns how many memories changed.

        Args:
            bank_id: The bank.
            key: The stream's key.
            wait_seconds: How long to wait for the stream's lock.
            now_or_never: Flush pending events whatever the trigger and back-off say.
            raise_failure: Raise a failed generation's error (after recording it) instead of
                returning 0.
        """
        async with self._context.store.lock_provider().lock(
            f"stream:{bank_id}:{key}", wait_seconds=wait_seconds
        ) as lease:
            bank = await self._context.load_bank(bank_id)
            document = await self._context.store.get_document(bank_id, STREAM_KIND, key)
            if document is None:
                await self._context.store.set_due(bank_id, STREAM_KIND, {key: None})
                return 0
            stream = dict(document)
            now = self._context.clock()
            due = stream.get("pending") if now_or_never else self.is_due(stream, bank.config, now)
            if not due:
                # An early entry found by a scheduler (or a caller flushing a quiet stream):
                # set it to what the stream says, under the lock that orders its writes.
                entry = due_at(stream, bank.config)
                await self._context.store.set_due(bank_id, STREAM_KIND, {key: entry})
                return 0
            rule = stream_rule(stream, bank.config) or TriggerRule()
            overlap = (
                stream["processed"][-rule.overlap_event_count :] if rule.overlap_event_count else []
            )
            window = [*overlap, *stream["pending"]]
            contents = [genai_types.Content.model_validate(event["content"]) for event in window]
            config = types.GenerateMemoriesConfig.model_validate(stream.get("config") or {})
            flushed = dict(stream)
            flushed["processed"] = [*stream["processed"], *stream["pending"]][
                -max(rule.overlap_event_count, 1) :
            ]
            flushed["pending"] = []
            flushed["force"] = False
            flushed["failures"] = 0
            flushed.pop("retry_after", None)
            flushed.pop("last_error", None)
            flushed["last_flush_at"] = now.isoformat()
            flushed["last_flush_id"] = secrets.token_hex(8)
            flushed["operations"] = []
            finished = list(stream["operations"])
            try:
                # The stream that records these events as done goes into the memories' atomic
                # batch: either both are stored or neither is, so no event is generated twice.
                result = await self._generation.generate(
                    bank_id,
                    scope=stream["scope"],
                    events=contents,
                    direct_memories=None,
                    config=config,
                    model=self._context.generation_model,
                    documents=(stream_document(key, flushed, bank.config),),
                    fences=(lease,),
                    bank=bank,
                )
            except Aborted:
                # Nothing was written; the events stay pending. Recording a failure could
                # overwrite the stream of a flush that took over a lapsed lock.
                logger.warning("An ingest flush lost a race and wrote nothing; it will be retried.")
                return 0
            except AdkMemoryError as exc:
                if isinstance(exc, StoreUnavailable) and await self._committed(
                    bank_id, key, flushed
                ):
                    logger.warning("An ingest flush whose store call failed was stored after all.")
                    await self._complete(bank_id, finished, {}, now)
                    return 0
                await self._record_failure(bank, key, stream, exc, now)
                if raise_failure:
                    raise
                return 0
            metadata = {"generatedMemories": len(result.actions), **result.stats.as_metadata()}
            await self._complete(bank_id, finished, metadata, now)
            return len(result.actions)

    async def _committed(self, bank_id: str, key: str, flushed: dict[str, Any]) -> bool:
        """Whether a flush that raised `StoreUnavailable` stored its batch anyway (a lost reply).

        Raises `StoreUnavailable` when the store cannot tell: the stream is then left as it is,
        and the next flush reads whichever state it is in.
        """
        current = await self._context.store.get_document(bank_id, STREAM_KIND, key)
        return current is not None and current.get("last_flush_id") == flushed["last_flush_id"]

    async def _complete(
        self, bank_id: str, paths: list[str], metadata: dict[str, Any], now: datetime
    ) -> None:
        """Records a stored flush's operations as done: one write, retried through a restart."""
        if not paths:
            return
        records = _done_operations(bank_id, paths, {"metadata": metadata}, now)
        await _retried(
            "complete the ingest operations",
            functools.partial(self._context.store.apply, bank_id, WriteBatch(operations=records)),
        )

    async def _record_failure(
        self, bank: LoadedBank, key: str, stream: dict[str, Any], exc: AdkMemoryError, now: datetime
    ) -> None:
        bank_id = bank.record.bank_id
        failures = int(stream.get("failures", 0)) + 1
        delay = min(2**failures, MAX_RETRY_SECONDS)
        stream["failures"] = failures
        stream["retry_after"] = (now + timedelta(seconds=delay)).isoformat()
        stream["last_error"] = f"{exc.status}: {exc.message}"[:1_000]
        # The message carries the cause and its hint (e.g. which credentials are missing).
        logger.warning(
            "Ingest flush failed (attempt %d; events kept, retried in %d s): %s: %s",
            failures,
            delay,
            exc.status,
            exc.message,
        )
        if failures == MAX_FLUSH_FAILURES:
            error = {
                "code": 14,
                "message": f"Generation failed {failures} times ({exc.status}: {exc.message}"[:900]
                + "); events are kept and retried with back-off.",
            }
            failed = _done_operations(bank_id, stream["operations"], {"error": error}, now)
            stream["operations"] = []
            # The stream and its failed operations are one write: none is left pending.
            await self._put(bank, stream_document(key, stream, bank.config), operations=failed)
            return
        await self._put(bank, stream_document(key, stream, bank.config))

    async def _put(
        self,
        bank: LoadedBank,
        document: DocumentRecord,
        *,
        operations: tuple[OperationRecord, ...] = (),
    ) -> None:
        """Writes a stream with its due time, then re-checks that time against the bank's config.

        `operations` go in the same write. A bank update stores its config, then lowers its
        streams' entries (`reindex_streams`); a write that read the config before the update
        may land after that pass, with a due time from the old rule. Reading the config after
        the write closes that gap: either this read sees the new config, or the update's pass
        saw this write.
        """
        batch = WriteBatch(documents=(document,), operations=operations)
        await self._context.store.apply(bank.record.bank_id, batch)
        await self._recheck_dues(bank, (document,))

    async def _recheck_dues(self, bank: LoadedBank, documents: Sequence[DocumentRecord]) -> None:
        """Lowers the due entries of streams just written if the bank's config changed meanwhile.

        See `_put`; streams with a trigger of their own are left alone.
        """
        relevant = [document for document in documents if not document.body.get("trigger")]
        if not relevant:
            return  # the streams' own rules: the bank's config does not apply
        bank_id = bank.record.bank_id
        current = await self._context.load_bank(bank_id)
        if current.record.update_time == bank.record.update_time:
            return
        lowered = {}
        for document in relevant:
            due = due_at(document.body, current.config)
            if due is not None and (document.due is None or due < document.due):
                lowered[document.key] = due
        if lowered:
            await self._context.store.set_due(bank_id, STREAM_KIND, lowered, only_earlier=True)


def _done_operations(
    bank_id: str, paths: Sequence[str], outcome: dict[str, Any], now: datetime
) -> tuple[OperationRecord, ...]:
    """The ingest operations `paths` as done, with `outcome` (their metadata or error)."""
    return tuple(
        OperationRecord(
            bank_id, path, True, {"kind": "ingest", "operation": {"done": True, **outcome}}, now
        )
        for path in paths
    )


@dataclass(frozen=True, slots=True)
class IngestRequest:
    """One `ingest` of `IngestOps.ingest_many`: the arguments `ingest` takes."""

    scope: Any
    stream_id: str
    source: Any
    """`direct_contents_source` (None: no events, e.g. only a trigger or `force_flush`)."""
    trigger_config: Any = None
    config: types.IngestEventsConfig = field(default_factory=types.IngestEventsConfig)


@dataclass(frozen=True, slots=True)
class _CheckedRequest:
    """An `IngestRequest` whose arguments passed every check, ready for its stream."""

    index: int
    """Its place among the requests of `ingest_many`."""
    key: str
    scope: dict[str, str]
    stream_id: str
    events: list[dict[str, Any]]
    trigger: types.MemoryGenerationTriggerConfig | None
    settings: dict[str, Any]
    """The generate settings the stream keeps (`_checked_generate_config`)."""
    force_flush: bool

    @classmethod
    def of(cls, request: IngestRequest, *, index: int = 0) -> _CheckedRequest:
        """Checks `request` as `ingest` checks its arguments.

        Raises:
            InvalidArgument: An argument is malformed (it is named).
        """
        scope = validate_scope(request.scope)
        _check_stream_id(request.stream_id)
        return cls(
            index=index,
            key=stream_key(scope, request.stream_id),
            scope=scope,
            stream_id=request.stream_id,
            events=_events_of(request.source),
            trigger=_trigger_of(request.trigger_config),
            settings=_checked_generate_config(request.config, field="config"),
            force_flush=bool(request.config.force_flush),
        )


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What one request of `ingest_many` did: its stream, and whether that is due now."""

    key: str
    due: bool


def _busy(key: str) -> ResourceExhausted:
    return ResourceExhausted(
        f"The stream {key[:80]!r} is locked by another holder (a flush generating from it); "
        "its events were not written. Send them again once it is free."
    )


def _check_stream_id(stream_id: object) -> None:
    if not isinstance(stream_id, str) or len(stream_id) > 256:
        raise InvalidArgument(
            "stream_id must be a string of at most 256 characters.", field="stream_id"
        )


def _trigger_of(trigger_config: Any) -> types.MemoryGenerationTriggerConfig | None:
    if trigger_config is None:
        return None
    trigger = parse_model(
        types.MemoryGenerationTriggerConfig, trigger_config, field="generation_trigger_config"
    )
    TriggerRule.from_config(trigger, field="generation_trigger_config")
    return trigger


def _new_stream(scope: dict[str, str], stream_id: str, now: datetime) -> dict[str, Any]:
    return {
        "scope": scope,
        "stream_id": stream_id,
        "pending": [],
        "processed": [],
        "seen_ids": [],
        "operations": [],
        "created_at": now.isoformat(),
    }


def _add_events(stream: dict[str, Any], request: _CheckedRequest, *, now: datetime) -> int:
    """Adds the request's events not seen before to a stream (in place); returns how many.

    The stream takes the request's trigger (if any), generate settings and `force_flush`.

    Raises:
        InvalidArgument: The stream would hold more than `MAX_PENDING_EVENTS` events.
    """
    seen = set(stream["seen_ids"])
    fresh = []
    for event in request.events:
        if event["event_id"] and event["event_id"] in seen:
            continue
        if event["event_id"]:
            seen.add(event["event_id"])
            stream["seen_ids"].append(event["event_id"])
        fresh.append({**event, "event_time": event["event_time"] or now.isoformat()})
    stream["seen_ids"] = stream["seen_ids"][-SEEN_ID_RETENTION:]
    if len(stream["pending"]) + len(fresh) > MAX_PENDING_EVENTS:
        raise InvalidArgument(
            f"The stream would hold more than {MAX_PENDING_EVENTS} unflushed events; "
            "flush it (force_flush) or set a trigger rule.",
            field="direct_contents_source",
        )
    stream["pending"] = sorted([*stream["pending"], *fresh], key=lambda event: event["event_time"])
    if fresh:
        stream["last_event_at"] = now.isoformat()
    if request.trigger is not None:
        stream["trigger"] = request.trigger.model_dump(mode="json", exclude_none=True)
    stream["config"] = dict(request.settings)
    stream["force"] = bool(stream.get("force")) or request.force_flush
    stream["failures"] = 0
    stream.pop("retry_after", None)
    return len(fresh)


async def _retried(what: str, write: Callable[[], Awaitable[None]]) -> None:
    """Runs `write`, retrying it on `StoreUnavailable` for about `sum(_COMMIT_RETRY_DELAYS)` s.

    Only for the operation reports written after a flush's batch (memories and stream) is
    stored, which should survive a store restart or a dropped connection (each one replaces a
    whole record, so repeating it is harmless). The last failure is raised, saying that the
    flush itself is stored.
    """
    for delay in (*_COMMIT_RETRY_DELAYS, None):
        try:
            await write()
            return
        except StoreUnavailable as exc:
            if delay is None:
                raise StoreUnavailable(
                    f"An ingest flush was stored (its memories and its stream), but the store "
                    f"failed to {what} ({exc.message}); the operation stays pending. Its events "
                    "are not generated from again."
                ) from exc
            logger.warning("Failed to %s after a flush; retrying in %.1f s.", what, delay)
            await asyncio.sleep(delay)


def _events_of(source: Any) -> list[dict[str, Any]]:
    """Validated events as JSON: content, event_id (or None), event_time (ISO or None)."""
    if source is None:
        return []
    parsed = parse_model(
        types.IngestionDirectContentsSource, source, field="direct_contents_source"
    )
    events = parsed.events or []
    if len(events) > MAX_EVENTS_PER_REQUEST:
        raise InvalidArgument(
            f"At most {MAX_EVENTS_PER_REQUEST} events are accepted per request; got {len(events)}.",
            field="direct_contents_source.events",
        )
    result = []
    for index, event in enumerate(events):
        if event.content is None:
            raise InvalidArgument(
                f"direct_contents_source.events[{index}].content is required.",
                field=f"direct_contents_source.events[{index}].content",
            )
        moment = to_utc(
            event.event_time, field=f"direct_contents_source.events[{index}].event_time"
        )
        result.append(
            {
                "content": event.content.model_dump(mode="json", exclude_none=True),
                "event_id": event.event_id or None,
                "event_time": moment.isoformat() if moment else None,
            }
        )
    return result
