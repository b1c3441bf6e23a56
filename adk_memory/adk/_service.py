"""`MemoryBankService`: ADK's `BaseMemoryService` over adk-memory's Memory Bank (SPEC §4).

It behaves like ADK's `VertexAiMemoryBankService` (reference §6): the scope is always
`{"app_name": …, "user_id": …}`, conversations go to `ingest_events` (or to `memories.generate`
when `custom_metadata` asks for a generate-only setting), `add_memory` creates memories (or
consolidates them with `enable_consolidation`), and `search_memory` is a similarity retrieve.
The engine runs in this process, on the store the URI names; nothing here talks to Google Cloud.
With an `http://` URI the engine is an `adk-memory serve`'s instead: the service forwards every
call to it (`RemoteAsyncClient`), and the server generates and flushes due streams.

One `AsyncClient` per event loop (`_loops`), the bank ensured on first use (tolerating
`AlreadyExists`, so several processes may start at once), and the turn path (bounded writes that
never raise, a circuit breaker, when generation runs) are described in ARCHITECTURE.md. A session
is one ingest stream (`stream_id` = session id) whose store drops event ids it has seen, so no
event is generated from twice; remembering each session's last sent event only saves resending.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
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
from adk_memory.adk._loops import BackgroundTasks, CircuitBreaker, LoopClients, LoopState
from adk_memory.adk._options import (
    DEFAULT_GENERATION_WAIT,
    DEFAULT_IDLE_DURATION,
    DEFAULT_TOP_K,
    options_from_agents_dir,
    parse_options,
    split_service_parameters,
    top_k_within,
)
from adk_memory.embeddings import preload_embedder
from adk_memory.engine.convert import metadata_from_request, parse_model
from adk_memory.engine.generate import MAX_DIRECT_MEMORIES
from adk_memory.engine.ingest import MAX_EVENTS_PER_REQUEST, stream_key
from adk_memory.errors import (
    AdkMemoryError,
    AlreadyExists,
    InvalidArgument,
    NotFound,
    ResourceExhausted,
    StoreUnavailable,
)
from adk_memory.names import Names
from adk_memory.settings import default_adk_bank_id, default_embedding_model, default_uri

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
"""Seconds the turn path waits for the store to take a run's events (or list the user's streams)
before it counts a failure and, for events, retries later."""

_MAX_TRACKED_SESSIONS = 10_000
_TRANSIENT = (StoreUnavailable, TimeoutError, OSError)
"""Failures the turn path retries later (and counts towards the circuit breaker)."""


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
        agents_dir: str | None = None,
        **bank_config: Any,
    ) -> None:
        """Builds the service; the store connects and the bank is ensured on first use.

        The only work started here is loading the local embedding model in a background thread,
        so that the first search after a start does not wait for it from scratch. The options
        `bank` to `generation_wait` may also come from the URI's query or from `services.yaml`
        (`ServiceOptions`); arguments win over the URI, the URI over the file.

        Args:
            uri: `chroma:///path`, `chroma+http://host:port`, `redis://…`, `rediss://…` or
                `memory://`; its other query parameters configure the store. Default:
                `ADK_MEMORY_URI`, else embedded Chroma in `~/.adk-memory`.
            bank: The bank id or name. Default: `ADK_MEMORY_BANK`, else `"adk-default"`.
            client: An `AsyncClient` built from a URI, for the loop the service is built on (or
                the first that uses it); other loops get clients with its URI and models, closed
                with their loop. Excludes `uri` and both models; never closed here.
            top_k: Memories per search (above 100 means 100). Default: 3.
            embedding_model: The model of a bank created without one. Default: all-MiniLM-L6-v2.
            generation_model: A model name or `BaseLlm` (in tests `ScriptedMemoryModel`),
                overriding the bank's `generation_config.model`.
            run_scheduler: Flush due streams and retry unstored events on each loop (default).
            idle_duration: Generate a session's memories after this long quiet. Default: `"60s"`.
            generation_wait: Seconds a search waits for generation pending here. Default: 10.
            agents_dir: ADK's agents folder, whose `services.yaml` may hold an `adk_memory:`
                section of options.
            **bank_config: Memory Bank config fields: the bank is created with them, or they are
                merged into it (the code stays the source of the bank's configuration).

        Raises:
            InvalidArgument: A malformed bank id, option or `bank_config`, or conflicting
                arguments.
        """
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
                "run_scheduler": run_scheduler,
            },
            where="MemoryBankService",
        )
        options = given.over(from_uri.over(options_from_agents_dir(agents_dir)))
        self._uri = _shared_memory_uri(store_uri)
        remote = is_server_uri(self._uri)
        self._bank_id = Names.parse_bank_id(options.bank or default_adk_bank_id(), field="bank")
        self._options = options
        parse_model(
            types.ReasoningEngineContextSpecMemoryBankConfig, bank_config, field="bank_config"
        )
        self._bank_config = dict(bank_config)
        self._given_client = client
        # The given client belongs to the loop the service is built on, if any, else to the
        # first loop that uses the service; other loops get clients of their own.
        self._given_loop = _running_loop()
        self._embedding_model = options.embedding_model
        self._generation_model = (
            generation_model if generation_model is not None else options.generation_model
        )
        if client is not None and not client.remote:
            self._embedding_model = client.engine.context.default_embedding_model
            self._generation_model = client.engine.context.generation_model
        if remote and self._generation_model is not None:
            raise InvalidArgument(
                "generation_model does not apply to an adk-memory server URI: the server "
                "generates (adk-memory serve --model chooses its model).",
                field="generation_model",
            )
        self._names = client.engine.names if client is not None and not client.remote else Names()
        self._loops = LoopClients(self._build_client)
        self._bank_ready = False
        self._background = BackgroundTasks(f"memory generation in bank {self._bank_id}")
        self._last_sent: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        self._unsent: OrderedDict[tuple[str, str, str], Callable[[], Awaitable[bool]]] = (
            OrderedDict()
        )
        """Sessions whose latest events the store has not taken yet: their retry."""
        self._breaker = CircuitBreaker()
        # Over http(s) the server embeds: nothing to load here.
        self._warm = (
            _NOTHING_TO_LOAD
            if remote
            else _warm_up(self._embedding_model or default_embedding_model())
        )

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
    def warming(self) -> bool:
        """True while the local embedding model is still loading in the background."""
        return not self._warm.is_set()

    # BaseMemoryService

    @override
    async def add_session_to_memory(self, session: Session) -> None:
        """Stores the session's events not sent before, then generates from them in the background.

        Like ADK's Vertex service, generation starts at once (ADK's after-agent callback calls
        this after each turn). The events are in the store when this returns; if the store
        fails, the failure is logged at WARNING with its cause and the events are sent again
        later: this never raises a store failure into the agent's turn.
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
        requests are skipped.

        Raises:
            InvalidArgument: An unknown key on the ingest path, ingest and generate keys mixed,
                or a value Memory Bank refuses.
        """
        options = dict(custom_metadata or {})
        scope = _scope(app_name, user_id)
        kept = _with_content(events)
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
            client = await self._client()
            for batch in batches(facts, MAX_DIRECT_MEMORIES):
                source = {"direct_memories": [{"fact": fact} for fact in batch]}
                await self._generate(
                    client, scope=scope, config=config, direct_memories_source=source
                )
            return
        configs = []
        for entry in memories:
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
        self,
        *,
        app_name: str,
        user_id: str,
        query: str,
        top_k: int | None = None,
        wait_for_generation: bool = True,
    ) -> SearchMemoryResponse:
        """The `top_k` memories of exactly this app and user nearest to `query`, nearest first.

        First generates what this user's sessions asked to generate now
        (`add_session_to_memory`) and is not generated yet, waiting up to `generation_wait`
        unless `wait_for_generation` is False, so the session that just ended is seen. Each
        result is a `MemoryBankEntry` whose `id` is what `delete_memory` takes. An empty query
        finds nothing; `top_k` above 100 means 100.

        Raises:
            StoreUnavailable: The store failed, or failed repeatedly within the last 30 s.
            AdkMemoryError: The embedding model failed; never partial results.
        """
        if not query or not query.strip():
            return SearchMemoryResponse()
        count = self.top_k if top_k is None else top_k_within(top_k)
        scope = _scope(app_name, user_id)
        self._refuse_while_open()
        try:
            client = await self._client()
            if wait_for_generation and self.generation_wait > 0:
                try:  # a failure to generate first must not fail the search itself
                    await self._generate_pending(scope, except_session_id=None, only_asked=True)
                except StoreUnavailable as error:
                    logger.warning(
                        "Searching without generating pending memories: %s", error.message
                    )
            pager = await client.memory_banks.memories.retrieve(
                name=self.bank_name,
                scope=scope,
                similarity_search_params={"search_query": query, "top_k": count},
            )
        except _TRANSIENT:
            self._store_failed()
            raise
        self._breaker.succeeded()
        found = [
            _memory_entry(hit) for hit in pager.page if hit.memory is not None and hit.memory.fact
        ]
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
        name = self._names.memory(self._bank_id, short_id)
        if bank_id == self._bank_id:
            client = await self._client()
            memory = await client.memory_banks.memories.get(name=name)
            if dict(memory.scope or {}) == _scope(app_name, user_id):
                await client.memory_banks.memories.delete(name=name)
                return
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
        """Stores the session's new events for the turn path: never raises a store failure.

        The events go to the session's stream (`stream_id` = session id) with the idle trigger (or
        the one given); with `generate_now` their generation starts in the background. A store
        that fails or takes longer than 5 s is logged at WARNING with the cause, and the events
        are sent again by the background poller and by the session's next call; after 3 failures
        in a row the store is left alone for 30 s (the events wait in this process meanwhile).

        Returns:
            Whether the store holds the events now.
        """
        key = (session.app_name, session.user_id, session.id)
        trigger = dict(generation_trigger_config or self.idle_trigger)
        unsent: Callable[[], Awaitable[bool]] = functools.partial(
            self.remember_session,
            session,
            generate_now=generate_now,
            generation_trigger_config=trigger,
        )
        self._unsent.pop(key, None)
        if not self._breaker.allows():
            _put_bounded(self._unsent, key, unsent)
            logger.debug("Memory store circuit open; a session's events wait in this process.")
            return False
        kept = _with_content(session.events)
        ids = [event.id for event, _ in kept]
        if (last := self._last_sent.get(key)) is not None and last in ids:
            kept = kept[ids.index(last) + 1 :]
        scope = _scope(session.app_name, session.user_id)
        try:
            await asyncio.wait_for(
                self._ingest(
                    scope,
                    stream_id=session.id,
                    items=kept,
                    trigger=trigger if kept or generate_now else None,  # None: nothing to send
                    force_flush=generate_now,
                ),
                timeout=WRITE_TIMEOUT,
            )
        except _TRANSIENT as error:
            _put_bounded(self._unsent, key, unsent)
            opened = self._store_failed()
            logger.warning(
                "The memory store did not take a session's events (%s: %s); they are kept in "
                "this process and sent again%s.",
                type(error).__name__,
                getattr(error, "message", error) or "timed out",
                "; the store is skipped for 30 s" if opened else "",
            )
            return False
        except AdkMemoryError as error:
            logger.warning(
                "A session's events were refused by the memory store (%s: %s); they are dropped.",
                error.status,
                error.message,
            )
            return False
        self._breaker.succeeded()
        if kept and kept[-1][0].id:
            _put_bounded(self._last_sent, key, kept[-1][0].id)
        if generate_now:
            self._start_flush(stream_key(scope, session.id))
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
        too, without waiting for it. Store failures are raised (the plugin logs them).
        """
        self._refuse_while_open()
        await self._generate_pending(
            _scope(app_name, user_id),
            except_session_id=except_session_id,
            only_asked=False,
            timeout=timeout,
        )

    async def flush(self, *, app_name: str, user_id: str, session_id: str = "") -> int:
        """Generates memories now from what a session's stream buffers, and waits for it.

        Returns:
            How many memories were created or changed.

        Raises:
            AdkMemoryError: Generation failed (the events stay buffered and are retried with
                back-off; the stream records the error), or the store failed.
        """
        client = await self._client()
        scope = _scope(app_name, user_id)
        await self._retry_unsent()
        return await client.memory_banks.flush_stream(
            name=self.bank_name, key=stream_key(scope, session_id)
        )

    async def drain(self) -> None:
        """Waits for the background generation and ingest flushes started on this event loop.

        Streams waiting for their trigger (e.g. an idle duration) are not flushed; use `flush`.
        """
        await self._background.drain()
        state = self._loops.peek()
        if state is not None:
            while flushes := list(state.flushes.values()):
                await asyncio.gather(*flushes, return_exceptions=True)
            if not state.client.remote:
                await state.client.ingest_scheduler.drain()

    async def aclose(self) -> None:
        """Waits for background work, then closes the client this service built on this loop.

        Clients built on other loops close when their loop shuts down (`asyncio.run` does).
        """
        await self.drain()
        state = self._loops.pop()
        if state is not None:
            await state.stop()

    # Internals

    async def _client(self) -> AsyncClient:
        state = self._loops.current()
        if not self._bank_ready:
            # The first use connects the store. Embedded Chroma fails when several stores open
            # one folder at once in a process, so first uses of one URI take turns per loop.
            async with _first_use_lock(self._uri):
                if not self._bank_ready:
                    await self._ensure_bank(state.client)
        if self._options.run_scheduler:
            # After the first use, which connected the store. Streams left due by an earlier
            # process get flushed even if this one only reads.
            state.start_polling(functools.partial(self._background_pass, state))
        return state.client

    def _build_client(self, loop: asyncio.AbstractEventLoop) -> tuple[AsyncClient, bool]:
        """The client for a new loop, and whether the service owns it (called under a lock)."""
        given = self._given_client
        if given is not None and (self._given_loop is None or self._given_loop() is loop):
            self._given_loop = weakref.ref(loop)
            return given, False
        client = AsyncClient(
            self._uri,
            project=self._names.project,
            location=self._names.location,
            embedding_model=self._embedding_model,
            generation_model=self._generation_model,
            run_scheduler=False,  # polled by the loop's state instead
        )
        return client, True

    async def _background_pass(self, state: LoopState) -> None:
        await self._retry_unsent()
        if not state.client.remote:  # a server flushes its due streams itself
            await state.client.ingest_scheduler.run_once()

    async def _retry_unsent(self) -> None:
        for key, retry in list(self._unsent.items()):
            if not self._breaker.allows():
                return
            if self._unsent.get(key) is retry:
                await retry()

    def _store_failed(self) -> bool:
        opened = self._breaker.failed()
        if opened:
            logger.warning(
                "The memory store failed 3 times in a row; searches and event writes of agent "
                "turns skip it for 30 s (events wait in this process)."
            )
        return opened

    def _refuse_while_open(self) -> None:
        if not self._breaker.allows():
            raise StoreUnavailable(
                f"The memory store failed repeatedly; it is skipped for another "
                f"{self._breaker.open_for:.0f} s."
            )

    def _start_flush(self, stream: str) -> asyncio.Task[None]:
        """Generates from a stream now in the background (joined by later callers)."""
        state = self._loops.current()
        running = state.flushes.get(stream)
        if running is not None and not running.done():
            return running
        task = asyncio.get_running_loop().create_task(self._flush_stream(state, stream))
        state.flushes[stream] = task
        task.add_done_callback(lambda done: _forget(state.flushes, stream, done))
        return task

    async def _flush_stream(self, state: LoopState, stream: str) -> None:
        try:
            if state.client.remote:
                await state.client.memory_banks.flush_stream(name=self.bank_name, key=stream)
            else:
                await state.client.engine.ingest.flush(self._bank_id, stream, now_or_never=True)
        except ResourceExhausted:
            pass  # another flush held the stream past the wait; it takes these events too
        except AdkMemoryError as error:
            logger.warning("Memory generation failed (%s: %s).", error.status, error.message)

    async def _generate_pending(
        self,
        scope: dict[str, str],
        *,
        except_session_id: str | None,
        only_asked: bool,
        timeout: float | None = None,
    ) -> None:
        client = await self._client()
        now = (datetime.now(UTC) if client.remote else client.engine.context.clock()).isoformat()
        try:
            # Bounded like a write: a hung store must count towards the breaker, not stall turns.
            streams = await asyncio.wait_for(
                client.memory_banks.list_streams(name=self.bank_name, scope=scope),
                timeout=WRITE_TIMEOUT,
            )
        except _TRANSIENT as error:
            self._store_failed()
            if isinstance(error, StoreUnavailable):
                raise
            raise StoreUnavailable(
                f"Listing the user's ingest streams failed or took over {WRITE_TIMEOUT:g} s "
                f"({type(error).__name__})."
            ) from error
        waited = []
        for stream in streams:
            if stream.stream_id == except_session_id or (only_asked and not stream.generate_now):
                continue
            task = self._start_flush(stream.key)
            # A stream backing off after failed generations is retried, but not waited for.
            if (stream.retry_after or "") <= now:
                waited.append(task)
        budget = self.generation_wait if timeout is None else timeout
        if waited and budget > 0:
            await asyncio.wait(waited, timeout=budget)

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
            self._background.start(call)


_NOTHING_TO_LOAD = threading.Event()
_NOTHING_TO_LOAD.set()


_FIRST_USE_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _first_use_lock(uri: str) -> asyncio.Lock:
    locks = _FIRST_USE_LOCKS.setdefault(asyncio.get_running_loop(), {})
    return locks.setdefault(uri, asyncio.Lock())


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


def _running_loop() -> weakref.ref[asyncio.AbstractEventLoop] | None:
    try:
        return weakref.ref(asyncio.get_running_loop())
    except RuntimeError:
        return None


def _forget(flushes: dict[str, asyncio.Task[None]], stream: str, task: asyncio.Task[None]) -> None:
    if flushes.get(stream) is task:
        del flushes[stream]


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


@functools.cache
def _warm_up(model: str | None) -> threading.Event:
    """Loads a local embedding model in a daemon thread, once per process; set when done."""
    ready = threading.Event()

    def load() -> None:
        try:
            preload_embedder(model)
        except Exception as error:  # the first search reports it again, with the fix
            logger.warning("Preloading the embedding model failed: %s", error)
        finally:
            ready.set()

    threading.Thread(target=load, name="adk-memory-warm-up", daemon=True).start()
    return ready


def _shared_memory_uri(uri: str) -> str:
    """`memory://` names a private store per client; give it a name so every loop shares it."""
    return f"memory://adk-memory-service-{uuid.uuid4().hex[:12]}" if _unnamed_memory(uri) else uri


def _unnamed_memory(uri: str) -> bool:
    parts = urlsplit(uri)
    return parts.scheme == "memory" and not (parts.netloc + parts.path).strip("/")
