"""Embedded Chroma in a child process (`process=child`): the data, the directory's lock, the
child's life and death, and who may talk to it."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client
from pathlib import Path

import chromadb
import pytest
from adk_memory_chroma import ChromaMemoryStore, _child
from adk_memory_chroma._child import ChildClient, ChildGone, ChildProcess
from chromadb.config import Settings

from adk_memory._registry import store_from_uri
from adk_memory.errors import FailedPrecondition, InvalidArgument, StoreUnavailable
from adk_memory.testing.conformance import BANK, bank_record
from adk_memory.testing.processes import children_running, run_in_a_process


def _child_of(store: ChromaMemoryStore) -> ChildProcess:
    client = store._chroma.client
    assert isinstance(client, ChildClient), f"runs {type(client).__name__}, not a child"
    return client.process


def _exited(pid: int, within: float = 20.0) -> bool:
    deadline = time.monotonic() + within
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def _bank_ids(path: Path) -> list[str] | str:
    """Run in another process: the folder's bank ids read in-process, or the error opening it."""

    async def main() -> list[str] | str:
        store = ChromaMemoryStore.from_uri(f"chroma://{path}")
        try:
            return sorted(bank.bank_id for bank in await store.list_banks())
        except FailedPrecondition as error:
            return str(error)
        finally:
            await store.aclose()

    return asyncio.run(main())


async def test_the_child_holds_the_data_for_this_process_and_leaves_it_on_close(
    tmp_path: Path, child_store: ChromaMemoryStore
) -> None:
    pid = _child_of(child_store).pid
    assert pid != os.getpid() and not _exited(pid, within=0)
    held = run_in_a_process(_bank_ids, tmp_path)
    assert isinstance(held, str) and f"pid {os.getpid()}" in held  # the folder is ours, not free
    await child_store.aclose()
    assert _exited(pid), "the child outlived the last store on its folder"
    assert run_in_a_process(_bank_ids, tmp_path) == [BANK]


async def test_the_stores_of_a_process_share_one_chroma_on_a_folder(tmp_path: Path) -> None:
    """Two Chromas on one directory would each keep a copy of its index: the folder's first
    store decides, inline or child, for every later store of the process."""
    inline = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'a'}")
    child_first = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'b'}?process=child")
    await inline.create_bank(bank_record("inline-first"))
    await child_first.create_bank(bank_record("child-first"))
    asks_child = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'a'}?process=child")
    asks_inline = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'b'}")
    try:
        assert [bank.bank_id for bank in await asks_child.list_banks()] == ["inline-first"]
        assert not isinstance(asks_child._chroma.client, ChildClient)
        assert [bank.bank_id for bank in await asks_inline.list_banks()] == ["child-first"]
        assert _child_of(asks_inline) is _child_of(child_first)
        await asks_inline.create_bank(bank_record("through-the-child"))
        assert len(await child_first.list_banks()) == 2
    finally:
        for store in (inline, child_first, asks_child, asks_inline):
            await store.aclose()


def _create_database(path: Path, name: str) -> None:
    """Run in another process: creates a Chroma database in the folder (then lets it go)."""
    admin = chromadb.AdminClient(
        Settings(anonymized_telemetry=False, is_persistent=True, persist_directory=str(path))
    )
    admin.create_database(name)


async def test_stores_of_two_databases_on_one_child_stay_apart(tmp_path: Path) -> None:
    """One child serves every namespace of its folder: each store's calls go to its own tenant
    and database, as chromadb's clients in the process do (the collection names are equal)."""
    run_in_a_process(_create_database, tmp_path, "other_database")
    first = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}?process=child")
    other = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}?process=child&database=other_database")
    missing = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}?process=child&database=none_such")
    try:
        await first.create_bank(bank_record("mine"))
        await other.create_bank(bank_record("theirs"))
        assert _child_of(first) is _child_of(other)
        assert [bank.bank_id for bank in await first.list_banks()] == ["mine"]
        assert [bank.bank_id for bank in await other.list_banks()] == ["theirs"]
        with pytest.raises(StoreUnavailable):  # no such database: refused, as in the process
            await missing.list_banks()
    finally:
        for store in (first, other, missing):
            await store.aclose()


async def test_a_folder_a_chromadb_client_of_this_process_has_open_gets_no_child(
    tmp_path: Path,
) -> None:
    """A caller's own client takes no lock: a child beside it would be a second Chroma."""
    own = chromadb.PersistentClient(
        path=str(tmp_path), settings=Settings(anonymized_telemetry=False)
    )
    store = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}?process=child")
    try:
        await store.create_bank(bank_record())
        assert not isinstance(store._chroma.client, ChildClient)
        assert any(c.name.endswith(".banks") for c in own.list_collections())
    finally:
        await store.aclose()


def _killed(child: ChildProcess) -> int:
    pid = child.pid
    os.kill(pid, signal.SIGKILL)
    while child.poll() is None:  # reaps it (a zombie still answers `os.kill(pid, 0)`)
        time.sleep(0.02)
    return pid


async def test_a_killed_child_is_replaced_and_the_new_one_serves_the_same_data(
    tmp_path: Path, child_store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed (the OOM killer's choice: it holds the indexes), the child is replaced by the next
    call, which goes to the new one; a call in flight fails (its write may have happened); a
    child that dies again soon after is not started again and again: calls fail at once until
    the restart interval allows."""
    monkeypatch.setattr(_child, "_RESTART_SECONDS", 600.0)
    child = _child_of(child_store)
    first = _killed(child)
    assert (await child_store.get_bank(BANK)) is not None  # sent to the new child
    await child_store.create_bank(bank_record("after-restart"))
    second = child.pid
    assert second != first and child.poll() is None
    running = children_running("_child.py")  # other tests' children may be running too
    assert second in running and first not in running  # the dead one reaped

    os.kill(second, signal.SIGSTOP)  # a call in flight when the child dies
    in_flight = asyncio.ensure_future(child_store.get_bank(BANK))
    await asyncio.sleep(0.3)
    os.kill(second, signal.SIGKILL)
    with pytest.raises(StoreUnavailable, match=r"exited \(code -9\); a new one is started"):
        await in_flight
    started = time.monotonic()
    with pytest.raises(StoreUnavailable, match="at most every 600 s"):
        await child_store.create_bank(bank_record("too-soon"))
    assert time.monotonic() - started < 5

    monkeypatch.setattr(_child, "_RESTART_SECONDS", 0.0)
    banks = sorted(bank.bank_id for bank in await child_store.list_banks())
    assert banks == sorted([BANK, "after-restart"]) and child.pid not in (first, second)
    await child_store.aclose()
    assert _exited(child.pid)
    assert run_in_a_process(_bank_ids, tmp_path) == banks


async def test_a_child_killed_while_a_thread_connects_fails_that_call_as_gone(
    child_store: ChromaMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A thread's first call connects; the child dies before answering the connection's key
    challenge (the kernel took the connection, the child never did): the call fails as a dead
    child's, which the store reports as `StoreUnavailable`, not with a bare `EOFError`."""
    monkeypatch.setattr(_child, "_RESTART_SECONDS", 600.0)
    client = child_store._chroma.client
    assert isinstance(client, ChildClient)
    pid = client.process.pid
    outcome: list[BaseException] = []

    def first_call() -> None:
        try:
            client.call(_child._CLIENT, "heartbeat", {})
        except BaseException as exc:
            outcome.append(exc)

    os.kill(pid, signal.SIGSTOP)
    thread = threading.Thread(target=first_call, daemon=True)
    thread.start()
    await asyncio.sleep(0.3)
    os.kill(pid, signal.SIGKILL)
    thread.join(10)
    assert [type(exc) for exc in outcome] == [ChildGone], outcome


_ACCEPTS_ONE_THEN_EXITS = textwrap.dedent(
    """
    import pickle, sys
    from multiprocessing.connection import Listener
    pickle.load(sys.stdin.buffer)
    listener = Listener()
    pickle.dump(listener.address, sys.stdout.buffer)
    sys.stdout.buffer.flush()
    listener.accept().close()
    """
)


def test_a_child_that_takes_a_connection_and_dies_fails_the_call_as_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The child took the connection and died before sending its key challenge: the call fails
    as a dead child's (`StoreUnavailable` for the store), not with a bare `EOFError`."""
    monkeypatch.setattr(_child, "_command", lambda: [sys.executable, "-c", _ACCEPTS_ONE_THEN_EXITS])
    process = ChildProcess(str(tmp_path))
    try:
        with pytest.raises(ChildGone, match="exited"):
            process.call(("tenant", "database"), _child._CLIENT, "heartbeat", {})
    finally:
        process.shutdown()


_NEVER_READY = "import sys, time; sys.stdin.buffer.read(1); time.sleep(600)"


@pytest.fixture
def hanging_start(monkeypatch: pytest.MonkeyPatch) -> float:
    """Children that take their start arguments and never answer; a start deadline of 1 s."""
    monkeypatch.setattr(_child, "_START_SECONDS", 1.0)
    monkeypatch.setattr(_child, "_command", lambda: [sys.executable, "-c", _NEVER_READY])
    return 1.0


def test_a_child_not_ready_by_the_deadline_is_killed(tmp_path: Path, hanging_start: float) -> None:
    started = time.monotonic()
    with pytest.raises(ChildGone, match=r"not ready within 1 s"):
        ChildProcess(str(tmp_path))
    assert time.monotonic() - started < hanging_start + 5
    assert children_running(_NEVER_READY) == []  # killed and reaped, not left behind


async def test_a_store_whose_child_hangs_at_start_fails_and_holds_nothing(
    tmp_path: Path, hanging_start: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store raises `StoreUnavailable` after the deadline and gives the folder back; while
    it waits, a store of another folder opens without waiting for it."""
    hung = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'hung'}?process=child")
    waiting = asyncio.ensure_future(hung.create_bank(bank_record("never")))
    await asyncio.sleep(0.2)  # the hung child is starting
    other = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'other'}")
    started = time.monotonic()
    await other.create_bank(bank_record("meanwhile"))
    assert time.monotonic() - started < hanging_start / 2 + 0.3
    assert not waiting.done()
    with pytest.raises(StoreUnavailable, match="not ready within"):
        await waiting
    await hung.aclose()
    await other.aclose()
    monkeypatch.undo()  # a real child now: the folder is free and opens
    again = ChromaMemoryStore.from_uri(f"chroma://{tmp_path / 'hung'}?process=child")
    await again.create_bank(bank_record("after"))
    assert [bank.bank_id for bank in await again.list_banks()] == ["after"]
    await again.aclose()


_PARENT = textwrap.dedent(
    """
    import asyncio, sys
    from adk_memory_chroma import ChromaMemoryStore
    from adk_memory.testing.conformance import bank_record

    async def main():
        store = ChromaMemoryStore.from_uri(f"chroma://{sys.argv[1]}?process=child")
        await store.create_bank(bank_record())
        print(store._chroma.client.process.pid, flush=True)
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


def test_the_child_exits_when_its_parent_is_killed(tmp_path: Path) -> None:
    parent = subprocess.Popen(
        [sys.executable, "-c", _PARENT, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert parent.stdout is not None
        child_pid = int(parent.stdout.readline())
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        assert _exited(child_pid), "the child outlived its killed parent"
    finally:
        parent.kill()
    assert run_in_a_process(_bank_ids, tmp_path) == [BANK]


async def test_ctrl_c_and_sigterm_to_the_process_group_leave_the_child_serving(
    child_store: ChromaMemoryStore,
) -> None:
    """The parent decides when the child ends: it may still be writing after a signal."""
    child = _child_of(child_store)
    for sent in (signal.SIGINT, signal.SIGTERM):
        os.kill(child.pid, sent)
        await asyncio.sleep(0.2)
        assert child.poll() is None
        assert (await child_store.get_bank(BANK)) is not None


def _connects_within(child: ChildProcess, seconds: float = 10.0) -> bool:
    """Whether a new connection with the child's key is answered within `seconds` (a new
    calling thread's first call waits for just this)."""
    answered: list[bool] = []

    def connect() -> None:
        conn = Client(child.address, authkey=child._running.authkey)
        conn.close()
        answered.append(True)

    thread = threading.Thread(target=connect, daemon=True)
    thread.start()
    thread.join(seconds)
    return bool(answered)


async def test_a_connection_without_the_key_is_refused_and_the_child_keeps_serving(
    child_store: ChromaMemoryStore,
) -> None:
    child = _child_of(child_store)
    for _ in range(2):
        with pytest.raises(AuthenticationError):
            Client(child.address, authkey=b"a guess")
        assert _connects_within(child), "a wrong key stopped the child accepting connections"
    assert (await child_store.get_bank(BANK)) is not None
    assert oct(os.stat(os.path.dirname(child.address)).st_mode & 0o777) == "0o700"


async def test_a_peer_that_connects_and_says_nothing_does_not_hold_up_the_others(
    child_store: ChromaMemoryStore,
) -> None:
    child = _child_of(child_store)
    silent = [socket.socket(socket.AF_UNIX) for _ in range(3)]
    try:
        for peer in silent:
            peer.connect(child.address)
        assert _connects_within(child), "a silent peer stopped the child accepting connections"
    finally:
        for peer in silent:
            peer.close()
    assert (await child_store.get_bank(BANK)) is not None


async def test_many_threads_call_the_child_at_once(child_store: ChromaMemoryStore) -> None:
    ids = [f"bank-{index}" for index in range(24)]
    await asyncio.gather(*(child_store.create_bank(bank_record(bank_id)) for bank_id in ids))
    banks = await asyncio.gather(*(child_store.get_bank(bank_id) for bank_id in ids))
    assert [bank.bank_id for bank in banks if bank is not None] == ids


def test_serving_hosts_take_a_child_unless_the_uri_chooses(tmp_path: Path) -> None:
    def process(uri: str, **options: object) -> str:
        store = store_from_uri(uri, **options)
        assert isinstance(store, ChromaMemoryStore)
        return store.config.process

    assert process(f"chroma://{tmp_path}") == "inline"
    assert process(f"chroma://{tmp_path}", serving=True) == "child"
    assert process(f"chroma://{tmp_path}?process=inline", serving=True) == "inline"
    assert process(f"chroma://{tmp_path}", serving=True, process="inline") == "inline"
    assert process("chroma+http://localhost:8000?single_host=true", serving=True) == "inline"
    with pytest.raises(InvalidArgument, match="process=child is for an embedded store"):
        store_from_uri("chroma+http://localhost:8000?process=child")
    with pytest.raises(InvalidArgument, match="'process'"):
        store_from_uri(f"chroma://{tmp_path}?process=thread")


def test_the_rest_app_takes_a_child(tmp_path: Path) -> None:
    from adk_memory.server.app import create_app

    app = create_app(f"chroma://{tmp_path}")
    assert app.state.client.engine.store.config.process == "child"
    app = create_app(f"chroma://{tmp_path}?process=inline")
    assert app.state.client.engine.store.config.process == "inline"


def test_the_worker_runs_chroma_in_a_child_that_ends_after_its_ctrl_c(tmp_path: Path) -> None:
    """`adk-memory worker` serves until stopped: Chroma in a child, which ignores the Ctrl-C
    sent to the whole process group and ends once the worker has closed its store."""
    worker = subprocess.Popen(
        [sys.executable, "-m", "adk_memory.cli", "worker", "--uri", f"chroma://{tmp_path}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # a process group of its own, as a terminal gives it
    )
    try:
        deadline = time.monotonic() + 60
        while (
            not (children := children_running("adk_memory_chroma/_child.py", worker.pid))
            and time.monotonic() < deadline
        ):
            assert worker.poll() is None, worker.communicate()[1]
            time.sleep(0.1)
        [child] = children
        os.killpg(worker.pid, signal.SIGINT)  # Ctrl-C: the whole group
        assert worker.wait(60) == 0
        assert _exited(child)
    finally:
        worker.kill()
    assert run_in_a_process(_bank_ids, tmp_path) == []  # the folder is free again
