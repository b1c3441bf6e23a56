"""The README's "Limits", at their bounds: the documented number is accepted, one more is
`InvalidArgument` naming the field; `top_k` and a retrieve's `page_size` above 100 give 100, a
listing's `page_size` above 1,000 gives 1,000."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from adk_memory import Client
from adk_memory.errors import InvalidArgument


@pytest.fixture
def client() -> Iterator[Client]:
    with Client("memory://", embedding_model="hash-64") as made:
        yield made


@pytest.fixture
def bank(client: Client) -> str:
    return str(client.memory_banks.create().name)


def _create(client: Client, bank: str, **request: Any) -> None:
    client.memory_banks.memories.create(name=bank, **{"fact": "x", "scope": {"u": "1"}, **request})


def _metadata(entries: int) -> dict[str, Any]:
    return {"metadata": {f"k{i}": {"string_value": "v"} for i in range(entries)}}


@pytest.mark.parametrize(
    ("at_the_limit", "over_it"),
    [
        ({"fact": "f" * 100_000}, {"fact": "f" * 100_001}),
        ({"scope": {"k" * 8_192: "v"}}, {"scope": {"k" * 8_193: "v"}}),
        ({"scope": {"k": "v" * 8_192}}, {"scope": {"k": "v" * 8_193}}),
        ({"config": _metadata(100)}, {"config": _metadata(101)}),
    ],
    ids=["fact", "scope key", "scope value", "metadata entries"],
)
def test_a_create_at_the_limit_is_stored_and_one_over_is_refused(
    client: Client, bank: str, at_the_limit: dict[str, Any], over_it: dict[str, Any]
) -> None:
    _create(client, bank, **at_the_limit)
    with pytest.raises(InvalidArgument) as raised:
        _create(client, bank, **over_it)
    assert raised.value.field
    assert len(list(client.memory_banks.memories.list(name=bank))) == 1


@pytest.mark.parametrize(
    ("at_the_limit", "over_it"),
    [
        ('fact = "' + "a" * (4_096 - 9) + '"', 'fact = "' + "a" * (4_096 - 8) + '"'),
        ('fact =~ "' + "a" * 1_000 + '"', 'fact =~ "' + "a" * 1_001 + '"'),
    ],
    ids=["filter", "regular expression"],
)
def test_a_filter_at_the_limit_runs_and_one_over_is_refused(
    client: Client, bank: str, at_the_limit: str, over_it: str
) -> None:
    assert len(at_the_limit) <= 4_096
    memories = client.memory_banks.memories
    assert list(memories.list(name=bank, config={"filter": at_the_limit})) == []
    with pytest.raises(InvalidArgument) as raised:
        list(memories.list(name=bank, config={"filter": over_it}))
    assert raised.value.field == "filter"


def test_top_k_and_a_retrieves_page_size_above_100_give_100(client: Client, bank: str) -> None:
    memories = client.memory_banks.memories
    for i in range(105):
        _create(client, bank, fact=f"fact {i}")
    hits = memories.retrieve(
        name=bank,
        scope={"u": "1"},
        similarity_search_params={"search_query": "fact", "top_k": 1_000},
    )
    retrieved = memories.retrieve(
        name=bank, scope={"u": "1"}, simple_retrieval_params={"page_size": 1_000}
    )
    assert len(list(hits)) == len(retrieved.page) == 100 and retrieved.next_page_token


def test_a_listings_page_size_above_1000_gives_1000(client: Client, bank: str) -> None:
    for i in range(1_001):
        _create(client, bank, fact=f"fact {i}")
    listed = client.memory_banks.memories.list(name=bank, config={"page_size": 5_000})
    assert len(listed.page) == 1_000 and listed.next_page_token
