"""Hostile input, property-based: a typed error or a correct answer, never a crash (Issue 8.3).

Runs on `memory://` with derandomized hypothesis, so a failure reproduces. Every call either
returns or raises an `AdkMemoryError`; a created memory is found in exactly its own scope.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adk_memory import AdkMemoryError, Client, InvalidArgument

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
NASTY = st.sampled_from(
    [
        "",
        "*",
        "'",
        '"',
        "{",
        "}",
        "|",
        "@",
        "\\",
        "\x00",
        "\ud800",
        "a\udc00b",
        "é",
        "user_id",
        "a" * 5000,
        "*)(|",
        "-@x:{y}",
    ]
)
TEXT = st.one_of(NASTY, st.text(max_size=40))
SCOPES = st.dictionaries(TEXT, TEXT, max_size=7)
METADATA = st.dictionaries(
    TEXT, st.one_of(TEXT, st.floats(allow_nan=True), st.booleans(), st.integers()), max_size=5
)


@pytest.fixture(scope="module")
def client() -> Iterator[Client]:
    with Client("memory://", embedding_model="hash-64") as made:
        yield made


@pytest.fixture(scope="module")
def bank(client: Client) -> str:
    return client.memory_banks.create().name


def _facts(client: Client, bank: str, scope: dict[str, str]) -> list[str]:
    return [
        hit.memory.fact for hit in client.memory_banks.memories.retrieve(name=bank, scope=scope)
    ]


@SETTINGS
@given(scope=SCOPES, fact=TEXT, metadata=METADATA)
def test_create_is_typed_error_or_isolated_memory(
    client: Client, bank: str, scope: dict[str, str], fact: str, metadata: dict[str, Any]
) -> None:
    try:
        made = client.memory_banks.memories.create(
            name=bank,
            fact=fact,
            scope=scope,
            config={
                "metadata": {
                    k: {"string_value": v}
                    if isinstance(v, str)
                    else {"bool_value": v}
                    if isinstance(v, bool)
                    else {"double_value": v}
                    for k, v in metadata.items()
                }
            },
        )
    except AdkMemoryError:
        return
    memory = client.memory_banks.memories.get(name=made.response.name)
    assert memory.fact == fact and memory.scope == scope
    assert made.response.name in {
        h.memory.name for h in client.memory_banks.memories.retrieve(name=bank, scope=scope)
    }
    neighbour = {**scope, next(iter(scope)): next(iter(scope.values())) + "x"}
    assert made.response.name not in {
        h.memory.name for h in client.memory_banks.memories.retrieve(name=bank, scope=neighbour)
    }


@SETTINGS
@given(
    query=TEXT,
    top_k=st.integers(min_value=-(10**6), max_value=10**6),
    filter_=st.one_of(
        st.none(),
        TEXT,
        st.sampled_from(
            [
                'fact=~"(a+)+$"',
                'fact=~"' + "(" * 2000 + '"',
                "NOT NOT NOT (",
                'scope.user_id="1"',
                "create_time>" + "9" * 400,
                'fact:"x" OR ' * 500 + 'fact:"y"',
            ]
        ),
    ),
)
def test_retrieve_is_typed_error_or_bounded_answer(
    client: Client, bank: str, query: str, top_k: int, filter_: str | None
) -> None:
    try:
        hits = list(
            client.memory_banks.memories.retrieve(
                name=bank,
                scope={"user_id": "u"},
                similarity_search_params={"search_query": query or "q", "top_k": top_k},
                config={"filter": filter_} if filter_ is not None else None,
            )
        )
    except AdkMemoryError:
        return
    assert top_k > 0 and len(hits) <= min(top_k, 100)


@SETTINGS
@given(token=TEXT, size=st.integers(min_value=-10, max_value=10**7), name=TEXT)
def test_list_get_with_hostile_tokens_and_names(
    client: Client, bank: str, token: str, size: int, name: str
) -> None:
    try:
        list(
            client.memory_banks.memories.list(
                name=bank, config={"page_token": token, "page_size": size}
            )
        )
    except AdkMemoryError:
        pass
    for candidate in (name, f"{bank}/memories/{name}", f"{bank}/memories/{name}/revisions/{name}"):
        with pytest.raises(AdkMemoryError):
            client.memory_banks.memories.get(name=candidate)


def test_documented_limits_are_enforced(client: Client, bank: str) -> None:
    memories = client.memory_banks.memories
    with pytest.raises(InvalidArgument):
        memories.create(name=bank, fact="x" * 100_001, scope={"u": "1"})
    with pytest.raises(InvalidArgument):
        memories.create(name=bank, fact="x" * 3_000_000, scope={"u": "1"})
    with pytest.raises(InvalidArgument):
        memories.create(
            name=bank,
            fact="x",
            scope={"u": "1"},
            config={"metadata": {f"k{i}": {"string_value": "v"} for i in range(5000)}},
        )
    with pytest.raises(InvalidArgument):
        memories.create(name=bank, fact="x", scope={f"k{i}": "v" for i in range(6)})
    for fact, scope in (("a\ud800", {"u": "1"}), ("x", {"u": "\udc00"})):  # not Unicode text
        with pytest.raises(InvalidArgument):
            memories.create(name=bank, fact=fact, scope=scope)
    with pytest.raises(InvalidArgument):
        list(
            memories.retrieve(
                name=bank,
                scope={"u": "1"},
                similarity_search_params={"search_query": "x", "top_k": 0},
            )
        )
    for _ in range(3):
        memories.create(name=bank, fact="y", scope={"u": "many"})
    hits = list(
        memories.retrieve(
            name=bank,
            scope={"u": "many"},
            similarity_search_params={"search_query": "y", "top_k": 10**9},
        )
    )
    assert len(hits) == 3
