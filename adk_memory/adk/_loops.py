"""The memory service's own event loops, the turn path's circuit breaker, and background tasks.

ADK calls a memory service from several event loops (each synchronous `Runner.run` runs its own
`asyncio.run`, which ends with the run), and an async store client belongs to the loop that
opened it. So the service does its store I/O on two event loops of its own, each on a daemon
thread shared by every service of the process (`service_thread`): `reads` (searches) and
`writes` (handed-over events, generation, the poller). A turn's loop only awaits them. Reads
never queue behind writes: each loop has its own client, connection pool and thread pool. Work
handed to the writes loop outlives the loop of the run that handed it over.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import threading
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

__all__ = [
    "BackgroundTasks",
    "CircuitBreaker",
    "ServiceThread",
    "outcome_seen",
    "run_at_loop_shutdown",
    "service_thread",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")


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


def outcome_seen(task: asyncio.Future[Any]) -> None:
    """Marks a task's failure as seen when nobody awaits it (no "never retrieved" log).

    A done callback, for a task its caller gave up on.
    """
    if not task.cancelled():
        task.exception()


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
    """Keeps the turn path away from a store that failed, until a probe sees it answer again.

    It opens at the first timeout (a hung store would cost every turn the whole deadline) or
    after `threshold` other failures in a row. While it is open the turn path skips the store
    at once; the service probes the store in the background, and the first answer closes it.
    A call that began before that answer (`began`) and fails after it counts for nothing: it
    was stuck in the outage already seen. Thread-safe: turns on any loop and the service's own
    loops share one breaker.
    """

    def __init__(self, *, threshold: int = 3) -> None:
        self._threshold = threshold
        self._failures = 0
        self._opened_at: float | None = None
        self._closings = 0
        self._lock = threading.Lock()

    @property
    def is_open(self) -> bool:
        """Whether the turn path skips the store now."""
        return self._opened_at is not None

    @property
    def open_for(self) -> float:
        """Seconds since the breaker opened (0 when closed)."""
        opened = self._opened_at
        return 0.0 if opened is None else time.monotonic() - opened

    def allows(self) -> bool:
        """Whether a turn may call the store now."""
        return self._opened_at is None

    def began(self) -> int:
        """A mark for a call starting now, to pass to `failed`."""
        return self._closings

    def failed(self, *, timed_out: bool, began: int | None = None) -> bool:
        """Records a failure; returns True when this failure opened the breaker."""
        with self._lock:
            if self._opened_at is not None or (began is not None and began != self._closings):
                return False
            self._failures += 1
            if not timed_out and self._failures < self._threshold:
                return False
            self._opened_at = time.monotonic()
            return True

    def succeeded(self) -> bool:
        """Records an answer from the store; returns True when this closed the breaker."""
        with self._lock:
            self._failures = 0
            if self._opened_at is None:
                return False
            self._opened_at = None
            self._closings += 1
            return True


class ServiceThread:
    """An event loop running on a daemon thread, shared by the memory services of a process."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive() and not self.loop.is_closed()

    def submit(self, work: Coroutine[Any, Any, _T]) -> concurrent.futures.Future[_T]:
        """Schedules `work` on this loop from any thread."""
        return asyncio.run_coroutine_threadsafe(work, self.loop)

    async def run(self, work: Coroutine[Any, Any, _T]) -> _T:
        """Awaits `work` run on this loop, from any loop; cancelling the caller cancels it."""
        if _running_loop() is self.loop:
            return await work
        return await asyncio.wrap_future(self.submit(work))

    def call_soon(self, callback: Callable[[], object]) -> None:
        """Calls `callback` on this loop's thread (from any thread)."""
        self.loop.call_soon_threadsafe(callback)


_threads: dict[str, ServiceThread] = {}
_threads_lock = threading.Lock()


def service_thread(name: str) -> ServiceThread:
    """The process's service loop called `name`, started on first use."""
    with _threads_lock:
        thread = _threads.get(name)
        if thread is None or not thread.alive:
            thread = _threads[name] = ServiceThread(f"adk-memory-{name}")
        return thread


def _forget_threads() -> None:
    # A forked child has none of its parent's threads: it starts its own on first use.
    global _threads_lock
    _threads.clear()
    _threads_lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_threads)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
