"""Processes forked from a server process that has imported the package and its backends once.

A new interpreter spends seconds importing them before its first call; a process forked from
the server starts in a fraction of a second. It is still a separate process, with its own
stores, caches, connections, locks and event loop: what the tests that use it are about.
It inherits the environment of when the server started (the first use in a test session), not
the test's current one: pass what a test sets (URIs, models) as arguments.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

FORKS = multiprocessing.get_context("forkserver")
FORKS.set_forkserver_preload(
    ["adk_memory", "adk_memory.testing.models", "adk_memory_chroma", "adk_memory_redis"]
)


def children_running(command_part: str, parent: int | None = None) -> list[int]:
    """The pids of `parent`'s live children whose command line contains `command_part`.

    `parent` defaults to this process. Linux only: read from /proc.
    """
    parent_id = str(os.getpid() if parent is None else parent)
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = stat.read_text().rsplit(")", 1)[1].split()[1]
            command = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue  # it exited meanwhile
        if ppid == parent_id and command_part.encode() in command:
            found.append(int(stat.parent.name))
    return found


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The process stopped (SIGSTOP: alive and silent, like a hung server) for the block.

    Continued at its end, unless it is gone by then (killed by a close, say).
    """
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)


def run_in_a_process(target: Callable[..., Any], *args: Any, timeout: float = 120.0) -> Any:
    """What `target(*args)` returns when run in a forked process.

    `target` is a module-level function; its arguments and result are pickled. Fails with its
    traceback if it raises, or if it has not returned within `timeout` seconds.
    """
    [result] = run_in_processes(target, [args], timeout=timeout)
    return result


def run_in_processes(
    target: Callable[..., Any], arguments: Sequence[tuple[Any, ...]], *, timeout: float = 120.0
) -> list[Any]:
    """What `target(*args)` returns for each `args`, each run in a forked process, all at once.

    As `run_in_a_process`, for processes that work together or race (pass them a
    `FORKS.Barrier` to start rounds together). Fails if any raises, or if any has not returned
    within `timeout` seconds of the start.
    """
    started = [_start(target, args) for args in arguments]
    deadline = time.monotonic() + timeout
    try:
        results = []
        for _process, parent in started:
            left = max(0.0, deadline - time.monotonic())
            assert parent.poll(left), f"a process did not return within {timeout} s"
            error, result = parent.recv()
            assert error is None, error[-3000:]
            results.append(result)
        return results
    finally:
        for process, _parent in started:
            process.kill()
            process.join()


def exit_code_in_a_process(target: Callable[..., Any], *args: Any, timeout: float = 120.0) -> int:
    """The exit code of a forked process in which `target(*args)` ends the process itself.

    For a crash on purpose (`os._exit`): fails with the traceback if `target` raises, or if the
    process still runs after `timeout` seconds.
    """
    process, parent = _start(target, args)
    try:
        process.join(timeout)
        assert process.exitcode is not None, f"the process still ran after {timeout} s"
        with contextlib.suppress(EOFError):  # the process ended without a word, as it meant to
            error, _ = parent.recv()
            assert error is None, error[-3000:]
        return process.exitcode
    finally:
        process.kill()
        process.join()


def _start(target: Callable[..., Any], args: tuple[Any, ...]) -> tuple[BaseProcess, Connection]:
    parent, child = FORKS.Pipe(duplex=False)
    process = FORKS.Process(target=_reporting, args=(child, target, *args), daemon=True)
    process.start()
    child.close()  # the process holds the only writing end: its death reads as end of file
    return process, parent


def _reporting(parent: Connection, target: Callable[..., Any], *args: Any) -> None:
    """Sends (None, what `target(*args)` returns), or (its traceback, None) when it raises.

    Over the pipe, since the stderr this process inherited may be another test's capture.
    """
    try:
        result = target(*args)
    except BaseException:
        parent.send((traceback.format_exc(), None))
        raise
    parent.send((None, result))
