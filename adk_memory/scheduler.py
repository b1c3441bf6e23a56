"""The background scheduler: flushes due ingest streams and sweeps expired memories.

A long-lived `Client`/`AsyncClient` starts one on its first `ingest_events`; `adk-memory serve`
and `adk-memory worker` run one for deployments. Each flush claims its stream under the stream's
lock and re-reads it there, so several schedulers on one store, in any number of processes,
generate from each event once (`adk_memory.engine.ingest` names the one at-least-once case). Every
`sweep_seconds` it also reclaims the storage of expired memories and revisions (stores without
native expiry need this; reads never return expired memories either way). Background
tasks are kept referenced and their failures logged (an untracked task can be collected and its
error lost).
"""

from __future__ import annotations

import asyncio
import logging
import time

from adk_memory.engine import MemoryEngine
from adk_memory.errors import AdkMemoryError, ResourceExhausted

__all__ = ["IngestScheduler"]

logger = logging.getLogger(__name__)

DEFAULT_POLL_SECONDS = 1.0
DEFAULT_SWEEP_SECONDS = 300.0
_CLAIM_WAIT_SECONDS = 0.2


class IngestScheduler:
    """Polls the store for due streams and flushes them; `kick` flushes one right away."""

    def __init__(
        self,
        engine: MemoryEngine,
        *,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        sweep_seconds: float = DEFAULT_SWEEP_SECONDS,
    ) -> None:
        self._engine = engine
        self._poll_seconds = poll_seconds
        self._sweep_seconds = sweep_seconds
        self._last_sweep = float("-inf")
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop_task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        """Starts the polling loop on the running event loop (idempotent)."""
        if self._loop_task is None or self._loop_task.done():
            self._stopping = asyncio.Event()
            self._loop_task = asyncio.get_running_loop().create_task(self.run_forever())

    def kick(self, bank_id: str, key: str) -> None:
        """Flushes one stream in the background now."""
        self._track(asyncio.get_running_loop().create_task(self._flush(bank_id, key)))

    async def run_once(self) -> int:
        """Flushes every due stream of every bank once; returns how many memories changed."""
        changed = 0
        sweep = time.monotonic() - self._last_sweep >= self._sweep_seconds
        if sweep:
            self._last_sweep = time.monotonic()
        for bank in await self._engine.store.list_banks():
            if sweep:
                await self._sweep(bank.bank_id)
            try:
                keys = await self._engine.ingest.due_streams(bank.bank_id)
            except AdkMemoryError as exc:
                logger.warning("Listing due streams of a bank failed: %s", exc.status)
                continue
            for key in keys:
                changed += await self._flush(bank.bank_id, key)
        return changed

    async def run_forever(self) -> None:
        """Polls until `stop()` (or cancellation)."""
        while not self._stopping.is_set():
            try:
                await self.run_once()
            except asyncio.CancelledError:
                raise
            except Exception:  # the scheduler must outlive any one failure
                logger.exception("Ingest scheduler pass failed; retrying.")
            try:
                await asyncio.wait_for(self._stopping.wait(), timeout=self._poll_seconds)
            except TimeoutError:
                pass

    async def drain(self) -> None:
        """Waits for the flushes already started."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def stop(self, *, timeout: float = 30.0) -> None:
        """Stops polling after the current pass and waits for running flushes.

        A stop event rather than cancellation: on Python 3.11 some drivers' `wait_for` can
        swallow a cancellation (CPython gh-86296), which would leave the loop running forever.
        """
        self._stopping.set()
        if self._loop_task is not None:
            done, _ = await asyncio.wait({self._loop_task}, timeout=timeout)
            if not done:
                self._loop_task.cancel()
            self._loop_task = None
        await self.drain()

    async def _sweep(self, bank_id: str) -> None:
        try:
            removed = await self._engine.store.sweep_expired(bank_id, self._engine.context.clock())
        except AdkMemoryError as exc:
            logger.warning("Sweeping expired memories failed: %s", exc.status)
            return
        if removed:
            logger.info("Swept %d expired records from a bank", removed)

    async def _flush(self, bank_id: str, key: str) -> int:
        try:
            return await self._engine.ingest.flush(bank_id, key, wait_seconds=_CLAIM_WAIT_SECONDS)
        except ResourceExhausted:
            return 0  # another flush holds the stream; it will take these events too
        except AdkMemoryError as exc:
            logger.warning("Ingest flush failed: %s", exc.status)
            return 0

    def _track(self, task: asyncio.Task[None] | asyncio.Task[int]) -> None:
        self._tasks.add(task)  # type: ignore[arg-type]
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[object]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.error("Background ingest flush failed", exc_info=task.exception())
