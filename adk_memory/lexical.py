"""Lexical scoring for hybrid retrieval: a tokenizer and Okapi BM25 over one scope's facts.

Dense embeddings miss exact names, dates and rare words that a keyword match finds; BM25 finds
those and misses paraphrases. Hybrid retrieval (an opt-in bank extension) fuses both rankings.
This module is pure Python over a list of texts: no index, no I/O. Tokenizing is a pure function
of the text, so its results are cached per process (by the text itself, which cannot go stale).
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import snowballstemmer  # type: ignore[import-untyped]

__all__ = ["bm25_scores", "tokenize"]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
)
_CACHED_TEXTS = 16_384
_CACHED_TEXT_CHARS = 1_024
"""Longer texts are tokenized on every call, so the cache stays bounded though a fact may hold
100,000 characters: ~20 MB when full of sentence-long facts, ~75 MB at worst."""
_ORIGINAL_QUERY_WEIGHT = 0.5
"""RM3's share of the original query terms against the feedback terms (Anserini's default)."""
_local = threading.local()


def _stemmer() -> Any:
    # Snowball stemmers keep state while stemming a word: one per thread.
    stemmer = getattr(_local, "stemmer", None)
    if stemmer is None:
        stemmer = _local.stemmer = snowballstemmer.stemmer("english")
    return stemmer


@lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """The Snowball (Porter2) English stem: "paint", "painted", "paintings" all give "paint"."""
    return str(_stemmer().stemWord(word))


def _word(raw: str) -> str:
    """Drops a possessive "'s" and other apostrophes: "mel's" -> "mel", "don't" -> "dont"."""
    word = raw.replace("’", "'")
    if word.endswith("'s"):
        word = word[:-2]
    return word.replace("'", "")


def tokenize(text: str) -> list[str]:
    """Lower-cased, Snowball-stemmed word tokens without stopwords or possessives."""
    return list(_tokenize(text))


def _tokenize(text: str) -> tuple[str, ...]:
    words = (_word(raw) for raw in _WORD.findall(text.lower()))
    return tuple(_stem(word) for word in words if word and word not in _STOPWORDS)


_Terms = tuple[int, Mapping[str, int]]
"""A document as BM25 sees it: its length in tokens and each distinct token's count."""


def _terms(text: str) -> _Terms:
    return _cached_terms(text) if len(text) <= _CACHED_TEXT_CHARS else _count_terms(text)


@lru_cache(maxsize=_CACHED_TEXTS)
def _cached_terms(text: str) -> _Terms:
    return _count_terms(text)


def _count_terms(text: str) -> _Terms:
    tokens = _tokenize(text)
    return len(tokens), MappingProxyType(Counter(tokens))


@dataclass(frozen=True, slots=True)
class _Corpus:
    """The documents' lengths and term counts, as BM25 needs them."""

    lengths: list[int]
    counts: list[Mapping[str, int]]
    average: float

    @classmethod
    def of(cls, texts: Sequence[str]) -> _Corpus:
        lengths, counts = zip(*(_terms(text) for text in texts), strict=True)
        average = sum(lengths) / len(lengths)
        return cls(list(lengths), list(counts), average or 1.0)

    def scores(self, weights: Mapping[str, float], *, k1: float, b: float) -> list[float]:
        """The BM25 score of every document for weighted query terms."""
        size = len(self.counts)
        norms = [k1 * (1.0 - b + b * length / self.average) for length in self.lengths]
        scores = [0.0] * size
        for term, weight in weights.items():
            hits = [(i, counts[term]) for i, counts in enumerate(self.counts) if term in counts]
            idf = weight * math.log(1.0 + (size - len(hits) + 0.5) / (len(hits) + 0.5))
            for i, count in hits:
                scores[i] += idf * count * (k1 + 1.0) / (count + norms[i])
        return scores

    def expanded(
        self, query: Sequence[str], scores: Sequence[float], *, docs: int, terms: int
    ) -> dict[str, float]:
        """RM3: the query's terms mixed with the top terms of its best `docs` documents.

        Each top document contributes its term frequencies (relative to its length) weighted by
        its share of the top documents' scores; the `terms` heaviest terms are kept.
        """
        top = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:docs]
        top = [i for i in top if scores[i] > 0]
        total = sum(scores[i] for i in top)
        relevance: defaultdict[str, float] = defaultdict(float)
        for i in top:
            share = scores[i] / total / (self.lengths[i] or 1)
            for term, frequency in self.counts[i].items():
                relevance[term] += frequency * share
        chosen = sorted(relevance.items(), key=lambda item: (-item[1], item[0]))[:terms]
        mass = sum(value for _, value in chosen) or 1.0
        weights: defaultdict[str, float] = defaultdict(float)
        for term in query:
            weights[term] += _ORIGINAL_QUERY_WEIGHT / len(query)
        for term, value in chosen:
            weights[term] += (1.0 - _ORIGINAL_QUERY_WEIGHT) * value / mass
        return dict(weights)


def bm25_scores(
    query: str,
    documents: Sequence[str],
    *,
    k1: float = 0.9,
    b: float = 0.4,
    feedback_docs: int = 0,
    feedback_terms: int = 20,
) -> list[float]:
    """The Okapi BM25 score of each document for the query (0.0 where nothing matches).

    The defaults (k1 0.9, b 0.4) are Anserini's. With `feedback_docs` > 0 the query is expanded
    by RM3 pseudo-relevance feedback (`feedback_terms` terms from the best `feedback_docs`
    documents of a first BM25 pass, mixed half and half with the query's own terms) and the
    documents are scored again with the expanded query.
    """
    terms = tokenize(query)
    if not terms or not documents:
        return [0.0] * len(documents)
    corpus = _Corpus.of(documents)
    scores = corpus.scores(dict.fromkeys(terms, 1.0), k1=k1, b=b)
    if feedback_docs <= 0 or not any(scores):
        return scores
    weights = corpus.expanded(terms, scores, docs=feedback_docs, terms=feedback_terms)
    return corpus.scores(weights, k1=k1, b=b)
