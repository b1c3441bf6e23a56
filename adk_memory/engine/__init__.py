"""The Memory Bank engine: validates requests and applies Memory Bank's rules over one store.

Data flows one way: the client (or the REST server) calls the engine, the engine calls the store.
The engine never knows which backend it has; it works through `adk_memory.store.MemoryStore`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from adk_memory.engine.banks import BankOps
from adk_memory.engine.context import EngineContext, LoadedBank, utc_now
from adk_memory.engine.generate import GenerateOps
from adk_memory.engine.ingest import IngestOps
from adk_memory.engine.memories import MemoryOps
from adk_memory.engine.retrieval import Retrieval, Retrieved
from adk_memory.errors import NotFound
from adk_memory.names import Names
from adk_memory.store import MemoryStore, OperationRecord

__all__ = ["LoadedBank", "MemoryEngine", "Retrieved"]


class MemoryEngine:
    """One store, its banks and memories, and the operations log."""

    def __init__(
        self,
        store: MemoryStore,
        *,
        names: Names | None = None,
        clock: Callable[[], datetime] = utc_now,
        default_embedding_model: str | None = None,
        genai_client: Any = None,
        generation_model: Any = None,
        session_service: Any = None,
    ) -> None:
        self.context = EngineContext(
            store=store,
            names=names or Names(),
            clock=clock,
            default_embedding_model=default_embedding_model,
            genai_client=genai_client,
            generation_model=generation_model,
            session_service=session_service,
        )
        self.banks = BankOps(self.context)
        self.memories = MemoryOps(self.context)
        self.retrieval = Retrieval(self.context, self.memories)
        self.generation = GenerateOps(self.context)
        self.ingest = IngestOps(self.context, self.generation)

    @property
    def names(self) -> Names:
        """How resource names are formatted and parsed."""
        return self.context.names

    @property
    def store(self) -> MemoryStore:
        """The store this engine writes to."""
        return self.context.store

    async def get_operation(self, name: str) -> OperationRecord:
        """A recorded operation by its full or short name; `NotFound` if unknown."""
        bank_id, path = Names.parse_operation(name)
        found = await self.context.store.get_operation(bank_id, path)
        if found is None:
            raise NotFound(f"Operation {name[:200]!r} does not exist.", field="name")
        return found

    async def aclose(self) -> None:
        """Closes the store."""
        await self.context.store.aclose()
