"""The range of every duration and timestamp a request may carry, checked in one place.

Durations (a memory's `ttl` and `revision_ttl`, a bank's default and granular TTLs, generation
triggers' intervals) are positive and at most `MAX_DURATION`, so `now + duration` is always a
time every store can hold. Timestamps (`expire_time`, `revision_expire_time`, metadata and filter
times) lie within protobuf's `Timestamp` range. A value outside is `InvalidArgument` naming the
field and the bound, never an `OverflowError`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from adk_memory.errors import InvalidArgument

__all__ = [
    "LATEST_EVENT",
    "MAX_DURATION",
    "MAX_TIME",
    "MIN_TIME",
    "TIME_RANGE",
    "bounded_duration",
    "bounded_event_time",
    "bounded_time",
]

MAX_DURATION = timedelta(days=36_525)
"""The longest duration accepted: 100 years (3155760000s)."""
MIN_TIME = datetime(1, 1, 1, tzinfo=UTC)
MAX_TIME = datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
_MAX_SECONDS = Decimal(int(MAX_DURATION.total_seconds()))
TIME_RANGE = "0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z"


def bounded_duration(seconds: Decimal | timedelta, *, field: str) -> timedelta:
    """The duration if it is positive and at most `MAX_DURATION`."""
    too_long = seconds > MAX_DURATION if isinstance(seconds, timedelta) else seconds > _MAX_SECONDS
    if too_long:
        raise InvalidArgument(
            f"{field} must be at most {int(_MAX_SECONDS)}s (100 years); omit it for no expiry.",
            field=field,
        )
    duration = seconds if isinstance(seconds, timedelta) else timedelta(seconds=float(seconds))
    if duration <= timedelta(0):
        raise InvalidArgument(f"{field} must be positive (at least 1 microsecond).", field=field)
    return duration


def bounded_time(value: datetime, *, field: str) -> datetime:
    """The time as an aware UTC datetime (a naive one is taken as UTC), if within range."""
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidArgument(
            f"{field} is outside the timestamps accepted ({TIME_RANGE}).", field=field
        ) from None


LATEST_EVENT = MAX_TIME - MAX_DURATION
"""The latest time a record may say something happened at (a create or update, a stream's
event or flush): any duration added to it stays within range. Only imports carry such times;
the engine takes them from its clock."""


def bounded_event_time(value: datetime, *, field: str) -> datetime:
    """`bounded_time`, for a time something happened at: at most `LATEST_EVENT`."""
    checked = bounded_time(value, field=field)
    if checked > LATEST_EVENT:
        raise InvalidArgument(
            f"{field} lies after {LATEST_EVENT.date().isoformat()}; a time something happened "
            "at must leave room for the longest duration after it.",
            field=field,
        )
    return checked
