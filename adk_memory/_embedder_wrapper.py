"""`EmbedderWrapper`: the base of the embedders that wrap another one.

Kept apart from `adk_memory.embeddings` (numpy, the local models' loaders) so that telemetry,
which every client imports, does not import them: a client of an `adk-memory serve` loads no
embedding machinery. `adk_memory.embeddings` re-exports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from adk_memory.embeddings import Embedder

__all__ = ["EmbedderWrapper"]


class EmbedderWrapper:
    """An embedder around another (`inner`): its model, dimension and any other attribute.

    Subclasses override `embed_documents` and `embed_query` (`CheckedEmbedder`, telemetry's
    `TracingEmbedder`).
    """

    def __init__(self, inner: Embedder) -> None:
        """Wraps `inner` (and initialises the next class of a subclass's bases, if any)."""
        self.inner = inner
        super().__init__()

    @property
    def model(self) -> str:
        """The wrapped embedder's model name."""
        return self.inner.model

    @property
    def dimension(self) -> int:
        """The wrapped embedder's vector length."""
        return self.inner.dimension

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
