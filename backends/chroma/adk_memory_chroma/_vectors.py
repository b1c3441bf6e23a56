"""The scope vector cache: a scope's vectors kept between searches, and the exact ranking.

`nearest` ranks a scope's memories in numpy (float32 dot products, then every row that rounding
could move into the top k again in float64: exact distances, ties by memory id; `ranked` orders
the k winners read whole). The vectors are kept per store in a cache bounded in bytes
(`vector_cache_mb`, least recently used first) under the scope's version (`_scope_index`): the
index and the vectors are read after the version, so they are at least as new as it, and any
write to the scope, by any process, changes the version.

Write-through (`ScopeWrite`): a writer reads the heads of the scopes its batch touches with
their buckets (`_scope_index.ScopeIndex.rows_after`, under the journal lock, so no other batch
of the bank is in flight); once the batch is committed whole (`_writer`; never after a
failure), each scope cached under exactly the head it read (or new: no head) is advanced to the
batch's version: the cached rows less those the batch deletes, moves out or rewrites, plus its
rows of the scope as a read would return them. Any other cached version means another writer
came in between: the entry is dropped. A reader's entry put meanwhile is harmless: the batch
rewrites every row in which the two versions differ.

A scope's successive cached versions share their rows (`_Rows`), so a write costs O(batch), not
O(scope): the batch's rows are appended in place, and the rows it drops are marked gone as of
the new version, which every older version (a search in flight, on any thread) ignores. Only the
newest version appends; an entry is laid out afresh, with room to grow, when its rows are full
or too many of them are dropped ones (amortised O(1) a row).

No I/O here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass
from typing import Any

import numpy as np

from adk_memory.errors import InvalidArgument
from adk_memory.store import MemoryRecord, ScoredRecord
from adk_memory.vectors import VectorMatrix, exact_distances, ids_nbytes, nearest_rows
from adk_memory_chroma import _codec as codec


@dataclass(frozen=True, slots=True)
class ScopeWrite:
    """What a committed batch did to one scope, for the vector cache's write-through."""

    version: str
    """The batch's id: the scope's version after it."""
    replaced: str
    """The scope's version the batch replaced, read under the journal lock ("": a new scope)."""
    touched: frozenset[str]
    """Every memory the batch writes or deletes, in any scope."""
    rows: list[codec.Row]
    """The batch's memory rows in this scope (their vectors and expiries are the cache's)."""
    as_read: Callable[[list[Any]], np.ndarray[Any, Any]]
    """The rows' vectors as a read of Chroma returns them (`as_read_embedded`, `as_read_http`)."""


_NEVER = np.iinfo(np.int64).max
"""`_Rows.gone_at` of a row no version has dropped."""
_HEADROOM_SHARE = 4
"""An entry laid out again for a write gets room for 1/_HEADROOM_SHARE more rows (plus a few):
appending then copies each row a few times at most (amortised), and holds at most 1/4 unused."""
_DEAD_SHARE = 16
"""An entry is laid out again once more than 1/_DEAD_SHARE of its rows are dropped ones (a
search still multiplies them)."""
_ROW_OF_BYTES = 64
"""A memory's entry in `_Rows.row_of` (its slot, and the int of its row)."""


@dataclass(frozen=True, slots=True)
class _Block:
    """Rows of a scope as the cache keeps them: ids, vectors, squared norms, expiries."""

    ids: Sequence[str]
    matrix: np.ndarray[Any, np.dtype[np.floating[Any]]]
    squared_norms: np.ndarray[Any, np.dtype[np.float64]]
    live_us: np.ndarray[Any, np.dtype[np.int64]]

    @classmethod
    def of(cls, write: ScopeWrite) -> _Block:
        """The batch's rows of the scope, as a read of Chroma returns them."""
        matrix = (
            write.as_read([row[1] for row in write.rows])
            if write.rows
            else np.empty((0, 0), dtype=np.float32)
        )
        return cls(
            [row[0] for row in write.rows],
            matrix,
            np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64),
            np.fromiter((int(row[3][codec.LIVE_US]) for row in write.rows), dtype=np.int64),
        )

    def fits(self, matrix: np.ndarray[Any, Any]) -> bool:
        """Whether these rows go into `matrix` as they are (its dimension; float32 if exact)."""
        if not self.ids:
            return True
        if self.matrix.shape[1] != matrix.shape[1]:
            return False
        return matrix.dtype == np.float64 or np.array_equal(
            self.matrix.astype(np.float32), self.matrix
        )


class _Rows:
    """The rows of successive versions of one scope's entry: appended, then only marked gone.

    Version `seq` sees the first `count` rows but those whose `gone_at` is at most `seq`. Only
    the newest version (`tip`) appends rows or marks rows gone (then with a later `seq`), so
    every older version, held by a search in flight on any thread, sees the same rows forever.
    """

    __slots__ = (
        "gone_at",
        "id_bytes",
        "ids",
        "live_us",
        "matrix",
        "row_of",
        "squared_norms",
        "tip",
    )

    def __init__(self, capacity: int, dimensions: int, dtype: np.dtype[Any]) -> None:
        self.matrix: np.ndarray[Any, np.dtype[np.floating[Any]]]
        self.matrix = np.empty((capacity, dimensions), dtype=dtype)
        self.squared_norms = np.empty(capacity, dtype=np.float64)
        self.live_us = np.empty(capacity, dtype=np.int64)
        self.gone_at = np.full(capacity, _NEVER, dtype=np.int64)
        """The first version without the row."""
        self.ids: list[str] = []
        self.id_bytes = 0
        self.row_of: dict[str, int] = {}
        """The row of each memory in the newest version."""
        self.tip = 0
        """The newest version's `seq`."""

    @property
    def capacity(self) -> int:
        return len(self.gone_at)

    @property
    def nbytes(self) -> int:
        """About what the rows hold in memory: all allocated, the ids, the newest's row map."""
        arrays = self.matrix.nbytes + self.squared_norms.nbytes + self.live_us.nbytes
        return int(arrays + self.gone_at.nbytes) + self.id_bytes + _ROW_OF_BYTES * len(self.ids)

    def append(self, block: _Block) -> int:
        """Writes `block` after the last row (room checked by the caller); the rows' count."""
        start = len(self.ids)
        end = start + len(block.ids)
        if block.ids:  # an empty block's matrix has no dimension
            self.matrix[start:end] = block.matrix
            self.squared_norms[start:end] = block.squared_norms
            self.live_us[start:end] = block.live_us
            self.ids.extend(block.ids)
            self.id_bytes += ids_nbytes(block.ids)
            self.row_of.update(zip(block.ids, range(start, end), strict=True))
        return end


@dataclass(frozen=True, slots=True)
class ScopeVectors:
    """A scope's memories as of one version of its index: ids and vectors, expiries.

    The first `count` of `rows` but those dropped by this version or earlier ones (`_Rows`): a
    write appends to the rows its entry shares with the version before (O(batch)), and lays
    them out again (O(scope)) only when they are full or more than 1/_DEAD_SHARE of them are
    dropped ones.
    """

    key: tuple[str, str]
    """(memory collection id, scope digest)."""
    version: str
    rows: _Rows
    count: int
    """The rows of this version, dropped ones included."""
    seq: int
    """This version's place among those of `rows`."""
    size: int
    """The memories of this version."""
    nbytes: int
    """About what the entry holds in memory (`_Rows.nbytes`)."""

    @classmethod
    def build(
        cls,
        key: tuple[str, str],
        version: str,
        ids: list[str],
        embeddings: list[Any],
        live_us: Mapping[str, int],
    ) -> ScopeVectors:
        vectors = VectorMatrix.of(ids, embeddings)
        expiries = np.fromiter((live_us[i] for i in ids), dtype=np.int64, count=len(ids))
        block = _Block(ids, vectors.matrix, vectors.squared_norms, expiries)
        return cls._laid_out(key, version, [block], len(ids))

    @classmethod
    def _laid_out(
        cls, key: tuple[str, str], version: str, blocks: list[_Block], capacity: int
    ) -> ScopeVectors:
        """An entry on rows of its own: `blocks` (of one dimension), room for `capacity` rows."""
        filled = [block for block in blocks if block.ids]
        dimensions = filled[0].matrix.shape[1] if filled else 0
        dtype = np.result_type(np.float32, *(block.matrix.dtype for block in filled))
        rows = _Rows(capacity, dimensions, dtype)
        for block in filled:
            rows.append(block)
        count = len(rows.ids)
        return cls(key, version, rows, count, 0, count, rows.nbytes)

    def after(self, write: ScopeWrite) -> ScopeVectors | None:
        """The scope at `write.version`, if this entry is the scope at the version it replaces.

        These rows less those the batch deletes, moves out or rewrites, then its rows of the
        scope, as a read of Chroma would return them. None if their dimension differs from the
        rows kept (then this entry cannot be the scope the batch was checked against).
        """
        batch = _Block.of(write)
        if self.rows.tip == self.seq and batch.fits(self.rows.matrix):
            gone = [self.rows.row_of[i] for i in write.touched if i in self.rows.row_of]
            count = self.count + len(batch.ids)
            dead = count - (self.size - len(gone) + len(batch.ids))
            if count <= self.rows.capacity and dead * _DEAD_SHARE <= count:
                return self._appended(write.version, gone, batch)
        kept = self._where(self.present & ~self.rows_of(write.touched))
        if kept.ids and batch.ids and kept.matrix.shape[1] != batch.matrix.shape[1]:
            return None
        size = len(kept.ids) + len(batch.ids)
        capacity = size + size // _HEADROOM_SHARE + 4
        return ScopeVectors._laid_out(self.key, write.version, [kept, batch], capacity)

    def _appended(self, version: str, gone: list[int], batch: _Block) -> ScopeVectors:
        """The next version on these rows: `gone` dropped, `batch` appended."""
        rows, seq = self.rows, self.seq + 1
        rows.tip = seq  # first: should this fail half-way, no version would append again
        rows.gone_at[gone] = seq
        for row in gone:
            del rows.row_of[rows.ids[row]]
        count = rows.append(batch)
        size = self.size - len(gone) + len(batch.ids)
        return ScopeVectors(self.key, version, rows, count, seq, size, rows.nbytes)

    @property
    def present(self) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Which rows are memories of this version (the others were dropped since)."""
        return self.rows.gone_at[: self.count] > self.seq

    def live(self, now_us: int) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Which rows are memories of this version live at `now_us`."""
        return self.present & (self.rows.live_us[: self.count] > now_us)

    @property
    def dimensions(self) -> int:
        return int(self.rows.matrix.shape[1])

    @property
    def memory_ids(self) -> list[str]:
        """The ids of this version's memories."""
        return [self.rows.ids[row] for row in np.flatnonzero(self.present)]

    def rows_of(self, memory_ids: Set[str]) -> np.ndarray[Any, np.dtype[np.bool_]]:
        """Which rows hold one of `memory_ids` (dropped rows too: `live` leaves those out)."""
        ids = self.rows.ids
        return np.fromiter((ids[row] in memory_ids for row in range(self.count)), bool, self.count)

    @property
    def vectors(self) -> VectorMatrix:
        """This version's memories as one matrix of their own: O(scope)."""
        block = self._where(self.present)
        return VectorMatrix(tuple(block.ids), block.matrix, block.squared_norms)

    @property
    def live_us(self) -> np.ndarray[Any, np.dtype[np.int64]]:
        """The expiry of each of `vectors`' rows."""
        return self._where(self.present).live_us

    def _where(self, mask: np.ndarray[Any, np.dtype[np.bool_]]) -> _Block:
        """The rows where `mask` holds, copied out."""
        rows, count = self.rows, self.count
        return _Block(
            [rows.ids[row] for row in np.flatnonzero(mask)],
            rows.matrix[:count][mask],
            rows.squared_norms[:count][mask],
            np.compress(mask, rows.live_us[:count]),
        )

    def nearest(
        self, vector: np.ndarray[Any, np.dtype[np.float64]], allowed: np.ndarray[Any, Any], k: int
    ) -> list[str]:
        """The ids of the `k` allowed rows nearest to `vector`: exact distance, then id."""
        rows = self.rows
        found, _ = nearest_rows(
            rows.matrix[: self.count],
            rows.squared_norms[: self.count],
            rows.ids,
            vector,
            allowed,
            k,
        )
        return [rows.ids[row] for row in found]


class VectorCache:
    """Recently searched scopes' `ScopeVectors`, least recently used dropped beyond a budget."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[str, str], ScopeVectors] = OrderedDict()
        self._bytes = 0
        self._guard = threading.Lock()

    def holds(self, key: tuple[str, str]) -> bool:
        """Whether some version of the scope is cached (then its version is worth checking)."""
        with self._guard:
            return key in self._entries

    def get(self, key: tuple[str, str], version: str) -> ScopeVectors | None:
        """The entry of `key` if it was built from `version` of the scope's index."""
        with self._guard:
            entry = self._entries.get(key)
            if entry is None or entry.version != version:
                return None
            self._entries.move_to_end(key)
            return entry

    def put(self, entry: ScopeVectors) -> None:
        with self._guard:
            self._insert(entry)

    def write_through(self, key: tuple[str, str], write: ScopeWrite) -> None:
        """Advances the entry of `key` past a committed batch (see `ScopeWrite`).

        Only an entry of the version the batch replaced ("" for a new scope: from nothing) is
        the scope before the batch; any other is stale (another writer came in between) and is
        dropped.
        """
        with self._guard:
            entry = self._entries.get(key)
            if not write.replaced:
                entry = ScopeVectors.build(key, "", [], [], {})
            elif entry is None or entry.version != write.replaced:
                self._remove(key)
                return
            successor = entry.after(write)
            if successor is None:
                self._remove(key)
            else:
                self._insert(successor)

    def _insert(self, entry: ScopeVectors) -> None:
        self._remove(entry.key)
        if entry.nbytes > self._max_bytes:
            return
        self._entries[entry.key] = entry
        self._bytes += entry.nbytes
        while self._bytes > self._max_bytes:
            self._remove(next(iter(self._entries)))

    def drop(self, key: tuple[str, str]) -> None:
        with self._guard:
            self._remove(key)

    def _remove(self, key: tuple[str, str]) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= entry.nbytes


def scope_writes(
    batch_id: str,
    heads: Mapping[str, str],
    memory_rows: Sequence[codec.Row],
    deletes: Sequence[str],
    as_read: Callable[[list[Any]], np.ndarray[Any, Any]],
) -> dict[str, ScopeWrite]:
    """By scope the batch changes (`heads`: the versions it replaces), its `ScopeWrite`."""
    touched = frozenset([*(row[0] for row in memory_rows), *deletes])
    rows: dict[str, list[codec.Row]] = {scope_key: [] for scope_key in heads}
    for row in memory_rows:
        rows[str(row[3][codec.SCOPE_KEY])].append(row)
    return {
        scope_key: ScopeWrite(batch_id, replaced, touched, rows[scope_key], as_read)
        for scope_key, replaced in heads.items()
    }


def as_read_embedded(vectors: list[Any]) -> np.ndarray[Any, np.dtype[np.float32]]:
    """Vectors as embedded Chroma returns them: its stored float32 values."""
    return np.asarray(vectors, dtype=np.float32)


def as_read_http(vectors: list[Any]) -> np.ndarray[Any, np.dtype[np.float64]]:
    """Vectors as a Chroma server returns them (JSON).

    The shortest decimal of each stored float32, parsed as a float64: not the float32's value.
    """
    return np.asarray(vectors, dtype=np.float32).astype(str).astype(np.float64)


def ranked(records: list[MemoryRecord], vector: Any, k: int) -> list[ScoredRecord]:
    """The `k` records nearest to `vector` by their own embeddings: exact distance, then id."""
    if not records:
        return []
    matrix = as_matrix([record.embedding for record in records], len(vector))
    distances = exact_distances(matrix, vector).tolist()
    ordered = sorted(
        zip(distances, records, strict=True), key=lambda pair: (pair[0], pair[1].memory_id)
    )
    return [ScoredRecord(record, distance) for distance, record in ordered[:k]]


def as_matrix(embeddings: Any, dimension: int) -> np.ndarray[Any, np.dtype[np.float64]]:
    matrix = np.asarray(embeddings, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] != dimension:
        raise InvalidArgument(
            f"The query vector has {dimension} dimensions but the bank's memories have "
            f"{matrix.shape[-1] if matrix.ndim == 2 else 'other'}; embed the query with the "
            "bank's model.",
            field="vector",
        )
    return matrix
