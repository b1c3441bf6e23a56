"""The Memory Bank types: the official SDK's own pydantic models, plus the seeds' spellings.

We reuse `agentplatform.types` (the official `google-cloud-agentplatform` SDK) instead of
re-declaring a hundred models: they have the SDK's names and snake_case attributes, parse
camelCase and snake_case at every level and dump camelCase. `from adk_memory import types` is a
drop-in for `from agentplatform import types` and for the `vertexai.types` names the seeds use.

Where the seeds spell a field the way an older SDK did, the config models defined here accept it,
with a `DeprecationWarning` where the SDK renamed the field:

- `granular_ttl` → `granular_ttl_config` (TTL config)
- `consolidation_customization` → `consolidation_config` (customization config)
- `customization_configs` ⇄ `unstructured_memory_configs` (wire form ⇄ SDK form of the bank config)
- `{"managed_memory_topic": "USER_PREFERENCES"}`, a bare enum name, for
  `{"managed_memory_topic": {"managed_topic_enum": "USER_PREFERENCES"}}` (accepted silently)
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from typing import Any, ClassVar

from agentplatform import types as _sdk
from pydantic import BaseModel, model_validator

_RENAMED = {
    "granular_ttl": "granular_ttl_config",
    "granularTtl": "granular_ttl_config",
    "consolidation_customization": "consolidation_config",
    "consolidationCustomization": "consolidation_config",
}
MANAGED_TOPIC_NAMES: tuple[str, ...] = tuple(
    member.value
    for member in _sdk.ManagedTopicEnum
    if member is not _sdk.ManagedTopicEnum.MANAGED_TOPIC_ENUM_UNSPECIFIED
)
"""The managed topics (`ManagedTopicEnum` without UNSPECIFIED, which "should not be used"): the
one list that bank configs, filters, `allowed_topics`, the prompts and the CLI all check against."""

_TOPIC_LISTS = ("memory_topics", "memoryTopics")
_MANAGED_KEYS = ("managed_memory_topic", "managedMemoryTopic")


def normalize_seed_spellings(data: Any, *, customization_key: str | None = None) -> Any:
    """Rewrites the seeds' older spellings in a raw (dict) config tree into the SDK's.

    Args:
        data: A dict/list tree as given by the user; models inside it are left as they are.
        customization_key: At the top level of a bank config, the name its customization list
            must have: `customization_configs` (wire form) or `unstructured_memory_configs`.

    Returns:
        A new tree; the input is not modified.
    """
    if isinstance(data, list):
        return [normalize_seed_spellings(item) for item in data]
    if not isinstance(data, Mapping):
        return data
    result: dict[str, Any] = {}
    key: str  # config keys are strings; an untyped key would pick `dict.get`'s wrong overload
    for key, value in data.items():
        new_key = _RENAMED.get(key, key)
        if new_key != key:
            warnings.warn(
                f"{key!r} is the old spelling; use {new_key!r}.", DeprecationWarning, stacklevel=4
            )
        if customization_key and key in _CUSTOMIZATION_SPELLINGS and key != customization_key:
            new_key = customization_key
        if key in _TOPIC_LISTS and isinstance(value, list):
            value = [_wrap_bare_managed_topic(item) for item in value]
        if key in _SCHEMA_LISTS and isinstance(value, list):
            value = [_schema_key(item) for item in value]
        result[new_key] = normalize_seed_spellings(value)
    return result


_CUSTOMIZATION_SPELLINGS = (
    "customization_configs",
    "customizationConfigs",
    "unstructured_memory_configs",
    "unstructuredMemoryConfigs",
)


_SCHEMA_LISTS = ("schema_configs", "schemaConfigs")


def _schema_key(item: Any) -> Any:
    """The wire spells a schema config's `memory_schema` as `schema` (reference §3.9)."""
    if isinstance(item, Mapping) and "schema" in item and "memory_schema" not in item:
        return {("memory_schema" if key == "schema" else key): value for key, value in item.items()}
    return item


def _wrap_bare_managed_topic(item: Any) -> Any:
    if not isinstance(item, Mapping):
        return item
    for key in _MANAGED_KEYS:
        value = item.get(key)
        if isinstance(value, str):
            return {**item, key: {"managed_topic_enum": value}}
    return item


class _SeedSpellings(BaseModel):
    """Mixin: the model accepts the seeds' spellings (see the module docstring) at any depth."""

    seed_customization_key: ClassVar[str | None] = None
    """For a bank config: the name its customization list must end up with."""

    @model_validator(mode="before")
    @classmethod
    def _seed_spellings(cls, data: Any) -> Any:
        return normalize_seed_spellings(data, customization_key=cls.seed_customization_key)


class MemoryBankCustomizationConfig(_SeedSpellings, _sdk.MemoryBankCustomizationConfig):
    """The SDK's customization config; also accepts `consolidation_customization`."""


class MemoryBankCustomizationConfigMemoryTopic(_sdk.MemoryBankCustomizationConfigMemoryTopic):
    """The SDK's memory topic; also accepts a bare `ManagedTopicEnum` name."""

    @model_validator(mode="before")
    @classmethod
    def _seed_spellings(cls, data: Any) -> Any:
        return _wrap_bare_managed_topic(data)


class ReasoningEngineContextSpecMemoryBankConfigTtlConfig(
    _SeedSpellings, _sdk.ReasoningEngineContextSpecMemoryBankConfigTtlConfig
):
    """The SDK's TTL config (wire form); also accepts `granular_ttl`."""


class ManagedSemanticMemoryConfigTtlConfig(
    _SeedSpellings, _sdk.ManagedSemanticMemoryConfigTtlConfig
):
    """The SDK's TTL config (SDK form); also accepts `granular_ttl`."""


class ReasoningEngineContextSpecMemoryBankConfig(
    _SeedSpellings, _sdk.ReasoningEngineContextSpecMemoryBankConfig
):
    """The bank config as the wire carries it; accepts every seed spelling at any depth."""

    seed_customization_key = "customization_configs"


class ManagedSemanticMemoryConfig(_SeedSpellings, _sdk.ManagedSemanticMemoryConfig):
    """The bank config as `memory_banks.create` takes it; accepts every seed spelling."""

    seed_customization_key = "unstructured_memory_configs"


# The `vertexai.types` names the older SDK and the seeds use for the same request models.
RetrieveAgentEngineMemoriesConfig = _sdk.RetrieveMemoriesConfig
AgentEngineMemoryConfig = _sdk.MemoryConfig
GenerateAgentEngineMemoriesConfig = _sdk.GenerateMemoriesConfig
ListAgentEngineMemoryConfig = _sdk.ListMemoriesConfig
GetAgentEngineMemoryConfig = _sdk.GetMemoryConfig
DeleteAgentEngineMemoryConfig = _sdk.DeleteMemoryConfig
UpdateAgentEngineMemoryConfig = _sdk.UpdateMemoryConfig
PurgeAgentEngineMemoriesConfig = _sdk.PurgeMemoriesConfig
RollbackAgentEngineMemoryConfig = _sdk.RollbackMemoryConfig
AgentEngineMemoryOperation = _sdk.MemoryOperation
AgentEngineGenerateMemoriesOperation = _sdk.GenerateMemoriesOperation
RetrieveMemoriesResponseRetrievedMemory = _sdk.RetrieveMemoriesResponseRetrievedMemory


def __getattr__(name: str) -> Any:
    """Every other name is the SDK's own model (resolved lazily, as the SDK does)."""
    if name.startswith("__"):
        raise AttributeError(name)
    return getattr(_sdk, name)
