"""Lock providers: mutual exclusion of generate requests and ingest flushes on one scope.

SPEC §3 "Consistency": two generate or ingest flushes on one scope never interleave their
read-decide-write. Each store names the provider that fits it: in-process for `memory://` and
embedded Chroma (whose directory one process holds alone), file locks for a Chroma server whose
writers share one host (`single_host`), Redis for Redis and for a Chroma server shared by several
hosts (`adk_memory_redis.RedisLockProvider`). A lock has a lease, so a holder that dies does not
block the scope forever; waiting is bounded and ends in `ResourceExhausted`.

Fencing: `lock()` yields a `Lease`. A write decided under the lock carries it
(`WriteBatch.fence`), and the store refuses the write with `Aborted` once the lease is no longer
held, checked inside the same atomic write where the lock lives in the store (Redis: the lock
key is WATCHed and compared in the write's transaction), else just before the write. In-process
and file locks end only with their holder (or its block), so their lease fails only when used
after the block.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Protocol, runtime_checkable

import filelock

from adk_memory.errors import Aborted, ResourceExhausted

__all__ = ["FileLockProvider", "HeldLock", "InProcessLockProvider", "Lease", "LockProvider"]

DEFAULT_LEASE_SECONDS = 60.0
DEFAULT_WAIT_SECONDS = 60.0


@runtime_checkable
class Lease(Protocol):
    """One holding of a lock: the fencing token a write carries (`WriteBatch.fence`)."""

    name: str
    token: str
    """Unique to this holding."""

    async def verify(self) -> None:
        """Raises `Aborted` if this holding has ended (lease lapsed, lock released)."""
        ...


@runtime_checkable
class LockProvider(Protocol):
    """Named, leased, mutually exclusive locks."""

    def lock(
        self,
        name: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> AbstractAsyncContextManager[Lease]:
        """Holds `name` for the block; `ResourceExhausted` if not acquired within `wait_seconds`."""
        ...


class HeldLock:
    """The lease of an in-process or file lock: held from acquisition to the end of the block."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.token = uuid.uuid4().hex
        self.released = False

    async def verify(self) -> None:
        """Raises `Aborted` once the block holding the lock has ended."""
        if self.released:
            raise lease_lapsed(self.name)


def lease_lapsed(name: str) -> Aborted:
    """The error of a write whose lock lease ended before it committed."""
    return Aborted(
        f"The lock {name[:80]!r} this write was decided under is no longer held (its lease "
        "ran out, and another request may have written since); nothing was written. Retry."
    )


def _timed_out(name: str, wait_seconds: float) -> ResourceExhausted:
    return ResourceExhausted(
        f"Could not acquire the lock for {name[:80]!r} within {wait_seconds:g} s: another "
        "generate request or ingest flush on the same scope is still running. Retry later."
    )


class _Waiter:
    """A caller waiting for a held in-process lock: woken on its own loop when handed the lock."""

    __slots__ = ("future", "granted")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.granted = False
        """Set under the provider's guard when the releasing holder hands it the lock."""


class InProcessLockProvider:
    """Locks of one process, handed from holder to waiter on release (no polling).

    For a store no other process writes: `memory://`, and embedded Chroma, whose directory the
    process holds alone (`adk_memory_chroma._folder`). Not asyncio locks: one process uses a
    store from several event loops (ADK runs each synchronous `Runner.run` on a new one), so a
    waiter is a future of its own loop, which the releasing holder (any loop, any thread) grants
    under one thread lock and wakes with `call_soon_threadsafe`: first come, first served. A
    name is kept only while held. The lease is not enforced: a holder in the same process cannot
    die without its task ending.
    """

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._held: dict[str, deque[_Waiter]] = {}
        """Held names -> their waiters, oldest first."""

    @asynccontextmanager
    async def lock(
        self,
        name: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> AsyncIterator[HeldLock]:
        """Holds `name` for the block."""
        await self._acquire(name, wait_seconds)
        lease = HeldLock(name)
        try:
            yield lease
        finally:
            lease.released = True
            self._release(name)

    async def _acquire(self, name: str, wait_seconds: float) -> None:
        with self._guard:
            waiters = self._held.get(name)
            if waiters is None:
                self._held[name] = deque()
                return
            waiter = _Waiter(asyncio.get_running_loop().create_future())
            waiters.append(waiter)
        try:
            # Not `wait_for`: on Python 3.11 it swallows a cancellation that meets the grant.
            async with asyncio.timeout(max(wait_seconds, 0.0)):
                await waiter.future
        except BaseException as error:
            with self._guard:
                granted = waiter.granted
                if not granted:
                    waiters.remove(waiter)
            if granted:  # handed the lock as it gave up: pass it on
                self._release(name)
            if isinstance(error, TimeoutError):
                raise _timed_out(name, wait_seconds) from None
            raise

    def _release(self, name: str) -> None:
        """Hands `name` to its oldest waiter whose loop still runs, else frees it."""
        with self._guard:
            waiters = self._held[name]
            while waiters:
                waiter = waiters.popleft()
                try:
                    waiter.future.get_loop().call_soon_threadsafe(_wake, waiter.future)
                except RuntimeError:  # its loop is closed: it will never run again
                    continue
                waiter.granted = True
                return
            del self._held[name]


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class FileLockProvider:
    """OS file locks in a folder, for processes on one host (a `single_host` Chroma server).

    The operating system releases a dead holder's lock, which serves as the lease. The callers
    of one process take turns for a lock file in the process first (`_PROCESS_TURNS`: handed
    on release, no polling), so only the one whose turn it is polls the file, against other
    processes. Before, every waiter polled it every 20 ms: 16 REST clients of one server
    spent a fifth of its CPU opening, locking and closing lock files, and a create waited for
    its poll (p50 ~500 ms on a Chroma server).
    """

    def __init__(self, directory: Path) -> None:
        self._directory = directory

    @asynccontextmanager
    async def lock(
        self,
        name: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> AsyncIterator[HeldLock]:
        """Holds `name` for the block (polling the file lock without blocking the loop)."""
        self._directory.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(name.encode("utf-8")).hexdigest()[:32]
        path = str(self._directory.resolve() / f"{digest}.lock")
        deadline = time.monotonic() + wait_seconds
        async with AsyncExitStack() as held:
            try:
                await held.enter_async_context(_PROCESS_TURNS.lock(path, wait_seconds=wait_seconds))
            except ResourceExhausted:
                raise _timed_out(name, wait_seconds) from None
            file_lock = filelock.FileLock(path)
            while True:
                try:
                    file_lock.acquire(timeout=0)
                    break
                except filelock.Timeout:
                    if time.monotonic() >= deadline:
                        raise _timed_out(name, wait_seconds) from None
                    await asyncio.sleep(0.02)
            held.callback(file_lock.release)
            lease = HeldLock(name)
            held.callback(setattr, lease, "released", True)
            yield lease


_PROCESS_TURNS = InProcessLockProvider()
"""This process's turns for the lock files of every `FileLockProvider`, by file path."""


def _new_turns_in_child() -> None:
    global _PROCESS_TURNS
    _PROCESS_TURNS = InProcessLockProvider()  # the parent's holders are not the child's


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_turns_in_child)
