"""GenerateMemories: extraction, then consolidation with the scope's existing memories (SPEC §3).

One request makes at most two logical LLM calls (extraction, consolidation) and none after an
empty extraction. Consolidation runs under the scope's lock, so two requests on one scope never
interleave their read-decide-write, and all of a request's actions (memories and revisions) are
one `WriteBatch`: either all of them become visible or none. An answer that names a memory
outside the candidates is refused (and re-asked, within the retry bound). The candidates' store
reads run concurrently and their revisions are read in one batched call (their latency is a few
round trips, not one per fact and per candidate), and facts are embedded once: a memory written
with a fact's exact text reuses its vector.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import re
from collections.abc import AsyncIterator, Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from google.genai import types as genai_types

from adk_memory import types
from adk_memory.engine.context import EngineContext, LoadedBank
from adk_memory.engine.convert import metadata_from_request, to_utc, topics_from_request
from adk_memory.engine.expiry import UNCHANGED, Action, memory_expiry, revision_expiry
from adk_memory.engine.memories import (
    new_revision_id,
    next_update_time,
    unchanged,
    validate_fact,
)
from adk_memory.engine.profiles import (
    PROFILE_TYPE,
    ProfileSchema,
    canonical_json,
    profile_memory_id,
    schemas_for,
    validate_profile,
)
from adk_memory.errors import Aborted, FailedPrecondition, InvalidArgument, NotFound
from adk_memory.generation import (
    CallStats,
    ConsolidationOutput,
    ExtractedFact,
    ExtractionOutput,
    ExtractionWithProfiles,
    call_structured,
    resolve_model,
)
from adk_memory.generation.model import ModelAnswerRejected, accepts_attachments
from adk_memory.generation.prompts import (
    MANAGED_TOPICS,
    Candidate,
    Topic,
    attachments_of,
    consolidation_prompt,
    extraction_prompt,
    render_conversation,
)
from adk_memory.generation.schemas import extraction_wire_schema
from adk_memory.locks import Lease
from adk_memory.names import new_memory_id
from adk_memory.scope import ScopeKey, profile_scope_key, scope_key, validate_scope
from adk_memory.store import (
    DocumentRecord,
    Expectation,
    MemoryRecord,
    MetadataValue,
    NearestQuery,
    RevisionRecord,
    TopicRef,
    WriteBatch,
)

__all__ = [
    "MAX_DIRECT_MEMORIES",
    "GenerateOps",
    "GenerateResult",
    "GeneratedAction",
    "events_from_session",
]

MAX_DIRECT_MEMORIES = 5
CANDIDATES_PER_FACT = 5
MAX_CANDIDATES = 25
MAX_CONVERSATION_CHARS = 500_000
_WRITE_ATTEMPTS = 3
"""Attempts of a request's batch whose targets a concurrent write changed (each drops them)."""
_T = TypeVar("_T")
_SESSION_NAME = re.compile(
    r"(?:projects/[^/]+/locations/[^/]+/)?reasoningEngines/(?P<app>[^/]+)/sessions/(?P<session>[^/]+)"
)


@dataclass(frozen=True, slots=True)
class GeneratedAction:
    """One action of a generate request: CREATED, UPDATED or DELETED."""

    action: str
    record: MemoryRecord
    previous_revision_id: str | None = None
    expect: Expectation | None = None
    """What the write needs of the store: the target as read (UPDATED, DELETED) or a free id."""


@dataclass(slots=True)
class GenerateResult:
    """The actions of a request and what the model calls cost."""

    actions: list[GeneratedAction] = field(default_factory=list)
    stats: CallStats = field(default_factory=CallStats)


@dataclass(frozen=True, slots=True)
class _Request:
    """A validated generate request, whatever its source."""

    bank: LoadedBank
    scope: dict[str, str]
    scope_key: ScopeKey
    customization: types.MemoryBankCustomizationConfig | None
    topics: tuple[Topic, ...]
    config: types.GenerateMemoriesConfig
    metadata: dict[str, MetadataValue]
    now: datetime
    profiles: list[ProfileSchema]


class GenerateOps:
    """The generate half of the engine."""

    def __init__(self, context: EngineContext) -> None:
        self._context = context

    async def generate(
        self,
        bank_id: str,
        *,
        scope: Any,
        events: Sequence[genai_types.Content] | None,
        direct_memories: Sequence[types.GenerateMemoriesRequestDirectMemoriesSourceDirectMemory]
        | None,
        config: types.GenerateMemoriesConfig,
        model: Any = None,
        documents: Sequence[DocumentRecord] = (),
        fences: Sequence[Lease] = (),
        bank: LoadedBank | None = None,
    ) -> GenerateResult:
        """Extracts facts from `events` (or takes `direct_memories`) and consolidates them.

        `documents` are written in the same atomic `WriteBatch` as the memories (ingest's
        stream), or alone when the request changes no memory: once this returns they are
        stored, and if it raises, none of the request's writes are. `fences` are leases of
        the caller's locks (ingest's stream lock) that the batch must still hold, besides the
        scope lock's own. `bank`: the bank as the caller just loaded it (ingest's flush, under
        its stream lock), instead of reading it again.
        """
        if (events is None) == (direct_memories is None):
            raise InvalidArgument(
                "Set exactly one of direct_contents_source, direct_memories_source and "
                "vertex_session_source.",
                field="direct_contents_source",
            )
        request = await self._request(bank_id, scope, config, bank)
        result = GenerateResult()
        natural_language = not (
            request.customization is not None
            and request.customization.disable_natural_language_memories
        )
        profiles = request.profiles if events is not None else []
        if not natural_language and not profiles:
            await self._put_documents(bank_id, documents, fences)
            return result
        conversation = ""
        attachments: list[genai_types.Part] = []
        if events is not None:
            attachments = attachments_of(events)
            conversation = render_conversation(events)
            if not conversation.strip():
                await self._put_documents(bank_id, documents, fences)
                return result
            if len(conversation) > MAX_CONVERSATION_CHARS:
                raise InvalidArgument(
                    f"The conversation has {len(conversation)} characters of text; at most "
                    f"{MAX_CONVERSATION_CHARS} are accepted per request. Split it.",
                    field="direct_contents_source",
                )
        llm = resolve_model(model or _configured_model(request.bank))
        # SPEC §3: one scope's read-decide-write never interleaves with another request's.
        needs_lock = bool(profiles) or not config.disable_consolidation
        lock_name = f"generate:{bank_id}:{request.scope_key}"
        async with (
            self._context.store.lock_provider().lock(lock_name) if needs_lock else _no_lock()
        ) as lease:
            current = await self._current_profiles(request, profiles)
            if direct_memories is not None:
                facts = _direct_facts(direct_memories)
                updates: dict[str, dict[str, Any]] = {}
            else:
                facts, updates = await self._extract(
                    llm, conversation, request, result.stats, current, natural_language, attachments
                )
            if facts and config.disable_consolidation:
                result.actions = self._create_all(facts, request)
            elif facts:
                result.actions = await self._consolidate(llm, facts, request, result.stats)
            result.actions += await self._profile_actions(request, current, updates)
            held = (*fences, *([lease] if lease is not None else []))
            if result.actions:
                result.actions = await self._apply(request, result.actions, facts, documents, held)
            else:
                await self._put_documents(bank_id, documents, held)
        return result

    async def _put_documents(
        self, bank_id: str, documents: Sequence[DocumentRecord], fences: Sequence[Lease]
    ) -> None:
        """Writes the documents of a request that changes no memory (in one atomic batch)."""
        if documents:
            batch = WriteBatch(documents=tuple(documents), fences=tuple(fences))
            await self._context.store.apply(bank_id, batch)

    # Request and config

    async def _request(
        self,
        bank_id: str,
        scope: Any,
        config: types.GenerateMemoriesConfig,
        bank: LoadedBank | None,
    ) -> _Request:
        checked_scope = validate_scope(scope)
        metadata = check_generate_settings(config, field="config")
        if bank is None:
            bank = await self._context.load_bank(bank_id)
        customization = _customization_for(bank, checked_scope)
        topics = _topics_of(customization)
        if config.allowed_topics:
            allowed = {
                _topic_label(topic, index) for index, topic in enumerate(config.allowed_topics)
            }
            unknown = allowed - {topic.label for topic in topics}
            if unknown:
                raise InvalidArgument(
                    f"config.allowed_topics names topics this bank's config for scope keys "
                    f"{sorted(checked_scope)} does not define: {', '.join(sorted(unknown))}. "
                    f"Defined: {', '.join(topic.label for topic in topics)}.",
                    field="config.allowed_topics",
                )
            topics = tuple(topic for topic in topics if topic.label in allowed)
        return _Request(
            bank,
            checked_scope,
            scope_key(checked_scope),
            customization,
            topics,
            config,
            metadata,
            self._context.clock(),
            schemas_for(bank.config, checked_scope),
        )

    # Extraction

    async def _extract(
        self,
        llm: Any,
        conversation: str,
        request: _Request,
        stats: CallStats,
        current: dict[str, tuple[ProfileSchema, MemoryRecord | None]],
        natural_language: bool,
        attachments: Sequence[genai_types.Part] = (),
    ) -> tuple[list[ExtractedFact], dict[str, dict[str, Any]]]:
        """One call: the facts worth remembering and, where schemas apply, profile updates.

        The conversation's attachments go with it to a model that reads them
        (`accepts_attachments`); another model gets the text and a note.
        """
        customization = request.customization
        prompt = extraction_prompt(
            conversation,
            topics=request.topics if natural_language else (),
            examples=_examples_of(customization) if natural_language else [],
            third_person=bool(customization and customization.enable_third_person_memories),
            profiles=[
                (
                    schema.schema_id,
                    schema.partial_schema(),
                    dict(record.structured_data or {}) if record else None,
                )
                for schema, record in current.values()
            ],
            attachments=attachments,
            attachments_shown=accepts_attachments(llm),
        )
        answer = await call_structured(
            llm,
            system_instruction=prompt.system_instruction,
            contents=prompt.contents,
            schema=ExtractionWithProfiles if current else ExtractionOutput,
            wire_schema=extraction_wire_schema(
                {key: schema.partial_schema() for key, (schema, _) in current.items()}
            )
            if current
            else None,
            stats=stats,
            check=lambda output: _check_profiles(output, current),
        )
        labels = {topic.label for topic in request.topics}
        kept = []
        for fact in answer.memories if natural_language else []:
            if not fact.fact.strip():
                continue
            fact.topics = [label for label in fact.topics if label in labels]
            if fact.topics or fact.forget or not labels:
                kept.append(fact)
        updates = getattr(answer, "profiles", None) or {}
        return kept, {key: value for key, value in updates.items() if value}

    async def _current_profiles(
        self, request: _Request, schemas: Sequence[ProfileSchema]
    ) -> dict[str, tuple[ProfileSchema, MemoryRecord | None]]:
        """Each schema in force with the scope's current profile record (or None), one read."""
        if not schemas:
            return {}
        ids = [profile_memory_id(request.scope, schema.schema_id) for schema in schemas]
        found = await self._context.store.get_memories(request.bank.bank_id, ids, request.now)
        by_id = {record.memory_id: record for record in found}
        for schema, memory_id in zip(schemas, ids, strict=True):
            record = by_id.get(memory_id)
            if record is not None and (
                record.scope_key != profile_scope_key(request.scope)
                or record.memory_type != PROFILE_TYPE
                or record.schema_id != schema.schema_id
            ):
                raise FailedPrecondition(  # only a crafted import can put one there
                    f"The record under the id of this scope's {schema.schema_id!r} profile is "
                    "not that profile; nothing was written. Delete that memory (it came from an "
                    "import) and retry."
                )
        return {
            schema.schema_id: (schema, by_id.get(memory_id))
            for schema, memory_id in zip(schemas, ids, strict=True)
        }

    async def _profile_actions(
        self,
        request: _Request,
        current: dict[str, tuple[ProfileSchema, MemoryRecord | None]],
        updates: dict[str, dict[str, Any]],
    ) -> list[GeneratedAction]:
        """CREATED/UPDATED actions for the profiles an extraction changed."""
        actions = []
        for schema_id, update in updates.items():
            schema, record = current[schema_id]
            merged = {**dict(record.structured_data or {}), **update} if record else dict(update)
            if record is not None and merged == dict(record.structured_data or {}):
                continue
            text = canonical_json(merged)
            if record is None:
                created = MemoryRecord(
                    memory_id=profile_memory_id(request.scope, schema_id),
                    scope_key=profile_scope_key(request.scope),
                    scope=request.scope,
                    fact=text,
                    embedding=(),
                    create_time=request.now,
                    update_time=request.now,
                    memory_type=PROFILE_TYPE,
                    schema_id=schema_id,
                    structured_data=merged,
                )
                expect = Expectation(created.memory_id, request.now)
                actions.append(GeneratedAction("CREATED", created, expect=expect))
                continue
            revisions = await self._context.store.list_revisions(
                request.bank.bank_id, record.memory_id, request.now
            )
            updated = replace(
                record,
                fact=text,
                embedding=(),
                update_time=next_update_time(request.now, record),
                structured_data=merged,
            )
            previous = revisions[0].revision_id if revisions else None
            expect = unchanged(record, request.now)
            actions.append(GeneratedAction("UPDATED", updated, previous, expect))
        return actions

    # Consolidation

    def _create_all(
        self, facts: Sequence[ExtractedFact], request: _Request
    ) -> list[GeneratedAction]:
        return [
            _created(self._new_record(fact.fact, fact, request, {}), request.now)
            for fact in facts
            if not fact.forget
        ]

    async def _consolidate(
        self, llm: Any, facts: list[ExtractedFact], request: _Request, stats: CallStats
    ) -> list[GeneratedAction]:
        texts = [fact.fact for fact in facts]
        vectors = await request.bank.embedder.embed_documents(texts)
        # A memory written with a fact's exact text reuses its vector: one embedding batch less.
        known = dict(zip(texts, vectors, strict=True))
        candidates, revisions = await self._candidates(vectors, request)
        count = _revisions_per_candidate(request.customization)
        offered = [
            Candidate(
                record.memory_id,
                record.fact,
                tuple(rev.fact for rev in revisions[record.memory_id][:count]),
            )
            for record in candidates.values()
        ]
        prompt = consolidation_prompt(
            [{"fact": f.fact, "topics": f.topics, "forget": f.forget} for f in facts], offered
        )
        answer = await call_structured(
            llm,
            system_instruction=prompt.system_instruction,
            contents=prompt.contents,
            schema=ConsolidationOutput,
            stats=stats,
            check=lambda output: _check_consolidation(output, facts, candidates),
        )
        actions: list[GeneratedAction] = []
        for decision in answer.actions:
            fact = facts[decision.fact_index]
            if decision.action == "CREATE":
                record = self._new_record(decision.fact or fact.fact, fact, request, known)
                actions.append(_created(record, request.now))
            elif decision.action in ("UPDATE", "DELETE"):
                current = candidates[decision.memory_id or ""]
                history = revisions[current.memory_id]
                latest = history[0].revision_id if history else None
                expect = unchanged(current, request.now)
                if decision.action == "DELETE":
                    actions.append(GeneratedAction("DELETED", current, latest, expect))
                else:
                    text = decision.fact or current.fact
                    updated = self._updated_record(current, text, fact, request, known)
                    actions.append(GeneratedAction("UPDATED", updated, latest, expect))
        return actions

    async def _candidates(
        self, vectors: Sequence[tuple[float, ...]], request: _Request
    ) -> tuple[dict[str, MemoryRecord], dict[str, list[RevisionRecord]]]:
        """The nearest existing memories of the scope for each fact, with their revisions.

        Facts are queried in order, in waves run concurrently, each wave as large as the number
        of facts that could still fill MAX_CANDIDATES; once it is full, the later facts could
        only add memories beyond it, so they are not queried. The result is that of querying
        every fact one after the other. The chosen memories' revisions are one batched read.
        """
        found: dict[str, MemoryRecord] = {}
        pending = list(vectors)
        while pending and len(found) < MAX_CANDIDATES:
            size = math.ceil((MAX_CANDIDATES - len(found)) / CANDIDATES_PER_FACT)
            wave, pending = pending[:size], pending[size:]
            for records in await _concurrently(self._nearest(v, request) for v in wave):
                for record in records:
                    found.setdefault(record.memory_id, record)
        chosen = dict(itertools.islice(found.items(), MAX_CANDIDATES))
        if not chosen:
            return {}, {}
        histories = await self._context.store.list_revisions_many(
            request.bank.bank_id, list(chosen), request.now
        )
        return chosen, {memory_id: histories[memory_id] for memory_id in chosen}

    async def _nearest(self, vector: tuple[float, ...], request: _Request) -> list[MemoryRecord]:
        """Up to CANDIDATES_PER_FACT memories of the scope nearest `vector` that may be merged."""
        exact = (
            request.config.metadata_merge_strategy
            == types.MemoryMetadataMergeStrategy.REQUIRE_EXACT_MATCH
        )
        limit = CANDIDATES_PER_FACT * (4 if exact else 1)
        hits = await self._context.store.nearest(
            request.bank.bank_id, NearestQuery(request.scope_key, vector, limit, request.now)
        )
        eligible = (
            hit.record for hit in hits if not exact or dict(hit.record.metadata) == request.metadata
        )
        return list(itertools.islice(eligible, CANDIDATES_PER_FACT))

    # Records

    def _new_record(
        self,
        text: str,
        fact: ExtractedFact,
        request: _Request,
        known: Mapping[str, tuple[float, ...]],
    ) -> MemoryRecord:
        expiry = memory_expiry(
            now=request.now, action=Action.GENERATE_CREATED, bank_ttl=request.bank.config.ttl_config
        )
        fact_text = validate_fact(text, field="model answer fact")
        return MemoryRecord(
            memory_id=new_memory_id(),
            scope_key=request.scope_key,
            scope=request.scope,
            fact=fact_text,
            embedding=known.get(fact_text, ()),
            create_time=request.now,
            update_time=request.now,
            expire_time=None if expiry is UNCHANGED else expiry,  # type: ignore[arg-type]
            topics=_topic_refs(fact.topics),
            metadata=dict(request.metadata),
        )

    def _updated_record(
        self,
        current: MemoryRecord,
        text: str,
        fact: ExtractedFact,
        request: _Request,
        known: Mapping[str, tuple[float, ...]],
    ) -> MemoryRecord:
        strategy = request.config.metadata_merge_strategy
        metadata: dict[str, MetadataValue] = dict(current.metadata)
        if strategy == types.MemoryMetadataMergeStrategy.MERGE:
            metadata.update(request.metadata)
        elif request.metadata:
            metadata = dict(request.metadata)
        expiry = memory_expiry(
            now=request.now, action=Action.GENERATE_UPDATED, bank_ttl=request.bank.config.ttl_config
        )
        return replace(
            current,
            fact=validate_fact(text, field="model answer fact"),
            embedding=current.embedding if text == current.fact else known.get(text, ()),
            update_time=next_update_time(request.now, current),
            topics=tuple(dict.fromkeys((*current.topics, *_topic_refs(fact.topics)))),
            metadata=metadata,
            expire_time=current.expire_time if expiry is UNCHANGED else expiry,  # type: ignore[arg-type]
        )

    async def _apply(
        self,
        request: _Request,
        actions: list[GeneratedAction],
        facts: Sequence[ExtractedFact],
        documents: Sequence[DocumentRecord],
        fences: tuple[Lease, ...],
    ) -> list[GeneratedAction]:
        """Embeds changed facts in one batch; writes every action and `documents` in one batch.

        The batch expects each action's target as read and carries the scope lock's lease. When
        a concurrent write (an update or delete outside generate) changed a target, the actions
        on changed targets are dropped (nothing resurrected, nothing overwritten blind) and the
        rest written; a lapsed lease is `Aborted` (another request may be deciding meanwhile).
        Returns the actions written.
        """
        needs_vector = [
            index
            for index, action in enumerate(actions)
            if action.action != "DELETED" and not action.record.embedding
        ]
        texts = [actions[i].record.fact for i in needs_vector]
        vectors = await request.bank.embedder.embed_documents(texts) if texts else []
        for index, vector in zip(needs_vector, vectors, strict=True):
            action = actions[index]
            actions[index] = replace(action, record=replace(action.record, embedding=vector))
        extracted = tuple(
            {"fact": fact.fact, "context": fact.context} if fact.context else {"fact": fact.fact}
            for fact in facts
        )
        for attempt in range(_WRITE_ATTEMPTS):
            batch = self._batch(request, actions, extracted, documents, fences)
            try:
                await self._context.store.apply(request.bank.bank_id, batch)
                return actions
            except Aborted:
                for lease in fences:
                    await lease.verify()
                if attempt + 1 == _WRITE_ATTEMPTS:
                    raise
            actions = await self._still_applicable(request, actions)
        raise AssertionError("unreachable")

    async def _still_applicable(
        self, request: _Request, actions: list[GeneratedAction]
    ) -> list[GeneratedAction]:
        """The actions whose targets are still as read (a created id still free)."""
        ids = [action.expect.memory_id for action in actions if action.expect is not None]
        found = await self._context.store.get_memories(request.bank.bank_id, ids, request.now)
        current = {record.memory_id: record.update_time for record in found}
        return [
            action
            for action in actions
            if action.expect is None
            or current.get(action.expect.memory_id) == action.expect.update_time
        ]

    def _batch(
        self,
        request: _Request,
        actions: Sequence[GeneratedAction],
        extracted: tuple[dict[str, Any], ...],
        documents: Sequence[DocumentRecord],
        fences: tuple[Lease, ...],
    ) -> WriteBatch:
        upserts = tuple(action.record for action in actions if action.action != "DELETED")
        deletes = tuple(action.record.memory_id for action in actions if action.action == "DELETED")
        revisions = (
            tuple(self._revision(request, action, extracted) for action in actions)
            if not (
                request.config.disable_memory_revisions
                or request.bank.config.disable_memory_revisions
            )
            else ()
        )
        return WriteBatch(
            upserts=upserts,
            deletes=deletes,
            revisions=revisions,
            documents=tuple(documents),
            expect=tuple(action.expect for action in actions if action.expect is not None),
            fences=fences,
        )

    def _revision(
        self, request: _Request, action: GeneratedAction, extracted: tuple[dict[str, Any], ...]
    ) -> RevisionRecord:
        record = action.record
        return RevisionRecord(
            memory_id=record.memory_id,
            revision_id=new_revision_id(request.now),
            scope_key=record.scope_key,
            scope=record.scope,
            fact=record.fact,
            create_time=request.now,
            expire_time=revision_expiry(
                now=request.now,
                revision_ttl=request.config.revision_ttl,
                revision_expire_time=request.config.revision_expire_time,
                bank_ttl=request.bank.config.ttl_config,
            ),
            topics=record.topics,
            metadata=record.metadata,
            labels=dict(request.config.revision_labels or {}),
            extracted_memories=extracted,
            deleted=action.action == "DELETED",
            structured_data=record.structured_data,
        )


@contextlib.asynccontextmanager
async def _no_lock() -> AsyncIterator[Lease | None]:
    yield None


def _created(record: MemoryRecord, now: datetime) -> GeneratedAction:
    """A CREATED action, which expects its (fresh) id to be free."""
    return GeneratedAction("CREATED", record, expect=Expectation(record.memory_id, now))


async def _concurrently(calls: Iterable[Awaitable[_T]]) -> list[_T]:
    """The results of independent store reads run at once (one round trip's latency, not N).

    On the first failure the other reads are cancelled and awaited before it is raised, so no
    read outlives the request (or its scope lock).
    """
    tasks = [asyncio.ensure_future(call) for call in calls]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _check_profiles(
    output: ExtractionOutput, current: dict[str, tuple[ProfileSchema, MemoryRecord | None]]
) -> None:
    """Refuses profile updates for unknown schemas or that break their schema once merged."""
    for schema_id, update in (getattr(output, "profiles", None) or {}).items():
        if schema_id not in current:
            raise ModelAnswerRejected(
                f"profile {schema_id[:40]!r} is not one of the listed schemas"
            )
        schema, record = current[schema_id]
        if not isinstance(update, dict):
            raise ModelAnswerRejected(f"profile {schema_id!r} must be a JSON object")
        merged = {**dict(record.structured_data or {}), **update} if record else dict(update)
        try:
            validate_profile(merged, schema)
        except ValueError as exc:
            raise ModelAnswerRejected(str(exc)) from None


def _configured_model(bank: LoadedBank) -> str | None:
    generation = bank.config.generation_config
    return generation.model if generation else None


_SETTINGS_CHECKED_AT = datetime(1970, 1, 1, tzinfo=UTC)
"""Any time: the revision expiry is checked for its form and bounds, not computed."""


def check_generate_settings(
    config: types.GenerateMemoriesConfig | types.IngestEventsConfig, *, field: str
) -> dict[str, MetadataValue]:
    """Checks what a generation will apply to its writes, before any model call; its metadata.

    For `generate` as for the settings an ingest stream keeps for its flush: metadata (finite
    numbers, non-empty keys), `revision_ttl` / `revision_expire_time` (within bounds, not both),
    `metadata_merge_strategy` (a known one) and `revision_labels` (non-empty keys).

    Raises:
        InvalidArgument: The first setting a generation could not apply, named under `field`.
    """
    metadata = metadata_from_request(config.metadata, field=f"{field}.metadata")
    revision_expiry(
        now=_SETTINGS_CHECKED_AT,
        revision_ttl=config.revision_ttl,
        revision_expire_time=config.revision_expire_time,
        bank_ttl=None,
        field_prefix=field,
    )
    strategy = config.metadata_merge_strategy
    known = list(types.MemoryMetadataMergeStrategy)
    if strategy is not None and strategy not in known:
        given = str(getattr(strategy, "value", strategy))[:60]
        raise InvalidArgument(
            f"{field}.metadata_merge_strategy {given!r} is not one of "
            f"{', '.join(member.value for member in known)}.",
            field=f"{field}.metadata_merge_strategy",
        )
    if any(not key for key in config.revision_labels or {}):
        raise InvalidArgument(
            f"{field}.revision_labels keys must not be empty.", field=f"{field}.revision_labels"
        )
    return metadata


def _customization_for(
    bank: LoadedBank, scope: dict[str, str]
) -> types.MemoryBankCustomizationConfig | None:
    """SPEC §3: the config whose scope_keys equal the scope's keys exactly, else the default."""
    configs = bank.config.customization_configs or []
    keys = set(scope)
    exact = [config for config in configs if config.scope_keys and set(config.scope_keys) == keys]
    default = [config for config in configs if not config.scope_keys]
    chosen: types.MemoryBankCustomizationConfig | None = (exact or default or [None])[0]
    return chosen


def _topics_of(customization: types.MemoryBankCustomizationConfig | None) -> tuple[Topic, ...]:
    configured = customization.memory_topics if customization else None
    if not configured:
        return tuple(
            Topic(label, description, True) for label, description in MANAGED_TOPICS.items()
        )
    topics = []
    for topic in configured:
        if topic.managed_memory_topic is not None and topic.managed_memory_topic.managed_topic_enum:
            label = _enum_name(topic.managed_memory_topic.managed_topic_enum)
            topics.append(Topic(label, MANAGED_TOPICS.get(label, label), True))
        elif topic.custom_memory_topic is not None:
            custom = topic.custom_memory_topic
            topics.append(
                Topic(custom.label or "", " ".join((custom.description or "").split()), False)
            )
    return tuple(topics)


def _enum_name(value: Any) -> str:
    return str(getattr(value, "value", value)).upper()


def _topic_label(topic: types.MemoryTopicId, index: int) -> str:
    [ref] = topics_from_request([topic], field=f"config.allowed_topics[{index}]")
    return ref.managed or ref.custom or ""


def _topic_refs(labels: Sequence[str]) -> tuple[TopicRef, ...]:
    return tuple(
        dict.fromkeys(
            TopicRef(managed=label) if label in MANAGED_TOPICS else TopicRef(custom=label)
            for label in labels
        )
    )


def _examples_of(
    customization: types.MemoryBankCustomizationConfig | None,
) -> list[tuple[list[tuple[str, str]], list[dict[str, object]]]]:
    examples = []
    for example in (customization.generate_memories_examples if customization else None) or ():
        events = example.conversation_source.events if example.conversation_source else None
        turns = [
            (
                event.content.role or "user",
                " ".join(part.text for part in event.content.parts or () if part.text),
            )
            for event in events or ()
            if event.content is not None
        ]
        memories: list[dict[str, object]] = []
        for generated in example.generated_memories or ():
            item: dict[str, object] = {"fact": generated.fact}
            labels = [ref.managed or ref.custom for ref in topics_from_request(generated.topics)]
            if labels:
                item["topics"] = labels
            memories.append(item)
        examples.append((turns, memories))
    return examples


def _revisions_per_candidate(customization: types.MemoryBankCustomizationConfig | None) -> int:
    consolidation = customization.consolidation_config if customization else None
    return (consolidation.revisions_per_candidate_count if consolidation else None) or 1


def _direct_facts(
    direct: Sequence[types.GenerateMemoriesRequestDirectMemoriesSourceDirectMemory],
) -> list[ExtractedFact]:
    if not direct:
        raise InvalidArgument(
            "direct_memories_source.direct_memories must not be empty.",
            field="direct_memories_source",
        )
    if len(direct) > MAX_DIRECT_MEMORIES:
        raise InvalidArgument(
            f"At most {MAX_DIRECT_MEMORIES} direct memories are allowed per request; got "
            f"{len(direct)}. Send them in batches.",
            field="direct_memories_source.direct_memories",
        )
    facts = []
    for index, item in enumerate(direct):
        where = f"direct_memories_source.direct_memories[{index}]"
        refs = topics_from_request(item.topics, field=f"{where}.topics")
        facts.append(
            ExtractedFact(
                fact=validate_fact(item.fact, field=f"{where}.fact"),
                topics=[r.managed or r.custom or "" for r in refs],
            )
        )
    return facts


def _check_consolidation(
    output: ConsolidationOutput, facts: Sequence[ExtractedFact], candidates: dict[str, MemoryRecord]
) -> None:
    """Refuses answers that name unknown facts or memories, or touch a memory twice."""
    touched: set[str] = set()
    for action in output.actions:
        if not 0 <= action.fact_index < len(facts):
            raise ModelAnswerRejected(f"fact_index {action.fact_index} is not one of the new facts")
        if action.action in ("UPDATE", "DELETE"):
            if action.memory_id not in candidates:
                raise ModelAnswerRejected(
                    f"memory_id {str(action.memory_id)[:40]!r} is not one of the listed memories"
                )
            if action.memory_id in touched:
                raise ModelAnswerRejected(f"memory {action.memory_id!r} has more than one action")
            touched.add(action.memory_id)
        if action.action == "CREATE" and facts[action.fact_index].forget:
            raise ModelAnswerRejected("a fact the user asked to forget must not be created")
        if (
            action.action in ("CREATE", "UPDATE")
            and action.fact is not None
            and not action.fact.strip()
        ):
            raise ModelAnswerRejected(f"{action.action} with an empty fact")


async def events_from_session(
    session_service: Any,
    source: types.GenerateMemoriesRequestVertexSessionSource,
    scope: dict[str, str] | None,
) -> tuple[list[genai_types.Content], dict[str, str]]:
    """The events of an ADK session in `[start_time, end_time)`, and the request's scope.

    The session name's `reasoningEngines/{id}` is the ADK app name; the user is the scope's
    `user_id` (SPEC §3), and the scope defaults to `{"user_id": …}` of the session.
    """
    if session_service is None:
        raise FailedPrecondition(
            "vertex_session_source needs a session service: pass session_service=… (an ADK "
            "BaseSessionService) to the Client.",
            field="vertex_session_source",
        )
    match = _SESSION_NAME.fullmatch(source.session or "")
    if match is None:
        raise InvalidArgument(
            "vertex_session_source.session must be "
            "projects/…/reasoningEngines/{app}/sessions/{id}.",
            field="vertex_session_source.session",
        )
    user_id = (scope or {}).get("user_id")
    if not user_id:
        raise InvalidArgument(
            "vertex_session_source needs scope={'user_id': …} to find the ADK session's user.",
            field="scope",
        )
    session = await session_service.get_session(
        app_name=match.group("app"), user_id=user_id, session_id=match.group("session")
    )
    if session is None:
        raise NotFound(
            f"Session {source.session[:200]!r} does not exist for that user.",
            field="vertex_session_source.session",
        )
    start = to_utc(source.start_time, field="vertex_session_source.start_time")
    end = to_utc(source.end_time, field="vertex_session_source.end_time")
    contents = []
    for event in session.events:
        moment = datetime.fromtimestamp(event.timestamp, tz=UTC)
        if (start is None or moment >= start) and (end is None or moment < end) and event.content:
            contents.append(event.content)
    return contents, dict(scope or {"user_id": user_id})
