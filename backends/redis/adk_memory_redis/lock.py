"""A distributed lock in Redis: a random token, a lease, safe release, optional renewal.

Holds across processes and hosts that share one Redis. It serialises generation per scope
(SPEC §3, Consistency) for the Redis store, and for a Chroma server shared by several hosts.

```python
locks = RedisLockProvider.from_uri("redis://localhost:6379/0")
async with locks.lock(f"generate:{bank_id}:{scope_key}", lease_seconds=30, wait_seconds=10):
    ...  # read, decide, write
held = await locks.acquire("name")  # or by hand, to extend it or check it before committing
held.check()
await held.release()
await locks.aclose()
```

`RedisLockProvider` satisfies `adk_memory.locks.LockProvider`.

Acquire is `SET key token NX PX 2000`, then an extension to the whole lease; only the holder's
token can release (`GET` = token then `DEL`, in one script) or extend it, so a holder whose lease
ran out can never free the lock of the next holder. An acquisition cut after its `SET` was sent
releases the lock; a `SET` that lands after that release (still on its way when the connection
was dropped) holds the lock for those 2 s, not the whole lease. A holder that dies stops
renewing, and the lock frees itself when the lease ends.
While held, a background task renews the lease every third of it; if renewal finds the lock
taken over (the process stalled longer than the lease), the lease is marked `lost`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import re
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Self

from redis.asyncio.cluster import RedisCluster

from adk_memory.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from adk_memory.locks import DEFAULT_LEASE_SECONDS, DEFAULT_WAIT_SECONDS, lease_lapsed
from adk_memory_redis._config import (
    RedisClient,
    connect,
    describe,
    is_cluster,
    make_config,
    split_uri,
)
from adk_memory_redis._errors import redis_errors

logger = logging.getLogger(__name__)

__all__ = ["RedisLock", "RedisLockProvider"]

_RELEASE_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_EXTEND_SCRIPT = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
_RENEWER_STOP_SECONDS = 5.0
"""How long a lock's exit waits for its renewal to stop before freeing the lock anyway."""
_FIRST_LEASE_MS = 2_000
"""The lease a lock's `SET` asks for; extended to the whole lease by `acquire` at once, or by
the renewal of a `lock` block after a third of it (`_take`)."""
_MAX_NAME = 1024
_BANK_LOCK = re.compile(r"[a-z][a-z-]*:([A-Za-z0-9][A-Za-z0-9_.\-]{0,127})(?::|$)")
"""The engine's lock names, `<kind>:<bank id>[:…]` (`generate:`, `stream:`, `memory-id:`, …)."""


class RedisLock:
    """A held lock: its token, its lease, and whether it is still ours."""

    def __init__(self, provider: RedisLockProvider, name: str, key: str, lease_ms: int) -> None:
        self.name = name
        self.token = uuid.uuid4().hex
        self._provider = provider
        self._key = key
        self._lease_ms = lease_ms
        self._held_ms = lease_ms
        """The lease Redis was last asked for (the first lease until extended)."""
        self._lost = False
        self._released = False

    @property
    def key(self) -> str:
        """The Redis key holding the token while the lock is ours (a store fences on it)."""
        return self._key

    @property
    def provider(self) -> RedisLockProvider:
        """The provider that took the lock."""
        return self._provider

    @property
    def lost(self) -> bool:
        """True once renewal found that the lease had run out and someone else may hold it."""
        return self._lost

    def check(self) -> None:
        """Raises `FailedPrecondition` if the lock is no longer held (call before committing)."""
        if self._lost or self._released:
            raise FailedPrecondition(
                f"The lock {self.name!r} is no longer held (its lease ran out); redo the work "
                "under a new lock."
            )

    async def verify(self) -> None:
        """Raises `Aborted` unless Redis still holds this lock's token (one round trip)."""
        if not (self._lost or self._released):
            client = self._provider._redis()
            with redis_errors(self._provider._where, "check a lock"):
                if await client.get(self._key) == self.token.encode():
                    return
            self._lost = True
        raise lease_lapsed(self.name)

    async def extend(self, lease_seconds: float | None = None) -> bool:
        """Resets the lease to `lease_seconds` (default: the original lease) if still ours."""
        lease_ms = self._lease_ms if lease_seconds is None else _lease_ms(lease_seconds)
        client = self._provider._redis()
        with redis_errors(self._provider._where, "extend a lock"):
            extended = bool(await client.eval(_EXTEND_SCRIPT, 1, self._key, self.token, lease_ms))
        if not extended:
            self._lost = True
        else:
            self._held_ms = lease_ms
        return extended

    async def release(self) -> bool:
        """Frees the lock if it is still ours; False when the lease had already run out."""
        if self._released:
            return False
        self._released = True
        client = self._provider._redis()
        try:
            with redis_errors(self._provider._where, "release a lock"):
                freed = bool(await client.eval(_RELEASE_SCRIPT, 1, self._key, self.token))
        except asyncio.CancelledError:
            # Cut (as `asyncio.run` ends) perhaps before the command left, with renewal
            # already stopped: free it anyway rather than leave it taken for the lease.
            await self._abandon()
            raise
        if not freed:
            self._lost = True
            logger.warning(
                "lock %r had expired before release; another holder may have run", self.name
            )
        return freed

    async def _take(self, client: RedisClient, *, whole_lease: bool) -> bool:
        """Whether this lock took its key: set to its token while free, then given its lease.

        The `SET` asks for at most `_FIRST_LEASE_MS`: one that lands after its acquisition was
        cut (its bytes still on the way when the connection was dropped, so `_abandon`'s release
        came first) holds the lock no longer than that. With `whole_lease` the lease is then
        extended at once (a first lease that lapsed before counts as not taken); without, the
        renewal of a `lock` block extends it, so a lock released within a third of the first
        lease (most are) costs one round trip to take, not two.
        """
        first_ms = min(self._lease_ms, _FIRST_LEASE_MS)
        if not await client.set(self._key, self.token, nx=True, px=first_ms):
            # A retried SET whose first reply was lost finds our own token.
            if await client.get(self._key) != self.token.encode():
                return False
        self._held_ms = first_ms
        if first_ms == self._lease_ms or not whole_lease:
            return True
        if not await client.eval(_EXTEND_SCRIPT, 1, self._key, self.token, self._lease_ms):
            return False
        self._held_ms = self._lease_ms
        return True

    async def _abandon(self) -> None:
        """Frees the lock a cut acquisition or release may have left; never raises a store error."""
        self._released = True
        with contextlib.suppress(Exception):
            await self._provider._redis().eval(_RELEASE_SCRIPT, 1, self._key, self.token)

    async def _renew_forever(self) -> None:
        while not self._released:
            await asyncio.sleep(self._held_ms / 3000)  # the first lease until extended
            if self._released:
                return
            try:
                if not await self.extend():
                    logger.warning("lock %r was lost: its lease ran out before renewal", self.name)
                    return
            except Exception:  # a blip: keep trying until the lease itself runs out
                logger.debug("renewing lock %r failed; retrying", self.name, exc_info=True)


def _lease_ms(seconds: float) -> int:
    if not seconds > 0:
        raise InvalidArgument("A lock lease must be longer than 0 seconds.", field="lease_seconds")
    return max(1, int(seconds * 1000))


class RedisLockProvider:
    """Named locks in one Redis, shared by every process and host that uses it.

    Args:
        url: `redis://…`, `rediss://…`, `redis+cluster://…` or `rediss+cluster://…` (query
            options as for the store: `key_prefix`, timeouts, TLS).
        client: A `redis.asyncio.Redis` or `RedisCluster` you built; never closed by the provider.
        key_prefix: Namespace of the lock keys (`<prefix>:lock:<name>`; on a cluster a name
            `<kind>:<bank id>[:…]` is kept in the bank's slot, `{<prefix>:<bank id>}:lock:<name>`).
        renew: Renew the lease in the background while the lock is held.
    """

    def __init__(
        self,
        url: str | None = None,
        *,
        client: RedisClient | None = None,
        key_prefix: str | None = None,
        renew: bool = True,
        **options: Any,
    ) -> None:
        if url is None and client is None:
            raise InvalidArgument("RedisLockProvider needs a redis:// URL or a client.")
        if key_prefix is not None:
            options["key_prefix"] = key_prefix
        self._url: str | None = None
        if url is not None:
            self._url, self.config = split_uri(url, options)
        else:
            self.config = make_config(options)
        self._client = client
        self._owns_client = client is None
        self.renew = renew
        self._where = describe(url, client)
        self._cluster = is_cluster(url) if url is not None else isinstance(client, RedisCluster)

    @classmethod
    def from_uri(cls, uri: str, **options: Any) -> Self:
        """Builds the provider from a Redis URI without connecting."""
        return cls(uri, **options)

    def _redis(self) -> RedisClient:
        if self._client is None:
            assert self._url is not None
            self._client = connect(self._url, self.config)
        return self._client

    def _key(self, name: str) -> str:
        if not isinstance(name, str) or not name or len(name) > _MAX_NAME:
            raise InvalidArgument(
                f"A lock name must be a non-empty string of at most {_MAX_NAME} characters.",
                field="name",
            )
        bank = _BANK_LOCK.match(name) if self._cluster else None
        if bank is not None:
            # In the bank's slot, so that a write of the bank can check the lock inside its
            # transaction (`WriteBatch.fences`): a transaction cannot span cluster slots.
            return f"{{{self.config.key_prefix}:{bank.group(1)}}}:lock:{name}"
        return f"{self.config.key_prefix}:lock:{name}"

    async def acquire(
        self,
        name: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> RedisLock:
        """Takes the lock, waiting up to `wait_seconds`; release it with `RedisLock.release`.

        Raises:
            ResourceExhausted: Another holder kept the lock for all of `wait_seconds`.
            StoreUnavailable: Redis could not be reached.
        """
        return await self._acquire(name, lease_seconds, wait_seconds, whole_lease=True)

    async def _acquire(
        self, name: str, lease_seconds: float, wait_seconds: float, *, whole_lease: bool
    ) -> RedisLock:
        key = self._key(name)
        held = RedisLock(self, name, key, _lease_ms(lease_seconds))
        deadline = time.monotonic() + max(0.0, wait_seconds)
        delay = 0.005
        client = self._redis()
        while True:
            try:
                with redis_errors(self._where, "acquire a lock"):
                    if await held._take(client, whole_lease=whole_lease):
                        return held
            except BaseException:
                # Cut after the SET reached Redis (a cancelled task, e.g. at the end of
                # `asyncio.run`, or a lost reply): the lock may be ours with nobody to release it.
                await held._abandon()
                raise
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ResourceExhausted(
                    f"Could not acquire the lock {name[:80]!r} within {wait_seconds:g} s: another "
                    "process or host still holds it. Retry later, or raise wait_seconds if the "
                    "work under it is long."
                )
            await asyncio.sleep(min(remaining, delay * (0.5 + random.random())))
            delay = min(delay * 2, 0.25)

    @asynccontextmanager
    async def lock(
        self,
        name: str,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        wait_seconds: float = DEFAULT_WAIT_SECONDS,
    ) -> AsyncIterator[RedisLock]:
        """Holds `name` for the block, renewing the lease in the background if `renew`.

        Raises:
            ResourceExhausted: Another holder kept the lock for all of `wait_seconds`.
            StoreUnavailable: Redis could not be reached.
        """
        held = await self._acquire(name, lease_seconds, wait_seconds, whole_lease=not self.renew)
        renewer = asyncio.create_task(held._renew_forever()) if self.renew else None
        try:
            yield held
        finally:
            try:
                if renewer is not None:
                    renewer.cancel()
                    # Not `await renewer`: its CancelledError would hide a cancellation of ours.
                    # Bounded: a renewal stuck in a reconnect to a restarted Redis held the
                    # block's exit (and its caller) past a minute. A late renewal is harmless:
                    # the release's script frees the lock, and a renewal after it finds none.
                    _, pending = await asyncio.wait([renewer], timeout=_RENEWER_STOP_SECONDS)
                    if pending:
                        logger.warning(
                            "renewing lock %r did not stop within %g s; freeing it anyway",
                            held.name,
                            _RENEWER_STOP_SECONDS,
                        )
            finally:
                await held.release()

    async def aclose(self) -> None:
        """Closes the connection pool the provider opened (never a client passed in)."""
        if self._owns_client and self._client is not None:
            client, self._client = self._client, None
            await client.aclose()
