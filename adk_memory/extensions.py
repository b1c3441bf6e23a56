"""Bank-level extensions of our own: settings the official SDK's closed config models cannot hold.

Stored beside the bank's Memory Bank config (under the key `adk_memory` of the bank record's
config JSON, which every store keeps verbatim) and returned by `MemoryBanks.get_extensions`;
over REST they travel as the ReasoningEngine field `adkMemoryExtensions`.
Memory Bank's semantics are the default; an extension only changes behaviour when set.

```python
client.memory_banks.create(extensions={"retrieval": {"mode": "hybrid"}})
```
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EXTENSIONS_KEY", "EXTENSIONS_REST_FIELD", "BankExtensions", "RetrievalConfig"]

EXTENSIONS_KEY = "adk_memory"
EXTENSIONS_REST_FIELD = "adkMemoryExtensions"
"""The ReasoningEngine field that carries a bank's extensions over REST (the SDK ignores it)."""


class RetrievalConfig(BaseModel):
    """How similarity search ranks memories."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: Literal["dense", "hybrid"] = "dense"
    """`dense`: Memory Bank's ranking by Euclidean distance of the embeddings. `hybrid`: the
    dense ranking fused with a lexical ranking of the scope's facts (BM25 over Snowball-stemmed
    words, with RM3 query expansion); results are ordered by the fused score and `distance`
    still carries the true Euclidean distance, so it need not be ascending."""
    fusion: Literal["convex", "rrf"] = "convex"
    """`convex`: a weighted sum of both scores, each min-max normalised over the candidates.
    `rrf`: weighted reciprocal rank fusion. On LoCoMo (benchmarks/) convex fusion ranks better."""
    lexical_weight: float = Field(default=0.5, ge=0.0, le=1.0)
    """In hybrid mode, the weight of the lexical side (the dense side gets the rest)."""
    rrf_k: int = Field(default=10, ge=1, le=1000)
    """With `rrf`, the rank offset: smaller favours the top of each ranking."""
    candidates: int = Field(default=100, ge=1, le=1000)
    """How many candidates each ranking contributes before fusion."""
    feedback_docs: int = Field(default=3, ge=0, le=100)
    """RM3 pseudo-relevance feedback on the lexical side: the query is expanded with terms of
    this many best BM25 hits, and the scope scored again, before fusion. 0 turns it off."""
    feedback_terms: int = Field(default=20, ge=1, le=1000)
    """With feedback, how many expansion terms join the query (together weighted as much as
    the query's own terms)."""


class BankExtensions(BaseModel):
    """Every extension of a bank."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    retrieval: RetrievalConfig = Field(default_factory=RetrievalConfig)
