"""Cached embeddings: compute each text's vector once per model, serve it to the real engine.

Vectors live in `benchmarks/.cache/emb-<model>.npz` (gitignored), keyed by the sha256 of the
text; a model that embeds queries and documents differently (multilingual-e5-small's `query: ` /
`passage: ` prefixes) has one file per kind, `emb-<model>-query.npz` and `-passage.npz`.
A name may carry the runtime after an `@` (`all-MiniLM-L6-v2@openvino`, the default, and
`all-MiniLM-L6-v2@sentence-transformers`, the former default): each runtime's vectors have their
own file, and the bank records the model name before the `@`.
`CachedEmbedder` implements `adk_memory.embeddings.Embedder` from those files, so benchmarks go
through the real engine and stores without re-embedding thousands of texts on
every run; a text that is not cached is embedded live (and counted in `misses`).
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

CACHE_DIR = Path(__file__).resolve().parent / ".cache"


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


ASYMMETRIC_MODELS = frozenset({"multilingual-e5-small"})
"""Models whose query and document vectors of one text differ."""


def cache_file(model: str, kind: str = "passage") -> Path:
    suffix = f"-{kind}" if model in ASYMMETRIC_MODELS else ""
    return CACHE_DIR / f"emb-{re.sub(r'[^A-Za-z0-9._-]+', '_', model)}{suffix}.npz"


def bank_model(model: str) -> str:
    """The model name a bank records for a cache name (`all-MiniLM-L6-v2@openvino` -> before the @)."""
    return model.split("@", 1)[0]


def live_embedder(model: str, source: str):  # noqa: ANN201
    """The product's embedder for `model` (sentence-transformers models from `source`)."""
    from adk_memory.embeddings import LocalEmbedder, MultilingualE5Embedder, canonical_model_name

    if canonical_model_name(bank_model(model)) == "multilingual-e5-small":
        return MultilingualE5Embedder()
    runtime = model.split("@", 1)[1] if "@" in model else None
    return LocalEmbedder(source, runtime=runtime)


class VectorCache:
    """An on-disk map text-hash -> float32 unit vector for one model (and kind: query/passage)."""

    def __init__(self, model: str, kind: str = "passage") -> None:
        self.model = model
        self.path = cache_file(model, kind)
        self._index: dict[str, int] = {}
        self._rows: list[np.ndarray] = []
        if self.path.is_file():
            data = np.load(self.path)
            for i, key in enumerate(data["keys"].tolist()):
                self._index[key] = i
            self._rows = list(data["vectors"])

    def __len__(self) -> int:
        return len(self._index)

    def get(self, text: str) -> np.ndarray | None:
        i = self._index.get(text_key(text))
        return None if i is None else self._rows[i]

    def put_many(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        for text, row in zip(texts, vectors, strict=True):
            key = text_key(text)
            if key not in self._index:
                self._index[key] = len(self._rows)
                self._rows.append(np.asarray(row, dtype=np.float32))

    def save(self) -> None:
        CACHE_DIR.mkdir(parents=True, exist_ok=True)
        keys = np.array(sorted(self._index, key=self._index.__getitem__))
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, keys=keys, vectors=np.stack(self._rows) if self._rows else np.zeros((0, 1)))
        tmp.replace(self.path)

    def missing(self, texts: Sequence[str]) -> list[str]:
        seen: set[str] = set()
        out = []
        for text in texts:
            key = text_key(text)
            if key not in self._index and key not in seen:
                seen.add(key)
                out.append(text)
        return out


def fill(
    model: str,
    source: str,
    texts: Sequence[str],
    *,
    kind: str = "passage",
    log=print,
    batch: int = 256,
) -> float:
    """Embeds the texts the cache lacks with the product's embedder; returns seconds spent."""
    cache = VectorCache(model, kind)
    todo = cache.missing(texts)
    if not todo:
        return 0.0
    embedder = live_embedder(model, source)
    started = time.perf_counter()
    for start in range(0, len(todo), batch):
        chunk = todo[start : start + batch]
        vectors = asyncio.run(embedder._embed(chunk, query=kind == "query"))
        cache.put_many(chunk, np.asarray(vectors))
        cache.save()
        log(
            f"  embedded {start + len(chunk)}/{len(todo)} texts with {model} "
            f"({time.perf_counter() - started:.0f} s)"
        )
    return time.perf_counter() - started


class CachedEmbedder:
    """`Embedder` serving cached vectors (float64 tuples); live embedding for misses."""

    def __init__(self, model: str, dimension: int, source: str | None = None) -> None:
        self.model = bank_model(model)
        self.dimension = dimension
        self._name = model
        self._source = source or self.model
        self._caches = {kind: VectorCache(model, kind) for kind in ("query", "passage")}
        self.misses = 0
        self._live = None

    async def _lookup(self, texts: Sequence[str], kind: str) -> list[tuple[float, ...]]:
        out: list[tuple[float, ...] | None] = []
        todo = []
        for text in texts:
            row = self._caches[kind].get(text)
            out.append(None if row is None else tuple(row.astype(np.float64).tolist()))
            if row is None:
                todo.append(text)
        if todo:
            self.misses += len(todo)
            self._live = self._live or live_embedder(self._name, self._source)
            vectors = await self._live._embed(todo, query=kind == "query")
            live = dict(zip(todo, vectors, strict=True))
            out = [row if row is not None else live[t] for row, t in zip(out, texts, strict=True)]
        return out  # type: ignore[return-value]

    async def embed_documents(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        return await self._lookup(list(texts), "passage")

    async def embed_query(self, text: str) -> tuple[float, ...]:
        return (await self._lookup([text], "query"))[0]


def install(embedders: dict[str, CachedEmbedder]) -> None:
    """Makes the engine use `embedders[model]` for banks of those models (this process only)."""
    import adk_memory.engine.context as context
    from adk_memory.embeddings import canonical_model_name

    embedders = {canonical_model_name(name): e for name, e in embedders.items()}
    original = getattr(context.embedder_for, "original", context.embedder_for)

    def embedder_for(model, *, genai_client=None):  # noqa: ANN001, ANN202
        from adk_memory.embeddings import canonical_model_name

        name = canonical_model_name(model) if model else None
        if name in embedders:
            return embedders[name]
        return original(model, genai_client=genai_client)

    embedder_for.original = original  # type: ignore[attr-defined]
    context.embedder_for = embedder_for


def run(coro):  # noqa: ANN001, ANN201
    return asyncio.run(coro)
