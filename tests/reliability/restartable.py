"""Servers that a test can kill and start again on the same port with the same data.

`RestartableRedis` runs the test Valkey (with RediSearch and RedisJSON) with `appendonly yes` and
`appendfsync always` in a folder of its own, so that a write acknowledged before a kill is on disk
and back after the restart. `RestartableChroma` runs the Chroma server that `chroma run` runs, on
a persistent `--path`; it calls the server through `chromadb_rust_bindings.cli` directly, which is
what the `chroma` script does after importing all of chromadb (about 3 s), so a restart costs about
0.2 s. Both `kill()` with SIGKILL (a crash: nothing is flushed on the way out) and `start()` again.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from adk_memory.testing._chroma_server import _heartbeat, _remove_lock_folder
from adk_memory.testing._redis_server import _free_port, _ping, _search_modules, _valkey_binary

_START_TIMEOUT_SECONDS = 20.0
_CHROMA_CLI = (
    "import sys, chromadb_rust_bindings; chromadb_rust_bindings.cli(['chroma', *sys.argv[1:]])"
)


class _Restartable:
    """A server process on a fixed port over a fixed folder: `start`, `kill`, `restart`."""

    def __init__(self, prefix: str) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=prefix))
        self.port = _free_port()
        self.restarts = 0
        self._process: subprocess.Popen[bytes] | None = None

    def _command(self) -> list[str]:
        raise NotImplementedError

    def _answers(self) -> bool:
        raise NotImplementedError

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        """Starts the server and waits until it answers (RuntimeError with its log if not)."""
        assert not self.running
        with (self.folder / "server.log").open("ab") as log:
            self._process = subprocess.Popen(
                self._command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.folder,
                env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
                start_new_session=True,  # its own process group: kill() reaches its children
            )
        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        while time.monotonic() < deadline and self.running:
            if self._answers():
                return
            time.sleep(0.01)
        self.kill()
        tail = (self.folder / "server.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{type(self).__name__} did not start. Last log lines:\n{tail}")

    def kill(self) -> None:
        """SIGKILLs the server's process group and waits for it (a crash, not a shutdown)."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)

    def restart(self) -> None:
        """Kills the server and starts it again on the same port and folder."""
        self.kill()
        self.start()
        self.restarts += 1

    def close(self) -> None:
        """Kills the server and deletes its folder."""
        self.kill()
        shutil.rmtree(self.folder, ignore_errors=True)


class RestartableRedis(_Restartable):
    """Valkey with the search modules, persisting every write before acknowledging it."""

    def __init__(self) -> None:
        super().__init__("adk-memory-restart-redis-")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _command(self) -> list[str]:
        args = [
            str(_valkey_binary()),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--dir",
            str(self.folder),
            "--logfile",
            str(self.folder / "server.log"),
        ]
        for module in _search_modules():
            args += ["--loadmodule", str(module)]
        return args

    def _answers(self) -> bool:
        return _ping(self.port)


class RestartableChroma(_Restartable):
    """The `chroma run` server on a persistent folder."""

    def __init__(self) -> None:
        super().__init__("adk-memory-restart-chroma-")

    @property
    def url(self) -> str:
        return f"chroma+http://127.0.0.1:{self.port}"

    def close(self) -> None:
        """Also removes the `single_host` lock folder of the server's id, which no server reuses."""
        if self.running:
            _remove_lock_folder(self.port)
        super().close()

    def _command(self) -> list[str]:
        return [
            sys.executable,
            "-c",
            _CHROMA_CLI,
            "run",
            "--path",
            str(self.folder / "data"),
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
        ]

    def _answers(self) -> bool:
        return _heartbeat(self.port)
