"""Micro-batching of embeddings (issue 28): concurrent calls of one model share model calls.

The models are real (all-MiniLM-L6-v2 and multilingual-e5-small, offline); a recording subclass
of each notes every model call the batcher makes, and can hold a call or fail on a marked text.
Nothing here asserts a time: where a test needs callers in one call, it sets a batch size equal
to its callers and a long window, so the call starts the moment the last caller arrives.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import pytest

from adk_memory import AsyncClient
from adk_memory.embedding_batch import BatchingEmbedder, batched
from adk_memory.embeddings import (
    CheckedEmbedder,
    Embedder,
    HashEmbedder,
    LocalEmbedder,
    MultilingualE5Embedder,
    embedder_for,
)
from adk_memory.errors import FailedPrecondition, InvalidArgument, StoreUnavailable
from adk_memory.telemetry import TracingEmbedder

pytestmark = pytest.mark.usefixtures("offline")

POISON = "<the model cannot embed this>"
LONG = 30.0  # a window no passing test waits out: each of its calls fills its batch first


class Records:
    """Notes each model call (texts, query mode); holds calls while `gate` is clear."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[list[str], bool]] = []
        self.entered = threading.Event()
        self.gate = threading.Event()
        self.gate.set()
        self.failure: BaseException | None = None

    def _encode(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        self.calls.append((list(texts), query))
        self.entered.set()
        assert self.gate.wait(60)
        if self.failure is not None:
            raise self.failure
        if any(POISON in text for text in texts):
            raise ValueError("the model could not embed a text")
        return super()._encode(texts, query=query)  # type: ignore[misc, no-any-return]

    @property
    def embedded(self) -> list[str]:
        return [text for texts, _ in self.calls for text in texts]


class MiniLM(Records, LocalEmbedder):
    pass


class E5(Records, MultilingualE5Embedder):
    pass


Build = Callable[..., BatchingEmbedder]


@pytest.fixture
def batching() -> Iterator[Build]:
    """Builds `BatchingEmbedder`s, and ends their worker threads after the test."""
    built: list[BatchingEmbedder] = []

    def build(inner: Any, **options: Any) -> BatchingEmbedder:
        built.append(BatchingEmbedder(inner, **options))
        return built[-1]

    yield build
    for embedder in built:
        embedder.close()


def minilm(batching: Build, **options: Any) -> tuple[MiniLM, BatchingEmbedder]:
    inner = MiniLM()
    return inner, batching(inner, query_as_document=True, **options)


def facts(count: int, topic: str = "tea") -> list[str]:
    return [
        f"User {n} drinks {topic} at {n % 12} o'clock, " + "often " * (n % 7) for n in range(count)
    ]


def assert_same_vectors(
    got: Sequence[tuple[float, ...]], want: Sequence[tuple[float, ...]]
) -> None:
    """Equal up to float32 rounding: sentence-transformers pads a batch to its longest text."""
    assert len(got) == len(want)
    assert np.allclose(np.array(got), np.array(want), rtol=0, atol=1e-6)


async def one_by_one(texts: list[str], *, query: bool = False) -> list[tuple[float, ...]]:
    """The vectors of the plain, unbatched embedder, each text in a call of its own."""
    plain = LocalEmbedder()
    if query:
        return [await plain.embed_query(text) for text in texts]
    return [(await plain.embed_documents([text]))[0] for text in texts]


@pytest.mark.slow
async def test_sixteen_concurrent_callers_share_model_calls_and_get_one_by_one_vectors(
    batching: Build,
) -> None:
    inner, embedder = minilm(batching)
    texts = facts(16)
    vectors = await asyncio.gather(*(embedder.embed_documents([text]) for text in texts))
    assert len(inner.calls) < 16
    assert sorted(inner.embedded) == sorted(texts)  # each text embedded once
    assert_same_vectors([vector for [vector] in vectors], await one_by_one(texts))


@pytest.mark.slow
async def test_concurrent_queries_and_documents_of_a_symmetric_model_share_calls(
    batching: Build,
) -> None:
    inner, embedder = minilm(batching, max_batch=8, window=LONG)
    questions, documents = facts(4, "coffee"), facts(4, "water")
    results = await asyncio.gather(
        *(embedder.embed_query(text) for text in questions),
        *(embedder.embed_documents([text]) for text in documents),
    )
    assert [sorted(texts) for texts, _ in inner.calls] == [sorted(questions + documents)]
    assert_same_vectors(results[:4], await one_by_one(questions, query=True))
    assert_same_vectors([vector for [vector] in results[4:]], await one_by_one(documents))


@pytest.mark.slow
async def test_the_same_text_from_concurrent_callers_is_embedded_once(batching: Build) -> None:
    inner, embedder = minilm(batching)
    inner.gate.clear()  # the first model call waits: every caller finds the text in flight
    question = "Which tea does the user like?"
    together = asyncio.gather(
        *(embedder.embed_query(question) for _ in range(12)),
        embedder.embed_documents([question, question]),  # MiniLM: a query is a document
    )
    # The callers reached the batcher in the loop's next pass, before this thread's answer.
    assert await asyncio.to_thread(inner.entered.wait, 30)
    inner.gate.set()
    *asked, [twice, again] = await together
    assert inner.embedded == [question]
    assert len({*asked, twice, again}) == 1


@pytest.mark.slow
async def test_a_text_the_model_cannot_embed_fails_only_its_caller(batching: Build) -> None:
    inner, embedder = minilm(batching, max_batch=16, window=LONG)
    texts = facts(15)
    results = await asyncio.gather(
        *(embedder.embed_documents([text]) for text in texts[:7]),
        embedder.embed_documents([f"{POISON} tea"]),
        *(embedder.embed_documents([text]) for text in texts[7:]),
        return_exceptions=True,
    )
    assert len(inner.calls[0][0]) == 16  # the bad text was in the others' call
    assert isinstance(results[7], ValueError)
    good = results[:7] + results[8:]
    assert_same_vectors([vector for [vector] in good], await one_by_one(texts))  # type: ignore[misc]


async def test_a_model_that_cannot_run_fails_every_caller_without_splitting(
    batching: Build,
) -> None:
    inner, embedder = minilm(batching, max_batch=4, window=LONG)
    inner.failure = FailedPrecondition("The model is not installed.")
    results = await asyncio.gather(
        *(embedder.embed_documents([text]) for text in facts(4)), return_exceptions=True
    )
    assert all(result is inner.failure for result in results)
    assert len(inner.calls) == 1


@pytest.mark.slow
async def test_a_cancelled_caller_cancels_neither_the_call_nor_the_others(batching: Build) -> None:
    inner, embedder = minilm(batching, max_batch=3, window=LONG)
    inner.gate.clear()
    texts = facts(4)
    first, cancelled, third = (
        asyncio.ensure_future(embedder.embed_documents([text])) for text in texts[:3]
    )
    assert await asyncio.to_thread(inner.entered.wait, 60)  # the call of three has started
    queued = asyncio.ensure_future(embedder.embed_documents([texts[3]]))
    await asyncio.sleep(0)  # it is queued behind the running call
    cancelled.cancel()
    queued.cancel()
    inner.gate.set()
    [a], [c] = await asyncio.gather(first, third)
    assert cancelled.cancelled() and queued.cancelled()
    assert_same_vectors([a, c], await one_by_one([texts[0], texts[2]]))
    assert inner.calls == [(texts[:3], False)]  # the text nobody waits for was never embedded


@pytest.mark.slow
async def test_two_models_and_e5_queries_and_passages_never_share_a_call(batching: Build) -> None:
    small, small_batched = minilm(batching, max_batch=4, window=LONG)
    e5 = E5()
    e5_batched = batching(e5, query_as_document=False, max_batch=8, window=LONG)
    questions, passages = facts(4, "coffee"), facts(4, "juice")
    results = await asyncio.gather(
        *(small_batched.embed_documents([text]) for text in passages),
        *(e5_batched.embed_query(text) for text in questions),
        *(e5_batched.embed_documents([text]) for text in passages),
    )
    assert [sorted(texts) for texts, _ in small.calls] == [sorted(passages)]
    assert sorted((sorted(texts), query) for texts, query in e5.calls) == [
        (sorted(questions), True),
        (sorted(passages), False),
    ]
    plain = MultilingualE5Embedder()
    assert_same_vectors([vector for [vector] in results[:4]], await one_by_one(passages))
    assert_same_vectors(results[4:8], [await plain.embed_query(text) for text in questions])
    assert_same_vectors([vector for [vector] in results[8:]], await plain.embed_documents(passages))


@pytest.mark.slow
def test_callers_on_two_event_loops_in_two_threads_share_one_call(batching: Build) -> None:
    inner, embedder = minilm(batching, max_batch=2, window=LONG)
    texts = facts(2)
    got: dict[str, Any] = {}

    def caller(text: str) -> None:
        got[text] = asyncio.run(embedder.embed_documents([text]))

    threads = [threading.Thread(target=caller, args=(text,)) for text in texts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert [sorted(texts) for texts, _ in inner.calls] == [sorted(texts)]
    assert_same_vectors([got[text][0] for text in texts], asyncio.run(one_by_one(texts)))


# Wiring: the engine's embedders


async def test_every_client_of_a_process_shares_one_batcher_per_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ADK_MEMORY_EMBEDDING_BATCH_SIZE", raising=False)
    async with AsyncClient("memory://") as first, AsyncClient("memory://") as second:

        def engine_embedder(client: AsyncClient, model: str | None) -> Embedder:
            traced = client.engine.context.embedder(model)
            assert isinstance(traced, TracingEmbedder)
            checked = traced.inner  # every vector checked finite, behind the batcher
            assert isinstance(checked, CheckedEmbedder)
            return checked.inner

        default = engine_embedder(first, None)
        assert isinstance(default, BatchingEmbedder) and default.inner is embedder_for(None)
        assert engine_embedder(second, "all-MiniLM-L6-v2") is default
        assert batched(default) is default
        e5 = engine_embedder(first, "multilingual-e5-small")
        assert isinstance(e5, BatchingEmbedder) and not e5.query_as_document
        assert isinstance(engine_embedder(first, "hash-64"), HashEmbedder)
        monkeypatch.setenv("ADK_MEMORY_EMBEDDING_BATCH_SIZE", "0")
        assert engine_embedder(first, None) is embedder_for(None)
        monkeypatch.setenv("ADK_MEMORY_EMBEDDING_BATCH_SIZE", "lots")
        with pytest.raises(InvalidArgument, match="ADK_MEMORY_EMBEDDING_BATCH_SIZE"):
            engine_embedder(first, None)


class Unit(LocalEmbedder):
    """A model that needs no weights: every text gets the same unit vector."""

    def _encode(self, texts: list[str], *, query: bool) -> list[tuple[float, ...]]:
        return [(1.0,) + (0.0,) * 383 for _ in texts]


def embed_in_child(embedder: BatchingEmbedder, results: Connection) -> None:
    call = asyncio.wait_for(embedder.embed_documents(["after the fork"]), 30)
    results.send(len(asyncio.run(call)[0]))


def test_a_forked_child_embeds_with_a_worker_of_its_own(batching: Build) -> None:
    """A server that forks its workers after embedding (a warm-up): the parent's worker thread
    does not exist in the child, which must start its own instead of waiting for it forever."""
    embedder = batching(Unit(), query_as_document=True)
    assert len(asyncio.run(embedder.embed_documents(["before the fork"]))[0]) == 384
    forks = multiprocessing.get_context("fork")
    receiving, sending = forks.Pipe(duplex=False)
    with warnings.catch_warnings():  # Python 3.12+ warns about forking a threaded process
        warnings.simplefilter("ignore", DeprecationWarning)
        child = forks.Process(target=embed_in_child, args=(embedder, sending))
        child.start()
    sending.close()  # the child holds the only writing end: its death reads as end of file
    try:
        assert receiving.poll(60), "the forked child's embedding never finished"
        assert receiving.recv() == 384
    finally:
        child.join(10)
        child.kill()
    assert child.exitcode == 0


class Crash(BaseException):
    """Not an `Exception`: escapes the per-text handling, as a bug in the worker would."""


@pytest.mark.slow
async def test_a_worker_that_dies_fails_its_callers_and_the_next_call_gets_another(
    batching: Build, caplog: pytest.LogCaptureFixture
) -> None:
    inner = MiniLM()
    inner.failure = Crash()
    embedder = batching(inner, query_as_document=True, max_batch=2, window=LONG)
    results = await asyncio.gather(
        *(embedder.embed_documents([text]) for text in facts(2)), return_exceptions=True
    )
    assert [type(result) for result in results] == [StoreUnavailable, StoreUnavailable]
    assert "The embedding worker for all-MiniLM-L6-v2 failed" in caplog.text
    inner.failure = None
    # Two texts fill the batch, so the new worker starts at once instead of waiting out LONG.
    again = await embedder.embed_documents(["once more", "and again"])
    assert [len(vector) for vector in again] == [384, 384]
