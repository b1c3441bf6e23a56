"""Exact nearest-neighbour search over vectors kept in memory as one matrix.

Engine- and store-neutral: a cache that holds a scope's vectors (hybrid retrieval's scope index,
a store's own scope cache) ranks them here. Candidates come from one matrix-vector product in
the matrix's type (float32 unless a vector is not exactly a float32); every row that rounding
could move into the top k is ranked again in float64, by the same true Euclidean distance the
stores report (`numpy.linalg.norm` of float64 rows), ties by id (SPEC §3).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["VectorMatrix", "exact_distances", "ids_nbytes", "nearest_rows", "unstorable_value"]

_FloatArray = np.ndarray[Any, np.dtype[np.floating[Any]]]
_BYTES_PER_ID = 64
"""A str id's own bytes beyond its characters, and its slot in the tuple (CPython, 64-bit)."""


def ids_nbytes(ids: Iterable[str]) -> int:
    """About what the ids hold in memory, with their slots in a tuple or list."""
    return sum(_BYTES_PER_ID + len(memory_id) for memory_id in ids)


def unstorable_value(vector: Sequence[float]) -> tuple[int, float] | None:
    """The first (position, value) of `vector` that no store can hold, or None.

    A value must be a finite number that float32 holds (Chroma and Redis store float32): NaN,
    ±inf, and values that round to ±inf in float32 (beyond about ±3.4e38, e.g. 1e300) are not.
    Chroma refuses such a vector, Redis keeps it but never returns it by similarity, and every
    distance to it is NaN or inf.
    """
    values = np.asarray(vector, dtype=np.float64)
    with np.errstate(over="ignore"):
        bad = ~np.isfinite(values.astype(np.float32))
    if not bad.any():
        return None
    position = int(np.argmax(bad))
    return position, float(values[position])


def exact_distances(
    rows: _FloatArray, vector: _FloatArray
) -> np.ndarray[Any, np.dtype[np.float64]]:
    """The Euclidean distance of each row to `vector`, in float64, as every store computes it."""
    distances: np.ndarray[Any, np.dtype[np.float64]] = np.linalg.norm(
        rows.astype(np.float64) - vector, axis=1
    )
    return distances


@dataclass(frozen=True, slots=True)
class VectorMatrix:
    """Vectors with their ids, one row each, and their squared norms (float64)."""

    ids: tuple[str, ...]
    matrix: _FloatArray
    """float32 when every vector is exactly a float32 (what a float32 store reads back), else
    float64: the rows are the vectors bit for bit, so their distances are the stores'."""
    squared_norms: np.ndarray[Any, np.dtype[np.float64]]

    @classmethod
    def of(cls, ids: Sequence[str], vectors: Sequence[Sequence[float]]) -> VectorMatrix:
        """The matrix of `vectors` (all of one length; ValueError if not), row i for `ids[i]`."""
        if len(ids) != len(vectors):
            raise ValueError(f"{len(ids)} ids for {len(vectors)} vectors")
        exact = np.asarray(vectors, dtype=np.float64) if ids else np.empty((0, 0))
        if exact.ndim != 2:
            raise ValueError("the vectors are not all of one length")
        narrow = exact.astype(np.float32)
        matrix: _FloatArray = narrow if np.array_equal(narrow, exact) else exact
        squared = np.einsum("ij,ij->i", matrix, matrix, dtype=np.float64)
        return cls(tuple(ids), matrix, squared)

    @property
    def dimensions(self) -> int:
        """The length of every vector (0 when there are none)."""
        return int(self.matrix.shape[1])

    @property
    def nbytes(self) -> int:
        """Its memory: the matrix, the norms and the ids."""
        return int(self.matrix.nbytes + self.squared_norms.nbytes) + ids_nbytes(self.ids)

    def nearest(
        self, vector: Sequence[float] | _FloatArray, allowed: np.ndarray[Any, Any] | None, k: int
    ) -> tuple[np.ndarray[Any, np.dtype[np.intp]], np.ndarray[Any, np.dtype[np.float64]]]:
        """`nearest_rows` of these vectors."""
        return nearest_rows(self.matrix, self.squared_norms, self.ids, vector, allowed, k)


def nearest_rows(
    matrix: _FloatArray,
    squared_norms: np.ndarray[Any, np.dtype[np.float64]],
    ids: Sequence[str],
    vector: Sequence[float] | _FloatArray,
    allowed: np.ndarray[Any, Any] | None,
    k: int,
) -> tuple[np.ndarray[Any, np.dtype[np.intp]], np.ndarray[Any, np.dtype[np.float64]]]:
    """The rows of the `k` allowed vectors nearest to `vector`, and their exact distances.

    Row i of `matrix` is the vector of `ids[i]`, its squared norm `squared_norms[i]` (`ids` is
    read only at the rows ranked, so it may go on past the matrix). `allowed` is a boolean mask
    over the rows (None: every row). Rows come nearest first, ties by id; fewer than `k` when
    fewer are allowed.
    """
    target = np.asarray(vector, dtype=np.float64)
    if allowed is None:
        allowed = np.ones(len(matrix), dtype=bool)
    count = int(np.count_nonzero(allowed))
    if k <= 0 or count == 0:
        return np.empty(0, dtype=np.intp), np.empty(0, dtype=np.float64)
    # Squared distances as |m|^2 - 2 m.v + |v|^2: one product over the whole matrix
    # (selecting the allowed rows first would copy it). einsum's own single-threaded loop,
    # not BLAS: the product is memory-bound, and threaded BLAS measured 3-5x slower on a
    # busy 2-core machine (10,000 x 384: 2.5-4.5 ms against 11-14 ms).
    products = np.einsum("ij,j->i", matrix, target.astype(matrix.dtype))
    approx = np.where(allowed, squared_norms - 2.0 * products + target @ target, np.inf)
    kth = min(k, count) - 1
    edge = float(np.partition(approx, kth)[kth])
    bound = _rounding_bound(matrix, squared_norms, target)
    candidates = np.flatnonzero(approx <= edge + 2.0 * bound)
    distances = exact_distances(matrix[candidates], target)
    rows = candidates.tolist()
    order = sorted(range(len(rows)), key=lambda at: (distances[at], ids[rows[at]]))[:k]
    return candidates[order], distances[order]


def _rounding_bound(
    matrix: _FloatArray,
    squared_norms: np.ndarray[Any, np.dtype[np.float64]],
    target: np.ndarray[Any, np.dtype[np.float64]],
) -> float:
    """A bound on the error of one approximate squared distance.

    The dot product of n terms in type t errs by at most n * eps(t) * |m| |v| (plus the
    rounding of `target` to t), and |m| |v| <= (|m|^2 + |v|^2) / 2; float64 terms add
    far less than the slack of two more terms.
    """
    largest = float(squared_norms.max(initial=0.0))
    eps = float(np.finfo(matrix.dtype).eps)
    return (int(matrix.shape[1]) + 2) * eps * (largest + float(target @ target))
