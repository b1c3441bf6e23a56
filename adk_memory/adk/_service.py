"""`MemoryBankService`: ADK's `BaseMemoryService` over adk-memory's Memory Bank (SPEC §4).

It behaves like ADK's `VertexAiMemoryBankService` (reference §6): the scope is always
`{"app_name": …, "user_id": …}`, conversations go to `ingest_events` (or to `memories.generate`
when `custom_metadata` asks for a generate-only setting), `add_memory` creates memories (or
consolidates them with `enable_consolidation`), and `search_memory` is a similarity retrieve.
The engine runs in this process, on the store the URI names; nothing here talks to Google Cloud.

Event loops: an async store client belongs to the loop that opened it (as ADK's
`_get_api_client` notes), and ADK calls memory services from several loops (`Runner.run` runs
each call on a new one), so the service keeps one `AsyncClient` per running loop. The bank is
looked up, and created if absent, on first use; creation tolerates `AlreadyExists`, so several
processes may start at once.

Incrementality: a session is one ingest stream (`stream_id` = session id) and every event is
sent with its ADK event id, which the stream remembers; an event id already seen is ignored by
the store, so no event is generated from twice, whichever process sends it. On top of that the
service remembers, per session, the last event it sent, so `add_session_to_memory` sends only
the events after it (a process-local saving; the store's dedup is what guarantees it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types as genai_types
from typing_extensions import override

from adk_memory import types
from adk_memory._async_client import AsyncClient
from adk_memory.adk._convert import (
    ENABLE_CONSOLIDATION_KEY,
    INGEST_KEYS,
    batches,
    create_config,
    event_for_ingest,
    from_metadata_values,
    generate_config,
    memory_entry_fact,
    memory_id_of_entry,
    stored_content,
    uses_generate,
)
from adk_memory.engine.convert import parse_model
from adk_memory.engine.generate import MAX_DIRECT_MEMORIES
from adk_memory.engine.ingest import MAX_EVENTS_PER_REQUEST
from adk_memory.errors import AlreadyExists, InvalidArgument, NotFound
from adk_memory.names import Names
from adk_memory.scheduler import DEFAULT_POLL_SECONDS
from adk_memory.settings import default_adk_bank_id, default_uri

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.models import BaseLlm
    from google.adk.sessions.session import Session

__all__ = ["DEFAULT_TOP_K", "MemoryBankService"]

logger = logging.getLogger(__name__)

DEFAULT_TOP_K = 3
"""Memories per search: Memory Bank's own default, which ADK's Vertex service relies on."""

_MAX_TOP_K = 100
_MAX_TRACKED_SESSIONS = 10_000
_SERVICE_URI_PARAMETERS = ("bank", "top_k")
"""URI query parameters the service reads itself; the rest belong to the store."""


class MemoryBankService(BaseMemoryService):
    """Long-term memory for ADK agents, on Chroma, Redis or in-process, chosen by a URI.

    Setup:
        ```python
        from google.adk.runners import Runner
        from adk_memory.adk import MemoryBankService

        memory = MemoryBankService("chroma:///var/lib/adk-memory")  # or "redis://host:6379/0"
        runner = Runner(agent=agent, app_name="assistant", session_service=sessions,
                        memory_service=memory)
        ```

    The bank: `bank=` (an id such as `"coffee-shop"` or a full bank name), else the URI's
    `?bank=` parameter, else `ADK_MEMORY_BANK`, else `"adk-default"`. It is created on first
    use if absent, with `**bank_config` (the fields of a Memory Bank config:
    `customization_configs`, `generation_config`, `similarity_search_config`, `ttl_config`, …);
    when the bank exists and `bank_config` is given, those top-level fields are merged into it,
    so the code stays the source of the bank's configuration. Customization configs meant for
    ADK traffic select the scope keys `["app_name", "user_id"]`, ADK's scope.

    Models: `embedding_model` is the model of a bank created without one (default: the
    offline all-MiniLM-L6-v2); `generation_model` (a model name or an ADK `BaseLlm`, such as
    `adk_memory.testing.models.ScriptedMemoryModel` in tests) overrides the bank's
    `generation_config.model`. Or pass `client=`, an `AsyncClient` you built, instead of `uri`
    and both models; the service then never closes it.

    Long-running work: like Memory Bank's operations, generation asked through
    `add_events_to_memory`/`add_memory` runs in the background unless `custom_metadata`
    sets `wait_for_completion=True`; ingested events are flushed by the ingest scheduler this
    service runs on each event loop (`run_scheduler=False` leaves that to `adk-memory worker`).
    `drain()` waits for the background work of the running loop, `flush()` generates from a
    session's buffered events now, and `aclose()` stops everything.
    """

    def __init__(
        self,
        uri: str | None = None,
        *,
        bank: str | None = None,
        client: AsyncClient | None = None,
        top_k: int | None = None,
        embedding_model: str | None = None,
        generation_model: str | BaseLlm | None = None,
        run_scheduler: bool = True,
        agents_dir: str | None = None,
        **bank_config: Any,
    ) -> None:
        """Builds the service without I/O; the store connects and the bank is ensured on first use.

        Args:
            uri: `chroma:///path`, `chroma+http://host:port`, `redis://…`, `rediss://…` or
                `memory://`. Query parameters configure the store, except `bank` and `top_k`,
                which the service reads. Default: `ADK_MEMORY_URI`, else embedded Chroma in
                `~/.adk-memory`.
            bank: The bank id or name. Default: the URI's `bank`, `ADK_MEMORY_BANK`, or
                `"adk-default"`.
            client: An `AsyncClient` to use instead of building one per event loop (then `uri`,
                `embedding_model` and `generation_model` must be None). Never closed here.
            top_k: Memories returned per search (above 100 means 100). Default: the URI's
                `top_k`, else 3.
            embedding_model: The embedding model of a bank created without one.
            generation_model: A model name or `BaseLlm` instance for memory generation,
                overriding the bank's `generation_config.model`.
            run_scheduler: Flush due ingest streams in the background on each event loop the
                service is used on.
            agents_dir: Passed by ADK's service registry; ignored.
            **bank_config: Memory Bank config fields for the bank (see the class docstring).

        Raises:
            InvalidArgument: A malformed bank id, `top_k` or `bank_config`, or conflicting
                arguments.
        """
        del agents_dir  # ADK's registry passes it to every factory; a store URI needs no folder
        if client is not None:
            if not isinstance(client, AsyncClient):
                raise InvalidArgument(
                    f"client must be an adk_memory.AsyncClient, not {type(client).__name__}; "
                    "a blocking Client runs on its own loop thread.",
                    field="client",
                )
            given = [
                name
                for name, value in (
                    ("uri", uri),
                    ("embedding_model", embedding_model),
                    ("generation_model", generation_model),
                )
                if value is not None
            ]
            if given:
                raise InvalidArgument(
                    f"Pass either client or {', '.join(given)}: a client you built already "
                    "has its store and models.",
                    field=given[0],
                )
        store_uri, parameters = _split_service_parameters(
            uri if uri is not None else (client.uri if client is not None else default_uri())
        )
        self._uri = _shared_memory_uri(store_uri)
        self._bank_id = _bank_id(bank or parameters.get("bank") or default_adk_bank_id())
        self._top_k = _check_top_k(
            top_k if top_k is not None else parameters.get("top_k", DEFAULT_TOP_K), field="top_k"
        )
        parse_model(
            types.ReasoningEngineContextSpecMemoryBankConfig, bank_config, field="bank_config"
        )
        self._bank_config = dict(bank_config)
        self._given_client = client
        self._embedding_model = embedding_model
        self._generation_model = generation_model
        self._run_scheduler = run_scheduler
        self._names = client.engine.names if client is not None else Names()
        self._loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopState] = (
            weakref.WeakKeyDictionary()
        )
        self._bank_ready = False
        self._background: set[asyncio.Task[Any]] = set()
        self._last_sent: OrderedDict[tuple[str, str, str], str] = OrderedDict()

    @property
    def bank_id(self) -> str:
        """The id of the bank this service reads and writes."""
        return self._bank_id

    @property
    def bank_name(self) -> str:
        """The full resource name of the bank (`projects/…/reasoningEngines/{bank}`)."""
        return self._names.bank(self._bank_id)

    @property
    def top_k(self) -> int:
        """Memories per search when the caller names no `top_k`."""
        return self._top_k

    # BaseMemoryService

    @override
    async def add_session_to_memory(self, session: Session) -> None:
        """Ingests the session's events not sent before into its stream (`stream_id` = session id).

        Generation follows the stream's trigger: the one set on it before (the plugin sets an
        idle trigger), else the bank's `generation_trigger_config`, else at once.
        """
        await self.ingest_session(session)

    @override
    async def add_events_to_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        events: Sequence[Event],
        session_id: str | None = None,
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Adds a delta of events, through `ingest_events` or `memories.generate` as ADK does.

        Args:
            app_name: The app, half of the scope.
            user_id: The user, the other half of the scope.
            events: The events to add; empty events and credential requests are skipped.
            session_id: The stream to append to unless `custom_metadata` names `stream_id`.
            custom_metadata: ADK's keys. Ingest path (default): `stream_id`, `force_flush`,
                `generation_trigger_config`. Any of `ttl` (= `revision_ttl`), `revision_ttl`,
                `revision_expire_time`, `revision_labels`, `metadata`,
                `metadata_merge_strategy`, `allowed_topics`, `disable_consolidation`,
                `disable_memory_revisions`, `wait_for_completion` selects `memories.generate`,
                where other keys become memory metadata.

        Raises:
            InvalidArgument: An unknown key on the ingest path, ingest and generate keys mixed,
                or a value Memory Bank refuses.
        """
        options = dict(custom_metadata or {})
        scope = _scope(app_name, user_id)
        kept = [
            (event, content) for event in events if (content := stored_content(event)) is not None
        ]
        if uses_generate(options):
            config = generate_config(options)
            if not kept:
                logger.debug("No events with text to generate memories from.")
                return
            source = {"events": [{"content": content} for _, content in kept]}
            client = await self._client()
            await self._generate(client, scope=scope, config=config, direct_contents_source=source)
            return
        unknown = sorted(set(options) - INGEST_KEYS)
        if unknown:
            raise InvalidArgument(
                f"custom_metadata key {unknown[0]!r} is not an ingest_events setting "
                f"(stream_id, force_flush, generation_trigger_config) nor a memories.generate "
                "one; remove it or put it under custom_metadata['metadata'].",
                field=f"custom_metadata.{unknown[0]}",
            )
        stream_id = options.get("stream_id") or session_id or ""
        await self._ingest(
            scope,
            stream_id=str(stream_id),
            items=kept,
            trigger=options.get("generation_trigger_config"),
            force_flush=options.get("force_flush"),
        )

    @override
    async def add_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        memories: Sequence[MemoryEntry],
        custom_metadata: Mapping[str, object] | None = None,
    ) -> None:
        """Creates one memory per entry, or consolidates them with `enable_consolidation=True`.

        `MemoryEntry.id` becomes the memory id (the last segment of a full memory name), unless
        `custom_metadata["memory_id"]` names one. `custom_metadata` and each entry's
        `custom_metadata` take `memories.create` config keys (`ttl`, `expire_time`, `topics`,
        `metadata`, …); other keys become metadata. With `enable_consolidation=True` the facts
        go through `memories.generate` (`direct_memories_source`, five per call) with its
        config keys, in the background unless `wait_for_completion=True`. ADK records an
        entry's `author` and `timestamp` as revision labels where the API allows it;
        `memories.create` has no revision labels, so they are not stored.

        Raises:
            InvalidArgument: No entries, an entry without text, or a setting Memory Bank
                refuses (nothing is written when any entry is invalid).
            AlreadyExists: A memory id is taken.
        """
        entries = _memory_entries(memories)
        options = dict(custom_metadata or {})
        consolidate = options.get(ENABLE_CONSOLIDATION_KEY)
        if consolidate is not None and not isinstance(consolidate, bool):
            raise InvalidArgument(
                f"custom_metadata[{ENABLE_CONSOLIDATION_KEY!r}] must be a bool.",
                field=f"custom_metadata.{ENABLE_CONSOLIDATION_KEY}",
            )
        facts = [memory_entry_fact(entry, index=index) for index, entry in enumerate(entries)]
        scope = _scope(app_name, user_id)
        if consolidate:
            config = generate_config(options)
            client = await self._client()
            for batch in batches(facts, MAX_DIRECT_MEMORIES):
                source = {"direct_memories": [{"fact": fact} for fact in batch]}
                await self._generate(
                    client, scope=scope, config=config, direct_memories_source=source
                )
            return
        configs = []
        for entry in entries:
            config = create_config({**options, **(entry.custom_metadata or {})})
            memory_id = memory_id_of_entry(entry)
            if memory_id and "memory_id" not in config:
                config["memory_id"] = memory_id
            configs.append(parse_model(types.MemoryConfig, config, field="custom_metadata"))
        client = await self._client()
        for fact, checked in zip(facts, configs, strict=True):
            await client.memory_banks.memories.create(
                name=self.bank_name, fact=fact, scope=scope, config=checked
            )
        logger.info("Created %d memories in bank %s.", len(facts), self._bank_id)

    @override
    async def search_memory(
        self, *, app_name: str, user_id: str, query: str, top_k: int | None = None
    ) -> SearchMemoryResponse:
        """The memories of exactly this app and user nearest to `query`, nearest first.

        Each `MemoryEntry` has `id` = the memory's full name (what `delete_memory` takes),
        `author` = "user", the fact as its text, `timestamp` = its update time (ISO 8601), and
        `custom_metadata` = its metadata as plain values plus `distance` (Euclidean; a metadata
        key named `distance` is shadowed).

        Args:
            app_name: The app, half of the scope.
            user_id: The user, the other half of the scope.
            query: The search text; an empty query finds nothing.
            top_k: Memories to return (above 100 means 100); default: the service's `top_k`.

        Raises:
            AdkMemoryError: The store or the embedding model failed; no partial results.
        """
        if not query or not query.strip():
            return SearchMemoryResponse()
        count = self._top_k if top_k is None else _check_top_k(top_k, field="top_k")
        client = await self._client()
        pager = await client.memory_banks.memories.retrieve(
            name=self.bank_name,
            scope=_scope(app_name, user_id),
            similarity_search_params={"search_query": query, "top_k": count},
        )
        found = [
            _memory_entry(hit) for hit in pager.page if hit.memory is not None and hit.memory.fact
        ]
        logger.debug(
            "Memory search: %d memories for a query of %d characters.", len(found), len(query)
        )
        return SearchMemoryResponse(memories=found)

    @override
    async def delete_memory(
        self, *, app_name: str, user_id: str, memory_id: str | None = None
    ) -> None:
        """Deletes one memory of this app and user, by the `MemoryEntry.id` search returned.

        Raises:
            InvalidArgument: No or a malformed `memory_id`.
            NotFound: No such live memory in this bank for this app and user (a memory of
                another scope is reported the same way, so ids reveal nothing).
        """
        if not memory_id:
            raise InvalidArgument(
                "memory_id is required: the MemoryEntry.id that search_memory returned.",
                field="memory_id",
            )
        if "/" in memory_id:
            bank_id, short_id = Names.parse_memory(memory_id, field="memory_id")
        else:
            bank_id, short_id = self._bank_id, memory_id
        name = self._names.memory(self._bank_id, short_id)
        missing = NotFound(
            f"Memory {memory_id[:200]!r} does not exist for this app and user in bank "
            f"{self._bank_id!r}.",
            field="memory_id",
        )
        if bank_id != self._bank_id:
            raise missing
        client = await self._client()
        memory = await client.memory_banks.memories.get(name=name)
        if dict(memory.scope or {}) != _scope(app_name, user_id):
            raise missing
        await client.memory_banks.memories.delete(name=name)

    # Beyond BaseMemoryService

    async def ingest_session(
        self,
        session: Session,
        *,
        generation_trigger_config: Mapping[str, Any]
        | types.MemoryGenerationTriggerConfig
        | None = None,
        force_flush: bool = False,
    ) -> None:
        """Sends the session's events not sent before to its stream (`stream_id` = session id).

        Args:
            session: The ADK session.
            generation_trigger_config: Stored on the stream, e.g.
                `{"generation_rule": {"idle_duration": "60s"}}`; None keeps the stream's.
            force_flush: Generate from everything buffered now.
        """
        key = (session.app_name, session.user_id, session.id)
        kept = [
            (event, content)
            for event in session.events
            if (content := stored_content(event)) is not None
        ]
        last = self._last_sent.get(key)
        ids = [event.id for event, _ in kept]
        if last is not None and last in ids:
            kept = kept[ids.index(last) + 1 :]
        await self._ingest(
            _scope(session.app_name, session.user_id),
            stream_id=session.id,
            items=kept,
            trigger=generation_trigger_config,
            force_flush=force_flush,
        )
        if kept and kept[-1][0].id:
            self._last_sent[key] = kept[-1][0].id
            self._last_sent.move_to_end(key)
            while len(self._last_sent) > _MAX_TRACKED_SESSIONS:
                self._last_sent.popitem(last=False)

    async def flush(self, *, app_name: str, user_id: str, session_id: str = "") -> None:
        """Generates memories now from what a session's stream still buffers, and waits for it."""
        client = await self._client()
        await client.memory_banks.ingest_events(
            name=self.bank_name,
            scope=_scope(app_name, user_id),
            stream_id=session_id,
            config={"force_flush": True, "wait_for_completion": True},
        )

    async def drain(self) -> None:
        """Waits for the background generation and ingest flushes started on this event loop.

        Streams waiting for their trigger (e.g. an idle duration) are not flushed; use `flush`.
        """
        loop = asyncio.get_running_loop()
        while pending := [task for task in self._background if task.get_loop() is loop]:
            await asyncio.gather(*pending, return_exceptions=True)
        state = self._loops.get(loop)
        client = self._given_client or (state.client if state is not None else None)
        if client is not None:
            await client.ingest_scheduler.drain()

    async def aclose(self) -> None:
        """Waits for background work, then closes the client this service built on this loop."""
        await self.drain()
        state = self._loops.pop(asyncio.get_running_loop(), None)
        if state is not None:
            await state.stop_polling()
            await state.client.aclose()
        # Clients of other loops cannot be closed from here; they close with their loop.
        self._loops.clear()

    # Internals

    async def _client(self) -> AsyncClient:
        if self._given_client is not None:
            state = None
            client = self._given_client
        else:
            state = self._loop_state()
            client = state.client
        if not self._bank_ready:
            # The first use connects the store. Embedded Chroma fails when several stores open
            # one folder at once in a process, so first uses of one URI take turns per loop.
            async with _first_use_lock(self._uri):
                if not self._bank_ready:
                    await self._ensure_bank(client)
        if state is not None and self._run_scheduler:
            # After the first use, which connected the store. Streams left due by an earlier
            # process get flushed even if this one only reads.
            state.start_polling()
        return client

    def _loop_state(self) -> _LoopState:
        loop = asyncio.get_running_loop()
        state = self._loops.get(loop)
        if state is None:
            for stale in [other for other in self._loops if other.is_closed()]:
                del self._loops[stale]
            client = AsyncClient(
                self._uri,
                embedding_model=self._embedding_model,
                generation_model=self._generation_model,
                run_scheduler=False,  # polled by _LoopState instead, see there
            )
            state = self._loops[loop] = _LoopState(client)
        return state

    async def _ensure_bank(self, client: AsyncClient) -> None:
        try:
            await client.memory_banks.get(name=self.bank_name)
        except NotFound:
            try:
                await client.memory_banks.create(
                    managed_semantic_memory_config=self._bank_config, memory_bank_id=self._bank_id
                )
            except AlreadyExists:
                logger.debug("Memory bank %s was created concurrently; using it.", self._bank_id)
            else:
                logger.info("Created memory bank %s.", self._bank_id)
                self._bank_ready = True
                return
        if self._bank_config:
            await client.memory_banks.update(
                name=self.bank_name, managed_semantic_memory_config=self._bank_config
            )
        self._bank_ready = True

    async def _ingest(
        self,
        scope: dict[str, str],
        *,
        stream_id: str,
        items: Sequence[tuple[Event, genai_types.Content]],
        trigger: Any,
        force_flush: object,
    ) -> None:
        if not items and trigger is None and not force_flush:
            return
        client = await self._client()
        events = [event_for_ingest(event, content) for event, content in items]
        config = {"force_flush": force_flush} if force_flush is not None else None
        for chunk in batches(events, MAX_EVENTS_PER_REQUEST) or [[]]:
            await client.memory_banks.ingest_events(
                name=self.bank_name,
                scope=scope,
                stream_id=stream_id,
                direct_contents_source={"events": list(chunk)} if chunk else None,
                generation_trigger_config=trigger,
                config=config,
            )
        logger.debug("Ingested %d events into a stream of bank %s.", len(events), self._bank_id)

    async def _generate(
        self, client: AsyncClient, *, scope: dict[str, str], config: dict[str, Any], **source: Any
    ) -> None:
        call = client.memory_banks.memories.generate(
            name=self.bank_name, scope=scope, config=config, **source
        )
        if config.get("wait_for_completion") is True:
            await call
        else:
            self._spawn(call)

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        task.add_done_callback(functools.partial(_log_failure, bank_id=self._bank_id))


class _LoopState:
    """The client of one event loop and the loop's ingest poller.

    The poller calls the client's `IngestScheduler.run_once()` until a stop event is set (or a
    cancel was asked) rather than relying on cancellation alone: on Python 3.11 a cancel that
    lands in redis-py's `asyncio.wait_for` can be swallowed, and `IngestScheduler.stop()` then
    waits forever.
    """

    def __init__(self, client: AsyncClient) -> None:
        self.client = client
        self._stop = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None

    def start_polling(self) -> None:
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll())

    async def stop_polling(self) -> None:
        self._stop.set()
        if self._poller is not None:
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None

    async def _poll(self) -> None:
        me = asyncio.current_task()
        # `cancelling()` catches a cancel that a driver swallowed (asyncio.run's shutdown).
        while not self._stop.is_set() and not (me is not None and me.cancelling()):
            try:
                await self.client.ingest_scheduler.run_once()
            except Exception:  # the poller must outlive any one failure
                logger.exception("Flushing due ingest streams failed; retrying.")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=DEFAULT_POLL_SECONDS)


_FIRST_USE_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _first_use_lock(uri: str) -> asyncio.Lock:
    locks = _FIRST_USE_LOCKS.setdefault(asyncio.get_running_loop(), {})
    return locks.setdefault(uri, asyncio.Lock())


def _log_failure(task: asyncio.Task[Any], *, bank_id: str) -> None:
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        logger.error(
            "Background memory generation in bank %s failed: %s: %s",
            bank_id,
            type(error).__name__,
            error,
        )


def _scope(app_name: str, user_id: str) -> dict[str, str]:
    # Reference §6: ADK's Vertex service always scopes memories to the app and the user.
    return {"app_name": app_name, "user_id": user_id}


def _memory_entry(hit: types.RetrieveMemoriesResponseRetrievedMemory) -> MemoryEntry:
    memory = hit.memory
    assert memory is not None and memory.fact  # filtered by the caller
    metadata = from_metadata_values(memory.metadata)
    if hit.distance is not None:
        metadata["distance"] = hit.distance
    return MemoryEntry(
        id=memory.name,
        author="user",
        content=genai_types.Content(role="user", parts=[genai_types.Part(text=memory.fact)]),
        timestamp=memory.update_time.isoformat() if memory.update_time else None,
        custom_metadata=metadata,
    )


def _memory_entries(memories: Sequence[MemoryEntry]) -> list[MemoryEntry]:
    if isinstance(memories, str) or not isinstance(memories, Sequence):
        raise InvalidArgument("memories must be a sequence of MemoryEntry.", field="memories")
    for index, entry in enumerate(memories):
        if not isinstance(entry, MemoryEntry):
            raise InvalidArgument(
                f"memories[{index}] must be a MemoryEntry.", field=f"memories[{index}]"
            )
    if not memories:
        raise InvalidArgument("memories must hold at least one MemoryEntry.", field="memories")
    return list(memories)


def _bank_id(bank: str) -> str:
    name = bank if "/" in bank else f"reasoningEngines/{bank}"
    return Names.parse_bank(name, field="bank")


def _check_top_k(value: object, *, field: str) -> int:
    """A positive count; above 100 is coerced to 100, as Memory Bank's retrieve does (SPEC §3)."""
    try:
        count = value if isinstance(value, int) else int(str(value))
    except ValueError:
        count = 0
    if isinstance(value, bool) or count < 1:
        raise InvalidArgument(
            f"{field} must be a positive whole number, not {str(value)[:20]!r}.", field=field
        )
    return min(count, _MAX_TOP_K)


def _split_service_parameters(uri: str) -> tuple[str, dict[str, str]]:
    """The store URI without the service's own query parameters, and those parameters."""
    base, separator, query = uri.partition("?")
    if not separator:
        return uri, {}
    pairs = parse_qsl(query, keep_blank_values=True)
    mine = {key: value for key, value in pairs if key in _SERVICE_URI_PARAMETERS}
    rest = [(key, value) for key, value in pairs if key not in _SERVICE_URI_PARAMETERS]
    return (f"{base}?{urlencode(rest)}" if rest else base), mine


def _shared_memory_uri(uri: str) -> str:
    """`memory://` names a private store per client; give it a name so every loop shares it."""
    parts = urlsplit(uri)
    if parts.scheme == "memory" and not (parts.netloc + parts.path).strip("/"):
        return f"memory://adk-memory-service-{uuid.uuid4().hex[:12]}"
    return uri
