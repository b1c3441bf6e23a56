"""Filter trees compiled to RediSearch query text, and search replies parsed in RESP2 or RESP3.

The query text this module writes contains only our own field names, operators, integers it
formatted itself and hex digests (see `_codec`). No user-supplied character ever reaches the
query parser, so there is nothing to escape and nothing an input can break; the query vector
travels as a bound parameter.

`PUSHDOWN` lists exactly what `compile_filter` evaluates with the semantics of
`adk_memory.filters.matches`; everything else (substring and regex on facts, ordering comparisons
on metadata) is left to the engine.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from adk_memory.filters import And, Condition, FilterExpr, Not, Op, Or
from adk_memory_redis._codec import (
    check_scope_key,
    fact_token,
    is_nan,
    metadata_key_token,
    metadata_value_token,
    scope_token,
    text,
    to_us,
    topic_token,
)

__all__ = [
    "FALSE",
    "PUSHDOWN",
    "Clause",
    "base_query",
    "compile_filter",
    "parse_aggregate",
    "parse_search",
    "search_args",
]

_EQ_NE = ("=", "!=")
PUSHDOWN: Final = frozenset(
    [("fact", op) for op in _EQ_NE]
    + [("time", op) for op in ("=", "!=", "<", "<=", ">", ">=")]
    + [("topics", op) for op in ("=", ":", "!=")]
    + [("scope", op) for op in _EQ_NE]
    + [
        (f"metadata_{kind}", op)
        for kind in ("string", "bool", "number", "timestamp")
        for op in _EQ_NE
    ]
)
"""(family, op) pairs compiled exactly into the query (see `StoreCapabilities.pushdown`)."""


class _False:
    """A clause that no memory satisfies (such as `metadata.n = NaN`)."""

    def __repr__(self) -> str:
        return "FALSE"


FALSE: Final = _False()
Clause = str | None | _False
"""Query text; None when every memory matches; `FALSE` when none does."""

_TIME_FIELDS = {"create_time": "create_us", "update_time": "update_us", "expire_time": "expire_us"}
_MANAGED = "topics.managed_memory_topic"
_CUSTOM = "topics.custom_memory_topic_label"


def _tag(field: str, token: str) -> str:
    return f"@{field}:{{{token}}}"


def _negate(clause: Clause) -> Clause:
    if clause is None:
        return FALSE
    if clause is FALSE:
        return None
    return f"-({clause})"


def _numeric(field: str, op: Op, value: int) -> Clause:
    ranges = {
        Op.EQ: f"[{value} {value}]",
        Op.LT: f"[-inf ({value}]",
        Op.LE: f"[-inf {value}]",
        Op.GT: f"[({value} +inf]",
        Op.GE: f"[{value} +inf]",
    }
    if op is Op.NE:  # a memory without the field (no expire_time) matches neither range
        return f"(@{field}:[-inf ({value}] | @{field}:[({value} +inf])"
    return f"@{field}:{ranges[op]}"


def _present_or_absent(op: Op, present: str) -> Clause:
    """`=`/`:` as the presence of a token, `!=` as its absence."""
    return present if op in (Op.EQ, Op.HAS) else f"-{present}"


def _condition(cond: Condition) -> Clause:
    name, op, value = cond.field, cond.op, cond.value
    if name == "fact":
        if not isinstance(value, str):
            return FALSE
        return _present_or_absent(op, _tag("fact_tag", fact_token(value)))
    if name in _TIME_FIELDS:
        if not isinstance(value, datetime):
            return FALSE
        return _numeric(_TIME_FIELDS[name], op, to_us(value))
    if name in (_MANAGED, _CUSTOM):
        if not isinstance(value, str):  # equal to no topic: present never, absent always
            return FALSE if op in (Op.EQ, Op.HAS) else None
        token = topic_token(managed=value) if name == _MANAGED else topic_token(custom=value)
        return _present_or_absent(op, _tag("topic_tags", token))
    if name.startswith("scope."):
        if not isinstance(value, str):
            return FALSE if op is Op.EQ else None
        return _present_or_absent(op, _tag("scope_tags", scope_token(name[6:], value)))
    if name.startswith("metadata."):
        key = name[len("metadata.") :]
        has_key = _tag("meta_tags", metadata_key_token(key, value))
        if is_nan(value):  # NaN equals nothing and differs from every number
            return FALSE if op is Op.EQ else has_key
        equal = _tag("meta_tags", metadata_value_token(key, value))
        # A missing key or another type never matches, so `!=` needs the key with that type.
        return equal if op is Op.EQ else f"({has_key} -{equal})"
    raise ValueError(f"no pushdown for field {name[:40]!r}")


def compile_filter(expr: FilterExpr | None) -> Clause:
    """Compiles a filter whose every condition is in `PUSHDOWN` into query text.

    Raises:
        ValueError: A condition outside `PUSHDOWN` (the engine should not have passed it).
    """
    if expr is None:
        return None
    if isinstance(expr, Condition):
        if op_family(expr) not in PUSHDOWN:
            raise ValueError(f"condition {expr.field[:40]!r} {expr.op.value} is not pushed down")
        return _condition(expr)
    if isinstance(expr, Not):
        return _negate(compile_filter(expr.part))
    if isinstance(expr, And):
        parts: list[str] = []
        for part in expr.parts:
            clause = compile_filter(part)
            if clause is FALSE:
                return FALSE
            if isinstance(clause, str):
                parts.append(clause)
        if not parts:
            return None
        return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"
    if isinstance(expr, Or):
        alternatives: list[str] = []
        for part in expr.parts:
            clause = compile_filter(part)
            if clause is None:
                return None
            if isinstance(clause, str):
                alternatives.append(clause)
        if not alternatives:
            return FALSE
        return alternatives[0] if len(alternatives) == 1 else "(" + " | ".join(alternatives) + ")"
    raise TypeError(f"not a filter expression: {type(expr).__name__}")


def base_query(now_us: int, scope_key: str | None, expr: FilterExpr | None) -> str | None:
    """The query text of live memories (of one scope) matching a pushed-down filter."""
    clauses = [f"@live_until:[({now_us} +inf]"]
    if scope_key is not None:
        clauses.insert(0, f"@scope_key:{{{check_scope_key(scope_key)}}}")
    compiled = compile_filter(expr)
    if compiled is FALSE:
        return None
    if isinstance(compiled, str):
        clauses.append(compiled)
    return "(" + " ".join(clauses) + ")"


def search_args(timeout_ms: int) -> list[Any]:
    """The trailing arguments of every FT.SEARCH and FT.AGGREGATE the store sends."""
    return ["DIALECT", 2, "TIMEOUT", timeout_ms]


def op_family(cond: Condition) -> tuple[str, str]:
    """The (family, op) pair of a condition, as `StoreCapabilities.pushdown` lists them."""
    from adk_memory.filters import family_of

    return family_of(cond), cond.op.value


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat) - 1, 2)}


def _warnings(reply: Mapping[Any, Any]) -> list[str]:
    found = reply.get(b"warning", reply.get("warning")) or []
    return [text(item) for item in found]


def parse_search(reply: Any) -> tuple[int, list[tuple[str, dict[str, Any]]], list[str]]:
    """(total, [(key, fields)], warnings) of an FT.SEARCH reply in RESP2 or RESP3."""
    if isinstance(reply, Mapping):
        total = int(reply.get(b"total_results", reply.get("total_results", 0)))
        docs: list[tuple[str, dict[str, Any]]] = []
        for item in reply.get(b"results", reply.get("results", [])):
            attrs = item.get(b"extra_attributes", item.get("extra_attributes")) or {}
            docs.append(
                (text(item.get(b"id", item.get("id"))), {text(k): v for k, v in attrs.items()})
            )
        return total, docs, _warnings(reply)
    total = int(reply[0])
    docs = []
    index = 1
    while index < len(reply):
        key = text(reply[index])
        fields: dict[str, Any] = {}
        if index + 1 < len(reply) and isinstance(reply[index + 1], list):
            fields = _pairs(reply[index + 1])
            index += 1
        docs.append((key, fields))
        index += 1
    return total, docs, []


def parse_aggregate(reply: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """([row], warnings) of an FT.AGGREGATE reply in RESP2 or RESP3."""
    if isinstance(reply, Mapping):
        rows = [
            {
                text(k): v
                for k, v in (
                    item.get(b"extra_attributes", item.get("extra_attributes")) or {}
                ).items()
            }
            for item in reply.get(b"results", reply.get("results", []))
        ]
        return rows, _warnings(reply)
    return [_pairs(row) for row in reply[1:]], []
