from __future__ import annotations

import random
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from agentplatform import types
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_memory.errors import InvalidArgument
from adk_memory.filters import (
    MAX_FILTER_LENGTH,
    MAX_REGEX_LENGTH,
    And,
    Condition,
    FilterExpr,
    Not,
    Op,
    Or,
    combine,
    family_of,
    from_filter_groups,
    matches,
    parse_filter,
    partition,
)
from adk_memory.scope import ScopeKey
from adk_memory.store import MemoryRecord, MetadataValue, TopicRef

T0 = datetime(2025, 1, 1, tzinfo=UTC)
MANAGED = "topics.managed_memory_topic"
CUSTOM = "topics.custom_memory_topic_label"
FAMILIES = (
    "fact",
    "time",
    "topics",
    "scope",
    "metadata_string",
    "metadata_number",
    "metadata_bool",
    "metadata_timestamp",
)
ALL_PUSHDOWN = frozenset((family, op.value) for family in FAMILIES for op in Op)


def record(
    fact: str = "I like coffee",
    *,
    create_time: datetime = T0,
    update_time: datetime = T0,
    expire_time: datetime | None = None,
    topics: tuple[TopicRef, ...] = (),
    scope: Mapping[str, str] | None = None,
    metadata: Mapping[str, MetadataValue] | None = None,
) -> MemoryRecord:
    return MemoryRecord(
        memory_id="m1",
        scope_key=ScopeKey("0" * 64),
        scope=dict(scope) if scope is not None else {"user_id": "u1"},
        fact=fact,
        embedding=(),
        create_time=create_time,
        update_time=update_time,
        expire_time=expire_time,
        topics=topics,
        metadata=dict(metadata or {}),
    )


def cond(field: str, op: Op, value: Any) -> Condition:
    return Condition(field, op, value)


def fact_eq(value: str) -> Condition:
    return Condition("fact", Op.EQ, value)


def leaves(expr: FilterExpr) -> Iterator[Condition]:
    if isinstance(expr, Condition):
        yield expr
    elif isinstance(expr, Not):
        yield from leaves(expr.part)
    else:
        for part in expr.parts:
            yield from leaves(part)


def conjuncts(expr: FilterExpr | None) -> list[FilterExpr]:
    if expr is None:
        return []
    return list(expr.parts) if isinstance(expr, And) else [expr]


def invalid(text: str, **kwargs: Any) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as caught:
        parse_filter(text, **kwargs)
    return caught.value


# Parsing: results


@pytest.mark.parametrize("text", ["", " ", "\n\t  "])
def test_empty_or_blank_filter_parses_to_none(text: str) -> None:
    assert parse_filter(text) is None


def test_seed_filters_parse_as_written() -> None:
    expected = And(
        (
            Condition("fact", Op.REGEX, ".*allergies.*"),
            Condition("update_time", Op.GE, datetime(2026, 1, 1, tzinfo=UTC)),
        )
    )
    assert parse_filter('fact=~".*allergies.*" AND update_time>="2026-01-01T00:00:00Z"') == expected
    # The Korean seed's copy ends with a stray quote; as Python it is the same string.
    korean = 'fact=~".*allergies.*" AND update_time>="2026-01-01T00:00:00Z"'
    assert parse_filter(korean) == expected
    topics = (
        "topics.managed_memory_topic: USER_PREFERENCES "
        + "OR topics.custom_memory_topic_label: custom-label"
    )
    assert parse_filter(topics) == Or(
        (
            Condition(MANAGED, Op.HAS, "USER_PREFERENCES"),
            Condition(CUSTOM, Op.HAS, "custom-label"),
        )
    )


def test_brief_example_filters_parse() -> None:
    assert parse_filter('fact=~".*my-key.*"') == Condition("fact", Op.REGEX, ".*my-key.*")
    assert parse_filter('create_time>="2025-01-01T00:00:00Z"') == Condition(
        "create_time", Op.GE, T0
    )
    assert parse_filter('update_time>="2025-06-01T00:00:00Z" AND fact=~"coffee"') == And(
        (
            Condition("update_time", Op.GE, datetime(2025, 6, 1, tzinfo=UTC)),
            Condition("fact", Op.REGEX, "coffee"),
        )
    )


@pytest.mark.parametrize("text", ['fact="x"', 'fact = "x"', '  fact=  "x"  ', 'fact =\t"x"'])
def test_whitespace_around_comparator_is_optional(text: str) -> None:
    assert parse_filter(text) == fact_eq("x")


@pytest.mark.parametrize(
    ("text", "op"),
    [
        ('fact = "x"', Op.EQ),
        ('fact != "x"', Op.NE),
        ('fact : "x"', Op.HAS),
        ('fact =~ "x"', Op.REGEX),
    ],
)
def test_fact_comparators_parse(text: str, op: Op) -> None:
    assert parse_filter(text) == Condition("fact", op, "x")


@pytest.mark.parametrize("op", [Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE])
@pytest.mark.parametrize("name", ["create_time", "update_time", "expire_time"])
def test_time_comparators_parse(name: str, op: Op) -> None:
    assert parse_filter(f'{name} {op.value} "2025-01-01T00:00:00Z"') == Condition(name, op, T0)


def test_and_of_ors_follows_aip160_precedence_or_binds_tighter() -> None:
    a, b, c = fact_eq("a"), fact_eq("b"), fact_eq("c")
    assert parse_filter('fact="a" AND fact="b" OR fact="c"') == And((a, Or((b, c))))
    assert parse_filter('fact="a" OR fact="b" AND fact="c"') == And((Or((a, b)), c))


def test_not_binds_tighter_than_or() -> None:
    assert parse_filter('NOT fact="a" OR fact="b"') == Or((Not(fact_eq("a")), fact_eq("b")))


def test_parentheses_override_precedence() -> None:
    a, b, c = fact_eq("a"), fact_eq("b"), fact_eq("c")
    assert parse_filter('(fact="a" AND fact="b") OR fact="c"') == Or((And((a, b)), c))
    assert parse_filter('NOT (fact="a" OR fact="b")') == Not(Or((a, b)))


def test_minus_prefix_negates() -> None:
    assert parse_filter('-fact:"x"') == Not(Condition("fact", Op.HAS, "x"))
    assert parse_filter('-(fact="a" OR fact="b")') == Not(Or((fact_eq("a"), fact_eq("b"))))
    assert parse_filter('NOT -fact="a"') == Not(Not(fact_eq("a")))


def test_chains_of_one_keyword_are_flattened() -> None:
    a, b, c = fact_eq("a"), fact_eq("b"), fact_eq("c")
    assert parse_filter('fact="a" AND fact="b" AND fact="c"') == And((a, b, c))
    assert parse_filter('(fact="a" AND fact="b") AND fact="c"') == And((a, b, c))
    assert parse_filter('fact="a" OR (fact="b" OR fact="c")') == Or((a, b, c))


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("createTime", "create_time"),
        ("updateTime", "update_time"),
        ("expireTime", "expire_time"),
        ("create_time", "create_time"),
    ],
)
def test_camel_case_time_fields_normalise_to_snake_case(name: str, canonical: str) -> None:
    assert parse_filter(f'{name} > "2025-01-01T00:00:00Z"') == Condition(canonical, Op.GT, T0)


def test_camel_case_topic_fields_normalise_to_snake_case() -> None:
    assert parse_filter("topics.managedMemoryTopic: USER_PREFERENCES") == Condition(
        MANAGED, Op.HAS, "USER_PREFERENCES"
    )
    assert parse_filter("topics.customMemoryTopicLabel = travel") == Condition(
        CUSTOM, Op.EQ, "travel"
    )


def test_field_name_can_touch_has_operator() -> None:
    assert parse_filter("topics.managed_memory_topic:USER_PREFERENCES") == Condition(
        MANAGED, Op.HAS, "USER_PREFERENCES"
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (r'fact = "say \"hi\""', 'say "hi"'),
        (r'fact = "back\\slash"', "back\\slash"),
        (r"fact = 'it\'s'", "it's"),
        ("fact = 'say \"hi\"'", 'say "hi"'),
        ('fact = "a AND b OR (c)"', "a AND b OR (c)"),
        ('fact = ""', ""),
        ('fact = "커피를 좋아해"', "커피를 좋아해"),
        ("fact = bare-word_1.2:3+4", "bare-word_1.2:3+4"),
    ],
)
def test_values_quoted_or_bare(text: str, value: str) -> None:
    assert parse_filter(text) == fact_eq(value)


def test_unknown_escapes_reach_the_regex_unchanged() -> None:
    assert parse_filter(r'fact =~ "\d+\.\w"') == Condition("fact", Op.REGEX, r"\d+\.\w")
    assert matches(parse_filter(r'fact =~ "\d+\.\d"'), record("version 3.1"))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ('"2025-01-01T00:00:00Z"', T0),
        ("2025-01-01T00:00:00Z", T0),
        ('"2025-01-01t00:00:00z"', T0),
        ('"2025-01-01 00:00:00Z"', T0),
        ("2025-01-01T02:00:00+02:00", T0),
        ('"2024-12-31T18:30:00-05:30"', T0),
        ('"2025-01-01T00:00:00.5Z"', T0 + timedelta(microseconds=500_000)),
        ('"2025-01-01T00:00:00.123456789Z"', T0 + timedelta(microseconds=123_456)),
        ("1735689600000000", T0),
        ('"1735689600000001"', T0 + timedelta(microseconds=1)),
        ("0", datetime(1970, 1, 1, tzinfo=UTC)),
        ("-1", datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)),
    ],
)
def test_time_values_rfc3339_or_epoch_micros_become_aware_utc(
    value: str, expected: datetime
) -> None:
    parsed = parse_filter(f"create_time = {value}")
    assert parsed == Condition("create_time", Op.EQ, expected)
    assert isinstance(parsed, Condition) and isinstance(parsed.value, datetime)
    assert parsed.value.utcoffset() == timedelta(0)


@pytest.mark.parametrize("value", ["user_preferences", "User_Preferences", '"USER_PREFERENCES"'])
def test_managed_topic_is_case_insensitive_and_stored_upper_case(value: str) -> None:
    assert parse_filter(f"topics.managed_memory_topic = {value}") == Condition(
        MANAGED, Op.EQ, "USER_PREFERENCES"
    )


@pytest.mark.parametrize("op", [Op.EQ, Op.HAS, Op.NE])
def test_topic_comparators_parse(op: Op) -> None:
    parsed = parse_filter(f"topics.custom_memory_topic_label {op.value} Travel-Plans")
    assert parsed == Condition(CUSTOM, op, "Travel-Plans")


def test_scope_conditions_parse_when_allowed() -> None:
    assert parse_filter('scope.user_id = "123"', allow_scope=True) == Condition(
        "scope.user_id", Op.EQ, "123"
    )
    assert parse_filter("scope.app-name != x", allow_scope=True) == Condition(
        "scope.app-name", Op.NE, "x"
    )


def test_metadata_string_equality_parses() -> None:
    assert parse_filter('metadata.author = "agent 123"') == Condition(
        "metadata.author", Op.EQ, "agent 123"
    )
    assert parse_filter("metadata.count = 5") == Condition("metadata.count", Op.EQ, "5")


def test_parsed_trees_are_hashable_and_immutable() -> None:
    parsed = parse_filter('fact="a" AND NOT fact="b"')
    assert hash(parsed) == hash(parse_filter('fact="a" AND NOT fact="b"'))
    with pytest.raises(AttributeError):
        parsed.parts = ()  # type: ignore[misc,union-attr]


# Parsing: errors


@pytest.mark.parametrize(
    ("text", "column", "fragment"),
    [
        ('colour = "x"', 1, "unknown field 'colour'"),
        ('fact="a" AND topics = "x"', 14, "unknown field 'topics'"),
        ('Fact = "x"', 1, "unknown field"),
        ('fact < "x"', 6, "fact does not support the comparator '<'"),
        ('fact >= "x"', 6, "does not support"),
        ('create_time : "2025-01-01T00:00:00Z"', 13, "create_time does not support"),
        ("create_time =~ 5", 13, "does not support"),
        ("topics.managed_memory_topic < USER_PREFERENCES", 29, "does not support"),
        ("topics.custom_memory_topic_label =~ x", 34, "does not support"),
        ('metadata.k > "x"', 12, "filter_groups"),
        ('create_time > "yesterday"', 15, "'yesterday' is not a time"),
        ('create_time > "2025-01-01"', 15, "is not a time"),
        ('create_time > "2025-01-01T00:00:00"', 15, "is not a time"),
        ('update_time = "2025-13-01T00:00:00Z"', 15, "is not a time"),
        ('update_time = "2025-01-01T00:00:60Z"', 15, "is not a time"),
        ('update_time = "2025-01-01T00:00:00+24:00"', 15, "is not a time"),
        ("expire_time = 99999999999999999999", 15, "is not a time"),
        ("expire_time = 1.5", 15, "is not a time"),
        ("topics.managed_memory_topic: FAVOURITE_FOOD", 30, "unknown managed topic"),
        ("topics.managed_memory_topic: MANAGED_TOPIC_ENUM_UNSPECIFIED", 30, "unknown managed"),
        ('fact=~"(a"', 7, "regular expression"),
        (r'fact=~"(a)\1"', 7, "regular expression"),
        ('fact=~"(?<=a)b"', 7, "regular expression"),
        ('fact = "abc', 8, "never closed"),
        ("fact = 'abc", 8, "never closed"),
        ('fact = "abc\\"', 8, "never closed"),
        ('(fact="a" AND fact="b"', 1, "'(' is never closed"),
        ('fact="a")', 9, "')' closes no '('"),
        ('(fact="a" fact="b")', 11, "expected AND, OR or ')'"),
        ("()", 1, "parentheses are empty"),
        ('fact="a" AND', 13, "found the end of the filter"),
        ('fact="a" OR ', 13, "found the end of the filter"),
        ("NOT", 4, "found the end of the filter"),
        ('AND fact="a"', 1, "expected a field name"),
        ('fact="a" AND AND fact="b"', 14, "expected a field name"),
        ('fact="a" AND OR fact="b"', 14, "expected a field name"),
        ("fact", 5, "expected a comparator"),
        ('fact "x"', 6, "expected a comparator"),
        ('fact == "x"', 6, "'==' is not a comparator"),
        ("fact !~ x", 6, "expected a comparator"),
        ("fact =", 7, "expected a value, found the end"),
        ("fact = )", 8, "expected a value"),
        ('fact = "a" fact = "b"', 12, "expected AND, OR or the end"),
        ("fact = hello world", 14, "expected AND, OR or the end"),
        ('fact = "a" & fact = "b"', 12, "expected AND, OR or the end"),
        ('fact = "a" and fact = "b"', 12, "write AND"),
        ('fact = "a" or fact = "b"', 12, "write OR"),
        ('not fact = "a"', 1, "write NOT"),
        ("fact = AND", 8, "keyword AND"),
        ('* = "x"', 1, "expected a field name"),
        ('scope. = "x"', 1, "scope needs a key"),
        ('metadata. = "x"', 1, "metadata needs a key"),
    ],
)
def test_invalid_filters_name_the_column_of_the_first_bad_token(
    text: str, column: int, fragment: str
) -> None:
    error = invalid(text, allow_scope=True)
    assert f"at column {column}:" in error.message
    assert fragment in error.message
    assert error.field == "filter"
    assert error.status == "INVALID_ARGUMENT"


def test_scope_filters_are_refused_unless_allowed() -> None:
    error = invalid('fact="a" AND scope.user_id = "123"')
    assert "at column 14:" in error.message
    assert "list and purge" in error.message
    assert "123" not in error.message


def test_error_names_the_given_request_field() -> None:
    error = invalid("colour = x", field="config.filter")
    assert error.field == "config.filter"
    assert error.message.startswith("config.filter is invalid at column 1")


def test_error_messages_say_how_to_fix() -> None:
    assert "Filterable fields are fact" in invalid('colour = "x"').message
    assert "Use =, !=, :, =~." in invalid('fact < "x"').message
    assert "RFC 3339" in invalid('create_time > "soon"').message
    assert "USER_PERSONAL_INFO" in invalid("topics.managed_memory_topic: X").message


def test_filter_longer_than_limit_is_refused() -> None:
    at_limit = 'fact = "' + "a" * (MAX_FILTER_LENGTH - 9) + '"'
    assert len(at_limit) == MAX_FILTER_LENGTH
    assert parse_filter(at_limit) == fact_eq("a" * (MAX_FILTER_LENGTH - 9))
    error = invalid(at_limit + " ")
    assert f"at column {MAX_FILTER_LENGTH + 1}:" in error.message
    assert str(MAX_FILTER_LENGTH) in error.message


def test_regex_longer_than_limit_is_refused() -> None:
    assert parse_filter('fact =~ "' + "a" * MAX_REGEX_LENGTH + '"') is not None
    error = invalid('fact =~ "' + "a" * (MAX_REGEX_LENGTH + 1) + '"')
    assert "at column 9:" in error.message
    assert str(MAX_REGEX_LENGTH) in error.message


def test_regex_whose_program_is_too_large_is_refused() -> None:
    error = invalid(r'fact =~ "\pL{1000}"')
    assert "at column 9:" in error.message
    assert "regular expression" in error.message


def test_error_messages_quote_at_most_40_characters_of_user_text() -> None:
    error = invalid("x" * 300 + ' = "y"')
    assert "x" * 41 not in error.message
    assert "x" * 30 in error.message
    error = invalid("create_time > " + "9" * 30 + "z" * 300)
    assert "z" * 41 not in error.message


def test_regex_errors_do_not_echo_the_pattern() -> None:
    error = invalid('fact =~ "(secret-pattern"')
    assert "secret-pattern" not in error.message
    assert "missing )" in error.message


@pytest.mark.parametrize("depth", [1, 32, 64])
def test_nesting_up_to_the_limit_parses(depth: int) -> None:
    assert parse_filter("(" * depth + 'fact="a"' + ")" * depth) == fact_eq("a")
    assert parse_filter("NOT " * depth + 'fact="a"') is not None


@pytest.mark.parametrize(
    "text",
    [
        "(" * 65 + 'fact="a"' + ")" * 65,
        "NOT " * 65 + 'fact="a"',
        "-" * 65 + 'fact="a"',
        "(" * 4000,
        "NOT (" * 800,
    ],
)
def test_deep_nesting_is_refused_without_recursion_error(text: str) -> None:
    error = invalid(text)
    assert "nested more than 64 deep" in error.message
    assert "at column" in error.message


@settings(max_examples=300, database=None, deadline=None)
@given(st.text(max_size=80))
def test_arbitrary_text_parses_or_raises_invalid_argument(text: str) -> None:
    try:
        parse_filter(text, allow_scope=True)
    except InvalidArgument as error:
        assert "at column" in error.message


TOKENS = [
    "fact",
    "createTime",
    "expire_time",
    "scope.u",
    "metadata.k",
    MANAGED,
    CUSTOM,
    "=",
    "!=",
    ":",
    "=~",
    "<",
    ">=",
    '"x"',
    "'y'",
    '"(a"',
    "USER_PREFERENCES",
    "2025-01-01T00:00:00Z",
    "123",
    "AND",
    "OR",
    "NOT",
    "-",
    "(",
    ")",
    " ",
    "\\",
    '"',
]


@settings(max_examples=500, database=None, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=25))
def test_token_soup_parses_or_raises_invalid_argument(tokens: list[str]) -> None:
    text = " ".join(tokens)
    try:
        parsed = parse_filter(text, allow_scope=True)
    except InvalidArgument as error:
        assert "at column" in error.message
    else:
        matches(parsed, record())


# Evaluation


def test_no_filter_matches_everything() -> None:
    assert matches(None, record())
    assert matches(parse_filter(""), record())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('fact = "I like coffee"', True),
        ('fact = "I like"', False),
        ('fact = "i like coffee"', False),
        ('fact != "I like coffee"', False),
        ('fact != "tea"', True),
        ('fact : "like"', True),
        ('fact : "LIKE"', False),
        ('fact : ""', True),
        ('fact =~ "coffee"', True),
        ('fact =~ "like co"', True),
        ('fact =~ "^coffee"', False),
        ('fact =~ "^I .*e$"', True),
        ('fact =~ "(?i)COFFEE"', True),
        ('fact =~ "tea|coffee"', True),
        ('fact =~ "^tea"', False),
    ],
)
def test_fact_comparisons(text: str, expected: bool) -> None:
    assert matches(parse_filter(text), record("I like coffee")) is expected


def test_regex_search_handles_unicode() -> None:
    assert matches(parse_filter('fact =~ "커.+해"'), record("나는 커피를 좋아해"))
    assert matches(parse_filter('fact =~ "^.{3}$"'), record("été"))


def test_catastrophic_backtracking_pattern_runs_in_linear_time() -> None:
    parsed = parse_filter('fact =~ "(a+)+$"')
    hostile = record("a" * 100_000 + "b")
    started = time.perf_counter()
    assert not matches(parsed, hostile)
    assert matches(parse_filter('fact =~ "(a+)+b"'), hostile)
    assert time.perf_counter() - started < 1.0


def test_regex_on_fact_with_lone_surrogate_does_not_crash() -> None:
    assert matches(parse_filter('fact =~ "ab"'), record("x\ud800ab"))


@pytest.mark.parametrize(
    ("op", "offset", "expected"),
    [
        (Op.EQ, timedelta(0), True),
        (Op.EQ, timedelta(microseconds=1), False),
        (Op.NE, timedelta(microseconds=1), True),
        (Op.LT, timedelta(microseconds=1), True),
        (Op.LT, timedelta(0), False),
        (Op.LE, timedelta(0), True),
        (Op.GT, timedelta(microseconds=-1), True),
        (Op.GT, timedelta(0), False),
        (Op.GE, timedelta(0), True),
        (Op.GE, timedelta(microseconds=1), False),
    ],
)
@pytest.mark.parametrize("name", ["create_time", "update_time", "expire_time"])
def test_time_comparisons_are_exact_to_the_microsecond(
    name: str, op: Op, offset: timedelta, expected: bool
) -> None:
    when = T0 + timedelta(days=3, microseconds=250)
    subject = record(create_time=when, update_time=when, expire_time=when)
    micros = (when + offset - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)
    assert matches(parse_filter(f"{name} {op.value} {micros}"), subject) is expected


def test_time_comparison_uses_the_instant_not_the_offset() -> None:
    subject = record(create_time=T0)
    assert matches(parse_filter('create_time = "2025-01-01T09:00:00+09:00"'), subject)
    assert matches(parse_filter('create_time < "2025-01-01T00:00:00-00:01"'), subject)


@pytest.mark.parametrize("op", list(Op)[:2] + list(Op)[4:])
def test_memory_that_never_expires_matches_no_expire_time_comparison(op: Op) -> None:
    forever = record(expire_time=None)
    comparison = parse_filter(f'expire_time {op.value} "2025-01-01T00:00:00Z"')
    assert not matches(comparison, forever)
    assert matches(Not(comparison), forever)  # type: ignore[arg-type]


def test_expire_time_filter_matches_memories_that_expire() -> None:
    soon = record(expire_time=T0 + timedelta(hours=1))
    assert matches(parse_filter('expire_time < "2025-01-02T00:00:00Z"'), soon)
    assert not matches(parse_filter('NOT expire_time < "2025-01-02T00:00:00Z"'), soon)


def test_managed_topic_filters() -> None:
    tagged = record(topics=(TopicRef(managed="USER_PREFERENCES"), TopicRef(custom="travel")))
    untagged = record()
    for text in (
        "topics.managed_memory_topic: USER_PREFERENCES",
        "topics.managed_memory_topic = user_preferences",
    ):
        assert matches(parse_filter(text), tagged)
        assert not matches(parse_filter(text), untagged)
    different = parse_filter("topics.managed_memory_topic != USER_PREFERENCES")
    assert not matches(different, tagged)
    assert matches(different, untagged)
    assert not matches(parse_filter("topics.managed_memory_topic: USER_PERSONAL_INFO"), tagged)


def test_custom_topic_filters_are_exact_and_case_sensitive() -> None:
    tagged = record(topics=(TopicRef(custom="travel"),))
    assert matches(parse_filter("topics.custom_memory_topic_label: travel"), tagged)
    assert matches(parse_filter('topics.custom_memory_topic_label = "travel"'), tagged)
    assert not matches(parse_filter("topics.custom_memory_topic_label: Travel"), tagged)
    assert not matches(parse_filter("topics.custom_memory_topic_label: trav"), tagged)
    assert matches(parse_filter("topics.custom_memory_topic_label != Travel"), tagged)
    # A managed topic name is not a custom label.
    managed_only = record(topics=(TopicRef(managed="USER_PREFERENCES"),))
    assert not matches(
        parse_filter("topics.custom_memory_topic_label: USER_PREFERENCES"), managed_only
    )


def test_scope_filters_compare_the_stored_value() -> None:
    subject = record(scope={"user_id": "123", "app": "x"})
    assert matches(parse_filter('scope.user_id = "123"', allow_scope=True), subject)
    assert not matches(parse_filter('scope.user_id = "12"', allow_scope=True), subject)
    assert matches(parse_filter('scope.user_id != "12"', allow_scope=True), subject)
    assert not matches(parse_filter('scope.user_id != "123"', allow_scope=True), subject)


def test_missing_scope_key_never_matches_equality_and_always_matches_inequality() -> None:
    subject = record(scope={"user_id": "123"})
    assert not matches(parse_filter('scope.session = "123"', allow_scope=True), subject)
    assert matches(parse_filter('scope.session != "123"', allow_scope=True), subject)


def test_boolean_structure_is_evaluated() -> None:
    subject = record("I like coffee")
    assert matches(parse_filter('fact:"tea" OR fact:"coffee"'), subject)
    assert not matches(parse_filter('fact:"tea" AND fact:"coffee"'), subject)
    assert matches(parse_filter('fact:"coffee" AND NOT fact:"tea"'), subject)
    # OR binds tighter: x AND (nope OR coffee), which "coffee" alone does not satisfy.
    tighter_or = parse_filter('fact:"x" AND fact:"nope" OR fact:"coffee"')
    assert matches(tighter_or, record("x coffee"))
    assert not matches(tighter_or, record("coffee"))
    assert matches(And(()), subject)
    assert not matches(Or(()), subject)


# Metadata evaluation


@pytest.mark.parametrize(
    ("op", "value", "expected"),
    [
        (Op.EQ, "b", True),
        (Op.EQ, "B", False),
        (Op.GT, "a", True),
        (Op.GT, "b", False),
        (Op.LT, "c", True),
        (Op.LT, "ab", False),
    ],
)
def test_metadata_strings_compare_lexicographically(op: Op, value: str, expected: bool) -> None:
    assert matches(cond("metadata.k", op, value), record(metadata={"k": "b"})) is expected


def test_metadata_string_numbers_compare_as_text() -> None:
    assert matches(cond("metadata.k", Op.LT, "9"), record(metadata={"k": "10"}))


@pytest.mark.parametrize(
    ("stored", "op", "value", "expected"),
    [
        (10.0, Op.GT, 9.0, True),
        (10.0, Op.LT, 9.0, False),
        (10.0, Op.EQ, 10.0, True),
        (10, Op.EQ, 10.0, True),
        (10, Op.GT, 9.5, True),
        (-1.5, Op.LT, 0.0, True),
    ],
)
def test_metadata_numbers_compare_numerically(
    stored: float, op: Op, value: float, expected: bool
) -> None:
    assert matches(cond("metadata.k", op, value), record(metadata={"k": stored})) is expected


def test_metadata_bool_is_never_a_number() -> None:
    assert not matches(cond("metadata.k", Op.EQ, 1.0), record(metadata={"k": True}))
    assert not matches(cond("metadata.k", Op.EQ, True), record(metadata={"k": 1.0}))
    assert not matches(cond("metadata.k", Op.EQ, True), record(metadata={"k": 1}))


def test_metadata_booleans_match_only_by_equality() -> None:
    subject = record(metadata={"k": True})
    assert matches(cond("metadata.k", Op.EQ, True), subject)
    assert not matches(cond("metadata.k", Op.EQ, False), subject)
    for op in (Op.GT, Op.LT):
        for value in (True, False):
            assert not matches(cond("metadata.k", op, value), subject)
            assert matches(Not(cond("metadata.k", op, value)), subject)


@pytest.mark.parametrize(
    ("stored", "value"),
    [("1", 1.0), (1.0, "1"), (True, "true"), (T0, "2025-01-01T00:00:00Z"), ("x", T0), (T0, 0.0)],
)
def test_metadata_type_mismatch_never_matches(stored: MetadataValue, value: Any) -> None:
    subject = record(metadata={"k": stored})
    for op in (Op.EQ, Op.GT, Op.LT):
        assert not matches(cond("metadata.k", op, value), subject)
        assert matches(Not(cond("metadata.k", op, value)), subject)


@pytest.mark.parametrize("value", ["x", 1.0, True, T0])
def test_metadata_missing_key_never_matches_so_negation_does(value: Any) -> None:
    subject = record(metadata={"other": value})
    for op in (Op.EQ, Op.GT, Op.LT, Op.NE):
        assert not matches(cond("metadata.k", op, value), subject)
        assert matches(Not(cond("metadata.k", op, value)), subject)


def test_metadata_timestamps_compare_by_whole_seconds() -> None:
    subject = record(metadata={"k": T0 + timedelta(milliseconds=900)})
    same_second = T0 + timedelta(milliseconds=100)
    assert matches(cond("metadata.k", Op.EQ, same_second), subject)
    assert not matches(cond("metadata.k", Op.GT, same_second), subject)
    assert not matches(cond("metadata.k", Op.LT, same_second), subject)
    assert matches(cond("metadata.k", Op.LT, T0 + timedelta(seconds=1)), subject)
    later = record(metadata={"k": T0 + timedelta(seconds=1)})
    assert matches(cond("metadata.k", Op.GT, T0 + timedelta(milliseconds=999)), later)


def test_metadata_timestamps_compare_instants_across_offsets() -> None:
    plus_two = datetime(2025, 1, 1, 2, 0, 0, 500_000, tzinfo=timezone(timedelta(hours=2)))
    assert matches(cond("metadata.k", Op.EQ, T0), record(metadata={"k": plus_two}))


def test_metadata_string_equality_from_filter_string_matches() -> None:
    parsed = parse_filter('metadata.author = "agent 123"')
    assert matches(parsed, record(metadata={"author": "agent 123"}))
    assert not matches(parsed, record(metadata={"author": "agent 321"}))
    assert not matches(parsed, record())


# filter_groups


DOC_GROUPS_SNAKE: list[dict[str, Any]] = [
    {"filters": [{"key": "author", "value": {"string_value": "agent 123"}, "op": "EQUAL"}]},
    {
        "filters": [
            {"key": "label", "value": {"string_value": "travel"}, "op": "EQUAL"},
            {"key": "author", "value": {"string_value": "agent 321"}, "op": "EQUAL"},
        ]
    },
]
DOC_GROUPS_CAMEL: list[dict[str, Any]] = [
    {"filters": [{"key": "author", "value": {"stringValue": "agent 123"}, "op": "EQUAL"}]},
    {
        "filters": [
            {"key": "label", "value": {"stringValue": "travel"}},
            {"key": "author", "value": {"stringValue": "agent 321"}, "op": "EQUAL"},
        ]
    },
]
DOC_EXPECTED = Or(
    (
        Condition("metadata.author", Op.EQ, "agent 123"),
        And(
            (
                Condition("metadata.label", Op.EQ, "travel"),
                Condition("metadata.author", Op.EQ, "agent 321"),
            )
        ),
    )
)


@pytest.mark.parametrize("groups", [None, []])
def test_no_filter_groups_is_no_filter(groups: list[Any] | None) -> None:
    assert from_filter_groups(groups) is None


@pytest.mark.parametrize("groups", [DOC_GROUPS_SNAKE, DOC_GROUPS_CAMEL])
def test_filter_groups_dicts_in_either_casing(groups: list[dict[str, Any]]) -> None:
    assert from_filter_groups(groups) == DOC_EXPECTED


def test_filter_groups_sdk_objects() -> None:
    groups = [
        types.MemoryConjunctionFilter(
            filters=[
                types.MemoryFilter(
                    key="author",
                    value=types.MemoryMetadataValue(string_value="agent 123"),
                    op=types.Operator.EQUAL,
                )
            ]
        ),
        types.MemoryConjunctionFilter(
            filters=[
                types.MemoryFilter(
                    key="label", value=types.MemoryMetadataValue(string_value="travel")
                ),
                types.MemoryFilter(
                    key="author", value=types.MemoryMetadataValue(string_value="agent 321")
                ),
            ]
        ),
    ]
    assert from_filter_groups(groups) == DOC_EXPECTED


def test_filter_groups_sdk_objects_with_every_value_kind_and_negate() -> None:
    when = datetime(2025, 1, 1, 0, 0, 5, tzinfo=UTC)
    group = types.MemoryConjunctionFilter(
        filters=[
            types.MemoryFilter(
                key="score",
                value=types.MemoryMetadataValue(double_value=1.0),
                op=types.Operator.GREATER_THAN,
                negate=True,
            ),
            types.MemoryFilter(
                key="done",
                value=types.MemoryMetadataValue(bool_value=False),
                op=types.Operator.OPERATOR_UNSPECIFIED,
            ),
            types.MemoryFilter(
                key="seen",
                value=types.MemoryMetadataValue(timestamp_value="2025-01-01T00:00:05Z"),
                op="LESS_THAN",
            ),
        ]
    )
    parsed = from_filter_groups([group])
    assert parsed == And(
        (
            Not(Condition("metadata.score", Op.GT, 1.0)),
            Condition("metadata.done", Op.EQ, False),
            Condition("metadata.seen", Op.LT, when),
        )
    )
    assert isinstance(parsed, And)
    seen = parsed.parts[2]
    assert isinstance(seen, Condition) and isinstance(seen.value, datetime)
    assert seen.value.tzinfo is UTC


def test_filter_groups_rest_body_mixing_casings() -> None:
    body = [
        {"filters": [{"key": "author", "op": "EQUAL", "value": {"string_value": "agent 123"}}]},
        {
            "filters": [
                {"key": "label", "value": {"string_value": "travel"}},
                {"key": "score", "negate": True, "op": "GREATER_THAN", "value": {"doubleValue": 1}},
            ]
        },
    ]
    parsed = from_filter_groups(body)
    assert parsed == Or(
        (
            Condition("metadata.author", Op.EQ, "agent 123"),
            And(
                (
                    Condition("metadata.label", Op.EQ, "travel"),
                    Not(Condition("metadata.score", Op.GT, 1.0)),
                )
            ),
        )
    )
    assert isinstance(parsed, Or) and isinstance(parsed.parts[1], And)
    negated = parsed.parts[1].parts[1]
    assert isinstance(negated, Not) and isinstance(negated.part, Condition)
    assert type(negated.part.value) is float


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (None, Op.EQ),
        ("OPERATOR_UNSPECIFIED", Op.EQ),
        ("EQUAL", Op.EQ),
        ("GREATER_THAN", Op.GT),
        ("LESS_THAN", Op.LT),
        ("less_than", Op.LT),
        (types.Operator.GREATER_THAN, Op.GT),
    ],
)
def test_filter_group_operators(op: Any, expected: Op) -> None:
    groups = [{"filters": [{"key": "k", "value": {"double_value": 2}, "op": op}]}]
    assert from_filter_groups(groups) == Condition("metadata.k", expected, 2.0)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"timestampValue": "2025-01-01T02:00:00+02:00"}, T0),
        ({"timestamp_value": datetime(2025, 1, 1)}, T0),
        ({"timestamp_value": datetime(2025, 1, 1, 9, tzinfo=timezone(timedelta(hours=9)))}, T0),
        ({"bool_value": True}, True),
        ({"boolValue": False}, False),
        ({"double_value": 3}, 3.0),
        ({"string_value": ""}, ""),
        ({"string_value": "x", "double_value": None}, "x"),
    ],
)
def test_filter_group_values_become_python_values(value: dict[str, Any], expected: Any) -> None:
    parsed = from_filter_groups([{"filters": [{"key": "k", "value": value}]}])
    assert parsed == Condition("metadata.k", Op.EQ, expected)
    assert isinstance(parsed, Condition) and type(parsed.value) is type(expected)


def test_filter_group_negate_of_missing_key_matches() -> None:
    groups = [{"filters": [{"key": "author", "value": {"string_value": "x"}, "negate": True}]}]
    parsed = from_filter_groups(groups)
    assert matches(parsed, record(metadata={}))
    assert matches(parsed, record(metadata={"author": 5.0}))
    assert matches(parsed, record(metadata={"author": "y"}))
    assert not matches(parsed, record(metadata={"author": "x"}))


def test_filter_groups_are_dnf_when_evaluated() -> None:
    parsed = from_filter_groups(DOC_GROUPS_SNAKE)
    assert matches(parsed, record(metadata={"author": "agent 123"}))
    assert matches(parsed, record(metadata={"author": "agent 321", "label": "travel"}))
    assert not matches(parsed, record(metadata={"author": "agent 321"}))
    assert not matches(parsed, record(metadata={"label": "travel"}))


def test_filter_group_bool_greater_than_never_matches() -> None:
    groups = [{"filters": [{"key": "k", "value": {"bool_value": False}, "op": "GREATER_THAN"}]}]
    parsed = from_filter_groups(groups)
    assert not matches(parsed, record(metadata={"k": True}))
    assert not matches(parsed, record(metadata={"k": False}))


def test_filter_group_timestamps_compare_by_whole_seconds() -> None:
    groups = [{"filters": [{"key": "t", "value": {"timestamp_value": "2025-01-01T00:00:00.2Z"}}]}]
    parsed = from_filter_groups(groups)
    assert matches(parsed, record(metadata={"t": T0 + timedelta(milliseconds=700)}))
    assert not matches(parsed, record(metadata={"t": T0 + timedelta(seconds=1)}))


@pytest.mark.parametrize(
    ("groups", "fragment"),
    [
        ({"filters": []}, "must be a list of groups"),
        ("filters", "must be a list of groups"),
        ([{"filters": []}], "filter_groups[0].filters is empty"),
        ([{}], "filter_groups[0].filters is empty"),
        ([{"filters": None}], "filter_groups[0].filters is empty"),
        ([{"filters": "x"}], "filter_groups[0].filters must be a list"),
        ([types.MemoryConjunctionFilter()], "filter_groups[0].filters is empty"),
        ([{"filter": []}], "unknown attribute 'filter'"),
        ([42], "filter_groups[0] must be an object or dict"),
        ([{"filters": [{"value": {"string_value": "x"}}]}], "filters[0].key must be a non-empty"),
        ([{"filters": [{"key": "", "value": {"string_value": "x"}}]}], "key must be a non-empty"),
        ([{"filters": [{"key": 3, "value": {"string_value": "x"}}]}], "key must be a non-empty"),
        ([{"filters": [{"key": "k"}]}], "value is missing"),
        ([{"filters": [{"key": "k", "value": {}}]}], "sets 0 kinds of value"),
        (
            [{"filters": [{"key": "k", "value": {"string_value": "x", "bool_value": True}}]}],
            "sets 2 kinds of value",
        ),
        (
            [{"filters": [{"key": "k", "value": {"string_value": "x", "stringValue": "y"}}]}],
            "given twice",
        ),
        ([{"filters": [{"key": "k", "value": {"string_value": 1}}]}], "must be a string"),
        ([{"filters": [{"key": "k", "value": {"double_value": True}}]}], "must be a number"),
        ([{"filters": [{"key": "k", "value": {"double_value": "1"}}]}], "must be a number"),
        ([{"filters": [{"key": "k", "value": {"bool_value": "true"}}]}], "must be a bool"),
        ([{"filters": [{"key": "k", "value": {"timestamp_value": "soon"}}]}], "RFC 3339"),
        ([{"filters": [{"key": "k", "value": {"timestamp_value": 5}}]}], "RFC 3339"),
        ([{"filters": [{"key": "k", "value": {"int_value": 5}}]}], "unknown attribute"),
        (
            [{"filters": [{"key": "k", "vaule": {"string_value": "x"}}]}],
            "unknown attribute 'vaule'",
        ),
        (
            [{"filters": [{"key": "k", "value": {"string_value": "x"}, "op": "NOT_EQUAL"}]}],
            "'NOT_EQUAL' is not an operator",
        ),
        (
            [{"filters": [{"key": "k", "value": {"string_value": "x"}, "negate": "yes"}]}],
            "negate must be true or false",
        ),
    ],
)
def test_invalid_filter_groups_are_refused(groups: Any, fragment: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        from_filter_groups(groups)
    assert fragment in caught.value.message
    assert caught.value.field == "filter_groups"


def test_invalid_filter_group_error_names_the_position_and_given_field() -> None:
    groups = [
        {"filters": [{"key": "a", "value": {"string_value": "x"}}]},
        {"filters": [{"key": "a", "value": {"string_value": "x"}}, {"key": "", "value": {}}]},
    ]
    with pytest.raises(InvalidArgument) as caught:
        from_filter_groups(groups, field="filterGroups")
    assert caught.value.field == "filterGroups"
    assert "filterGroups[1].filters[1].key" in caught.value.message


# combine, family_of, partition


def test_combine_ands_the_given_filters() -> None:
    a, b, c = fact_eq("a"), fact_eq("b"), fact_eq("c")
    assert combine() is None
    assert combine(None, None) is None
    assert combine(a) == a
    assert combine(None, a, None) == a
    assert combine(a, b) == And((a, b))
    assert combine(And((a, b)), c) == And((a, b, c))
    assert combine(Or((a, b)), c) == And((Or((a, b)), c))


@pytest.mark.parametrize(
    ("condition", "family"),
    [
        (Condition("fact", Op.REGEX, "x"), "fact"),
        (Condition("create_time", Op.LT, T0), "time"),
        (Condition("update_time", Op.GE, T0), "time"),
        (Condition("expire_time", Op.EQ, T0), "time"),
        (Condition(MANAGED, Op.HAS, "USER_PREFERENCES"), "topics"),
        (Condition(CUSTOM, Op.NE, "travel"), "topics"),
        (Condition("scope.user_id", Op.EQ, "1"), "scope"),
        (Condition("metadata.k", Op.EQ, "x"), "metadata_string"),
        (Condition("metadata.k", Op.GT, 1.5), "metadata_number"),
        (Condition("metadata.k", Op.GT, 1), "metadata_number"),
        (Condition("metadata.k", Op.EQ, True), "metadata_bool"),
        (Condition("metadata.k", Op.LT, T0), "metadata_timestamp"),
    ],
)
def test_family_of(condition: Condition, family: str) -> None:
    assert family_of(condition) == family


def test_family_of_unknown_field_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="no filter family"):
        family_of(Condition("colour", Op.EQ, "x"))


def test_family_of_every_parsed_field() -> None:
    parsed = parse_filter(
        'fact:"a" AND createTime > 0 AND topics.managed_memory_topic: USER_PREFERENCES '
        'AND topics.custom_memory_topic_label: x AND scope.u = "1" AND metadata.k = "v"',
        allow_scope=True,
    )
    assert [family_of(c) for c in leaves(parsed)] == [  # type: ignore[arg-type]
        "fact",
        "time",
        "topics",
        "topics",
        "scope",
        "metadata_string",
    ]


def test_partition_of_none() -> None:
    assert partition(None, ALL_PUSHDOWN) == (None, None)


def test_partition_pushes_everything_or_nothing() -> None:
    expr = parse_filter('fact:"a" AND create_time > 0')
    assert partition(expr, ALL_PUSHDOWN) == (expr, None)
    assert partition(expr, frozenset()) == (None, expr)


def test_partition_splits_top_level_conjuncts() -> None:
    expr = parse_filter(
        'fact:"a" AND create_time > 0 AND fact=~"b" AND topics.custom_memory_topic_label: x'
    )
    pushed, residual = partition(expr, frozenset({("fact", ":"), ("topics", ":")}))
    assert pushed == And((Condition("fact", Op.HAS, "a"), Condition(CUSTOM, Op.HAS, "x")))
    assert residual == And(
        (
            Condition("create_time", Op.GT, datetime(1970, 1, 1, tzinfo=UTC)),
            Condition("fact", Op.REGEX, "b"),
        )
    )


def test_partition_pushes_or_and_not_subtrees_only_when_every_leaf_is_supported() -> None:
    expr = parse_filter('(fact:"a" OR fact=~"b") AND NOT fact:"c" AND (fact:"d" OR fact:"e")')
    pushed, residual = partition(expr, frozenset({("fact", ":")}))
    assert pushed == And(
        (
            Not(Condition("fact", Op.HAS, "c")),
            Or((Condition("fact", Op.HAS, "d"), Condition("fact", Op.HAS, "e"))),
        )
    )
    assert residual == Or((Condition("fact", Op.HAS, "a"), Condition("fact", Op.REGEX, "b")))


def test_partition_distinguishes_metadata_families_by_value_type() -> None:
    expr = from_filter_groups(
        [
            {
                "filters": [
                    {"key": "a", "value": {"string_value": "x"}},
                    {"key": "b", "value": {"double_value": 1}, "op": "GREATER_THAN"},
                    {"key": "c", "value": {"bool_value": True}},
                ]
            }
        ]
    )
    pushed, residual = partition(
        expr, frozenset({("metadata_string", "="), ("metadata_number", ">")})
    )
    assert pushed == And((Condition("metadata.a", Op.EQ, "x"), Condition("metadata.b", Op.GT, 1.0)))
    assert residual == Condition("metadata.c", Op.EQ, True)


def test_partition_flattens_nested_top_level_ands() -> None:
    a, b = Condition("fact", Op.HAS, "a"), Condition("fact", Op.REGEX, "b")
    pushed, residual = partition(And((And((a, b)),)), frozenset({("fact", ":")}))
    assert (pushed, residual) == (a, b)


# Property: partition never changes what a filter matches.

TIMES = [
    T0,
    T0 + timedelta(milliseconds=400),
    T0 + timedelta(seconds=1),
    T0 + timedelta(days=1),
]
FACT_VALUES = ["", "a", "ab", "b", "ba"]
REGEXES = ["a", "^a", "b$", "a|b", "^$", "(a+)+$"]
LABELS = ["travel", "Travel"]
METADATA_VALUES: list[MetadataValue] = ["a", "b", 0.0, 1.0, 2.5, True, False, *TIMES[:3]]


# Drawn from a seeded `random.Random` rather than hypothesis: under full-suite load hypothesis
# reported FlakyStrategyDefinition for these strategies (never a wrong answer), and a property
# that only runs as a non-strict xfail guards nothing.

PROPERTY_SEEDS = range(40)
CASES_PER_SEED = 25


def random_record(rng: random.Random) -> MemoryRecord:
    def topic() -> TopicRef:
        if rng.random() < 0.5:
            return TopicRef(managed=rng.choice(["USER_PREFERENCES", "USER_PERSONAL_INFO"]))
        return TopicRef(custom=rng.choice(LABELS))

    metadata_values: list[MetadataValue] = [*METADATA_VALUES, -1, 0, 1, 2, 3]
    return record(
        "".join(rng.choice("ab") for _ in range(rng.randint(0, 3))),
        create_time=rng.choice(TIMES),
        update_time=rng.choice(TIMES),
        expire_time=rng.choice([None, *TIMES]),
        topics=tuple(topic() for _ in range(rng.randint(0, 2))),
        scope={
            key: rng.choice(["1", "2"])
            for key in rng.sample(["user_id", "app"], 2)[: rng.randint(0, 2)]
        },
        metadata={
            key: rng.choice(metadata_values) for key in rng.sample(["k1", "k2"], rng.randint(0, 2))
        },
    )


def random_condition(rng: random.Random) -> Condition:
    comparisons = [Op.EQ, Op.NE, Op.LT, Op.LE, Op.GT, Op.GE]
    field, ops, values = rng.choice(
        [
            ("fact", [Op.EQ, Op.NE, Op.HAS], FACT_VALUES),
            ("fact", [Op.REGEX], REGEXES),
            (rng.choice(["create_time", "update_time", "expire_time"]), comparisons, TIMES),
            (MANAGED, [Op.EQ, Op.HAS, Op.NE], ["USER_PREFERENCES", "KEY_CONVERSATION_DETAILS"]),
            (CUSTOM, [Op.EQ, Op.HAS, Op.NE], LABELS),
            (rng.choice(["scope.user_id", "scope.app"]), [Op.EQ, Op.NE], ["1", "2"]),
            (rng.choice(["metadata.k1", "metadata.k2"]), [Op.EQ, Op.GT, Op.LT], METADATA_VALUES),
        ]
    )
    return Condition(field, rng.choice(ops), rng.choice(values))


def random_expr(rng: random.Random, depth: int = 3) -> FilterExpr:
    if depth == 0 or rng.random() < 0.4:
        return random_condition(rng)
    kind = rng.choice([And, Or, Not])
    if kind is Not:
        return Not(random_expr(rng, depth - 1))
    return kind(tuple(random_expr(rng, depth - 1) for _ in range(rng.randint(1, 3))))


def random_pushdown(rng: random.Random) -> frozenset[tuple[str, str]]:
    every = [(family, op.value) for family in FAMILIES for op in Op]
    return frozenset(rng.sample(every, rng.randint(0, len(every))))


@pytest.mark.parametrize("seed", PROPERTY_SEEDS)
def test_partition_preserves_meaning(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(CASES_PER_SEED):
        expr, pushdown = random_expr(rng), random_pushdown(rng)
        pushed, residual = partition(expr, pushdown)
        recombined = combine(pushed, residual)
        for subject in [random_record(rng) for _ in range(rng.randint(1, 4))]:
            assert matches(recombined, subject) == matches(expr, subject)
            assert matches(expr, subject) == (
                matches(pushed, subject) and matches(residual, subject)
            )
        for part in conjuncts(pushed):
            assert all((family_of(c), c.op.value) in pushdown for c in leaves(part))
        for part in conjuncts(residual):
            assert any((family_of(c), c.op.value) not in pushdown for c in leaves(part))
