"""Scopes: validation and the digest that is the only form of a scope a store matches on.

A scope is 1–5 string key/value pairs (SPEC §3). Retrieval matches scopes exactly, so the store
never sees scope text in a query: it matches on `scope_key(scope)`, the sha256 of the canonical
JSON of the scope. Crafted keys or values (quotes, braces, `|`, unicode, very long strings) only
change the digest, never the query.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import NewType

from adk_memory.errors import InvalidArgument

__all__ = [
    "MAX_SCOPE_PAIRS",
    "MAX_SCOPE_TEXT",
    "ScopeKey",
    "profile_scope_key",
    "scope_key",
    "validate_scope",
]

ScopeKey = NewType("ScopeKey", str)
"""The hex sha256 of the canonical scope: what every store stores and matches on."""

MAX_SCOPE_PAIRS = 5
MAX_SCOPE_TEXT = 8192
"""Longest key or value accepted, in characters (a documented limit, not a Memory Bank rule)."""


def validate_scope(scope: object, *, field: str = "scope") -> dict[str, str]:
    """Returns the scope as a plain dict, or raises `InvalidArgument` saying what to fix."""
    if not isinstance(scope, Mapping):
        raise InvalidArgument(
            f"{field} must be a mapping of 1 to {MAX_SCOPE_PAIRS} string keys to string values, "
            'for example {"user_id": "123"}.',
            field=field,
        )
    if not 1 <= len(scope) <= MAX_SCOPE_PAIRS:
        raise InvalidArgument(
            f"{field} has {len(scope)} pairs; a scope needs between 1 and {MAX_SCOPE_PAIRS}.",
            field=field,
        )
    checked: dict[str, str] = {}
    for key, value in scope.items():
        if not isinstance(key, str) or not key:
            raise InvalidArgument(f"{field} keys must be non-empty strings.", field=field)
        if not isinstance(value, str) or not value:
            raise InvalidArgument(
                f"{field}[{key!r}] must be a non-empty string.", field=f"{field}.{key}"
            )
        try:
            (key + value).encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, e.g. a JSON "\ud800": not Unicode text
            raise InvalidArgument(
                f"{field} keys and values must be valid Unicode text (no lone surrogates).",
                field=field,
            ) from None
        if "*" in value:
            raise InvalidArgument(
                f"{field}[{key!r}] contains '*', which Memory Bank reserves; remove it.",
                field=f"{field}.{key}",
            )
        if len(key) > MAX_SCOPE_TEXT or len(value) > MAX_SCOPE_TEXT:
            raise InvalidArgument(
                f"{field} keys and values are limited to {MAX_SCOPE_TEXT} characters.",
                field=f"{field}.{key[:40]}",
            )
        checked[key] = value
    return checked


def scope_key(scope: Mapping[str, str]) -> ScopeKey:
    """The digest of the canonical scope (keys sorted); order of the pairs does not matter."""
    canonical = json.dumps(dict(sorted(scope.items())), ensure_ascii=False, separators=(",", ":"))
    return ScopeKey(hashlib.sha256(canonical.encode("utf-8")).hexdigest())


def profile_scope_key(scope: Mapping[str, str]) -> ScopeKey:
    """The digest under which a scope's structured profiles live, apart from its memories.

    Profiles are memories of type `STRUCTURED_PROFILE`; keeping them under their own key means
    every natural-language read (the default `memory_types`) excludes them with no extra filter.
    """
    return ScopeKey(hashlib.sha256(("profiles\x1f" + scope_key(scope)).encode("ascii")).hexdigest())
