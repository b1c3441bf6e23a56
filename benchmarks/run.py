"""Runs every benchmark and writes benchmarks/RESULTS.md, results.json and the PNG plots.

    python -m benchmarks            # --quick: small sizes, about 15-25 minutes on 2 busy cores
    python -m benchmarks --full     # 1,000 / 10,000 / 100,000 memories, every LoCoMo variant
    python -m benchmarks --only locomo latency
    python -m benchmarks --report   # rewrite RESULTS.md and the plots from results.json

See benchmarks/README.md for what each section measures.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SECTIONS = ("latency", "write", "generate", "locomo", "multilingual", "embedding", "rest")
MPNET_DIR = HERE / ".cache" / "models" / "all-mpnet-base-v2"


def _plan(full: bool, hnsw_100k: bool, redis_1m: bool) -> dict:
    sizes = [1_000, 10_000, 100_000] if full else [1_000, 10_000]
    big = sizes[-1]
    latency = []
    for size in sizes:
        for backend in ("memory", "chroma", "redis-flat", "redis-hnsw"):
            if backend == "redis-hnsw" and size > 10_000 and not hnsw_100k:
                continue
            latency.append((backend, size, 1))
    for scopes in [100, 1000] if full else [100]:
        for backend in ("memory", "chroma", "redis-flat"):
            latency.append((backend, big, scopes))
    if redis_1m:
        latency += [("redis-flat", 1_000_000, 1000)]
    incumbents = [(s, 1) for s in sizes] + [(big, 100)]
    return {
        "latency": latency,
        "queries": 500 if full else 200,
        "embed_queries": 100 if full else 30,
        "incumbents": incumbents,
        "write_count": 1000 if full else 200,
        "write_bulk": 20_000 if full else 2_000,
        "gen_facts": [1, 5, 10, 20],
        "gen_existing": [0, 100, 1000],
        "gen_requests": 30 if full else 10,
        "locomo_variants": full,
        "rest_requests": 800 if full else 400,
        "rest_rounds": 3 if full else 1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks", description=__doc__.split("\n")[0]
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes (default)")
    size.add_argument("--full", action="store_true", help="1k/10k/100k memories, all variants")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, help="run only these sections")
    parser.add_argument(
        "--hnsw-100k",
        action="store_true",
        help="also build a 100,000-memory Redis HNSW index (minutes)",
    )
    parser.add_argument(
        "--redis-1m",
        action="store_true",
        help="also load 1,000,000 memories into Redis FLAT (needs ~6 GB RAM)",
    )
    parser.add_argument(
        "--mpnet",
        default=None,
        metavar="FOLDER",
        help="also run LoCoMo with all-mpnet-base-v2 from this folder (default: "
        f"{MPNET_DIR.relative_to(HERE.parent)} when present)",
    )
    parser.add_argument("--no-mpnet", action="store_true", help="skip all-mpnet-base-v2")
    parser.add_argument(
        "--locomo-models",
        nargs="+",
        metavar="M",
        help="locomo: only these models (e.g. all-MiniLM-L6-v2@openvino); their modes merge into "
        "results.json, the other models' stay",
    )
    parser.add_argument(
        "--sizes",
        type=int,
        nargs="+",
        metavar="N",
        help="latency: only these bank sizes; rows merge into results.json",
    )
    parser.add_argument(
        "--scopes",
        type=int,
        nargs="+",
        default=[1],
        metavar="S",
        help="latency: spread each of --sizes over these numbers of scopes (default 1)",
    )
    parser.add_argument(
        "--backends",
        nargs="+",
        metavar="B",
        choices=["memory", "chroma", "redis-flat", "redis-hnsw"],
        help="latency: only these backends (with --sizes)",
    )
    parser.add_argument(
        "--report",
        action="store_true",
        help="only rewrite RESULTS.md and the plots from results.json",
    )
    args = parser.parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        print(
            "The benchmarks draw plots with matplotlib: pip install -e '.[benchmarks]'",
            file=sys.stderr,
        )
        return 2
    from benchmarks import report

    results_path = HERE / "results.json"
    if args.report:
        report.write(json.loads(results_path.read_text()), HERE)
        return 0
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # torch spins on busy cores otherwise
    from benchmarks import _common

    sections = args.only or list(SECTIONS)
    plan = _plan(args.full, args.hnsw_100k, args.redis_1m)
    if args.sizes:
        chosen = args.backends or ["memory", "chroma", "redis-flat", "redis-hnsw"]
        plan["latency"] = [(b, n, s) for n in args.sizes for s in args.scopes for b in chosen]
        plan["incumbents"] = []
    previous = json.loads(results_path.read_text()) if results_path.is_file() and args.only else {}
    command = "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:])
    results = previous | {
        "mode": "full" if args.full else "quick",
        "machine": _common.machine(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "plan": plan,
        "flags": {"hnsw_100k": args.hnsw_100k, "redis_1m": args.redis_1m},
    }
    if args.only and previous:
        results["machine"] = previous.get("machine", results["machine"])
        results["started"] = previous.get("started", results["started"])
        results["mode"] = previous.get("mode", results["mode"])
    results["runs"] = [
        *previous.get("runs", []),
        {
            "command": command.strip(),
            "at": time.strftime("%H:%M:%S"),
            "load_avg": _common.machine()["load_avg_at_start"],
            "commit": _common.git_commit(),
        },
    ]
    log = lambda message: print(message, flush=True)  # noqa: E731
    timings = results.setdefault("section_seconds", {})
    need_redis = bool({"latency", "write", "rest"} & set(sections))
    with _common.backends(need_redis) as where:
        # An --only run without Redis keeps what the merged sections were measured on.
        results["redis"] = where.redis_url is not None or bool(previous.get("redis"))
        if "latency" in sections:
            from benchmarks import latency

            started = time.perf_counter()
            log("== 1. retrieve latency")
            rows = latency.run(
                where,
                plan["latency"],
                plan["queries"],
                plan["embed_queries"],
                plan["incumbents"],
                log,
            )
            if args.sizes:  # merge: replace rows of the same configuration, keep the others
                new = {(r["backend"], r["size"], r["scopes"]) for r in rows}
                rows = [
                    r
                    for r in previous.get("latency", [])
                    if (r["backend"], r["size"], r["scopes"]) not in new
                ] + rows
                rows.sort(key=lambda r: (r["scopes"], r["size"]))
            results["latency"] = rows
            timings["latency"] = round(time.perf_counter() - started)
            results_path.write_text(json.dumps(results, indent=1))
        if "write" in sections:
            from benchmarks import write

            started = time.perf_counter()
            log("== 2. write cost")
            results["write"] = write.run(
                where,
                ["memory", "chroma", "redis-flat", "redis-hnsw"],
                plan["write_count"],
                plan["write_bulk"],
                log,
            )
            timings["write"] = round(time.perf_counter() - started)
            results_path.write_text(json.dumps(results, indent=1))
        if "generate" in sections:
            from benchmarks import generate

            started = time.perf_counter()
            log("== 3. generation cost")
            results["generate"] = generate.run(
                plan["gen_facts"], plan["gen_existing"], plan["gen_requests"], log
            )
            timings["generate"] = round(time.perf_counter() - started)
            results_path.write_text(json.dumps(results, indent=1))
        if "locomo" in sections:
            from benchmarks import locomo

            started = time.perf_counter()
            log("== 4. LoCoMo retrieval quality")
            models = [
                ("all-MiniLM-L6-v2@openvino", "all-MiniLM-L6-v2", 384),
                # The former default runtime: recall must not move (issue 28).
                ("all-MiniLM-L6-v2@sentence-transformers", "all-MiniLM-L6-v2", 384),
                ("multilingual-e5-small", "multilingual-e5-small", 384),
            ]
            mpnet = Path(args.mpnet) if args.mpnet else MPNET_DIR
            if not args.no_mpnet and (mpnet / "modules.json").is_file():
                from benchmarks import _cache, _locomo

                turns, questions = _locomo.load()
                missing = _cache.VectorCache("all-mpnet-base-v2").missing(
                    [q.text for q in questions] + [t.text for t in turns]
                )
                if missing and not args.mpnet:
                    log(
                        f"  (all-mpnet-base-v2: {len(missing)} texts not yet cached; skipped. "
                        "Pass --mpnet FOLDER to embed them in this run, ~5x MiniLM's time)"
                    )
                    results["mpnet_skipped"] = f"{len(missing)} texts not cached"
                else:
                    models.append(("all-mpnet-base-v2", str(mpnet), 768))
            elif not args.no_mpnet:
                log(f"  (all-mpnet-base-v2 not found at {mpnet}; see README to add it)")
            if args.locomo_models:
                models = [m for m in models if m[0] in args.locomo_models]
            ran = locomo.run(where.tmp, models, plan["locomo_variants"], log)
            if args.locomo_models and previous.get("locomo"):
                ran["modes"] = previous["locomo"]["modes"] | ran["modes"]
            results["locomo"] = ran
            timings["locomo"] = round(time.perf_counter() - started)
        if "multilingual" in sections:
            from benchmarks import multilingual

            started = time.perf_counter()
            log("== 5. Multilingual retrieval")
            results["multilingual"] = multilingual.run(log)
            timings["multilingual"] = round(time.perf_counter() - started)
        if "embedding" in sections:
            from benchmarks import embedding

            started = time.perf_counter()
            log(
                "== 6. Embedding runtime (OpenVINO and ONNX Runtime beside sentence-transformers; mem0)"
            )
            results["embedding"] = embedding.run(where.tmp, log)
            timings["embedding"] = round(time.perf_counter() - started)
            results_path.write_text(json.dumps(results, indent=1))
        if "rest" in sections:
            from benchmarks import rest_load

            started = time.perf_counter()
            log("== 7. REST throughput, embedding batched or not")
            results["rest"] = rest_load.run(
                where,
                ["redis-flat", "chroma", "chroma-inline"],
                requests=plan["rest_requests"],
                rounds=plan["rest_rounds"],
                log=log,
            )
            timings["rest"] = round(time.perf_counter() - started)
    results_path.write_text(json.dumps(results, indent=1))
    report.write(results, HERE)
    log(f"wrote {HERE / 'RESULTS.md'}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    raise SystemExit(main())
