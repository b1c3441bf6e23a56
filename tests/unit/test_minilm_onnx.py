"""all-MiniLM-L6-v2 on ONNX Runtime (adk_memory.minilm_onnx) and the background warm-up."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from adk_memory import embeddings, minilm_onnx
from adk_memory.embeddings import (
    DEFAULT_EMBEDDING_MODEL,
    LocalEmbedder,
    embedder_for,
    packaged_model_dir,
    warm_up,
)
from adk_memory.errors import FailedPrecondition, InvalidArgument

# English, other languages and scripts, emoji, one token, empty, and texts past the 256-token
# truncation, where a runtime that truncated elsewhere (the tokenizer file says 128) would differ.
VARIED_TEXTS = [
    "I like blue",
    "a",
    "",
    "   leading and trailing spaces   ",
    "My sister Ana moved to Lisbon in March 2023 and works as a nurse there.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "Mi color favorito es el azul, pero en invierno prefiero el verde.",
    "東京で寿司を食べました。とても美味しかったです。",
    "나는 매일 아침 커피를 마신다",
    "مرحبا، كيف حالك اليوم؟",
    "Привет! Как дела?",
    "😀🎉🔥 party tonight 🍕",
    "Ünïcödé àccents çà et là — naïve café",
    "tab\tseparated\nnew lines\r\nand\u00a0no-break spaces",
    "x" * 500,
    "memory " * 300,
    " ".join(f"word{i}" for i in range(400)),
    "The user prefers window seats on flights longer than three hours. " * 12,
]


def cosines(a: list[tuple[float, ...]], b: list[tuple[float, ...]]) -> np.ndarray:
    return (np.asarray(a) * np.asarray(b)).sum(axis=1)


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
@pytest.mark.parametrize("runtime", ["onnx", "openvino", "onnxruntime"])
async def test_onnx_vectors_match_sentence_transformers(runtime: embeddings.LocalRuntime) -> None:
    """The torch-free default gives today's vectors, so existing banks need no re-embedding.

    OpenVINO computes in bfloat16 on CPUs that have it (this one does), ONNX Runtime in float32.
    """
    onnx = LocalEmbedder(runtime=runtime)
    torch = LocalEmbedder(runtime="sentence-transformers")

    documents = cosines(
        await onnx.embed_documents(VARIED_TEXTS), await torch.embed_documents(VARIED_TEXTS)
    )
    queries = cosines(
        [await onnx.embed_query(text) for text in VARIED_TEXTS[:6]],
        [await torch.embed_query(text) for text in VARIED_TEXTS[:6]],
    )

    assert documents.min() >= 0.999, dict(zip(VARIED_TEXTS, documents.round(5), strict=True))
    assert queries.min() >= 0.999


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
async def test_onnx_embeds_texts_the_tokenizer_would_refuse() -> None:
    """A lone surrogate (a JSON "\\ud800") or a NUL still gets a unit vector, not an error."""
    vectors = await LocalEmbedder(runtime="onnx").embed_documents(["lone \ud800 half", "a\x00b"])
    assert all(abs(float(np.linalg.norm(v)) - 1.0) < 1e-6 for v in vectors)


_FRESH_PROCESS = """
import asyncio, json, sys, time
import adk_memory
from adk_memory.embeddings import embedder_for
started = time.perf_counter()
vector = asyncio.run(embedder_for(None).embed_query("what do I like to drink?"))
print(json.dumps({"seconds": time.perf_counter() - started, "dimension": len(vector),
                  "torch": "torch" in sys.modules, "sentence_transformers":
                  "sentence_transformers" in sys.modules}))
"""


@pytest.mark.slow
def test_a_fresh_process_embeds_with_the_default_model_without_torch() -> None:
    """Importing adk_memory and embedding once loads neither torch nor sentence-transformers."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("ADK_MEMORY_LOCAL_RUNTIME", None)
    done = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    assert outcome["dimension"] == 384
    assert outcome["torch"] is False and outcome["sentence_transformers"] is False, (
        "the default model fell back to sentence-transformers: " + done.stderr[-1000:]
    )


@pytest.mark.usefixtures("offline")
def test_the_default_engine_is_openvino_and_onnxruntime_runs_the_same_file() -> None:
    folder = packaged_model_dir()
    openvino = minilm_onnx.load(folder)
    onnxruntime = minilm_onnx.load(folder, "onnxruntime")

    assert openvino.engine.startswith("openvino") and onnxruntime.engine.startswith("onnxruntime")
    agreement = (openvino.encode(VARIED_TEXTS) * onnxruntime.encode(VARIED_TEXTS)).sum(axis=1)
    assert agreement.min() >= 0.999


@pytest.mark.usefixtures("offline")
def test_openvino_pads_inputs_to_few_shapes_without_moving_the_vectors() -> None:
    model = minilm_onnx.load(packaged_model_dir())
    assert model.width_step == 8
    padded = model.encode(VARIED_TEXTS)
    model.width_step = 1
    exact = model.encode(VARIED_TEXTS)
    assert (padded * exact).sum(axis=1).min() >= 0.99999


@pytest.mark.usefixtures("offline")
def test_without_openvino_the_file_runs_on_onnxruntime_and_strict_openvino_says_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # `import openvino` raises ImportError
    assert minilm_onnx.load(packaged_model_dir()).engine.startswith("onnxruntime")
    with pytest.raises(minilm_onnx.OnnxUnavailable, match="openvino is not installed.*pip install"):
        minilm_onnx.load(packaged_model_dir(), "openvino")


@pytest.mark.usefixtures("offline")
def test_a_file_openvino_cannot_compile_runs_on_onnxruntime_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(onnx_file: Path, *, strict: bool) -> Any:
        raise RuntimeError("Exception from src/inference/src/cpp/core.cpp: unsupported operation")

    monkeypatch.setattr(minilm_onnx, "_openvino_runner", broken)
    with caplog.at_level("WARNING", logger="adk_memory.minilm_onnx"):
        model = minilm_onnx.load(packaged_model_dir())
    assert model.engine.startswith("onnxruntime")
    assert "OpenVINO cannot run" in caplog.text and "unsupported operation" in caplog.text
    assert model.encode(["still embeds"]).shape == (1, 384)


def test_importing_adk_memory_loads_no_model_runtime() -> None:
    """The runtimes are imported when a model loads, not by `import adk_memory` or the CLI."""
    heavy = [
        "openvino",
        "onnxruntime",
        "tokenizers",
        "torch",
        "sentence_transformers",
        "snowballstemmer",
    ]
    script = (
        f"import sys, adk_memory, adk_memory.cli\nprint([m for m in {heavy!r} if m in sys.modules])"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"


# Runtime choice and fallback (no model is loaded: the runtimes are faked)


class FakeEncoder:
    """Stands in for a loaded OnnxMiniLM: a constant unit vector per text."""

    dimension = 384
    engine = "fake"
    intra_op_threads = 1

    def encode(self, texts: list[str]) -> np.ndarray:
        rows = np.zeros((len(texts), self.dimension), dtype=np.float32)
        rows[:, 0] = 1.0
        return rows


@pytest.fixture
def fresh_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing loaded or warmed in this process as far as the code under test can tell."""
    monkeypatch.setattr(embeddings, "_loaded_models", {})
    monkeypatch.setattr(embeddings, "_onnx_refusals", {})
    monkeypatch.setattr(embeddings, "_warm_ups", {})
    monkeypatch.delenv("ADK_MEMORY_LOCAL_RUNTIME", raising=False)


@pytest.mark.usefixtures("fresh_loads")
async def test_the_first_embedding_waits_for_the_warm_up_instead_of_loading_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loads: list[Path] = []
    release = threading.Event()

    def slow_load(folder: Path, engine: str) -> FakeEncoder:
        loads.append(folder)
        release.wait(5)
        return FakeEncoder()

    monkeypatch.setattr(minilm_onnx, "load", slow_load)
    ready = warm_up(None)
    assert warm_up(DEFAULT_EMBEDDING_MODEL) is ready  # once per process and model
    assert not ready.is_set()

    first = asyncio.create_task(LocalEmbedder().embed_query("while loading"))
    await asyncio.sleep(0.05)
    assert not first.done()  # it waits for the load under way
    release.set()
    embedding = await first

    assert ready.wait(5)
    assert len(loads) == 1
    assert embedding[0] == pytest.approx(1.0)


@pytest.mark.usefixtures("fresh_loads")
def test_hash_and_gemini_models_need_no_warm_up() -> None:
    assert warm_up("hash-64").is_set()
    assert warm_up("gemini-embedding-001").is_set()


@pytest.mark.usefixtures("fresh_loads")
def test_a_failed_warm_up_is_logged_and_the_first_embedding_raises_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(model: str, device: str) -> Any:
        raise FailedPrecondition("no weights here; pip install 'adk-memory[local-embeddings]'")

    monkeypatch.setattr(embeddings, "_load_sentence_transformer", broken)
    with caplog.at_level("WARNING", logger="adk_memory.embeddings"):
        assert warm_up("all-mpnet-base-v2").wait(5)
    assert "Loading the embedding model 'all-mpnet-base-v2' failed" in caplog.text
    with pytest.raises(FailedPrecondition, match="pip install"):
        embeddings.preload_embedder("all-mpnet-base-v2")


@pytest.mark.usefixtures("fresh_loads")
async def test_without_the_onnx_runtime_the_default_model_runs_on_sentence_transformers(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Same vectors either way, so a missing onnxruntime costs start-up time, not correctness."""

    def unavailable(folder: Path, engine: str) -> Any:
        raise minilm_onnx.OnnxUnavailable(
            "onnxruntime is not installed; install it with: "
            "pip install 'adk-memory[local-embeddings]'"
        )

    torch_loads: list[str] = []

    def fake_sentence_transformer(model: str, device: str) -> Any:
        torch_loads.append(model)
        return embeddings._LoadedModel(FakeEncoder().encode, 384, "sentence-transformers")

    monkeypatch.setattr(minilm_onnx, "load", unavailable)
    monkeypatch.setattr(embeddings, "_load_sentence_transformer", fake_sentence_transformer)
    with caplog.at_level("WARNING", logger="adk_memory.embeddings"):
        await LocalEmbedder().embed_query("one")
        await LocalEmbedder().embed_query("two")
    assert torch_loads == [DEFAULT_EMBEDDING_MODEL, DEFAULT_EMBEDDING_MODEL]
    assert caplog.text.count("onnxruntime is not installed") == 1  # asked once per process
    assert "pip install 'adk-memory[local-embeddings]'" in caplog.text

    with pytest.raises(FailedPrecondition, match="ONNX runtime .* unavailable"):
        await LocalEmbedder(runtime="onnx").embed_query("strict")


def test_the_onnx_runtime_serves_only_the_default_model_on_the_cpu() -> None:
    with pytest.raises(InvalidArgument, match="only 'all-MiniLM-L6-v2'"):
        LocalEmbedder("all-mpnet-base-v2", runtime="onnx")
    with pytest.raises(InvalidArgument, match="only 'all-MiniLM-L6-v2'"):
        LocalEmbedder(device="cuda", runtime="onnx")
    with pytest.raises(InvalidArgument, match="runtime must be"):
        LocalEmbedder(runtime="tensorflow")  # type: ignore[arg-type]


@pytest.mark.usefixtures("fresh_loads")
def test_the_runtime_setting_picks_sentence_transformers_for_the_default_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ADK_MEMORY_LOCAL_RUNTIME", "sentence-transformers")
    assert LocalEmbedder().runtime == "sentence-transformers"
    for runtime in ("onnx", "openvino", "onnxruntime"):
        monkeypatch.setenv("ADK_MEMORY_LOCAL_RUNTIME", runtime)
        assert LocalEmbedder().runtime == runtime
    assert LocalEmbedder("all-mpnet-base-v2").runtime == "auto"  # the setting is the default's
    monkeypatch.setenv("ADK_MEMORY_LOCAL_RUNTIME", "gpu-please")
    with pytest.raises(InvalidArgument, match="ADK_MEMORY_LOCAL_RUNTIME"):
        LocalEmbedder()
    assert isinstance(embedder_for("hash-8"), embeddings.HashEmbedder)  # others are unaffected


# The cached ONNX file


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("ADK_MEMORY_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_onnx_file_is_keyed_by_the_weights_digest(cache: Path, tmp_path: Path) -> None:
    packaged = minilm_onnx.model_file(packaged_model_dir())
    assert packaged.parent == cache / "models"
    assert f"-f{minilm_onnx.EXPORT_FORMAT}.onnx" in packaged.name

    copy = tmp_path / "copy"
    copy.mkdir()
    (copy / "model.safetensors").write_bytes(b"other weights")
    other = minilm_onnx.model_file(copy)
    assert other.parent == packaged.parent and other.name != packaged.name


def test_concurrent_first_runs_export_once_and_publish_whole_files(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    exports: list[Path] = []

    def fake_export(source: Path, target: Path) -> None:
        exports.append(target)
        time.sleep(0.2)  # the others arrive meanwhile and wait on the lock
        partial = target.with_name(target.name + ".partial")
        partial.write_bytes(b"onnx")
        os.replace(partial, target)

    monkeypatch.setattr(minilm_onnx, "_export_in_child", fake_export)
    results: list[Path] = []
    threads = [
        threading.Thread(target=lambda: results.append(minilm_onnx.prepare(folder)))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert len(exports) == 1
    assert results == [exports[0]] * 3 and exports[0].read_bytes() == b"onnx"
    assert [p.name for p in exports[0].parent.iterdir() if p.suffix == ".partial"] == []


@pytest.mark.slow
def test_a_failed_export_leaves_no_file_and_says_why(
    cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "weights"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"not a model")

    with pytest.raises(minilm_onnx.OnnxUnavailable, match="exporting all-MiniLM-L6-v2"):
        minilm_onnx.prepare(folder)  # the child process fails: no config.json

    assert [p.name for p in (cache / "models").iterdir() if not p.name.endswith(".lock")] == []


# OpenVINO's copy of the ONNX file


@pytest.fixture
def onnx_copy(tmp_path: Path) -> Path:
    """The machine's exported ONNX file, copied into a folder of its own."""
    source = minilm_onnx.prepare(packaged_model_dir())
    target = tmp_path / "models" / source.name
    target.parent.mkdir()
    shutil.copyfile(source, target)
    return target


class ReadLog:
    """Wraps an OpenVINO Core and records the files it reads."""

    def __init__(self) -> None:
        import openvino

        self.core = openvino.Core()
        self.read: list[str] = []

    def read_model(self, path: str) -> Any:
        self.read.append(Path(path).suffix)
        return self.core.read_model(path)


def test_openvino_writes_its_copy_once_and_reads_it_afterwards(onnx_copy: Path) -> None:
    first, second = ReadLog(), ReadLog()
    minilm_onnx._openvino_model(first, onnx_copy)
    written = sorted(p.suffix for p in onnx_copy.parent.iterdir() if p != onnx_copy)
    minilm_onnx._openvino_model(second, onnx_copy)

    assert first.read == [".onnx"] and second.read == [".xml"]
    assert written == [".bin", ".xml"]  # no partial file left behind


def test_processes_and_threads_writing_the_copy_at_once_leave_one_whole_copy(
    onnx_copy: Path,
) -> None:
    script = (
        "import sys, openvino; from pathlib import Path; from adk_memory import minilm_onnx\n"
        "minilm_onnx._openvino_model(openvino.Core(), Path(sys.argv[1]))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    children = [
        subprocess.Popen([sys.executable, "-c", script, str(onnx_copy)], env=env) for _ in range(2)
    ]
    threads = [
        threading.Thread(target=minilm_onnx._openvino_model, args=(ReadLog(), onnx_copy))
        for _ in range(2)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert [child.wait(120) for child in children] == [0, 0]

    assert sorted(p.suffix for p in onnx_copy.parent.iterdir() if p != onnx_copy) == [
        ".bin",
        ".xml",
    ]
    log = ReadLog()
    model = minilm_onnx._openvino_model(log, onnx_copy)
    assert log.read == [".xml"]
    compiled = log.core.compile_model(model, "CPU")
    ids = np.array([[101, 7592, 102]], dtype=np.int64)
    feeds = {"input_ids": ids, "attention_mask": np.ones_like(ids), "token_type_ids": 0 * ids}
    assert compiled.create_infer_request().infer(feeds)[0].shape == (1, 3, 384)


def test_a_damaged_openvino_copy_is_ignored_and_the_onnx_file_read(
    onnx_copy: Path, caplog: pytest.LogCaptureFixture
) -> None:
    minilm_onnx._openvino_model(ReadLog(), onnx_copy)
    copy = next(p for p in onnx_copy.parent.iterdir() if p.suffix == ".bin")
    copy.write_bytes(copy.read_bytes()[:1000])  # as a full disk or a stray edit would leave it

    log = ReadLog()
    with caplog.at_level("WARNING", logger="adk_memory.minilm_onnx"):
        model = minilm_onnx._openvino_model(log, onnx_copy)
    assert log.read == [".xml", ".onnx"]
    assert "Ignoring OpenVINO's copy" in caplog.text
    assert log.core.compile_model(model, "CPU") is not None


def test_a_cache_folder_it_cannot_write_still_runs_on_openvino(
    onnx_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import openvino

    def refused(model: Any, path: str, **options: Any) -> None:
        Path(path).write_text("<net")  # a partial graph, as a full disk leaves it
        raise RuntimeError(f"Can't open file {path}.bin for writing: Permission denied")

    monkeypatch.setattr(openvino, "save_model", refused)
    log = ReadLog()
    model = minilm_onnx._openvino_model(log, onnx_copy)

    assert log.read == [".onnx"] and list(onnx_copy.parent.iterdir()) == [onnx_copy]
    assert log.core.compile_model(model, "CPU") is not None


_EXIT_DURING_LOAD = """
import sys, time
from pathlib import Path
from adk_memory import embeddings, minilm_onnx

def slow_load(folder, engine):
    time.sleep(1.0)
    Path(sys.argv[1]).write_text("loaded")
    raise minilm_onnx.OnnxUnavailable("not needed here")

minilm_onnx.load = slow_load
embeddings.warm_up(None)
sys.exit(3)  # a command failing at once while the model loads beside it
"""


def test_the_interpreter_exit_waits_for_a_model_load_under_way(tmp_path: Path) -> None:
    """A native load cut by the interpreter's exit aborted the process (SIGABRT, exit 134,
    instead of the command's own code); the exit now lets the load end first."""
    marker = tmp_path / "loaded"
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_DURING_LOAD, str(marker)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "ADK_MEMORY_LOCAL_RUNTIME": "onnx"},
    )
    assert done.returncode == 3, done.stderr[-2000:]
    assert marker.read_text() == "loaded"  # the exit waited for the load's end
