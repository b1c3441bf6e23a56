"""A Chroma server that dies while a bank's journal is replayed sets nothing aside (issue 27).

A journaled batch is set aside only when Chroma refuses it, which it would do at every replay
(`adk_memory_chroma._journal`). A server that is down refuses nothing: the replay fails with
`StoreUnavailable`, the batch stays pending, and once the server is back it is completed whole.
The server is this module's own (`restartable.py`), SIGKILLed just as the replay starts writing.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from adk_memory_chroma import ChromaMemoryStore, _journal
from adk_memory_chroma import _codec as codec
from adk_memory_chroma._chroma import AUX, MEM
from restartable import RestartableChroma

from adk_memory.errors import StoreUnavailable
from adk_memory.store import ScanQuery, WriteBatch, set_aside_batches
from adk_memory.testing.conformance import BANK, T0, bank_record, memory, revision

NOW = T0.replace(year=T0.year + 1)
UNIT = (1.0,) + (0.0,) * 7


async def test_a_server_killed_during_a_replay_sets_nothing_aside_and_completes_it_after(
    restartable_chroma: RestartableChroma, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"{restartable_chroma.url}?single_host=true&collection_prefix=j{uuid.uuid4().hex[:8]}"
    writer = ChromaMemoryStore.from_uri(uri)
    await writer.create_bank(bank_record())
    await writer.apply(
        BANK, WriteBatch(inserts=(memory("a", UNIT),), revisions=(revision("a", "r1"),))
    )
    # What a writer that died right after its commit row leaves: the slot names memory "b",
    # which was never written.
    batch_id = _journal.new_batch_id()
    row_id, vector, fact, meta = codec.memory_row(memory("b", (0.0, 1.0) + (0.0,) * 6))
    pending = (row_id, vector, fact, {**meta, codec.JOURNAL_BATCH: batch_id})
    aux = await writer._chroma.collection(writer._chroma.name(BANK, AUX))
    slot = codec.slot_rows(batch_id, [pending], [], chunk_chars=10**6, inline_chars=10**6)
    await writer._chroma.write("leave a batch pending", aux, slot)
    await writer.aclose()

    finish = _journal.Journal._finish
    kills: list[str] = []

    async def killed_first(self: _journal.Journal, *args: Any) -> None:
        if not kills:
            kills.append(args[3])  # the batch id
            restartable_chroma.kill()
        await finish(self, *args)

    monkeypatch.setattr(_journal.Journal, "_finish", killed_first)
    reader = ChromaMemoryStore.from_uri(uri)
    try:
        with pytest.raises(StoreUnavailable):
            await reader.scan(BANK, ScanQuery(NOW))
        assert kills == [batch_id]
        with pytest.raises(StoreUnavailable):  # still down: still pending, nothing set aside
            await reader.apply(BANK, WriteBatch(revisions=(revision("a", "r2"),)))
        restartable_chroma.start()
        found = await reader.scan(BANK, ScanQuery(NOW))
        assert sorted(record.memory_id for record in found) == ["a", "b"]  # completed whole
        assert await set_aside_batches(reader, BANK) == []
        memories = await reader._chroma.collection(reader._chroma.name(BANK, MEM))
        aux = await reader._chroma.collection(reader._chroma.name(BANK, AUX))
        assert (await reader._journal.state(memories, aux)).journals == []
    finally:
        if not restartable_chroma.running:
            restartable_chroma.start()
        await reader.aclose()
