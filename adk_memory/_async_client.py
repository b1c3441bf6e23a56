"""`AsyncClient`: the official SDK's Memory Bank surface, over the local engine.

Method names, keyword-only signatures and return types are the SDK's (`agentplatform` 2.6,
reference §2): `memory_banks.{create,get,list,update,delete}`,
`memory_banks.memories.{create,get,list,update,delete,retrieve,rollback,purge}`,
`memory_banks.memories.revisions.{get,list}`, `operations.get`, and the older
`agent_engines.*` surface the seeds use. Requests are validated into the SDK's own config models
(`extra="forbid"`, so a typo is an `InvalidArgument`). Every operation completes before it
returns (`done=True`).
"""

from __future__ import annotations

import abc
import builtins
from collections.abc import Collection
from typing import Any, ClassVar, cast

from pydantic import BaseModel

from adk_memory import types
from adk_memory._agent_engines import AgentEngine, FlatMemoryHelpers, engine_config
from adk_memory._pagers import AsyncPager, first_page
from adk_memory._registry import is_server_uri, store_from_uri
from adk_memory.engine import MemoryEngine
from adk_memory.engine.banks import to_memory_bank, to_reasoning_engine_json
from adk_memory.engine.convert import built, parse_model, to_memory, to_revision
from adk_memory.engine.generate import events_from_session
from adk_memory.engine.ingest import StreamStatus
from adk_memory.engine.paging import Position, page_after
from adk_memory.errors import InvalidArgument, Unimplemented
from adk_memory.extensions import BankExtensions
from adk_memory.names import Names
from adk_memory.scheduler import IngestScheduler
from adk_memory.scope import validate_scope
from adk_memory.settings import default_embedding_model, default_uri
from adk_memory.store import MemoryRecord, MemoryStore, OperationRecord
from adk_memory.telemetry import instrument_engine_context, trace_store, traced_resource

__all__ = [
    "AsyncAgentEngines",
    "AsyncClient",
    "AsyncMemories",
    "AsyncMemoryBanks",
    "AsyncMemoryRevisions",
    "AsyncOperations",
]

_OPERATION_TYPES: dict[str, type[BaseModel]] = {
    "memory": types.MemoryOperation,
    "delete_memory": types.DeleteMemoryOperation,
    "rollback": types.RollbackMemoryOperation,
    "purge": types.PurgeMemoriesOperation,
    "generate": types.GenerateMemoriesOperation,
    "bank": types.MemoryBankOperation,
    "delete_bank": types.DeleteMemoryBankOperation,
    "ingest": types.MemoryBankIngestEventsOperation,
}


@traced_resource("memories.revisions")
class AsyncMemoryRevisions:
    """`memory_banks.memories.revisions`."""

    def __init__(self, engine: MemoryEngine) -> None:
        self._engine = engine

    async def get(self, *, name: str, config: Any = None) -> types.MemoryRevision:
        """One revision by its full name."""
        parse_model(types.GetMemoryRevisionConfig, config, field="config")
        bank_id, memory_id, revision_id = Names.parse_revision(name)
        found = await self._engine.memories.get_revision(bank_id, memory_id, revision_id)
        return to_revision(found, bank_id, self._engine.names)

    async def list(self, *, name: str, config: Any = None) -> AsyncPager[types.MemoryRevision]:
        """The revisions of a memory (deleted or not), newest first."""
        checked = parse_model(types.ListMemoryRevisionsConfig, config, field="config")
        bank_id, memory_id = Names.parse_memory(name)

        async def fetch(token: str | None) -> tuple[list[types.MemoryRevision], str | None]:
            paged = checked.model_copy(update={"page_token": token})
            page = await self._engine.memories.list_revisions(bank_id, memory_id, paged)
            return [
                to_revision(r, bank_id, self._engine.names) for r in page.items
            ], page.next_page_token

        return await first_page(fetch, checked.page_token)


@traced_resource("memories")
class AsyncMemories:
    """`memory_banks.memories` (also `agent_engines.memories`)."""

    def __init__(self, engine: MemoryEngine) -> None:
        self._engine = engine
        self.revisions = AsyncMemoryRevisions(engine)

    async def create(
        self, *, name: str, fact: str, scope: dict[str, str], config: Any = None
    ) -> types.MemoryOperation:
        """Creates a memory in the bank `name`; the operation is done when it returns."""
        checked = parse_model(types.MemoryConfig, config, field="config")
        bank_id = Names.parse_bank(name)
        recorded: list[tuple[types.MemoryOperation, OperationRecord]] = []

        def operation_of(record: MemoryRecord) -> OperationRecord:
            memory = to_memory(record, bank_id, self._engine.names)
            operation = types.MemoryOperation(done=True, response=memory)
            path = f"memories/{record.memory_id}"
            stored = self._engine.context.operation_record(bank_id, path, "memory", operation)
            recorded.append((operation, stored))
            return stored

        # The operation goes into the memory's own atomic write (one store call less).
        await self._engine.memories.create(
            bank_id, fact=fact, scope=scope, config=checked, operation=operation_of
        )
        [(operation, stored)] = recorded
        operation.name = self._engine.names.operation(bank_id, stored.operation_path)
        return operation

    async def get(self, *, name: str, config: Any = None) -> types.Memory:
        """A live memory by its full or short name; `NotFound` if missing or expired."""
        parse_model(types.GetMemoryConfig, config, field="config")
        bank_id, memory_id = Names.parse_memory(name)
        record = await self._engine.memories.get(bank_id, memory_id)
        return to_memory(record, bank_id, self._engine.names)

    async def list(self, *, name: str, config: Any = None) -> AsyncPager[types.Memory]:
        """Every live memory of the bank, in pages (`filter` may name `scope.KEY`)."""
        checked = parse_model(types.ListMemoriesConfig, config, field="config")
        bank_id = Names.parse_bank(name)

        async def fetch(token: str | None) -> tuple[list[types.Memory], str | None]:
            page = await self._engine.memories.list(
                bank_id, checked.model_copy(update={"page_token": token})
            )
            return [
                to_memory(r, bank_id, self._engine.names) for r in page.items
            ], page.next_page_token

        return await first_page(fetch, checked.page_token)

    async def update(
        self,
        *,
        name: str,
        fact: str | None = None,
        scope: dict[str, str] | None = None,
        config: Any = None,
    ) -> types.MemoryOperation:
        """Updates the masked fields, or every field given when there is no `update_mask`."""
        checked = parse_model(types.UpdateMemoryConfig, config, field="config")
        bank_id, memory_id = Names.parse_memory(name)
        if checked.memory_id not in (None, memory_id):
            raise InvalidArgument(
                "config.memory_id must match the memory's name.", field="config.memory_id"
            )
        record = await self._engine.memories.update(
            bank_id, memory_id, fact=fact, scope=scope, config=checked
        )
        memory = to_memory(record, bank_id, self._engine.names)
        return await self._done(
            bank_id,
            f"memories/{memory_id}",
            "memory",
            types.MemoryOperation(done=True, response=memory),
        )

    _update = update  # the SDK's (private) spelling

    async def delete(self, *, name: str, config: Any = None) -> types.DeleteMemoryOperation:
        """Deletes a memory; its revisions stay until they expire."""
        parse_model(types.DeleteMemoryConfig, config, field="config")
        bank_id, memory_id = Names.parse_memory(name)
        await self._engine.memories.delete(bank_id, memory_id)
        return await self._done(
            bank_id,
            f"memories/{memory_id}",
            "delete_memory",
            types.DeleteMemoryOperation(done=True),
        )

    async def retrieve(
        self,
        *,
        name: str,
        scope: dict[str, str],
        similarity_search_params: Any = None,
        simple_retrieval_params: Any = None,
        config: Any = None,
    ) -> AsyncPager[types.RetrieveMemoriesResponseRetrievedMemory]:
        """Memories of exactly `scope`: the nearest `top_k`, all of them, or pages of them."""
        checked = parse_model(types.RetrieveMemoriesConfig, config, field="config")
        similarity = _optional(
            types.RetrieveMemoriesRequestSimilaritySearchParams,
            similarity_search_params,
            "similarity_search_params",
        )
        simple = _optional(
            types.RetrieveMemoriesRequestSimpleRetrievalParams,
            simple_retrieval_params,
            "simple_retrieval_params",
        )
        bank_id = Names.parse_bank(name)

        async def fetch(
            token: str | None,
        ) -> tuple[list[types.RetrieveMemoriesResponseRetrievedMemory], str | None]:
            # Retrieve-all answers the whole scope at once (no token); only simple retrieval
            # pages.
            params = None if simple is None else simple.model_copy(update={"page_token": token})
            page = await self._engine.retrieval.retrieve(
                bank_id,
                scope=scope,
                similarity_search_params=similarity,
                simple_retrieval_params=params,
                config=checked,
            )
            found = [
                built(
                    types.RetrieveMemoriesResponseRetrievedMemory,
                    memory=to_memory(hit.record, bank_id, self._engine.names),
                    distance=hit.distance,
                )
                for hit in page.items
            ]
            return found, page.next_page_token

        return await first_page(fetch, simple.page_token if simple is not None else None)

    async def rollback(
        self, *, name: str, target_revision_id: str, config: Any = None
    ) -> types.RollbackMemoryOperation:
        """Restores a revision of the memory (recreating it if it was deleted)."""
        parse_model(types.RollbackMemoryConfig, config, field="config")
        bank_id, memory_id = Names.parse_memory(name)
        record = await self._engine.memories.rollback(bank_id, memory_id, target_revision_id)
        memory = to_memory(record, bank_id, self._engine.names)
        # Recorded as a MemoryOperation: the SDK polls rollback as one and reads the memory.
        operation = types.MemoryOperation(done=True, response=memory)
        name = await self._engine.context.record_operation(
            bank_id, f"memories/{memory_id}", "memory", operation
        )
        return types.RollbackMemoryOperation(name=name, done=True)

    async def purge(
        self,
        *,
        name: str,
        filter: str | None = None,
        filter_groups: builtins.list[Any] | None = None,
        force: bool = False,
        config: Any = None,
    ) -> types.PurgeMemoriesOperation:
        """Counts (`force=False`) or deletes (`force=True`) the memories the filters select."""
        parse_model(types.PurgeMemoriesConfig, config, field="config")
        bank_id = Names.parse_bank(name)
        count = await self._engine.memories.purge(
            bank_id, filter=filter, filter_groups=filter_groups, force=bool(force)
        )
        response = types.PurgeMemoriesResponse(purge_count=count)
        return await self._done(
            bank_id, "", "purge", types.PurgeMemoriesOperation(done=True, response=response)
        )

    async def generate(
        self,
        *,
        name: str,
        vertex_session_source: Any = None,
        direct_contents_source: Any = None,
        direct_memories_source: Any = None,
        scope: dict[str, str] | None = None,
        config: Any = None,
    ) -> types.GenerateMemoriesOperation:
        """Extracts memories from a conversation (or takes direct ones) and consolidates them."""
        checked = parse_model(types.GenerateMemoriesConfig, config, field="config")
        given = [
            s
            for s in (vertex_session_source, direct_contents_source, direct_memories_source)
            if s is not None
        ]
        if len(given) != 1:
            raise InvalidArgument(
                "Set exactly one of vertex_session_source, direct_contents_source and "
                "direct_memories_source.",
                field="direct_contents_source",
            )
        bank_id = Names.parse_bank(name)
        events = direct = None
        if direct_contents_source is not None:
            contents = parse_model(
                types.GenerateMemoriesRequestDirectContentsSource,
                direct_contents_source,
                field="direct_contents_source",
            )
            events = [event.content for event in contents.events or () if event.content is not None]
        elif direct_memories_source is not None:
            memories = parse_model(
                types.GenerateMemoriesRequestDirectMemoriesSource,
                direct_memories_source,
                field="direct_memories_source",
            )
            direct = list(memories.direct_memories or ())
        else:
            session = parse_model(
                types.GenerateMemoriesRequestVertexSessionSource,
                vertex_session_source,
                field="vertex_session_source",
            )
            events, scope = await events_from_session(
                self._engine.context.session_service, session, scope
            )
        if scope is None:
            raise InvalidArgument(
                "scope is required: the memories' owner, e.g. {'user_id': '123'}.", field="scope"
            )
        result = await self._engine.generation.generate(
            bank_id,
            scope=scope,
            events=events,
            direct_memories=direct,
            config=checked,
            model=self._engine.context.generation_model,
        )
        names = self._engine.names
        generated = [
            types.GenerateMemoriesResponseGeneratedMemory(
                memory=to_memory(action.record, bank_id, names),
                action=types.GenerateMemoriesResponseGeneratedMemoryAction(action.action),
                previous_revision=names.revision(
                    bank_id, action.record.memory_id, action.previous_revision_id
                )
                if action.previous_revision_id
                else None,
            )
            for action in result.actions
        ]
        operation = types.GenerateMemoriesOperation(
            done=True,
            response=types.GenerateMemoriesResponse(generated_memories=generated),
            metadata=result.stats.as_metadata(),
        )
        return await self._done(bank_id, "", "generate", operation)

    async def retrieve_profiles(
        self, *, name: str, scope: dict[str, str], config: Any = None
    ) -> types.RetrieveProfilesResponse:
        """The structured profiles of exactly `scope`, by schema id."""
        parse_model(types.RetrieveMemoryProfilesConfig, config, field="config")
        bank_id = Names.parse_bank(name)
        records = await self._engine.memories.profiles(bank_id, scope)
        return types.RetrieveProfilesResponse(
            profiles={
                record.schema_id or "": types.MemoryProfile(
                    schema_id=record.schema_id, profile=dict(record.structured_data or {})
                )
                for record in records
            }
        )

    async def _done(self, bank_id: str, parent: str, kind: str, operation: Any) -> Any:
        operation.name = await self._engine.context.record_operation(
            bank_id, parent, kind, operation
        )
        return operation


@traced_resource("memory_banks")
class AsyncMemoryBanks:
    """`memory_banks`."""

    def __init__(
        self, engine: MemoryEngine, scheduler: IngestScheduler, *, start_scheduler: bool
    ) -> None:
        self._engine = engine
        self._scheduler = scheduler
        self._start_scheduler = start_scheduler
        self.memories = AsyncMemories(engine)

    async def create(
        self,
        *,
        managed_semantic_memory_config: Any = None,
        config: Any = None,
        memory_bank_id: str | None = None,
        extensions: Any = None,
    ) -> types.MemoryBank:
        """Creates a bank.

        Our extensions (the SDK has neither): `memory_bank_id`, a fixed id instead of a new one;
        `extensions`, an `adk_memory.extensions.BankExtensions` (e.g. hybrid retrieval).
        """
        checked = parse_model(types.CreateMemoryBankConfig, config, field="config")
        if checked.encryption_spec is not None:
            raise Unimplemented(
                "encryption_spec (customer-managed keys) is not supported; encrypt the store "
                "itself (disk encryption, Redis TLS and at-rest encryption) instead.",
                field="config.encryption_spec",
            )
        record = await self._engine.banks.create(
            managed_semantic_memory_config or {},
            display_name=checked.display_name,
            description=checked.description,
            bank_id=memory_bank_id,
            extensions=extensions,
        )
        return to_memory_bank(record, self._engine.names)

    async def get(self, *, name: str, config: Any = None) -> types.MemoryBank:
        """A bank with its config."""
        parse_model(types.GetMemoryBankConfig, config, field="config")
        record = await self._engine.banks.get(Names.parse_bank(name))
        return to_memory_bank(record, self._engine.names)

    async def list(
        self, *, config: Any = None, bank_ids: Collection[str] | None = None
    ) -> AsyncPager[types.MemoryBank]:
        """Every bank, oldest first, in pages.

        Our extension (the SDK has none): `bank_ids`, only the banks with these ids, so that the
        pages of a REST key limited to some banks hold (and count) no other bank.
        """
        checked = parse_model(types.ListMemoryBanksConfig, config, field="config")
        only = None if bank_ids is None else frozenset(bank_ids)
        if checked.page_size is not None and checked.page_size < 0:
            raise InvalidArgument(
                "config.page_size must not be negative.", field="config.page_size"
            )

        async def fetch(token: str | None) -> tuple[list[types.MemoryBank], str | None]:
            banks = await self._engine.banks.list()
            page = page_after(
                [bank for bank in banks if only is None or bank.bank_id in only],
                page_size=checked.page_size or 100,
                token=token,
                fingerprint=repr(("memory_banks", None if only is None else sorted(only))),
                position_of=lambda bank: Position((bank.create_time,), bank.bank_id),
            )
            names = self._engine.names
            return [to_memory_bank(record, names) for record in page.items], page.next_page_token

        return await first_page(fetch, checked.page_token)

    async def update(
        self,
        *,
        name: str,
        managed_semantic_memory_config: Any = None,
        config: Any = None,
        extensions: Any = None,
    ) -> types.MemoryBank:
        """Merges the non-empty top-level config fields given into the bank's config.

        `extensions` (ours) replaces the bank's `BankExtensions` when given.
        """
        checked = parse_model(types.UpdateMemoryBankConfig, config, field="config")
        record = await self._engine.banks.update(
            Names.parse_bank(name),
            managed_semantic_memory_config,
            display_name=checked.display_name,
            description=checked.description,
            extensions=extensions,
        )
        return to_memory_bank(record, self._engine.names)

    async def get_extensions(self, *, name: str) -> BankExtensions:
        """The bank's adk-memory extensions (ours; the SDK has no such call)."""
        return (await self._engine.context.load_bank(Names.parse_bank(name))).extensions

    async def delete(
        self, *, name: str, force: bool | None = None, config: Any = None
    ) -> types.DeleteMemoryBankOperation:
        """Deletes a bank; one that still holds memories needs `force=True`."""
        parse_model(types.DeleteMemoryBankConfig, config, field="config")
        bank_id = Names.parse_bank(name)
        await self._engine.banks.delete(bank_id, force=bool(force))
        return types.DeleteMemoryBankOperation(
            name=self._engine.names.operation(bank_id, "operations/delete"), done=True
        )

    async def list_streams(
        self, *, name: str, scope: dict[str, str] | None = None
    ) -> builtins.list[StreamStatus]:
        """The bank's ingest streams holding events not generated from yet, oldest first (ours).

        With `scope`, only that scope's streams. Each carries its pending count, failures,
        last error and next retry (`adk-memory streams list`).
        """
        checked = None if scope is None else validate_scope(scope)
        return await self._engine.ingest.streams(Names.parse_bank(name), scope=checked)

    async def flush_stream(self, *, name: str, key: str) -> int:
        """Generates from a stream's pending events now, whatever its trigger and back-off (ours).

        Returns how many memories were created or changed (0 for a stream without pending
        events); a failed generation is raised after the stream records it.
        """
        return await self._engine.ingest.flush(
            Names.parse_bank(name), key, now_or_never=True, raise_failure=True
        )

    async def ingest_events(
        self,
        *,
        name: str,
        scope: dict[str, str],
        stream_id: str = "",
        direct_contents_source: Any = None,
        generation_trigger_config: Any = None,
        config: Any = None,
    ) -> types.MemoryBankIngestEventsOperation:
        """Buffers events on a stream; generation runs when its trigger fires.

        Returns at once with a pending operation (`operations.get` reports when its flush ran),
        unless `config.wait_for_completion` is set.
        """
        checked = parse_model(types.IngestEventsConfig, config, field="config")
        bank_id = Names.parse_bank(name)
        key, record, due = await self._engine.ingest.ingest(
            bank_id,
            scope=scope,
            stream_id=stream_id,
            source=direct_contents_source,
            trigger_config=generation_trigger_config,
            config=checked,
        )
        name = self._engine.names.operation(bank_id, record.operation_path)
        if due and checked.wait_for_completion:
            await self._engine.ingest.flush(bank_id, key)
            record = await self._engine.get_operation(name)  # the flush completed it
        elif due:
            self._scheduler.kick(bank_id, key)
        if self._start_scheduler:
            self._scheduler.start()
        return types.MemoryBankIngestEventsOperation.model_validate(
            {**record.payload["operation"], "name": name}
        )


@traced_resource("agent_engines")
class AsyncAgentEngines(FlatMemoryHelpers):
    """The older `agent_engines` surface the seeds use; a memory bank is a reasoning engine."""

    def __init__(self, engine: MemoryEngine, banks: AsyncMemoryBanks) -> None:
        self._engine = engine
        self._banks = banks
        self.memories = banks.memories

    async def create(
        self, *, agent_engine: Any = None, agent: Any = None, config: Any = None
    ) -> AgentEngine:
        """Creates a bank from `config={"context_spec": {"memory_bank_config": …}, …}`."""
        spec, display_name, description = engine_config(config, agent_engine or agent)
        record = await self._engine.banks.create(
            spec, display_name=display_name, description=description
        )
        return self._wrap(record)

    async def update(
        self, *, name: str, agent_engine: Any = None, agent: Any = None, config: Any = None
    ) -> AgentEngine:
        """Merges a new `context_spec.memory_bank_config` (and names) into the bank."""
        spec, display_name, description = engine_config(config, agent_engine or agent)
        record = await self._engine.banks.update(
            Names.parse_bank(name), spec, display_name=display_name, description=description
        )
        return self._wrap(record)

    async def get(self, *, name: str, config: Any = None) -> AgentEngine:
        """The bank as a reasoning engine."""
        return self._wrap(await self._engine.banks.get(Names.parse_bank(name)))

    async def list(self, *, config: Any = None) -> list[AgentEngine]:
        """Every bank as a reasoning engine."""
        return [self._wrap(record) for record in await self._engine.banks.list()]

    async def delete(self, *, name: str, force: bool = False, config: Any = None) -> None:
        """Deletes the bank (`force` also deletes its memories)."""
        await self._engine.banks.delete(Names.parse_bank(name), force=force)

    def _wrap(self, record: Any) -> AgentEngine:
        payload = to_reasoning_engine_json(record, self._engine.names)
        return AgentEngine(api_resource=types.ReasoningEngine.model_validate(payload))


@traced_resource("operations")
class AsyncOperations:
    """`operations.get`: every operation is recorded in the store."""

    def __init__(self, engine: MemoryEngine) -> None:
        self._engine = engine

    async def record_bank(self, bank: types.MemoryBank) -> types.MemoryBankOperation:
        """A done operation for a bank create or update, recorded so that `get` finds it.

        The REST server answers a bank create or update with one, as Agent Platform does; the
        SDK may then get it by name (reference §2.12).
        """
        operation = types.MemoryBankOperation(done=True, response=bank)
        operation.name = await self._engine.context.record_operation(
            Names.parse_bank(bank.name or ""), "", "bank", operation
        )
        return operation

    async def get(self, name: str) -> Any:
        """The operation, typed by what produced it (e.g. `PurgeMemoriesOperation`)."""
        record = await self._engine.get_operation(name)
        model = _OPERATION_TYPES.get(str(record.payload.get("kind")), types.MemoryBankOperation)
        return model.model_validate(
            {
                **record.payload["operation"],
                "name": self._engine.names.operation(record.bank_id, record.operation_path),
            }
        )


class AsyncClient(metaclass=abc.ABCMeta):  # noqa: B024 - ABCMeta for `register` only
    """The Memory Bank client over a store chosen by URI.

    An `http://` or `https://` URI names a running `adk-memory serve` instead: the client is then
    a `RemoteAsyncClient` (`adk_memory._remote`) with the same resources and methods, answered
    by the server.
    """

    remote: ClassVar[bool] = False
    """Whether calls go to an adk-memory server (then there is no `engine` here)."""

    def __new__(cls, uri: str | None = None, *args: Any, **kwargs: Any) -> AsyncClient:
        """A `RemoteAsyncClient` for a server URI (given, or `ADK_MEMORY_URI`), else this."""
        if cls is AsyncClient and kwargs.get("store") is None:
            if is_server_uri(uri if uri is not None else default_uri()):
                from adk_memory._remote import RemoteAsyncClient

                # Not an instance of this class (a virtual subclass): __init__ is not run again.
                return cast(AsyncClient, RemoteAsyncClient(uri, *args, **kwargs))
        return super().__new__(cls)

    def __init__(
        self,
        uri: str | None = None,
        *,
        project: str = "local",
        location: str = "local",
        store: MemoryStore | None = None,
        embedding_model: str | None = None,
        genai_client: Any = None,
        generation_model: Any = None,
        session_service: Any = None,
        run_scheduler: bool = True,
        serving: bool = False,
        **store_options: Any,
    ) -> None:
        """Builds the client without I/O; the store connects on first use.

        Args:
            uri: `chroma:///path`, `chroma+http://host:port`, `redis://…`, `rediss://…` or
                `memory://`; or an adk-memory server's `http://host:port` (see the class
                docstring). Default: `ADK_MEMORY_URI`, else embedded Chroma in `~/.adk-memory`.
            project: The project segment of resource names.
            location: The location segment of resource names.
            store: A store you built (then `uri` must be None).
            embedding_model: The model for banks created without one (default: the offline
                all-MiniLM-L6-v2, or `ADK_MEMORY_EMBEDDING_MODEL`).
            genai_client: A `google.genai.Client` for Gemini embeddings (default: from the env).
            generation_model: A model name or ADK `BaseLlm` for generation, overriding every
                bank's `generation_config.model` (e.g. a scripted model in tests).
            session_service: An ADK session service, for `vertex_session_source`.
            run_scheduler: Flush due ingest streams in the background while the client lives
                (started by the first `ingest_events`).
            serving: The client serves many callers for a long time (an ADK service, a server):
                the store takes the options its backend gives for that (embedded Chroma runs in
                a child process; `store_from_uri`). The URI and `store_options` win.
            **store_options: Passed to the backend's `from_uri`.
        """
        if store is not None and uri is not None:
            raise InvalidArgument("Pass either uri or store, not both.", field="uri")
        self.uri = uri or default_uri()
        self.built_from_uri = store is None
        """False when built on a store object: then `uri` does not say where the data is."""
        # Spans for every store round trip and embedding batch (adk_memory.telemetry).
        self._store = trace_store(
            store or store_from_uri(self.uri, serving=serving, **store_options)
        )
        self.engine = MemoryEngine(
            self._store,
            names=Names(project=project, location=location),
            default_embedding_model=embedding_model or default_embedding_model(),
            genai_client=genai_client,
            generation_model=generation_model,
            session_service=session_service,
        )
        instrument_engine_context(self.engine.context)
        self.ingest_scheduler = IngestScheduler(self.engine)
        self.memory_banks = AsyncMemoryBanks(
            self.engine, self.ingest_scheduler, start_scheduler=run_scheduler
        )
        self.agent_engines = AsyncAgentEngines(self.engine, self.memory_banks)
        self.operations = AsyncOperations(self.engine)

    async def aclose(self) -> None:
        """Stops the ingest scheduler (letting running flushes finish) and closes the store."""
        await self.ingest_scheduler.stop()
        await self.engine.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def _optional(model: type[BaseModel], value: Any, field: str) -> Any:
    return None if value is None else parse_model(model, value, field=field)


def _register_remote() -> None:
    """Makes `RemoteAsyncClient` a virtual subclass, so `isinstance(…, AsyncClient)` holds."""
    from adk_memory._remote import RemoteAsyncClient

    AsyncClient.register(RemoteAsyncClient)


_register_remote()
