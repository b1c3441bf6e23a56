"""Changing a bank's embedding model: re-embed every memory, resumably, reads working throughout.

SPEC §3 refuses a model change on a bank that holds memories; this module is the way through.
It runs in two phases, both resumable after an interruption (a crash, Ctrl-C) by running it
again, because all its state lives in the store as documents of kind `reembed`:

1. **Compute.** Memories are read oldest first (keyset pages, `transfer.scan_pages`), their
   facts embedded with the new model in batches, and the vectors parked in `chunk-NNNNNN`
   documents with a digest of the fact they were computed from. A `progress` document holds the
   target model and the cursor (the last create time done). Nothing a reader sees changes: the
   bank still names its old model, retrieval embeds queries with it and compares them with the
   old vectors.
2. **Switch.** Each parked memory is read again; a memory whose fact changed since (an update, a
   rollback, a generate) is re-embedded now, one deleted meanwhile is dropped, and memories that
   appeared meanwhile (created after the compute scan passed) are embedded in a catch-up pass.
   Then the vectors replace the old ones and the bank record takes the new model and dimension:

   * same dimension: each batch is upserted in place (the memory keeps its name, times, topics,
     metadata and revisions; only the vector changes), then the bank record is updated;
   * another dimension: stores refuse vectors of a new dimension while old ones remain (Chroma
     fixes a collection's dimension; Redis's index has one dimension; the reference store's
     matrix must be rectangular), so the final records are first staged in `staged-NNNNNN`
     documents, then the memories are deleted, the bank record updated and the staged records
     written back. Between the delete and the write-back the bank's memories are briefly
     invisible; an interruption there is completed by the next run from the staged documents.

Writes by other clients during the switch are not locked out (plain create and update take no
lock); run the switch when the bank is quiet. The compute phase may run under full traffic.

```python
from adk_memory import AsyncClient
from adk_memory.engine.reembed import reembed

async with AsyncClient("chroma:///data") as client:
    status = await reembed(client.engine, "1234", "text-embedding-005")
```
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from adk_memory.embeddings import Embedder, canonical_model_name
from adk_memory.engine.memories import unchanged
from adk_memory.errors import Aborted, FailedPrecondition, InvalidArgument, ResourceExhausted
from adk_memory.store import BankRecord, MemoryRecord, ScanQuery, WriteBatch
from adk_memory.transfer import (
    memory_from_json,
    memory_to_json,
    scan_pages,
    vector_from_text,
    vector_to_text,
)

if TYPE_CHECKING:
    from adk_memory.engine import MemoryEngine

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "REEMBED_KIND",
    "ReembedProgress",
    "ReembedStatus",
    "Reembedder",
    "reembed",
]

logger = logging.getLogger(__name__)

REEMBED_KIND = "reembed"
"""The document kind of re-embedding state (progress, parked vectors, staged records)."""
DEFAULT_BATCH_SIZE = 256
_WRITE_ATTEMPTS = 5
"""Attempts of an in-place chunk that concurrent writers keep changing (each re-reads it)."""
_PROGRESS = "progress"
_LOCK_WAIT_SECONDS = 1.0
_COMPUTING, _COMPUTED, _SWITCHING, _SWAPPING, _DONE = (
    "computing",
    "computed",
    "switching",
    "swapping",
    "done",
)

ReembedProgress = Callable[[str, int, int | None], None]
"""Called with (phase: "compute" or "switch", memories done, memories in total or None)."""


@dataclass(frozen=True, slots=True)
class ReembedStatus:
    """Where a re-embedding of a bank stands."""

    bank_id: str
    source_model: str
    """The model the bank had when the re-embedding started."""
    target_model: str
    """The new model, as it was asked for (it becomes the bank's configured model)."""
    dimension: int
    """The new model's vector length."""
    phase: str
    """`computing`, `computed` (ready to switch), `switching`, `swapping` or `done`."""
    embedded: int
    """Memories embedded with the new model so far (parked or written)."""
    total: int
    """Memories in the bank when the re-embedding started."""
    started: datetime

    @property
    def switched(self) -> bool:
        """True once the bank uses the new model."""
        return self.phase == _DONE


def _digest(fact: str) -> str:
    return hashlib.sha256(fact.encode("utf-8")).hexdigest()[:32]


def _chunk_key(index: int) -> str:
    return f"chunk-{index:06d}"


def _staged_key(index: int) -> str:
    return f"staged-{index:06d}"


class Reembedder:
    """Re-embeds the memories of banks on one engine's store (see the module docstring)."""

    def __init__(self, engine: MemoryEngine, *, batch_size: int = DEFAULT_BATCH_SIZE) -> None:
        """Prepares re-embedding; nothing is read or written until a method runs.

        Args:
            engine: The engine over the store holding the banks.
            batch_size: Memories per embedding request and per write.
        """
        if batch_size < 1:
            raise InvalidArgument("batch_size must be positive.", field="batch_size")
        self._engine = engine
        self._store = engine.store
        self._batch_size = batch_size

    @contextlib.asynccontextmanager
    async def _exclusive(self, bank_id: str) -> AsyncIterator[None]:
        """One re-embedding step per bank at a time, across processes (the store's locks)."""
        acquired = False
        try:
            async with self._store.lock_provider().lock(
                f"reembed:{bank_id}", wait_seconds=_LOCK_WAIT_SECONDS
            ):
                acquired = True
                yield
        except ResourceExhausted:
            if acquired:
                raise
            raise FailedPrecondition(
                f"Another re-embedding of bank {bank_id!r} is running; wait for it, or check "
                "it with `adk-memory reembed --status`.",
                field="bank",
            ) from None

    # State

    async def _state(self, bank_id: str) -> dict[str, Any] | None:
        found = await self._store.get_document(bank_id, REEMBED_KIND, _PROGRESS)
        return None if found is None else dict(found)

    async def _save(self, bank_id: str, state: Mapping[str, Any]) -> None:
        await self._store.put_document(bank_id, REEMBED_KIND, _PROGRESS, state)

    @staticmethod
    def _status(bank_id: str, state: Mapping[str, Any]) -> ReembedStatus:
        return ReembedStatus(
            bank_id=bank_id,
            source_model=str(state["source_model"]),
            target_model=str(state["target_model"]),
            dimension=int(state["dimension"]),
            phase=str(state["phase"]),
            embedded=int(state["embedded"]),
            total=int(state["total"]),
            started=datetime.fromisoformat(state["started"]),
        )

    async def status(self, bank_id: str) -> ReembedStatus | None:
        """The re-embedding under way in the bank, or None."""
        await self._engine.context.load_bank(bank_id)
        state = await self._state(bank_id)
        return None if state is None else self._status(bank_id, state)

    async def abort(self, bank_id: str) -> bool:
        """Drops a re-embedding that has not started to change memories; True if one existed.

        Raises:
            FailedPrecondition: The switch has started writing memories; finish it instead.
        """
        async with self._exclusive(bank_id):
            return await self._abort(bank_id)

    async def _abort(self, bank_id: str) -> bool:
        await self._engine.context.load_bank(bank_id)
        state = await self._state(bank_id)
        if state is None:
            return False
        writing = state["phase"] == _SWAPPING or (
            state["phase"] == _SWITCHING and state.get("in_place")
        )
        if writing:
            raise FailedPrecondition(
                f"The switch of bank {bank_id!r} to {state['target_model']!r} has started "
                "writing memories; run the re-embedding again to finish it.",
                field="bank",
            )
        await self._cleanup(bank_id, state)
        return True

    async def _cleanup(self, bank_id: str, state: Mapping[str, Any]) -> None:
        for index in range(int(state.get("chunks", 0))):
            await self._store.delete_document(bank_id, REEMBED_KIND, _chunk_key(index))
            await self._store.delete_document(bank_id, REEMBED_KIND, _staged_key(index))
        await self._store.delete_document(bank_id, REEMBED_KIND, _PROGRESS)

    # Phase 1

    async def compute(
        self, bank_id: str, model: str, *, progress: ReembedProgress | None = None
    ) -> ReembedStatus:
        """Computes and parks the new vectors of every memory, resuming where it stopped.

        Args:
            bank_id: The bank.
            model: The new embedding model (any name `memory_banks.create` accepts).
            progress: Called after each batch.

        Returns:
            The status (`computed`, or a later phase when a switch had already started).

        Raises:
            InvalidArgument: The bank already uses that model.
            FailedPrecondition: A re-embedding to another model is under way (or running in
                another process), or the model needs credentials that are not configured.
        """
        async with self._exclusive(bank_id):
            return await self._compute(bank_id, model, progress)

    async def _compute(
        self, bank_id: str, model: str, progress: ReembedProgress | None
    ) -> ReembedStatus:
        bank = await self._engine.context.load_bank(bank_id)
        embedder = self._engine.context.embedder(model)
        target = canonical_model_name(embedder.model)
        state = await self._state(bank_id)
        if state is None:
            if target == bank.record.embedding_model:
                raise InvalidArgument(
                    f"Memory bank {bank_id!r} already uses {target!r}; nothing to re-embed.",
                    field="model",
                )
            now = self._engine.context.clock()
            total = len(await self._store.scan(bank_id, ScanQuery(now=now)))
            state = {
                "source_model": bank.record.embedding_model,
                "target_model": model,
                "target_canonical": target,
                "dimension": embedder.dimension,
                "phase": _COMPUTING,
                "cursor": None,
                "chunks": 0,
                "embedded": 0,
                "total": total,
                "started": now.isoformat(),
            }
            await self._save(bank_id, state)
            logger.info(
                "Re-embedding bank %s from %s to %s (%d memories)",
                bank_id,
                bank.record.embedding_model,
                target,
                total,
            )
        elif state["target_canonical"] != target:
            raise FailedPrecondition(
                f"A re-embedding of bank {bank_id!r} to {state['target_model']!r} is under way "
                f"({state['embedded']} memories done); finish it with that model, or cancel it "
                "(`adk-memory reembed --abort`) before choosing another.",
                field="model",
            )
        if state["phase"] != _COMPUTING:
            return self._status(bank_id, state)
        now = self._engine.context.clock()
        async for page, cursor in scan_pages(
            self._store,
            bank_id,
            now=now,
            page_size=self._batch_size,
            after_micros=state["cursor"],
        ):
            await self._park(bank_id, state, page, embedder)
            state["cursor"] = cursor
            await self._save(bank_id, state)
            if progress is not None:
                progress("compute", int(state["embedded"]), int(state["total"]))
        state["phase"] = _COMPUTED
        await self._save(bank_id, state)
        return self._status(bank_id, state)

    async def _park(
        self,
        bank_id: str,
        state: dict[str, Any],
        records: Sequence[MemoryRecord],
        embedder: Embedder,
    ) -> None:
        """Embeds `records` and parks their vectors as the next chunk.

        The chunk is written before the state that counts it, so an interruption between the two
        rewrites the same chunk on the next run.
        """
        vectors = await embedder.embed_documents([record.fact for record in records])
        items = [
            {"id": record.memory_id, "digest": _digest(record.fact), "vector": vector_to_text(v)}
            for record, v in zip(records, vectors, strict=True)
        ]
        index = int(state["chunks"])
        await self._store.put_document(bank_id, REEMBED_KIND, _chunk_key(index), {"items": items})
        state["chunks"] = index + 1
        state["embedded"] = int(state["embedded"]) + len(records)

    # Phase 2

    async def switch(
        self, bank_id: str, *, progress: ReembedProgress | None = None
    ) -> ReembedStatus:
        """Writes the new vectors and switches the bank to the new model (resumable).

        Raises:
            FailedPrecondition: No computed re-embedding is waiting for the bank, or another
                process is re-embedding it.
        """
        async with self._exclusive(bank_id):
            return await self._switch(bank_id, progress)

    async def _switch(self, bank_id: str, progress: ReembedProgress | None) -> ReembedStatus:
        bank = await self._engine.context.load_bank(bank_id)
        state = await self._state(bank_id)
        if state is None or state["phase"] == _COMPUTING:
            raise FailedPrecondition(
                f"Memory bank {bank_id!r} has no computed re-embedding to switch to; run "
                "`adk-memory reembed --model MODEL` first.",
                field="bank",
            )
        embedder = self._engine.context.embedder(state["target_model"])
        if state["phase"] == _COMPUTED:
            state["phase"] = _SWITCHING
            state["switched_chunks"] = 0
            state["in_place"] = int(state["dimension"]) == bank.record.embedding_dimension
            await self._save(bank_id, state)
        if state["phase"] == _SWITCHING:
            await self._switch_chunks(bank_id, state, embedder, progress)
            if state["in_place"]:
                await self._use_new_model(bank.record, state)
            else:
                state["phase"] = _SWAPPING
                await self._save(bank_id, state)
        if state["phase"] == _SWAPPING:
            await self._swap(bank_id, state, embedder, bank.record)
        if state["phase"] == _DONE:
            await self._cleanup(bank_id, state)
            logger.info("Bank %s now uses %s", bank_id, state["target_canonical"])
        return self._status(bank_id, state)

    async def _switch_chunks(
        self,
        bank_id: str,
        state: dict[str, Any],
        embedder: Embedder,
        progress: ReembedProgress | None,
    ) -> None:
        """Refreshes each parked chunk and writes it (in place) or stages it; then catches up."""
        done_ids: set[str] = set()
        index = 0
        while True:
            while index < int(state["chunks"]):
                chunk = await self._store.get_document(bank_id, REEMBED_KIND, _chunk_key(index))
                items = list((chunk or {}).get("items") or ())
                done_ids.update(item["id"] for item in items)
                if index >= int(state["switched_chunks"]):
                    if state["in_place"]:
                        await self._write_in_place(bank_id, items, embedder)
                    else:
                        records = await self._refreshed(bank_id, items, embedder)
                        staged = {"records": [memory_to_json(record) for record in records]}
                        await self._store.put_document(
                            bank_id, REEMBED_KIND, _staged_key(index), staged
                        )
                    state["switched_chunks"] = index + 1
                    await self._save(bank_id, state)
                    if progress is not None:
                        progress("switch", len(done_ids), int(state["embedded"]))
                index += 1
            # Catch-up: memories the compute scan never saw (created after it passed).
            now = self._engine.context.clock()
            added = False
            async for page, _cursor in scan_pages(
                self._store, bank_id, now=now, page_size=self._batch_size
            ):
                fresh = [record for record in page if record.memory_id not in done_ids]
                if fresh:
                    await self._park(bank_id, state, fresh, embedder)
                    await self._save(bank_id, state)
                    added = True
            if not added:
                return

    async def _write_in_place(
        self, bank_id: str, items: Sequence[Mapping[str, Any]], embedder: Embedder
    ) -> None:
        """Writes a chunk's new vectors over its memories as they are now.

        Each record expects its memory unchanged since `_refreshed` read it, so a write or a
        delete made meanwhile (writers are not locked out) is never overwritten or undone; the
        chunk is then read again and retried.
        """
        for attempt in range(_WRITE_ATTEMPTS):
            now = self._engine.context.clock()
            records = await self._refreshed(bank_id, items, embedder)
            if not records:
                return
            expect = tuple(unchanged(record, now) for record in records)
            try:
                await self._store.apply(bank_id, WriteBatch(upserts=tuple(records), expect=expect))
                return
            except Aborted:
                if attempt + 1 == _WRITE_ATTEMPTS:
                    raise

    async def _refreshed(
        self, bank_id: str, items: Sequence[Mapping[str, Any]], embedder: Embedder
    ) -> list[MemoryRecord]:
        """The current records of a chunk with their new vectors.

        A memory whose fact changed since it was parked is re-embedded; one deleted meanwhile is
        left out.
        """
        now = self._engine.context.clock()
        parked = {item["id"]: item for item in items}
        current = await self._store.get_memories(bank_id, list(parked), now)
        stale = [r for r in current if _digest(r.fact) != parked[r.memory_id]["digest"]]
        fresh_vectors = (
            dict(
                zip(
                    (r.memory_id for r in stale),
                    await embedder.embed_documents([r.fact for r in stale]),
                    strict=True,
                )
            )
            if stale
            else {}
        )
        return [
            replace(
                record,
                embedding=fresh_vectors.get(record.memory_id)
                or vector_from_text(parked[record.memory_id]["vector"], "reembed chunk"),
            )
            for record in current
        ]

    async def _swap(
        self,
        bank_id: str,
        state: dict[str, Any],
        embedder: Embedder,
        bank: BankRecord,
    ) -> None:
        """Replaces the memories by their staged records under the new dimension (idempotent)."""
        staged_ids: set[str] = set()
        for index in range(int(state["chunks"])):
            staged = await self._store.get_document(bank_id, REEMBED_KIND, _staged_key(index))
            staged_ids.update(item["memory_id"] for item in (staged or {}).get("records") or ())
        now = self._engine.context.clock()
        # Memories written after staging (not under the old vectors' name yet): stage them too.
        async for page, _cursor in scan_pages(
            self._store, bank_id, now=now, page_size=self._batch_size
        ):
            late = [record.memory_id for record in page if record.memory_id not in staged_ids]
            if not late:
                continue
            full = await self._store.get_memories(bank_id, late, now)
            vectors = await embedder.embed_documents([record.fact for record in full])
            records = [replace(r, embedding=v) for r, v in zip(full, vectors, strict=True)]
            index = int(state["chunks"])
            await self._store.put_document(
                bank_id,
                REEMBED_KIND,
                _staged_key(index),
                {"records": [memory_to_json(record) for record in records]},
            )
            state["chunks"] = index + 1
            state["embedded"] = int(state["embedded"]) + len(records)
            await self._save(bank_id, state)
            staged_ids.update(record.memory_id for record in records)
        # Old vectors must be gone before the first new one is written (see the docstring);
        # expired rows count too where a store keeps them until swept.
        await self._store.sweep_expired(bank_id, now)
        ordered = sorted(staged_ids)
        for start in range(0, len(ordered), self._batch_size):
            chunk = tuple(ordered[start : start + self._batch_size])
            await self._store.apply(bank_id, WriteBatch(deletes=chunk))
        await self._update_bank(bank, state)
        for index in range(int(state["chunks"])):
            staged = await self._store.get_document(bank_id, REEMBED_KIND, _staged_key(index))
            restored = tuple(
                memory_from_json(item, where="staged record")
                for item in (staged or {}).get("records") or ()
            )
            if restored:
                await self._store.apply(bank_id, WriteBatch(upserts=restored))
        state["phase"] = _DONE
        await self._save(bank_id, state)

    async def _use_new_model(self, bank: BankRecord, state: dict[str, Any]) -> None:
        await self._update_bank(bank, state)
        state["phase"] = _DONE
        await self._save(bank.bank_id, state)

    async def _update_bank(self, bank: BankRecord, state: Mapping[str, Any]) -> None:
        """Points the bank at the new model (its configured name, canonical name, dimension)."""
        config = dict(bank.config)
        search = dict(config.get("similarity_search_config") or {})
        search["embedding_model"] = state["target_model"]
        config["similarity_search_config"] = search
        await self._store.update_bank(
            replace(
                bank,
                config=config,
                embedding_model=str(state["target_canonical"]),
                embedding_dimension=int(state["dimension"]),
                update_time=self._engine.context.clock(),
            )
        )

    # Both

    async def run(
        self,
        bank_id: str,
        model: str,
        *,
        switch: bool = True,
        progress: ReembedProgress | None = None,
    ) -> ReembedStatus:
        """Computes (or resumes computing) the new vectors, then switches unless told not to."""
        status = await self.compute(bank_id, model, progress=progress)
        if switch or status.switched:  # a finished switch may still have documents to delete
            status = await self.switch(bank_id, progress=progress)
        return status


async def reembed(
    engine: MemoryEngine,
    bank_id: str,
    model: str,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    switch: bool = True,
    progress: ReembedProgress | None = None,
) -> ReembedStatus:
    """Re-embeds every memory of a bank with `model` and switches the bank to it.

    Running it again after an interruption resumes where it stopped. With `switch=False` only
    the new vectors are computed (reads keep using the old ones); run it again with
    `switch=True` to finish.

    Args:
        engine: The engine (`AsyncClient.engine`).
        bank_id: The bank.
        model: The new embedding model.
        batch_size: Memories per embedding request and per write.
        switch: Switch the bank once the vectors are computed.
        progress: Called after each batch with (phase, done, total).

    Returns:
        The status; `phase == "done"` once the bank uses the new model (the state documents
        are deleted by then, so `Reembedder.status` returns None afterwards).
    """
    return await Reembedder(engine, batch_size=batch_size).run(
        bank_id, model, switch=switch, progress=progress
    )
