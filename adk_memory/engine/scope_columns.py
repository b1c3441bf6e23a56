"""The filterable fields of one scope's memories as columns: a cached index evaluates any filter.

`filters.matches` is the reference; the columns give its answer for every document at once:

* the times (create, update, expire): int64 microseconds since the epoch (UTC), compared in
  numpy, exact as the datetimes' own comparison;
* the fact: each document's text, tested by `filters.field_holds` (RE2 for `=~`);
* the topics, the scope and each metadata key: each distinct value once, and a code per
  document (dictionary encoding): `filters.field_holds` is asked once per distinct value and
  the answers are spread over the documents by their codes. So a metadata filter costs one
  call per distinct value, whatever the operator or the type of the value.

AND, OR and NOT combine the documents' masks.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from adk_memory.engine.paging import micros
from adk_memory.filters import And, Condition, FilterExpr, Not, Op, Or, family_of
from adk_memory.filters import field_holds as holds
from adk_memory.store import MemoryRecord

__all__ = ["ScopeColumns"]

_Mask = np.ndarray[Any, np.dtype[np.bool_]]
_Times = np.ndarray[Any, np.dtype[np.int64]]
_TIME_COMPARISONS: dict[Op, Callable[[_Times, int], _Mask]] = {
    Op.EQ: np.equal,
    Op.NE: np.not_equal,
    Op.LT: np.less,
    Op.LE: np.less_equal,
    Op.GT: np.greater,
    Op.GE: np.greater_equal,
}
_BYTES_PER_ITEM = 120
"""A topic or a scope entry inside a distinct value: its object or two strings, and a slot."""


@dataclass(frozen=True, slots=True)
class _Coded:
    """One field dictionary-encoded: its distinct values, and each document's value's code."""

    values: tuple[Any, ...]
    codes: np.ndarray[Any, np.dtype[np.int32]]

    @classmethod
    def of(cls, values: Iterable[Any], key: Callable[[Any], Hashable]) -> _Coded:
        """`values` (one per document) encoded; two values share a code when their keys are equal.

        Equal keys must mean values that every condition treats alike.
        """
        code_of: dict[Hashable, int] = {}
        distinct: list[Any] = []
        codes: list[int] = []
        for value in values:
            code = code_of.setdefault(key(value), len(distinct))
            if code == len(distinct):
                distinct.append(value)
            codes.append(code)
        return cls(tuple(distinct), np.asarray(codes, dtype=np.int32))

    def where(self, test: Callable[[Any], bool]) -> _Mask:
        """A mask of the documents whose value passes `test` (called once per distinct value)."""
        answers = np.fromiter(map(test, self.values), dtype=bool, count=len(self.values))
        return answers[self.codes]  # type: ignore[no-any-return]

    @property
    def nbytes(self) -> int:
        """Its memory: the codes, and each distinct value (a container's items too)."""
        return sys.getsizeof(self.codes) + _tuple_bytes(self.values)


def _tuple_bytes(values: tuple[Any, ...]) -> int:
    """The memory of a tuple and its items (a tuple or mapping item: its items' too)."""
    items = sum(len(value) for value in values if isinstance(value, tuple | Mapping))
    return sys.getsizeof(values) + sum(map(sys.getsizeof, values)) + items * _BYTES_PER_ITEM


def _typed(value: Any) -> Hashable:
    """A metadata value's key: `True == 1 == 1.0` in Python, but a filter tells them apart."""
    return type(value), value


def _scope_items(scope: Mapping[str, str]) -> Hashable:
    return tuple(sorted(scope.items()))


def _same(value: Any) -> Hashable:
    return value  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True)
class ScopeColumns:
    """The fields a filter can name, of each document of a scope index (rows in its order)."""

    facts: tuple[str, ...]
    create_times: _Times
    update_times: _Times
    expire_times: _Times
    """0 where `expires` is False."""
    expires: _Mask
    topics: _Coded
    scopes: _Coded
    metadata: Mapping[str, _Coded]
    """Per key; a document without the key has the value None."""

    @classmethod
    def of(cls, records: Sequence[MemoryRecord]) -> ScopeColumns:
        """The columns of `records`, rows in their order."""
        count = len(records)

        def times(read: Callable[[MemoryRecord], datetime | None]) -> _Times:
            values = (read(record) for record in records)
            return np.fromiter(
                (0 if when is None else micros(when) for when in values), np.int64, count
            )

        keys = sorted({key for record in records for key in record.metadata})
        return cls(
            facts=tuple(record.fact for record in records),
            create_times=times(lambda record: record.create_time),
            update_times=times(lambda record: record.update_time),
            expire_times=times(lambda record: record.expire_time),
            expires=np.fromiter((r.expire_time is not None for r in records), bool, count),
            topics=_Coded.of((record.topics for record in records), _same),
            scopes=_Coded.of((record.scope for record in records), _scope_items),
            metadata={
                key: _Coded.of((record.metadata.get(key) for record in records), _typed)
                for key in keys
            },
        )

    @property
    def nbytes(self) -> int:
        """Their memory: the texts and their slots, the time arrays, the encoded fields."""
        arrays = self.create_times, self.update_times, self.expire_times, self.expires
        coded = [self.topics, self.scopes, *self.metadata.values()]
        keys = sys.getsizeof(self.metadata) + _tuple_bytes(tuple(self.metadata))
        return (
            _tuple_bytes(self.facts)
            + sum(map(sys.getsizeof, arrays))
            + sum(column.nbytes for column in coded)
            + keys
        )

    def expired(self, now: datetime) -> _Mask:
        """The documents expired at `now` (a memory is live while its expiry is after `now`)."""
        return self.expires & (self.expire_times <= micros(now))

    def matching(self, expr: FilterExpr) -> _Mask:
        """A mask of the documents that `filters.matches(expr)`."""
        if isinstance(expr, And | Or):
            combine = np.logical_and if isinstance(expr, And) else np.logical_or
            start = np.full(len(self.facts), isinstance(expr, And))
            return combine.reduce([start, *map(self.matching, expr.parts)])  # type: ignore[no-any-return]
        if isinstance(expr, Not):
            return ~self.matching(expr.part)
        return self._condition(expr)

    def _condition(self, cond: Condition) -> _Mask:
        family = family_of(cond)
        if family == "time":
            return self._time(cond)
        if family == "fact":
            return np.fromiter((holds(cond, fact) for fact in self.facts), bool, len(self.facts))
        if family == "topics":
            return self.topics.where(lambda topics: holds(cond, topics))
        key = cond.field.partition(".")[2]
        if family == "scope":
            return self.scopes.where(lambda scope: holds(cond, scope.get(key)))
        coded = self.metadata.get(key)
        if coded is None:  # no document has the key
            return np.full(len(self.facts), holds(cond, None))
        return coded.where(lambda value: holds(cond, value))

    def _time(self, cond: Condition) -> _Mask:
        compare = _TIME_COMPARISONS.get(cond.op)
        if compare is None or not isinstance(cond.value, datetime):
            return np.zeros(len(self.facts), dtype=bool)
        column = {
            "create_time": self.create_times,
            "update_time": self.update_times,
            "expire_time": self.expire_times,
        }[cond.field]
        mask = compare(column, micros(cond.value))
        # A memory that never expires matches no expire_time comparison.
        return mask & self.expires if cond.field == "expire_time" else mask
