"""Queries of a bank's index: `nearest` and `scan`.

`nearest` is a KNN search ranked exactly here, `scan` keyset pages of FT.AGGREGATE in a sort
order.

FLAT ranks exactly, so its window only needs room to see ties at the k-th place. HNSW may miss
true neighbours: it over-fetches (`overfetch`) and ranks the candidates exactly, and a small
scope is brute-forced (`HYBRID_POLICY ADHOC_BF`) rather than walked in the graph
(`hnsw_graph_from`, the scope's size cached for `scope_size_ttl`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from adk_memory.errors import InvalidArgument
from adk_memory.store import (
    MemoryRecord,
    NearestQuery,
    ScanCursor,
    ScanQuery,
    ScoredRecord,
    SortKey,
    check_cursor,
    cursor_key,
)
from adk_memory_redis._banks import Banks
from adk_memory_redis._codec import (
    MEMORY_FIELDS,
    check_scope_key,
    decode_memory,
    from_us,
    text,
    to_us,
)
from adk_memory_redis._config import RedisClient, RedisStoreConfig
from adk_memory_redis._connection import Connection, command
from adk_memory_redis._errors import check_warnings
from adk_memory_redis._layout import Bank
from adk_memory_redis._query import base_query, parse_aggregate, parse_search, search_args

_TIE_SLACK = 8
"""Extra candidates fetched beyond k so that ties at the k-th place can be seen."""
_SORT_FIELDS = {"create_time": "create_us", "update_time": "update_us"}
_SCAN_CHUNK = 1000
_SPELLABLE_ID = re.compile(r"[^\\\x00-\x1f\x7f]+")
"""Ids a quoted RediSearch expression string holds exactly (its escapes garble backslashes)."""

_Ranked = list[tuple[float, str, dict[str, Any]]]
"""(exact distance, memory id, fields) by distance then id."""


class Search:
    """The queries of one store, and the scope sizes HNSW searches consult."""

    def __init__(self, connection: Connection, config: RedisStoreConfig, banks: Banks) -> None:
        self._connection = connection
        self._config = config
        self._banks = banks
        self._scope_sizes: dict[tuple[str, str], tuple[int, float]] = {}

    def check_warnings(self, warnings: list[str]) -> None:
        """`StoreUnavailable` when a search timed out (`query_timeout_ms`)."""
        check_warnings(
            warnings, where=self._connection.where, timeout_ms=self._config.query_timeout_ms
        )

    async def nearest(self, bank_id: str, query: NearestQuery) -> list[ScoredRecord]:
        """Up to `query.k` live memories of one scope by true L2 distance, ties by memory id."""
        base = base_query(to_us(query.now), query.scope_key, query.filter)
        if base is None or query.k <= 0:
            async with self._connection.call("search memories") as client:
                await self._banks.get(client, bank_id)  # NotFound for a missing bank all the same
            return []
        vector = np.asarray(query.vector, dtype=np.float64)
        async with self._connection.call("search memories") as client:
            bank = await self._banks.get(client, bank_id)
            # FLAT ranks exactly: the window only needs room to see ties at the k-th place.
            # HNSW may miss true neighbours: over-fetch, then rank the candidates exactly.
            window = query.k + _TIE_SLACK
            graph = False
            if bank.algorithm == "HNSW":
                window = max(math.ceil(query.k * self._config.overfetch), query.k) + _TIE_SLACK
                graph = await self._use_graph(client, bank, check_scope_key(query.scope_key))
            while True:
                bank, ranked, exhausted = await self._knn(
                    client, bank_id, base, vector, window, graph
                )
                if exhausted or _boundary_is_clear(ranked, query.k):
                    break
                window *= 4  # ties reach past the window: widen it until they end
        # Only the k results are decoded into records; the window is ranked on raw vectors.
        return [
            ScoredRecord(
                decode_memory(
                    doc["doc"], doc["fact"], embedding=doc["embedding"], dtype=bank.dtype
                ),
                distance,
            )
            for distance, _memory_id, doc in ranked[: query.k]
        ]

    async def _use_graph(self, client: RedisClient, bank: Bank, scope_key: str) -> bool:
        """Whether an HNSW search of this scope should walk the graph (a large scope)."""
        cache_key = (bank.index_name, scope_key)
        cached = self._scope_sizes.get(cache_key)
        if cached is None or time.monotonic() - cached[1] > self._config.scope_size_ttl:
            reply = await command(
                client,
                "FT.SEARCH",
                bank.index_name,
                f"@scope_key:{{{scope_key}}}",
                "LIMIT",
                0,
                0,
                *search_args(self._config.query_timeout_ms),
            )
            cached = (parse_search(reply)[0], time.monotonic())
            if len(self._scope_sizes) > 10_000:
                self._scope_sizes.clear()
            self._scope_sizes[cache_key] = cached
        return cached[0] >= self._config.hnsw_graph_from

    async def _knn(
        self,
        client: RedisClient,
        bank_id: str,
        base: str,
        vector: np.ndarray[Any, Any],
        window: int,
        graph: bool,
    ) -> tuple[Bank, _Ranked, bool]:
        """The `window` nearest candidates, ranked exactly.

        Returns:
            The layout; (exact distance, memory id, fields) by distance then id; and True when
            the scope has no more candidates.
        """
        fields = [*MEMORY_FIELDS, "embedding"]

        def queue(pipe: Any, bank: Bank) -> None:
            knn = "KNN $K @embedding $BLOB"
            params: list[Any] = ["K", window, "BLOB", vector.astype(bank.dtype).tobytes()]
            if bank.algorithm == "HNSW" and graph:
                knn += " EF_RUNTIME $EF HYBRID_POLICY BATCHES"
                params += ["EF", max(self._config.hnsw_ef_runtime, window)]
            elif bank.algorithm == "HNSW":
                knn += " HYBRID_POLICY ADHOC_BF"
            pipe.execute_command(
                "FT.SEARCH",
                bank.index_name,
                f"{base}=>[{knn} AS __dist]",
                "PARAMS",
                len(params),
                *params,
                "SORTBY",
                "__dist",
                "ASC",
                "RETURN",
                len(fields),
                *fields,
                "LIMIT",
                0,
                window,
                *search_args(self._config.query_timeout_ms),
            )

        bank, replies = await self._banks.with_bank(client, bank_id, queue)
        _total, docs, warnings = parse_search(replies[0])
        self.check_warnings(warnings)
        if not docs:
            return bank, [], True
        stored = np.frombuffer(b"".join(doc["embedding"] for _key, doc in docs), dtype=bank.dtype)
        matrix = stored.reshape(len(docs), -1).astype(np.float64)
        distances = np.linalg.norm(matrix - vector, axis=1).tolist()
        prefix = len(bank.memory(""))
        ranked = sorted(
            (distance, key[prefix:], doc)
            for distance, (key, doc) in zip(distances, docs, strict=True)
        )  # (distance, memory id): SPEC §3, ties break by name
        return bank, ranked, len(docs) < window

    async def scan(self, bank_id: str, query: ScanQuery) -> list[MemoryRecord]:
        """Live memories matching the query in its order, after its cursor, up to its limit.

        Keyset chunks of FT.AGGREGATE: each resumes after the last row of the one before (the
        first sort key bounds the query text, a FILTER compares the rest and the id), so no
        LIMIT offset grows with depth and RediSearch's offset cap is never reached.
        """
        check_cursor(query)
        sort: list[str] = []
        for key in query.order_by:
            if key.field not in _SORT_FIELDS:
                raise InvalidArgument(
                    f"Cannot order memories by {key.field!r}; use create_time or update_time.",
                    field="order_by",
                )
            sort += [f"@{_SORT_FIELDS[key.field]}", "DESC" if key.descending else "ASC"]
        sort += ["@memory_id", "ASC"]  # SPEC §3: ties break by name
        found: list[MemoryRecord] = []
        after = query.after
        async with self._connection.call("list memories") as client:
            if base_query(0, query.scope_key, query.filter) is None:
                await self._banks.get(client, bank_id)
                return []
            while query.limit is None or len(found) < query.limit:
                wanted = _SCAN_CHUNK if query.limit is None else query.limit - len(found)
                chunk = min(wanted, _SCAN_CHUNK)
                rows, exhausted, bank = await self._scan_chunk(
                    client, bank_id, query, after, sort, chunk
                )
                for row in rows:
                    if "doc" not in row:  # a key that expired between sort and load
                        continue
                    record = decode_memory(
                        row["doc"], row["fact"], embedding=None, dtype=bank.dtype
                    )
                    if record.is_live(query.now):
                        found.append(record)
                if exhausted:
                    break
                after = _row_cursor(rows[-1], query)
        return found[: query.limit]

    async def _scan_chunk(
        self,
        client: RedisClient,
        bank_id: str,
        query: ScanQuery,
        after: ScanCursor | None,
        sort: list[str],
        chunk: int,
    ) -> tuple[list[dict[str, Any]], bool, Bank]:
        """Rows sorting after `after`, at least one unless none is left, and whether none is.

        The query text bounds the first sort key; a FILTER compares the rest and the id. An id
        RediSearch's expression strings cannot spell (a backslash or control character, which
        only an imported memory can have) is compared here instead: the FILTER then keeps
        the rows tied with the cursor, and the read widens until it gets past them.
        """
        base = base_query(to_us(query.now), query.scope_key, query.filter)
        assert base is not None
        keyset: list[Any] = []
        exact = True
        if after is not None:
            first, value = query.order_by[0], to_us(after.values[0])
            bound = f"[-inf {value}]" if first.descending else f"[{value} +inf]"
            base = f"({base} @{_SORT_FIELDS[first.field]}:{bound})"
            exact = _SPELLABLE_ID.fullmatch(after.memory_id) is not None
            keyset = ["FILTER", _after_expression(query.order_by, after, exact=exact)]
        load = [f"@{name}" for name in MEMORY_FIELDS]
        while True:

            def queue(pipe: Any, bank: Bank, size: int = chunk) -> None:
                pipe.execute_command(
                    "FT.AGGREGATE",
                    bank.index_name,
                    base,
                    *keyset,
                    "SORTBY",
                    len(sort),
                    *sort,
                    "LIMIT",
                    0,
                    size,
                    "LOAD",
                    len(load),
                    *load,
                    *search_args(self._config.query_timeout_ms),
                )

            bank, replies = await self._banks.with_bank(client, bank_id, queue)
            rows, warnings = parse_aggregate(replies[0])
            self.check_warnings(warnings)
            exhausted = len(rows) < chunk
            if not exact:
                assert after is not None
                start = cursor_key(after, query.order_by)
                rows = [
                    row
                    for row in rows
                    if cursor_key(_row_cursor(row, query), query.order_by) > start
                ]
            if rows or exhausted:
                return rows, exhausted, bank
            chunk *= 2


def _boundary_is_clear(ranked: _Ranked, k: int) -> bool:
    """Whether the k-th distance is safely below the last candidate's (no hidden ties)."""
    if len(ranked) <= k:
        return True
    return ranked[k - 1][0] < ranked[-1][0] - 1e-6


def _after_expression(order_by: Sequence[SortKey], after: ScanCursor, *, exact: bool) -> str:
    """A FILTER expression for rows sorting after the cursor.

    Strictly after it when `exact` (keys, then id); else after or tied with its sort values, and
    the caller compares the id.
    """
    expression = f"@memory_id > '{_quoted(after.memory_id)}'" if exact else "1"
    for key, value in reversed(list(zip(order_by, after.values, strict=True))):
        name, micros = f"@{_SORT_FIELDS[key.field]}", to_us(value)
        beyond = "<" if key.descending else ">"
        expression = f"({name} {beyond} {micros} || ({name} == {micros} && {expression}))"
    return expression


def _quoted(memory_id: str) -> str:
    return memory_id.replace("'", "\\'")


def _row_cursor(row: Mapping[str, Any], query: ScanQuery) -> ScanCursor:
    """The cursor just after an aggregate row (its sort values come from the index)."""
    values = tuple(from_us(int(text(row[_SORT_FIELDS[key.field]]))) for key in query.order_by)
    return ScanCursor(values, text(row["memory_id"]))
