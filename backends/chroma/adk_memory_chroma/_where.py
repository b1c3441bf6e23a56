"""Compiles filter trees into Chroma `where` clauses with exactly the meaning of `matches`.

Chroma's `where` has `$and`, `$or`, per-field comparisons and list `$contains`, but no `NOT`, no
"field exists" and no ordering of strings. So `Not` is pushed down to the leaves (De Morgan), and
each negated leaf becomes its complement *plus* the rows that lack the field, which the `mk` list
of every row names (see `_codec`). Two Chroma quirks shape the leaves: `$ne` also matches rows
without the field, and non-finite numbers are not indexed (they are marked by `mk` tokens).

Only the (family, op) pairs in `PUSHDOWN` are compiled; the engine evaluates everything else
itself. Compilation yields a `where` dict, or `True` (no constraint) or `False` (no row can match,
so the store need not ask Chroma at all). User text is only ever a value in the clause.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import datetime
from typing import Any, TypeAlias

from adk_memory.filters import And, Condition, FilterExpr, Not, Op, Or, family_of
from adk_memory_chroma import _codec as codec

__all__ = ["PUSHDOWN", "Compiled", "all_of", "any_of", "compile_filter"]

Where: TypeAlias = dict[str, Any]
Compiled: TypeAlias = Where | bool

_COMPARISONS = ("=", "!=", "<", "<=", ">", ">=")
PUSHDOWN: frozenset[tuple[str, str]] = frozenset(
    [("fact", op) for op in ("=", "!=", ":")]
    + [("time", op) for op in _COMPARISONS]
    + [("topics", op) for op in ("=", ":", "!=")]
    + [("scope", op) for op in ("=", "!=")]
    + [("metadata_string", op) for op in ("=", "!=")]
    + [("metadata_number", op) for op in _COMPARISONS]
    + [("metadata_bool", op) for op in _COMPARISONS]
    + [("metadata_timestamp", op) for op in _COMPARISONS]
)
"""What Chroma evaluates natively. Not here: `fact =~` (Chroma's regex dialect is not RE2) and
metadata string `:`, `=~`, `<`… (Chroma cannot compare or search inside metadata strings)."""

_CHROMA_OPS = {
    Op.EQ: "$eq",
    Op.NE: "$ne",
    Op.LT: "$lt",
    Op.LE: "$lte",
    Op.GT: "$gt",
    Op.GE: "$gte",
}
_COMPLEMENT = {
    Op.EQ: Op.NE,
    Op.NE: Op.EQ,
    Op.LT: Op.GE,
    Op.LE: Op.GT,
    Op.GT: Op.LE,
    Op.GE: Op.LT,
}
_TIME_FIELDS = {
    "create_time": (codec.CREATE_US, False),
    "update_time": (codec.UPDATE_US, False),
    "expire_time": (codec.EXPIRE_US, True),
}
_SPECIALS = (math.nan, math.inf, -math.inf)


def all_of(parts: Iterable[Compiled]) -> Compiled:
    """The conjunction, simplified (`True` parts vanish, a `False` part wins)."""
    clauses: list[Where] = []
    for part in parts:
        if part is False:
            return False
        if part is not True:
            clauses.extend(part["$and"] if set(part) == {"$and"} else [part])
    if not clauses:
        return True
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


def any_of(parts: Iterable[Compiled]) -> Compiled:
    """The disjunction, simplified (`False` parts vanish, a `True` part wins)."""
    clauses: list[Where] = []
    for part in parts:
        if part is True:
            return True
        if part is not False:
            clauses.extend(part["$or"] if set(part) == {"$or"} else [part])
    if not clauses:
        return False
    return clauses[0] if len(clauses) == 1 else {"$or": clauses}


def compile_filter(expr: FilterExpr | None) -> Compiled:
    """The `where` clause of a filter tree (`True` for None).

    Raises:
        ValueError: The tree holds a condition outside `PUSHDOWN` (the engine should have kept it).
    """
    return True if expr is None else _compile(expr, negate=False)


def _compile(expr: FilterExpr, *, negate: bool) -> Compiled:
    if isinstance(expr, Not):
        return _compile(expr.part, negate=not negate)
    if isinstance(expr, And):
        parts = [_compile(part, negate=negate) for part in expr.parts]
        return any_of(parts) if negate else all_of(parts)
    if isinstance(expr, Or):
        parts = [_compile(part, negate=negate) for part in expr.parts]
        return all_of(parts) if negate else any_of(parts)
    return _condition(expr, negate=negate)


def _condition(cond: Condition, *, negate: bool) -> Compiled:
    family = family_of(cond)
    if (family, cond.op.value) not in PUSHDOWN:
        raise ValueError(f"the Chroma store cannot evaluate {family} {cond.op.value!r} natively")
    op, value = cond.op, cond.value
    if family == "fact":
        if not isinstance(value, str):
            return negate
        if op is Op.HAS:
            return {"#document": {"$not_contains" if negate else "$contains": value}}
        return _compare(codec.FACT_HASH, op, codec.digest(value), optional=False, negate=negate)
    if family == "time":
        if not isinstance(value, datetime):
            return negate  # `matches`: a time field compared with a non-time is false
        field, optional = _TIME_FIELDS[cond.field]
        return _compare(field, op, codec.micros(value), optional=optional, negate=negate)
    if family == "topics":
        if not isinstance(value, str):
            return negate if op is not Op.NE else not negate
        managed = cond.field == "topics.managed_memory_topic"
        token = codec.topic_token(managed=value) if managed else codec.topic_token(custom=value)
        has = op is not Op.NE
        return {codec.TOPICS: {"$contains" if has != negate else "$not_contains": token}}
    if family == "scope":
        # `matches`: a missing scope key matches only `!=`, which is what Chroma's `$ne` does.
        field = codec.scope_field(cond.field.removeprefix("scope."))
        if not isinstance(value, str):
            return (op is Op.NE) != negate
        want_equal = (op is Op.EQ) != negate
        return {field: {"$eq" if want_equal else "$ne": value}}
    key = cond.field.removeprefix("metadata.")
    if family == "metadata_bool":
        if op not in (Op.EQ, Op.NE):
            return negate  # SPEC §3: booleans compare only by equality
        return _compare(codec.metadata_field("bool", key), op, value, optional=True, negate=negate)
    if family == "metadata_timestamp":
        assert isinstance(value, datetime)
        seconds = codec.micros(value) // 1_000_000  # SPEC §3: timestamps by whole seconds
        field = codec.metadata_field("timestamp", key)
        return _compare(field, op, seconds, optional=True, negate=negate)
    if family == "metadata_number":
        assert isinstance(value, int | float) and not isinstance(value, bool)
        return _number(codec.metadata_field("number", key), op, float(value), negate=negate)
    assert isinstance(value, str)
    return _compare(codec.metadata_field("string", key), op, value, optional=True, negate=negate)


def _compare(field: str, op: Op, value: Any, *, optional: bool, negate: bool) -> Compiled:
    """`field op value` on rows that have the field; negated, also every row that lacks it."""
    if negate:
        op = _COMPLEMENT[op]
    clause: Where = {field: {_CHROMA_OPS[op]: value}}
    if not optional:
        return clause
    if op is Op.NE:
        # Chroma's `$ne` matches rows without the field: exactly right for a negated `=`, while a
        # plain `!=` must also require the field.
        return clause if negate else all_of([clause, _present(field)])
    return any_of([clause, _absent(field)]) if negate else clause


def _number(field: str, op: Op, value: float, *, negate: bool) -> Compiled:
    """A number comparison with Python's semantics, including NaN and the infinities.

    Chroma stores only finite numbers, so each row holds either an indexed finite value, or an
    `mk` token for NaN, +inf or -inf, or nothing. The result is the union of the classes for which
    the comparison (or, negated, its negation) holds.
    """

    def holds(actual: float) -> bool:
        result = {
            Op.EQ: actual == value,
            Op.NE: actual != value,
            Op.LT: actual < value,
            Op.LE: actual <= value,
            Op.GT: actual > value,
            Op.GE: actual >= value,
        }[op]
        return result != negate

    parts: list[Compiled] = [_absent(field)] if negate else []
    if math.isfinite(value):
        finite_op = _COMPLEMENT[op] if negate else op
        if finite_op is Op.NE:  # a finite value other than `value`; `$ne` alone matches absence
            parts.append(any_of([{field: {"$lt": value}}, {field: {"$gt": value}}]))
        else:
            parts.append({field: {_CHROMA_OPS[finite_op]: value}})
    elif holds(0.0):  # against NaN or an infinity, every finite value compares the same way
        parts.append(any_of([{field: {"$lt": 0.0}}, {field: {"$gte": 0.0}}]))
    for special in _SPECIALS:
        if holds(special):
            parts.append({codec.PRESENT: {"$contains": codec.special_token(field, special)}})
    return any_of(parts)


def _present(field: str) -> Where:
    return {codec.PRESENT: {"$contains": field}}


def _absent(field: str) -> Where:
    return {codec.PRESENT: {"$not_contains": field}}
