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

No I/O here.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from adk_memory.errors import InvalidArgument
from adk_memory.store import MemoryRecord, ScoredRecord
from adk_memory.vectors import VectorMatrix, exact_distances
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


@dataclass(frozen=True, slots=True)
class ScopeVectors:
    """A scope's memories as of one version of its index: ids and vectors, expiries."""

    key: tuple[str, str]
    """(memory collection id, scope digest)."""
    version: str
    vectors: VectorMatrix
    live_us: np.ndarray[Any, np.dtype[np.int64]]
    nbytes: int
    """About what the entry holds in memory (the vectors, norms, expiries and ids)."""

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
        return cls.of(key, version, vectors, expiries)

    @classmethod
    def of(
        cls,
        key: tuple[str, str],
        version: str,
        vectors: VectorMatrix,
        live_us: np.ndarray[Any, np.dtype[np.int64]],
    ) -> ScopeVectors:
        return cls(key, version, vectors, live_us, vectors.nbytes + live_us.nbytes)

    def after(self, write: ScopeWrite) -> ScopeVectors | None:
        """The scope at `write.version`, if this entry is the scope at the version it replaces.

        These rows less those the batch deletes, moves out or rewrites, then its rows of the
        scope, as a read of Chroma would return them. None if their dimension differs from the
        rows kept (then this entry cannot be the scope the batch was checked against).
        """
        kept = np.fromiter(
            (memory_id not in write.touched for memory_id in self.vectors.ids),
            dtype=bool,
            count=len(self.vectors.ids),
        )
        added = (
            write.as_read([row[1] for row in write.rows])
            if write.rows
            else np.empty((0, 0), dtype=np.float32)
        )
        parts = [part for part in (self.vectors.matrix[kept], added) if len(part)]
        if len({part.shape[1] for part in parts}) > 1:
            return None
        matrix = np.concatenate(parts) if parts else added
        norms = np.concatenate(
            [
                self.vectors.squared_norms[kept],
                np.einsum("ij,ij->i", added, added, dtype=np.float64),
            ]
        )
        ids = [memory_id for memory_id, keep in zip(self.vectors.ids, kept, strict=True) if keep]
        ids += [row[0] for row in write.rows]
        live_us = np.fromiter((int(row[3][codec.LIVE_US]) for row in write.rows), dtype=np.int64)
        return ScopeVectors.of(
            self.key,
            write.version,
            VectorMatrix(tuple(ids), matrix, norms),
            np.concatenate([self.live_us[kept], live_us]),
        )

    @property
    def ids(self) -> list[str]:
        """The memory id of each row."""
        return list(self.vectors.ids)

    def nearest(
        self, vector: np.ndarray[Any, np.dtype[np.float64]], allowed: np.ndarray[Any, Any], k: int
    ) -> list[str]:
        """The ids of the `k` allowed rows nearest to `vector`: exact distance, then id."""
        rows, _ = self.vectors.nearest(vector, allowed, k)
        return [self.vectors.ids[row] for row in rows]


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
