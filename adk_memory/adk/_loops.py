"""Per-event-loop state, the turn path's circuit breaker, and the adapter's background tasks.

An async store client belongs to the loop that opened it, and ADK calls a memory service from
several loops (each synchronous `Runner.run` runs its own `asyncio.run`). `LoopClients` keeps one
`LoopState` per live loop under a thread lock (loops may run in different threads), prunes the
state of closed loops, and closes each client it built on its own loop when that loop shuts
down: `asyncio.run` finalizes the async generators of a loop before closing it
(`shutdown_asyncgens`), and each state parks one such generator whose `finally` closes the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any

from adk_memory._async_client import AsyncClient
from adk_memory.scheduler import DEFAULT_POLL_SECONDS

__all__ = ["BackgroundTasks", "CircuitBreaker", "LoopClients", "LoopState", "run_at_loop_shutdown"]

logger = logging.getLogger(__name__)


def run_at_loop_shutdown(finish: Callable[[], Awaitable[object]]) -> None:
    """Awaits `finish` when the running loop finalizes its async generators before closing.

    The closer is an async generator parked at its first `yield`: `asyncio.run` (and
    pytest-asyncio) call `shutdown_asyncgens`, which runs its `finally` on the same loop. It is
    held strongly until then, since a collected generator would be finalized early.
    """

    async def closer() -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            _parked.discard(parked)
            with contextlib.suppress(Exception):
                await finish()

    parked = closer()
    _parked.add(parked)
    asyncio.get_running_loop().create_task(parked.__anext__())


_parked: set[AsyncGenerator[None, None]] = set()


class BackgroundTasks:
    """Work its caller does not await: held until done, logged if it fails, joined per loop."""

    def __init__(self, what: str) -> None:
        self._what = what
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def on_this_loop(self) -> list[asyncio.Task[Any]]:
        loop = asyncio.get_running_loop()
        return [task for task in self._tasks if task.get_loop() is loop]

    async def drain(self) -> None:
        """Waits for the work started on the running loop, including work started meanwhile."""
        while pending := self.on_this_loop():
            await asyncio.gather(*pending, return_exceptions=True)

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            logger.debug("A background %s was cancelled.", self._what)
        elif (error := task.exception()) is not None:
            logger.error("Background %s failed: %s: %s", self._what, type(error).__name__, error)


class CircuitBreaker:
    """Stops the turn path from calling a store that keeps failing, for `cooldown` seconds.

    After `threshold` failures in a row it opens; once the cooldown has passed, one call may try
    again (a failure re-opens it at once, a success closes it).
    """

    def __init__(self, *, threshold: int = 3, cooldown: float = 30.0) -> None:
        self._threshold = threshold
        self._cooldown = cooldown
        self._failures = 0
        self._open_until = 0.0

    @property
    def open_for(self) -> float:
        """Seconds left before a call may go through again (0 when closed)."""
        return max(0.0, self._open_until - time.monotonic())

    def allows(self) -> bool:
        """Whether a call may go to the store now."""
        return self.open_for == 0.0

    def failed(self) -> bool:
        """Records a failure; returns True when this failure opened the breaker."""
        self._failures += 1
        if self._failures < self._threshold:
            return False
        self._open_until = time.monotonic() + self._cooldown
        self._failures = self._threshold - 1  # after the cooldown, one more failure re-opens it
        return True

    def succeeded(self) -> None:
        """Records a success: the breaker closes."""
        self._failures = 0
        self._open_until = 0.0


class LoopState:
    """The client of one event loop, its poller and the flushes the service started on it."""

    def __init__(self, client: AsyncClient, *, owned: bool) -> None:
        self.client = client
        self.owned = owned
        self.flushes: dict[str, asyncio.Task[None]] = {}
        """Running flushes by stream key."""
        self._stop = asyncio.Event()
        self._poller: asyncio.Task[None] | None = None

    def start_polling(self, each_pass: Callable[[], Awaitable[None]]) -> None:
        """Runs `each_pass` about every second until `stop`, or until the loop shuts down."""
        if self._poller is None:
            self._poller = asyncio.get_running_loop().create_task(self._poll(each_pass))

    async def stop(self) -> None:
        """Stops the poller and closes the client if this state built it."""
        self._stop.set()
        if self._poller is not None:
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None
        if self.owned:
            self.owned = False
            await self.client.aclose()

    async def _poll(self, each_pass: Callable[[], Awaitable[None]]) -> None:
        me = asyncio.current_task()
        # On Python 3.11 a cancel landing in redis-py's `asyncio.wait_for` can be swallowed;
        # `cancelling()` still sees it (asyncio.run's shutdown), and the stop event ends the loop.
        while not self._stop.is_set() and not (me is not None and me.cancelling()):
            try:
                await each_pass()
            except Exception:  # the poller must outlive any one failure
                logger.exception("A background pass of the memory service failed; retrying.")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), timeout=DEFAULT_POLL_SECONDS)


class LoopClients:
    """One `LoopState` per live event loop, built on demand under a thread lock."""

    def __init__(
        self, build: Callable[[asyncio.AbstractEventLoop], tuple[AsyncClient, bool]]
    ) -> None:
        self._build = build
        self._lock = threading.Lock()
        self._states: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopState] = (
            weakref.WeakKeyDictionary()
        )

    def current(self) -> LoopState:
        """The running loop's state, built (and the closed loops' states pruned) when new."""
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._states.get(loop)
            if state is None:
                for stale in [other for other in self._states if other.is_closed()]:
                    del self._states[stale]
                client, owned = self._build(loop)
                state = self._states[loop] = LoopState(client, owned=owned)
                if owned:  # closed when `asyncio.run` shuts this loop down
                    run_at_loop_shutdown(state.stop)
            return state

    def peek(self) -> LoopState | None:
        """The running loop's state, if it has one."""
        with self._lock:
            return self._states.get(asyncio.get_running_loop())

    def pop(self) -> LoopState | None:
        """Removes the running loop's state; the other loops' states are forgotten."""
        with self._lock:
            state = self._states.pop(asyncio.get_running_loop(), None)
            self._states.clear()
            return state
