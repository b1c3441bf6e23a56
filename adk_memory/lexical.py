"""Lexical scoring for hybrid retrieval: a tokenizer and Okapi BM25 over one scope's facts.

Dense embeddings miss exact names, dates and rare words that a keyword match finds; BM25 finds
those and misses paraphrases. Hybrid retrieval (an opt-in bank extension) fuses both rankings.
This module is pure Python over a list of texts: no index, no I/O.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

__all__ = ["bm25_scores", "tokenize"]

_WORD = re.compile(r"[^\W_]+", re.UNICODE)
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
_SUFFIXES = ("ingly", "edly", "ings", "ing", "ied", "ies", "ed", "es", "ly", "s")


def _stem(word: str) -> str:
    """A light English suffix stripper: enough to match "paint", "painted", "paintings"."""
    if len(word) <= 4 or word.isdigit():
        return word
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            stem = word[: -len(suffix)]
            if suffix in ("ied", "ies"):
                return stem + "y"
            return stem
    return word


def tokenize(text: str) -> list[str]:
    """Lower-cased, stemmed word tokens without stopwords."""
    return [_stem(word) for word in _WORD.findall(text.lower()) if word not in _STOPWORDS]


def bm25_scores(
    query: str, documents: Sequence[str], *, k1: float = 0.9, b: float = 0.4
) -> list[float]:
    """The Okapi BM25 score of each document for the query (0.0 where nothing matches).

    The defaults (k1 0.9, b 0.4) are Anserini's, which ranked best on LoCoMo's short turns.
    """
    tokenized = [tokenize(document) for document in documents]
    terms = set(tokenize(query))
    if not terms or not tokenized:
        return [0.0] * len(documents)
    count = len(tokenized)
    average = sum(len(tokens) for tokens in tokenized) / count or 1.0
    frequency = Counter(term for tokens in tokenized for term in set(tokens) if term in terms)
    idf = {
        term: math.log(1.0 + (count - frequency[term] + 0.5) / (frequency[term] + 0.5))
        for term in terms
    }
    scores = []
    for tokens in tokenized:
        counts = Counter(tokens)
        norm = k1 * (1.0 - b + b * len(tokens) / average)
        scores.append(
            sum(
                idf[term] * counts[term] * (k1 + 1.0) / (counts[term] + norm)
                for term in terms
                if counts[term]
            )
        )
    return scores
