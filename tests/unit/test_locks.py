"""`InProcessLockProvider`: mutual exclusion across loops and threads, handed over on release."""

from __future__ import annotations

import asyncio
import threading

import pytest

from adk_memory.errors import Aborted, ResourceExhausted
from adk_memory.locks import InProcessLockProvider


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
