"""Expiry of memories and revisions: the TTL precedence rules of SPEC §3 "TTL" (seed 004).

A memory's expiry comes from the request (`ttl` or `expire_time`, never both), else the bank's
`granular_ttl_config` entry for the operation, else the bank's `default_ttl`, else none. An
operation the granular config does not name leaves an existing expiry unchanged. Revisions expire
after the request's `revision_ttl`/`revision_expire_time`, else the bank's
`memory_revision_default_ttl`, else 365 days.
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum

from adk_memory import types
from adk_memory.engine.context import DEFAULT_REVISION_TTL
from adk_memory.engine.convert import parse_duration, to_utc
from adk_memory.errors import InvalidArgument

__all__ = ["Action", "UNCHANGED", "memory_expiry", "revision_expiry"]


class Action(str, Enum):
    """The operation a TTL is computed for (names the granular TTL that applies)."""

    CREATE = "create_ttl"
    UPDATE = ""
    GENERATE_CREATED = "generate_created_ttl"
    GENERATE_UPDATED = "generate_updated_ttl"


class _Unchanged:
    def __repr__(self) -> str:
        return "UNCHANGED"


UNCHANGED = _Unchanged()
"""Returned when nothing applies to an update: keep the memory's current expiry."""


def memory_expiry(
    *,
    now: datetime,
    action: Action,
    ttl: object = None,
    expire_time: datetime | None = None,
    bank_ttl: types.ReasoningEngineContextSpecMemoryBankConfigTtlConfig | None,
    field_prefix: str = "config",
) -> datetime | None | _Unchanged:
    """The expiry for a memory written by `action`, or UNCHANGED for an update without TTL."""
    if ttl is not None and expire_time is not None:
        raise InvalidArgument(
            f"{field_prefix} sets both ttl and expire_time; set one of them.",
            field=f"{field_prefix}.ttl",
        )
    duration = parse_duration(ttl, field=f"{field_prefix}.ttl")
    if duration is not None:
        return now + duration
    if expire_time is not None:
        return to_utc(expire_time, field=f"{field_prefix}.expire_time")
    if bank_ttl is not None and bank_ttl.granular_ttl_config is not None:
        granular = (
            getattr(bank_ttl.granular_ttl_config, action.value, None) if action.value else None
        )
        bank_duration = parse_duration(
            granular, field=f"ttl_config.granular_ttl_config.{action.value}"
        )
        return now + bank_duration if bank_duration else _default_for(action)
    if bank_ttl is not None and bank_ttl.default_ttl:
        default = parse_duration(bank_ttl.default_ttl, field="ttl_config.default_ttl")
        return now + default if default else None
    return _default_for(action)


def _default_for(action: Action) -> None | _Unchanged:
    return None if action in (Action.CREATE, Action.GENERATE_CREATED) else UNCHANGED


def revision_expiry(
    *,
    now: datetime,
    revision_ttl: object = None,
    revision_expire_time: datetime | None = None,
    bank_ttl: types.ReasoningEngineContextSpecMemoryBankConfigTtlConfig | None,
    field_prefix: str = "config",
) -> datetime:
    """When a revision written now expires."""
    if revision_ttl is not None and revision_expire_time is not None:
        raise InvalidArgument(
            f"{field_prefix} sets both revision_ttl and revision_expire_time; set one.",
            field=f"{field_prefix}.revision_ttl",
        )
    duration = parse_duration(revision_ttl, field=f"{field_prefix}.revision_ttl")
    if duration is not None:
        return now + duration
    if revision_expire_time is not None:
        expiry = to_utc(revision_expire_time, field=f"{field_prefix}.revision_expire_time")
        assert expiry is not None
        return expiry
    bank_default = bank_ttl.memory_revision_default_ttl if bank_ttl else None
    return now + (
        parse_duration(bank_default, field="ttl_config.memory_revision_default_ttl")
        or DEFAULT_REVISION_TTL
    )
