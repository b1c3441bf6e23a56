"""Reads of rows by id that are in flight together, as one Chroma call.

The ADK service's writer stores the events of every turn handed over at once
(`IngestOps.ingest_many`), reading each stream's document first: 20 users at once made 20
concurrent `get` calls, each a worker thread's round trip (the loop's thread pool holds six).
Rows asked for in one turn of an event loop are read by one `get` (`Chroma.read_metadata`) in
the next; each caller gets its own row (or None) or the call's error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from adk_memory_chroma._chroma import Chroma


class ReadsTogether:
    """Batches concurrent reads of one collection's rows by id, per event loop."""

    def __init__(self, chroma: Chroma, action: str) -> None:
        self._chroma = chroma
        self._action = action
        self._waiting: dict[tuple[asyncio.AbstractEventLoop, int], _Batch] = {}
        self._reading: set[asyncio.Task[None]] = set()
        """The reads under way (held: a loop keeps only weak references to its tasks)."""

    async def metadata(self, collection: Any, row_id: str) -> Mapping[str, Any] | None:
        """The row's metadata, or None if it does not exist (read with the rows asked meanwhile)."""
        loop = asyncio.get_running_loop()
        key = (loop, id(collection))
        batch = self._waiting.get(key)
        if batch is None:
            batch = self._waiting[key] = _Batch(collection)
            # Its first step runs after the steps already scheduled: the reads asked meanwhile.
            task = loop.create_task(self._read(key))
            self._reading.add(task)
            task.add_done_callback(lambda done: self._finished(done, key, batch))
        waiter: asyncio.Future[Mapping[str, Any] | None] = loop.create_future()
        batch.waiters.setdefault(row_id, []).append(waiter)
        return await waiter

    def _finished(
        self, task: asyncio.Task[None], key: tuple[asyncio.AbstractEventLoop, int], batch: _Batch
    ) -> None:
        """Forgets a read; one cancelled before its first step (a loop closing) too."""
        self._reading.discard(task)
        if self._waiting.get(key) is batch:
            del self._waiting[key]
            for waiter in batch.all_waiters():
                waiter.cancel()

    async def _read(self, key: tuple[asyncio.AbstractEventLoop, int]) -> None:
        batch = self._waiting.pop(key)
        try:
            found = await self._chroma.read_metadata(
                batch.collection, list(batch.waiters), self._action
            )
        except asyncio.CancelledError:
            for waiter in batch.all_waiters():
                waiter.cancel()
            raise
        except Exception as exc:
            for waiter in batch.all_waiters():
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        for row_id, waiters in batch.waiters.items():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(found.get(row_id))


class _Batch:
    """The rows of one collection asked for in one turn of a loop, and who waits for each."""

    def __init__(self, collection: Any) -> None:
        self.collection = collection
        self.waiters: dict[str, list[asyncio.Future[Mapping[str, Any] | None]]] = {}

    def all_waiters(self) -> list[asyncio.Future[Mapping[str, Any] | None]]:
        return [waiter for waiters in self.waiters.values() for waiter in waiters]
