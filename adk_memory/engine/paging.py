"""Opaque page tokens: an offset bound to the query that produced it.

A token reused with a different scope, filter or order is refused with `InvalidArgument` rather
than silently returning a page of another listing.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from typing import Generic, TypeVar

from adk_memory.errors import InvalidArgument

__all__ = ["Page", "decode_page_token", "encode_page_token"]

T = TypeVar("T")
_MAX_TOKEN_LENGTH = 512


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of results and the token of the next page (None on the last page)."""

    items: list[T]
    next_page_token: str | None


def _digest(fingerprint: str) -> str:
    return hashlib.sha256(fingerprint.encode("utf-8")).hexdigest()[:16]


def encode_page_token(offset: int, fingerprint: str) -> str:
    """The token for the page that starts at `offset` of the query `fingerprint` describes."""
    raw = json.dumps({"o": offset, "q": _digest(fingerprint)}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_page_token(token: str | None, fingerprint: str) -> int:
    """The offset a token stands for (0 without a token)."""
    if not token:
        return 0
    try:
        if len(token) > _MAX_TOKEN_LENGTH:
            raise ValueError("too long")
        padded = token + "=" * (-len(token) % 4)
        data = json.loads(base64.urlsafe_b64decode(padded.encode()))
        offset = data["o"]
        if not isinstance(offset, int) or offset < 0 or data["q"] != _digest(fingerprint):
            raise ValueError("foreign token")
    except (ValueError, KeyError, TypeError):
        raise InvalidArgument(
            "page_token is not a token this listing returned; pass the next_page_token of the "
            "previous page with the same scope, filter and order, or omit it to start over.",
            field="page_token",
        ) from None
    return offset
