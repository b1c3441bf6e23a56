"""Settings from the environment: the one module that reads `ADK_MEMORY_*` variables.

Precedence everywhere: keyword arguments, then URI query parameters, then these variables, then
the defaults below.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DEFAULT_DATA_DIR", "api_keys_file", "default_embedding_model", "default_uri"]

DEFAULT_DATA_DIR = Path.home() / ".adk-memory"
"""Where the embedded Chroma store lives when nothing else is configured."""


def default_uri() -> str:
    """`ADK_MEMORY_URI`, else embedded Chroma in `~/.adk-memory`."""
    return os.environ.get("ADK_MEMORY_URI") or f"chroma://{DEFAULT_DATA_DIR}"


def default_embedding_model() -> str | None:
    """`ADK_MEMORY_EMBEDDING_MODEL` (e.g. `hash-64` for fast tests), else None (the default)."""
    return os.environ.get("ADK_MEMORY_EMBEDDING_MODEL") or None


def api_keys_file() -> str | None:
    """`ADK_MEMORY_API_KEYS_FILE`: the REST server's API key file (YAML or JSON), else None."""
    return os.environ.get("ADK_MEMORY_API_KEYS_FILE") or None


def gemini_credentials_configured() -> bool:
    """Whether the environment names credentials for Gemini (an API key or Vertex AI)."""
    if os.environ.get("GOOGLE_API_KEY") or os.environ.get("GEMINI_API_KEY"):
        return True
    vertex = os.environ.get("GOOGLE_GENAI_USE_VERTEXAI", "").lower() in ("1", "true", "yes")
    return vertex and bool(os.environ.get("GOOGLE_CLOUD_PROJECT"))
