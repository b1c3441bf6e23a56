"""`list_revisions_many` on Chroma when the ids span several `$in` requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from adk_memory_chroma import ChromaMemoryStore, _store

from adk_memory.store import WriteBatch
from adk_memory.testing.conformance import T0, bank_record, revision

BANK = "chunked"


async def test_ids_beyond_one_in_list_are_read_in_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Split into `$in` lists of `IN_CHUNK` ids, the result is still each id's revisions."""
    monkeypatch.setattr(_store, "IN_CHUNK", 2)
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    try:
        await store.create_bank(bank_record(BANK))
        ids = [f"m{i}" for i in range(5)]
        revisions = tuple(revision(i, f"r{n}") for i in ids[:4] for n in range(2))
        await store.apply(BANK, WriteBatch(revisions=revisions))
        asked = [*ids, "m0", "missing"]
        found = await store.list_revisions_many(BANK, asked, T0)
        assert found == {i: await store.list_revisions(BANK, i, T0) for i in dict.fromkeys(asked)}
        assert [len(found[i]) for i in ids] == [2, 2, 2, 2, 0]
    finally:
        await store.drop_all()
        await store.aclose()
