"""Memories: create, get, list, update, delete, rollback, purge and revisions (SPEC §3).

Every write is one `WriteBatch` (the memory and its revision together), so a failure midway
leaves the store as it was. Facts are embedded once per write; an update that keeps the fact
reuses the stored vector.

Writes are conditional: each batch expects the memory it changes to be exactly as read (its
`update_time`, which grows with every write of it) or absent, so a write that raced another
never resurrects a deleted memory or overwrites a newer one blind. Update and delete re-read and
try again while the memory is still there; otherwise the store's `Aborted` says what changed.

Revisions belong to one incarnation of a memory in one scope: a memory id whose revisions live
cannot name a new memory (`AlreadyExists` until they expire), and reads and rollback only ever
see revisions of the scope the memory has (a live memory's scope, else its newest revision's).
"""

from __future__ import annotations

import builtins
import itertools
import secrets
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from adk_memory import types
from adk_memory.engine.context import EngineContext, LoadedBank
from adk_memory.engine.convert import (
    MAX_FACT_LENGTH,
    check_unicode,
    metadata_from_request,
    topics_from_request,
)
from adk_memory.engine.expiry import UNCHANGED, Action, memory_expiry, revision_expiry
from adk_memory.engine.paging import (
    Page,
    Position,
    decode_page_token,
    encode_page_token,
    page_after,
)
from adk_memory.engine.profiles import PROFILE_ID_PREFIX, PROFILE_TYPE
from adk_memory.errors import (
    Aborted,
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
)
from adk_memory.filters import matches, parse_filter, partition, request_filter
from adk_memory.names import new_memory_id, validate_memory_id
from adk_memory.scope import ScopeKey, profile_scope_key, scope_key, validate_scope
from adk_memory.store import (
    Expectation,
    MemoryRecord,
    MemoryStore,
    OperationRecord,
    RevisionRecord,
    ScanCursor,
    ScanQuery,
    SortKey,
    WriteBatch,
    cursor_of,
    sort_records,
)
from adk_memory.wording import call, option

__all__ = [
    "MemoryOps",
    "next_update_time",
    "owner_scopes",
    "new_revision_id",
    "unchanged",
    "validate_fact",
]

DEFAULT_LIST_PAGE_SIZE = 100
MAX_LIST_PAGE_SIZE = 1000
_PURGE_BATCH = 500
_RESIDUAL_CHUNK = 500
_WRITE_ATTEMPTS = 3
"""Attempts of an update, delete or purge batch whose memories a concurrent write changed."""
_UPDATABLE = frozenset(
    {"fact", "display_name", "description", "topics", "metadata", "ttl", "expire_time", "scope"}
)
_revision_counter = itertools.count()


def new_revision_id(now: datetime) -> str:
    """A revision id that sorts after every earlier revision written by this process."""
    micros = int(now.timestamp() * 1_000_000)
    return f"{micros:017d}{next(_revision_counter) % 10_000:04d}{secrets.randbelow(100):02d}"


def next_update_time(now: datetime, current: MemoryRecord) -> datetime:
    """The update time of a new write of `current`: `now`, but always after the one it replaces.

    So a memory's update time is its version, even under a clock that stands still.
    """
    return max(now, current.update_time + timedelta(microseconds=1))


def unchanged(record: MemoryRecord, now: datetime) -> Expectation:
    """The expectation that `record`, as read, is still the live memory of its id."""
    return Expectation(record.memory_id, now, update_time=record.update_time)


async def owner_scopes(
    store: MemoryStore, bank_id: str, memory_ids: Sequence[str], now: datetime
) -> dict[str, tuple[ScopeKey, builtins.list[RevisionRecord]]]:
    """The scope each id's history belongs to, with its live revisions (newest first).

    That is the live memory's scope, else the newest live revision's; an id with neither is
    left out.
    """
    found = await store.get_memories(bank_id, memory_ids, now)
    live = {record.memory_id: record for record in found}
    histories = await store.list_revisions_many(bank_id, memory_ids, now)
    owners: dict[str, tuple[ScopeKey, builtins.list[RevisionRecord]]] = {}
    for memory_id in dict.fromkeys(memory_ids):
        history = histories.get(memory_id, [])
        if memory_id in live:
            owners[memory_id] = (live[memory_id].scope_key, history)
        elif history:
            owners[memory_id] = (history[0].scope_key, history)
    return owners


def _listing(bank: LoadedBank, *query: object) -> str:
    """The fingerprint a page token of the bank's listing `query` is sealed with.

    It names the bank by its id and creation time: a bank deleted and created again under its
    id is another listing, whose memories all came after the old one's, so an old token would
    resume after every one of them and end the listing silently (it is refused instead).
    """
    return repr((bank.bank_id, bank.record.create_time.isoformat(), *query))


def validate_fact(fact: object, *, field: str = "fact") -> str:
    """The fact if it is a non-empty string within the size limit."""
    if not isinstance(fact, str) or not fact.strip():
        raise InvalidArgument(f"{field} must be a non-empty string.", field=field)
    if len(fact) > MAX_FACT_LENGTH:
        raise InvalidArgument(
            f"{field} has {len(fact)} characters; at most {MAX_FACT_LENGTH} are allowed.",
            field=field,
        )
    check_unicode(fact, field=field)
    return fact


def parse_order_by(order_by: str | None) -> tuple[SortKey, ...]:
    """AIP-132 `order_by` over create_time and update_time; default `create_time desc`."""
    if not order_by or not order_by.strip():
        return (SortKey("create_time", descending=True),)
    keys: list[SortKey] = []
    for term in order_by.split(","):
        words = term.split()
        field = (
            {"createTime": "create_time", "updateTime": "update_time"}.get(words[0], words[0])
            if words
            else ""
        )
        if (
            field not in ("create_time", "update_time")
            or len(words) > 2
            or (len(words) == 2 and words[1].lower() not in ("asc", "desc"))
        ):
            raise InvalidArgument(
                f"order_by term {term.strip()[:40]!r} is not valid; use create_time or "
                "update_time, optionally followed by 'desc' (e.g. 'update_time desc').",
                field="order_by",
            )
        keys.append(SortKey(field, descending=len(words) == 2 and words[1].lower() == "desc"))
    return tuple(keys)


class MemoryOps:
    """The memory half of the engine."""

    def __init__(self, context: EngineContext) -> None:
        self._context = context

    # Create / get / list

    async def create(
        self,
        bank_id: str,
        *,
        fact: str,
        scope: Any,
        config: types.MemoryConfig,
        operation: Callable[[MemoryRecord], OperationRecord] | None = None,
    ) -> MemoryRecord:
        """Creates a memory (and its first revision unless revisions are disabled).

        `operation` builds the operation recorded in the same atomic write as the memory.
        """
        fact = validate_fact(fact)
        checked_scope = validate_scope(scope)
        memory_id = validate_memory_id(config.memory_id) if config.memory_id else new_memory_id()
        if memory_id.startswith(PROFILE_ID_PREFIX):
            raise InvalidArgument(
                f"Memory ids starting with {PROFILE_ID_PREFIX!r} are reserved for structured "
                "profiles; choose another config.memory_id.",
                field="config.memory_id",
            )
        bank = await self._context.load_bank(bank_id)
        now = self._context.clock()
        [embedding] = await bank.embedder.embed_documents([fact])
        record = self._new_record(bank, memory_id, fact, checked_scope, config, now, embedding)
        revisions = self._revision_for(bank, record, now, config)
        batch = WriteBatch(
            inserts=(record,),
            fresh_inserts=not config.memory_id,
            revisions=revisions,
            operations=(operation(record),) if operation else (),
        )
        if not config.memory_id:  # a fresh random id has no past
            await self._context.store.apply(bank_id, batch)
            return record
        try:
            await self._insert_chosen_id(bank_id, memory_id, batch, now, record.scope_key)
        except Aborted:  # the lock lapsed before the write (this process stalled past its lease)
            await self._insert_chosen_id(bank_id, memory_id, batch, now, record.scope_key)
        return record

    async def _insert_chosen_id(
        self, bank_id: str, memory_id: str, batch: WriteBatch, now: datetime, scope: ScopeKey
    ) -> None:
        """Checks a caller-chosen id's past, then inserts, under the id's lock.

        Creates of one chosen id take turns, so none can slip in between another's check of the
        id's past and its insert (the insert itself refuses only a live memory). The lock fences
        the write: one whose lock lapsed meanwhile is refused whole (`Aborted`).
        """
        locks = self._context.store.lock_provider()
        async with locks.lock(f"memory-id:{bank_id}:{memory_id}") as lease:
            await self._check_id_is_free(bank_id, memory_id, now, scope)
            await self._context.store.apply(bank_id, replace(batch, fences=(lease,)))

    async def create_many(
        self, bank_id: str, *, scope: Any, memories: Sequence[tuple[str, types.MemoryConfig]]
    ) -> builtins.list[MemoryRecord]:
        """Creates memories of one scope, each `(fact, config)`, in one atomic write.

        Either every memory (with its first revision) is stored or none is. Ids are fresh:
        a config naming a `memory_id` is refused.
        """
        checked_scope = validate_scope(scope)
        for index, (fact, config) in enumerate(memories):
            validate_fact(fact, field=f"memories[{index}].fact")
            if config.memory_id:
                raise InvalidArgument(
                    "Memories created together get fresh ids; create one with a chosen "
                    "config.memory_id on its own.",
                    field=f"memories[{index}].config.memory_id",
                )
        bank = await self._context.load_bank(bank_id)
        now = self._context.clock()
        vectors = await bank.embedder.embed_documents([fact for fact, _ in memories])
        records = [
            self._new_record(
                bank,
                new_memory_id(),
                fact,
                checked_scope,
                config,
                now,
                vector,
                field=f"memories[{index}].config",
            )
            for index, ((fact, config), vector) in enumerate(zip(memories, vectors, strict=True))
        ]
        revisions = [
            revision
            for record, (_, config) in zip(records, memories, strict=True)
            for revision in self._revision_for(bank, record, now, config)
        ]
        batch = WriteBatch(inserts=tuple(records), fresh_inserts=True, revisions=tuple(revisions))
        await self._context.store.apply(bank_id, batch)
        return records

    def _new_record(
        self,
        bank: LoadedBank,
        memory_id: str,
        fact: str,
        scope: dict[str, str],
        config: types.MemoryConfig,
        now: datetime,
        embedding: tuple[float, ...],
        *,
        field: str = "config",
    ) -> MemoryRecord:
        """The record a create writes, its expiry from the request's TTL or the bank's."""
        expire_time = memory_expiry(
            now=now,
            action=Action.CREATE,
            ttl=config.ttl,
            expire_time=config.expire_time,
            bank_ttl=bank.config.ttl_config,
            field_prefix=field,
        )
        return MemoryRecord(
            memory_id=memory_id,
            scope_key=scope_key(scope),
            scope=scope,
            fact=fact,
            embedding=embedding,
            create_time=now,
            update_time=now,
            expire_time=None if expire_time is UNCHANGED else expire_time,  # type: ignore[arg-type]
            topics=topics_from_request(config.topics, field=f"{field}.topics"),
            metadata=metadata_from_request(config.metadata, field=f"{field}.metadata"),
            display_name=config.display_name,
            description=config.description,
        )

    async def _check_id_is_free(
        self, bank_id: str, memory_id: str, now: datetime, scope: ScopeKey
    ) -> None:
        """Refuses a caller-chosen id of a live memory, or whose earlier memory's revisions live.

        They are kept for rollback, and a new memory under the id would inherit that history
        (another scope's facts, perhaps). Checked under the id's lock: a memory live now may be
        deleted before the insert, which would then see a free id. Only a history wholly of the
        creating `scope` is told when the id frees up: another scope's times stay its own.
        """
        if await self._context.store.get_memories(bank_id, [memory_id], now):
            raise AlreadyExists(
                f"A memory with id {memory_id!r} already exists.", field="config.memory_id"
            )
        history = await self._context.store.list_revisions(bank_id, memory_id, now)
        if not history:
            return
        if any(revision.scope_key != scope for revision in history):
            raise AlreadyExists(
                f"Memory id {memory_id!r} belonged to a deleted memory whose revisions are kept "
                "for rollback, so it cannot name a new memory; use another id.",
                field="config.memory_id",
            )
        expiries = [revision.expire_time for revision in history]
        frees = (
            "never frees up, as some of them never expire"
            if None in expiries
            else f"frees up at {max(e for e in expiries if e is not None).isoformat()}, when "
            "the last of them expires"
        )
        raise AlreadyExists(
            f"Memory id {memory_id!r} belonged to a deleted memory whose revisions are kept for "
            f"rollback, so it cannot name a new memory: the id {frees}. Use another id (or roll "
            "the deleted memory back to restore it).",
            field="config.memory_id",
        )

    async def scope_of(self, bank_id: str, memory_id: str) -> dict[str, str]:
        """The scope of the id's memory: the live one's, else its kept revisions' (deleted).

        What a caller confined to scopes is checked against before it names a memory by id:
        a deleted memory is still its scope's, to list the revisions of and roll back.

        Raises:
            NotFound: Neither a live memory nor a live revision of its own scope has the id
                (the message `get` gives, so that it tells no more than a missing id does).
        """
        await self._context.load_bank(bank_id)
        now = self._context.clock()
        found = await self._context.store.get_memories(bank_id, [memory_id], now)
        if found:
            return dict(found[0].scope)
        history = await self._own_revisions(bank_id, memory_id, now)
        if not history:
            await self._get_live(bank_id, memory_id)  # the NotFound of a missing memory
        return dict(history[0].scope)

    async def get(self, bank_id: str, memory_id: str) -> MemoryRecord:
        """The live memory; `NotFound` if missing or expired."""
        await self._context.load_bank(bank_id)
        return await self._get_live(bank_id, memory_id)

    async def list(self, bank_id: str, config: types.ListMemoriesConfig) -> Page[MemoryRecord]:
        """A page of the bank's memories, filtered and ordered."""
        page_size = _page_size(config.page_size, DEFAULT_LIST_PAGE_SIZE, MAX_LIST_PAGE_SIZE)
        order = parse_order_by(config.order_by)
        expr = parse_filter(config.filter or "", allow_scope=True)
        bank = await self._context.load_bank(bank_id)
        query = ScanQuery(now=self._context.clock(), order_by=order)
        return await self.scan_page(bank, query, expr, page_size, config.page_token)

    async def scan_page(
        self,
        bank: LoadedBank,
        query: ScanQuery | Sequence[ScanQuery],
        expr: Any,
        page_size: int,
        page_token: str | None,
    ) -> Page[MemoryRecord]:
        """One keyset page of a filtered scan (of several scopes merged in order, if several).

        The token is the last item's position; every page resumes strictly after it, so a
        write between two pages never repeats or skips a memory. The filter part the store
        cannot run is run here, on keyset chunks read until the page is full.
        """
        queries = [query] if isinstance(query, ScanQuery) else list(query)
        order = queries[0].order_by
        fingerprint = _listing(bank, [(q.scope_key, q.order_by) for q in queries], expr)
        position = decode_page_token(page_token, fingerprint, len(order))
        after = None if position is None else ScanCursor(position.values, position.item_id)
        found = await self.scan(bank.bank_id, queries, expr, page_size + 1, after=after)
        if len(found) <= page_size:
            return Page(found, None)
        last = cursor_of(found[page_size - 1], order)
        token = encode_page_token(Position(last.values, last.memory_id), fingerprint)
        return Page(found[:page_size], token)

    async def scan(
        self,
        bank_id: str,
        queries: Sequence[ScanQuery],
        expr: Any,
        limit: int,
        *,
        after: ScanCursor | None = None,
    ) -> builtins.list[MemoryRecord]:
        """The first `limit` memories matching `expr` of the scans merged in the first's order."""
        pushed, residual = partition(expr, self._context.store.capabilities.pushdown)
        found: builtins.list[MemoryRecord] = []
        for part in queries:
            part = replace(part, filter=pushed, after=after)
            found += await self._scan_matching(bank_id, part, residual, limit)
        return sort_records(found, queries[0])[:limit]

    async def _scan_matching(
        self, bank_id: str, query: ScanQuery, residual: Any, want: int
    ) -> builtins.list[MemoryRecord]:
        """The first `want` memories of a scan that also match the residual filter."""
        if residual is None:
            return await self._context.store.scan(bank_id, replace(query, limit=want))
        chunk = max(want, _RESIDUAL_CHUNK)
        kept: builtins.list[MemoryRecord] = []
        while True:
            found = await self._context.store.scan(bank_id, replace(query, limit=chunk))
            kept += [record for record in found if matches(residual, record)]
            if len(kept) >= want or len(found) < chunk:
                return kept[:want]
            query = replace(query, after=cursor_of(found[-1], query.order_by))

    # Update / delete / rollback

    async def update(
        self,
        bank_id: str,
        memory_id: str,
        *,
        fact: str | None,
        scope: Any,
        config: types.UpdateMemoryConfig,
    ) -> MemoryRecord:
        """Changes the masked fields (or every field given, without a mask)."""
        mask = _update_mask(config.update_mask)
        given = _given_fields(fact, scope, config)
        fields = mask if mask is not None else given
        bank = await self._context.load_bank(bank_id)
        for attempt in range(_WRITE_ATTEMPTS):
            current = await self._get_live(bank_id, memory_id)
            updated, revisions = await self._updated(bank, current, fields, fact, scope, config)
            batch = WriteBatch(
                upserts=(updated,),
                revisions=revisions,
                expect=(unchanged(current, updated.update_time),),
            )
            try:
                await self._context.store.apply(bank_id, batch)
            except Aborted:
                if attempt + 1 == _WRITE_ATTEMPTS or not await self._is_live(bank_id, memory_id):
                    raise  # deleted meanwhile: an update never brings it back
                continue
            return updated
        raise AssertionError("unreachable")

    async def _updated(
        self,
        bank: LoadedBank,
        current: MemoryRecord,
        fields: frozenset[str],
        fact: str | None,
        scope: Any,
        config: types.UpdateMemoryConfig,
    ) -> tuple[MemoryRecord, tuple[RevisionRecord, ...]]:
        """`current` with the update applied, and the revision it writes."""
        if "scope" in fields or scope is not None:
            if scope is not None and validate_scope(scope) != dict(current.scope):
                raise InvalidArgument(
                    "scope is immutable; a memory keeps the scope it was created with. Create a "
                    "new memory in the other scope instead.",
                    field="scope",
                )
        now = next_update_time(self._context.clock(), current)
        changes: dict[str, Any] = {"update_time": now}
        if "fact" in fields:
            new_fact = validate_fact(fact)
            if new_fact != current.fact:
                [changes["embedding"]] = await bank.embedder.embed_documents([new_fact])
                changes["fact"] = new_fact
        for name in ("display_name", "description"):
            if name in fields:
                changes[name] = getattr(config, name)
        if "topics" in fields:
            changes["topics"] = topics_from_request(config.topics, field="config.topics")
        if "metadata" in fields:
            changes["metadata"] = metadata_from_request(config.metadata, field="config.metadata")
        wants_ttl = "ttl" in fields or "expire_time" in fields
        expiry = memory_expiry(
            now=now,
            action=Action.UPDATE,
            ttl=config.ttl if wants_ttl else None,
            expire_time=config.expire_time if wants_ttl else None,
            bank_ttl=bank.config.ttl_config,
        )
        if expiry is not UNCHANGED:
            changes["expire_time"] = expiry
        elif wants_ttl:
            changes["expire_time"] = None
        updated = replace(current, **changes)
        revisions = self._revision_for(bank, updated, now, config) if "fact" in changes else ()
        return updated, revisions

    async def delete(self, bank_id: str, memory_id: str) -> None:
        """Deletes a live memory; its revisions stay until they expire.

        A memory changed since it was read is read again and deleted (the caller asked for it
        gone); one deleted meanwhile is `Aborted`.
        """
        await self._context.load_bank(bank_id)
        for attempt in range(_WRITE_ATTEMPTS):
            current = await self._get_live(bank_id, memory_id)
            expected = unchanged(current, self._context.clock())
            batch = WriteBatch(deletes=(memory_id,), expect=(expected,))
            try:
                await self._context.store.apply(bank_id, batch)
            except Aborted:
                if attempt + 1 == _WRITE_ATTEMPTS or not await self._is_live(bank_id, memory_id):
                    raise
                continue
            return

    async def rollback(self, bank_id: str, memory_id: str, target_revision_id: str) -> MemoryRecord:
        """Restores a revision's fact, topics and metadata (recreating a deleted memory)."""
        if not target_revision_id or not isinstance(target_revision_id, str):
            raise InvalidArgument(
                "target_revision_id must name a revision id.", field="target_revision_id"
            )
        bank = await self._context.load_bank(bank_id)
        now = self._context.clock()
        target = await self._own_revision(bank_id, memory_id, target_revision_id, now)
        if target is None:
            raise NotFound(
                f"Revision {target_revision_id[:40]!r} of memory {memory_id!r} does not exist or "
                f"has expired; list them with {call('memories.revisions.list')}.",
                field="target_revision_id",
            )
        if target.deleted:
            raise InvalidArgument(
                "target_revision_id names a deletion; roll back to the revision before it.",
                field="target_revision_id",
            )
        [embedding] = await bank.embedder.embed_documents([target.fact])
        found = await self._context.store.get_memories(bank_id, [memory_id], now)
        current: MemoryRecord | None = found[0] if found else None
        if current is not None and current.scope_key != target.scope_key:
            raise NotFound(  # re-created in another scope meanwhile: not this memory's revision
                f"Revision {target_revision_id[:40]!r} of memory {memory_id!r} does not exist or "
                f"has expired; list them with {call('memories.revisions.list')}.",
                field="target_revision_id",
            )
        expected = Expectation(memory_id, now) if current is None else unchanged(current, now)
        if current is None and memory_id.startswith(PROFILE_ID_PREFIX):
            raise FailedPrecondition(
                "A deleted structured profile cannot be rolled back (its schema is not in its "
                "revisions); the next generate request for its scope creates it again.",
                field="name",
            )
        if current is None:
            created = memory_expiry(now=now, action=Action.CREATE, bank_ttl=bank.config.ttl_config)
            current = MemoryRecord(
                memory_id=memory_id,
                scope_key=target.scope_key,
                scope=target.scope,
                fact=target.fact,
                embedding=embedding,
                create_time=now,
                update_time=now,
                expire_time=None if created is UNCHANGED else created,  # type: ignore[arg-type]
            )
        written = next_update_time(now, current) if found else now
        restored = replace(
            current,
            fact=target.fact,
            embedding=embedding,
            topics=target.topics,
            metadata=target.metadata,
            update_time=written,
            structured_data=(
                target.structured_data
                if current.memory_type == PROFILE_TYPE
                else current.structured_data
            ),
        )
        revisions = self._revision_for(bank, restored, written, types.MemoryConfig())
        await self._context.store.apply(
            bank_id, WriteBatch(upserts=(restored,), revisions=revisions, expect=(expected,))
        )
        return restored

    # Purge

    async def purge(
        self, bank_id: str, *, filter: str | None, filter_groups: Any, force: bool
    ) -> int:
        """Counts (force=False) or deletes (force=True) the memories the filters select."""
        expr = request_filter(filter, filter_groups, allow_scope=True)
        if expr is None:  # a blank filter or empty groups state no condition either
            raise InvalidArgument(
                f"purge needs {option('filters')}; to empty a bank, delete it with "
                f"{call('memory_banks.delete')}.",
                field="filter",
            )
        await self._context.load_bank(bank_id)
        query = ScanQuery(now=self._context.clock(), order_by=(SortKey("create_time"),))
        pushed, residual = partition(expr, self._context.store.capabilities.pushdown)
        selected = [
            record
            for record in await self._context.store.scan(bank_id, replace(query, filter=pushed))
            if matches(residual, record)
        ]
        if not force:
            return len(selected)
        deleted = 0
        for start in range(0, len(selected), _PURGE_BATCH):
            chunk = selected[start : start + _PURGE_BATCH]
            deleted += await self._purge_batch(bank_id, chunk, expr)
        return deleted

    async def _purge_batch(self, bank_id: str, chosen: Sequence[MemoryRecord], expr: Any) -> int:
        """Deletes `chosen` as read; memories changed meanwhile are re-read and re-filtered."""
        for attempt in range(_WRITE_ATTEMPTS):
            now = self._context.clock()
            batch = WriteBatch(
                deletes=tuple(record.memory_id for record in chosen),
                expect=tuple(unchanged(record, now) for record in chosen),
            )
            try:
                if chosen:
                    await self._context.store.apply(bank_id, batch)
                return len(chosen)
            except Aborted:
                if attempt + 1 == _WRITE_ATTEMPTS:
                    raise
            ids = [record.memory_id for record in chosen]
            found = await self._context.store.get_memories(bank_id, ids, self._context.clock())
            chosen = [record for record in found if matches(expr, record)]
        raise AssertionError("unreachable")

    async def profiles(self, bank_id: str, scope: Any) -> builtins.list[MemoryRecord]:
        """The live structured profiles of exactly `scope` (one per schema id)."""
        checked = validate_scope(scope)
        await self._context.load_bank(bank_id)
        query = ScanQuery(now=self._context.clock(), scope_key=profile_scope_key(checked))
        return await self._context.store.scan(bank_id, query)

    # Revisions

    async def list_revisions(
        self, bank_id: str, memory_id: str, config: types.ListMemoryRevisionsConfig
    ) -> Page[RevisionRecord]:
        """A page of a memory's revisions, newest first."""
        page_size = _page_size(config.page_size, DEFAULT_LIST_PAGE_SIZE, MAX_LIST_PAGE_SIZE)
        expr = parse_filter(config.filter or "")
        bank = await self._context.load_bank(bank_id)
        revisions = await self._own_revisions(bank_id, memory_id, self._context.clock())
        kept = [revision for revision in revisions if matches(expr, _revision_view(revision))]
        return page_after(
            kept,
            page_size=page_size,
            token=config.page_token,
            fingerprint=_listing(bank, memory_id, expr),
            position_of=lambda revision: Position((revision.create_time,), revision.revision_id),
            descending=True,
        )

    async def get_revision(self, bank_id: str, memory_id: str, revision_id: str) -> RevisionRecord:
        """One live revision; `NotFound` if missing or expired."""
        await self._context.load_bank(bank_id)
        found = await self._own_revision(bank_id, memory_id, revision_id, self._context.clock())
        if found is None:
            raise NotFound(
                f"Revision {revision_id[:40]!r} of memory {memory_id!r} does not exist or has "
                "expired.",
                field="name",
            )
        return found

    # Helpers

    async def _own_revisions(
        self, bank_id: str, memory_id: str, now: datetime
    ) -> builtins.list[RevisionRecord]:
        """The live revisions of the memory's own scope, newest first (never another scope's)."""
        owner = (await owner_scopes(self._context.store, bank_id, [memory_id], now)).get(memory_id)
        if owner is None:
            return []
        scope, history = owner
        return [revision for revision in history if revision.scope_key == scope]

    async def _own_revision(
        self, bank_id: str, memory_id: str, revision_id: str, now: datetime
    ) -> RevisionRecord | None:
        """One live revision, if it belongs to the memory's own scope."""
        found = await self._context.store.get_revision(bank_id, memory_id, revision_id, now)
        if found is None:
            return None
        owner = (await owner_scopes(self._context.store, bank_id, [memory_id], now)).get(memory_id)
        return found if owner is not None and owner[0] == found.scope_key else None

    async def _is_live(self, bank_id: str, memory_id: str) -> bool:
        return bool(
            await self._context.store.get_memories(bank_id, [memory_id], self._context.clock())
        )

    async def _get_live(self, bank_id: str, memory_id: str) -> MemoryRecord:
        found = await self._context.store.get_memories(bank_id, [memory_id], self._context.clock())
        if not found:
            raise NotFound(
                f"Memory {self._context.names.memory(bank_id, memory_id)!r} does not exist or "
                "has expired.",
                field="name",
            )
        return found[0]

    def _revision_for(
        self,
        bank: LoadedBank,
        record: MemoryRecord,
        now: datetime,
        config: types.MemoryConfig | types.UpdateMemoryConfig,
        *,
        labels: dict[str, str] | None = None,
        extracted: Sequence[dict[str, Any]] = (),
        deleted: bool = False,
    ) -> tuple[RevisionRecord, ...]:
        """The revision a write produces, or none when revisions are disabled."""
        if config.disable_memory_revisions or bank.config.disable_memory_revisions:
            return ()
        return (
            RevisionRecord(
                memory_id=record.memory_id,
                revision_id=new_revision_id(now),
                scope_key=record.scope_key,
                scope=record.scope,
                fact=record.fact,
                create_time=now,
                expire_time=revision_expiry(
                    now=now,
                    revision_ttl=config.revision_ttl,
                    revision_expire_time=config.revision_expire_time,
                    bank_ttl=bank.config.ttl_config,
                ),
                topics=record.topics,
                metadata=record.metadata,
                labels=labels or {},
                extracted_memories=tuple(extracted),
                deleted=deleted,
                structured_data=record.structured_data,
            ),
        )


def _revision_view(revision: RevisionRecord) -> MemoryRecord:
    """A revision seen as a memory, so revision filters use the same evaluator."""
    return MemoryRecord(
        memory_id=revision.memory_id,
        scope_key=revision.scope_key,
        scope=revision.scope,
        fact=revision.fact,
        embedding=(),
        create_time=revision.create_time,
        update_time=revision.create_time,
        expire_time=revision.expire_time,
        topics=revision.topics,
        metadata=revision.metadata,
    )


def _page_size(value: int | None, default: int, maximum: int) -> int:
    if value is None or value == 0:
        return default
    if value < 0:
        raise InvalidArgument("page_size must not be negative.", field="page_size")
    return min(value, maximum)


def _update_mask(mask: str | None) -> frozenset[str] | None:
    if mask is None or not mask.strip():
        return None
    fields = set()
    for raw in mask.split(","):
        name = "".join(f"_{c.lower()}" if c.isupper() else c for c in raw.strip())
        if name not in _UPDATABLE:
            raise InvalidArgument(
                f"update_mask names {raw.strip()[:40]!r}, which cannot be updated; use any of "
                f"{', '.join(sorted(_UPDATABLE))}.",
                field="config.update_mask",
            )
        fields.add(name)
    return frozenset(fields)


def _given_fields(fact: str | None, scope: Any, config: types.UpdateMemoryConfig) -> frozenset[str]:
    fields = {
        name for name in _UPDATABLE - {"fact", "scope"} if getattr(config, name, None) is not None
    }
    if fact is not None:
        fields.add("fact")
    if scope is not None:
        fields.add("scope")
    return frozenset(fields)
