"""Helpers of the reliability suite: a runner for worker processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("_worker.py")


def run_workers(jobs: list[dict[str, Any]], *, timeout: float = 90.0) -> list[dict[str, Any]]:
    """Starts one process per job, releases them together once all are ready; their results.

    A worker still running after `timeout` seconds is killed and fails the test (a deadlock).
    """
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), json.dumps(job)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for job in jobs
    ]
    try:
        for proc in procs:
            line = proc.stdout.readline()
            assert line, proc.stderr.read()[-3000:]
            assert json.loads(line)["ready"]
        for proc in procs:
            proc.stdin.write("go\n")
            proc.stdin.flush()
        results = []
        deadline = time.monotonic() + timeout
        for proc in procs:
            try:
                out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pytest.fail(f"a worker did not finish within {timeout} s (deadlock?)")
            assert proc.returncode == 0, err[-3000:]
            results.append(json.loads(out.strip().splitlines()[-1]))
        return results
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
