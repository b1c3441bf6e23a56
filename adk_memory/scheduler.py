"""The background scheduler: flushes due ingest streams and sweeps expired memories.

A long-lived `Client`/`AsyncClient` starts one on its first `ingest_events`; `adk-memory serve`
and `adk-memory worker` run one for deployments. Each flush claims its stream under the stream's
lock and re-reads it there, so several schedulers on one store, in any number of processes,
generate from each event once (`adk_memory.engine.ingest` names the one at-least-once case).

A tick costs what is due: it asks the store's due index for the streams whose time has come (across
all banks, one query) and flushes those, `_FLUSHES_AT_ONCE` at a time, then for the banks whose
expiry entry (`EXPIRY_KIND`) has come, and sweeps those: their expired memories and revisions are
reclaimed (stores without native expiry need this; reads never return expired memories either way).
A write of a row with an expire time lowers its bank's entry; a sweep sets it to the bank's
earliest remaining expiry, but not before `sweep_seconds` from then, so a bank's own schedule
sweeps it at most once per `sweep_seconds` (a write of an earlier expiry brings it forward), and a
bank where nothing expires has no entry and is never swept.

Maintenance is spread over the ticks of a cycle (`sweep_seconds`): each bank in turn has its
streams' index entries checked (`reindex_streams`), about `banks x poll_seconds / sweep_seconds`
banks per tick. A scheduler's first tick maintains every bank and also sweeps each and sets its
expiry entry, so rows stored before the expiry index (an upgrade), or an entry left late by a
sweep that crashed half-way (`_sweep`), are caught up on every start. Background tasks are kept
referenced and their failures logged (an untracked task can be collected and its error lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import math
import time
from datetime import timedelta

from adk_memory.engine import MemoryEngine
from adk_memory.engine.ingest import STREAM_KIND, reindex_streams
from adk_memory.errors import AdkMemoryError, NotFound, ResourceExhausted
from adk_memory.store import EXPIRY_KEY, EXPIRY_KIND, DueDocument

__all__ = ["IngestScheduler"]

logger = logging.getLogger(__name__)

DEFAULT_POLL_SECONDS = 1.0
DEFAULT_SWEEP_SECONDS = 300.0
_CLAIM_WAIT_SECONDS = 0.2
_DUE_PER_TICK = 1000
"""Due streams taken per tick, earliest first (the rest wait for the next tick)."""
_FLUSHES_AT_ONCE = 8
"""Due streams a tick flushes at once (`IngestScheduler._flush_all`)."""
_SWEEPS_PER_TICK = 50
"""Banks due for a sweep taken per tick, earliest first (a sweep reads the bank's expiring rows)."""


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
            # An empty context: the loop outlives the call that started it, so its spans must not
            # join that call's trace (nor see its context variables).
            self._loop_task = asyncio.get_running_loop().create_task(
                self.run_forever(), context=contextvars.Context()
            )

    def kick(self, bank_id: str, key: str) -> None:
        """Flushes one stream in the background now."""
        self._track(asyncio.get_running_loop().create_task(self._flush(bank_id, key)))

    async def run_once(self) -> int:
        """Maintains this tick's share of the banks, flushes due streams, sweeps due banks.

        Returns how many memories changed (by flushes).
        """
        await self._maintain()
        try:
            due = await self._engine.ingest.due_streams(limit=_DUE_PER_TICK)
        except AdkMemoryError as exc:
            logger.warning("Listing due streams failed: %s", exc.status)
            due = []
        changed = await self._flush_all(due)
        await self._sweep_due()
        return changed

    async def _flush_all(self, due: list[DueDocument]) -> int:
        """Flushes the due streams, `_FLUSHES_AT_ONCE` at a time, earliest first.

        A flush waits for its model calls (seconds each with a real model), so one after the
        other a tick of many idle sessions would leave the last its whole length late.
        """
        slots = asyncio.Semaphore(_FLUSHES_AT_ONCE)

        async def flush(entry: DueDocument) -> int:
            async with slots:
                return await self._flush(entry.bank_id, entry.key)

        # A flush that fails unexpectedly must not cancel the others half-way.
        outcomes = await asyncio.gather(*(flush(entry) for entry in due), return_exceptions=True)
        changed = 0
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            changed += outcome
        return changed

    async def _maintain(self) -> None:
        """Re-indexes this tick's share of the banks' streams (starting a cycle when it is time).

        A cycle lists the banks once and visits each within `sweep_seconds`; the first cycle of a
        scheduler visits them all at once, and sweeps each, so a restart (or an upgrade to the due
        index) finds every pending stream and expired row in its first tick.
        """
        first = False
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
            if first:
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

    async def _sweep_due(self) -> None:
        """Sweeps the banks whose expiry entry has come (earliest first)."""
        now = self._engine.context.clock()
        try:
            due = await self._engine.store.due_documents(EXPIRY_KIND, now, limit=_SWEEPS_PER_TICK)
        except AdkMemoryError as exc:
            logger.warning("Listing banks due for a sweep failed: %s", exc.status)
            return
        for entry in due:
            await self._sweep(entry.bank_id)

    async def _sweep(self, bank_id: str) -> None:
        """Sweeps a bank, then sets its expiry entry to when it next needs a sweep.

        The entry is set exactly from the bank's earliest expiry, which is then read again and
        the entry lowered to it. A write whose rows the first read missed either lowers the
        entry after the exact set (it lowers after storing them: `expiry_around`), or stored
        them before it, and so before the second read. Either way no entry ends later than a
        stored row's expiry (or the bank's next regular sweep). A crash between the two leaves
        at worst one entry late, until the next scheduler start sweeps every bank.
        """
        store = self._engine.store
        now = self._engine.context.clock()
        not_before = now + timedelta(seconds=self._sweep_seconds)
        try:
            removed = await store.sweep_expired(bank_id, now)
            for only_earlier in (False, True):
                earliest = await store.earliest_expiry(bank_id)
                entry = None if earliest is None else max(earliest, not_before)
                if entry is not None or not only_earlier:
                    await store.set_due(
                        bank_id, EXPIRY_KIND, {EXPIRY_KEY: entry}, only_earlier=only_earlier
                    )
        except NotFound:  # the bank is gone (an entry its deletion missed): drop the entry
            with contextlib.suppress(AdkMemoryError):
                await store.set_due(bank_id, EXPIRY_KIND, {EXPIRY_KEY: None})
            return
        except AdkMemoryError as exc:  # the entry stays due: the next tick retries
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
