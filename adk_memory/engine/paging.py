"""Opaque keyset page tokens: the position after a page's last item, sealed for one caller.

A token holds the last item's sort values (microseconds) and id, encrypted and authenticated
with AES-256-GCM (the `cryptography` package) under the process's page-token key; the query it
came from (bank, scope, filter, order) and the caller it was given to (`token_audience`, set by
the servers to the API key and bound scope) are its associated data, so the token reveals
nothing of what it points at and opens only for the same query and the same caller. The next
page resumes strictly after that position, so writes between two pages neither repeat nor skip
an item, however deep the listing goes. A token that is malformed, altered, truncated, sealed
under another key, of an older format, reused with another query or presented by another
caller is refused with `InvalidArgument`.

The key: HKDF-SHA256 of `ADK_MEMORY_PAGE_TOKEN_SECRET` when it is set (every process that shares
a store and must accept the others' tokens sets the same secret), else 32 random bytes drawn once
per process (tokens then outlive neither the process nor reach another one: a caller starts the
listing over).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Generic, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from adk_memory.errors import FailedPrecondition, InvalidArgument
from adk_memory.settings import page_token_secret

__all__ = [
    "Page",
    "Position",
    "decode_page_token",
    "encode_page_token",
    "from_micros",
    "micros",
    "page_after",
    "token_audience",
    "tokens_for",
]

T = TypeVar("T")
_MAX_TOKEN_LENGTH = 4096
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)
_MIN_MICROS = (datetime.min.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
_MAX_MICROS = (datetime.max.replace(tzinfo=UTC) - _EPOCH) // _MICROSECOND
_MAX_ITEM_ID = 256
_VERSION = 3
_NONCE_BYTES = 12
_MIN_SECRET_LENGTH = 32
_PROCESS_KEY = AESGCM.generate_key(bit_length=256)
"""The key when no secret is configured: drawn once, so every client of the process shares it."""

token_audience: ContextVar[str] = ContextVar("adk_memory_page_token_audience", default="")
"""Who the page tokens made and accepted in this context belong to ("" in embedded use); the
servers set it to the caller's key and bound scope for each request (`tokens_for`)."""


@contextmanager
def tokens_for(audience: str) -> Iterator[None]:
    """Page tokens made and accepted inside the block belong to `audience` only."""
    reset = token_audience.set(audience)
    try:
        yield
    finally:
        token_audience.reset(reset)


@functools.lru_cache(maxsize=4)
def _aead(secret: str | None) -> AESGCM:
    if secret is None:
        return AESGCM(_PROCESS_KEY)
    if len(secret) < _MIN_SECRET_LENGTH:
        raise FailedPrecondition(
            f"ADK_MEMORY_PAGE_TOKEN_SECRET has {len(secret)} characters; page tokens need a "
            f"secret of at least {_MIN_SECRET_LENGTH} (e.g. the output of `openssl rand -hex "
            "32`), the same in every process that shares the store.",
            field="ADK_MEMORY_PAGE_TOKEN_SECRET",
        )
    hkdf = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"adk-memory page tokens")
    return AESGCM(hkdf.derive(secret.encode("utf-8")))


def _associated(fingerprint: str) -> bytes:
    return json.dumps([_VERSION, fingerprint, token_audience.get()]).encode("utf-8")


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


def encode_page_token(position: Position, fingerprint: str) -> str:
    """The sealed token of the page after `position` in the listing `fingerprint` describes."""
    values = [micros(value) for value in position.values]
    plain = json.dumps({"v": values, "i": position.item_id}, separators=(",", ":")).encode()
    nonce = os.urandom(_NONCE_BYTES)
    sealed = _aead(page_token_secret()).encrypt(nonce, plain, _associated(fingerprint))
    return base64.urlsafe_b64encode(nonce + sealed).decode().rstrip("=")


def decode_page_token(token: str | None, fingerprint: str, keys: int) -> Position | None:
    """The position a token resumes after (None without a token).

    Args:
        token: The `next_page_token` of the previous page, or None/"" for the first page.
        fingerprint: The query's description; it must be the one the token was made with.
        keys: How many sort values the query's positions carry.
    """
    if not token:
        return None
    aead = _aead(page_token_secret())  # a misconfigured secret is not the caller's fault
    try:
        if not isinstance(token, str) or len(token) > _MAX_TOKEN_LENGTH:
            raise ValueError("not a token")
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        nonce, sealed = raw[:_NONCE_BYTES], raw[_NONCE_BYTES:]
        data = json.loads(aead.decrypt(nonce, sealed, _associated(fingerprint)))
        values, item_id = data["v"], data["i"]
        if (
            not isinstance(values, list)
            or len(values) != keys
            or not all(type(v) is int and _MIN_MICROS <= v <= _MAX_MICROS for v in values)
            or not isinstance(item_id, str)
            or not 0 < len(item_id) <= _MAX_ITEM_ID
        ):
            raise ValueError("foreign token")
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError, InvalidTag):
        raise InvalidArgument(
            "page_token is not a token this listing returned to this caller; pass the "
            "next_page_token of the previous page with the same scope, filter and order (and "
            "the same key), or omit it to start over.",
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
