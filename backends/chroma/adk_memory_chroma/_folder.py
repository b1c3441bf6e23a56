"""One process at a time in an embedded Chroma directory: an OS lock held while stores use it.

Chroma's embedded mode (`chromadb.PersistentClient`) is single-process by design: each process
keeps its own in-memory copy of a collection's vector index and does not see what another
process writes. With chromadb 1.5, a process that read a collection before another process wrote
to it fails its next query (`InternalError: Error finding id`), and the index files are written
back by whichever process flushes last. Rather than let two processes corrupt or contradict each
other silently, the first store of a process that opens `chroma:///path` takes an exclusive,
non-blocking OS lock on `<path>/.adk-memory.lock` and writes its pid into it. Every store of that
process on the same directory shares the lock (counted); the last one to close releases it, and
the operating system releases it when the process dies, however it dies. A store in another
process is refused with `FailedPrecondition`, which names the holder and the ways to share data
between processes: a Chroma server (`chroma run --path DIR`, then `chroma+http://`) or the REST
server (`adk-memory serve --uri chroma://DIR`), whose URL it names when that process records one
(`adk_memory._remote.owner`).

A store built on a chromadb client the caller passed in takes no lock: the caller owns the client.

Write-ahead log. chromadb 1.5 keeps its embedded SQLite file (`chroma.sqlite3`) in SQLite's
default rollback-journal mode, where every commit writes and syncs a journal file, the database
and the directory: about eight `fsync` calls, two commits per `upsert`, 15-30 ms per single-row
write on this project's test disks (2 ms on tmpfs). `use_write_ahead_log` switches the file to
WAL mode, which SQLite records in the file itself, so Chroma's own connections (and later
processes, and `chroma run --path`) use it too: a commit is then one append and one `fsync` of
`chroma.sqlite3-wal`, with the same durability (Chroma's connections keep `synchronous=FULL`) and
the same all-or-nothing commits. WAL needs a local file system (SQLite's shared-memory index):
keep embedded Chroma off network shares, as Chroma itself advises; copy the folder with the
`-wal` file, or while no process has it open (the last close folds the log back into the file).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import sqlite3
import sys
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from adk_memory.errors import FailedPrecondition

if sys.platform == "win32":
    import msvcrt
else:
    import fcntl

__all__ = [
    "LOCK_FILE",
    "SQLITE_FILE",
    "first_hold",
    "hold",
    "release",
    "shared",
    "use_write_ahead_log",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

LOCK_FILE = ".adk-memory.lock"
SQLITE_FILE = "chroma.sqlite3"


@dataclass
class _Hold:
    fd: int
    users: int
    shared: dict[Hashable, Any] = field(default_factory=dict)
    closers: list[Callable[[], None]] = field(default_factory=list)
    making: threading.Lock = field(default_factory=threading.Lock)
    """Held while a shared value is made (a child's start: about a second, outside `_guard`)."""


_guard = threading.Lock()
_held: dict[str, _Hold] = {}


def hold(path: str) -> str:
    """Takes the directory's lock for this process, or shares the one it already holds.

    Args:
        path: The embedded Chroma directory (created if missing).

    Returns:
        The key to pass to `release`.

    Raises:
        FailedPrecondition: Another process holds the directory.
        OSError: The directory or its lock file cannot be created or opened.
    """
    folder = Path(path).expanduser().resolve()
    key = str(folder)
    with _guard:
        held = _held.get(key)
        if held is not None:
            held.users += 1
            return key
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            folder / LOCK_FILE, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644
        )
        if not _try_lock(fd):
            owner = _owner(fd)
            os.close(fd)
            raise FailedPrecondition(_in_use(key, owner), field="uri")
        if sys.platform != "win32":  # Windows locks the bytes themselves; the pid is a courtesy
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _held[key] = _Hold(fd, 1)
        return key


def _in_use(key: str, owner: str) -> str:
    """Why another process's hold refuses this one, and the way to share the folder."""
    from adk_memory._remote.owner import recorded_server

    held = f"The embedded Chroma directory {key} is in use by another process"
    held += f" (pid {owner})" if owner else ""
    served = recorded_server(key)
    if served is not None:
        return (
            f"{held}, which serves it at {served.url} (adk-memory serve). Go through that "
            f"server: use the URI {served.url} (--uri, ADK_MEMORY_URI or Client(uri=…)); "
            "adk-memory commands started on the folder with its options do so themselves."
        )
    return (
        f"{held}, which does not serve it. Embedded Chroma is single-process: two processes "
        "on one directory would each see a stale copy of its index. Stop the other process, "
        f"or share the data through a server: `adk-memory serve --uri chroma://{key}` (then "
        "adk-memory commands on the folder go through it, and other programs use its "
        f"http://127.0.0.1:8080), or `chroma run --path {key}` and "
        "chroma+http://127.0.0.1:8000?single_host=true."
    )


def release(key: str) -> None:
    """Gives back one use of the lock.

    The last one closes the shared state (`shared`), then the file, which frees the lock.
    """
    with _guard:
        held = _held.get(key)
        if held is None:
            return
        held.users -= 1
        if held.users > 0:
            return
        del _held[key]
    try:
        for close in reversed(held.closers):
            close()
    finally:
        os.close(held.fd)


def use_write_ahead_log(key: str) -> None:
    """Puts the directory's Chroma SQLite file in WAL mode (see the module docstring).

    Only while nothing in this process has the file open (call it before building the chromadb
    client, and only for this process's first hold): chromadb links its own copy of SQLite, and
    a second copy opening and closing the file in the same process would drop the first one's
    POSIX locks. A new directory's file is created here, already in WAL mode. A failure only
    costs speed, so it is logged, not raised.

    Args:
        key: What `hold` returned.
    """
    database = Path(key) / SQLITE_FILE
    try:
        with contextlib.closing(sqlite3.connect(database, timeout=10.0)) as connection:
            mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()
    except sqlite3.Error as exc:
        logger.warning("could not switch %s to SQLite's write-ahead log: %s", database, exc)
        return
    if not mode or str(mode[0]).lower() != "wal":
        logger.warning("%s stays in SQLite journal mode %s; writes are slower", database, mode)


OPEN_FILES_WANTED = 65536
"""The soft open-file limit an embedded store asks for (never above the hard limit)."""
OPEN_FILES_WARN_BELOW = 8192
"""A hard limit below this gets a warning: Chroma's index cache of (limit ÷ 5) in 64 shards
then evicts from a few hundred collections on (~55 at 1,024; ~3,000 at 20,000)."""


def raise_open_file_limit() -> None:
    """Raises this process's soft open-file limit towards `OPEN_FILES_WANTED` (never lowers it).

    Chroma keeps (soft limit ÷ 5) vector indexes open per client, fixed when the client is
    built, in 64 LRU shards, and closes the least recently used one of a full shard without
    saving it (`Chroma.get` rebuilds one a read finds missing). With Linux's usual soft limit
    of 1,024 eviction typically starts at ~55 collections; the hard limit is usually far
    higher. Call it before building the chromadb client.
    """
    if sys.platform == "win32":
        return
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else min(hard, OPEN_FILES_WANTED)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        except (ValueError, OSError) as exc:
            logger.warning("could not raise the open-file limit from %d: %s", soft, exc)
    if wanted < OPEN_FILES_WARN_BELOW:
        _warn_small_index_cache(hard)


@functools.cache
def _warn_small_index_cache(hard: int) -> None:
    """Says once per process that the hard open-file limit keeps Chroma's index cache small."""
    logger.warning(
        "The open-file hard limit is %d, so Chroma keeps at most %d vector indexes open (in 64 "
        "shards) and may evict one unsaved once a few hundred collections (two per bank) are "
        "in use; a memory updated since its index was last saved can then be read with its "
        "old vector. Raise the hard limit (ulimit -Hn %d) for many banks.",
        hard,
        hard // 5,
        OPEN_FILES_WANTED,
    )


def first_hold(key: str) -> bool:
    """Whether the hold `key` is this process's only one (no other store uses the directory)."""
    with _guard:
        held = _held.get(key)
        return held is not None and held.users == 1


def shared(
    key: str, name: Hashable, make: Callable[[], _T], close: Callable[[_T], None] | None = None
) -> _T:
    """State every store of this process on the directory shares, made on first use.

    It lives as long as the hold: once the last store has released the directory, another
    process may change it, and the state is dropped; `close`, if given, is called on it then,
    before the lock is given back (in the reverse order of making).
    """
    with _guard:
        held = _held[key]
        if name in held.shared:
            return held.shared[name]  # type: ignore[no-any-return]
    # Made outside `_guard`: stores of other directories open and close meanwhile. The caller's
    # own hold keeps this one from being released while it is made.
    with held.making:
        with _guard:
            if name in held.shared:
                return held.shared[name]  # type: ignore[no-any-return]
        value = make()
        with _guard:
            held.shared[name] = value
            if close is not None:
                held.closers.append(functools.partial(close, value))
        return value


def _try_lock(fd: int) -> bool:
    try:
        if sys.platform == "win32":
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        else:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _owner(fd: int) -> str:
    """The pid the holder wrote (POSIX locks are advisory, so the file can be read)."""
    if sys.platform == "win32":
        return ""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return ""
    return text if text.isdigit() else ""


def _forget_in_child() -> None:
    """Lets a forked child, another process, forget the parent's hold.

    It closes its copies of the descriptors (the parent keeps the lock) and has to take the lock
    itself to use a directory.
    """
    for held in _held.values():
        try:
            os.close(held.fd)
        except OSError:
            pass
    _held.clear()
    _guard.release()


if sys.platform != "win32":
    os.register_at_fork(
        before=_guard.acquire, after_in_parent=_guard.release, after_in_child=_forget_in_child
    )
