"""The lexical side of hybrid retrieval: Snowball tokenization, Okapi BM25 and RM3 feedback."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adk_memory.extensions import RetrievalConfig
from adk_memory.lexical import bm25_scores, tokenize

PETS = [
    "Biscuit the greyhound loves the beach.",
    "A greyhound races along the beach every morning.",
    "The quarterly tax report is due on Friday.",
    "I am learning to play the cello.",
]


def test_tokenize_stems_with_snowball_and_drops_stopwords() -> None:
    assert tokenize("Paintings, painted, painting!") == ["paint", "paint", "paint"]
    # Porter2 rules, which a plain suffix stripper gets wrong:
    assert tokenize("running studies generously") == ["run", "studi", "generous"]
    assert tokenize("What is the cello for?") == ["cello"]


def test_tokenize_drops_possessives_and_apostrophes() -> None:
    assert tokenize("Melanie's kids") == tokenize("Melanie kids") == ["melani", "kid"]
    assert tokenize("Melanie’s") == ["melani"]  # typographic apostrophe
    assert tokenize("I don't know") == ["dont", "know"]
    assert tokenize("snake_case 42") == ["snake", "case", "42"]


def test_tokenize_long_texts_like_short_ones() -> None:
    text = "Hiking in Yosemite. " * 100  # past the per-text cache limit of BM25
    assert tokenize(text) == ["hike", "yosemit"] * 100
    assert bm25_scores("yosemite", [text, "cello"])[0] > 0


def test_bm25_scores_match_only_shared_terms_and_favour_rare_ones() -> None:
    scores = bm25_scores("greyhound Biscuit", PETS)
    assert scores[2] == scores[3] == 0.0
    assert scores[0] > scores[1] > 0  # "biscuit" is rarer than "greyhound"


def test_bm25_score_is_okapi_with_anserini_defaults() -> None:
    documents = ["cello lessons", "tax report due", "cello"]
    k1, b = 0.9, 0.4
    average = (2 + 3 + 1) / 3
    idf = math.log(1 + (3 - 2 + 0.5) / (2 + 0.5))
    expected = idf * (k1 + 1) / (1 + k1 * (1 - b + b * 2 / average))
    assert bm25_scores("cellos", documents)[0] == pytest.approx(expected)


def test_bm25_scores_without_query_terms_or_documents() -> None:
    assert bm25_scores("the of and", PETS) == [0.0] * len(PETS)
    assert bm25_scores("cello", []) == []


def test_rm3_feedback_reaches_documents_sharing_terms_with_the_top_hits() -> None:
    plain = bm25_scores("Biscuit", PETS)
    expanded = bm25_scores("Biscuit", PETS, feedback_docs=1)
    assert plain[1] == 0.0 and expanded[1] > 0  # shares "greyhound" and "beach" with PETS[0]
    assert expanded[0] > expanded[1]
    assert expanded[2] == expanded[3] == 0.0


def test_rm3_feedback_keeps_only_the_heaviest_terms() -> None:
    documents = ["Biscuit greyhound", "greyhound kennel", "Biscuit"]
    one_term = bm25_scores("Biscuit", documents, feedback_docs=2, feedback_terms=1)
    assert one_term[1] == 0.0  # the only term kept is "biscuit" itself
    assert bm25_scores("Biscuit", documents, feedback_docs=2, feedback_terms=2)[1] > 0


def test_rm3_without_any_match_changes_nothing() -> None:
    assert bm25_scores("zebra", PETS, feedback_docs=3) == [0.0] * len(PETS)


def test_hybrid_defaults_chosen_on_the_locomo_dev_half() -> None:
    config = RetrievalConfig(mode="hybrid")
    assert (config.fusion, config.lexical_weight, config.candidates) == ("convex", 0.5, 100)
    assert (config.feedback_docs, config.feedback_terms) == (3, 20)
    assert RetrievalConfig(feedback_docs=0).feedback_docs == 0
    with pytest.raises(ValueError, match="feedback_docs"):
        RetrievalConfig(feedback_docs=-1)


# Per-text language (issue 19)


def test_tokenize_stems_german_and_spanish_in_their_own_language() -> None:
    assert tokenize("Wo wohnen meine Schwestern?") == ["wohn", "schwest"]
    assert tokenize("Meine Schwester wohnt in Hamburg.") == ["schwest", "wohnt", "hamburg"]
    assert tokenize("Ich habe zwei Hunde und einen Hund.") == ["zwei", "hund", "hund"]
    assert tokenize("¿Dónde viven mis hermanas?") == ["viv", "herman"]
    assert tokenize("Mi hermana vive en Sevilla.") == ["herman", "viv", "sevill"]


def test_tokenize_keeps_english_texts_english() -> None:
    # One Spanish or German stopword does not outvote an English sentence.
    assert tokenize("I love la la land") == ["love", "la", "la", "land"]
    assert tokenize("Die hard fans sang in the rain") == ["die", "hard", "fan", "sang", "rain"]
    assert tokenize("Painted paintings") == ["paint", "paint"]


def test_tokenize_splits_korean_into_bigrams_without_endings_or_pronouns() -> None:
    assert tokenize("우리 강아지는 귀여워요") == ["강아", "아지", "지는", "귀여", "여워"]
    assert tokenize("저는 東京에 살아요") == ["東京", "京에", "살아"]
    assert tokenize("개") == ["개"]


def test_bm25_matches_inflected_german_spanish_and_korean() -> None:
    facts = [
        "Meine Schwester wohnt seit drei Jahren in Hamburg.",
        "Mi hermana vive en Sevilla desde hace tres años.",
        "제 여동생은 3년째 부산에 살고 있어요.",
        "My sister has lived in Boston for three years.",
    ]
    for question, best in [
        ("Wo wohnen meine Schwestern?", 0),
        ("¿Dónde viven mis hermanas?", 1),
        ("여동생이 사는 곳은?", 2),
        ("Where do my sisters live?", 3),
    ]:
        scores = bm25_scores(question, facts)
        assert max(range(4), key=scores.__getitem__) == best, (question, scores)
        assert scores[best] > 0


@given(st.text(max_size=200))
def test_tokenize_any_text_gives_nonempty_tokens_deterministically(text: str) -> None:
    tokens = tokenize(text)
    assert tokens == tokenize(text)
    assert all(tokens)
