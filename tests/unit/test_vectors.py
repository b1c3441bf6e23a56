"""VectorMatrix.nearest against brute force: exact float64 distances, ties by id, masks."""

from __future__ import annotations

import numpy as np
import pytest

from adk_memory.vectors import VectorMatrix, exact_distances


def brute_force(
    ids: list[str], vectors: np.ndarray, query: np.ndarray, allowed: np.ndarray, k: int
) -> list[tuple[float, str]]:
    """(distance, id) of the k nearest allowed rows: every row in float64, as stores rank."""
    distances = np.linalg.norm(vectors.astype(np.float64) - query, axis=1).tolist()
    return sorted((distances[row], ids[row]) for row in range(len(ids)) if allowed[row])[:k]


def found(
    matrix: VectorMatrix, query: np.ndarray, allowed: np.ndarray | None, k: int
) -> list[tuple[float, str]]:
    """(distance, id) of what `nearest` returns, in its order."""
    rows, distances = matrix.nearest(query, allowed, k)
    return [(float(d), matrix.ids[row]) for row, d in zip(rows, distances, strict=True)]


@pytest.mark.parametrize("seed", range(20))
def test_nearest_equals_brute_force_on_random_data(seed: int) -> None:
    rng = np.random.default_rng(seed)
    count, dims = int(rng.integers(1, 300)), int(rng.choice([3, 16, 384]))
    scale = rng.choice([0.01, 1.0, 100.0])
    vectors = (rng.normal(size=(count, dims)) * scale).astype(np.float32)
    ids = [f"m{i:04d}" for i in rng.permutation(count)]
    allowed = rng.random(count) < 0.8
    query = rng.normal(size=dims) * rng.choice([0.01, 1.0, 100.0])
    matrix = VectorMatrix.of(ids, vectors.tolist())
    assert matrix.matrix.dtype == np.float32
    for k in (1, 5, 50, count + 10):
        assert found(matrix, query, allowed, k) == brute_force(ids, vectors, query, allowed, k)


def test_float64_vectors_are_kept_bit_for_bit_and_ranked_exactly() -> None:
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(200, 64))  # not float32 values
    ids = [f"m{i:03d}" for i in range(200)]
    matrix = VectorMatrix.of(ids, vectors.tolist())
    assert matrix.matrix.dtype == np.float64 and np.array_equal(matrix.matrix, vectors)
    query = vectors[17] + 1e-9
    everyone = np.ones(200, dtype=bool)
    assert found(matrix, query, None, 10) == brute_force(ids, vectors, query, everyone, 10)


def test_near_ties_that_float32_products_could_swap_are_ranked_in_float64() -> None:
    base = np.full(384, 1 / np.sqrt(384), dtype=np.float32)
    step = np.zeros(384, dtype=np.float32)
    step[0] = np.float32(1e-6)
    vectors = np.stack([base + step * i for i in range(40)])  # distances a hair apart
    ids = [f"m{39 - i:02d}" for i in range(40)]
    query = base.astype(np.float64) + 2e-5
    matrix = VectorMatrix.of(ids, vectors.tolist())
    everyone = np.ones(40, dtype=bool)
    for k in (1, 3, 10):
        assert found(matrix, query, None, k) == brute_force(ids, vectors, query, everyone, k)


def test_equal_distances_break_by_id_not_by_row() -> None:
    vectors = [(1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0)]
    matrix = VectorMatrix.of(["d", "b", "c", "a"], vectors)
    assert [matrix.ids[row] for row in matrix.nearest((0.0, 0.0), None, 4)[0]] == list("abcd")
    assert [matrix.ids[row] for row in matrix.nearest((0.0, 0.0), None, 2)[0]] == ["a", "b"]


def test_rows_left_out_by_the_mask_are_never_returned() -> None:
    matrix = VectorMatrix.of(["near", "far"], [(0.0, 0.0), (5.0, 0.0)])
    rows, distances = matrix.nearest((0.0, 0.0), np.array([False, True]), 2)
    assert [matrix.ids[row] for row in rows] == ["far"] and distances.tolist() == [5.0]
    assert matrix.nearest((0.0, 0.0), np.array([False, False]), 2)[0].size == 0


def test_k_larger_than_the_rows_returns_them_all_and_k_zero_none() -> None:
    matrix = VectorMatrix.of(["a", "b"], [(0.0, 1.0), (0.0, 2.0)])
    assert matrix.nearest((0.0, 0.0), None, 10)[1].tolist() == [1.0, 2.0]
    assert matrix.nearest((0.0, 0.0), None, 0)[0].size == 0


def test_an_empty_matrix_finds_nothing() -> None:
    matrix = VectorMatrix.of([], [])
    assert matrix.dimensions == 0 and matrix.nearest((1.0, 2.0), None, 3)[0].size == 0


def test_vectors_of_different_lengths_are_refused() -> None:
    with pytest.raises(ValueError):
        VectorMatrix.of(["a", "b"], [(1.0, 0.0), (1.0,)])
    with pytest.raises(ValueError):
        VectorMatrix.of(["a"], [(1.0,), (2.0,)])


def test_exact_distances_are_those_of_a_store_that_ranks_rows_in_float64() -> None:
    rows = np.random.default_rng(3).normal(size=(50, 384)).astype(np.float32)
    query = np.random.default_rng(4).normal(size=384)
    whole = np.linalg.norm(rows.astype(np.float64) - query, axis=1)
    assert exact_distances(rows, query).tolist() == whole.tolist()
    one_by_one = [exact_distances(rows[[row]], query)[0] for row in range(50)]
    assert one_by_one == whole.tolist()
