"""The README's hybrid retrieval settings: `feedback_docs=0` turns RM3's expansion off."""

from __future__ import annotations

from adk_memory import Client

SCOPE = {"user_id": "u1"}
BEST = "I adopted a rescue greyhound named Biscuit last spring."
RELATED = "The greyhound rescue shelter needs volunteers in spring."  # no word of the query
FACTS = (BEST, RELATED, "My favourite colour is teal.", "The quarterly report is due on Friday.")


def _lexical_hits(feedback_docs: int | None) -> list[str]:
    retrieval: dict[str, object] = {"mode": "hybrid", "lexical_weight": 1.0}
    if feedback_docs is not None:
        retrieval["feedback_docs"] = feedback_docs
    with Client("memory://", embedding_model="hash-64") as client:
        bank = client.memory_banks.create(extensions={"retrieval": retrieval}).name
        # Ids that put the related fact last among facts that score alike.
        for memory_id, fact in zip(("best", "z-related", "a-other", "b-other"), FACTS, strict=True):
            client.memory_banks.memories.create(
                name=bank, fact=fact, scope=SCOPE, config={"memory_id": memory_id}
            )
        hits = client.memory_banks.memories.retrieve(
            name=bank,
            scope=SCOPE,
            similarity_search_params={"search_query": "Who is Biscuit?", "top_k": 4},
        )
        return [hit.memory.fact for hit in hits]


def test_feedback_docs_0_turns_the_query_expansion_off() -> None:
    """With the default expansion the related fact ranks second, reached through the best
    hit's words; without it, it shares no word with the query and ranks with the rest."""
    expanded, plain = _lexical_hits(None), _lexical_hits(0)
    assert expanded[:2] == [BEST, RELATED]
    assert plain[0] == BEST and plain[-1] == RELATED
