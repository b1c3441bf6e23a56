"""What every engine operation shares: the store, names, the clock, banks and their embedders.

The engine keeps no state of its own between calls (SPEC §6: several processes serve one bank on
one shared store), so each call loads the bank record it works on: one store round trip.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from adk_memory import types
from adk_memory.embedding_batch import batched
from adk_memory.embeddings import CheckedEmbedder, Embedder, embedder_for
from adk_memory.errors import NotFound
from adk_memory.extensions import EXTENSIONS_KEY, BankExtensions
from adk_memory.names import Names
from adk_memory.store import BankRecord, MemoryStore, OperationRecord
from adk_memory.wording import call

__all__ = [
    "DEFAULT_REVISION_TTL",
    "EngineContext",
    "LoadedBank",
    "split_config",
    "utc_now",
]

DEFAULT_REVISION_TTL = timedelta(days=365)
"""SPEC §3: revisions expire after 365 days unless the request or the bank says otherwise."""


def split_config(
    stored: Mapping[str, Any],
) -> tuple[types.ReasoningEngineContextSpecMemoryBankConfig, BankExtensions]:
    """A bank record's config JSON as the SDK's config model and our extensions."""
    data = dict(stored)
    extensions = BankExtensions.model_validate(data.pop(EXTENSIONS_KEY, {}))
    return types.ReasoningEngineContextSpecMemoryBankConfig.model_validate(data), extensions


def utc_now() -> datetime:
    """The wall clock, in UTC (the default clock; tests pass their own)."""
    return datetime.now(UTC)


@dataclass(frozen=True)
class LoadedBank:
    """A bank record with its parsed config; its embedder is built on first use only.

    Reading, listing or deleting a bank never needs the embedding model (or its credentials).
    """

    record: BankRecord
    config: types.ReasoningEngineContextSpecMemoryBankConfig
    make_embedder: Callable[[], Embedder]
    extensions: BankExtensions = field(default_factory=BankExtensions)

    @property
    def bank_id(self) -> str:
        """The bank's id."""
        return self.record.bank_id

    @functools.cached_property
    def embedder(self) -> Embedder:
        """The embedder of the bank's recorded model (its full resource name when given)."""
        return self.make_embedder()


@dataclass(slots=True)
class EngineContext:
    """The store and the settings every engine operation uses."""

    store: MemoryStore
    names: Names
    clock: Callable[[], datetime] = utc_now
    default_embedding_model: str | None = None
    genai_client: Any = None
    generation_model: Any = None
    """A model name or `BaseLlm` that overrides every bank's `generation_config.model`."""
    session_service: Any = None
    """An ADK `BaseSessionService` for `vertex_session_source`."""
    wrap_embedder: Callable[[Embedder], Embedder] | None = None
    """Wraps every embedder the engine uses (telemetry installs a tracing wrapper here)."""

    def embedder(self, model: str | None) -> Embedder:
        """The embedder for a model name (None: the configured default), its vectors checked.

        The one place the engine gets an embedder. Local models come behind this process's
        batcher, so concurrent calls of every client, server and ADK service in the process
        share model calls (`adk_memory.embedding_batch`); `CheckedEmbedder` refuses a vector no
        store can hold (NaN, ±inf, beyond float32, another dimension) before any write path
        uses it.
        """
        embedder: Embedder = CheckedEmbedder(
            batched(
                embedder_for(model or self.default_embedding_model, genai_client=self.genai_client)
            )
        )
        return self.wrap_embedder(embedder) if self.wrap_embedder else embedder

    async def load_bank(self, bank_id: str) -> LoadedBank:
        """The bank with its config and embedder; `NotFound` if it does not exist."""
        record = await self.store.get_bank(bank_id)
        if record is None:
            raise NotFound(
                f"Memory bank {self.names.bank(bank_id)!r} does not exist; create it with "
                f"{call('memory_banks.create')} or check the name.",
                field="name",
            )
        config, extensions = split_config(record.config)
        search = config.similarity_search_config
        model = (search.embedding_model if search else None) or record.embedding_model
        return LoadedBank(record, config, functools.partial(self.embedder, model), extensions)

    async def record_operation(
        self, bank_id: str, parent_path: str, kind: str, operation: BaseModel
    ) -> str:
        """Persists a finished or pending operation and returns its full name.

        Args:
            bank_id: The bank the operation belongs to.
            parent_path: "" for bank-level operations, or `memories/{id}`.
            kind: How `operations.get` should type it (see `adk_memory.engine.operations`).
            operation: The SDK operation model, without its name.
        """
        record = self.operation_record(bank_id, parent_path, kind, operation)
        await self.store.put_operation(record)
        return self.names.operation(bank_id, record.operation_path)

    def operation_record(
        self, bank_id: str, parent_path: str, kind: str, operation: BaseModel
    ) -> OperationRecord:
        """The record `record_operation` stores, to write it in a batch instead (same args)."""
        path = f"{parent_path}/operations/{secrets.token_hex(8)}".lstrip("/")
        payload = operation.model_dump(mode="json", by_alias=True, exclude_none=True)
        payload.pop("name", None)
        return OperationRecord(
            bank_id=bank_id,
            operation_path=path,
            done=bool(payload.get("done")),
            payload={"kind": kind, "operation": payload},
            create_time=self.clock(),
        )
