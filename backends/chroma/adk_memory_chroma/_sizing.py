"""Request sizing: how rows are cut into Chroma write requests.

A Chroma call carries at most the server's batch size of rows (`get_max_batch_size`), and a
Chroma server also refuses a request body past its payload limit. Rows are weighed generously
(`row_bytes`) and cut into consecutive slices that respect both (`requests`); the journal asks
`fits_one_request` to choose between a one-call commit and a multi-request journal. An embedded
Chroma has no byte limit, only its batch size. No I/O here: the limits come from `_chroma`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from adk_memory_chroma import _codec as codec

REQUEST_BYTES = 16 * 2**20
"""Upper bound of one write request to a Chroma server, which refuses larger bodies ("Payload too
large"; 40 MiB for chromadb 1.5's `chroma run`). Rows are counted generously (`row_bytes`). An
embedded Chroma has no such limit, only its batch size."""

Limits = tuple[int, int | None]
"""(rows, estimated bytes or None) one write request may carry."""


def requests(rows: Sequence[codec.Row], limits: Limits) -> Iterator[Sequence[codec.Row]]:
    """Consecutive slices of `rows`, each within `limits` (rows, estimated bytes or None)."""
    max_rows, max_bytes = limits
    if max_bytes is None:
        for start in range(0, len(rows), max_rows):
            yield rows[start : start + max_rows]
        return
    start, size = 0, 0
    for end, row in enumerate(rows):
        weight = row_bytes(row)
        if end > start and (end - start >= max_rows or size + weight > max_bytes):
            yield rows[start:end]
            start, size = end, 0
        size += weight
    if start < len(rows):
        yield rows[start:]


def fits_one_request(rows: Sequence[codec.Row], limits: Limits) -> bool:
    max_rows, max_bytes = limits
    return len(rows) <= max_rows and (max_bytes is None or sum(map(row_bytes, rows)) <= max_bytes)


def row_bytes(row: codec.Row) -> int:
    """A generous estimate of a row's size in a request (JSON quoting, base64 vectors)."""
    row_id, vector, document, meta = row
    size = 64 + len(row_id) + 8 * len(vector) + (3 * len(document) if document else 0)
    for key, value in meta.items():
        if isinstance(value, str):
            size += len(key) + 3 * len(value) + 8
        elif isinstance(value, list):
            size += len(key) + sum(3 * len(str(item)) + 4 for item in value)
        else:
            size += len(key) + 32
    return size
