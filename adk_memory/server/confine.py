"""Confining a caller bound to a scope to the memories of that scope (REST routes and MCP tools).

Requests that name a scope are checked with `Principal.check_scope`, listings and purges get
`Principal.confine_filter`; a request that names a memory passes `load_in_scope`, which answers a
memory of another scope exactly as a memory that does not exist.
"""

from __future__ import annotations

from adk_memory import types
from adk_memory._async_client import AsyncClient
from adk_memory.errors import NotFound, PermissionDenied
from adk_memory.server.auth import Principal

__all__ = ["load_in_scope"]


async def load_in_scope(client: AsyncClient, principal: Principal, name: str) -> types.Memory:
    """The memory `name`, if it is live and in the caller's scope.

    Raises:
        NotFound: The memory does not exist, has expired, or belongs to a scope the caller may
            not see (the same answer, so that a bound key learns nothing about other scopes).
    """
    memory = await client.memory_banks.memories.get(name=name)
    try:
        principal.check_scope(memory.scope)
    except PermissionDenied:
        raise NotFound(
            f"Memory {memory.name!r} does not exist or has expired.", field="name"
        ) from None
    return memory
