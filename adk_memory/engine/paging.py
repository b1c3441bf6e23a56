"""Opaque keyset page tokens: the position after a page's last item, bound to its query.

A token holds the last item's sort values (microseconds) and id, and a digest of them with the
query it came from (bank, scope, filter, order). The next page resumes strictly after that
position, so writes between two pages neither repeat nor skip an item, however deep the listing
goes. A token that is malformed, altered, of an older format, or reused with another query is
refused with `InvalidArgument`; a well-formed position can only ever select items of the query
the request itself names, so no token reaches another scope.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from adk_memory.errors import InvalidArgument

__all__ = [
    "Page",
    "Position",
    "decode_page_token",
    "encode_page_token",
    "from_micros",
    "micros",
    "page_after",
]

T = TypeVar("T")
_MAX_TOKEN_LENGTH = 4096
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MIN_MICROS = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
_MAX_MICROS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
_MAX_ITEM_ID = 256
_VERSION = 2


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of results and the token of the next page (None on the last page)."""

    items: list[T]
    next_page_token: str | None


@dataclass(frozen=True, slots=True)
class Position:
    """Where the next page starts: strictly after the item with these sort values and id."""

    values: tuple[datetime, ...]
    item_id: str


def micros(when: datetime) -> int:
    """Microseconds since the epoch (a naive datetime is taken as UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _EPOCH) // _MICROSECOND


def from_micros(value: int) -> datetime:
    """The UTC datetime of microseconds since the epoch."""
    return _EPOCH + value * _MICROSECOND


def _digest(fingerprint: str, values: list[int], item_id: str) -> str:
    payload = json.dumps([_VERSION, fingerprint, values, item_id], separators=(",", ":"))
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]


def encode_page_token(position: Position, fingerprint: str) -> str:
    """The token of the page after `position` in the listing `fingerprint` describes."""
    values = [micros(value) for value in position.values]
    raw = json.dumps(
        {"v": values, "i": position.item_id, "q": _digest(fingerprint, values, position.item_id)},
        separators=(",", ":"),
    )
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_page_token(token: str | None, fingerprint: str, keys: int) -> Position | None:
    """The position a token resumes after (None without a token).

    Args:
        token: The `next_page_token` of the previous page, or None/"" for the first page.
        fingerprint: The query's description; it must be the one the token was made with.
        keys: How many sort values the query's positions carry.
    """
    if not token:
        return None
    try:
        if not isinstance(token, str) or len(token) > _MAX_TOKEN_LENGTH:
            raise ValueError("not a token")
        data = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        values, item_id = data["v"], data["i"]
        if (
            not isinstance(values, list)
            or len(values) != keys
            or not all(type(v) is int and _MIN_MICROS <= v <= _MAX_MICROS for v in values)
            or not isinstance(item_id, str)
            or not 0 < len(item_id) <= _MAX_ITEM_ID
            or data["q"] != _digest(fingerprint, values, item_id)
        ):
            raise ValueError("foreign token")
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidArgument(
            "page_token is not a token this listing returned; pass the next_page_token of the "
            "previous page with the same scope, filter and order, or omit it to start over.",
            field="page_token",
        ) from None
    return Position(tuple(from_micros(value) for value in values), item_id)


def page_after(
    items: Sequence[T],
    *,
    page_size: int,
    token: str | None,
    fingerprint: str,
    position_of: Callable[[T], Position],
    descending: bool = False,
) -> Page[T]:
    """One keyset page of a listing held in memory, ordered by `position_of` (one sort value).

    `items` must be in order of (value, id), ascending or `descending`; the page holds the
    first `page_size` items strictly beyond the token's position.
    """
    after = decode_page_token(token, fingerprint, 1)
    if after is not None:
        cut = _rank(after)
        items = [
            item
            for item in items
            if (_rank(position_of(item)) < cut if descending else _rank(position_of(item)) > cut)
        ]
    chunk = list(items[:page_size])
    more = len(items) > page_size
    token = encode_page_token(position_of(chunk[-1]), fingerprint) if more and chunk else None
    return Page(chunk, token)


def _rank(position: Position) -> tuple[tuple[int, ...], str]:
    return tuple(micros(value) for value in position.values), position.item_id
