"""Fixtures of the Chroma backend's tests: one throwaway `chroma run` server per test session."""

from adk_memory.testing.servers import chroma_http_url

__all__ = ["chroma_http_url"]
