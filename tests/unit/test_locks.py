"""`InProcessLockProvider`: mutual exclusion across loops and threads, handed over on release;
`FileLockProvider`: the same turns in front of its files, and the files between processes."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
from pathlib import Path
from typing import Any

import filelock
import pytest

from adk_memory.errors import Aborted, ResourceExhausted
from adk_memory.locks import FileLockProvider, InProcessLockProvider


async def test_waiters_get_the_lock_in_arrival_order_as_soon_as_it_is_released() -> None:
    locks = InProcessLockProvider()
    order: list[int] = []

    async def waiter(number: int) -> None:
        async with locks.lock("scope"):
            order.append(number)
            await asyncio.sleep(0.01)

    holder = await _acquired(locks, "scope")
    waiters = [asyncio.create_task(waiter(number)) for number in range(3)]
    await asyncio.sleep(0.01)
    holder.set()
    # Handed over, not polled: a few turns of the loop, no waiting time, and the first waiter
    # holds the lock.
    for _ in range(5):
        await asyncio.sleep(0)
    assert order == [0]
    await asyncio.gather(*waiters)
    assert order == [0, 1, 2]
    assert not locks._held, "a name no one holds is forgotten"


async def test_holders_on_other_threads_and_loops_exclude_each_other() -> None:
    locks = InProcessLockProvider()
    inside = 0
    overlaps = 0

    async def worker() -> None:
        nonlocal inside, overlaps
        for _ in range(40):
            async with locks.lock("scope"):
                inside += 1
                overlaps += inside > 1
                await asyncio.sleep(0)
                inside -= 1

    threads = [threading.Thread(target=asyncio.run, args=(worker(),)) for _ in range(4)]
    for thread in threads:
        thread.start()
    await worker()
    for thread in threads:
        thread.join()
    assert overlaps == 0
    assert not locks._held


async def test_a_waiter_that_times_out_raises_and_leaves_the_lock_to_the_next() -> None:
    locks = InProcessLockProvider()
    async with locks.lock("scope"):
        with pytest.raises(ResourceExhausted, match="within 0.02 s"):
            async with locks.lock("scope", wait_seconds=0.02):
                pass
        with pytest.raises(ResourceExhausted):
            async with locks.lock("scope", wait_seconds=0):
                pass
        later = asyncio.create_task(_hold_briefly(locks, "scope"))
        await asyncio.sleep(0.01)
    await asyncio.wait_for(later, timeout=1)
    assert not locks._held


async def test_a_waiter_cancelled_after_being_handed_the_lock_passes_it_on() -> None:
    locks = InProcessLockProvider()
    holder = await _acquired(locks, "scope")
    cancelled = asyncio.create_task(_hold_briefly(locks, "scope"))
    await asyncio.sleep(0.01)
    patient = asyncio.create_task(_hold_briefly(locks, "scope"))
    await asyncio.sleep(0.01)
    holder.set()  # hands the lock to `cancelled`, whose wake-up is scheduled, not yet run
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    await asyncio.wait_for(patient, timeout=1)
    assert not locks._held


async def test_a_waiter_whose_loop_is_closed_is_skipped() -> None:
    locks = InProcessLockProvider()
    holder = await _acquired(locks, "scope")
    stranded: list[asyncio.Task[None]] = []

    def queue_then_close_the_loop() -> None:
        abandoned = asyncio.new_event_loop()
        stranded.append(abandoned.create_task(_hold_briefly(locks, "scope")))
        abandoned.run_until_complete(asyncio.sleep(0.01))  # queued as a waiter
        abandoned.close()

    thread = threading.Thread(target=queue_then_close_the_loop)
    thread.start()
    thread.join()
    assert not stranded[0].done()
    stranded[0]._log_destroy_pending = False  # its loop is gone: it can never finish
    patient = asyncio.create_task(_hold_briefly(locks, "scope"))
    await asyncio.sleep(0.01)
    holder.set()
    await asyncio.wait_for(patient, timeout=1)
    assert not locks._held


async def test_the_lease_fails_verification_after_the_block() -> None:
    locks = InProcessLockProvider()
    async with locks.lock("scope") as lease:
        await lease.verify()
    with pytest.raises(Aborted, match="no longer held"):
        await lease.verify()


async def _hold_briefly(locks: InProcessLockProvider, name: str) -> None:
    async with locks.lock(name, wait_seconds=5):
        await asyncio.sleep(0.001)


async def _acquired(locks: InProcessLockProvider, name: str) -> asyncio.Event:
    """Holds `name` in a task until the returned event is set."""
    done = asyncio.Event()
    taken = asyncio.Event()

    async def hold() -> None:
        async with locks.lock(name):
            taken.set()
            await done.wait()

    asyncio.get_running_loop().create_task(hold())
    await taken.wait()
    return done


async def test_file_lock_waiters_of_one_process_take_turns_without_polling_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ten callers of one process want one file lock, each holding it 20 ms: each is handed
    its turn in the process, in arrival order, and tries the file once (before: every waiter
    tried it every 20 ms, ~50 attempts)."""
    tries: list[str] = []
    acquire = filelock.FileLock.acquire

    def counted(self: filelock.FileLock, *args: Any, **kwargs: Any) -> Any:
        tries.append(self.lock_file)
        return acquire(self, *args, **kwargs)

    monkeypatch.setattr(filelock.FileLock, "acquire", counted)
    locks = FileLockProvider(tmp_path)
    order: list[int] = []

    async def hold(number: int) -> None:
        async with locks.lock("scope"):
            order.append(number)
            await asyncio.sleep(0.02)

    tasks = []
    for number in range(10):
        tasks.append(asyncio.create_task(hold(number)))
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    assert order == list(range(10))
    assert len(tries) == 10


def test_a_file_lock_held_by_another_process_still_excludes_and_times_out_naming_the_lock(
    tmp_path: Path,
) -> None:
    """The turns in the process stand in front of the file, not for it: a lock another process
    holds is still waited for, and a wait that ends says which lock."""
    taken, release = multiprocessing.Event(), multiprocessing.Event()
    other = multiprocessing.get_context("fork").Process(
        target=_hold_file_lock, args=(tmp_path, "generate:bank:scope", taken, release)
    )
    other.start()
    try:
        assert taken.wait(10)

        async def wait_for_it() -> None:
            async with FileLockProvider(tmp_path).lock("generate:bank:scope", wait_seconds=0.3):
                pytest.fail("the lock another process holds was taken")

        with pytest.raises(ResourceExhausted, match="generate:bank:scope"):
            asyncio.run(wait_for_it())
    finally:
        release.set()
        other.join(10)


def _hold_file_lock(folder: Path, name: str, taken: Any, release: Any) -> None:
    async def hold() -> None:
        async with FileLockProvider(folder).lock(name):
            taken.set()
            await asyncio.to_thread(release.wait, 10)

    asyncio.run(hold())
