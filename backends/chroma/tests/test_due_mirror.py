"""Embedded Chroma's due index through the process's `_DueMirror`: what the mirror remembers
always matches the rows stored, across store instances on one folder, bank deletion, threads
with their own event loops, and a reopened folder. On a server, the due lock does that job."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from adk_memory_chroma import ChromaMemoryStore, _child, _chroma, _codec, _due, _store
from chromadb.api.models.Collection import Collection

from adk_memory.store import EXPIRY_KEY, EXPIRY_KIND
from adk_memory.testing.conformance import BANK, T0, bank_record
from adk_memory.testing.processes import stopped

LATER = T0 + timedelta(days=3650)


async def entry(store: ChromaMemoryStore, bank_id: str = BANK) -> datetime | None:
    """The bank's expiry entry as stored."""
    due = await store.due_documents(EXPIRY_KIND, LATER)
    return next((item.due for item in due if item.bank_id == bank_id), None)


async def lower(store: ChromaMemoryStore, due: datetime, bank_id: str = BANK) -> None:
    await store.set_due(bank_id, EXPIRY_KIND, {EXPIRY_KEY: due}, only_earlier=True)


async def put(store: ChromaMemoryStore, due: datetime | None, bank_id: str = BANK) -> None:
    await store.set_due(bank_id, EXPIRY_KIND, {EXPIRY_KEY: due})


async def test_a_lowering_follows_an_exact_write_of_another_instance(tmp_path: Path) -> None:
    """Each instance remembering the entry on its own would keep the first instance's lower
    value and skip the lowering after the second instance raised it: the entry would be late."""
    first = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    second = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    try:
        await first.create_bank(bank_record())
        await put(first, T0)
        await put(second, T0 + timedelta(days=9))  # a sweep raises it
        await lower(first, T0 + timedelta(days=5))
        assert await entry(second) == T0 + timedelta(days=5)
        await lower(second, T0 + timedelta(days=7))  # no earlier: stays
        assert await entry(first) == T0 + timedelta(days=5)
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_deleted_bank_forgets_its_entry_so_a_new_bank_of_that_id_gets_one(
    store: ChromaMemoryStore,
) -> None:
    await put(store, T0)
    await store.delete_bank(BANK)
    await store.create_bank(bank_record())
    await lower(store, T0 + timedelta(days=1))  # the old T0 must not be taken as still stored
    assert await entry(store) == T0 + timedelta(days=1)


async def test_removing_an_entry_then_lowering_writes_it_again(store: ChromaMemoryStore) -> None:
    await put(store, T0)
    await put(store, None)
    assert await entry(store) is None
    await lower(store, T0 + timedelta(hours=2))
    assert await entry(store) == T0 + timedelta(hours=2)


async def test_an_entry_written_before_the_process_opened_the_folder_is_read_once(
    tmp_path: Path,
) -> None:
    before = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    await before.create_bank(bank_record())
    await put(before, T0)
    await before.aclose()
    reopened = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    try:
        await lower(reopened, T0 + timedelta(days=1))  # later than stored: no change
        assert await entry(reopened) == T0
        await lower(reopened, T0 - timedelta(days=1))
        assert await entry(reopened) == T0 - timedelta(days=1)
    finally:
        await reopened.aclose()


async def test_a_repeat_costs_no_call_and_raises_wait_for_the_next_call_of_the_index(
    store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As a stream's writes do: lowered, then set exactly to the same time (no call); put off
    twice, as each turn of a session does, then removed, as a flush does: none of those is
    written until the index is next read (or written), and then in one step (an upsert, a
    delete), while the entry stored stays earlier (early, never late)."""
    calls: list[str] = []
    for method in ("upsert", "delete"):
        original = getattr(Collection, method)

        def counted(collection: Collection, *args: Any, _o: Any = original, **kwargs: Any) -> Any:
            calls.append(collection.name)
            return _o(collection, *args, **kwargs)

        monkeypatch.setattr(Collection, method, counted)
    await lower(store, T0)
    await put(store, T0)
    assert len(calls) == 1
    await put(store, T0 + timedelta(days=1))
    await put(store, T0 + timedelta(days=2))
    assert (len(calls), await in_chroma(store)) == (1, T0)
    assert await entry(store) == T0 + timedelta(days=2)  # written first, in one call
    assert (len(calls), await in_chroma(store)) == (2, T0 + timedelta(days=2))
    await put(store, None)
    await put(store, None)
    assert (len(calls), await in_chroma(store)) == (2, T0 + timedelta(days=2))
    await lower(store, T0 + timedelta(days=1), bank_id="another")  # a lowering takes them along
    assert (len(calls), await in_chroma(store)) == (4, None)  # its upsert, the removal's delete
    assert await entry(store) is None and len(calls) == 4


async def test_a_closing_store_writes_what_it_deferred(tmp_path: Path) -> None:
    first = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    await first.create_bank(bank_record())
    await put(first, T0)
    await put(first, T0 + timedelta(days=1))
    assert await in_chroma(first) == T0
    await first.aclose()
    reopened = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    try:
        assert await entry(reopened) == T0 + timedelta(days=1)
    finally:
        await reopened.aclose()


async def test_closing_a_store_whose_child_hangs_does_not_wait_for_what_it_deferred(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopped (SIGSTOP: alive and silent, like a hung disk), the child cannot take the deferred
    raise: the close gives up on it within its deadline, then ends the child."""
    monkeypatch.setattr(_store, "_CLOSE_WRITE_SECONDS", 0.5)
    monkeypatch.setattr(_child, "_STOP_SECONDS", 0.5)
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}?process=child")
    await store.create_bank(bank_record())
    await put(store, T0)
    await put(store, T0 + timedelta(days=1))  # a raise: deferred
    child = store._chroma.client.process
    with stopped(child.pid):
        started = time.perf_counter()
        await asyncio.wait_for(store.aclose(), 20)
        took = time.perf_counter() - started
    assert took < 5, f"closing took {took:.1f} s"
    assert child.poll() is not None, "the stopped child outlived its store"
    reopened = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    try:
        assert await entry(reopened) == T0  # the raise was lost: the entry stays early
    finally:
        await reopened.aclose()


async def in_chroma(store: ChromaMemoryStore, bank_id: str = BANK) -> datetime | None:
    """The bank's expiry entry as Chroma holds it now (not as the mirror will write it)."""
    index = await store._chroma.collection(store._chroma.name(None, _chroma.DUE), create=True)
    row_id = _due.due_row(EXPIRY_KIND, bank_id, EXPIRY_KEY, T0)[0]
    found = await asyncio.to_thread(index.get, ids=[row_id], include=["metadatas"])
    if not found["ids"]:
        return None
    return _codec.EPOCH + timedelta(microseconds=found["metadatas"][0]["due_us"])


async def stored_unseen(store: ChromaMemoryStore, bank_id: str, due: datetime) -> None:
    """Writes an entry straight into Chroma, as a process before this one did: unknown to the
    mirror, so the next lowering of it reads Chroma first (the window the lock closes)."""
    index = await store._chroma.collection(store._chroma.name(None, _chroma.DUE), create=True)
    row = _due.due_row(EXPIRY_KIND, bank_id, EXPIRY_KEY, due)
    await asyncio.to_thread(index.upsert, **_chroma.upsert_arguments([row]))


async def test_exact_writes_and_lowerings_from_threads_serialise(store: ChromaMemoryStore) -> None:
    """A sweep's exact write and a create's lowering race from two threads (two event loops),
    many times. Whatever their order, the entry ends at the exact write's earlier time; a
    lowering that read the old entry and wrote after the exact write would leave it at the
    lowering's later time."""
    early = T0 + timedelta(days=1)
    late = T0 + timedelta(days=2)

    def run(start: threading.Barrier, bank_id: str, exact: bool) -> None:
        start.wait()
        asyncio.run(put(store, early, bank_id) if exact else lower(store, late, bank_id))

    for round_number in range(40):
        bank_id = f"b{round_number}"
        await stored_unseen(store, bank_id, T0 + timedelta(days=30))
        start = threading.Barrier(2)
        threads = [
            threading.Thread(target=run, args=(start, bank_id, exact)) for exact in (False, True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        # Serialised: exact then lowering keeps `early`; lowering then exact ends at `early`.
        assert await entry(store, bank_id) == early, round_number


@pytest.mark.parametrize("racer", [lower, put], ids=["lowering", "exact-write"])
async def test_a_server_lowering_holds_the_due_lock_between_its_read_and_write(
    chroma_http_url: str,
    monkeypatch: pytest.MonkeyPatch,
    racer: Callable[[ChromaMemoryStore, datetime], Coroutine[Any, Any, None]],
) -> None:
    """Two stores on one server (two processes of a host). One lowering reads the entry and
    stalls; the other store lowers it further, or a sweep sets it exactly, meanwhile. Without
    the lock the stalled lowering then writes its later time over the earlier one."""
    prefix = f"due-{uuid.uuid4().hex[:8]}"
    stalled = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=prefix)
    other = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=prefix)
    read, resume = asyncio.Event(), asyncio.Event()
    call = stalled._chroma.call

    async def stalling_call(action: str, method: Callable[..., Any], **kwargs: Any) -> Any:
        result = await call(action, method, **kwargs)
        if action == "read due entries":
            read.set()
            await resume.wait()
        return result

    try:
        await stalled.create_bank(bank_record())
        await put(stalled, T0 + timedelta(days=30))
        monkeypatch.setattr(stalled._chroma, "call", stalling_call)
        lowering = asyncio.create_task(lower(stalled, T0 + timedelta(days=5)))
        await asyncio.wait_for(read.wait(), 30)
        racing = asyncio.create_task(racer(other, T0 + timedelta(days=1)))
        await asyncio.sleep(0.3)  # without the lock, the racer is done by now
        resume.set()
        await asyncio.gather(lowering, racing)
        assert await entry(other) == T0 + timedelta(days=1)
    finally:
        await other.drop_all()
        await stalled.aclose()
        await other.aclose()
