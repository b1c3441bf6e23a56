"""7. REST throughput under concurrent clients, embedding batched or not (issue 28).

`adk-memory serve` runs in a process of its own, on Redis FLAT and on embedded Chroma, with the
default embedder (all-MiniLM-L6-v2) and each embedding mode:

* `before`    `ADK_MEMORY_LOCAL_RUNTIME=sentence-transformers` and `…_BATCH_SIZE=0`: the path before
              issue 28 (torch, every call alone), the baseline its "5× creates" is measured from;
* `off`       `ADK_MEMORY_EMBEDDING_BATCH_SIZE=0`: each call embeds its text alone (OpenVINO);
* `on`        micro-batching, adaptive: an idle model starts at once, texts arriving meanwhile
              form the next call (the default; OpenVINO, bfloat16 on CPUs that have it);
* `on, onnxruntime`  the same on ONNX Runtime (float32), the default runtime before OpenVINO;
* `on, 2 ms`  the same with `ADK_MEMORY_EMBEDDING_BATCH_WINDOW_MS=2`: an idle model waits 2 ms.
* `no model`  `ADK_MEMORY_EMBEDDING_MODEL=hash-64`: embedding costs microseconds, so this is the
              ceiling the rest of the path (HTTP, engine, store) allows.

`--clients` (16) concurrent clients (asyncio tasks over HTTP/1.1 keep-alive connections, in this
process) send `--requests` requests in all, each a create (30 %, a new fact in the client's
scope) or a retrieve (70 %, top 5 of the client's scope for a query never sent before), in an
order fixed by a seed. Reported per backend and mode: creates/s and retrieves/s (over the wall
time of the whole load), p50/p95 of each kind, and whether anything was lost: every create the
server acknowledged must be listed by `GET …/memories` afterwards. Modes take turns within each
round (`--rounds`), each on a fresh server and store, after a warm-up that loads the model.

    python -m benchmarks --only rest
    python -m benchmarks.rest_load --requests 400 --rounds 2 --backends chroma
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from benchmarks._common import Backends, pct

MODES: dict[str, dict[str, str]] = {
    "before": {
        "ADK_MEMORY_LOCAL_RUNTIME": "sentence-transformers",
        "ADK_MEMORY_EMBEDDING_BATCH_SIZE": "0",
    },
    "off": {"ADK_MEMORY_EMBEDDING_BATCH_SIZE": "0"},
    "on": {},
    "on, onnxruntime": {"ADK_MEMORY_LOCAL_RUNTIME": "onnxruntime"},
    "on, 2 ms": {"ADK_MEMORY_EMBEDDING_BATCH_WINDOW_MS": "2"},
    "no model": {"ADK_MEMORY_EMBEDDING_MODEL": "hash-64"},
}
CREATE_SHARE = 0.3
_PEOPLE = ["my sister", "my manager", "our neighbour", "my dentist", "the kids", "my cousin"]
_THINGS = [
    "green tea",
    "a trip to Busan",
    "the quarterly report",
    "hiking boots",
    "piano lessons",
    "a vegetarian lasagne",
    "the new apartment",
    "a marathon in spring",
]
_WHEN = ["on Mondays", "every morning", "next week", "in July", "after work", "at the weekend"]


def _fact(rng: random.Random, n: int) -> str:
    return (
        f"The user said {rng.choice(_PEOPLE)} wants {rng.choice(_THINGS)} "
        f"{rng.choice(_WHEN)} (note {n})."
    )


def _query(rng: random.Random, n: int) -> str:
    return f"What does {rng.choice(_PEOPLE)} think about {rng.choice(_THINGS)}? ({n})"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class Served:
    """A server process: its base URL, and the CPU seconds it has used (None off Linux)."""

    base: str
    cpu_seconds: Callable[[], float | None]


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of process `pid`, its threads and its live children (embedded
    Chroma's child process), from /proc (Linux)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    ticks = int(fields[11]) + int(fields[12])
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            child = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it exited meanwhile
        if child[1] == str(pid):
            ticks += int(child[11]) + int(child[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


@contextlib.contextmanager
def serve(uri: str, env: dict[str, str]) -> Iterator[Served]:
    """`adk-memory serve --uri URI` in a new process with `env`; yields its URL and CPU clock."""
    port = _free_port()
    environment = os.environ | {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    environment.pop("ADK_MEMORY_EMBEDDING_MODEL", None)
    environment |= env
    command = [sys.executable, "-m", "adk_memory.cli", "serve", "--uri", uri, "--port", str(port)]
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:  # a pipe nobody reads would stall the server
        process = subprocess.Popen(command, env=environment, stdout=log, stderr=log, text=True)
        try:
            deadline = time.monotonic() + 120
            while True:
                if process.poll() is not None:
                    log.seek(0)
                    raise RuntimeError(f"the server exited: {log.read()[-2000:]}")
                with contextlib.suppress(httpx.HTTPError):
                    if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError("the server did not answer /healthz within 120 s")
                time.sleep(0.2)
            yield Served(base, lambda: _cpu_seconds(process.pid))
        finally:
            process.terminate()
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


async def _listed(http: httpx.AsyncClient, bank: str) -> set[str]:
    names: set[str] = set()
    token = None
    while True:
        params = {"pageSize": 100} | ({"pageToken": token} if token else {})
        page = (await http.get(f"/v1beta1/{bank}/memories", params=params)).json()
        names.update(memory["name"] for memory in page.get("memories", []))
        token = page.get("nextPageToken")
        if not token:
            return names


async def load(server: Served, *, clients: int, requests: int, seed: int) -> dict[str, Any]:
    """Runs the mixed load against a fresh bank of `server`.

    Besides the rates, the CPU time per request of the server process and of this one (the
    clients): on a machine shared with other work, the rates follow the CPU left over, while
    the CPU a request costs does not.
    """
    base = server.base
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, timeout=300, limits=limits) as http:
        created = await http.post("/v1beta1/reasoningEngines", json={})
        bank = created.json()["response"]["name"].split("/locations/local/", 1)[-1]
        rng = random.Random(seed)
        for n in range(4):  # warm-up: loads the model, the store's indexes and connections
            scope = {"user_id": f"u{n}"}
            await http.post(
                f"/v1beta1/{bank}/memories", json={"fact": _fact(rng, -n), "scope": scope}
            )
            search = {"searchQuery": _query(rng, -n), "topK": 5}
            await http.post(
                f"/v1beta1/{bank}/memories:retrieve",
                json={"scope": scope, "similaritySearchParams": search},
            )
        plan = [
            [
                ("create" if rng.random() < CREATE_SHARE else "retrieve", c * requests + i)
                for i in range(requests // clients)
            ]
            for c in range(clients)
        ]
        timings: dict[str, list[float]] = {"create": [], "retrieve": []}
        acknowledged: set[str] = set()
        errors: list[str] = []

        async def client(number: int) -> None:
            scope = {"user_id": f"u{number}"}
            texts = random.Random(seed * 1000 + number)
            for kind, n in plan[number]:
                if kind == "create":
                    path, body = (
                        f"/v1beta1/{bank}/memories",
                        {"fact": _fact(texts, n), "scope": scope},
                    )
                else:
                    path = f"/v1beta1/{bank}/memories:retrieve"
                    search = {"searchQuery": _query(texts, n), "topK": 5}
                    body = {"scope": scope, "similaritySearchParams": search}
                began = time.perf_counter()
                try:
                    response = await http.post(path, json=body)
                except httpx.HTTPError as exc:
                    errors.append(type(exc).__name__)
                    continue
                timings[kind].append((time.perf_counter() - began) * 1000)
                if response.status_code != 200:
                    errors.append(str(response.status_code))
                elif kind == "create":
                    acknowledged.add(response.json()["response"]["name"])

        started, server_cpu, client_cpu = (
            time.perf_counter(),
            server.cpu_seconds(),
            _own_cpu_seconds(),
        )
        await asyncio.gather(*(client(number) for number in range(clients)))
        wall = time.perf_counter() - started
        server_cpu_after, client_cpu_after = server.cpu_seconds(), _own_cpu_seconds()
        lost = acknowledged - await _listed(http, bank)
    row: dict[str, Any] = {"wall_s": round(wall, 2), "errors": len(errors), "lost": len(lost)}
    for kind, ms in timings.items():
        row[f"{kind}s_per_s"] = round(len(ms) / wall, 1)
        row[f"{kind}_p50_ms"] = round(statistics.median(ms), 1) if ms else None
        row[f"{kind}_p95_ms"] = round(pct(ms, 95), 1) if ms else None
        row[f"{kind}s"] = len(ms)
    row["acknowledged"] = len(acknowledged)
    answered = max(1, sum(len(ms) for ms in timings.values()))
    if server_cpu is not None and server_cpu_after is not None:
        row["server_cpu_ms_per_request"] = round(
            (server_cpu_after - server_cpu) * 1000 / answered, 2
        )
    row["client_cpu_ms_per_request"] = round((client_cpu_after - client_cpu) * 1000 / answered, 2)
    row["load_1m"] = round(os.getloadavg()[0], 2)
    return row


def _uri(where: Backends, backend: str, tag: str) -> str:
    uri, options = where.uri(backend, tag)
    if not options:
        return uri
    query = "&".join(f"{key}={value}" for key, value in options.items())
    return f"{uri}{'&' if '?' in uri else '?'}{query}"


def run(
    where: Backends,
    backends: list[str],
    *,
    clients: int = 16,
    requests: int = 400,
    rounds: int = 1,
    modes: list[str] | None = None,
    log: Any = print,
) -> dict[str, Any]:
    """Every backend × mode, modes taking turns in each round; one row per run."""
    rows = []
    for backend in backends:
        if backend.startswith("redis") and not where.redis_url:
            log(f"  rest: {backend} skipped (no Redis)")
            continue
        for round_ in range(rounds):
            order = modes or list(MODES)
            order = order[round_ % len(order) :] + order[: round_ % len(order)]
            for mode in order:
                tag = f"rest{backend[:1]}{round_}{list(MODES).index(mode)}"
                try:
                    with serve(_uri(where, backend, tag), MODES[mode]) as server:
                        row = asyncio.run(
                            load(server, clients=clients, requests=requests, seed=round_ + 1)
                        )
                except Exception as exc:  # noqa: BLE001
                    row = {"error": f"{type(exc).__name__}: {exc}"[:300]}
                row = {"backend": backend, "mode": mode, "round": round_ + 1} | row
                log(f"    {row}")
                rows.append(row)
    return {
        "clients": clients,
        "requests": requests,
        "create_share": CREATE_SHARE,
        "load_avg_after": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--backends", nargs="+", default=["redis-flat", "chroma", "chroma-inline"])
    parser.add_argument("--modes", nargs="+", choices=list(MODES), help="default: all")
    args = parser.parse_args()
    from benchmarks import _common

    need_redis = any(b.startswith("redis") for b in args.backends)
    with _common.backends(need_redis, need_chroma_http="chroma-http" in args.backends) as where:
        result = run(
            where,
            args.backends,
            clients=args.clients,
            requests=args.requests,
            rounds=args.rounds,
            modes=args.modes,
        )
    from benchmarks.report import rest_md

    print("\n".join(rest_md(result)))


if __name__ == "__main__":
    main()
