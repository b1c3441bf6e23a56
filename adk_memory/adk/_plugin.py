"""`MemoryBankPlugin`: automatic long-term memory for every agent of an ADK `Runner` or `App`.

Nothing it does raises into the agent: a failed or slow search leaves the request without
memories, a failed store write is logged with its cause and retried. Logs carry counts,
lengths and error causes, never facts or queries.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections import OrderedDict
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from google.adk.memory import InMemoryMemoryService
from google.adk.plugins.base_plugin import BasePlugin
from google.genai import types as genai_types
from typing_extensions import override

from adk_memory.adk._loops import BackgroundTasks, outcome_seen
from adk_memory.adk._options import idle_duration_text
from adk_memory.adk._service import DEFAULT_IDLE_DURATION, MemoryBankService
from adk_memory.errors import InvalidArgument

if TYPE_CHECKING:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.memory.base_memory_service import BaseMemoryService
    from google.adk.memory.memory_entry import MemoryEntry
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.sessions.session import Session

__all__ = ["MEMORY_BLOCK_TAG", "MemoryBankPlugin"]

logger = logging.getLogger(__name__)

MEMORY_BLOCK_TAG = "MEMORIES"
"""The tag around the memories the plugin adds to a model request."""

_PRELOAD_TAG = "<PAST_CONVERSATIONS>"
"""Where ADK's `PreloadMemoryTool` puts the memories it adds."""

_CLOSE_SECONDS = 4.0
"""What `close()` waits at most: under ADK's 5 s plugin-close timeout (a clean `Runner.close()`)."""

_MAX_OPEN_INVOCATIONS = 1_024
"""Invocations tracked at once; a run that ends without `after_run` must not leak its entry."""


@dataclass
class _Invocation:
    """What the plugin knows about one running invocation."""

    service: BaseMemoryService
    search: asyncio.Task[list[MemoryEntry]] | None
    budget: float
    """Seconds the first model request waits for the search."""
    facts: list[str] | None = None


class MemoryBankPlugin(BasePlugin):
    """Retrieves memories into every model request and ingests each run into memory.

    ```python
    app = App(name="assistant", root_agent=agent, plugins=[MemoryBankPlugin()])
    runner = Runner(app=app, session_service=sessions, memory_service=MemoryBankService())
    ```

    When a session's first run starts, it generates what the user's other sessions left pending
    (waiting a bounded time); each run retrieves once, from the user's message, and adds the
    memories to every model request of that invocation (after ADK's `PreloadMemoryTool`, whose
    facts it does not repeat). After each run, it hands the session's new events to the service,
    whose writer stores them in the session's ingest stream off the turn (it outlives a
    synchronous `Runner.run`'s loop); their generation waits until the user's next session
    starts or the session has been idle.

    It uses the runner's memory service unless given `service=`. With another service than
    `MemoryBankService` it keeps the first `top_k` results and sends the run's events through
    `add_events_to_memory` with the same stream and trigger.
    """

    def __init__(
        self,
        *,
        service: BaseMemoryService | None = None,
        top_k: int = 5,
        idle_duration: timedelta | str | None = None,
        search_timeout: float = 5.0,
        warmup_timeout: float = 30.0,
        ingest_timeout: float = 10.0,
        retrieve: bool = True,
        ingest: bool = True,
        name: str = "adk_memory",
    ) -> None:
        """Configures the plugin; it does no I/O until a run starts.

        Args:
            service: The memory service to use; default: the runner's `memory_service`.
            top_k: Memories added to each model request (1-100).
            idle_duration: Generate a session's memories after it has been idle this long
                (a `timedelta` or a duration string such as `"60s"`); default: the
                `MemoryBankService`'s `idle_duration` (60 s).
            search_timeout: Seconds the first model request waits for the search, on top of
                the service's `generation_wait` for pending memories; after that the
                invocation goes on without memories.
            warmup_timeout: Extra seconds granted while the service still loads its local
                embedding model (the first turn after a start).
            ingest_timeout: Seconds the end of a run waits for a memory service other than
                `MemoryBankService` to take the events (that one bounds its own writes);
                after that the write goes on in the background.
            retrieve: Add memories to model requests.
            ingest: Send each run's events to memory.
            name: The plugin's name in the runner.

        Raises:
            InvalidArgument: `top_k`, `idle_duration` or a timeout out of range.
        """
        super().__init__(name=name)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 100:
            raise InvalidArgument(
                f"top_k must be a whole number from 1 to 100, not {top_k!r}.", field="top_k"
            )
        for field_name, seconds in (
            ("search_timeout", search_timeout),
            ("warmup_timeout", warmup_timeout),
            ("ingest_timeout", ingest_timeout),
        ):
            if not seconds > 0:
                raise InvalidArgument(f"{field_name} must be positive seconds.", field=field_name)
        self._service = service
        self._top_k = top_k
        self._trigger = (
            {"generation_rule": {"idle_duration": idle_duration_text(idle_duration)}}
            if idle_duration is not None
            else None
        )
        self._search_timeout = search_timeout
        self._warmup_timeout = warmup_timeout
        self._ingest_timeout = ingest_timeout
        self._retrieve = retrieve
        self._ingest = ingest
        self._invocations: OrderedDict[str, _Invocation] = OrderedDict()
        self._background = BackgroundTasks("memory ingest")
        self._handed_to: weakref.WeakSet[MemoryBankService] = weakref.WeakSet()
        """The memory services this plugin handed events to (for `drain`)."""
        self._warned: set[str] = set()

    @override
    async def before_run_callback(
        self, *, invocation_context: InvocationContext
    ) -> genai_types.Content | None:
        """Starts this invocation's memory search (awaited by the first model request)."""
        try:
            service = self._service or invocation_context.memory_service
            if service is None:
                self._warn_once(
                    "MemoryBankPlugin: the runner has no memory_service; memory is off."
                )
                return None
            if self._service is None and isinstance(service, InMemoryMemoryService):
                self._warn_once(
                    "MemoryBankPlugin: the runner's memory service is ADK's in-memory one; "
                    "memories last only as long as this process. Pass a MemoryBankService "
                    "(or --memory_service_uri=chroma://… / redis://… with services.py)."
                )
            query = _text_of(invocation_context.user_content) if self._retrieve else ""
            search = None
            if query:
                session = invocation_context.session
                # Only a session's first run generates the user's other sessions: its later runs
                # would find nothing new, and would wait for the store to say so.
                first_run = not any(
                    event.author == "user"
                    and event.invocation_id != invocation_context.invocation_id
                    for event in session.events
                )
                search = asyncio.get_running_loop().create_task(
                    self._search(service, session, query, generate=first_run)
                )
                search.add_done_callback(outcome_seen)  # if no model request awaits it
            self._invocations[invocation_context.invocation_id] = _Invocation(
                service, search, self._budget(service)
            )
            while len(self._invocations) > _MAX_OPEN_INVOCATIONS:
                _, stale = self._invocations.popitem(last=False)
                _cancel(stale)
        except Exception:  # never raise into the agent
            logger.exception("MemoryBankPlugin could not start the memory search.")
        return None

    @override
    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        """Adds the invocation's memories to the request, minus those already in it."""
        try:
            invocation = self._invocations.get(callback_context.invocation_id)
            if invocation is None or invocation.search is None:
                return None
            if invocation.facts is None:
                invocation.facts = await self._facts(invocation.search, invocation.budget)
            present = _memory_texts(llm_request)
            facts = [fact for fact in invocation.facts if not any(fact in text for text in present)]
            if facts:
                _insert_memories(llm_request, facts)
                logger.debug("Added %d memories to a model request.", len(facts))
        except Exception:  # never raise into the agent
            logger.exception("MemoryBankPlugin could not add memories to a model request.")
        return None

    @override
    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Hands the run's events to memory without waiting for the store; generation later."""
        try:
            invocation = self._invocations.pop(invocation_context.invocation_id, None)
            if invocation is None:
                return
            _cancel(invocation)
            if not self._ingest:
                return
            session = invocation_context.session
            if isinstance(invocation.service, MemoryBankService):
                # The session object keeps changing after this run; hand over a snapshot of it.
                snapshot = session.model_copy(update={"events": list(session.events)})
                # Handed to the service's writer: no wait for the store, never raising.
                await invocation.service.remember_session(
                    snapshot, generation_trigger_config=self._trigger
                )
                self._handed_to.add(invocation.service)
                return
            events = [
                e for e in session.events if e.invocation_id == invocation_context.invocation_id
            ]
            trigger = self._trigger or {"generation_rule": {"idle_duration": DEFAULT_IDLE_DURATION}}
            work = invocation.service.add_events_to_memory(
                app_name=session.app_name,
                user_id=session.user_id,
                events=events,
                session_id=session.id,
                custom_metadata={"stream_id": session.id, "generation_trigger_config": trigger},
            )
            # Bounded: after `ingest_timeout` the write goes on in the background.
            task = self._background.start(_unless_unimplemented(work))
            await asyncio.wait({task}, timeout=self._ingest_timeout)
        except Exception:  # never raise into the agent
            logger.exception("MemoryBankPlugin could not store the run's events.")

    @override
    async def on_run_error_callback(
        self, *, invocation_context: InvocationContext, error: Exception
    ) -> None:
        """Forgets the failed run; with a MemoryBankService its events go with the next run's."""
        invocation = self._invocations.pop(invocation_context.invocation_id, None)
        if invocation is not None:
            _cancel(invocation)

    @override
    async def close(self) -> None:
        """Waits up to 4 s for the writes started on this loop (called by `Runner.close()`).

        Events a write had not stored by then are retried by the service; generation is not
        awaited (its events are in the store, and any process's scheduler generates them).
        """
        pending = self._background.on_this_loop()
        if pending:
            _, late = await asyncio.wait(pending, timeout=_CLOSE_SECONDS)
            if late:
                logger.warning(
                    "MemoryBankPlugin closed with %d memory writes still running.", len(late)
                )

    async def drain(self) -> None:
        """Waits until the events handed over are stored, and for the services' background work.

        Generation waiting for a stream's idle trigger is not awaited; see
        `MemoryBankService.flush`.
        """
        await self._background.drain()
        services = set(self._handed_to)
        if isinstance(self._service, MemoryBankService):
            services.add(self._service)
        for service in services:
            await service.drain()

    def _budget(self, service: BaseMemoryService) -> float:
        if not isinstance(service, MemoryBankService):
            return self._search_timeout
        warming = self._warmup_timeout if service.warming else 0.0
        return service.generation_wait + self._search_timeout + warming

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            logger.warning(message)

    async def _search(
        self, service: BaseMemoryService, session: Session, query: str, *, generate: bool
    ) -> list[MemoryEntry]:
        app_name, user_id = session.app_name, session.user_id
        if isinstance(service, MemoryBankService):
            try:
                if generate:
                    await service.generate_pending(
                        app_name=app_name, user_id=user_id, except_session_id=session.id
                    )
            except Exception as error:  # the search may still work
                logger.warning(
                    "Generating the user's pending memories failed (%s: %s); searching anyway.",
                    type(error).__name__,
                    getattr(error, "message", error),
                )
            found = await service.search_memory(
                app_name=app_name,
                user_id=user_id,
                query=query,
                top_k=self._top_k,
                wait_for_generation=False,
            )
        else:
            found = await service.search_memory(app_name=app_name, user_id=user_id, query=query)
        return list(found.memories[: self._top_k])

    async def _facts(self, search: asyncio.Task[list[MemoryEntry]], budget: float) -> list[str]:
        try:
            entries = await asyncio.wait_for(asyncio.shield(search), timeout=budget)
        except TimeoutError:
            logger.warning(
                "Memory search took over %.1f s; this invocation goes on without memories.",
                budget,
            )
            return []
        except Exception as error:  # the prompt path tolerates a failed search (SPEC §4)
            logger.warning(
                "Memory search failed (%s); this invocation goes on without memories. Cause: %s",
                type(error).__name__,
                getattr(error, "message", error),
            )
            return []
        facts = [_text_of(entry.content) for entry in entries]
        return list(dict.fromkeys(fact for fact in facts if fact))


async def _unless_unimplemented(work: Coroutine[Any, Any, Any]) -> None:
    try:
        await work
    except NotImplementedError:  # a memory service that takes no event deltas
        logger.debug("The memory service takes no event deltas; skipping the ingest.")


def _cancel(invocation: _Invocation) -> None:
    if invocation.search is not None and not invocation.search.done():
        invocation.search.cancel()


def _text_of(content: genai_types.Content | None) -> str:
    if content is None:
        return ""
    return " ".join(
        part.text for part in content.parts or () if part.text and not part.thought
    ).strip()


def _memory_texts(llm_request: LlmRequest) -> list[str]:
    """Text parts of the request that already carry memories (ours or `PreloadMemoryTool`'s)."""
    texts = []
    for content in llm_request.contents:
        for part in content.parts or ():
            if part.text and (_PRELOAD_TAG in part.text or f"<{MEMORY_BLOCK_TAG}>" in part.text):
                texts.append(part.text)
    return texts


def _insert_memories(llm_request: LlmRequest, facts: list[str]) -> None:
    lines = "\n".join(f"- {fact}" for fact in facts)
    text = (
        "The following are facts you remember about the user from earlier conversations. "
        "Use them when they help with the user's current request.\n"
        f"<{MEMORY_BLOCK_TAG}>\n{lines}\n</{MEMORY_BLOCK_TAG}>"
    )
    content = genai_types.Content(role="user", parts=[genai_types.Part(text=text)])
    # Request-scoped context goes where PreloadMemoryTool puts it: at the current turn, never
    # into the system instruction or the history prefix that context caching reuses.
    llm_request._insert_transient_user_content([content])
