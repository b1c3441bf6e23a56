"""Opt-in hybrid retrieval (bank extension): dense and BM25 fused, on every backend."""

from __future__ import annotations

import math
from collections.abc import Iterator

import pytest

from adk_memory import Client, InvalidArgument

SCOPE = {"user_id": "u1"}
FACTS = [
    "I adopted a rescue greyhound named Biscuit last spring.",
    "My favourite colour is teal.",
    "I went hiking in Yosemite in May.",
    "The quarterly report is due on Friday.",
    "I am learning to play the cello.",
]


@pytest.fixture
def client(store_uri: str) -> Iterator[Client]:
    with Client(uri=store_uri, embedding_model="hash-64") as made:
        yield made


def fill(client: Client, hybrid: bool) -> str:
    extensions = {"retrieval": {"mode": "hybrid"}} if hybrid else None
    bank = client.memory_banks.create(extensions=extensions).name
    for fact in FACTS:
        client.memory_banks.memories.create(name=bank, fact=fact, scope=SCOPE)
    client.memory_banks.memories.create(
        name=bank, fact="Biscuit is my greyhound.", scope={"user_id": "u2"}
    )
    return bank


def search(
    client: Client, bank: str, query: str, top_k: int = 3, **config: object
) -> list[tuple[str, float]]:
    pager = client.memory_banks.memories.retrieve(
        name=bank,
        scope=SCOPE,
        similarity_search_params={"search_query": query, "top_k": top_k},
        config=config or None,
    )
    return [(hit.memory.fact, hit.distance) for hit in pager]


def test_hybrid_ranks_a_rare_keyword_first_and_keeps_true_distances(client: Client) -> None:
    dense_bank, hybrid_bank = fill(client, hybrid=False), fill(client, hybrid=True)
    query = "What is Biscuit?"
    hybrid = search(client, hybrid_bank, query)
    assert hybrid[0][0] == FACTS[0]
    dense = dict(search(client, dense_bank, query, top_k=5))
    for fact, distance in hybrid:
        assert math.isclose(distance, dense[fact], abs_tol=1e-4)
    assert client.memory_banks.get_extensions(name=hybrid_bank).retrieval.mode == "hybrid"
    assert client.memory_banks.get_extensions(name=dense_bank).retrieval.mode == "dense"


def test_hybrid_stays_within_the_scope_and_applies_filters(client: Client) -> None:
    bank = fill(client, hybrid=True)
    assert all(fact in FACTS for fact, _ in search(client, bank, "greyhound Biscuit", top_k=10))
    filtered = search(client, bank, "Biscuit greyhound", top_k=10, filter='fact=~"cello|teal"')
    assert sorted(fact for fact, _ in filtered) == sorted([FACTS[1], FACTS[4]])


def test_hybrid_expands_the_query_with_rm3_feedback(client: Client) -> None:
    lexical_only = {"mode": "hybrid", "lexical_weight": 1.0}
    bank = client.memory_banks.create(extensions={"retrieval": lexical_only}).name
    related = "The greyhound rescue shelter needs volunteers in spring."
    for fact in [*FACTS, related]:
        client.memory_banks.memories.create(name=bank, fact=fact, scope=SCOPE)
    # "related" shares no word with the query, only words with the best hit (RM3's feedback).
    assert [fact for fact, _ in search(client, bank, "Who is Biscuit?", top_k=2)] == [
        FACTS[0],
        related,
    ]
    stored = client.memory_banks.get_extensions(name=bank).retrieval
    assert (stored.feedback_docs, stored.feedback_terms) == (3, 20)


def test_extensions_are_validated(client: Client) -> None:
    with pytest.raises(InvalidArgument, match="extensions"):
        client.memory_banks.create(extensions={"retrieval": {"mode": "magic"}})
    with pytest.raises(InvalidArgument, match="extensions"):
        client.memory_banks.create(extensions={"retrieval": {"lexical_weight": 2}})
    with pytest.raises(InvalidArgument, match="extensions"):
        client.memory_banks.create(extensions={"retrieval": {"feedback_docs": -1}})
