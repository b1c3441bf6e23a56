"""The folder's owner record: where the process holding an embedded folder serves it.

Embedded Chroma belongs to one process at a time (`adk_memory_chroma._folder` holds an OS lock
on `<folder>/.adk-memory.lock`, with the holder's pid in it). When that process is an
`adk-memory serve`, it writes `<folder>/.adk-memory.server` once it holds the folder: its pid,
the loopback URL it serves and a random secret, in a file only its user can read (mode 0600,
written aside and renamed into place). A command started on the folder (`adk-memory memories
…`, `adk-memory mcp`) then goes through that server instead of failing "in use"
(`find_server`), and says so once.

A record is never followed blindly. `find_server` ignores it unless it is a regular file of this
user that no one else can read or write, names a loopback `http://` URL, names a live process
that is the lock's holder, and the lock is held; and the client built from it sends nothing
before the server has answered a fresh challenge with the HMAC that only the secret's reader can
compute (`_client.owner_proof`, checked by `RemoteConnection`), and reads the record again
before each later request, so that a server that stopped hands nothing on to a program that takes
its port. A stale record (a dead server, a
free lock, a pid reused by another program, a port taken by another server) and a forged one (a
URL pointing elsewhere) are therefore not used; the server removes its record when it stops.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import stat
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

from adk_memory._hosts import is_loopback

__all__ = [
    "LOCK_FILE",
    "RECORD_FILE",
    "ServerRecord",
    "embedded_folder",
    "find_server",
    "recorded_server",
    "remove_record",
    "write_record",
]

logger = logging.getLogger(__name__)

RECORD_FILE = ".adk-memory.server"
LOCK_FILE = ".adk-memory.lock"
"""The embedded folder's lock file (`adk_memory_chroma._folder.LOCK_FILE`); its holder writes
its pid into it."""
_MAX_RECORD_BYTES = 4096


@dataclass(frozen=True, slots=True)
class ServerRecord:
    """A folder's owner record, as read (or written) by this process."""

    folder: str
    """The folder, resolved (as the store resolves it)."""
    pid: int
    """The serving process."""
    url: str
    """The loopback URL it serves the REST API at."""
    secret: bytes = b""
    """The proof secret (`_client.owner_proof`)."""
    options: tuple[tuple[str, str], ...] = ()
    """The store URI's query parameters the server opened the folder with, sorted."""


def embedded_folder(uri: str) -> tuple[str, tuple[tuple[str, str], ...]] | None:
    """(The resolved folder, the sorted query options) of a `chroma:///path` URI, else None."""
    parts = urlsplit(uri)
    if parts.scheme.lower() != "chroma":
        return None
    path = unquote(parts.path)
    if parts.netloc == "." and path:
        path = "." + path
    elif parts.netloc or not path.startswith("/") or path == "/":
        return None
    options = tuple(sorted(parse_qsl(parts.query, keep_blank_values=True)))
    return str(Path(path).expanduser().resolve()), options


def write_record(folder: str, url: str, options: tuple[tuple[str, str], ...]) -> ServerRecord:
    """Records that this process serves `folder` at `url` (which it must already hold).

    Raises:
        OSError: The record cannot be written.
    """
    record = ServerRecord(folder, os.getpid(), url, secrets.token_bytes(32), options)
    payload = {
        "pid": record.pid,
        "url": url,
        "secret": record.secret.hex(),
        "options": [list(pair) for pair in options],
    }
    target = Path(folder) / RECORD_FILE
    aside = target.with_name(f"{RECORD_FILE}.{record.pid}.{secrets.token_hex(4)}")
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(aside, flags, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            json.dump(payload, file)
        os.replace(aside, target)
    except BaseException:
        with contextlib.suppress(OSError):
            aside.unlink()
        raise
    logger.info("Recorded in %s that this process serves it at %s.", folder, url)
    return record


def remove_record(record: ServerRecord) -> None:
    """Removes the record if it is still this one (another server may have replaced it)."""
    current = _read(Path(record.folder))
    if current is not None and current.secret == record.secret:
        with contextlib.suppress(OSError):
            (Path(record.folder) / RECORD_FILE).unlink()


def recorded_server(folder: str) -> ServerRecord | None:
    """The record of `folder` if it passes every check that needs no network, else None.

    It must be a file of this user that only this user can read and write, name a loopback
    `http://` URL, and name a live process that is the folder lock's holder while the lock is
    held. It is what an "in use" error may point at; `find_server` adds the options check,
    and the client the challenge.
    """
    path = Path(folder)
    record = _read(path)
    if record is None:
        return None
    if record.pid == os.getpid():
        return None  # this process holds the folder: its own stores share the hold
    if not _alive(record.pid) or _holder(path) != record.pid or not _lock_held(path):
        logger.debug("The server record of %s is stale; ignored.", folder)
        return None
    return record


def find_server(uri: str) -> ServerRecord | None:
    """The server to go through for a `chroma:///path` URI whose folder another process serves.

    None when the URI is not an embedded folder, the folder has no valid record (see
    `recorded_server`), or the server opened it with other query options (then the folder is
    simply in use, and opening it says so).
    """
    found = embedded_folder(uri)
    if found is None:
        return None
    folder, options = found
    record = recorded_server(folder)
    if record is None or record.options != options:
        return None
    return record


def _read(folder: Path) -> ServerRecord | None:
    """The record file's content if it is this user's own, private, regular file."""
    path = folder / RECORD_FILE
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or not _private(info):
            logger.warning(
                "Ignoring %s: it must be a regular file of this user, readable by no one else.",
                path,
            )
            return None
        raw = os.read(fd, _MAX_RECORD_BYTES + 1)
    finally:
        os.close(fd)
    try:
        data = json.loads(raw[:_MAX_RECORD_BYTES])
        url, pid = str(data["url"]), data["pid"]
        secret = bytes.fromhex(str(data["secret"]))
        options = tuple(sorted((str(k), str(v)) for k, v in data.get("options") or ()))
    except (ValueError, KeyError, TypeError):
        return None
    parts = urlsplit(url)
    if not isinstance(pid, int) or pid <= 0 or len(secret) < 16:
        return None
    if parts.scheme != "http" or not is_loopback(parts.hostname or "") or parts.path:
        logger.warning("Ignoring %s: it names %s, which is not a loopback http:// URL.", path, url)
        return None
    return ServerRecord(str(folder), pid, url, secret, options)


def _private(info: os.stat_result) -> bool:
    if sys.platform == "win32":
        return True
    return info.st_uid == os.getuid() and not info.st_mode & (stat.S_IRWXG | stat.S_IRWXO)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # another user's process: not the one that wrote this user's record
    except OSError:
        return False
    return True


def _holder(folder: Path) -> int | None:
    """The pid the folder lock's holder wrote into the lock file."""
    try:
        text = (folder / LOCK_FILE).read_text("ascii", errors="replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _lock_held(folder: Path) -> bool:
    """Whether some process holds the folder's lock (taken and at once released if free)."""
    if sys.platform == "win32":
        return True  # the pid check above stands alone there
    import fcntl

    try:
        fd = os.open(folder / LOCK_FILE, os.O_RDWR | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)  # closing drops the lock if it was taken here
    return False
