"""A throwaway Chroma server for tests, started from the `chromadb` package's own `chroma` command.

`chroma_server()` yields a `chroma+http://` URL. When `CHROMA_URL` is set it yields that and
starts nothing (point it at a real Chroma server to test against it). Otherwise it runs
`chroma run --path <tmpdir> --host 127.0.0.1 --port <free port>` with the `chroma` executable
that sits next to the running Python, waits until `/api/v2/heartbeat` answers, and on exit
terminates the server's whole process group and removes its data. Anonymized telemetry is turned
off, since test machines may have no internet.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

logger = logging.getLogger(__name__)

__all__ = ["chroma_server"]

_START_TIMEOUT_SECONDS = 30.0
_STOP_TIMEOUT_SECONDS = 10.0
_INSTALL_HINT = (
    "Install chromadb in this environment (pip install 'adk-memory[chroma]') or set CHROMA_URL "
    "to a running Chroma server, e.g. chroma+http://127.0.0.1:8000."
)


def _chroma_executable() -> Path:
    """The `chroma` command installed next to the running Python (the venv's)."""
    folder = Path(sys.executable).parent
    for name in ("chroma", "chroma.exe"):
        candidate = folder / name
        if candidate.is_file():
            return candidate
    found = shutil.which("chroma")
    if found is None:
        raise RuntimeError(f"No `chroma` executable next to {sys.executable}. {_INSTALL_HINT}")
    return Path(found)


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _heartbeat(port: int) -> bool:
    try:
        url = f"http://127.0.0.1:{port}/api/v2/heartbeat"
        with urllib.request.urlopen(url, timeout=1.0) as response:  # noqa: S310 (local URL)
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Terminates the server's process group, killing it if it does not stop in time."""
    for sig, wait in ((signal.SIGTERM, _STOP_TIMEOUT_SECONDS), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # the leader is gone; make sure nothing it started lingers in its group
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@contextmanager
def chroma_server(*, use_env: bool = True) -> Iterator[str]:
    """Yields the URL of a Chroma server, started here unless `CHROMA_URL` is set.

    Args:
        use_env: Yield `CHROMA_URL` when it is set instead of starting a server.

    Yields:
        A `chroma+http://127.0.0.1:<port>` URL (or `CHROMA_URL`).

    Raises:
        RuntimeError: The `chroma` command is missing or the server did not answer in time.
    """
    env_url = os.environ.get("CHROMA_URL")
    if use_env and env_url:
        yield env_url
        return
    executable = _chroma_executable()
    workdir = Path(tempfile.mkdtemp(prefix="adk-memory-chroma-"))
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False"}
    process: subprocess.Popen[bytes] | None = None
    try:
        for _attempt in range(3):
            port = _free_port()
            with (workdir / "server.log").open("ab") as log:
                process = subprocess.Popen(
                    [
                        str(executable),
                        "run",
                        "--path",
                        str(workdir / "data"),
                        "--host",
                        "127.0.0.1",
                        "--port",
                        str(port),
                    ],  # fmt: skip
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=workdir,
                    env=env,
                    start_new_session=True,  # its own process group, so _stop reaches children
                )
            deadline = time.monotonic() + _START_TIMEOUT_SECONDS
            while time.monotonic() < deadline and process.poll() is None:
                if _heartbeat(port):
                    break
                time.sleep(0.1)
            if process.poll() is None and _heartbeat(port):
                break
            _stop(process)
            process = None
            logger.debug("chroma server did not start on port %d; retrying", port)
        else:
            log_text = (workdir / "server.log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"The Chroma server did not start. Last log lines:\n{log_text}")
        yield f"chroma+http://127.0.0.1:{port}"
    finally:
        if process is not None:
            _remove_lock_folder(port)
            _stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


def _remove_lock_folder(port: int) -> None:
    """Removes the `single_host` lock folder of a server about to be stopped with its data.

    It is named after the server's random id, which no later server has: left, it would only
    pile up in the host's lock folder, one per test session. Nothing to do when no store locked.
    """
    import chromadb
    from adk_memory_chroma import ChromaStoreConfig
    from adk_memory_chroma._chroma import close_client
    from adk_memory_chroma._locks import SERVER_ID_COLLECTION
    from chromadb.config import Settings
    from chromadb.errors import NotFoundError

    client = chromadb.HttpClient(
        host="127.0.0.1", port=port, settings=Settings(anonymized_telemetry=False)
    )
    try:
        server_id = str(client.get_collection(SERVER_ID_COLLECTION).id)
    except NotFoundError:
        return
    finally:
        close_client(client)
    lock_dir = Path(ChromaStoreConfig.model_fields["lock_dir"].default)
    shutil.rmtree(lock_dir / server_id, ignore_errors=True)
