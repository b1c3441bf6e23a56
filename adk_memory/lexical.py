"""Lexical scoring for hybrid retrieval: a tokenizer and Okapi BM25 over one scope's facts.

Dense embeddings miss exact names, dates and rare words that a keyword match finds; BM25 finds
those and misses paraphrases. Hybrid retrieval (an opt-in bank extension) fuses both rankings.
This module is pure Python, no I/O: `LexicalIndex` holds texts' terms and postings (the engine
caches one per scope, see `adk_memory.engine.lexical_cache`) and `Corpus` scores over indexes.
Tokenizing is a pure function of the text, so its results are cached per process (by the text
itself, which cannot go stale).

Each text is tokenized in its own language, guessed from the text alone (no configuration): German
and Spanish words get their Snowball stemmer and stopwords, everything else English's; scripts
written without spaces (Korean, Chinese, Japanese) become overlapping character bigrams, so a
Korean word still matches with a particle attached ("강아지는" shares "강아", "아지" with "강아지").
"""

from __future__ import annotations

import math
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Any

import numpy as np

__all__ = ["Corpus", "LexicalIndex", "best", "bm25_scores", "tokenize"]

_WORD = re.compile(r"[^\W_]+(?:['’][^\W_]+)*", re.UNICODE)
_ENGLISH_STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()
)
_GERMAN_STOPWORDS = frozenset(
    """aber alle allem allen aller alles als also am an ander andere anderem anderen anderer
    anderes auch auf aus bei bin bis bist da damit dann das dass dein deine deinem deinen deiner
    dem den denn der des dessen dich die dies diese diesem diesen dieser dieses dir doch dort du
    durch ein eine einem einen einer eines er es etwas euch euer eure für gegen gewesen hab habe
    haben hat hatte hatten hier hin hinter ich ihm ihn ihnen ihr ihre ihrem ihren ihrer im in
    ist ja jede jedem jeden jeder jedes jetzt kann kein keine keinem keinen keiner können man
    manche mein meine meinem meinen meiner mich mir mit muss nach nicht nichts noch nun nur ob
    oder ohne sehr sein seine seinem seinen seiner seit sich sie sind so solche soll sondern um
    und uns unser unsere unter viel vom von vor war waren warum was weil welche welchem welchen
    welcher welches wenn wer werde werden wie wieder will wir wird wo wurde würde zu zum zur
    zwischen""".split()
)
_SPANISH_STOPWORDS = frozenset(
    """a al algo algunas algunos ante antes como con contra cual cuando de del desde donde
    durante e el ella ellas ellos en entre era eran es esa esas ese eso esos esta estaba estas
    este esto estos estoy está están fue fueron ha han hasta hay la las le les lo los me mi mis
    mucho muy más mí nada ni no nos nosotros o otra otras otro otros para pero poco por porque
    que quien qué se sea ser si sin sobre son su sus también te tengo tiene tienen tu tus tú un
    una uno unos y ya yo cómo cuál cuándo dónde cuántos cuántas él""".split()
)
_GERMAN_LETTERS = frozenset("äöüß")
_SPANISH_LETTERS = frozenset("ñáéíóú¿¡")
_STOPWORDS = {
    "english": _ENGLISH_STOPWORDS,
    "german": _GERMAN_STOPWORDS,
    "spanish": _SPANISH_STOPWORDS,
}
_UNSPACED = re.compile(
    r"[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af]"
)
"""Hangul, kana and CJK ideographs: scripts that do not put spaces between words."""
_KOREAN_STOP_BIGRAMS = frozenset(
    """제 저 저는 저도 제가 저희 우리 나는 내가 뭐 뭐예 무엇 어디 언제 누구 예요 에요 이에 어요
    아요 워요 져요 네요 해요 세요 니다 습니 있어 있습 있나 인가 나요 가요 까요 죠""".split()
)
"""Korean pronouns, question words and polite verb endings: in nearly every sentence, they
would let a question match a fact it shares nothing else with."""
_CACHED_TEXTS = 16_384
_CACHED_TEXT_CHARS = 1_024
"""Longer texts are tokenized on every call, so the cache stays bounded though a fact may hold
100,000 characters: ~20 MB when full of sentence-long facts, ~75 MB at worst."""
_ORIGINAL_QUERY_WEIGHT = 0.5
"""RM3's share of the original query terms against the feedback terms (Anserini's default)."""
_local = threading.local()


def _stemmer(language: str) -> Any:
    # Snowball stemmers keep state while stemming a word: one per thread and language.
    stemmers: dict[str, Any] | None = getattr(_local, "stemmers", None)
    if stemmers is None:
        stemmers = _local.stemmers = {}
    stemmer = stemmers.get(language)
    if stemmer is None:
        # Imported here: the package loads every language's stemmer (~0.1 s), which a process
        # that never searches lexically (a CLI command, a dense bank) should not pay.
        import snowballstemmer  # type: ignore[import-untyped]

        stemmer = stemmers[language] = snowballstemmer.stemmer(language)
    return stemmer


@lru_cache(maxsize=65_536)
def _stem(word: str, language: str) -> str:
    """The Snowball stem: in English "paint", "painted", "paintings" all give "paint"."""
    return str(_stemmer(language).stemWord(word))


def _language(text: str, words: Sequence[str]) -> str:
    """The Snowball language of a lower-cased text: "german", "spanish" or "english".

    Each language scores its distinct stopwords in the text (German and Spanish also their
    letters, "ß", "ñ", "é"...); German or Spanish needs a sign and a higher score than English,
    which keeps every text without such signs, and every ordinary English sentence, English.
    """
    distinct = set(words)
    english = len(distinct & _ENGLISH_STOPWORDS)
    german = len(distinct & _GERMAN_STOPWORDS) + sum(letter in _GERMAN_LETTERS for letter in text)
    spanish = len(distinct & _SPANISH_STOPWORDS) + sum(
        letter in _SPANISH_LETTERS for letter in text
    )
    best, score = max(("german", german), ("spanish", spanish), key=lambda item: item[1])
    return best if score > english else "english"


def _bigrams(word: str) -> list[str]:
    """Overlapping character pairs of a word in an unspaced script; the word if one character."""
    return [word[i : i + 2] for i in range(len(word) - 1)] or [word]


def _word(raw: str) -> str:
    """Drops a possessive "'s" and other apostrophes: "mel's" -> "mel", "don't" -> "dont"."""
    word = raw.replace("’", "'")
    if word.endswith("'s"):
        word = word[:-2]
    return word.replace("'", "")


def tokenize(text: str) -> list[str]:
    """Lower-cased tokens without stopwords or possessives, in the text's language.

    English, German and Spanish words are Snowball-stemmed; Korean, Chinese and Japanese words
    become character bigrams.
    """
    return list(_tokenize(text))


def _tokenize(text: str) -> tuple[str, ...]:
    lowered = text.lower()
    words = [word for word in map(_word, _WORD.findall(lowered)) if word]
    language = _language(lowered, words)
    stopwords = _STOPWORDS[language]
    tokens: list[str] = []
    for word in words:
        if _UNSPACED.search(word):
            tokens.extend(gram for gram in _bigrams(word) if gram not in _KOREAN_STOP_BIGRAMS)
        elif word not in stopwords:
            tokens.append(_stem(word, language))
    return tuple(tokens)


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
class LexicalIndex:
    """Documents as BM25 reads them: lengths, term counts, and per term its postings.

    Scoring reads the postings of the query's terms only (as arrays), so its cost follows how
    many documents hold them, not how many there are.
    """

    lengths: np.ndarray
    """Each document's length in tokens (int64)."""
    counts: tuple[Mapping[str, int], ...]
    """Each document's count of each of its distinct terms (RM3 reads its top documents')."""
    postings: Mapping[str, tuple[np.ndarray, np.ndarray]]
    """Per term, the documents holding it (ascending, int64) and its count in each (float64)."""
    total_length: int

    @classmethod
    def of(cls, texts: Iterable[str]) -> LexicalIndex:
        """The index of `texts`; document `i` is the `i`-th text."""
        lengths: list[int] = []
        counts: list[Mapping[str, int]] = []
        postings: defaultdict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([], []))
        for doc, text in enumerate(texts):
            length, terms = _terms(text)
            lengths.append(length)
            counts.append(terms)
            for term, count in terms.items():
                docs, found = postings[term]
                docs.append(doc)
                found.append(count)
        arrays = {
            term: (np.asarray(docs, dtype=np.int64), np.asarray(found, dtype=np.float64))
            for term, (docs, found) in postings.items()
        }
        return cls(np.asarray(lengths, dtype=np.int64), tuple(counts), arrays, sum(lengths))

    def __len__(self) -> int:
        return len(self.counts)


@dataclass(frozen=True, slots=True)
class _Part:
    """One index in a corpus: where its documents start, and which of them count."""

    index: LexicalIndex
    offset: int
    kept: np.ndarray | None
    """A mask of the documents in the corpus; None when all are."""
    excluded_length: int


class Corpus:
    """Indexes read as one corpus in their order, each less its excluded documents.

    A document's position is its place in that order (the first index's documents, then the
    next's): scores come as one array by position, and equal scores rank by position, as the
    documents of one list would. Scores are exactly those of BM25 over the list of the kept
    documents (every operation is the same IEEE double operation, in the same order).
    """

    def __init__(self, parts: Sequence[tuple[LexicalIndex, np.ndarray | None]]) -> None:
        """`parts`: each index with a boolean mask of the documents that count (None: all).

        The others (expired, say, or outside a filter) are as if absent, statistics included.
        """
        self._parts: list[_Part] = []
        self.size = 0
        """How many positions (kept or not) the corpus has."""
        self._documents = 0
        for index, kept in parts:
            left_out = int(index.lengths[~kept].sum()) if kept is not None else 0
            self._parts.append(_Part(index, self.size, kept, left_out))
            self.size += len(index)
            self._documents += len(index) if kept is None else int(np.count_nonzero(kept))

    def scores(self, weights: Mapping[str, float], *, k1: float, b: float) -> np.ndarray:
        """The BM25 score at every position for weighted query terms (0.0: no term held)."""
        scores = np.zeros(self.size)
        if self._documents <= 0:
            return scores
        total = sum(part.index.total_length - part.excluded_length for part in self._parts)
        average = total / self._documents or 1.0
        norms = [k1 * (1.0 - b + b * part.index.lengths / average) for part in self._parts]
        for term, weight in weights.items():
            hits = [self._hits(part, term) for part in self._parts]
            found = sum(len(docs) for docs, _ in hits)
            idf = weight * math.log(1.0 + (self._documents - found + 0.5) / (found + 0.5))
            for part, norm, (docs, counts) in zip(self._parts, norms, hits, strict=True):
                scores[part.offset + docs] += idf * counts * (k1 + 1.0) / (counts + norm[docs])
        return scores

    @staticmethod
    def _hits(part: _Part, term: str) -> tuple[np.ndarray, np.ndarray]:
        docs, counts = part.index.postings.get(term, (_NO_DOCS, _NO_COUNTS))
        if part.kept is None:
            return docs, counts
        kept = part.kept[docs]
        return docs[kept], counts[kept]

    def _document(self, position: int) -> tuple[LexicalIndex, int]:
        for part in reversed(self._parts):
            if position >= part.offset:
                return part.index, position - part.offset
        raise IndexError(position)

    def expanded(
        self, query: Sequence[str], scores: np.ndarray, *, docs: int, terms: int
    ) -> dict[str, float]:
        """RM3: the query's terms mixed with the top terms of its best `docs` documents.

        Each top document contributes its term frequencies (relative to its length) weighted by
        its share of the top documents' scores; the `terms` heaviest terms are kept.
        """
        top = best(scores, docs, lambda position: position)
        total = sum(float(scores[position]) for position in top)
        relevance: defaultdict[str, float] = defaultdict(float)
        for position in top:
            index, doc = self._document(position)
            share = float(scores[position]) / total / (int(index.lengths[doc]) or 1)
            for term, frequency in index.counts[doc].items():
                relevance[term] += frequency * share
        chosen = sorted(relevance.items(), key=lambda item: (-item[1], item[0]))[:terms]
        mass = sum(value for _, value in chosen) or 1.0
        weights: defaultdict[str, float] = defaultdict(float)
        for term in query:
            weights[term] += _ORIGINAL_QUERY_WEIGHT / len(query)
        for term, value in chosen:
            weights[term] += (1.0 - _ORIGINAL_QUERY_WEIGHT) * value / mass
        return dict(weights)

    def bm25(
        self,
        query: str,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        feedback_docs: int = 0,
        feedback_terms: int = 20,
    ) -> np.ndarray:
        """The Okapi BM25 score at every position (0.0 where nothing matches).

        The defaults (k1 0.9, b 0.4) are Anserini's. With `feedback_docs` > 0 the query is
        expanded by RM3 pseudo-relevance feedback (`feedback_terms` terms from the best
        `feedback_docs` documents of a first BM25 pass, mixed half and half with the query's own
        terms) and the documents are scored again with the expanded query.
        """
        terms = tokenize(query)
        if not terms:
            return np.zeros(self.size)
        scores = self.scores(dict.fromkeys(terms, 1.0), k1=k1, b=b)
        if feedback_docs <= 0 or not scores.any():
            return scores
        weights = self.expanded(terms, scores, docs=feedback_docs, terms=feedback_terms)
        return self.scores(weights, k1=k1, b=b)


_NO_DOCS = np.empty(0, dtype=np.int64)
_NO_COUNTS = np.empty(0, dtype=np.float64)


def best(scores: np.ndarray, count: int, tiebreak: Callable[[int], Any]) -> list[int]:
    """The positions of the `count` highest positive scores, equal scores by `tiebreak`."""
    positive = np.flatnonzero(scores > 0)
    if count <= 0:
        return []
    if len(positive) > count:
        cut = np.partition(scores[positive], len(positive) - count)[len(positive) - count]
        positive = positive[scores[positive] >= cut]  # ties at the cut stay in
    ranked = sorted(positive.tolist(), key=lambda position: (-scores[position], tiebreak(position)))
    return ranked[:count]


def bm25_scores(
    query: str,
    documents: Sequence[str],
    *,
    k1: float = 0.9,
    b: float = 0.4,
    feedback_docs: int = 0,
    feedback_terms: int = 20,
) -> list[float]:
    """`Corpus.bm25` of one list of texts, as a score per text (0.0 where nothing matches)."""
    corpus = Corpus(((LexicalIndex.of(documents), None),))
    scores = corpus.bm25(
        query, k1=k1, b=b, feedback_docs=feedback_docs, feedback_terms=feedback_terms
    )
    return [float(score) for score in scores]
