"""The older `agent_engines` surface's shared parts, for the in-process and the http(s) client.

What `agent_engines.create/get/update` return (`AgentEngine`), how their `config` names a bank's
config (`engine_config`), and the flat memory helpers of the oldest SDK, each the `memories`
method of the same request. Nothing here reaches the engine or the network.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from adk_memory import types
from adk_memory._pagers import AsyncPager
from adk_memory._validation import parse_model
from adk_memory.errors import InvalidArgument, Unimplemented
from adk_memory.telemetry import traced_resource

__all__ = ["AgentEngine", "FlatMemoryHelpers", "engine_config"]


class AgentEngine(BaseModel):
    """What `agent_engines.create/get/update` return: the resource under `api_resource`."""

    api_resource: types.ReasoningEngine


_DEPLOYMENT_FIELDS = (
    "agent_engine",
    "agent",
    "staging_bucket",
    "requirements",
    "extra_packages",
    "env_vars",
    "gcs_dir_name",
)


@traced_resource("agent_engines")
class FlatMemoryHelpers:
    """The flat memory helpers of the oldest SDK, on any surface with a `memories` resource."""

    memories: Any

    async def get_memory(self, *, name: str, config: Any = None) -> types.Memory:
        """`memories.get`."""
        return await self.memories.get(name=name, config=config)

    async def list_memories(self, *, name: str, config: Any = None) -> AsyncPager[types.Memory]:
        """`memories.list`."""
        pager: AsyncPager[types.Memory] = await self.memories.list(name=name, config=config)
        return pager

    async def retrieve_memories(
        self, **kwargs: Any
    ) -> AsyncPager[types.RetrieveMemoriesResponseRetrievedMemory]:
        """`memories.retrieve`."""
        pager: AsyncPager[types.RetrieveMemoriesResponseRetrievedMemory]
        pager = await self.memories.retrieve(**kwargs)
        return pager

    async def create_memory(self, **kwargs: Any) -> types.MemoryOperation:
        """`memories.create`."""
        return await self.memories.create(**kwargs)

    async def delete_memory(self, **kwargs: Any) -> types.DeleteMemoryOperation:
        """`memories.delete`."""
        return await self.memories.delete(**kwargs)

    async def generate_memories(self, **kwargs: Any) -> types.GenerateMemoriesOperation:
        """`memories.generate`."""
        return await self.memories.generate(**kwargs)


def engine_config(config: Any, agent: Any) -> tuple[Any, str | None, str | None]:
    """(The bank config, display name, description) of an `agent_engines` create or update.

    Raises:
        Unimplemented: The config asks for agent deployment.
        InvalidArgument: Unknown fields, or a bank config Memory Bank would refuse to parse.
    """
    data = (
        dict(config or {})
        if not isinstance(config, BaseModel)
        else config.model_dump(exclude_none=True)
    )
    deployment = [field for field in _DEPLOYMENT_FIELDS if data.get(field)] + (
        ["agent_engine"] if agent is not None else []
    )
    if deployment:
        raise Unimplemented(
            f"adk-memory hosts Memory Bank only, not agent deployment ({', '.join(deployment)}); "
            "run your agent yourself and point its memory service at this bank.",
            field=deployment[0],
        )
    spec = data.pop("context_spec", None) or data.pop("contextSpec", None) or {}
    if isinstance(spec, BaseModel):
        spec = spec.model_dump(exclude_none=True)
    bank_config = (
        spec.get("memory_bank_config", spec.get("memoryBankConfig"))
        if isinstance(spec, dict)
        else None
    )
    display_name = data.pop("display_name", None) or data.pop("displayName", None)
    description = data.pop("description", None)
    if data:
        raise InvalidArgument(
            f"config has unknown fields: {', '.join(sorted(data))}.", field="config"
        )
    if isinstance(bank_config, BaseModel):
        bank_config = bank_config.model_dump(exclude_none=True)
    wire = parse_model(
        types.ReasoningEngineContextSpecMemoryBankConfig,
        bank_config or {},
        field="config.context_spec.memory_bank_config",
    )
    return wire, display_name, description
