"""Attacks on `RedisLockProvider` freeing a lock whose acquisition or release is cut.

The acquisition's `SET … NX` may reach Redis after the task that sent it was cancelled: its
connection is dropped, but bytes already on their way still arrive (a slow or lossy path, a
TCP retransmission). A release may be cut before its command left (while its connection is
being opened). Either way the lock must not stay taken for the whole lease with nobody to free
it.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aredis
from adk_memory_redis import RedisLockProvider
from test_redis_specific import _Proxy

from adk_memory.errors import Aborted, ResourceExhausted

_SET = b"$3\r\nSET\r\n"
_HELLO = b"HELLO"
"""What redis-py sends first on a new connection."""


@pytest.fixture
async def slow_requests(redis_url: str) -> AsyncIterator[_Proxy]:
    proxy = _Proxy(redis_url)
    proxy.request_marker = _SET
    await proxy.start()
    yield proxy
    await proxy.stop()


async def assert_free_soon(
    other: RedisLockProvider, raw: aredis.Redis, prefix: str, name: str, wait: float, what: str
) -> None:
    """`other` takes lock `name` within `wait` seconds; else the failure says how long it stays."""
    try:
        async with other.lock(name, wait_seconds=wait):
            pass
    except ResourceExhausted:
        pytest.fail(f"{what} keeps the lock for {await raw.pttl(f'{prefix}:lock:{name}')} ms more")


async def test_an_acquire_cut_before_its_set_lands_does_not_keep_the_lock_for_the_lease(
    slow_requests: _Proxy, redis_url: str
) -> None:
    """The task is cancelled while its SET is still on its way; the release that `acquire`
    sends on another connection gets there first and finds nothing, then the SET lands."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    cut = RedisLockProvider.from_uri(
        f"redis://127.0.0.1:{slow_requests.port}/0", key_prefix=prefix, socket_timeout=5
    )
    other = RedisLockProvider.from_uri(redis_url, key_prefix=prefix)
    raw = aredis.Redis.from_url(redis_url)
    try:
        async with cut.lock("warm-up", wait_seconds=1):
            pass  # a pooled connection exists
        slow_requests.request_delay = 0.4
        taking = asyncio.create_task(cut.acquire("slow", lease_seconds=60))
        await asyncio.sleep(0.1)
        taking.cancel()
        with pytest.raises(asyncio.CancelledError):
            await taking
        await asyncio.sleep(0.6)  # the SET has landed by now
        assert await raw.exists(f"{prefix}:lock:slow"), "the SET reached Redis late"
        await assert_free_soon(other, raw, prefix, "slow", 5, "the cut acquisition")
    finally:
        await cut.aclose()
        await other.aclose()
        await raw.aclose()


async def test_an_acquired_lock_holds_its_whole_lease_without_renewal(redis_url: str) -> None:
    """The first lease of the `SET` is short; what `acquire` returns holds the lease asked."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    locks = RedisLockProvider.from_uri(redis_url, key_prefix=prefix, renew=False)
    raw = aredis.Redis.from_url(redis_url)
    try:
        held = await locks.acquire("long", lease_seconds=30)
        assert await raw.pttl(f"{prefix}:lock:long") > 29_000
        await asyncio.sleep(2.2)  # past the first lease
        await held.verify()
        short = await locks.acquire("short", lease_seconds=0.5)
        assert 0 < await raw.pttl(f"{prefix}:lock:short") <= 500
        assert await held.release() and await short.release()
    finally:
        await locks.aclose()
        await raw.aclose()


async def test_a_release_cut_before_its_command_left_still_frees_the_lock(
    slow_requests: _Proxy, redis_url: str
) -> None:
    """The holder's task is cancelled as its release waits for a new connection (its pooled
    one was dropped): the release command never left, and the renewal has stopped."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    cut = RedisLockProvider.from_uri(
        f"redis://127.0.0.1:{slow_requests.port}/0", key_prefix=prefix, socket_timeout=5
    )
    other = RedisLockProvider.from_uri(redis_url, key_prefix=prefix)
    raw = aredis.Redis.from_url(redis_url)
    releasing = asyncio.Event()

    async def hold() -> None:
        async with cut.lock("held", lease_seconds=60):
            await cut._redis().connection_pool.disconnect()  # the release needs a connection
            slow_requests.request_marker, slow_requests.request_delay = _HELLO, 0.5
            releasing.set()

    try:
        holder = asyncio.create_task(hold())
        await releasing.wait()
        await asyncio.sleep(0.1)  # the release waits for its connection's handshake
        holder.cancel()
        with pytest.raises(asyncio.CancelledError):
            await holder
        await assert_free_soon(other, raw, prefix, "held", 3, "the cut release")
    finally:
        await cut.aclose()
        await other.aclose()
        await raw.aclose()


async def test_a_holder_cancelled_as_its_lock_is_given_back_stops_and_frees_the_lock(
    redis_url: str,
) -> None:
    """Cancelled while `lock` stops the lease's renewal: the task ends cancelled (the request
    is not swallowed with the renewal's own cancellation), and the lock is free."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    locks = RedisLockProvider.from_uri(redis_url, key_prefix=prefix)
    raw = aredis.Redis.from_url(redis_url)
    after_the_block: list[str] = []

    async def hold() -> None:
        async with locks.lock("given-back", lease_seconds=30):
            task = asyncio.current_task()
            assert task is not None
            asyncio.get_running_loop().call_soon(task.cancel)  # lands as renewal is stopped
        after_the_block.append("ran on")

    try:
        holder = asyncio.create_task(hold())
        with pytest.raises(asyncio.CancelledError):
            await holder
        assert after_the_block == []
        assert not await raw.exists(f"{prefix}:lock:given-back")
    finally:
        await locks.aclose()
        await raw.aclose()


class _Counting(aredis.Redis):
    """A client that records the name of every command it sends."""

    sent: list[str]

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.sent.append(str(args[0]).upper())
        return await super().execute_command(*args, **options)


async def test_a_lock_block_takes_its_lock_in_one_round_trip_and_renews_it_in_the_first_lease(
    redis_url: str,
) -> None:
    """A `lock` block's `SET` asks for the short first lease and the renewal extends it: a
    block that ends at once sends the `SET` and the release only, and one that runs past the
    first lease still holds the lock, with the whole lease."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    client = _Counting.from_url(redis_url)
    client.sent = []
    locks = RedisLockProvider(client=client, key_prefix=prefix)
    raw = aredis.Redis.from_url(redis_url)
    try:
        async with locks.lock("short", lease_seconds=30):
            assert 0 < await raw.pttl(f"{prefix}:lock:short") <= 2_000
        assert client.sent == ["SET", "EVAL"], "the take and the release, nothing between"
        async with locks.lock("long", lease_seconds=30) as held:
            await asyncio.sleep(2.3)  # past the first lease
            await held.verify()
            assert await raw.pttl(f"{prefix}:lock:long") > 25_000
        assert not held.lost
        assert not await raw.exists(f"{prefix}:lock:long")
    finally:
        await locks.aclose()
        await client.aclose()
        await raw.aclose()


async def test_a_holder_stalled_past_its_first_lease_is_fenced_out_once_another_takes_the_lock(
    redis_url: str,
) -> None:
    """A holder whose event loop is blocked past the first lease (its renewal never ran) has
    lost the lock: another process takes it, and the holder's `verify` (what a store's fenced
    write checks) refuses."""
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    locks = RedisLockProvider.from_uri(redis_url, key_prefix=prefix)
    other = RedisLockProvider.from_uri(redis_url, key_prefix=prefix)
    try:
        async with locks.lock("stalled", lease_seconds=30) as held:
            time.sleep(2.2)  # the loop is blocked: no renewal runs
            async with other.lock("stalled", wait_seconds=1):
                with pytest.raises(Aborted):
                    await held.verify()
    finally:
        await locks.aclose()
        await other.aclose()


async def test_a_create_whose_lock_lapsed_in_a_stall_takes_it_again_and_lands_once(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A create of a chosen id whose process stalls past its lock's first lease (its renewal
    never ran; a long garbage collection on a busy machine) has its write refused by the fence;
    it takes the lock again, checks the id again and lands, once."""
    from adk_memory_redis import lock as lock_module

    from adk_memory import AsyncClient
    from adk_memory.engine.memories import MemoryOps

    monkeypatch.setattr(lock_module, "_FIRST_LEASE_MS", 300)
    check = MemoryOps._check_id_is_free
    stalls = [0.6]

    async def stalling(self: MemoryOps, *args: Any) -> None:
        await check(self, *args)
        if stalls:
            time.sleep(stalls.pop())  # the loop is blocked: no renewal runs

    monkeypatch.setattr(MemoryOps, "_check_id_is_free", stalling)
    uri = f"{redis_url}?key_prefix=t-{uuid.uuid4().hex[:8]}"
    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
        bank = (await client.memory_banks.create()).name
        try:
            await client.memory_banks.memories.create(
                name=bank, fact="I like tea.", scope={"user_id": "u1"}, config={"memory_id": "m1"}
            )
            assert not stalls, "the create never stalled"
            listed = [m async for m in await client.memory_banks.memories.list(name=bank)]
            assert [m.name.rsplit("/", 1)[-1] for m in listed] == ["m1"]
            revisions = await client.memory_banks.memories.revisions.list(
                name=f"{bank}/memories/m1"
            )
            assert len([r async for r in revisions]) == 1
        finally:
            await client.memory_banks.delete(name=bank, force=True)


async def test_a_renewal_stuck_past_its_cancellation_does_not_hold_the_lock_exit(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renewal in flight when the block ends is cancelled; one that does not end at its
    cancellation (as a redis-py reconnect to a restarted Redis once did) no longer holds the
    block's exit: it frees the lock after a bounded wait."""
    from adk_memory_redis import lock as lock_module

    monkeypatch.setattr(lock_module, "_RENEWER_STOP_SECONDS", 0.5)
    renewing, unstick = asyncio.Event(), asyncio.Event()

    async def stuck(self: Any, lease_seconds: float | None = None) -> bool:
        renewing.set()
        try:
            await unstick.wait()
        except asyncio.CancelledError:
            await unstick.wait()  # the cancellation is not honoured
        return True

    monkeypatch.setattr(lock_module.RedisLock, "extend", stuck)
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    locks = RedisLockProvider.from_uri(redis_url, key_prefix=prefix)
    other = RedisLockProvider.from_uri(redis_url, key_prefix=prefix, renew=False)
    try:
        async with locks.lock("stuck"):
            await asyncio.wait_for(renewing.wait(), 5)  # the first renewal, a third of 2 s in
            started = time.monotonic()
        assert time.monotonic() - started < 2.0
        held = await other.acquire("stuck", wait_seconds=0)  # freed, not left for its lease
        await held.release()
    finally:
        unstick.set()
        await asyncio.sleep(0)
        await locks.aclose()
        await other.aclose()
