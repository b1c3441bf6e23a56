"""Confining a caller bound to a scope to the memories of that scope (REST routes and MCP tools).

Requests that name a scope are checked with `Principal.check_scope`, listings and purges get
`Principal.confine_filter`; a request that names a memory passes `load_in_scope`, which answers a
memory of another scope exactly as a memory that does not exist (REST: a scope that carries the
key's entries; MCP: exactly the bound scope).
"""

from __future__ import annotations

from collections.abc import Callable

from adk_memory import types
from adk_memory._async_client import AsyncClient
from adk_memory.errors import NotFound

__all__ = ["load_in_scope"]


async def load_in_scope(
    client: AsyncClient, name: str, allowed: Callable[[dict[str, str]], bool]
) -> types.Memory:
    """The memory `name`, if it is live and its scope is `allowed`.

    Raises:
        NotFound: The memory does not exist, has expired, or belongs to a scope the caller may
            not see (the same answer, so that a bound key learns nothing about other scopes).
    """
    memory = await client.memory_banks.memories.get(name=name)
    if not allowed(memory.scope or {}):
        raise NotFound(f"Memory {memory.name!r} does not exist or has expired.", field="name")
    return memory
