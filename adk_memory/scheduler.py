"""The background scheduler: flushes due ingest streams and sweeps expired memories.

A long-lived `Client`/`AsyncClient` starts one on its first `ingest_events`; `adk-memory serve`
and `adk-memory worker` run one for deployments. Each flush claims its stream under the stream's
lock and re-reads it there, so several schedulers on one store, in any number of processes,
generate from each event once (`adk_memory.engine.ingest` names the one at-least-once case).

A tick costs what is due: it asks the store's due index for the streams whose time has come
(across all banks, one query) and flushes those. Maintenance is spread over the ticks of a
sweep cycle (`sweep_seconds`): each bank in turn has its expired memories and revisions
reclaimed (stores without native expiry need this; reads never return expired memories either
way) and its streams' index entries checked (`reindex_streams`), about `banks x poll_seconds /
sweep_seconds` banks per tick, all of them in a scheduler's first tick. Background
tasks are kept referenced and their failures logged (an untracked task can be collected and its
error lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time

from adk_memory.engine import MemoryEngine
from adk_memory.engine.ingest import STREAM_KIND, reindex_streams
from adk_memory.errors import AdkMemoryError, NotFound, ResourceExhausted

__all__ = ["IngestScheduler"]

logger = logging.getLogger(__name__)

DEFAULT_POLL_SECONDS = 1.0
DEFAULT_SWEEP_SECONDS = 300.0
_CLAIM_WAIT_SECONDS = 0.2
_DUE_PER_TICK = 1000
"""Due streams taken per tick, earliest first (the rest wait for the next tick)."""


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
        self._next_cycle = float("-inf")
        """When (monotonic) the next maintenance cycle starts; -inf until the first."""
        self._backlog: list[str] = []
        """Banks the current maintenance cycle has still to visit."""
        self._per_tick = 0
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
        """Maintains this tick's share of the banks, then flushes the due streams once.

        Returns how many memories changed.
        """
        await self._maintain()
        changed = 0
        try:
            due = await self._engine.ingest.due_streams(limit=_DUE_PER_TICK)
        except AdkMemoryError as exc:
            logger.warning("Listing due streams failed: %s", exc.status)
            due = []
        for entry in due:
            changed += await self._flush(entry.bank_id, entry.key)
        return changed

    async def _maintain(self) -> None:
        """Sweeps and re-indexes this tick's share of the banks (starting a cycle when it is time).

        A cycle lists the banks once and visits each within `sweep_seconds`; the first cycle of a
        scheduler visits them all at once, so a restart (or an upgrade to the due index) finds
        every pending stream in its first tick.
        """
        if not self._backlog and time.monotonic() >= self._next_cycle:
            try:
                banks = await self._engine.store.list_banks()
            except AdkMemoryError as exc:  # the due streams are flushed all the same
                logger.warning("Listing banks for maintenance failed: %s", exc.status)
                return
            first = self._next_cycle == float("-inf")
            self._next_cycle = time.monotonic() + self._sweep_seconds
            self._backlog = [bank.bank_id for bank in banks]
            ticks = 1 if first else max(1, round(self._sweep_seconds / self._poll_seconds))
            self._per_tick = math.ceil(len(self._backlog) / ticks)
        share, self._backlog = self._backlog[: self._per_tick], self._backlog[self._per_tick :]
        for bank_id in share:
            await self._sweep(bank_id)
            await self._reindex(bank_id)

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

    async def _reindex(self, bank_id: str) -> None:
        try:
            await reindex_streams(self._engine.context, bank_id)
        except NotFound:
            pass  # deleted meanwhile
        except AdkMemoryError as exc:
            logger.warning("Checking the due index of a bank's streams failed: %s", exc.status)

    async def _flush(self, bank_id: str, key: str) -> int:
        try:
            return await self._engine.ingest.flush(bank_id, key, wait_seconds=_CLAIM_WAIT_SECONDS)
        except ResourceExhausted:
            return 0  # another flush holds the stream; it will take these events too
        except NotFound:
            # The bank is gone (an entry its deletion missed): drop the entry.
            with contextlib.suppress(AdkMemoryError):
                await self._engine.store.set_due(bank_id, STREAM_KIND, {key: None})
            return 0
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
