"""Embedded only: the rows this process committed, so reads need not fetch them back.

Two mirrors: memory rows (`RecordMirror`, for a search's winners) and documents
(`DocumentMirror`, for `get_document`: ingest streams, read back by the ADK writer, a flush and
the next turn's hand-over). What follows is said of the memory rows; `DocumentMirror` says how
documents differ.

`nearest` ranks a scope's cached vectors, then reads its k winners whole from Chroma (their
facts and metadata). With 20 ADK users at once that read was 40 `get`s a round, each waiting for
a thread and the GIL, on rows this very process had just written. The directory is this
process's alone (`_folder`) and every memory row goes through its writers, so a row a writer
committed is the row stored until a later write of it: `RecordMirror` keeps the rows of
committed batches (as their writer wrote them, decoded on use), and `nearest` takes its
winners from it when it holds all of them.

Never stale: a writer forgets every memory it is about to write or delete before its first call
(`writing`) and puts the rows back once the batch is committed whole (`committed`); a write cut
short leaves them forgotten. A replayed journal, a deleted bank and `drop_all` forget the bank.
Rows are kept with the memory collection's id (a bank deleted and created again is another
collection). Nothing read from Chroma is kept. Bounded in bytes, oldest first out.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from adk_memory.store import MemoryRecord
from adk_memory_chroma import _codec as codec

MIRRORED_BYTES = 32 * 2**20
"""About how much the kept rows may hold (facts, payloads, vectors)."""
_ROW_OVERHEAD = 400
"""About what a kept row costs beyond its fact, payload and vector."""


class _KeptRows:
    """Rows kept by bank and row id with their collection's id, bounded in bytes, oldest out."""

    def __init__(self, max_bytes: int = MIRRORED_BYTES) -> None:
        self._max_bytes = max_bytes
        self._lock = threading.Lock()
        self._rows: OrderedDict[tuple[str, str], tuple[str, Any, int]] = OrderedDict()
        """(bank id, row id) -> (collection id, what is kept, its bytes)."""
        self._bytes = 0

    def _kept(self, bank_id: str, collection_id: str, row_ids: Sequence[str]) -> list[Any] | None:
        """What is kept of every one of `row_ids` in that collection, in order; else None."""
        with self._lock:
            found = [self._rows.get((bank_id, row_id)) for row_id in row_ids]
        if any(entry is None or entry[0] != collection_id for entry in found):
            return None
        return [entry[1] for entry in found if entry is not None]

    def _keep(self, bank_id: str, collection_id: str, row_id: str, kept: Any, size: int) -> None:
        """Under `_lock`: keeps one row (the oldest go past the bound)."""
        key = (bank_id, row_id)
        self._drop(key)
        self._rows[key] = (collection_id, kept, size + _ROW_OVERHEAD)
        self._bytes += size + _ROW_OVERHEAD
        while self._bytes > self._max_bytes and self._rows:
            self._drop(next(iter(self._rows)))

    def _drop_rows(self, bank_id: str | None, row_ids: Iterable[str] | None = None) -> None:
        """Under `_lock`: drops those of `row_ids`, else the bank's (every bank's with None)."""
        if row_ids is not None and bank_id is not None:
            dropped = [(bank_id, row_id) for row_id in row_ids]
        else:
            dropped = [key for key in self._rows if bank_id is None or key[0] == bank_id]
        for key in dropped:
            self._drop(key)

    def _drop(self, key: tuple[str, str]) -> None:
        entry = self._rows.pop(key, None)
        if entry is not None:
            self._bytes -= entry[2]


class RecordMirror(_KeptRows):
    """Memory rows as this process's writers committed them, by bank and memory id."""

    def live_records(
        self, bank_id: str, collection_id: str, memory_ids: Sequence[str], now_us: int
    ) -> list[MemoryRecord] | None:
        """Those of `memory_ids` live at `now_us`, as stored, in order.

        What a `get` by ids and the expiry check would answer; None unless every one is kept.
        """
        kept = self._kept(bank_id, collection_id, memory_ids)
        if kept is None:
            return None
        return [
            _decoded(row, vector)
            for row, vector in kept
            if int(row[3].get(codec.LIVE_US) or 0) > now_us
        ]

    def writing(self, bank_id: str, memory_ids: Iterable[str]) -> None:
        """Before a batch's first call: forgets every memory it writes or deletes."""
        with self._lock:
            self._drop_rows(bank_id, memory_ids)

    def committed(
        self,
        bank_id: str,
        collection_id: str,
        rows: Sequence[codec.Row],
        vectors: np.ndarray[Any, Any],
    ) -> None:
        """Once a batch is committed whole: its memory rows, with their vectors as stored."""
        with self._lock:
            for row, vector in zip(rows, vectors, strict=True):
                size = len(row[2] or "") + len(str(row[3].get(codec.PAYLOAD, ""))) + vector.nbytes
                self._keep(bank_id, collection_id, row[0], (row, vector), size)

    def forget(self, bank_id: str | None = None) -> None:
        """Forgets the bank's rows (every bank's with None)."""
        with self._lock:
            self._drop_rows(bank_id)


class DocumentMirror(_KeptRows):
    """Documents (ingest streams and the like) as this process's writers committed them.

    `get_document` takes a document from it instead of reading it back: the ADK writer, a flush
    and the next turn's hand-over each read the stream the last one wrote. Only batches of the
    writers (`apply`, under the bank's journal lock) put documents in; `put_document` and
    `delete_document`, which write outside that lock, forget theirs before and after writing, and
    a batch in flight puts its documents in only if no such write of the bank began meanwhile
    (`writing` returns the bank's epoch, `committed` checks it). Kept as the rows were written
    (metadata, decoded on use), by bank and collection id, bounded in bytes.
    """

    def __init__(self, max_bytes: int = MIRRORED_BYTES) -> None:
        super().__init__(max_bytes)
        self._epochs: dict[str, int] = {}

    def body(self, bank_id: str, collection_id: str, row_id: str) -> dict[str, Any] | None:
        """The document's body as stored (a fresh copy), or None if not kept."""
        kept = self._kept(bank_id, collection_id, [row_id])
        return None if kept is None else codec.decode_document(kept[0])[1]

    def writing(self, bank_id: str, row_ids: Iterable[str]) -> int:
        """Forgets the documents about to be written; returns the epoch `committed` checks."""
        with self._lock:
            self._epochs[bank_id] = epoch = self._epochs.get(bank_id, 0) + 1
            self._drop_rows(bank_id, row_ids)
            return epoch

    def committed(
        self, bank_id: str, collection_id: str, rows: Sequence[codec.Row], epoch: int
    ) -> None:
        """Once a batch is committed whole: its document rows, unless another write came."""
        with self._lock:
            if self._epochs.get(bank_id, 0) != epoch:
                return
            for row_id, _, _, meta in rows:
                size = len(str(meta.get(codec.PAYLOAD, "")))
                self._keep(bank_id, collection_id, row_id, dict(meta), size)

    def forget(self, bank_id: str | None = None, row_ids: Iterable[str] | None = None) -> None:
        """Forgets the bank's documents (those of `row_ids` only; every bank's with None)."""
        with self._lock:
            for known in {key[0] for key in self._rows} | set(self._epochs):
                if bank_id is None or known == bank_id:
                    self._epochs[known] = self._epochs.get(known, 0) + 1
            self._drop_rows(bank_id, row_ids)


def document_rows(rows: Sequence[codec.Row]) -> list[codec.Row]:
    """The document rows among a batch's aux rows."""
    return [row for row in rows if row[3].get(codec.KIND) == codec.KIND_DOCUMENT]


def _decoded(row: codec.Row, vector: np.ndarray[Any, Any]) -> MemoryRecord:
    """The memory as a read of its stored row decodes it (None fields were removed by Chroma)."""
    memory_id, _, fact, meta = row
    stored = {key: value for key, value in meta.items() if value is not None}
    return codec.decode_memory(memory_id, fact, stored, vector)
