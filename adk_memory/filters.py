r"""AIP-160 filters for retrieve, list and purge.

Parses a `filter` string into a `FilterExpr` tree, and `filter_groups` (Memory Bank's metadata
filters in disjunctive normal form) into the same tree. The engine evaluates the tree in Python
with `matches`; each store may compile the part it declared in `StoreCapabilities.pushdown` to its
own query language (`partition` splits a tree into that part and the rest). Parsing never touches
storage. A string that does not parse raises `InvalidArgument` giving the column of the first bad
token.

Grammar (after https://google.aip.dev/160; keywords are case-sensitive, upper case)::

    filter      = [ expression ] EOF
    expression  = factor { "AND" factor }
    factor      = term { "OR" term }
    term        = [ "NOT" | "-" ] term | simple
    simple      = restriction | "(" expression ")"
    restriction = field comparator value
    comparator  = "=" | "!=" | ":" | "=~" | "<" | "<=" | ">" | ">="
    value       = '"' chars '"' | "'" chars "'" | bare
    bare        = 1*( letter | digit | "-" | "_" | "." | ":" | "+" )

Precedence is AIP-160's, not the usual one of programming languages: NOT binds tightest, then OR,
then AND. So `a AND b OR c` means `a AND (b OR c)`, and `NOT a OR b` means `(NOT a) OR b`. Use
parentheses whenever in doubt. Conditions are not joined implicitly: two conditions need AND or OR
between them.

Inside quotes, `\"`, `\'` and `\\` stand for the quote or backslash; any other backslash is kept
as written, so a regular expression such as `"\d+"` reaches the regex engine unchanged.

Fields (snake_case or camelCase) and their comparators:

* `fact`: `=` exact, `!=`, `:` substring (case-sensitive), `=~` unanchored regular-expression
  search with RE2 (linear time: no catastrophic backtracking).
* `create_time`, `update_time`, `expire_time`: `=`, `!=`, `<`, `<=`, `>`, `>=` against an RFC 3339
  time or an integer of microseconds since the epoch. A memory that never expires matches no
  comparison on `expire_time` (and so matches its `NOT`).
* `topics.managed_memory_topic`: `=` or `:` (the memory has the topic), `!=` (it does not); the
  value is a `ManagedTopicEnum` name, case-insensitive. `topics.custom_memory_topic_label`: the
  same, with an exact, case-sensitive label.
* `scope.KEY` (list and purge only): `=` and `!=`; a memory without the key matches only `!=`.
* `metadata.KEY`: `=` with a string. Other metadata comparisons come from `filter_groups`, where a
  missing key or a value of another type never matches (so a negated filter does).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeAlias

import re2  # google-re2 ships no type information (see [tool.mypy] overrides)

from adk_memory.bounds import TIME_RANGE, bounded_time
from adk_memory.errors import InvalidArgument
from adk_memory.types import MANAGED_TOPIC_NAMES
from adk_memory.wording import option

if TYPE_CHECKING:
    from adk_memory.store import MemoryRecord

__all__ = [
    "And",
    "Condition",
    "FilterExpr",
    "MAX_FILTER_LENGTH",
    "MAX_REGEX_LENGTH",
    "Not",
    "Op",
    "Or",
    "combine",
    "family_of",
    "field_holds",
    "from_filter_groups",
    "is_blank",
    "matches",
    "parse_filter",
    "partition",
    "quote_string",
    "request_filter",
]

MAX_FILTER_LENGTH = 4096
"""Longest `filter` string accepted, in characters (a documented limit, not a Memory Bank rule)."""
MAX_REGEX_LENGTH = 1000
"""Longest `=~` pattern accepted, in characters; RE2 also bounds the compiled program's memory."""

_MAX_DEPTH = 64
"""Deepest nesting of parentheses and NOT accepted, so hostile input cannot exhaust the stack."""
_CLIP = 40
"""Most characters of user text quoted in an error message."""


class Op(str, Enum):
    """A comparator; the value is its AIP-160 spelling."""

    EQ = "="
    NE = "!="
    HAS = ":"
    REGEX = "=~"
    LT = "<"
    LE = "<="
    GT = ">"
    GE = ">="


@dataclass(frozen=True, slots=True)
class Condition:
    """One comparison of a memory field with a constant."""

    field: str
    """Canonical snake_case: `fact`, `create_time`, `update_time`, `expire_time`,
    `topics.managed_memory_topic`, `topics.custom_memory_topic_label`, `scope.<key>` or
    `metadata.<key>`."""
    op: Op
    value: str | float | bool | datetime
    """Times are timezone-aware UTC datetimes; managed topics are upper-case enum names; for `=~`
    the RE2 pattern."""


@dataclass(frozen=True, slots=True)
class And:
    """True when every part is true (an empty `And` is true)."""

    parts: tuple[FilterExpr, ...]


@dataclass(frozen=True, slots=True)
class Or:
    """True when any part is true (an empty `Or` is false)."""

    parts: tuple[FilterExpr, ...]


@dataclass(frozen=True, slots=True)
class Not:
    """True when its part is false."""

    part: FilterExpr


FilterExpr: TypeAlias = Condition | And | Or | Not
"""A filter tree: what `parse_filter` and `from_filter_groups` build and `matches` evaluates."""

_TIME_FIELDS = frozenset({"create_time", "update_time", "expire_time"})
_MANAGED = "topics.managed_memory_topic"
_CUSTOM = "topics.custom_memory_topic_label"
_FIELD_NAMES: dict[str, str] = {
    "fact": "fact",
    "create_time": "create_time",
    "createTime": "create_time",
    "update_time": "update_time",
    "updateTime": "update_time",
    "expire_time": "expire_time",
    "expireTime": "expire_time",
    _MANAGED: _MANAGED,
    "topics.managedMemoryTopic": _MANAGED,
    _CUSTOM: _CUSTOM,
    "topics.customMemoryTopicLabel": _CUSTOM,
}
_FACT_OPS = (Op.EQ, Op.NE, Op.HAS, Op.REGEX)
_TIME_OPS = (Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE)
_TOPIC_OPS = (Op.EQ, Op.HAS, Op.NE)
_SCOPE_OPS = (Op.EQ, Op.NE)
_METADATA_OPS = (Op.EQ,)
_KEYWORDS = ("AND", "OR", "NOT")
# Longest first, so that `<=` is not read as `<` followed by a value starting with `=`.
_COMPARATORS = ("=~", "!=", "<=", ">=", "==", "=", "<", ">", ":")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_RFC3339 = re.compile(
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})[Tt ]([0-9]{2}):([0-9]{2}):([0-9]{2})(?:\.([0-9]+))?"
    r"(?:([Zz])|([+-])([0-9]{2}):([0-9]{2}))"
)
_MICROS = re.compile(r"-?[0-9]{1,20}")

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # RE2 would print the pattern, which may quote a fact, to stderr


def parse_filter(
    text: str, *, allow_scope: bool = False, field: str = "filter"
) -> FilterExpr | None:
    """Parses an AIP-160 filter string (see the module docstring for the grammar and fields).

    Args:
        text: The filter as the caller wrote it.
        allow_scope: Accept `scope.KEY` conditions (list and purge; retrieval matches the scope
            exactly and refuses them).
        field: The request field named in errors.

    Returns:
        The tree, or None when `text` is empty or only whitespace.

    Raises:
        InvalidArgument: The filter does not parse, names an unknown field, uses a comparator the
            field does not support, or has a bad time, managed topic or regular expression, or is
            longer than `MAX_FILTER_LENGTH`. The message gives the 1-based column of the first bad
            token.
    """
    if is_blank(text):
        return None
    parser = _Parser(text, allow_scope=allow_scope, field=field)
    if len(text) > MAX_FILTER_LENGTH:
        raise parser.error(
            MAX_FILTER_LENGTH,
            f"the filter is {len(text)} characters long, over the limit of {MAX_FILTER_LENGTH}",
            "Shorten it.",
        )
    return parser.parse()


def is_blank(text: str | None) -> bool:
    """Whether a filter string states no condition: None, empty or whitespace only.

    Such a string is no filter anywhere (list, retrieve, purge): a filter is one only if it
    has a condition, so `" "` never passes a rule that needs a filter.
    """
    return not text or text.isspace()


def request_filter(
    text: str | None, groups: Sequence[Any] | None, *, allow_scope: bool = False
) -> FilterExpr | None:
    """The condition a request's `filter` and `filter_groups` state together (AND), or None.

    None when neither states a condition (a blank string, no groups or an empty list), which is
    what purge's "needs a filter" rule and a scope-bound key's confinement test.
    """
    return combine(parse_filter(text or "", allow_scope=allow_scope), from_filter_groups(groups))


def quote_string(value: str) -> str:
    """`value` as a filter string literal (the CLI's and scope-bound keys' scope conditions)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def from_filter_groups(
    groups: Sequence[Any] | None, *, field: str = "filter_groups"
) -> FilterExpr | None:
    """Converts Memory Bank `filter_groups` (metadata filters in disjunctive normal form).

    Each group is a `MemoryConjunctionFilter` or a dict in snake_case or camelCase holding
    `filters`, a list of `MemoryFilter`s or dicts: `{"key", "value": {"string_value" |
    "double_value" | "bool_value" | "timestamp_value": ...}, "op", "negate"}`. `op` is `EQUAL`
    (also when unset or `OPERATOR_UNSPECIFIED`), `GREATER_THAN` or `LESS_THAN`.

    Args:
        groups: The groups, OR-ed; the filters of a group are AND-ed.
        field: The request field named in errors.

    Returns:
        An `Or` of `And`s of `Condition(field="metadata.<key>")` (wrapped in `Not` when
        `negate`); a group of one filter is its condition and one group is that group. None when
        `groups` is None or empty.

    Raises:
        InvalidArgument: A group has no filters, a filter has no key, not exactly one kind of
            value, a value of the wrong type, an unknown operator or an unknown attribute.
    """
    if groups is None:
        return None
    if isinstance(groups, str | bytes | Mapping) or not isinstance(groups, Sequence):
        raise InvalidArgument(
            f'{field} must be a list of groups such as {{"filters": [{{"key": "author", '
            f'"value": {{"string_value": "agent 123"}}}}]}}.',
            field=field,
        )
    alternatives: list[FilterExpr] = []
    for i, group in enumerate(groups):
        where = f"{field}[{i}]"
        filters = _attributes(group, ("filters",), where=where, field=field)["filters"]
        if isinstance(filters, str | bytes | Mapping) or not isinstance(filters, Sequence):
            if filters is not None:
                raise InvalidArgument(f"{where}.filters must be a list of filters.", field=field)
            filters = ()
        if not filters:
            raise InvalidArgument(
                f"{where}.filters is empty; each group needs at least one filter "
                "(groups are OR-ed, the filters of a group AND-ed). Remove the group or add a "
                "filter.",
                field=field,
            )
        conjuncts = [
            _metadata_condition(item, where=f"{where}.filters[{j}]", field=field)
            for j, item in enumerate(filters)
        ]
        alternatives.append(conjuncts[0] if len(conjuncts) == 1 else And(tuple(conjuncts)))
    if not alternatives:
        return None
    return alternatives[0] if len(alternatives) == 1 else Or(tuple(alternatives))


def combine(*exprs: FilterExpr | None) -> FilterExpr | None:
    """Returns the AND of the filters that are not None (None when there are none).

    Top-level `And`s are flattened into the result, so `combine(*partition(e, p))` is a flat `And`
    equivalent to `e`.
    """
    parts: list[FilterExpr] = []
    for expr in exprs:
        if isinstance(expr, And):
            parts.extend(expr.parts)
        elif expr is not None:
            parts.append(expr)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else And(tuple(parts))


def matches(expr: FilterExpr | None, record: MemoryRecord) -> bool:
    """Whether the record satisfies the filter; None matches every record.

    Comparisons on a value the record lacks (no `expire_time`, a missing metadata key, a metadata
    value of another type) are false, so their `NOT` is true. A missing scope key matches only
    `!=`. Metadata timestamps compare by whole seconds; metadata booleans support only `=` and `!=`.
    """
    if expr is None:
        return True
    return _evaluate(expr, record)


def family_of(cond: Condition) -> str:
    """The pushdown family of a condition, as stores declare it in `StoreCapabilities.pushdown`.

    Returns:
        `fact`, `time`, `topics`, `scope`, or for metadata, by the type of the value:
        `metadata_bool`, `metadata_number`, `metadata_timestamp` or `metadata_string`.

    Raises:
        ValueError: The condition names no known field (never for a parsed one).
    """
    name = cond.field
    if name == "fact":
        return "fact"
    if name in _TIME_FIELDS:
        return "time"
    if name in (_MANAGED, _CUSTOM):
        return "topics"
    if name.startswith("scope."):
        return "scope"
    if name.startswith("metadata."):
        value = cond.value
        if isinstance(value, bool):  # bool is an int subclass: check it first
            return "metadata_bool"
        if isinstance(value, datetime):
            return "metadata_timestamp"
        if isinstance(value, int | float):
            return "metadata_number"
        return "metadata_string"
    raise ValueError(f"no filter family for field {_clip(name)}")


def partition(
    expr: FilterExpr | None, pushdown: frozenset[tuple[str, str]]
) -> tuple[FilterExpr | None, FilterExpr | None]:
    """Splits a filter into the part a store evaluates natively and the part the engine does.

    A top-level AND conjunct goes to `pushed` when every `Condition` in it has
    `(family_of(c), c.op.value)` in `pushdown`, so an `Or` or `Not` is pushed whole or not at all.

    Args:
        expr: The whole filter.
        pushdown: The store's `StoreCapabilities.pushdown`.

    Returns:
        `(pushed, residual)`, each None when empty; `combine(pushed, residual)` is equivalent to
        `expr`.
    """
    if expr is None:
        return None, None
    pushed: list[FilterExpr] = []
    residual: list[FilterExpr] = []
    for part in _conjuncts(expr):
        supported = all((family_of(cond), cond.op.value) in pushdown for cond in _leaves(part))
        (pushed if supported else residual).append(part)
    return combine(*pushed), combine(*residual)


# Parsing


class _Parser:
    """A recursive-descent parser that reads the text directly, so tokens depend on context.

    A field name stops at `:` (`topics.managed_memory_topic:USER_PREFERENCES`), while a bare
    value may contain it (`2025-01-01T00:00:00Z`).
    """

    def __init__(self, text: str, *, allow_scope: bool, field: str) -> None:
        self.text = text
        self.pos = 0
        self.allow_scope = allow_scope
        self.field = field

    def error(self, pos: int, what: str, fix: str = "") -> InvalidArgument:
        message = f"{self.field} is invalid at column {pos + 1}: {what}."
        return InvalidArgument(f"{message} {fix}" if fix else message, field=self.field)

    def parse(self) -> FilterExpr:
        expr = self.expression(0)
        self.skip_space()
        if self.pos < len(self.text):
            if self.text[self.pos] == ")":
                raise self.error(self.pos, "this ')' closes no '('", "Remove it or add a '('.")
            raise self.unexpected("expected AND, OR or the end of the filter")
        return expr

    def unexpected(self, what: str) -> InvalidArgument:
        found = self.token_at(self.pos)
        fix = "Join conditions with AND or OR, and quote values that contain spaces."
        if found.upper() in _KEYWORDS and found != found.upper():
            fix = f"Keywords are case-sensitive: write {found.upper()}."
        return self.error(self.pos, f"{what}, found {_clip(found)}", fix)

    def too_deep(self, pos: int) -> InvalidArgument:
        return self.error(
            pos,
            f"NOT and parentheses are nested more than {_MAX_DEPTH} deep",
            "Simplify the filter.",
        )

    def expression(self, depth: int) -> FilterExpr:
        parts = [self.factor(depth)]
        while self.keyword("AND"):
            parts.append(self.factor(depth))
        return _joined(And, parts)

    def factor(self, depth: int) -> FilterExpr:
        parts = [self.term(depth)]
        while self.keyword("OR"):
            parts.append(self.term(depth))
        return _joined(Or, parts)

    def term(self, depth: int) -> FilterExpr:
        self.skip_space()
        start = self.pos
        if start >= len(self.text):
            raise self.error(
                start,
                "expected a condition, found the end of the filter",
                'Complete it, as in fact:"coffee", or remove the trailing keyword.',
            )
        word, end = self.word_at(start)
        if word == "NOT" or self.text[start] == "-":
            if depth >= _MAX_DEPTH:
                raise self.too_deep(start)
            self.pos = end if word == "NOT" else start + 1
            return Not(self.term(depth + 1))
        return self.simple(depth)

    def simple(self, depth: int) -> FilterExpr:
        start = self.pos
        if self.text[start] != "(":
            return self.restriction()
        if depth >= _MAX_DEPTH:
            raise self.too_deep(start)
        self.pos += 1
        self.skip_space()
        if self.pos < len(self.text) and self.text[self.pos] == ")":
            raise self.error(start, "the parentheses are empty", "Put a condition inside them.")
        expr = self.expression(depth + 1)
        self.skip_space()
        if self.pos >= len(self.text):
            raise self.error(
                start, "this '(' is never closed", "Add a ')' where the group should end."
            )
        if self.text[self.pos] != ")":
            raise self.unexpected(f"expected AND, OR or ')' to close the '(' at column {start + 1}")
        self.pos += 1
        return expr

    def restriction(self) -> Condition:
        start = self.pos
        name, end = self.word_at(start)
        if not name or name in ("AND", "OR"):
            raise self.error(
                start,
                f"expected a field name, found {_clip(self.token_at(start))}",
                "Start each condition with a field, as in fact, create_time or "
                "topics.managed_memory_topic.",
            )
        canonical = self.resolve_field(name, start)
        self.pos = end
        self.skip_space()
        op_pos = self.pos
        op = self.comparator()
        self.skip_space()
        value_pos = self.pos
        raw = self.value()
        return self.condition(canonical, op, raw, op_pos=op_pos, value_pos=value_pos)

    def resolve_field(self, name: str, start: int) -> str:
        if name in _FIELD_NAMES:
            return _FIELD_NAMES[name]
        prefix, _, key = name.partition(".")
        if prefix in ("scope", "metadata") and key:
            if prefix == "scope" and not self.allow_scope:
                raise self.error(
                    start,
                    "scope filters are for list and purge only",
                    "Retrieval already returns only the request's scope; remove the condition.",
                )
            return name
        if prefix in ("scope", "metadata"):
            raise self.error(start, f"{prefix} needs a key", f"Name one, as in {prefix}.user_id.")
        if name.upper() in _KEYWORDS:
            raise self.error(
                start,
                f"expected a field name, found {_clip(name)}",
                f"Keywords are case-sensitive: write {name.upper()}.",
            )
        known = ["fact", "create_time", "update_time", "expire_time", _MANAGED, _CUSTOM]
        known += ["scope.KEY"] if self.allow_scope else []
        raise self.error(
            start,
            f"unknown field {_clip(name)}",
            f"Filterable fields are {', '.join(known)} and metadata.KEY (camelCase also works).",
        )

    def comparator(self) -> Op:
        for symbol in _COMPARATORS:
            if self.text.startswith(symbol, self.pos):
                if symbol == "==":
                    raise self.error(self.pos, "'==' is not a comparator", "Use '='.")
                self.pos += len(symbol)
                return Op(symbol)
        found = self.token_at(self.pos) if self.pos < len(self.text) else "the end of the filter"
        raise self.error(
            self.pos,
            f"expected a comparator after the field name, found {_clip(found)}",
            "Use one of =, !=, :, =~, <, <=, >, >=.",
        )

    def value(self) -> str:
        start = self.pos
        if start >= len(self.text):
            raise self.error(
                start,
                "expected a value, found the end of the filter",
                'Add one, as in fact:"coffee".',
            )
        if self.text[start] in "\"'":
            return self.quoted()
        while self.pos < len(self.text) and _is_bare(self.text[self.pos]):
            self.pos += 1
        raw = self.text[start : self.pos]
        if not raw:
            raise self.error(
                start,
                f"expected a value, found {_clip(self.text[start])}",
                'Quote values that contain spaces or symbols, as in fact=~".*coffee.*".',
            )
        if raw in _KEYWORDS:
            raise self.error(
                start,
                f"expected a value, found the keyword {raw}",
                f'Write "{raw}" to mean the word.',
            )
        return raw

    def quoted(self) -> str:
        start = self.pos
        quote = self.text[start]
        out: list[str] = []
        pos = start + 1
        while pos < len(self.text):
            char = self.text[pos]
            if char == quote:
                self.pos = pos + 1
                return "".join(out)
            if char == "\\" and pos + 1 < len(self.text):
                following = self.text[pos + 1]
                # Unknown escapes stay as written so that regular expressions such as \d survive.
                out.append(following if following in "\"'\\" else char + following)
                pos += 2
                continue
            out.append(char)
            pos += 1
        raise self.error(
            start,
            "this quoted value is never closed",
            f"End it with {quote} and write a {quote} inside it as \\{quote}.",
        )

    def condition(self, name: str, op: Op, raw: str, *, op_pos: int, value_pos: int) -> Condition:
        allowed = _allowed_ops(name)
        if op not in allowed:
            label = name.split(".")[0] if name.startswith(("scope.", "metadata.")) else name
            fix = f"Use {', '.join(o.value for o in allowed)}"
            if label == "metadata":
                fix += f", or {option('filter_groups')} for other metadata comparisons"
            what = f"{label} does not support the comparator '{op.value}'"
            raise self.error(op_pos, what, fix + ".")
        if name in _TIME_FIELDS:
            when = _parse_time(raw, micros=True)
            if when is None:
                raise self.error(
                    value_pos,
                    f"{_clip(raw)} is not a time",
                    'Write an RFC 3339 time such as "2025-01-01T00:00:00Z" or an integer of '
                    f"microseconds since the epoch, within {TIME_RANGE}.",
                )
            return Condition(name, op, when)
        if name == _MANAGED:
            topic = raw.upper()
            if topic not in MANAGED_TOPIC_NAMES:
                raise self.error(
                    value_pos,
                    f"unknown managed topic {_clip(raw)}",
                    f"Use one of {', '.join(MANAGED_TOPIC_NAMES)}.",
                )
            return Condition(name, op, topic)
        if op is Op.REGEX:
            self.check_regex(raw, value_pos)
        return Condition(name, op, raw)

    def check_regex(self, pattern: str, value_pos: int) -> None:
        if len(pattern) > MAX_REGEX_LENGTH:
            raise self.error(
                value_pos,
                f"the regular expression is {len(pattern)} characters long, over the limit of "
                f"{MAX_REGEX_LENGTH}",
                "Shorten it.",
            )
        try:
            _compiled(pattern)
        except re2.error as exc:
            # RE2's message ends with the offending part of the pattern: keep only the reason.
            detail = exc.args[0] if exc.args else b""
            text = detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
            reason = text.split(":")[0].strip() or "it does not compile"
            raise self.error(
                value_pos,
                f"the regular expression is not valid RE2 syntax ({_clip(reason)})",
                "RE2 has no backreferences or lookaround; "
                "see https://github.com/google/re2/wiki/Syntax.",
            ) from None
        except UnicodeError:
            raise self.error(
                value_pos,
                "the regular expression contains an unpaired surrogate",
                "Use valid Unicode text.",
            ) from None

    def keyword(self, keyword: str) -> bool:
        self.skip_space()
        word, end = self.word_at(self.pos)
        if word != keyword:
            return False
        self.pos = end
        return True

    def skip_space(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def word_at(self, pos: int) -> tuple[str, int]:
        """The field-name-like word at `pos` (letters, digits, `_`, `.`, then also `-`)."""
        end = pos
        while end < len(self.text):
            char = self.text[end]
            if not (char.isalnum() or char in "_." or (char == "-" and end > pos)):
                break
            end += 1
        return self.text[pos:end], end

    def token_at(self, pos: int) -> str:
        """What stands at `pos`, for an error message: a bare word or else one character."""
        end = pos
        while end < len(self.text) and _is_bare(self.text[end]):
            end += 1
        return self.text[pos : max(end, pos + 1)]


def _is_bare(char: str) -> bool:
    return char.isalnum() or char in "-_.:+"


def _joined(kind: type[And] | type[Or], parts: list[FilterExpr]) -> FilterExpr:
    """One part as itself; several as `kind`, absorbing nested nodes of the same kind."""
    if len(parts) == 1:
        return parts[0]
    flat: list[FilterExpr] = []
    for part in parts:
        if isinstance(part, kind):
            flat.extend(part.parts)
        else:
            flat.append(part)
    return kind(tuple(flat))


def _allowed_ops(name: str) -> tuple[Op, ...]:
    if name == "fact":
        return _FACT_OPS
    if name in _TIME_FIELDS:
        return _TIME_OPS
    if name in (_MANAGED, _CUSTOM):
        return _TOPIC_OPS
    if name.startswith("scope."):
        return _SCOPE_OPS
    return _METADATA_OPS


def _parse_time(raw: str, *, micros: bool) -> datetime | None:
    """An aware UTC datetime from RFC 3339 (or, with `micros`, epoch microseconds), else None."""
    try:
        if micros and _MICROS.fullmatch(raw):
            return _EPOCH + timedelta(microseconds=int(raw))
        found = _RFC3339.fullmatch(raw)
        if found is None:
            return None
        year, month, day, hour, minute, second, fraction, zulu, sign, tz_h, tz_m = found.groups()
        offset = timedelta(0)
        if not zulu:
            offset = timedelta(hours=int(tz_h), minutes=int(tz_m))
            offset = -offset if sign == "-" else offset
        local = datetime(
            int(year),
            int(month),
            int(day),
            int(hour),
            int(minute),
            int(second),
            int((fraction or "")[:6].ljust(6, "0")),
            tzinfo=timezone(offset),
        )
        return local.astimezone(UTC)
    except (ValueError, OverflowError):
        return None


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str) -> Any:
    """The compiled RE2 pattern; RE2 runs in linear time and bounds the program's memory."""
    return re2.compile(pattern, options=_RE2_OPTIONS)


def _clip(text: str) -> str:
    """User text for a message: quoted, at most `_CLIP` characters."""
    return repr(text if len(text) <= _CLIP else text[: _CLIP - 1] + "…")


# filter_groups

_VALUE_KINDS = ("string_value", "double_value", "bool_value", "timestamp_value")
_FILTER_OPS = {
    "OPERATOR_UNSPECIFIED": Op.EQ,
    "EQUAL": Op.EQ,
    "GREATER_THAN": Op.GT,
    "LESS_THAN": Op.LT,
}


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def _attributes(obj: Any, names: Sequence[str], *, where: str, field: str) -> dict[str, Any]:
    """Reads `names` from a dict in either casing or from an SDK object; unknown keys fail."""
    if isinstance(obj, Mapping):
        by_spelling = {spelling: name for name in names for spelling in (name, _camel(name))}
        found: dict[str, Any] = dict.fromkeys(names)
        for key, value in obj.items():
            name = by_spelling.get(key) if isinstance(key, str) else None
            if name is None:
                raise InvalidArgument(
                    f"{where} has an unknown attribute {_clip(str(key))}; "
                    f"the attributes are {', '.join(names)}.",
                    field=field,
                )
            if value is not None and found[name] is not None:
                raise InvalidArgument(
                    f"{where}.{name} is given twice (in snake_case and camelCase); keep one.",
                    field=field,
                )
            if value is not None:
                found[name] = value
        return found
    if all(hasattr(obj, name) for name in names):
        return {name: getattr(obj, name) for name in names}
    raise InvalidArgument(
        f"{where} must be an object or dict with the attributes {', '.join(names)}.", field=field
    )


def _metadata_condition(item: Any, *, where: str, field: str) -> FilterExpr:
    attrs = _attributes(item, ("key", "value", "op", "negate"), where=where, field=field)
    key, raw_op, negate = attrs["key"], attrs["op"], attrs["negate"]
    if not isinstance(key, str) or not key:
        raise InvalidArgument(
            f'{where}.key must be a non-empty metadata key, such as "author".', field=field
        )
    op_name = getattr(raw_op, "value", raw_op)
    op = Op.EQ if op_name is None else _FILTER_OPS.get(str(op_name).upper())
    if op is None:
        raise InvalidArgument(
            f"{where}.op {_clip(str(op_name))} is not an operator; use EQUAL, GREATER_THAN or "
            "LESS_THAN.",
            field=field,
        )
    if negate is not None and not isinstance(negate, bool):
        raise InvalidArgument(f"{where}.negate must be true or false.", field=field)
    if attrs["value"] is None:
        raise InvalidArgument(
            f"{where}.value is missing; set exactly one of {', '.join(_VALUE_KINDS)}.",
            field=field,
        )
    values = _attributes(attrs["value"], _VALUE_KINDS, where=f"{where}.value", field=field)
    given = [(kind, value) for kind, value in values.items() if value is not None]
    if len(given) != 1:
        raise InvalidArgument(
            f"{where}.value sets {len(given)} kinds of value; set exactly one of "
            f"{', '.join(_VALUE_KINDS)}.",
            field=field,
        )
    kind, value = given[0]
    condition = Condition(
        f"metadata.{key}", op, _metadata_value(kind, value, where=where, field=field)
    )
    return Not(condition) if negate else condition


def _metadata_value(
    kind: str, value: Any, *, where: str, field: str
) -> str | float | bool | datetime:
    if kind == "string_value" and isinstance(value, str):
        return value
    if kind == "double_value" and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if kind == "bool_value" and isinstance(value, bool):
        return value
    if kind == "timestamp_value":
        if isinstance(value, datetime):
            return bounded_time(value, field=field)
        if isinstance(value, str) and (when := _parse_time(value, micros=False)) is not None:
            return when
        raise InvalidArgument(
            f"{where}.value.timestamp_value must be an RFC 3339 time such as "
            f'"2025-01-01T00:00:00Z", within {TIME_RANGE}.',
            field=field,
        )
    expected = {"string_value": "a string", "double_value": "a number", "bool_value": "a bool"}
    raise InvalidArgument(f"{where}.value.{kind} must be {expected[kind]}.", field=field)


# Evaluation


def _evaluate(expr: FilterExpr, record: MemoryRecord) -> bool:
    if isinstance(expr, Condition):
        return _condition_holds(expr, record)
    if isinstance(expr, And):
        return all(_evaluate(part, record) for part in expr.parts)
    if isinstance(expr, Or):
        return any(_evaluate(part, record) for part in expr.parts)
    if isinstance(expr, Not):
        return not _evaluate(expr.part, record)
    raise TypeError(f"not a filter expression: {type(expr).__name__}")


def _condition_holds(cond: Condition, record: MemoryRecord) -> bool:
    return field_holds(cond, _field_value(cond.field, record))


def _field_value(name: str, record: MemoryRecord) -> object:
    """The value of the record's field `name` (a `Condition.field`) as `field_holds` takes it."""
    if name == "fact":
        return record.fact
    if name in _TIME_FIELDS:
        return getattr(record, name)
    if name in (_MANAGED, _CUSTOM):
        return record.topics
    if name.startswith("scope."):
        return record.scope.get(name[len("scope.") :])
    if name.startswith("metadata."):
        return record.metadata.get(name[len("metadata.") :])
    raise ValueError(f"cannot evaluate a condition on field {_clip(name)}")


def field_holds(cond: Condition, actual: Any) -> bool:
    """Whether `cond` holds for a memory whose field `cond.field` is `actual`.

    `actual` is the fact, a time (None for no expiry), the tuple of topics, or the scope's or
    metadata's value of the key (None when the memory lacks the key). What `matches` evaluates
    for each condition; a cached scope index calls it once per distinct value of a field.
    """
    name, op, value = cond.field, cond.op, cond.value
    if name == "fact":
        return _text_holds(op, actual, value)
    if name in _TIME_FIELDS:
        if actual is None or not isinstance(value, datetime):
            return False  # a memory that never expires matches no expire_time comparison
        return _compare(op, _as_utc(actual), _as_utc(value))
    if name in (_MANAGED, _CUSTOM):
        managed = name == _MANAGED
        present = any((t.managed if managed else t.custom) == value for t in actual)
        if op in (Op.EQ, Op.HAS):
            return present
        return op is Op.NE and not present
    if name.startswith("scope."):
        if op is Op.EQ:
            return actual is not None and actual == value
        return op is Op.NE and actual != value  # a missing key differs from every value
    if name.startswith("metadata."):
        return _metadata_holds(op, actual, value)
    raise ValueError(f"cannot evaluate a condition on field {_clip(name)}")


def _metadata_holds(op: Op, actual: object, expected: object) -> bool:
    # SPEC §Retrieve: a missing key or a type mismatch never matches; booleans only by equality;
    # timestamps by whole seconds.
    if actual is None:
        return False
    if isinstance(expected, bool):
        if not isinstance(actual, bool):
            return False
        return op in (Op.EQ, Op.NE) and _compare(op, actual, expected)
    if isinstance(expected, int | float):
        if isinstance(actual, bool) or not isinstance(actual, int | float):
            return False
        return _compare(op, float(actual), float(expected))
    if isinstance(expected, datetime):
        if not isinstance(actual, datetime):
            return False
        return _compare(op, _whole_seconds(actual), _whole_seconds(expected))
    if isinstance(expected, str):
        return isinstance(actual, str) and _text_holds(op, actual, expected)
    return False


def _text_holds(op: Op, actual: str, expected: object) -> bool:
    if not isinstance(expected, str):
        return False
    if op is Op.HAS:
        return expected in actual
    if op is Op.REGEX:
        try:
            return _compiled(expected).search(actual) is not None
        except UnicodeEncodeError:  # a lone surrogate: RE2 takes only valid UTF-8
            return _compiled(expected).search(_valid_utf8(actual)) is not None
    return _compare(op, actual, expected)


def _compare(op: Op, actual: Any, expected: Any) -> bool:
    if op is Op.EQ:
        return bool(actual == expected)
    if op is Op.NE:
        return bool(actual != expected)
    if op is Op.LT:
        return bool(actual < expected)
    if op is Op.LE:
        return bool(actual <= expected)
    if op is Op.GT:
        return bool(actual > expected)
    if op is Op.GE:
        return bool(actual >= expected)
    return False


def _as_utc(when: datetime) -> datetime:
    """`when` in UTC; a naive time is taken as UTC (as every comparison of a filter does)."""
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _whole_seconds(when: datetime) -> datetime:
    return _as_utc(when).replace(microsecond=0)


def _valid_utf8(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _conjuncts(expr: FilterExpr) -> Iterator[FilterExpr]:
    if isinstance(expr, And):
        for part in expr.parts:
            yield from _conjuncts(part)
    else:
        yield expr


def _leaves(expr: FilterExpr) -> Iterator[Condition]:
    stack = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, Condition):
            yield node
        elif isinstance(node, Not):
            stack.append(node.part)
        else:
            stack.extend(node.parts)
