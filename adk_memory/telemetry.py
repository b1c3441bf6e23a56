"""OpenTelemetry spans for API calls, store round trips, embedding batches and LLM calls.

adk-memory only uses the OpenTelemetry *API*: without an SDK configured (a `TracerProvider` set
by your application, by ADK's telemetry setup or by `opentelemetry-instrument`), every span is a
no-op costing a few microseconds. Spans follow ADK's conventions (one tracer per library, a
schema URL, `error.type` and an ERROR status naming the error's type, never its message):

* `adk_memory.<resource>.<method>` (e.g. `adk_memory.memories.retrieve`): each `AsyncClient`
  (and `Client`) call; `adk_memory.operation`, `adk_memory.bank`, `adk_memory.results`.
* `adk_memory.store.<method>` (e.g. `adk_memory.store.nearest`): each store round trip
  (`TracingStore`); `db.operation.name`, `adk_memory.store.backend`, `adk_memory.bank`,
  `adk_memory.results`, and for `apply` the counts of inserts, upserts, deletes and revisions.
* `adk_memory.embed`: each embedding batch (`TracingEmbedder`); `adk_memory.embedding.model`,
  `.kind` (`document` or `query`), `.texts` (how many), `.dimension`, and where concurrent calls
  share model calls (`adk_memory.embedding_batch`) `.batch_size` (texts in the model call that
  embedded the call's first text) and `.batch_callers` (calls that shared it).
* `adk_memory.llm`: each model request of generation (`llm_span`); `gen_ai.operation.name`,
  `gen_ai.request.model`, `gen_ai.usage.input_tokens`, `gen_ai.usage.output_tokens` (GenAI
  semantic conventions), `adk_memory.llm.schema`, `adk_memory.llm.attempt`.
* `adk_memory.breaker.open` / `adk_memory.breaker.close`: the ADK adapter's circuit breaker
  opened (`error.type`: the failure that opened it) or closed (the store answers again); while
  it is open, each turn that skips memory adds an event `adk_memory.memory_skipped` to the
  current span.

Memories are personal data: no attribute ever holds a fact, a query, a prompt, a scope value, a
metadata value or an error message; only names of banks, counts, model names and types.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import re
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from datetime import datetime
from importlib import metadata
from typing import TYPE_CHECKING, Any, Self, TypeVar, cast

from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from adk_memory._embedder_wrapper import EmbedderWrapper
from adk_memory.errors import AdkMemoryError

if TYPE_CHECKING:
    from adk_memory.engine.context import EngineContext
    from adk_memory.locks import LockProvider
    from adk_memory.scope import ScopeKey
    from adk_memory.store import (
        BankRecord,
        DueDocument,
        MemoryRecord,
        MemoryStore,
        NearestQuery,
        OperationRecord,
        RevisionRecord,
        ScanQuery,
        ScoredRecord,
        StoreCapabilities,
        WriteBatch,
    )

__all__ = [
    "BANK",
    "MEMORY_SKIPPED",
    "OPERATION",
    "RESULTS",
    "TRACER_NAME",
    "TracingEmbedder",
    "TracingStore",
    "instrument_engine_context",
    "llm_span",
    "note_memory_skipped",
    "record_breaker",
    "record_embedding_batch",
    "record_llm_usage",
    "trace_store",
    "traced_resource",
]

logger = logging.getLogger(__name__)

TRACER_NAME = "adk_memory"
"""The instrumentation scope of every adk-memory span."""
BANK = "adk_memory.bank"
"""The bank id (never a scope, fact or query)."""
OPERATION = "adk_memory.operation"
"""The API method, e.g. `memories.retrieve`."""
RESULTS = "adk_memory.results"
"""How many items a call returned (memories, banks, revisions, generated memories, purged)."""

_SCHEMA_URL = "https://opentelemetry.io/schemas/1.36.0"
# Only a well-formed bank id is recorded (a malformed name is the caller's text, kept out).
_BANK_IN_NAME = re.compile(
    r"(?:^|/)(?:reasoningEngines|memoryBanks)/(\d{1,30}|[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:/|\Z)"
)
_T = TypeVar("_T")
_C = TypeVar("_C", bound=type)


@functools.cache
def _version() -> str:
    # Cached: reading package metadata costs about a millisecond, and it runs for every span.
    try:
        return metadata.version("adk-memory")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0"


@functools.cache
def _tracer() -> trace.Tracer:
    # Once: OpenTelemetry's global provider is set at most once, and the proxy tracer returned
    # before it is set follows it when it is. Looked up per span, it cost ~3 % of the CPU of 20
    # ADK users' turns (an `os.environ` miss and two objects a span).
    return trace.get_tracer(TRACER_NAME, _version(), schema_url=_SCHEMA_URL)


def _error_type(exc: BaseException) -> str:
    return exc.status if isinstance(exc, AdkMemoryError) else type(exc).__name__


@contextlib.contextmanager
def _span(
    name: str, attributes: Mapping[str, Any], *, kind: SpanKind = SpanKind.INTERNAL
) -> Iterator[Span]:
    """A current span that records an error's type (never its message) and re-raises it."""
    with _tracer().start_as_current_span(
        name,
        kind=kind,
        attributes={key: value for key, value in attributes.items() if value is not None},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            failure = _error_type(exc)
            span.set_attribute("error.type", failure)
            span.set_status(Status(StatusCode.ERROR, failure))
            raise


def _bank_of(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    found = _BANK_IN_NAME.search(value)
    return found.group(1) if found else None


def _count(result: object) -> int | None:
    """How many items an API result holds, when that is meaningful."""
    from adk_memory._pagers import AsyncPager

    if isinstance(result, AsyncPager):
        return len(result.page)
    if isinstance(result, list):
        return len(result)
    response = getattr(result, "response", None)
    generated = getattr(response, "generated_memories", None)
    if generated is not None:
        return len(generated)
    purged = getattr(response, "purge_count", None)
    return purged if isinstance(purged, int) else None


# API calls


def _traced_method(
    operation: str, method: Callable[..., Awaitable[_T]]
) -> Callable[..., Awaitable[_T]]:
    @functools.wraps(method)
    async def traced(self: Any, *args: Any, **kwargs: Any) -> _T:
        bank = _bank_of(kwargs.get("name", args[0] if args else None))
        with _span(f"{TRACER_NAME}.{operation}", {OPERATION: operation, BANK: bank}) as span:
            result = await method(self, *args, **kwargs)
            if bank is None:
                found = _bank_of(getattr(result, "name", None))
                if found is not None:
                    span.set_attribute(BANK, found)
            count = _count(result)
            if count is not None:
                span.set_attribute(RESULTS, count)
            return result

    return traced


def traced_resource(resource: str) -> Callable[[_C], _C]:
    """A class decorator: each public coroutine method gets a span `adk_memory.<resource>.<m>`.

    Aliases of a public method (such as the SDK's private `_update = update`) share its span.

    Args:
        resource: The resource path as the SDK spells it, e.g. `memories.revisions`.

    Returns:
        The decorator, which changes the class in place and returns it.
    """

    def decorate(cls: _C) -> _C:
        wrapped: dict[int, Callable[..., Any]] = {}
        for name, value in list(vars(cls).items()):
            if name.startswith("_") or not inspect.iscoroutinefunction(value):
                continue
            traced = _traced_method(f"{resource}.{name}", value)
            wrapped[id(value)] = traced
            setattr(cls, name, traced)
        for name, value in list(vars(cls).items()):
            if name.startswith("_") and id(value) in wrapped:
                setattr(cls, name, wrapped[id(value)])
        return cls

    return decorate


# Store round trips


class TracingStore:
    """A `MemoryStore` that wraps each call of another one in a span `adk_memory.store.<m>`.

    Anything that is not part of the protocol (a backend's `drop_all`, its config) is passed
    through unchanged, so code that reaches for backend extras keeps working.
    """

    def __init__(self, store: MemoryStore) -> None:
        """Wraps `store` (which keeps being the one that does the work)."""
        self.inner = store
        self.backend = type(store).__name__

    @property
    def capabilities(self) -> StoreCapabilities:
        """The wrapped store's capabilities."""
        return self.inner.capabilities

    @classmethod
    def from_uri(cls, uri: str, **options: Any) -> Self:
        """Builds the wrapped store from a URI, through the backend registry."""
        from adk_memory._registry import store_from_uri

        return cls(store_from_uri(uri, **options))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    @contextlib.contextmanager
    def _call(self, method: str, bank_id: str | None, **attributes: Any) -> Iterator[Span]:
        with _span(
            f"{TRACER_NAME}.store.{method}",
            {
                "db.operation.name": method,
                "adk_memory.store.backend": self.backend,
                BANK: bank_id,
                **attributes,
            },
            kind=SpanKind.CLIENT,
        ) as span:
            yield span

    # Banks

    async def create_bank(self, bank: BankRecord) -> None:
        """See `MemoryStore.create_bank`."""
        with self._call("create_bank", bank.bank_id):
            await self.inner.create_bank(bank)

    async def get_bank(self, bank_id: str) -> BankRecord | None:
        """See `MemoryStore.get_bank`."""
        with self._call("get_bank", bank_id) as span:
            found = await self.inner.get_bank(bank_id)
            span.set_attribute(RESULTS, int(found is not None))
            return found

    async def list_banks(self) -> list[BankRecord]:
        """See `MemoryStore.list_banks`."""
        with self._call("list_banks", None) as span:
            found = await self.inner.list_banks()
            span.set_attribute(RESULTS, len(found))
            return found

    async def update_bank(self, bank: BankRecord) -> None:
        """See `MemoryStore.update_bank`."""
        with self._call("update_bank", bank.bank_id):
            await self.inner.update_bank(bank)

    async def delete_bank(self, bank_id: str) -> None:
        """See `MemoryStore.delete_bank`."""
        with self._call("delete_bank", bank_id):
            await self.inner.delete_bank(bank_id)

    # Memories

    async def apply(self, bank_id: str, batch: WriteBatch) -> None:
        """See `MemoryStore.apply`."""
        with self._call(
            "apply",
            bank_id,
            **{
                "adk_memory.write.inserts": len(batch.inserts),
                "adk_memory.write.upserts": len(batch.upserts),
                "adk_memory.write.deletes": len(batch.deletes),
                "adk_memory.write.revisions": len(batch.revisions),
            },
        ):
            await self.inner.apply(bank_id, batch)

    async def get_memories(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> list[MemoryRecord]:
        """See `MemoryStore.get_memories`."""
        with self._call("get_memories", bank_id, **{"adk_memory.requested": len(memory_ids)}) as s:
            found = await self.inner.get_memories(bank_id, memory_ids, now)
            s.set_attribute(RESULTS, len(found))
            return found

    async def nearest(self, bank_id: str, query: NearestQuery) -> list[ScoredRecord]:
        """See `MemoryStore.nearest`."""
        with self._call("nearest", bank_id, **{"adk_memory.top_k": query.k}) as span:
            found = await self.inner.nearest(bank_id, query)
            span.set_attribute(RESULTS, len(found))
            return found

    async def scope_version(self, bank_id: str, scope_key: ScopeKey) -> str | None:
        """See `MemoryStore.scope_version`."""
        with self._call("scope_version", bank_id) as span:
            found = await self.inner.scope_version(bank_id, scope_key)
            span.set_attribute(RESULTS, int(found is not None))
            return found

    async def scan(self, bank_id: str, query: ScanQuery) -> list[MemoryRecord]:
        """See `MemoryStore.scan`."""
        with self._call("scan", bank_id, **{"adk_memory.limit": query.limit}) as span:
            found = await self.inner.scan(bank_id, query)
            span.set_attribute(RESULTS, len(found))
            return found

    # Revisions

    async def list_revisions(
        self, bank_id: str, memory_id: str, now: datetime
    ) -> list[RevisionRecord]:
        """See `MemoryStore.list_revisions`."""
        with self._call("list_revisions", bank_id) as span:
            found = await self.inner.list_revisions(bank_id, memory_id, now)
            span.set_attribute(RESULTS, len(found))
            return found

    async def list_revisions_many(
        self, bank_id: str, memory_ids: Sequence[str], now: datetime
    ) -> dict[str, list[RevisionRecord]]:
        """See `MemoryStore.list_revisions_many`; the result count is of revisions, all ids."""
        with self._call(
            "list_revisions_many", bank_id, **{"adk_memory.requested": len(memory_ids)}
        ) as span:
            found = await self.inner.list_revisions_many(bank_id, memory_ids, now)
            span.set_attribute(RESULTS, sum(map(len, found.values())))
            return found

    async def get_revision(
        self, bank_id: str, memory_id: str, revision_id: str, now: datetime
    ) -> RevisionRecord | None:
        """See `MemoryStore.get_revision`."""
        with self._call("get_revision", bank_id) as span:
            found = await self.inner.get_revision(bank_id, memory_id, revision_id, now)
            span.set_attribute(RESULTS, int(found is not None))
            return found

    async def list_revision_memory_ids(
        self, bank_id: str, now: datetime, *, after: str | None = None, limit: int = 1000
    ) -> list[str]:
        """See `MemoryStore.list_revision_memory_ids`."""
        with self._call("list_revision_memory_ids", bank_id) as span:
            found = await self.inner.list_revision_memory_ids(
                bank_id, now, after=after, limit=limit
            )
            span.set_attribute(RESULTS, len(found))
            return found

    # Operations

    async def put_operation(self, operation: OperationRecord) -> None:
        """See `MemoryStore.put_operation`."""
        with self._call("put_operation", operation.bank_id):
            await self.inner.put_operation(operation)

    async def get_operation(self, bank_id: str, operation_path: str) -> OperationRecord | None:
        """See `MemoryStore.get_operation`."""
        with self._call("get_operation", bank_id) as span:
            found = await self.inner.get_operation(bank_id, operation_path)
            span.set_attribute(RESULTS, int(found is not None))
            return found

    # Documents (the kind is an engine-defined word such as "stream"; keys are never recorded)

    async def put_document(
        self,
        bank_id: str,
        kind: str,
        key: str,
        body: Mapping[str, Any],
        *,
        scope_key: ScopeKey | None = None,
        due: datetime | None = None,
    ) -> None:
        """See `MemoryStore.put_document`."""
        with self._call("put_document", bank_id, **{"adk_memory.document.kind": kind}):
            await self.inner.put_document(bank_id, kind, key, body, scope_key=scope_key, due=due)

    async def get_document(self, bank_id: str, kind: str, key: str) -> Mapping[str, Any] | None:
        """See `MemoryStore.get_document`."""
        with self._call("get_document", bank_id, **{"adk_memory.document.kind": kind}) as span:
            found = await self.inner.get_document(bank_id, kind, key)
            span.set_attribute(RESULTS, int(found is not None))
            return found

    async def list_documents(
        self, bank_id: str, kind: str, *, scope_key: ScopeKey | None = None
    ) -> list[tuple[str, Mapping[str, Any]]]:
        """See `MemoryStore.list_documents`."""
        with self._call("list_documents", bank_id, **{"adk_memory.document.kind": kind}) as span:
            found = await self.inner.list_documents(bank_id, kind, scope_key=scope_key)
            span.set_attribute(RESULTS, len(found))
            return found

    async def delete_document(self, bank_id: str, kind: str, key: str) -> None:
        """See `MemoryStore.delete_document`."""
        with self._call("delete_document", bank_id, **{"adk_memory.document.kind": kind}):
            await self.inner.delete_document(bank_id, kind, key)

    async def due_documents(
        self, kind: str, now: datetime, *, limit: int = 1000
    ) -> list[DueDocument]:
        """See `MemoryStore.due_documents`."""
        with self._call("due_documents", None, **{"adk_memory.document.kind": kind}) as span:
            found = await self.inner.due_documents(kind, now, limit=limit)
            span.set_attribute(RESULTS, len(found))
            return found

    async def set_due(
        self,
        bank_id: str,
        kind: str,
        dues: Mapping[str, datetime | None],
        *,
        only_earlier: bool = False,
    ) -> None:
        """See `MemoryStore.set_due`."""
        with self._call("set_due", bank_id, **{"adk_memory.document.kind": kind}):
            await self.inner.set_due(bank_id, kind, dues, only_earlier=only_earlier)

    # Coordination and maintenance

    def lock_provider(self) -> LockProvider:
        """The wrapped store's lock provider (no I/O, no span)."""
        return self.inner.lock_provider()

    async def sweep_expired(self, bank_id: str, now: datetime) -> int:
        """See `MemoryStore.sweep_expired`."""
        with self._call("sweep_expired", bank_id) as span:
            removed = await self.inner.sweep_expired(bank_id, now)
            span.set_attribute(RESULTS, removed)
            return removed

    async def earliest_expiry(self, bank_id: str) -> datetime | None:
        """See `MemoryStore.earliest_expiry`."""
        with self._call("earliest_expiry", bank_id):
            return await self.inner.earliest_expiry(bank_id)

    async def open_locally(self) -> None:
        """See `MemoryStore.open_locally`."""
        with self._call("open_locally", None):
            await self.inner.open_locally()

    async def aclose(self) -> None:
        """Closes the wrapped store."""
        await self.inner.aclose()


def trace_store(store: MemoryStore) -> MemoryStore:
    """`store` wrapped in a `TracingStore` (once: a wrapped store is returned as it is).

    Typed as a `MemoryStore`: the wrapper forwards `capabilities` per instance, where the protocol
    declares a class variable.
    """
    if isinstance(store, TracingStore):
        return cast("MemoryStore", store)
    return cast("MemoryStore", TracingStore(store))


# Embedding batches


class TracingEmbedder(EmbedderWrapper):
    """An `Embedder` that wraps each batch of another one in a span `adk_memory.embed`."""

    def _span(self, kind: str, texts: int) -> contextlib.AbstractContextManager[Span]:
        return _span(
            f"{TRACER_NAME}.embed",
            {
                "adk_memory.embedding.model": self.inner.model,
                "adk_memory.embedding.kind": kind,
                "adk_memory.embedding.texts": texts,
            },
        )

    async def embed_documents(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """See `Embedder.embed_documents`."""
        with self._span("document", len(texts)) as span:
            vectors = await self.inner.embed_documents(texts)
            if vectors:
                span.set_attribute("adk_memory.embedding.dimension", len(vectors[0]))
            return vectors

    async def embed_query(self, text: str) -> tuple[float, ...]:
        """See `Embedder.embed_query`."""
        with self._span("query", 1) as span:
            vector = await self.inner.embed_query(text)
            span.set_attribute("adk_memory.embedding.dimension", len(vector))
            return vector


def record_embedding_batch(*, texts: int, callers: int) -> None:
    """Notes on the current span (a caller's `adk_memory.embed`) the model call that served it.

    Args:
        texts: The texts of that model call.
        callers: The embedding calls whose texts it held.
    """
    span = trace.get_current_span()
    span.set_attribute("adk_memory.embedding.batch_size", texts)
    span.set_attribute("adk_memory.embedding.batch_callers", callers)


def instrument_engine_context(context: EngineContext) -> None:
    """Makes every embedder the engine builds a `TracingEmbedder` (idempotent)."""
    context.wrap_embedder = TracingEmbedder


# LLM calls


@contextlib.contextmanager
def llm_span(llm: Any, *, schema: str, attempt: int) -> Iterator[Span]:
    """A span `adk_memory.llm` around one model request (no prompt or answer is recorded).

    Args:
        llm: The ADK `BaseLlm`; only its `model` name is read.
        schema: The response schema's class name (`ExtractionOutput`, `ConsolidationOutput`).
        attempt: 1 for the first request of a logical call, 2 and up for retries.

    Yields:
        The span; pass it to `record_llm_usage`.
    """
    with _span(
        f"{TRACER_NAME}.llm",
        {
            "gen_ai.operation.name": "generate_content",
            "gen_ai.request.model": str(getattr(llm, "model", "") or type(llm).__name__),
            "adk_memory.llm.schema": schema,
            "adk_memory.llm.attempt": attempt,
        },
        kind=SpanKind.CLIENT,
    ) as span:
        yield span


def record_llm_usage(span: Span, *, input_tokens: int, output_tokens: int) -> None:
    """Sets the GenAI semantic-convention token counts on an `llm_span`."""
    span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", output_tokens)


# The ADK adapter's circuit breaker

MEMORY_SKIPPED = f"{TRACER_NAME}.memory_skipped"
"""The event added to the current span (ADK's tool or invocation span) when a turn skips memory
because the breaker is open; `adk_memory.turn.step` says what was skipped."""


def record_breaker(*, opened: bool, cause: str) -> None:
    """A span `adk_memory.breaker.open` (with `error.type`: the failure) or `.close`."""
    name = f"{TRACER_NAME}.breaker.{'open' if opened else 'close'}"
    with _tracer().start_as_current_span(name, record_exception=False) as span:
        if opened:
            span.set_attribute("error.type", cause)


def note_memory_skipped(step: str) -> None:
    """Marks the current span: this turn's `step` (search, generation) skipped memory."""
    trace.get_current_span().add_event(MEMORY_SKIPPED, {"adk_memory.turn.step": step})
