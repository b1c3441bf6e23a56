"""Memory banks: create, get, list, update and delete, with the config rules of SPEC §3 "Banks".

A bank's config is kept in the wire form (`ReasoningEngineContextSpecMemoryBankConfig`); the
SDK-facing form (`ManagedSemanticMemoryConfig`) differs only in naming the customization list
`unstructured_memory_configs`. The bank records its embedding model and dimension at creation.
"""

from __future__ import annotations

from typing import Any

from agentplatform import types as sdk_types

from adk_memory import types
from adk_memory.embeddings import canonical_model_name
from adk_memory.engine.context import EngineContext, split_config
from adk_memory.engine.convert import parse_duration, parse_model
from adk_memory.engine.customization import validate_customization_configs
from adk_memory.engine.ingest import reindex_streams
from adk_memory.engine.profiles import validate_structured_configs
from adk_memory.errors import AlreadyExists, FailedPrecondition, InvalidArgument
from adk_memory.extensions import EXTENSIONS_KEY, BankExtensions
from adk_memory.generation.model import check_model_name
from adk_memory.names import Names, new_bank_id
from adk_memory.store import BankRecord, ScanQuery
from adk_memory.wording import option

__all__ = [
    "BankOps",
    "check_display_name",
    "to_memory_bank",
    "to_reasoning_engine_json",
    "validate_bank_config",
]

_MAX_DISPLAY_NAME = 128
_SimilaritySearchConfig = types.ReasoningEngineContextSpecMemoryBankConfigSimilaritySearchConfig


def validate_bank_config(config: types.ReasoningEngineContextSpecMemoryBankConfig) -> None:
    """Raises InvalidArgument for a config Memory Bank would refuse (SPEC §3 "Banks", "TTL")."""
    validate_customization_configs(config.customization_configs)
    validate_structured_configs(config.structured_memory_configs)
    ttl = config.ttl_config
    if ttl is not None:
        if ttl.default_ttl and ttl.granular_ttl_config:
            raise InvalidArgument(
                "ttl_config sets both default_ttl and granular_ttl_config; choose one.",
                field="ttl_config",
            )
        parse_duration(ttl.default_ttl, field="ttl_config.default_ttl")
        parse_duration(
            ttl.memory_revision_default_ttl, field="ttl_config.memory_revision_default_ttl"
        )
        granular = ttl.granular_ttl_config
        for name in ("create_ttl", "generate_created_ttl", "generate_updated_ttl"):
            if granular is not None:
                parse_duration(
                    getattr(granular, name), field=f"ttl_config.granular_ttl_config.{name}"
                )
    generation = config.generation_config
    trigger = generation.generation_trigger_config if generation else None
    rule = trigger.generation_rule if trigger else None
    if rule is not None:
        where = "generation_config.generation_trigger_config.generation_rule"
        parse_duration(rule.fixed_interval, field=f"{where}.fixed_interval")
        parse_duration(rule.idle_duration, field=f"{where}.idle_duration")


def _check_generation_model(
    generation: types.ReasoningEngineContextSpecMemoryBankConfigGenerationConfig | None,
) -> None:
    """Resolves the model name offline.

    A stored bank's model is checked only when an update changes it: a class registered in
    another process need not resolve in this one.
    """
    if generation is not None and generation.model:
        check_model_name(generation.model)


def _wire_config(managed: Any) -> types.ReasoningEngineContextSpecMemoryBankConfig:
    """The wire-form config from a ManagedSemanticMemoryConfig (model or dict) or a wire config."""
    if isinstance(managed, sdk_types.ReasoningEngineContextSpecMemoryBankConfig):
        return parse_model(
            types.ReasoningEngineContextSpecMemoryBankConfig, managed, field="memory_bank_config"
        )
    sdk_form = parse_model(
        types.ManagedSemanticMemoryConfig, managed, field="managed_semantic_memory_config"
    )
    data = sdk_form.model_dump(exclude_none=True)
    if "unstructured_memory_configs" in data:
        data["customization_configs"] = data.pop("unstructured_memory_configs")
    return parse_model(
        types.ReasoningEngineContextSpecMemoryBankConfig,
        data,
        field="managed_semantic_memory_config",
    )


def _config_json(config: types.ReasoningEngineContextSpecMemoryBankConfig) -> dict[str, Any]:
    return config.model_dump(mode="json", exclude_none=True)


def to_memory_bank(record: BankRecord, names: Names) -> types.MemoryBank:
    """The SDK `MemoryBank` view of a bank record."""
    data = dict(record.config)
    data.pop(EXTENSIONS_KEY, None)
    if "customization_configs" in data:
        data["unstructured_memory_configs"] = data.pop("customization_configs")
    return types.MemoryBank(
        name=names.bank(record.bank_id),
        managed_semantic_memory_config=types.ManagedSemanticMemoryConfig.model_validate(data),
        display_name=record.display_name,
        description=record.description,
        create_time=record.create_time,
        update_time=record.update_time,
    )


def to_reasoning_engine_json(record: BankRecord, names: Names) -> dict[str, Any]:
    """The ReasoningEngine JSON (camelCase) of a bank, as the REST API returns it."""
    config, _ = split_config(record.config)
    engine = types.ReasoningEngine(
        name=names.bank(record.bank_id),
        display_name=record.display_name,
        description=record.description,
        create_time=record.create_time,
        update_time=record.update_time,
        context_spec=types.ReasoningEngineContextSpec(memory_bank_config=config),
    )
    payload: dict[str, Any] = engine.model_dump(mode="json", by_alias=True, exclude_none=True)
    payload.setdefault("contextSpec", {}).setdefault("memoryBankConfig", {})
    return payload


class BankOps:
    """The bank half of the engine."""

    def __init__(self, context: EngineContext) -> None:
        self._context = context

    async def create(
        self,
        managed_config: Any,
        *,
        display_name: str | None = None,
        description: str | None = None,
        bank_id: str | None = None,
        extensions: Any = None,
    ) -> BankRecord:
        """Validates the config, resolves its embedding model and stores a new bank."""
        config = _wire_config(managed_config)
        validate_bank_config(config)
        _check_generation_model(config.generation_config)
        check_display_name(display_name)
        if bank_id is not None:
            Names.parse_bank(f"reasoningEngines/{bank_id}", field="bank_id")
        requested = (
            config.similarity_search_config.embedding_model
            if config.similarity_search_config
            else None
        )
        embedder = self._context.embedder(requested)
        config = _with_embedding_model(config, embedder.model)
        now = self._context.clock()
        record = BankRecord(
            bank_id=bank_id or new_bank_id(),
            config=_with_extensions(_config_json(config), extensions, None),
            embedding_model=canonical_model_name(embedder.model),
            embedding_dimension=embedder.dimension,
            create_time=now,
            update_time=now,
            display_name=display_name,
            description=description,
        )
        try:
            await self._context.store.create_bank(record)
        except AlreadyExists:
            raise AlreadyExists(
                f"Memory bank {self._context.names.bank(record.bank_id)!r} already exists.",
                field="bank_id",
            ) from None
        return record

    async def get(self, bank_id: str) -> BankRecord:
        """The bank record; `NotFound` if missing."""
        return (await self._context.load_bank(bank_id)).record

    async def list(self) -> list[BankRecord]:
        """Every bank, oldest first."""
        return await self._context.store.list_banks()

    async def update(
        self,
        bank_id: str,
        managed_config: Any,
        *,
        display_name: str | None = None,
        description: str | None = None,
        extensions: Any = None,
    ) -> BankRecord:
        """Merges the non-empty top-level config fields given (SPEC §3: `{}` changes nothing)."""
        bank = await self._context.load_bank(bank_id)
        check_display_name(display_name)
        changes = _config_json(_wire_config(managed_config)) if managed_config is not None else {}
        stored = {key: value for key, value in bank.record.config.items() if key != EXTENSIONS_KEY}
        merged = {
            **stored,
            **{key: value for key, value in changes.items() if value not in ({}, [], None)},
        }
        config = types.ReasoningEngineContextSpecMemoryBankConfig.model_validate(merged)
        validate_bank_config(config)
        if changes.get("generation_config"):
            _check_generation_model(config.generation_config)
        embedding_model, dimension = bank.record.embedding_model, bank.record.embedding_dimension
        if "similarity_search_config" in changes:
            new_embedder = self._context.embedder(
                config.similarity_search_config.embedding_model
                if config.similarity_search_config
                else None
            )
            if canonical_model_name(new_embedder.model) != embedding_model:
                if await self._holds_memories(bank_id):
                    raise FailedPrecondition(
                        f"Memory bank {bank_id!r} holds memories embedded with "
                        f"{embedding_model!r}; "
                        "changing its embedding model needs re-embedding every memory "
                        "(`adk-memory reembed`), or delete the memories first.",
                        field="similarity_search_config.embedding_model",
                    )
                embedding_model = canonical_model_name(new_embedder.model)
                dimension = new_embedder.dimension
            config = _with_embedding_model(config, new_embedder.model)
        record = BankRecord(
            bank_id=bank_id,
            config=_with_extensions(_config_json(config), extensions, bank.extensions),
            embedding_model=embedding_model,
            embedding_dimension=dimension,
            create_time=bank.record.create_time,
            update_time=self._context.clock(),
            display_name=display_name if display_name is not None else bank.record.display_name,
            description=description if description is not None else bank.record.description,
        )
        await self._context.store.update_bank(record)
        if "generation_config" in changes:  # its trigger rule may make streams due earlier
            await reindex_streams(self._context, bank_id)
        return record

    async def delete(self, bank_id: str, *, force: bool = False) -> None:
        """Deletes the bank; `FailedPrecondition` if it holds memories and `force` is not set."""
        await self._context.load_bank(bank_id)
        if not force and await self._holds_memories(bank_id):
            raise FailedPrecondition(
                f"Memory bank {bank_id!r} still holds memories; delete them first or pass "
                f"{option('force')} to delete the bank with its memories, revisions and vectors.",
                field="force",
            )
        await self._context.store.delete_bank(bank_id)

    async def _holds_memories(self, bank_id: str) -> bool:
        probe = ScanQuery(now=self._context.clock(), limit=1)
        return bool(await self._context.store.scan(bank_id, probe))


def _with_embedding_model(
    config: types.ReasoningEngineContextSpecMemoryBankConfig, model: str
) -> types.ReasoningEngineContextSpecMemoryBankConfig:
    """Records the model actually used, so a bank never changes model silently."""
    if config.similarity_search_config and config.similarity_search_config.embedding_model:
        return config
    return config.model_copy(
        update={"similarity_search_config": _SimilaritySearchConfig(embedding_model=model)}
    )


def _with_extensions(
    config: dict[str, Any], extensions: Any, current: BankExtensions | None
) -> dict[str, Any]:
    """The config JSON with our extensions beside it (given ones replace the current ones)."""
    if extensions is None:
        chosen = current
    else:
        chosen = parse_model(BankExtensions, extensions, field="extensions")
    if chosen is not None and chosen != BankExtensions():
        config[EXTENSIONS_KEY] = chosen.model_dump(mode="json")
    return config


def check_display_name(display_name: str | None) -> None:
    """Refuses a bank display name over `_MAX_DISPLAY_NAME` UTF-8 bytes."""
    if display_name is not None and len(display_name.encode("utf-8")) > _MAX_DISPLAY_NAME:
        raise InvalidArgument(
            f"display_name is limited to {_MAX_DISPLAY_NAME} UTF-8 bytes.", field="display_name"
        )
