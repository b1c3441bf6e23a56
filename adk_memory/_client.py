"""`Client`: the blocking twin of `AsyncClient`, run on one private event-loop thread.

There is one implementation, the async one. Each blocking method is generated from its async
twin by `_blocking` (same name, signature and docstring), and runs it on the client's loop: an
async store client belongs to the loop that opened it. Async pagers come back as blocking
`Pager`s.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

from adk_memory import _async_client as aio
from adk_memory._pagers import AsyncPager, Pager

__all__ = ["AgentEngines", "Client", "Memories", "MemoryBanks", "MemoryRevisions", "Operations"]

T = TypeVar("T")


class _LoopThread:
    """A daemon thread running one event loop, for blocking callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="adk-memory-loop", daemon=True
        )
        running = threading.Event()
        self.loop.call_soon(running.set)
        self._thread.start()
        running.wait()  # else a first call made at once could find the loop not yet running

    def run(self, coroutine: Coroutine[Any, Any, T]) -> T:
        """Runs a coroutine on the loop and waits for its result (re-raising its error)."""
        if not self.loop.is_running():
            coroutine.close()
            raise RuntimeError("This adk-memory Client is closed; create a new one.")
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result()

    def stop(self) -> None:
        """Stops the loop and joins the thread."""
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=10)
        if not self.loop.is_running():
            self.loop.close()


def _blocking(method: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Any]:
    """The blocking version of an async resource method.

    It calls the method of that name on the resource it wraps, which is the in-process one or,
    for a server URI, the remote one (`adk_memory._remote`), with the same signature.
    """
    name = method.__name__

    @functools.wraps(method)
    def wrapper(self: _Resource, *args: Any, **kwargs: Any) -> Any:
        result = self._runner.run(getattr(self._async, name)(*args, **kwargs))
        return Pager(result, self._runner.run) if isinstance(result, AsyncPager) else result

    return wrapper


class _Resource:
    def __init__(self, resource: Any, runner: _LoopThread) -> None:
        self._async = resource
        self._runner = runner


class MemoryRevisions(_Resource):
    """`memory_banks.memories.revisions`."""

    get = _blocking(aio.AsyncMemoryRevisions.get)
    list = _blocking(aio.AsyncMemoryRevisions.list)


class Memories(_Resource):
    """`memory_banks.memories` (also `agent_engines.memories`)."""

    def __init__(self, resource: aio.AsyncMemories, runner: _LoopThread) -> None:
        super().__init__(resource, runner)
        self.revisions = MemoryRevisions(resource.revisions, runner)

    create = _blocking(aio.AsyncMemories.create)
    get = _blocking(aio.AsyncMemories.get)
    list = _blocking(aio.AsyncMemories.list)
    update = _blocking(aio.AsyncMemories.update)
    _update = update
    delete = _blocking(aio.AsyncMemories.delete)
    retrieve = _blocking(aio.AsyncMemories.retrieve)
    rollback = _blocking(aio.AsyncMemories.rollback)
    purge = _blocking(aio.AsyncMemories.purge)
    generate = _blocking(aio.AsyncMemories.generate)
    retrieve_profiles = _blocking(aio.AsyncMemories.retrieve_profiles)


class MemoryBanks(_Resource):
    """`memory_banks`."""

    def __init__(self, resource: aio.AsyncMemoryBanks, runner: _LoopThread) -> None:
        super().__init__(resource, runner)
        self.memories = Memories(resource.memories, runner)

    create = _blocking(aio.AsyncMemoryBanks.create)
    get = _blocking(aio.AsyncMemoryBanks.get)
    list = _blocking(aio.AsyncMemoryBanks.list)
    update = _blocking(aio.AsyncMemoryBanks.update)
    delete = _blocking(aio.AsyncMemoryBanks.delete)
    get_extensions = _blocking(aio.AsyncMemoryBanks.get_extensions)
    ingest_events = _blocking(aio.AsyncMemoryBanks.ingest_events)
    list_streams = _blocking(aio.AsyncMemoryBanks.list_streams)
    flush_stream = _blocking(aio.AsyncMemoryBanks.flush_stream)


class AgentEngines(_Resource):
    """The older `agent_engines` surface."""

    def __init__(
        self, resource: aio.AsyncAgentEngines, memories: Memories, runner: _LoopThread
    ) -> None:
        super().__init__(resource, runner)
        self.memories = memories

    create = _blocking(aio.AsyncAgentEngines.create)
    update = _blocking(aio.AsyncAgentEngines.update)
    get = _blocking(aio.AsyncAgentEngines.get)
    list = _blocking(aio.AsyncAgentEngines.list)
    delete = _blocking(aio.AsyncAgentEngines.delete)
    get_memory = _blocking(aio.AsyncAgentEngines.get_memory)
    list_memories = _blocking(aio.AsyncAgentEngines.list_memories)
    retrieve_memories = _blocking(aio.AsyncAgentEngines.retrieve_memories)
    create_memory = _blocking(aio.AsyncAgentEngines.create_memory)
    delete_memory = _blocking(aio.AsyncAgentEngines.delete_memory)
    generate_memories = _blocking(aio.AsyncAgentEngines.generate_memories)


class Operations(_Resource):
    """`operations`."""

    get = _blocking(aio.AsyncOperations.get)
    record_bank = _blocking(aio.AsyncOperations.record_bank)


class Client:
    """The blocking Memory Bank client; `Client(...).aio` is its async twin."""

    def __init__(self, uri: str | None = None, **options: Any) -> None:
        """Takes the same arguments as `AsyncClient` (see there)."""
        self._runner = _LoopThread()
        try:
            self.aio: aio.AsyncClient = self._runner.run(_build(uri, options))
        except BaseException:
            self._runner.stop()
            raise
        self.memory_banks = MemoryBanks(self.aio.memory_banks, self._runner)
        self.agent_engines = AgentEngines(
            self.aio.agent_engines, self.memory_banks.memories, self._runner
        )
        self.operations = Operations(self.aio.operations, self._runner)

    @property
    def uri(self) -> str:
        """The store URI."""
        return self.aio.uri

    def close(self) -> None:
        """Closes the store and stops the loop thread."""
        if self._runner.loop.is_running():
            self._runner.run(self.aio.aclose())
        self._runner.stop()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


async def _build(uri: str | None, options: dict[str, Any]) -> aio.AsyncClient:
    """Builds the async client on the loop thread, so the store belongs to that loop."""
    return aio.AsyncClient(uri, **options)
