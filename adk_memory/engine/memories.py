"""Memories: create, get, list, update, delete, rollback, purge and revisions (SPEC §3).

Every write is one `WriteBatch` (the memory and its revision together), so a failure midway
leaves the store as it was. Facts are embedded once per write; an update that keeps the fact
reuses the stored vector.
"""

from __future__ import annotations

import builtins
import itertools
import secrets
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
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
from adk_memory.errors import InvalidArgument, NotFound
from adk_memory.filters import combine, from_filter_groups, matches, parse_filter, partition
from adk_memory.names import new_memory_id, validate_memory_id
from adk_memory.scope import profile_scope_key, scope_key, validate_scope
from adk_memory.store import (
    MemoryRecord,
    RevisionRecord,
    ScanCursor,
    ScanQuery,
    SortKey,
    WriteBatch,
    cursor_of,
    sort_records,
)

__all__ = ["MemoryOps", "new_revision_id", "validate_fact"]

DEFAULT_LIST_PAGE_SIZE = 100
MAX_LIST_PAGE_SIZE = 1000
_PURGE_BATCH = 500
_RESIDUAL_CHUNK = 500
_UPDATABLE = frozenset(
    {"fact", "display_name", "description", "topics", "metadata", "ttl", "expire_time", "scope"}
)
_revision_counter = itertools.count()


def new_revision_id(now: datetime) -> str:
    """A revision id that sorts after every earlier revision written by this process."""
    micros = int(now.timestamp() * 1_000_000)
    return f"{micros:017d}{next(_revision_counter) % 10_000:04d}{secrets.randbelow(100):02d}"


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
        self, bank_id: str, *, fact: str, scope: Any, config: types.MemoryConfig
    ) -> MemoryRecord:
        """Creates a memory (and its first revision unless revisions are disabled)."""
        fact = validate_fact(fact)
        checked_scope = validate_scope(scope)
        memory_id = validate_memory_id(config.memory_id) if config.memory_id else new_memory_id()
        topics = topics_from_request(config.topics, field="config.topics")
        metadata = metadata_from_request(config.metadata, field="config.metadata")
        bank = await self._context.load_bank(bank_id)
        now = self._context.clock()
        expire_time = memory_expiry(
            now=now,
            action=Action.CREATE,
            ttl=config.ttl,
            expire_time=config.expire_time,
            bank_ttl=bank.config.ttl_config,
        )
        [embedding] = await bank.embedder.embed_documents([fact])
        record = MemoryRecord(
            memory_id=memory_id,
            scope_key=scope_key(checked_scope),
            scope=checked_scope,
            fact=fact,
            embedding=embedding,
            create_time=now,
            update_time=now,
            expire_time=None if expire_time is UNCHANGED else expire_time,  # type: ignore[arg-type]
            topics=topics,
            metadata=metadata,
            display_name=config.display_name,
            description=config.description,
        )
        revisions = self._revision_for(bank, record, now, config)
        await self._context.store.apply(bank_id, WriteBatch(inserts=(record,), revisions=revisions))
        return record

    async def get(self, bank_id: str, memory_id: str) -> MemoryRecord:
        """The live memory; `NotFound` if missing or expired."""
        await self._context.load_bank(bank_id)
        return await self._get_live(bank_id, memory_id)

    async def list(self, bank_id: str, config: types.ListMemoriesConfig) -> Page[MemoryRecord]:
        """A page of the bank's memories, filtered and ordered."""
        page_size = _page_size(config.page_size, DEFAULT_LIST_PAGE_SIZE, MAX_LIST_PAGE_SIZE)
        order = parse_order_by(config.order_by)
        expr = parse_filter(config.filter or "", allow_scope=True)
        await self._context.load_bank(bank_id)
        query = ScanQuery(now=self._context.clock(), order_by=order)
        return await self.scan_page(bank_id, query, expr, page_size, config.page_token)

    async def scan_page(
        self,
        bank_id: str,
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
        fingerprint = repr((bank_id, [(q.scope_key, q.order_by) for q in queries], expr))
        position = decode_page_token(page_token, fingerprint, len(order))
        after = None if position is None else ScanCursor(position.values, position.item_id)
        pushed, residual = partition(expr, self._context.store.capabilities.pushdown)
        found: list[MemoryRecord] = []
        for part in queries:
            part = replace(part, filter=pushed, after=after)
            found += await self._scan_matching(bank_id, part, residual, page_size + 1)
        found = sort_records(found, queries[0])[: page_size + 1]
        if len(found) <= page_size:
            return Page(found, None)
        last = cursor_of(found[page_size - 1], order)
        token = encode_page_token(Position(last.values, last.memory_id), fingerprint)
        return Page(found[:page_size], token)

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
        current = await self._get_live(bank_id, memory_id)
        if "scope" in fields or scope is not None:
            if scope is not None and validate_scope(scope) != dict(current.scope):
                raise InvalidArgument(
                    "scope is immutable; a memory keeps the scope it was created with. Create a "
                    "new memory in the other scope instead.",
                    field="scope",
                )
        now = self._context.clock()
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
        await self._context.store.apply(
            bank_id, WriteBatch(upserts=(updated,), revisions=revisions)
        )
        return updated

    async def delete(self, bank_id: str, memory_id: str) -> None:
        """Deletes a live memory; its revisions stay until they expire."""
        await self._context.load_bank(bank_id)
        await self._get_live(bank_id, memory_id)
        await self._context.store.apply(bank_id, WriteBatch(deletes=(memory_id,)))

    async def rollback(self, bank_id: str, memory_id: str, target_revision_id: str) -> MemoryRecord:
        """Restores a revision's fact, topics and metadata (recreating a deleted memory)."""
        if not target_revision_id or not isinstance(target_revision_id, str):
            raise InvalidArgument(
                "target_revision_id must name a revision id.", field="target_revision_id"
            )
        bank = await self._context.load_bank(bank_id)
        now = self._context.clock()
        target = await self._context.store.get_revision(bank_id, memory_id, target_revision_id, now)
        if target is None:
            raise NotFound(
                f"Revision {target_revision_id[:40]!r} of memory {memory_id!r} does not exist or "
                "has expired; list them with memories.revisions.list().",
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
        restored = replace(
            current,
            fact=target.fact,
            embedding=embedding,
            topics=target.topics,
            metadata=target.metadata,
            update_time=now,
        )
        revisions = self._revision_for(bank, restored, now, types.MemoryConfig())
        await self._context.store.apply(
            bank_id, WriteBatch(upserts=(restored,), revisions=revisions)
        )
        return restored

    # Purge

    async def purge(
        self, bank_id: str, *, filter: str | None, filter_groups: Any, force: bool
    ) -> int:
        """Counts (force=False) or deletes (force=True) the memories the filters select."""
        if not filter and not filter_groups:
            raise InvalidArgument(
                "purge needs a filter or filter_groups; to empty a bank, delete it with "
                "memory_banks.delete(name, force=True).",
                field="filter",
            )
        expr = combine(
            parse_filter(filter or "", allow_scope=True), from_filter_groups(filter_groups)
        )
        await self._context.load_bank(bank_id)
        query = ScanQuery(now=self._context.clock(), order_by=(SortKey("create_time"),))
        pushed, residual = partition(expr, self._context.store.capabilities.pushdown)
        selected = [
            record
            for record in await self._context.store.scan(bank_id, replace(query, filter=pushed))
            if matches(residual, record)
        ]
        if force:
            ids = [record.memory_id for record in selected]
            for start in range(0, len(ids), _PURGE_BATCH):
                batch = WriteBatch(deletes=tuple(ids[start : start + _PURGE_BATCH]))
                await self._context.store.apply(bank_id, batch)
        return len(selected)

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
        await self._context.load_bank(bank_id)
        revisions = await self._context.store.list_revisions(
            bank_id, memory_id, self._context.clock()
        )
        kept = [revision for revision in revisions if matches(expr, _revision_view(revision))]
        return page_after(
            kept,
            page_size=page_size,
            token=config.page_token,
            fingerprint=repr((bank_id, memory_id, expr)),
            position_of=lambda revision: Position((revision.create_time,), revision.revision_id),
            descending=True,
        )

    async def get_revision(self, bank_id: str, memory_id: str, revision_id: str) -> RevisionRecord:
        """One live revision; `NotFound` if missing or expired."""
        await self._context.load_bank(bank_id)
        found = await self._context.store.get_revision(
            bank_id, memory_id, revision_id, self._context.clock()
        )
        if found is None:
            raise NotFound(
                f"Revision {revision_id[:40]!r} of memory {memory_id!r} does not exist or has "
                "expired.",
                field="name",
            )
        return found

    # Helpers

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
