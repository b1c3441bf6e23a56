"""Settings from the environment: the one module that reads environment variables.

It reads `ADK_MEMORY_*` and the credential variables google-genai reads (`GOOGLE_API_KEY`,
`GOOGLE_GENAI_USE_VERTEXAI`, ...), so every part judges credentials the same way.

Precedence everywhere: keyword arguments, then URI query parameters, then these variables, then
the defaults below.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from adk_memory.errors import InvalidArgument

__all__ = [
    "DEFAULT_ADK_BANK_ID",
    "DEFAULT_DATA_DIR",
    "DEFAULT_EMBEDDING_BATCH_SIZE",
    "api_keys_file",
    "cache_dir",
    "container_runtime",
    "default_adk_bank_id",
    "default_embedding_model",
    "default_search_timeout",
    "default_uri",
    "embedding_batch_size",
    "embedding_batch_window",
    "gemini_api_key_configured",
    "gemini_credentials_configured",
    "local_embedding_runtime",
    "genai_environment_fingerprint",
    "genai_uses_vertex",
    "page_token_secret",
    "server_api_key",
    "vertex_credentials_configured",
]

DEFAULT_DATA_DIR = Path.home() / ".adk-memory"
"""Where the embedded Chroma store lives when nothing else is configured."""


def default_uri() -> str:
    """`ADK_MEMORY_URI`, else embedded Chroma in `~/.adk-memory`.

    An `http://` or `https://` URI names an `adk-memory serve` to go through.
    """
    return os.environ.get("ADK_MEMORY_URI") or f"chroma://{DEFAULT_DATA_DIR}"


def default_search_timeout() -> str | None:
    """`ADK_MEMORY_SEARCH_TIMEOUT`: the ADK service's `search_timeout` in seconds, else None.

    For a loaded machine (a test suite) rather than production: checked as the option is.
    """
    return os.environ.get("ADK_MEMORY_SEARCH_TIMEOUT") or None


def default_embedding_model() -> str | None:
    """`ADK_MEMORY_EMBEDDING_MODEL` (e.g. `hash-64` for fast tests), else None (the default)."""
    return os.environ.get("ADK_MEMORY_EMBEDDING_MODEL") or None


def local_embedding_runtime() -> str:
    """`ADK_MEMORY_LOCAL_RUNTIME`: how all-MiniLM-L6-v2 runs, `auto` (its ONNX file) unless set.

    `openvino` or `onnxruntime` names the engine that runs the file; `sentence-transformers`
    runs the model on torch instead (the same vectors, a slower start).
    """
    return (os.environ.get("ADK_MEMORY_LOCAL_RUNTIME") or "auto").strip().lower()


def cache_dir() -> Path:
    """Where derived files that can be rebuilt live (the ONNX export of the default model).

    `ADK_MEMORY_CACHE_DIR`, else `$XDG_CACHE_HOME/adk-memory`, else `~/.cache/adk-memory`.
    """
    explicit = os.environ.get("ADK_MEMORY_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "adk-memory"


DEFAULT_EMBEDDING_BATCH_SIZE = 64
"""At most this many texts go into one call of a local embedding model (`embedding_batch`)."""


def embedding_batch_size() -> int:
    """`ADK_MEMORY_EMBEDDING_BATCH_SIZE`: texts per model call of concurrent embeddings (0: off).

    Raises:
        InvalidArgument: The variable is not a whole number of at least 0.
    """
    return int(_number("ADK_MEMORY_EMBEDDING_BATCH_SIZE", DEFAULT_EMBEDDING_BATCH_SIZE, whole=True))


def embedding_batch_window() -> float:
    """`ADK_MEMORY_EMBEDDING_BATCH_WINDOW_MS`, in seconds: how long an idle model awaits more texts.

    The default, 0, starts a call at once; texts arriving meanwhile form the next one.

    Raises:
        InvalidArgument: The variable is not a number of milliseconds from 0 to 1000.
    """
    return _number("ADK_MEMORY_EMBEDDING_BATCH_WINDOW_MS", 0, whole=False, limit=1000) / 1000


def _number(name: str, default: float, *, whole: bool, limit: float | None = None) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw) if whole else float(raw)
    except ValueError:
        value = -1
    if not 0 <= value <= (limit if limit is not None else float("inf")):
        kind = "a whole number" if whole else "a number"
        bound = f" from 0 to {limit:g}" if limit is not None else " of at least 0"
        raise InvalidArgument(f"{name} must be {kind}{bound}, got {raw[:40]!r}.", field=name)
    return value


def api_keys_file() -> str | None:
    """`ADK_MEMORY_API_KEYS_FILE`: the REST server's API key file (YAML or JSON), else None."""
    return os.environ.get("ADK_MEMORY_API_KEYS_FILE") or None


def page_token_secret() -> str | None:
    """`ADK_MEMORY_PAGE_TOKEN_SECRET`: the secret page tokens are sealed with, else None.

    Processes that share a store and must accept each other's page tokens (several servers
    behind one address) set the same one; without it each process draws its own.
    """
    return os.environ.get("ADK_MEMORY_PAGE_TOKEN_SECRET") or None


def server_api_key() -> str | None:
    """`ADK_MEMORY_API_KEY`: the key (or signed token) a client sends to an adk-memory server."""
    return os.environ.get("ADK_MEMORY_API_KEY") or None


_API_KEY_VARS = ("GOOGLE_API_KEY", "GEMINI_API_KEY")
_GENAI_ENV_VARS = (
    *_API_KEY_VARS,
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_ENTERPRISE",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
)


def _flag(name: str) -> bool | None:
    """A boolean variable read as google-genai reads it ("true" or "1"), None when unset."""
    value = os.environ.get(name)
    return None if value is None else value.strip().lower() in ("true", "1")


def genai_uses_vertex() -> bool:
    """Whether google-genai would use Vertex AI (GOOGLE_GENAI_USE_ENTERPRISE wins, as there)."""
    enterprise = _flag("GOOGLE_GENAI_USE_ENTERPRISE")
    if enterprise is not None:
        return enterprise
    return bool(_flag("GOOGLE_GENAI_USE_VERTEXAI"))


def gemini_api_key_configured() -> bool:
    """Whether `GOOGLE_API_KEY` or `GEMINI_API_KEY` is set."""
    return any(os.environ.get(name) for name in _API_KEY_VARS)


def gemini_credentials_configured() -> bool:
    """Whether the environment names credentials for Gemini (an API key or Vertex AI)."""
    if gemini_api_key_configured():
        return True
    return genai_uses_vertex() and bool(os.environ.get("GOOGLE_CLOUD_PROJECT"))


def genai_environment_fingerprint() -> str:
    """A digest of google-genai's credential variables: a changed environment changes it."""
    values = "\x00".join(os.environ.get(name, "\x01") for name in _GENAI_ENV_VARS)
    return hashlib.sha256(values.encode("utf-8")).hexdigest()


DEFAULT_ADK_BANK_ID = "adk-default"
"""The bank `adk_memory.adk.MemoryBankService` uses when none is named."""

_CONTAINER_ENV_MARKERS = {
    "GOOGLE_CLOUD_AGENT_ENGINE_ID": "Agent Runtime",
    "K_SERVICE": "Cloud Run",
    "KUBERNETES_SERVICE_HOST": "Kubernetes",
}
_CONTAINER_FILE_MARKERS = {"/.dockerenv": "Docker", "/run/.containerenv": "Podman"}


def default_adk_bank_id() -> str:
    """`ADK_MEMORY_BANK`: the bank ADK's memory service uses, else `adk-default`."""
    return os.environ.get("ADK_MEMORY_BANK") or DEFAULT_ADK_BANK_ID


def container_runtime() -> str | None:
    """The container platform this process appears to run on (e.g. "Agent Runtime"), else None.

    Read from the variables Agent Runtime, Cloud Run and Kubernetes set, then from the marker
    files Docker and Podman create.
    """
    for variable, platform in _CONTAINER_ENV_MARKERS.items():
        if os.environ.get(variable):
            return platform
    for marker, platform in _CONTAINER_FILE_MARKERS.items():
        if Path(marker).exists():
            return platform
    return None


def vertex_credentials_configured() -> bool:
    """Whether Vertex AI credentials are configured, judged without any network call.

    True when `GOOGLE_GENAI_USE_VERTEXAI` is on (the user vouches for the runtime, e.g. on Google
    Cloud), when `GOOGLE_APPLICATION_CREDENTIALS` is set, or when gcloud's application-default
    credentials file exists.
    """
    if genai_uses_vertex() or os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):
        return True
    config_dir = os.environ.get("CLOUDSDK_CONFIG") or str(Path.home() / ".config" / "gcloud")
    return (Path(config_dir) / "application_default_credentials.json").is_file()
