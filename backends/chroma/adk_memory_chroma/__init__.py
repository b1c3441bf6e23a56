"""Chroma storage backend for adk-memory: `chroma:///path` (embedded) and `chroma+http://host:port`.

Installed as the `adk-memory-chroma` distribution; adk-memory finds `ChromaMemoryStore` through
the `adk_memory.backends` entry points `chroma`, `chroma+http` and `chroma+https`.
"""

from __future__ import annotations

from adk_memory_chroma._config import ChromaStoreConfig
from adk_memory_chroma._store import ChromaMemoryStore

__all__ = ["ChromaMemoryStore", "ChromaStoreConfig"]
