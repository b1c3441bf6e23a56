"""Embedded Chroma in a child process: the directory's chromadb calls outside this process's GIL.

chromadb's embedded bindings hold the GIL through every write (`upsert`, `delete`: the Rust call
runs under it), so while one runs no other thread of the process runs Python: an ADK runner's
turns, a REST server's requests and the embedding worker all wait (`benchmarks/NOTES.md`,
"Embedded Chroma in a child process"). `ChildClient` opens the directory's
`chromadb.PersistentClient` in a child process instead (this file run as a script: the child
imports chromadb, not adk_memory) and sends it every call; a call blocks only the thread that
makes it, and `Chroma` already makes each in a worker thread.

The child is this process's alone, like the directory (`_folder` holds it for this process and
shares one child among the process's stores on it). Each calling thread has a connection of its
own (a Unix socket, a named pipe on Windows; the child answers each connection in a thread of
its own), so a call is one message each way with no hand-off between threads. Arguments and
answers are pickled; a call that raises in the child raises the same exception here. The child
reads the parent's end of a pipe (its stdin) and exits when it closes: on `shutdown()`, and when
the parent dies however it dies. If the child dies, the calls in flight raise `ChildGone` (an
`OSError`, which `Chroma` reports as `StoreUnavailable`) and the next call starts a new child.
"""

from __future__ import annotations

import logging
import math
import os
import pickle
import signal
import subprocess
import sys
import threading
import time
import weakref
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import (
    Client,
    Connection,
    Listener,
    answer_challenge,
    deliver_challenge,
)
from typing import IO, Any

logger = logging.getLogger(__name__)

_START_SECONDS = 60.0
"""How long the child may take to import chromadb and open the directory."""
_STOP_SECONDS = 30.0
"""How long the child may take to close chromadb (it saves its indexes) before it is killed."""
_EXIT_SECONDS = 0.5
"""How long a broken connection waits for the child's exit code, to say why it broke."""
_RESTART_SECONDS = 5.0
"""A child that exited is started again at most this often; calls fail at once in between."""
_BACKLOG = 64
"""Connections the child's socket queues while its accepting thread starts a thread for one."""
_CLIENT = ""
"""The target of a call to the client itself; a collection's calls name the collection's id."""
_HANDLES = frozenset({"get_or_create_collection", "get_collection"})


class ChildGone(OSError):
    """The child process that holds the directory exited, or its connection broke."""


@dataclass(frozen=True, slots=True)
class _Running:
    """One started child: its process, and where and how to connect to it."""

    process: subprocess.Popen[bytes]
    address: str
    authkey: bytes


class ChildProcess:
    """The child process holding a directory, and this process's connections to it.

    A child that exits (killed, out of memory) fails the calls in flight with `ChildGone`; the
    next call starts a new one and goes to it (a new one at most every `_RESTART_SECONDS`,
    calls failing at once in between). Nothing the parent keeps about the directory's rows
    outlives a failed call: the store's mirrors forget what a write changes before sending it
    and learn it only from the answer, and a group write whose answer was lost leaves its
    journal to be replayed.
    """

    def __init__(self, path: str) -> None:
        """Starts the child on `path` and waits until it is ready.

        Ready: chromadb imported, its socket listening. Each `ChildClient` then opens the
        directory for its tenant and database.

        Raises:
            ChildGone: The child did not start, or exited before it was ready.
            Exception: What the child raised while getting ready.
        """
        self._path = path
        self._running = _start(path)
        self._restarted_at = -math.inf
        self._local = threading.local()
        self._connections: weakref.WeakSet[Connection] = weakref.WeakSet()
        """Every thread's connection, to close at shutdown (a thread's own closes as it ends)."""
        self._guard = threading.Lock()
        self._closed = False

    @property
    def pid(self) -> int:
        return self._running.process.pid

    @property
    def address(self) -> str:
        """Where the current child listens."""
        return self._running.address

    def poll(self) -> int | None:
        """The current child's exit code, or None while it runs."""
        return self._running.process.poll()

    def _connection(self) -> tuple[_Running, Connection]:
        """This thread's connection to the current child (started again if it exited).

        A child found dead here was sent nothing of this call: the call goes to its successor.
        """
        running: _Running | None = getattr(self._local, "running", None)
        if running is not None and running is self._running and running.process.poll() is None:
            return running, self._local.conn
        with self._guard:
            self._check_open()
            self._restart_if_exited()
            running = self._running
        try:  # outside the guard: a child that hangs holds up only the threads that call it
            conn = Client(running.address, authkey=running.authkey)
        except (OSError, EOFError, AuthenticationError) as exc:
            raise self._gone(running) from exc
        with self._guard:
            if self._closed:
                conn.close()
            self._check_open()
            self._connections.add(conn)
        old: Connection | None = getattr(self._local, "conn", None)
        if old is not None:
            old.close()
        self._local.running, self._local.conn = running, conn
        return running, conn

    def _check_open(self) -> None:
        if self._closed:
            raise ChildGone(f"the Chroma process for {self._path} was shut down")

    def _restart_if_exited(self) -> None:
        """Under `_guard`: a new child in place of one that exited.

        Unless one was just started in place of another: a child that keeps dying is not
        started again and again.
        """
        code = self._running.process.poll()
        if code is None:
            return
        if time.monotonic() - self._restarted_at < _RESTART_SECONDS:
            raise self._gone(self._running)
        logger.warning(
            "the Chroma process for %s exited (code %s); starting a new one", self._path, code
        )
        _close_pipes(self._running.process)
        self._restarted_at = time.monotonic()
        self._running = _start(self._path)

    def _gone(self, running: _Running) -> ChildGone:
        try:  # a connection broken by the child's death: its exit code comes a moment later
            code: int | None = running.process.wait(_EXIT_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        if code is None:
            return ChildGone(f"the Chroma process for {self._path} is not answering")
        return ChildGone(
            f"the Chroma process for {self._path} exited (code {code}); a new one is started "
            f"for the next call (at most every {_RESTART_SECONDS:g} s)"
        )

    def call(self, namespace: tuple[str, str], target: str, method: str, kwargs: Any) -> Any:
        """Runs `method` in the child.

        Of the (tenant, database) `namespace`'s client (`target` ""), or of its collection with
        id `target`.
        """
        running, conn = self._connection()
        try:
            conn.send((namespace, target, method, kwargs))
            ok, value = conn.recv()
        except (EOFError, OSError) as exc:
            self._local.running = None  # this connection is done; the next call connects anew
            raise self._gone(running) from exc
        if ok:
            return value
        raise value

    def shutdown(self) -> None:
        """Ends the child: it closes chromadb and exits once its stdin is closed."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            for conn in list(self._connections):
                conn.close()
        process = self._running.process
        assert process.stdin is not None
        process.stdin.close()
        try:
            process.wait(_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            logger.warning("the Chroma process for %s did not exit; killing it", self._path)
            process.kill()
            process.wait()
        _close_pipes(process)


def _start(path: str) -> _Running:
    """Starts a child on `path` and waits until it is ready (`ChildProcess.__init__`)."""
    authkey = os.urandom(32)
    process = subprocess.Popen(_command(), stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert process.stdin is not None and process.stdout is not None
    try:
        pickle.dump((authkey, path), process.stdin)
        process.stdin.flush()
        ready = _ready(process.stdout)
    except (EOFError, OSError, pickle.UnpicklingError) as exc:
        process.kill()
        process.wait()
        _close_pipes(process)
        if isinstance(exc, TimeoutError):
            raise ChildGone(
                f"the Chroma process for {path} was not ready within {_START_SECONDS:g} s"
            ) from exc
        raise ChildGone(f"the Chroma process for {path} exited at start") from exc
    if isinstance(ready, BaseException):
        process.wait(_STOP_SECONDS)
        _close_pipes(process)
        raise ready
    return _Running(process, ready, authkey)


def _ready(stdout: IO[bytes]) -> Any:
    """The child's first message, read within `_START_SECONDS` (else `TimeoutError`).

    Read in a thread of its own: a pipe's read has no deadline. Once the child is killed, the
    read ends too.
    """
    outcome: list[Any] = []

    def read() -> None:
        try:
            outcome.append((True, pickle.load(stdout)))
        except BaseException as exc:
            outcome.append((False, exc))

    reader = threading.Thread(target=read, name="adk-memory-chroma-start", daemon=True)
    reader.start()
    reader.join(_START_SECONDS)
    if not outcome:
        raise TimeoutError
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _close_pipes(process: subprocess.Popen[bytes]) -> None:
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            pipe.close()


class ChildClient:
    """The part of `chromadb.ClientAPI` a store uses, for one tenant and database.

    Answered by the directory's `ChildProcess`, which the process's stores on the directory
    share whatever their namespaces: the child keeps a chromadb client per tenant and database.
    """

    def __init__(self, process: ChildProcess, tenant: str, database: str) -> None:
        """A client of `tenant` and `database`, opened in the child now.

        Raises what chromadb raises for them, as `chromadb.PersistentClient` does.
        """
        self.process = process
        self._namespace = (tenant, database)
        self.call(_CLIENT, "heartbeat", {})

    def call(self, target: str, method: str, kwargs: dict[str, Any]) -> Any:
        return self.process.call(self._namespace, target, method, kwargs)

    def _handle(self, method: str, kwargs: dict[str, Any]) -> ChildCollection:
        return ChildCollection(self, *self.call(_CLIENT, method, kwargs))

    def get_or_create_collection(self, name: str, **kwargs: Any) -> ChildCollection:
        return self._handle("get_or_create_collection", {"name": name, **kwargs})

    def get_collection(self, name: str, **kwargs: Any) -> ChildCollection:
        return self._handle("get_collection", {"name": name, **kwargs})

    def delete_collection(self, name: str) -> None:
        self.call(_CLIENT, "delete_collection", {"name": name})

    def list_collections(self, **kwargs: Any) -> list[ChildCollection]:
        handles = self.call(_CLIENT, "list_collections", kwargs)
        return [ChildCollection(self, *handle) for handle in handles]

    def get_max_batch_size(self) -> int:
        return int(self.call(_CLIENT, "get_max_batch_size", {}))

    def close(self) -> None:
        """Nothing: the process's stores on the directory share the child (its `shutdown`)."""


class ChildCollection:
    """A collection handle whose calls run in the child.

    `name`, `id` and `dimension` (of the vectors, fixed by Chroma at the first write; None
    before) are as the collection was opened.
    """

    def __init__(
        self, client: ChildClient, name: str, collection_id: Any, dimension: int | None
    ) -> None:
        self._client = client
        self.name = name
        self.id = collection_id
        self.dimension = dimension

    def _call(self, method: str, kwargs: dict[str, Any]) -> Any:
        return self._client.call(str(self.id), method, kwargs)

    def get(self, **kwargs: Any) -> Any:
        return self._call("get", kwargs)

    def upsert(self, **kwargs: Any) -> None:
        self._call("upsert", kwargs)

    def update(self, **kwargs: Any) -> None:
        self._call("update", kwargs)

    def delete(self, **kwargs: Any) -> None:
        self._call("delete", kwargs)

    def count(self) -> int:
        return int(self._call("count", {}))


def _command() -> list[str]:
    """The child's command line: this file run as a script by this interpreter."""
    return [sys.executable, __file__]


def _serve() -> None:
    """The child: opens the directory, then answers calls until stdin closes.

    Each connection (one per calling thread of the parent) is answered in a thread of its own.
    """
    # The parent's Ctrl-C or a service manager's SIGTERM reaches the whole process group: the
    # child outlives it until the parent, finishing its writes, closes the pipe.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    authkey, path = pickle.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing chromadb prints may reach the parent's pipe
    try:
        import chromadb
        from chromadb.config import Settings

        # A Unix socket (a named pipe on Windows). The key is checked in each connection's
        # thread, not by `accept`: a wrong key or a peer saying nothing holds up nobody else.
        listener = Listener(backlog=_BACKLOG)
    except BaseException as exc:  # reported to the parent, which raises it
        pickle.dump(_picklable(exc), out)
        out.flush()
        return
    # Per (tenant, database): chromadb's client, and the collections opened through it by id.
    clients: dict[tuple[str, str], tuple[Any, dict[str, Any]]] = {}
    clients_guard = threading.Lock()

    def client_of(namespace: tuple[str, str]) -> tuple[Any, dict[str, Any]]:
        with clients_guard:
            if namespace not in clients:
                tenant, database = namespace
                client = chromadb.PersistentClient(
                    path=path,
                    settings=Settings(anonymized_telemetry=False),
                    tenant=tenant,
                    database=database,
                )
                clients[namespace] = (client, {})
            return clients[namespace]

    def answer(conn: Connection) -> None:
        with conn:
            try:
                deliver_challenge(conn, authkey)
                answer_challenge(conn, authkey)
            except (AuthenticationError, EOFError, OSError):
                return
            while True:
                try:
                    namespace, target, method, kwargs = conn.recv()
                except (EOFError, OSError):
                    return
                try:
                    reply = (True, _run(*client_of(namespace), target, method, kwargs))
                except BaseException as exc:
                    reply = (False, _picklable(exc))
                try:
                    conn.send(reply)
                except (EOFError, OSError):
                    return

    def accept() -> None:
        while True:
            try:
                conn = listener.accept()
            except OSError:
                continue  # a peer that left at once: keep serving the parent
            threading.Thread(target=answer, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    pickle.dump(listener.address, out)
    out.flush()
    sys.stdin.buffer.read()  # nothing more is sent: returns when the parent closes it or dies
    for client, _ in clients.values():
        client.close()


def _run(
    client: Any, collections: dict[str, Any], target: str, method: str, kwargs: dict[str, Any]
) -> Any:
    if target == _CLIENT:
        if method in _HANDLES:
            collection = getattr(client, method)(**kwargs)
            collections[str(collection.id)] = collection
            return _handle(collection)
        if method == "list_collections":
            found = client.list_collections(**kwargs)
            collections.update((str(collection.id), collection) for collection in found)
            return [_handle(collection) for collection in found]
        if method == "delete_collection":
            for key, collection in list(collections.items()):
                if collection.name == kwargs.get("name"):
                    del collections[key]
        return getattr(client, method)(**kwargs)
    collection = collections.get(target)
    if collection is None:  # opened through a child before this one (it exited)
        collections.update((str(found.id), found) for found in client.list_collections())
        collection = collections.get(target)
    if collection is None:  # deleted through this child: as chromadb's own stale handle
        from chromadb.errors import NotFoundError

        raise NotFoundError(f"Collection {target} does not exist.")
    return getattr(collection, method)(**kwargs)


def _handle(collection: Any) -> tuple[str, Any, int | None]:
    return collection.name, collection.id, fixed_dimension(collection)


def fixed_dimension(collection: Any) -> int | None:
    """The vector dimension Chroma fixed for a collection at its first write (None before).

    For a chromadb handle or a child's.
    """
    if isinstance(collection, ChildCollection):
        return collection.dimension
    return getattr(getattr(collection, "_model", None), "dimension", None)


def _picklable(exc: BaseException) -> BaseException:
    """`exc` if it survives pickling, else a `RuntimeError` naming its type.

    Never its arguments, which may quote stored values.
    """
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return RuntimeError(f"{type(exc).__name__} in the Chroma process")
    return exc


if __name__ == "__main__":
    sys.path.pop(0)  # this package's folder: its modules must not shadow chromadb's imports
    _serve()
