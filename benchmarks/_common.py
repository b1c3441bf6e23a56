"""Shared helpers: timing statistics, the machine description, servers and clients."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

DIM = 384


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


def summary(ms: list[float]) -> dict[str, float]:
    """p50/p99 in ms and sequential throughput (1000 / mean ms)."""
    return {
        "p50_ms": round(statistics.median(ms), 3),
        "p99_ms": round(pct(ms, 99), 3),
        "qps": round(1000 / statistics.fmean(ms), 1),
        "n": len(ms),
    }


class Timer:
    def __enter__(self) -> Timer:
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.ms = (time.perf_counter() - self.start) * 1000


def unit_rows(rng: np.random.Generator, count: int, dim: int = DIM) -> np.ndarray:
    rows = rng.standard_normal((count, dim))
    unit: np.ndarray = rows / np.linalg.norm(rows, axis=1, keepdims=True)
    return unit


def machine() -> dict[str, Any]:
    cpu = platform.processor() or ""
    with contextlib.suppress(OSError):
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem_gb = None
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                mem_gb = round(int(line.split()[1]) / 1024 / 1024, 1)
    versions = {}
    for dist in (
        "adk-memory",
        "adk-memory-redis",
        "adk-memory-chroma",
        "google-adk",
        "chromadb",
        "redis",
        "redisvl",
        "numpy",
        "torch",
        "sentence-transformers",
        "matplotlib",
    ):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions[dist] = importlib.metadata.version(dist)
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gb": mem_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_avg_at_start": [round(x, 2) for x in load] if load else None,
        "versions": versions,
    }


def git_commit() -> str:
    """The repository's HEAD, with "+dirty" when tracked files differ from it."""
    import subprocess

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            text=True,
            capture_output=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            text=True,
            capture_output=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + ("+dirty" if dirty else "")


@dataclass
class Backends:
    """Where each backend lives for the run (servers are started once per run)."""

    redis_url: str | None
    tmp: str
    chroma_http_url: str | None = None
    """A Chroma server of the run (`chroma+http://…?single_host=true`), when asked for."""

    def uri(self, backend: str, tag: str) -> tuple[str, dict[str, Any]]:
        if backend == "memory":
            return "memory://", {}
        if backend == "chroma":  # a serving host runs it in a child process (`process=child`)
            return f"chroma://{self.tmp}/chroma-{tag}", {}
        if backend == "chroma-inline":  # in the host's own process, as before the child
            return f"chroma://{self.tmp}/chroma-{tag}", {"process": "inline"}
        if backend == "chroma-http":
            return self.chroma_http_url or "", {"collection_prefix": f"b{tag}"}
        if backend.startswith("redis"):
            algo = backend.split("-", 1)[1].upper()
            return self.redis_url or "", {"index_algorithm": algo, "key_prefix": f"b{tag}"}
        raise ValueError(backend)


@contextlib.contextmanager
def backends(need_redis: bool, *, need_chroma_http: bool = False) -> Iterator[Backends]:
    """The run's folder, and the servers asked for (a Redis that cannot start is skipped)."""
    with contextlib.ExitStack() as stack:
        where = Backends(
            None, stack.enter_context(tempfile.TemporaryDirectory(prefix="adk-memory-bench-"))
        )
        if need_chroma_http:
            from adk_memory.testing._chroma_server import chroma_server

            # One host: the server's stores lock with this host's locks.
            where.chroma_http_url = f"{stack.enter_context(chroma_server())}?single_host=true"
        if need_redis:
            from adk_memory.testing._redis_server import redis_server

            try:
                where.redis_url = stack.enter_context(redis_server())
            except Exception as exc:  # noqa: BLE001
                print(f"  Redis unavailable ({type(exc).__name__}: {exc}); skipping Redis")
        yield where
