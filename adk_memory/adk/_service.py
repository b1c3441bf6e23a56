"""`MemoryBankService`: ADK's `BaseMemoryService` over adk-memory's Memory Bank (SPEC §4).

It behaves like ADK's `VertexAiMemoryBankService` (reference §6): the scope is always
`{"app_name": …, "user_id": …}`, conversations go to `ingest_events` (or to `memories.generate`
when `custom_metadata` asks for a generate-only setting), `add_memory` creates memories (or
consolidates them with `enable_consolidation`), and `search_memory` is a similarity retrieve.
The engine runs in this process, on the store the URI names; nothing here talks to Google Cloud.
With an `http://` URI the engine is an `adk-memory serve`'s instead: the service forwards every
call to it (`RemoteAsyncClient`), and the server embeds, generates and flushes due streams.

The service does its store I/O on two event loops of its own (`_loops`: reads and writes, each
with its own client), connected and with the bank ensured at construction (tolerating
`AlreadyExists`, so several processes may start at once). The turn path is in ARCHITECTURE.md: a
turn hands its events to the writer and does not wait (the writer stores every turn's events of
the moment in one store write), each search's store calls have a deadline, and a circuit breaker
keeps turns away from a store that failed until a background probe sees it answer. A session is
one ingest stream (`stream_id` = session id) whose store drops event ids it has seen, so no event
is generated from twice; remembering each session's last handed-over event only saves resending.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import functools
import logging
import math
import sys
import threading
import time
import uuid
import weakref
from collections import OrderedDict
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Mapping,
    Sequence,
)
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

from google.adk.memory.base_memory_service import BaseMemoryService, SearchMemoryResponse
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import types as genai_types
from pydantic import Field
from typing_extensions import override

from adk_memory import types
from adk_memory._async_client import AsyncClient
from adk_memory._registry import is_server_uri
from adk_memory.adk._convert import (
    ENABLE_CONSOLIDATION_KEY,
    INGEST_KEYS,
    batches,
    create_config,
    event_for_ingest,
    generate_config,
    memory_entry_fact,
    memory_id_of_entry,
    stored_content,
    uses_generate,
)
from adk_memory.adk._loops import (
    BackgroundTasks,
    CircuitBreaker,
    ServiceThread,
    outcome_seen,
    service_thread,
)
from adk_memory.adk._options import (
    DEFAULT_GENERATION_WAIT,
    DEFAULT_IDLE_DURATION,
    DEFAULT_TOP_K,
    options_from_agents_dir,
    parse_options,
    search_query_within,
    split_service_parameters,
    top_k_within,
    with_service_options,
)
from adk_memory.embeddings import Embedder, warm_up
from adk_memory.engine.convert import metadata_from_request, parse_model
from adk_memory.engine.generate import MAX_DIRECT_MEMORIES
from adk_memory.engine.ingest import (
    MAX_EVENTS_PER_REQUEST,
    STREAM_KIND,
    IngestRequest,
    IngestResult,
    StreamStatus,
    stream_key,
)
from adk_memory.errors import (
    AdkMemoryError,
    AlreadyExists,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    StoreUnavailable,
)
from adk_memory.names import Names
from adk_memory.scheduler import DEFAULT_POLL_SECONDS
from adk_memory.settings import default_adk_bank_id, default_embedding_model, default_uri
from adk_memory.telemetry import note_memory_skipped, record_breaker

if TYPE_CHECKING:
    from google.adk.events.event import Event
    from google.adk.models import BaseLlm
    from google.adk.sessions.session import Session

__all__ = [
    "DEFAULT_GENERATION_WAIT",
    "DEFAULT_IDLE_DURATION",
    "DEFAULT_TOP_K",
    "MemoryBankEntry",
    "MemoryBankService",
]

logger = logging.getLogger(__name__)

WRITE_TIMEOUT = 5.0
"""Seconds the writer waits for the store to take the events handed over before it counts a
failure and keeps them for later."""
HANDOVER_GATHER_SECONDS = 0.02
"""Seconds the writer, woken, waits for more hand-overs before it writes (`_Writer`)."""

_MAX_TRACKED_SESSIONS = 10_000
_REMOTE_INGESTS_AT_ONCE = 8
"""Sessions whose hand-overs go to an adk-memory server at once (`_ingest_each`)."""
_TRANSIENT = (StoreUnavailable, TimeoutError, OSError)
"""Failures the turn path retries later (and counts towards the circuit breaker)."""

_T = TypeVar("_T")

_ARGUMENTS = frozenset(
    {
        "bank",
        "client",
        "top_k",
        "embedding_model",
        "generation_model",
        "run_scheduler",
        "idle_duration",
        "generation_wait",
        "search_timeout",
        "agents_dir",
    }
)
"""The constructor's keyword arguments that are not bank config fields."""


class MemoryBankEntry(MemoryEntry):
    """A `MemoryEntry` with the memory's full resource name and its distance, for code only.

    What ADK shows the model (`load_memory`'s response, a dump of `MemoryEntry`) holds the fact,
    the short memory id, the author, the time and the memory's own metadata; `name` and
    `distance` are left out of every dump.
    """

    name: str = Field(default="", exclude=True, repr=False)
    """The memory's full resource name (`projects/…/reasoningEngines/…/memories/…`)."""
    distance: float | None = Field(default=None, exclude=True, repr=False)
    """The Euclidean distance of the memory's embedding to the query's."""


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

    Customization configs meant for ADK traffic select the scope keys `["app_name", "user_id"]`.
    Generation asked through `add_events_to_memory`/`add_memory` runs in the background unless
    `custom_metadata` sets `wait_for_completion=True`, like Memory Bank's operations.
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
        run_scheduler: bool | None = None,
        idle_duration: str | None = None,
        generation_wait: float | None = None,
        search_timeout: float | None = None,
        agents_dir: str | None = None,
        **bank_config: Any,
    ) -> None:
        """Builds the service, checks its whole configuration, and starts warming up.

        Nothing here waits for I/O. Every option is checked now: a bad value, or an unknown URI
        query parameter or `services.yaml` key, raises here and not at the first turn. Then the
        store is connected and the bank ensured on the service's own threads, and the local
        embedding model loads in another, so the first turn costs what a later one does. The
        options `bank` to `search_timeout` may also come from the URI's query or from
        `services.yaml` (`ServiceOptions`); arguments win over the URI, the URI over the file.

        Args:
            uri: `chroma:///path`, `chroma+http://host:port`, `redis://…`, `rediss://…` or
                `memory://`; its other query parameters configure the store. Default:
                `ADK_MEMORY_URI`, else embedded Chroma in `~/.adk-memory`.
            bank: The bank id or name. Default: `ADK_MEMORY_BANK`, else `"adk-default"`.
            client: An `AsyncClient` built from a URI: the service uses its URI and models
                (its own clients run on the service's threads). Excludes `uri` and both models;
                never closed here.
            top_k: Memories per search (above 100 means 100). Default: 3.
            embedding_model: The model of a bank created without one. Default: all-MiniLM-L6-v2.
            generation_model: A model name or `BaseLlm` (in tests `ScriptedMemoryModel`),
                overriding the bank's `generation_config.model`.
            run_scheduler: Flush due streams and retry unstored events in the background.
            idle_duration: Generate a session's memories after this long quiet. Default: `"60s"`.
            generation_wait: Seconds a search waits for generation pending here. Default: 10.
            search_timeout: Seconds a search waits for the store. Default: 2.
            agents_dir: ADK's agents folder, whose `services.yaml` may hold an `adk_memory:`
                section of options.
            **bank_config: Memory Bank config fields: the bank is created with them, or they are
                merged into it (the code stays the source of the bank's configuration).

        Raises:
            InvalidArgument: A malformed bank id, option or `bank_config`, an unknown option,
                or conflicting arguments; the message names the option and the valid ones.
        """
        self._configure(
            uri,
            bank=bank,
            client=client,
            top_k=top_k,
            embedding_model=embedding_model,
            generation_model=generation_model,
            run_scheduler=run_scheduler,
            idle_duration=idle_duration,
            generation_wait=generation_wait,
            search_timeout=search_timeout,
            agents_dir=agents_dir,
            bank_config=bank_config,
        )
        # Both clients are built now (no I/O): the store checks its URI options here.
        self._reads = _Side(service_thread("reads"), self._client_builder())
        self._writes = _Side(service_thread("writes"), self._client_builder())
        self._breaker = CircuitBreaker()
        self._handover = _Handover()
        self._last_sent: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        self._last_sent_lock = threading.Lock()
        self._bank_ready = False
        self._used = False
        """Set by the first call: the writer polls the scheduler only for a service in use."""
        # Over http(s) the server embeds: nothing to load here.
        self._warm = (
            _NOTHING_TO_LOAD
            if self._remote
            else warm_up(self._embedding_model or default_embedding_model())
        )
        self._writer: _Writer | None = None
        self._probe_task: asyncio.Task[None] | None = None
        self._asked: dict[str, dict[str, str]] = {}
        """Scopes of the streams whose generation was asked here and is running (writes loop)."""
        self._query_embedder: tuple[float, Embedder] | None = None
        """When the bank's model was read, and its embedder (`_bank_embedder`, reads loop)."""
        self._opened = threading.Event()
        """Set once the start-up has done the store's local work (`MemoryStore.open_locally`:
        an embedded directory, its child process), or failed to."""
        self._started: concurrent.futures.Future[None] = concurrent.futures.Future()
        """Done once the start-up has connected the store (or failed to, logged)."""
        self._start_task: asyncio.Task[None] | None = None
        self._writes.thread.call_soon(self._begin_start)
        # An unclosed service must not leak its clients' connections when it is collected.
        weakref.finalize(self, _close_sides, self._reads, self._writes)
        _LIVE.add(self)

    @classmethod
    def check(cls, uri: str | None = None, **options: Any) -> None:
        """Checks the arguments as the constructor does, without starting anything (no I/O).

        Raises:
            InvalidArgument: What the constructor would raise.
        """
        service = cls.__new__(cls)
        bank_config = {key: value for key, value in options.items() if key not in _ARGUMENTS}
        given = {key: value for key, value in options.items() if key in _ARGUMENTS}
        service._configure(uri, **given, bank_config=bank_config)
        service._client_builder()()  # the store checks its URI options

    def _configure(
        self,
        uri: str | None,
        *,
        bank: str | None = None,
        client: AsyncClient | None = None,
        top_k: int | None = None,
        embedding_model: str | None = None,
        generation_model: str | BaseLlm | None = None,
        run_scheduler: bool | None = None,
        idle_duration: str | None = None,
        generation_wait: float | None = None,
        search_timeout: float | None = None,
        agents_dir: str | None = None,
        bank_config: dict[str, Any],
    ) -> None:
        if client is not None:
            _check_client(client, uri=uri, embedding_model=embedding_model, model=generation_model)
        store_uri, from_uri = split_service_parameters(
            uri if uri is not None else (client.uri if client is not None else default_uri())
        )
        given = parse_options(
            {
                "bank": bank,
                "top_k": top_k,
                "embedding_model": embedding_model,
                "generation_model": generation_model if isinstance(generation_model, str) else None,
                "idle_duration": idle_duration,
                "generation_wait": generation_wait,
                "search_timeout": search_timeout,
                "run_scheduler": run_scheduler,
            },
            where="MemoryBankService",
        )
        options = given.over(from_uri.over(options_from_agents_dir(agents_dir)))
        self._uri = _shared_memory_uri(store_uri)
        self._remote = is_server_uri(self._uri)
        self._bank_id = Names.parse_bank_id(options.bank or default_adk_bank_id(), field="bank")
        self._options = options
        parse_model(
            types.ReasoningEngineContextSpecMemoryBankConfig, bank_config, field="bank_config"
        )
        self._bank_config = dict(bank_config)
        self._embedding_model = options.embedding_model
        self._generation_model = (
            generation_model if generation_model is not None else options.generation_model
        )
        local = client is not None and not client.remote
        if client is not None and local:
            self._embedding_model = client.engine.context.default_embedding_model
            self._generation_model = client.engine.context.generation_model
        if self._remote and self._generation_model is not None:
            raise InvalidArgument(
                "generation_model does not apply to an adk-memory server URI: the server "
                "generates (adk-memory serve --model chooses its model).",
                field="generation_model",
            )
        self._names = client.engine.names if client is not None and local else Names()
        # A server client's key goes with the clients the service builds from its URI.
        self._api_key: str | None = getattr(client, "api_key", None) if self._remote else None

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
        return self._options.top_k

    @property
    def idle_trigger(self) -> dict[str, Any]:
        """The trigger stored on every stream: generate after `idle_duration` of quiet."""
        return {"generation_rule": {"idle_duration": self._options.idle_duration}}

    @property
    def generation_model(self) -> str | BaseLlm | None:
        """The model that generates memories, when set here (else each bank's own)."""
        return self._generation_model

    @property
    def generation_wait(self) -> float:
        """Seconds a search waits for the user's memories still being generated here."""
        return self._options.generation_wait

    @property
    def search_timeout(self) -> float:
        """Seconds a search (and each store call of a turn) waits for the store."""
        return self._options.search_timeout

    @property
    def warming(self) -> bool:
        """True while the embedding model loads or the store connects after construction."""
        return not self._warm.is_set() or not self._started.done()

    @property
    def memory_available(self) -> bool:
        """False while turns skip memory because the store failed (until it answers again)."""
        return self._breaker.allows()

    # BaseMemoryService

    @override
    async def add_session_to_memory(self, session: Session) -> None:
        """Hands the session's new events to the store, then generates from them at once.

        Like ADK's Vertex service, generation starts at once, in the background (ADK's
        after-agent callback calls this after each turn). The call returns without waiting
        for the store: the events are written by the service's writer (together with other
        turns' events, in one store write) within milliseconds, and retried while the store
        fails. It never raises a store failure into the agent's turn.
        """
        await self.remember_session(session, generate_now=True)

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

        `custom_metadata` takes ADK's keys (README, "ADK"): `stream_id` (default: `session_id`),
        `force_flush` and `generation_trigger_config` ingest; any `memories.generate` config key
        switches to it, where other keys become memory metadata. Empty events and credential
        requests are skipped. The events are in the store when this returns.

        Raises:
            InvalidArgument: An unknown key on the ingest path, ingest and generate keys mixed,
                or a value Memory Bank refuses.
        """
        self._used = True
        options = dict(custom_metadata or {})
        scope = _scope(app_name, user_id)
        kept = _with_content(events)
        if uses_generate(options):
            config = generate_config(options)
            if not kept:
                logger.debug("No events to generate memories from.")
                return
            source = {"events": [{"content": content} for _, content in kept]}
            await self._writes.run(
                self._generate(scope=scope, config=config, direct_contents_source=source)
            )
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
        await self._writes.run(
            self._ingest(
                scope,
                stream_id=str(stream_id),
                items=kept,
                trigger=options.get("generation_trigger_config"),
                force_flush=options.get("force_flush"),
            )
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
        self._used = True
        if not memories:
            raise InvalidArgument("memories must hold at least one MemoryEntry.", field="memories")
        options = dict(custom_metadata or {})
        consolidate = options.get(ENABLE_CONSOLIDATION_KEY)
        if consolidate is not None and not isinstance(consolidate, bool):
            raise InvalidArgument(
                f"custom_metadata[{ENABLE_CONSOLIDATION_KEY!r}] must be a bool.",
                field=f"custom_metadata.{ENABLE_CONSOLIDATION_KEY}",
            )
        facts = [memory_entry_fact(entry, index=index) for index, entry in enumerate(memories)]
        scope = _scope(app_name, user_id)
        if consolidate:
            config = generate_config(options)
            for batch in batches(facts, MAX_DIRECT_MEMORIES):
                source = {"direct_memories": [{"fact": fact} for fact in batch]}
                await self._writes.run(
                    self._generate(scope=scope, config=config, direct_memories_source=source)
                )
            return
        configs = []
        for entry in memories:
            config = create_config({**options, **(entry.custom_metadata or {})})
            memory_id = memory_id_of_entry(entry)
            if memory_id and "memory_id" not in config:
                config["memory_id"] = memory_id
            configs.append(parse_model(types.MemoryConfig, config, field="custom_metadata"))
        await self._writes.run(self._create(scope, facts, configs))

    @override
    async def search_memory(
        self,
        *,
        app_name: str,
        user_id: str,
        query: str,
        top_k: int | None = None,
        wait_for_generation: bool = True,
    ) -> SearchMemoryResponse:
        """The `top_k` memories of exactly this app and user nearest to `query`, nearest first.

        First waits for what this user's sessions asked to generate now here
        (`add_session_to_memory`) and is not generated yet, up to `generation_wait` unless
        `wait_for_generation` is False, so the session that just ended is seen; not for the
        searching session's own generation (its events are in its conversation already), when
        ADK's `ToolContext` (`PreloadMemoryTool`, `load_memory`) tells which session that is. Each
        result is a `MemoryBankEntry` whose `id` is what `delete_memory` takes. An empty query
        finds nothing; a query over 10,000 characters is cut to its last 10,000 (where the
        question usually is); `top_k` above 100 means 100.

        The turn path never waits long for a sick store: each store call of a search has
        `search_timeout` seconds; a timeout (or 3 failures in a row) opens the breaker, and
        while it is open searches return no memories at once (logged once) until a background
        probe sees the store answer again.

        Raises:
            AdkMemoryError: The embedding model failed, or the request is malformed; never
                partial results.
        """
        self._used = True
        if not query or not query.strip():
            return SearchMemoryResponse()
        count = self.top_k if top_k is None else top_k_within(top_k)
        query = search_query_within(query)
        scope = _scope(app_name, user_id)
        if not self._breaker.allows():
            self._note_skipped("search")
            return SearchMemoryResponse()
        try:
            await self._started_and_warm()
        except StoreUnavailable:
            return SearchMemoryResponse()
        if wait_for_generation and self.generation_wait > 0:
            try:
                await self._await_generation(
                    scope,
                    except_session_id=_searching_session_id(),
                    only_asked=True,
                    wait=self.generation_wait,
                )
            except StoreUnavailable as error:
                if not self._breaker.allows():
                    return SearchMemoryResponse()
                logger.warning("Searching without generating pending memories: %s", error.message)
        try:
            found = await self._reads.run(self._search_here(scope, query, count))
        except StoreUnavailable:
            return SearchMemoryResponse()  # logged, and counted by the breaker
        except TimeoutError:
            logger.warning(
                "Embedding a search query took over %g s; this search finds nothing.",
                EMBED_TIMEOUT,
            )
            return SearchMemoryResponse()
        logger.debug(
            "Memory search: %d memories for a query of %d characters.", len(found), len(query)
        )
        return SearchMemoryResponse(memories=list(found))

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
        if bank_id != self._bank_id or not await self._writes.run(
            self._delete(self._names.memory(self._bank_id, short_id), _scope(app_name, user_id))
        ):
            raise NotFound(
                f"Memory {memory_id[:200]!r} does not exist for this app and user in bank "
                f"{self._bank_id!r}.",
                field="memory_id",
            )

    # Beyond BaseMemoryService

    async def remember_session(
        self,
        session: Session,
        *,
        generate_now: bool = False,
        generation_trigger_config: Mapping[str, Any] | None = None,
    ) -> bool:
        """Hands the session's new events to the service's writer: never waits, never raises.

        The events go to the session's stream (`stream_id` = session id) with the idle trigger (or
        the one given); with `generate_now` their generation starts in the background once they
        are stored. The writer stores the events of every turn handed over meanwhile in one
        store write, off the turn. A store that fails or takes longer than 5 s is logged at
        WARNING with the cause, and the events stay in this process and are sent again (the
        breaker keeps the writer away from a store that does not answer, until it answers).

        Returns:
            Whether events (or a request to generate) were handed over.
        """
        self._used = True
        key = (session.app_name, session.user_id, session.id)
        kept = _with_content(session.events)
        ids = [event.id for event, _ in kept]
        with self._last_sent_lock:  # turns of several threads (synchronous runs) hand over
            if (last := self._last_sent.get(key)) is not None and last in ids:
                kept = kept[ids.index(last) + 1 :]
            if not kept and not generate_now:
                return False
            if kept and kept[-1][0].id:
                _put_bounded(self._last_sent, key, kept[-1][0].id)
        self._handover.put(
            key,
            _Handed(
                scope=_scope(session.app_name, session.user_id),
                stream_id=session.id,
                items=kept,
                trigger=dict(generation_trigger_config or self.idle_trigger),
                generate_now=generate_now,
            ),
        )
        self._writes.thread.call_soon(self._wake_writer)
        return True

    async def generate_pending(
        self,
        *,
        app_name: str,
        user_id: str,
        except_session_id: str | None = None,
        timeout: float | None = None,
    ) -> None:
        """Generates now from the user's streams holding events, and waits up to `timeout` s.

        The plugin calls this before a run's search, except for the running session, so a new
        session sees what the user's earlier sessions taught. Generation goes on in the
        background past the timeout. A stream backing off after failed generations is retried
        too, without waiting for it. While the breaker is open this does nothing; a store
        that fails or does not answer within `search_timeout` raises `StoreUnavailable`.
        """
        if not self._breaker.allows():
            self._note_skipped("generation")
            return
        await self._await_generation(
            _scope(app_name, user_id),
            except_session_id=except_session_id,
            only_asked=False,
            wait=self.generation_wait if timeout is None else timeout,
        )

    async def flush(self, *, app_name: str, user_id: str, session_id: str = "") -> int:
        """Generates memories now from what a session's stream buffers, and waits for it.

        Events handed over and not stored yet are stored first.

        Returns:
            How many memories were created or changed.

        Raises:
            AdkMemoryError: Generation failed (the events stay buffered and are retried with
                back-off; the stream records the error), or the store failed.
        """
        scope = _scope(app_name, user_id)
        changed: int = await self._writes.run(self._flush_now(scope, session_id))
        return changed

    async def drain(self) -> None:
        """Waits until the events handed over are stored and the generation started is done.

        Streams waiting for their trigger (e.g. an idle duration) are not flushed; use `flush`.
        While the store fails, events handed over stay queued and are not waited for.
        """
        await self._writes.run(self._drain_here())

    async def aclose(self) -> None:
        """Waits for background work (events handed over are stored), then closes the clients.

        Not for a store found not answering (the breaker open, checked every `WRITE_TIMEOUT`):
        the work waiting for it is dropped, with a warning, so that a hung store cannot hold a
        host's shutdown. A later call opens new clients.
        """
        await self._writes.run(self._drain_unless_sick())
        await self._writes.run(self._stop_background())
        await _close_side(self._writes)
        await _close_side(self._reads)

    # Internals: the service's threads

    def _client_builder(self) -> Callable[[], AsyncClient]:
        """Builds the service's clients; holds no reference to the service (see `_Side`)."""
        return functools.partial(
            _new_client,
            self._uri,
            project=self._names.project,
            location=self._names.location,
            embedding_model=self._embedding_model,
            generation_model=self._generation_model,
            api_key=self._api_key,
        )

    def _begin_start(self) -> None:
        self._start_task = asyncio.get_running_loop().create_task(self._start())

    async def _start(self) -> None:
        """The start-up, on the writes loop.

        Opens the store's local part, connects the store and ensures the bank, then warms the
        read side.
        """
        try:
            # A store that fails at start opens the breaker at once: the first turn skips it.
            try:
                await self._bounded(
                    self._writes.open_locally(self._uri),
                    what="start-up",
                    timeout=START_TIMEOUT,
                    opens=True,
                )
            finally:
                self._opened.set()
            await self._bounded(
                self._writes.client_for_use(self._uri, self._ensure_bank),
                what="start-up",
                timeout=START_TIMEOUT,
                opens=True,
            )
            await self._bounded(
                self._reads.run(self._warm_reads()), what="start-up", timeout=START_TIMEOUT
            )
        except StoreUnavailable:
            pass  # logged; the first use tries again
        except AdkMemoryError as error:
            logger.warning("The memory service could not start: %s: %s", error.status, error)
        finally:
            self._started.set_result(None)
            self._wake_writer()

    async def _warm_reads(self) -> None:
        if self._remote:  # a server keeps its own bank cache
            await self._reads.client_for_use(self._uri, self._ensure_bank)
        else:
            await self._bank_embedder()

    async def _started_and_warm(self) -> None:
        """Waits for what is left of the start-up, within the turn's deadline.

        The store's local work (an embedded directory opened, its child process started: about
        a second) and the local embedding model's load (seconds) are waited for, up to
        `WARMUP_TIMEOUT`, and are no store failure. The rest of the start-up (a connection and
        a bank read) that is not done within `search_timeout` counts as a store timeout.

        Raises:
            StoreUnavailable: The start-up did not finish in time.
        """
        if not self._opened.is_set():
            await asyncio.to_thread(self._opened.wait, WARMUP_TIMEOUT)
        if not self._started.done():
            await self._bounded(
                asyncio.shield(asyncio.wrap_future(self._started)), what="start-up", answers=False
            )
        if not self._warm.is_set():
            await asyncio.to_thread(self._warm.wait, WARMUP_TIMEOUT)

    async def _bounded(
        self,
        work: Awaitable[_T],
        *,
        what: str = "search",
        timeout: float | None = None,
        opens: bool = False,
        answers: bool = True,
    ) -> _T:
        """Awaits one store call of the turn path within `search_timeout`; counts its failure.

        `answers`: the work's success is an answer of the store (which closes the breaker);
        False for waits on this process's own work.

        Raises:
            StoreUnavailable: The store failed or did not answer in time (logged once per
                outage; the breaker opens at a timeout or after 3 failures in a row).
        """
        seconds = self.search_timeout if timeout is None else timeout
        began = self._breaker.began()
        try:
            result = await asyncio.wait_for(work, timeout=seconds)
        except _TRANSIENT as error:
            self._store_failed(error, what=what, opens=opens, began=began)
            if isinstance(error, StoreUnavailable):
                raise
            raise StoreUnavailable(
                f"The memory store did not answer within {seconds:g} s ({type(error).__name__})."
            ) from error
        if answers and self._breaker.succeeded():
            self._memory_back()
        return result

    def _store_failed(
        self, error: BaseException, *, what: str, opens: bool = False, began: int | None = None
    ) -> None:
        timed_out = isinstance(error, TimeoutError)
        if began is not None and began != self._breaker.began():
            logger.debug("A store call stuck in an outage already over failed (%s).", what)
            return
        if not self._breaker.failed(timed_out=timed_out or opens, began=began):
            if not self._breaker.is_open:
                logger.warning(
                    "The memory store of bank %s failed during a %s (%s: %s).",
                    self._bank_id,
                    what,
                    type(error).__name__,
                    getattr(error, "message", error) or "timed out",
                )
            return
        cause = "did not answer" if timed_out else "failed repeatedly"
        logger.warning(
            "The memory store of bank %s %s (%s during a %s); agent turns skip memory until it "
            "answers again (events wait in this process).",
            self._bank_id,
            cause,
            type(error).__name__,
            what,
        )
        record_breaker(opened=True, cause=type(error).__name__)
        self._writes.thread.call_soon(self._start_probe)

    def _memory_back(self) -> None:
        logger.warning(
            "The memory store of bank %s answers again; agent turns use memory again.",
            self._bank_id,
        )
        record_breaker(opened=False, cause="")
        self._writes.thread.call_soon(self._after_outage)

    def _after_outage(self) -> None:
        """After an outage: a start-up stuck in it is given up, the writer sends what waited.

        The next use connects afresh (writes loop).
        """
        start = self._start_task
        if start is not None and not start.done():
            start.cancel()
        self._wake_writer()

    def _note_skipped(self, what: str) -> None:
        note_memory_skipped(what)
        logger.debug("Memory store circuit open; a turn's %s skips memory.", what)

    def _start_probe(self) -> None:
        if self._probe_task is None or self._probe_task.done():
            self._probe_task = asyncio.get_running_loop().create_task(_probe(weakref.ref(self)))

    def _wake_writer(self, *, urgent: bool = False) -> None:
        """Wakes the writer, started on first use and after `aclose` (writes loop).

        `urgent`: a turn waits for the pass (`_settle`), so it writes without gathering more.
        """
        if self._writer is None:
            self._writer = _Writer(weakref.ref(self))
            self._writer.start()
        self._writer.wake(urgent=urgent)

    async def _finish(self) -> None:
        """Stores what was handed over (if the store answers), then stops the writer."""
        if self._handover.pending and self._breaker.allows():
            await self._commit_handed_over()
        await self._stop_background()

    async def _stop_background(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            await writer.stop()
        tick, self._writes.tick = self._writes.tick, None
        if tick is not None:
            with contextlib.suppress(Exception):  # the tick reports its own failures
                await self._unless_sick(tick)
        probe, self._probe_task = self._probe_task, None
        if probe is not None:
            probe.cancel()
            await asyncio.gather(probe, return_exceptions=True)

    # Internals: the writes loop

    async def _writer_pass(self, *, poll: bool) -> None:
        """Stores what was handed over (one store write), then starts a scheduler tick."""
        if not self._started.done():
            await asyncio.wrap_future(self._started)  # a cold start is no store failure
        await self._commit_handed_over()
        scheduled = self._options.run_scheduler and not self._remote  # a server flushes its own
        ticking = self._writes.tick is not None and not self._writes.tick.done()
        if poll and self._used and scheduled and not ticking and self._breaker.allows():
            try:
                client = await self._bounded(
                    self._writes.client_for_use(self._uri, self._ensure_bank),
                    what="scheduler pass",
                    timeout=WRITE_TIMEOUT,
                )
            except StoreUnavailable:
                return
            self._writes.tick = self._writes.background.start(self._scheduler_tick(client))

    async def _scheduler_tick(self, client: AsyncClient) -> None:
        """One tick of the scheduler, beside the writer (one at a time).

        Its flushes wait for their model calls (seconds each with a real model); meanwhile the
        writer goes on storing what turns hand over.
        """
        try:
            await client.ingest_scheduler.run_once()
        finally:
            if self._handover.parked:
                self._wake_writer()  # the scheduler's flushes may have held their streams

    async def _commit_handed_over(self) -> None:
        self._handover.unpark()  # once a pass: a stream still locked is parked again
        while self._handover and self._breaker.allows():
            taken = self._handover.take()
            try:
                owned = [(key, request) for key, h in taken.items() for request in h.requests()]
                requests = [request for _, request in owned]
                results = await self._bounded(
                    self._ingest_many(requests),
                    what="write of handed-over events",
                    timeout=WRITE_TIMEOUT,
                )
            except StoreUnavailable:
                self._handover.put_back(taken)
                return
            except AdkMemoryError as error:
                logger.warning(
                    "The memory store refused the events of %d sessions (%s: %s); they are "
                    "dropped.",
                    len(taken),
                    error.status,
                    error.message,
                )
                self._handover.settled()
                continue
            # A stream a flush holds is left for a pass after the flush (`_forget_flush`).
            busy = {
                key
                for (key, _), result in zip(owned, results, strict=True)
                if isinstance(result, ResourceExhausted)
            }
            self._handover.settled(parked={key: taken[key] for key in busy})
            refused = [
                result
                for result in results
                if isinstance(result, AdkMemoryError) and not isinstance(result, ResourceExhausted)
            ]
            if refused:
                logger.warning(
                    "The memory store refused the events of %d sessions (first: %s: %s); they "
                    "are dropped.",
                    len(refused),
                    refused[0].status,
                    refused[0].message,
                )
            for key, handed in taken.items():
                if handed.generate_now and key not in busy:
                    self._start_flush(stream_key(handed.scope, handed.stream_id), handed.scope)
            logger.debug("Stored the events of %d sessions in one write.", len(taken))

    async def _ingest_many(
        self, requests: list[IngestRequest]
    ) -> list[IngestResult | AdkMemoryError]:
        client = await self._writes.client_for_use(self._uri, self._ensure_bank)
        if client.remote:
            return await _ingest_each(client, self.bank_name, requests)
        return await client.engine.ingest.ingest_many(self._bank_id, requests, skip_busy=True)

    async def _list_streams(self, scope: dict[str, str]) -> tuple[str, list[StreamStatus]]:
        """The scope's streams holding events, and the time they were listed at."""
        client = await self._writes.client_for_use(self._uri, self._ensure_bank)
        now = (datetime.now(UTC) if client.remote else client.engine.context.clock()).isoformat()
        return now, await client.memory_banks.list_streams(name=self.bank_name, scope=scope)

    async def _settle(
        self,
        scope: dict[str, str],
        *,
        except_session_id: str | None = None,
        parked_wait: float = math.inf,
    ) -> set[str]:
        """Waits until the events handed over for `scope` are stored (or the store failed).

        Not for `except_session_id`'s: a session does not wait for its own events. Each wait for
        the writer's store write has the write deadline (`StoreUnavailable` past it); a hand-over
        parked behind a flush of its stream waits for the model's calls, not for the store: up to
        `parked_wait` s in all, then this returns without counting a store failure.

        Returns:
            The sessions (stream ids) whose hand-overs it waited for.
        """
        waited: set[str] = set()
        loop = asyncio.get_running_loop()
        parked_until = loop.time() + parked_wait
        while (handed := self._handover.stream_ids(scope, except_session_id)) and (
            self._breaker.allows()
        ):
            waited |= handed
            if self._handover.stream_ids(scope, except_session_id, parked=False):
                self._wake_writer(urgent=True)
                await self._bounded(
                    self._handover.wait_settled(),
                    what="write of handed-over events",
                    timeout=WRITE_TIMEOUT,
                    answers=False,
                )
                continue
            # Only parked ones: their flushes' ends wake the writer (waking it now would only
            # find their streams locked again, pass after pass).
            remaining = parked_until - loop.time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._handover.wait_settled(), remaining)
        return waited

    async def _await_generation(
        self,
        scope: dict[str, str],
        *,
        except_session_id: str | None,
        only_asked: bool,
        wait: float,
    ) -> None:
        """From the caller's loop: `_generate_pending` on the writes loop, store calls bounded."""
        await self._writes.run(
            self._generate_pending(
                scope, except_session_id=except_session_id, only_asked=only_asked, wait=wait
            )
        )

    async def _generate_pending(
        self,
        scope: dict[str, str],
        *,
        except_session_id: str | None,
        only_asked: bool,
        wait: float,
    ) -> None:
        """Generates the scope's pending streams now and waits up to `wait` s (writes loop).

        `only_asked`: only what this process was asked to generate now
        (`add_session_to_memory`), which needs no store read; else every stream of the scope
        holding events, except `except_session_id`'s (`_flush_scope`).
        """
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        if only_asked:
            await self._settle(scope, except_session_id=except_session_id, parked_wait=wait)
            own = stream_key(scope, except_session_id) if except_session_id is not None else None
            waited = [
                task
                for key, task in list(self._writes.flushes.items())
                if self._asked.get(key) == scope and key != own and not task.done()
            ]
        else:
            waited = await self._flush_scope(scope, except_session_id, wait)
        if waited and (remaining := until - loop.time()) > 0:
            await asyncio.wait(waited, timeout=remaining)

    async def _flush_scope(
        self, scope: dict[str, str], except_session_id: str | None, wait: float
    ) -> list[asyncio.Task[None]]:
        """Starts generating the scope's streams that hold events; returns those to wait for.

        The store lists them while the scope's hand-overs are being stored (a turn's loop waits
        for both, so not one after the other); a stream listed too early to show the events
        handed over is generated once they are stored, like every stream handed over. A stream
        backing off after failed generations is retried, but not waited for.
        """
        listing = asyncio.ensure_future(
            self._bounded(self._list_streams(scope), what="listing of streams")
        )
        try:
            handed = await self._settle(
                scope, except_session_id=except_session_id, parked_wait=wait
            )
        except BaseException:
            listing.cancel()
            listing.add_done_callback(outcome_seen)
            raise
        waited = [self._start_flush(stream_key(scope, stream), scope) for stream in handed]
        now, streams = await listing
        for stream in streams:
            if stream.stream_id != except_session_id and stream.stream_id not in handed:
                task = self._start_flush(stream.key, scope)
                if (stream.retry_after or "") <= now:
                    waited.append(task)
        return waited

    def _start_flush(self, stream: str, scope: dict[str, str]) -> asyncio.Task[None]:
        """Generates from a stream now in the background (joined by later callers)."""
        flushes = self._writes.flushes
        running = flushes.get(stream)
        if running is not None and not running.done():
            return running
        task = asyncio.get_running_loop().create_task(self._flush_stream(stream))
        flushes[stream] = task
        self._asked[stream] = scope
        task.add_done_callback(lambda done: self._forget_flush(stream, done))
        return task

    def _forget_flush(self, stream: str, task: asyncio.Task[None]) -> None:
        if self._writes.flushes.get(stream) is task:
            del self._writes.flushes[stream]
            self._asked.pop(stream, None)
        if self._handover.parked:
            # The stream it held may be one the writer left: its hand-over, which has waited
            # for a whole flush (and maybe a search with it), goes without gathering more.
            self._wake_writer(urgent=True)

    async def _flush_stream(self, stream: str) -> None:
        try:
            client = await self._writes.client_for_use(self._uri, self._ensure_bank)
            if client.remote:
                await client.memory_banks.flush_stream(name=self.bank_name, key=stream)
            else:
                await client.engine.ingest.flush(self._bank_id, stream, now_or_never=True)
        except ResourceExhausted:
            pass  # another flush held the stream past the wait; it takes these events too
        except AdkMemoryError as error:
            logger.warning("Memory generation failed (%s: %s).", error.status, error.message)

    async def _flush_now(self, scope: dict[str, str], session_id: str) -> int:
        await self._settle(scope)
        client = await self._writes.client_for_use(self._uri, self._ensure_bank)
        return await client.memory_banks.flush_stream(
            name=self.bank_name, key=stream_key(scope, session_id)
        )

    async def _drain_unless_sick(self) -> None:
        """`_drain_here`, given up once the breaker is open (`_unless_sick`)."""
        if await self._unless_sick(asyncio.ensure_future(self._drain_here())):
            return
        logger.warning(
            "Closing the memory service of bank %s without waiting for its store, which is not "
            "answering: events handed over and not stored yet are dropped.",
            self._bank_id,
        )
        # Else, once the store's client is closed, they would fail and record their failure
        # through a new one (an embedded folder held, a child started, after the close).
        stuck = [*self._writes.flushes.values(), *self._writes.background.on_this_loop()]
        for task in stuck:
            task.cancel()
        if stuck:
            await asyncio.wait(stuck, timeout=PROBE_TIMEOUT)

    async def _unless_sick(self, work: asyncio.Future[None]) -> bool:
        """Waits for `work` (on the writes loop) while the store answers; False if given up.

        Work stuck in a hung store fails no bounded call, so while `work` goes on, the store is
        probed every write deadline (a timeout opens the breaker); once the breaker is open,
        `work` is cancelled. Raises what `work` raised.
        """
        while not work.done():
            await asyncio.wait({work}, timeout=WRITE_TIMEOUT)
            if not work.done() and self._breaker.allows():
                with contextlib.suppress(Exception):  # a failure is counted by `_bounded`
                    await self._bounded(
                        self._writes.probe(self._bank_id), what="close", timeout=PROBE_TIMEOUT
                    )
            if not work.done() and not self._breaker.allows():
                work.cancel()
                await asyncio.gather(work, return_exceptions=True)
                return False
        if not work.cancelled():
            work.result()
        return True

    async def _drain_here(self) -> None:
        if self._breaker.allows():
            self._wake_writer()
            while self._handover.pending and self._breaker.allows():
                await self._handover.wait_settled()
        await self._writes.background.drain()
        while flushes := list(self._writes.flushes.values()):
            await asyncio.gather(*flushes, return_exceptions=True)
        if self._writes.client is not None and not self._writes.client.remote:
            await self._writes.client.ingest_scheduler.drain()

    async def _ensure_bank(self, client: AsyncClient) -> None:
        """Creates the bank, or merges the service's config into it: once per service."""
        if self._bank_ready:
            return
        await self._create_or_update_bank(client)
        self._bank_ready = True

    async def _create_or_update_bank(self, client: AsyncClient) -> None:
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
                return
        if self._bank_config:
            await client.memory_banks.update(
                name=self.bank_name, managed_semantic_memory_config=self._bank_config
            )

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
        client = await self._writes.client_for_use(self._uri, self._ensure_bank)
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
        self, *, scope: dict[str, str], config: dict[str, Any], **source: Any
    ) -> None:
        client = await self._writes.client_for_use(self._uri, self._ensure_bank)
        call = client.memory_banks.memories.generate(
            name=self.bank_name, scope=scope, config=config, **source
        )
        if config.get("wait_for_completion") is True:
            await call
        else:
            self._writes.background.start(call)

    async def _create(
        self, scope: dict[str, str], facts: list[str], configs: list[types.MemoryConfig]
    ) -> None:
        client = await self._writes.client_for_use(self._uri, self._ensure_bank)
        for fact, checked in zip(facts, configs, strict=True):
            await client.memory_banks.memories.create(
                name=self.bank_name, fact=fact, scope=scope, config=checked
            )
        logger.info("Created %d memories in bank %s.", len(facts), self._bank_id)

    async def _delete(self, name: str, scope: dict[str, str]) -> bool:
        client = await self._writes.client_for_use(self._uri, self._ensure_bank)
        memory = await client.memory_banks.memories.get(name=name)
        if dict(memory.scope or {}) != scope:
            return False
        await client.memory_banks.memories.delete(name=name)
        return True

    # Internals: the reads loop

    async def _bank_embedder(self) -> Embedder:
        """The embedder of the bank's model as read at most `QUERY_EMBEDDER_SECONDS` ago.

        A search embeds its query with it before its retrieve, which embeds with the bank's
        model as stored then: a model changed meanwhile (`adk-memory reembed`) costs a search
        one embedding more, never a wrong result, and no search reads the bank twice.
        """
        remembered = self._query_embedder
        if remembered is not None and time.monotonic() - remembered[0] < QUERY_EMBEDDER_SECONDS:
            return remembered[1]
        client = await self._reads.client_for_use(self._uri, self._ensure_bank)
        embedder = (await client.engine.context.load_bank(self._bank_id)).embedder
        self._query_embedder = (time.monotonic(), embedder)
        return embedder

    async def _search_here(
        self, scope: dict[str, str], query: str, count: int
    ) -> list[MemoryBankEntry]:
        """A search's embedding and store calls, in one trip to the reads loop (reads loop).

        A turn's loop is busy with other turns: each trip back to it costs a wait in its queue.
        The query's embedding is no store call: it is bounded apart (a busy CPU is no sick
        store), and the retrieve then finds it in the embedder's query cache. Over http(s) the
        server embeds, within the retrieve's deadline.
        """
        if not self._remote:
            embedder = await self._bounded(self._bank_embedder())
            await asyncio.wait_for(embedder.embed_query(query), EMBED_TIMEOUT)
        return await self._bounded(self._retrieve(scope, query, count))

    async def _retrieve(
        self, scope: dict[str, str], query: str, count: int
    ) -> list[MemoryBankEntry]:
        client = await self._reads.client_for_use(self._uri, self._ensure_bank)
        pager = await client.memory_banks.memories.retrieve(
            name=self.bank_name,
            scope=scope,
            similarity_search_params={"search_query": query, "top_k": count},
        )
        return [
            _memory_entry(hit) for hit in pager.page if hit.memory is not None and hit.memory.fact
        ]


START_TIMEOUT = 10.0
"""Seconds the start-up may take (connecting, ensuring the bank) before it counts as a store
timeout; the first turn waits for it only `search_timeout`."""
EMBED_TIMEOUT = 10.0
"""Seconds a search waits for its query's embedding (a slow embedder is no store failure)."""
QUERY_EMBEDDER_SECONDS = 30.0
"""Seconds a search trusts the bank's embedding model as last read (`_bank_embedder`)."""
WARMUP_TIMEOUT = 30.0
"""Seconds a search waits for the local embedding model still loading after a start."""
PROBE_INTERVAL = 1.0
"""Seconds between two probes of a store the breaker keeps turns away from."""
PROBE_TIMEOUT = 2.0
"""Seconds a probe waits for the store's answer."""
_PROBE_KEY = "adk-memory-probe"
"""The key of the stream document a probe reads (none is ever written under it)."""


@dataclass
class _Handed:
    """What turns handed over for one session and the writer has not stored yet."""

    scope: dict[str, str]
    stream_id: str
    items: list[tuple[Event, genai_types.Content]]
    trigger: dict[str, Any] | None
    generate_now: bool

    def merged_after(self, earlier: _Handed) -> _Handed:
        """This hand-over with an earlier one of the same session in front of it."""
        return _Handed(
            self.scope,
            self.stream_id,
            [*earlier.items, *self.items],
            self.trigger or earlier.trigger,
            self.generate_now or earlier.generate_now,
        )

    def requests(self) -> list[IngestRequest]:
        """The ingest requests of this hand-over (one per 1,000 events)."""
        events = [event_for_ingest(event, content) for event, content in self.items]
        config = types.IngestEventsConfig(force_flush=True if self.generate_now else None)
        return [
            IngestRequest(
                scope=self.scope,
                stream_id=self.stream_id,
                source={"events": list(chunk)} if chunk else None,
                trigger_config=self.trigger,
                config=config,
            )
            for chunk in batches(events, MAX_EVENTS_PER_REQUEST) or [[]]
        ]


class _Handover:
    """Hand-overs by session, put from any thread, taken by the writer (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queued: OrderedDict[tuple[str, str, str], _Handed] = OrderedDict()
        self._taken: dict[tuple[str, str, str], _Handed] = {}
        self._parked: dict[tuple[str, str, str], _Handed] = {}
        """Taken, but their streams were locked (being flushed): taken again by the next pass."""
        self._settled: asyncio.Event | None = None  # on the writes loop

    def __bool__(self) -> bool:
        return bool(self._queued)

    @property
    def pending(self) -> bool:
        """Whether anything is queued, being written, or waiting for a flush to end."""
        with self._lock:
            return bool(self._queued or self._taken or self._parked)

    @property
    def parked(self) -> bool:
        """Whether hand-overs wait for their streams' flushes to end."""
        return bool(self._parked)

    def put(self, key: tuple[str, str, str], handed: _Handed) -> None:
        with self._lock:
            earlier = self._queued.pop(key, None)
            self._queued[key] = handed.merged_after(earlier) if earlier else handed
            while len(self._queued) > _MAX_TRACKED_SESSIONS:
                _, dropped = self._queued.popitem(last=False)
                logger.warning(
                    "%d events waited too long for the memory store and were dropped.",
                    len(dropped.items),
                )

    def take(self) -> dict[tuple[str, str, str], _Handed]:
        with self._lock:
            self._taken, self._queued = dict(self._queued), OrderedDict()
            return dict(self._taken)

    def unpark(self) -> None:
        """Queues what earlier passes left parked again, in front of what came meanwhile."""
        with self._lock:
            parked, self._parked = self._parked, {}
            self._queue_in_front(parked)

    def put_back(self, taken: dict[tuple[str, str, str], _Handed]) -> None:
        """Returns a failed write's hand-overs, in front of what came meanwhile."""
        with self._lock:
            self._queue_in_front(taken)
            self._taken = {}
        self._notify()

    def _queue_in_front(self, earlier: Mapping[tuple[str, str, str], _Handed]) -> None:
        """Under `_lock`: `earlier` first in the queue, each merged with what came after it."""
        later, self._queued = self._queued, OrderedDict(earlier)
        for key, handed in later.items():
            before = self._queued.pop(key, None)
            self._queued[key] = handed.merged_after(before) if before else handed

    def settled(self, parked: Mapping[tuple[str, str, str], _Handed] | None = None) -> None:
        """The writer's pass ended; `parked`: those it could not write yet (streams locked)."""
        with self._lock:
            self._taken = {}
            self._parked.update(parked or {})
        self._notify()

    def stream_ids(
        self, scope: dict[str, str], except_session_id: str | None = None, *, parked: bool = True
    ) -> set[str]:
        """The sessions of `scope` (not that one) whose hand-overs wait or are being written.

        `parked`: with those waiting for their streams' flushes to end.
        """
        with self._lock:
            held = (*self._queued.values(), *self._taken.values())
            if parked:
                held += tuple(self._parked.values())
            return {
                h.stream_id for h in held if h.scope == scope and h.stream_id != except_session_id
            }

    async def wait_settled(self) -> None:
        """Waits for the writer's next commit (or failure); on the writes loop."""
        if self._settled is None:
            self._settled = asyncio.Event()
        await self._settled.wait()

    def _notify(self) -> None:
        if self._settled is not None:
            self._settled.set()
            self._settled = None


class _Writer:
    """The service's task on the writes loop: stores hand-overs, polls every second.

    Woken, it waits `HANDOVER_GATHER_SECONDS` before its pass, so the hand-overs of turns ending
    together share one store write: with 20 ADK users on embedded Chroma (whose writes hold
    the GIL), the callback pattern's turns were ~20 ms faster at the median with 20 ms than
    with none (`benchmarks/NOTES.md`). A turn that waits for the pass (`_settle`: a search
    that must see its user's events) ends the gathering at once. It holds the service weakly,
    so an unclosed service can still be collected.
    """

    def __init__(self, service: weakref.ref[MemoryBankService]) -> None:
        self._service = service
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self._urgent = asyncio.Event()
        """Set by a turn waiting for the next pass (`_settle`): it starts without gathering."""
        self._task: asyncio.Task[None] | None = None
        self._waiting = False

    @property
    def idle(self) -> bool:
        """Between passes with no wake pending: the next hand-over starts a gathering."""
        return self._waiting and not self._wake.is_set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def wake(self, *, urgent: bool = False) -> None:
        if urgent:
            self._urgent.set()
        self._wake.set()

    async def stop(self) -> None:
        self._stop.set()
        self._urgent.set()  # ends a gathering at once
        self._wake.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        next_poll = 0.0
        woken = False
        loop = asyncio.get_running_loop()
        while not self._stop.is_set():
            if woken:  # the turns ending now share this pass's write, unless a turn waits for it
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._urgent.wait(), HANDOVER_GATHER_SECONDS)
            self._urgent.clear()
            service = self._service()
            if service is None:
                return
            poll = loop.time() >= next_poll
            if poll:
                next_poll = loop.time() + DEFAULT_POLL_SECONDS
            try:
                await service._writer_pass(poll=poll)
            except Exception:  # the writer must outlive any one failure
                logger.exception("A background pass of the memory service failed; retrying.")
            del service
            self._waiting = True
            try:
                timeout = max(0.0, next_poll - loop.time())
                await asyncio.wait_for(self._wake.wait(), timeout=timeout)
                woken = True
            except TimeoutError:
                woken = False
            self._waiting = False
            self._wake.clear()


class _Side:
    """One of the service's loops with the service's client on it (rebuilt after `aclose`)."""

    def __init__(self, thread: ServiceThread, build: Callable[[], AsyncClient]) -> None:
        self.thread = thread
        self._build = build
        self.client: AsyncClient | None = build()
        self._ready = False
        self.flushes: dict[str, asyncio.Task[None]] = {}
        """Running flushes by stream key (writes loop)."""
        self.tick: asyncio.Task[None] | None = None
        """The scheduler's tick running beside the writer, if any (writes loop)."""
        self.background = BackgroundTasks("memory generation")

    async def run(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Awaits `work` run on this side's loop, from any loop."""
        return await self.thread.run(work)

    def _current(self) -> AsyncClient:
        """The client, built again (not yet connected) if `aclose` dropped it."""
        if self.client is None:
            self.client = self._build()
            self._ready = False
        return self.client

    async def open_locally(self, uri: str) -> None:
        """The store's local start-up work (`MemoryStore.open_locally`), on this side's loop."""
        client = self._current()
        if not client.remote:
            async with _first_use(uri):  # see `client_for_use`
                await client.engine.store.open_locally()

    async def client_for_use(
        self, uri: str, ensure: Callable[[AsyncClient], Awaitable[None]] | None = None
    ) -> AsyncClient:
        """The client, connected (and the bank ensured) on first use; on this side's loop."""
        client = self._current()
        if not self._ready:
            # Embedded Chroma fails when several stores open one folder at once in a process,
            # so the first uses of a URI take turns across the service's loops and services.
            async with _first_use(uri):
                if not self._ready:
                    if ensure is not None:
                        await ensure(client)
                    self._ready = True
        return client

    async def probe(self, bank_id: str) -> None:
        """One read that reaches the store (bank records may be cached); raises if it fails."""
        client = self._current()
        if client.remote:  # the server answers for its store; a missing bank is an answer
            with contextlib.suppress(NotFound):
                await client.memory_banks.get(name=f"reasoningEngines/{bank_id}")
            return
        await client.engine.context.store.get_document(bank_id, STREAM_KIND, _PROBE_KEY)

    async def aclose(self) -> None:
        client, self.client, self._ready = self.client, None, False
        if client is not None:
            await client.aclose()


async def _ingest_each(
    client: AsyncClient, bank_name: str, requests: list[IngestRequest]
) -> list[IngestResult | AdkMemoryError]:
    """`ingest_many` through an adk-memory server: one `ingest_events` call per request.

    The streams' calls go at once (up to `_REMOTE_INGESTS_AT_ONCE`), a stream's own in order
    (several requests may name one stream): one after another, 20 sessions handed over together
    waited ~20 round trips. A refused request gets its error in its place, as `ingest_many`
    answers; a server that fails or does not answer raises for the whole call, and the events are
    sent again later (the stream drops the event ids it has seen).
    """
    keys = [stream_key(request.scope, request.stream_id) for request in requests]
    results: list[IngestResult | AdkMemoryError] = [IngestResult(key, False) for key in keys]
    by_stream: dict[str, list[int]] = {}
    for index, key in enumerate(keys):
        by_stream.setdefault(key, []).append(index)
    gate = asyncio.Semaphore(_REMOTE_INGESTS_AT_ONCE)

    async def send(indexes: list[int]) -> None:
        async with gate:
            for index in indexes:
                request = requests[index]
                try:
                    await client.memory_banks.ingest_events(
                        name=bank_name,
                        scope=request.scope,
                        stream_id=request.stream_id,
                        direct_contents_source=request.source,
                        generation_trigger_config=request.trigger_config,
                        config=request.config,
                    )
                except StoreUnavailable:
                    raise
                except AdkMemoryError as error:
                    results[index] = error

    outcomes = await asyncio.gather(
        *(send(indexes) for indexes in by_stream.values()), return_exceptions=True
    )
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return results


async def _close_side(side: _Side) -> None:
    await side.thread.run(side.aclose())


def _close_sides(*sides: _Side) -> None:
    """Closes the clients of a collected service on their loops (not waited for)."""
    for side in sides:
        if side.client is not None and side.thread.alive:
            side.thread.submit(side.aclose())


def _new_client(
    uri: str,
    *,
    project: str,
    location: str,
    embedding_model: str | None,
    generation_model: str | BaseLlm | None,
    api_key: str | None = None,
) -> AsyncClient:
    key: dict[str, Any] = {} if api_key is None else {"api_key": api_key}  # else from the env
    try:
        return AsyncClient(
            uri,
            project=project,
            location=location,
            embedding_model=embedding_model,
            generation_model=generation_model,
            run_scheduler=False,  # polled by the service's writer instead
            serving=True,
            **key,
        )
    except InvalidArgument as error:
        raise with_service_options(error) from None


async def _probe(ref: weakref.ref[MemoryBankService]) -> None:
    """Until the store answers: one read on each side every second (writes loop).

    Holds the service weakly: the probe of a service nobody uses any more ends with it.
    """
    while True:
        await asyncio.sleep(PROBE_INTERVAL)
        service = ref()
        if service is None or not service._breaker.is_open:
            return
        sides, bank_id = (service._writes, service._reads), service._bank_id
        del service
        try:
            for side in sides:
                await asyncio.wait_for(side.run(side.probe(bank_id)), PROBE_TIMEOUT)
        except Exception:  # still down
            continue
        service = ref()
        if service is not None and service._breaker.succeeded():
            service._memory_back()
        return


_NOTHING_TO_LOAD = threading.Event()
"""The warm-up of a service whose server embeds: nothing to wait for."""
_NOTHING_TO_LOAD.set()


_CALLER_FRAMES = 8
"""How far up the stack `_searching_session_id` looks for ADK's context."""


def _searching_session_id() -> str | None:
    """The session of the ADK invocation that called `search_memory`, if ADK's context says.

    ADK's `BaseMemoryService.search_memory` takes no session, but ADK calls it from its own
    `Context.search_memory` (`PreloadMemoryTool`, `load_memory`, `tool_context.search_memory`),
    which holds the invocation. Its session's own generation is not worth waiting for: its
    events are in the conversation already. Best effort: None when no such caller is found.
    """
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_CALLER_FRAMES):
        if frame is None:
            return None
        invocation = getattr(frame.f_locals.get("self"), "_invocation_context", None)
        session_id = getattr(getattr(invocation, "session", None), "id", None)
        if isinstance(session_id, str):
            return session_id
        frame = frame.f_back
    return None


_LIVE: weakref.WeakSet[MemoryBankService] = weakref.WeakSet()
"""Every service of the process, for `_finish_at_exit`."""
_EXIT_SECONDS = 5.0
"""What the interpreter's exit waits at most for events handed over and not stored yet."""


@atexit.register
def _finish_at_exit() -> None:
    """Stores what turns handed over (within `_EXIT_SECONDS`) and stops every service's writer.

    The service's threads are daemons: without this, events handed over in the last
    milliseconds before a script ends would be lost, and writers would poll during shutdown.
    """
    deadline = time.monotonic() + _EXIT_SECONDS
    for service in list(_LIVE):
        thread = service._writes.thread
        if not thread.alive:
            continue
        done = thread.submit(service._finish())
        with contextlib.suppress(Exception):
            done.result(timeout=max(0.0, deadline - time.monotonic()))


_FIRST_USES: dict[str, threading.Lock] = {}
_FIRST_USES_LOCK = threading.Lock()


@contextlib.asynccontextmanager
async def _first_use(uri: str) -> AsyncIterator[None]:
    """A process-wide lock per URI, taken from any loop without blocking it."""
    with _FIRST_USES_LOCK:
        lock = _FIRST_USES.setdefault(uri, threading.Lock())
    while not lock.acquire(blocking=False):
        await asyncio.sleep(0.005)
    try:
        yield
    finally:
        lock.release()


_Key = TypeVar("_Key")
_Value = TypeVar("_Value")


def _put_bounded(table: OrderedDict[_Key, _Value], key: _Key, value: _Value) -> None:
    """Sets `key` as the newest entry, dropping the oldest past `_MAX_TRACKED_SESSIONS`."""
    table[key] = value
    table.move_to_end(key)
    while len(table) > _MAX_TRACKED_SESSIONS:
        table.popitem(last=False)


def _with_content(events: Iterable[Event]) -> list[tuple[Event, genai_types.Content]]:
    """The events worth remembering, each with the content to store."""
    return [(event, content) for event in events if (content := stored_content(event)) is not None]


def _scope(app_name: str, user_id: str) -> dict[str, str]:
    # Reference §6: ADK's Vertex service always scopes memories to the app and the user.
    return {"app_name": app_name, "user_id": user_id}


def _memory_entry(hit: types.RetrieveMemoriesResponseRetrievedMemory) -> MemoryBankEntry:
    memory = hit.memory
    assert memory is not None and memory.fact and memory.name  # filtered by the caller
    return MemoryBankEntry(
        id=memory.name.rsplit("/", 1)[-1],
        author="user",
        content=genai_types.Content(role="user", parts=[genai_types.Part(text=memory.fact)]),
        timestamp=memory.update_time.isoformat() if memory.update_time else None,
        custom_metadata=dict(metadata_from_request(memory.metadata)),
        name=memory.name,
        distance=hit.distance,
    )


def _check_client(
    client: object, *, uri: str | None, embedding_model: str | None, model: object
) -> None:
    if not isinstance(client, AsyncClient):
        raise InvalidArgument(
            f"client must be an adk_memory.AsyncClient, not {type(client).__name__}; "
            "a blocking Client runs on its own loop thread.",
            field="client",
        )
    named = {"uri": uri, "embedding_model": embedding_model, "generation_model": model}
    given = [name for name, value in named.items() if value is not None]
    if given:
        raise InvalidArgument(
            f"Pass either client or {', '.join(given)}: a client you built already "
            "has its store and models.",
            field=given[0],
        )
    if _unnamed_memory(client.uri) or not client.built_from_uri:
        raise InvalidArgument(
            "client cannot be used on other event loops: it was built on a store object or on "
            "an unnamed memory:// store, which a client built for another loop cannot reach "
            "(ADK runs each synchronous Runner.run on a new loop). Build it from a URI (a named "
            "one for memory://, e.g. AsyncClient('memory://my-app')), or pass uri= instead.",
            field="client",
        )


def _shared_memory_uri(uri: str) -> str:
    """`memory://` names a private store per client; give it a name so every loop shares it."""
    return f"memory://adk-memory-service-{uuid.uuid4().hex[:12]}" if _unnamed_memory(uri) else uri


def _unnamed_memory(uri: str) -> bool:
    parts = urlsplit(uri)
    return parts.scheme == "memory" and not (parts.netloc + parts.path).strip("/")
