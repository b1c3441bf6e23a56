"""The postings-based BM25 + RM3 scorer gives exactly the scores of the dense scorer it replaced.

`_dense_bm25` is the scorer hybrid retrieval used before the per-scope index (every document
scored for every term), kept here as the oracle: the new one must agree to the last bit, on
random corpora, with documents excluded and over several parts, so rankings cannot move.
"""

from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from collections.abc import Sequence

import numpy as np
import pytest

from adk_memory.lexical import Corpus, LexicalIndex, best, bm25_scores, tokenize

_VOCABULARY = (
    "greyhound beach cello tax report Friday Biscuit morning hike Yosemite sister Hamburg "
    "painting paints painted lessons Melanie's kids the of and hund Schwester wohnt hermana "
    "vive Sevilla 강아지는 귀여워요 東京 rare"
).split()


def _dense_bm25(
    query: str,
    documents: Sequence[str],
    *,
    k1: float = 0.9,
    b: float = 0.4,
    feedback_docs: int = 0,
    feedback_terms: int = 20,
) -> list[float]:
    terms = tokenize(query)
    if not terms or not documents:
        return [0.0] * len(documents)
    tokenized = [tokenize(text) for text in documents]
    lengths = [len(tokens) for tokens in tokenized]
    counts = [Counter(tokens) for tokens in tokenized]
    average = sum(lengths) / len(lengths) or 1.0

    def score(weights: dict[str, float]) -> list[float]:
        norms = [k1 * (1.0 - b + b * length / average) for length in lengths]
        scores = [0.0] * len(counts)
        for term, weight in weights.items():
            hits = [(i, found[term]) for i, found in enumerate(counts) if term in found]
            idf = weight * math.log(1.0 + (len(counts) - len(hits) + 0.5) / (len(hits) + 0.5))
            for i, count in hits:
                scores[i] += idf * count * (k1 + 1.0) / (count + norms[i])
        return scores

    scores = score(dict.fromkeys(terms, 1.0))
    if feedback_docs <= 0 or not any(scores):
        return scores
    top = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:feedback_docs]
    top = [i for i in top if scores[i] > 0]
    total = sum(scores[i] for i in top)
    relevance: defaultdict[str, float] = defaultdict(float)
    for i in top:
        share = scores[i] / total / (lengths[i] or 1)
        for term, frequency in counts[i].items():
            relevance[term] += frequency * share
    chosen = sorted(relevance.items(), key=lambda item: (-item[1], item[0]))[:feedback_terms]
    mass = sum(value for _, value in chosen) or 1.0
    weights: defaultdict[str, float] = defaultdict(float)
    for term in terms:
        weights[term] += 0.5 / len(terms)
    for term, value in chosen:
        weights[term] += 0.5 * value / mass
    return score(dict(weights))


def _text(rng: random.Random) -> str:
    return " ".join(rng.choice(_VOCABULARY) for _ in range(rng.randint(0, 12)))


@pytest.mark.parametrize("seed", range(40))
def test_postings_scores_equal_dense_scores_on_random_corpora(seed: int) -> None:
    rng = random.Random(seed)
    documents = [_text(rng) for _ in range(rng.randint(0, 60))]
    query = _text(rng)
    feedback = {"feedback_docs": rng.choice([0, 1, 3, 10]), "feedback_terms": rng.randint(1, 25)}
    assert bm25_scores(query, documents, **feedback) == _dense_bm25(query, documents, **feedback)


@pytest.mark.parametrize("seed", range(40))
def test_excluded_documents_and_parts_score_like_the_dense_list_of_the_rest(seed: int) -> None:
    """Parts read as one list in order; an excluded document is as if absent (stats too)."""
    rng = random.Random(seed)
    parts = [[_text(rng) for _ in range(rng.randint(0, 40))] for _ in range(rng.randint(1, 3))]
    excluded = [{doc for doc in range(len(texts)) if rng.random() < 0.3} for texts in parts]
    query = _text(rng)
    feedback = {"feedback_docs": rng.choice([0, 3]), "feedback_terms": rng.randint(1, 25)}
    corpus = Corpus(
        [
            (LexicalIndex.of(texts), np.array([doc not in out for doc in range(len(texts))], bool))
            for texts, out in zip(parts, excluded, strict=True)
        ]
    )
    kept = [
        (part, doc)
        for part, texts in enumerate(parts)
        for doc in range(len(texts))
        if doc not in excluded[part]
    ]
    expected = _dense_bm25(query, [parts[part][doc] for part, doc in kept], **feedback)
    scores = corpus.bm25(query, **feedback).tolist()
    positions = [sum(map(len, parts[:part])) + doc for part, doc in kept]
    assert [scores[position] for position in positions] == expected
    assert all(scores[i] == 0.0 for i in set(range(len(scores))) - set(positions))


def test_an_index_holds_postings_of_its_terms_only() -> None:
    index = LexicalIndex.of(["cello cello lessons", "tax report", ""])
    docs, counts = index.postings["cello"]
    assert docs.tolist() == [0] and counts.tolist() == [2.0]
    assert index.lengths.tolist() == [3, 2, 0] and index.total_length == 5
    assert "the" not in index.postings
    assert not Corpus([(index, np.zeros(3, dtype=bool))]).bm25("cello").any()


def test_best_keeps_ties_at_the_cut_and_breaks_them_by_the_tiebreak() -> None:
    scores = np.array([0.5, 2.0, 0.0, 0.5, 1.0, 0.5])
    assert best(scores, 3, lambda i: -i) == [1, 4, 5]
    assert best(scores, 10, lambda i: i) == [1, 4, 0, 3, 5]
    assert best(scores, 0, lambda i: i) == []
