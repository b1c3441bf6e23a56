"""The bank registry (`<prefix>.banks`): one row per bank, and its cache for embedded folders.

A bank's row holds its record and its state: live, or being deleted (`_codec`). The store
creates a bank's collections first and registers it last; a deletion marks the row first, then
drops the collections, then the row (see `_store`).
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from adk_memory.store import BankRecord
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import REGISTRY, Chroma


class BankRows:
    """The registry rows of one embedded directory, shared by this process's stores on it.

    Saves `get_bank` its round trip, once per retrieve or write. Exact, not a guess: embedded
    Chroma is single-process (`_folder`), so every registry change goes through a store of this
    process, which calls `changed` after it. A read caches its row only if no change was made
    while it ran, so it never keeps a row older than a write that finished before it. Not used
    for a Chroma server or a client passed in, which other processes may change.
    """

    def __init__(self) -> None:
        self._rows: dict[str, Mapping[str, Any] | None] = {}
        self._guard = threading.Lock()
        self.generation = 0

    def get(self, bank_id: str) -> tuple[bool, Mapping[str, Any] | None]:
        """(found in the cache, the row or None for no bank)."""
        with self._guard:
            return bank_id in self._rows, self._rows.get(bank_id)

    def put(self, bank_id: str, meta: Mapping[str, Any] | None, generation: int) -> None:
        """Caches a row read while `generation` was current (dropped if it no longer is)."""
        with self._guard:
            if generation == self.generation:
                self._rows[bank_id] = meta

    def changed(self) -> None:
        """Forgets every row: the registry was written (or a write may have landed)."""
        with self._guard:
            self.generation += 1
            self._rows.clear()


class BankRegistry:
    """Reads and writes the registry rows, through the cache when the store has one."""

    def __init__(self, chroma: Chroma) -> None:
        self._chroma = chroma
        self.rows: BankRows | None = None
        """The registry rows cached for an embedded directory this process holds, else None."""

    async def row(self, bank_id: str) -> Mapping[str, Any] | None:
        """The bank's registry row (live or being deleted), or None."""

        async def work(registry: Any) -> Mapping[str, Any] | None:
            found = await self._chroma.call(
                "read a bank", registry.get, ids=[bank_id], include=["metadatas"]
            )
            return found["metadatas"][0] if found["ids"] else None

        await self._chroma.connection()
        cache = self.rows
        if cache is None:
            return await self._chroma.on_store_wide(work, REGISTRY)
        hit, meta = cache.get(bank_id)
        if hit:
            return meta
        generation = cache.generation
        meta = await self._chroma.on_store_wide(work, REGISTRY)
        cache.put(bank_id, meta, generation)
        return meta

    async def live(self) -> list[BankRecord]:
        """Every live bank, in the registry's order."""

        async def work(registry: Any) -> list[BankRecord]:
            found = await self._chroma.call(
                "list banks",
                registry.get,
                where={codec.STATE: codec.STATE_LIVE},
                include=["metadatas"],
            )
            return [
                codec.decode_bank(bank_id, meta)
                for bank_id, meta in zip(found["ids"], found["metadatas"], strict=True)
            ]

        return await self._chroma.on_store_wide(work, REGISTRY)

    async def put(self, action: str, row: codec.Row) -> None:
        async def work(registry: Any) -> None:
            await self._chroma.write(action, registry, [row])

        await self._change(work)

    async def mark_deleting(self, bank_id: str, meta: Mapping[str, Any]) -> None:
        """Marks the bank's row as being deleted: it hides the bank until the row is gone."""
        marked = {**meta, codec.STATE: codec.STATE_DELETING}

        async def mark(registry: Any) -> None:
            await self._chroma.call(
                "mark a bank deleted", registry.update, ids=[bank_id], metadatas=[marked]
            )

        await self._change(mark)

    async def unregister(self, bank_id: str) -> None:
        async def unregister(registry: Any) -> None:
            await self._chroma.call("unregister a bank", registry.delete, ids=[bank_id])

        await self._change(unregister)

    def changed(self) -> None:
        """Drops the cached rows: the registry was written (or dropped) behind the cache."""
        if self.rows is not None:
            self.rows.changed()

    async def _change(self, work: Callable[[Any], Awaitable[None]]) -> None:
        """Runs a write on the bank registry, then drops the cached rows (even if it failed)."""
        try:
            await self._chroma.on_store_wide(work, REGISTRY)
        finally:
            self.changed()
