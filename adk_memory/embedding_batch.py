"""Micro-batching of embeddings: concurrent calls to one local model share one model call.

A call of a local model costs mostly a fixed amount (all-MiniLM-L6-v2: about 12 ms for one text,
2 ms a text in a batch of 64), so the texts that concurrent callers send are worth embedding
together. `BatchingEmbedder` wraps one embedder that runs on this machine's CPU and gathers the
texts of every `embed_query` / `embed_documents` call made meanwhile, from any thread and any
event loop of the process (the blocking `Client`'s loop thread, the REST server's loop, ADK's
loops), into one call of the model:

* A worker thread of its own (started by the first text, kept for the process as the model's
  weights are; `close` ends it) runs the model, one call at a time. An idle worker starts a call at
  once, so a lone caller waits for nothing; the texts that arrive while a call runs form the
  next one, up to `max_batch` texts (`ADK_MEMORY_EMBEDDING_BATCH_SIZE`, 64). A `window`
  (`ADK_MEMORY_EMBEDDING_BATCH_WINDOW_MS`, 0) makes an idle worker wait that long for company.
* Texts in flight together are embedded once: the same query from several turns, or a text the
  running call already holds, shares one vector (issue 29).
* A model call holds one model, and one mode where the model embeds queries and documents
  differently (e5's "query: " and "passage: " prefixes); `query_as_document` says which.
* A model call that raises is split in halves until each failing text is alone, so a text the
  model cannot embed fails only the callers that sent it. `FailedPrecondition` (the model is not
  installed or cannot load) blames no text and fails every caller of the call at once.
* A cancelled caller stops waiting; the call goes on for the others, and the texts that nobody
  else waits for are dropped if their call has not started.

`batched` keeps one `BatchingEmbedder` per embedder, and `embeddings.embedder_for` one embedder
per model, so a model has one batcher per process; the engine takes every embedder through
`batched` (`EngineContext.embedder`). The embedders that run on this machine are batched
(`LocalEmbedder`, `MultilingualE5Embedder`); `GeminiEmbedder` is not (its client belongs to the
caller's event loop, and its requests overlap on the network instead of queuing for the CPU),
nor is `HashEmbedder`, the tests' embedder, which costs microseconds a text. A query answered
by the query cache never waits for a batch.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Protocol

from adk_memory import telemetry
from adk_memory.embeddings import (
    Embedder,
    EmbedderWrapper,
    LocalEmbedder,
    _CachingEmbedder,
    _InProcessModel,
)
from adk_memory.errors import FailedPrecondition, InvalidArgument, StoreUnavailable
from adk_memory.settings import (
    DEFAULT_EMBEDDING_BATCH_SIZE,
    embedding_batch_size,
    embedding_batch_window,
)

__all__ = ["BatchingEmbedder", "batched"]

logger = logging.getLogger(__name__)

Vector = tuple[float, ...]


class _Batchable(Embedder, Protocol):
    """An embedder whose model runs in this process (`embeddings._InProcessModel`)."""

    def _encode(self, texts: list[str], *, query: bool) -> list[Vector]: ...

    async def _embed(self, texts: list[str], *, query: bool) -> list[Vector]: ...


@dataclass(frozen=True, slots=True)
class _Batch:
    """One model call, as the spans of its callers report it."""

    texts: int
    callers: int


@dataclass(eq=False, slots=True)
class _Text:
    """One distinct text of one mode, and the calls that wait for its vector."""

    text: str
    query: bool
    since: float
    """When it was queued (`time.monotonic`), for the window."""
    waiters: list[_Call] = field(default_factory=list)
    vector: Vector | None = None
    error: BaseException | None = None
    batch: _Batch | None = None

    @property
    def key(self) -> tuple[bool, str]:
        return (self.query, self.text)


@dataclass(eq=False, slots=True)
class _Call:
    """One `embed_*` call: its texts in order and the future its caller awaits on its own loop."""

    loop: asyncio.AbstractEventLoop
    waiter: asyncio.Future[list[Vector]]
    texts: list[_Text] = field(default_factory=list)
    remaining: int = 0
    """Distinct texts not yet done; guarded by the batcher's lock."""

    def resolve(self) -> None:
        """Hands the caller its vectors or the first error (on its loop; it may have left)."""
        if self.waiter.done():
            return
        vectors: list[Vector] = []
        for text in self.texts:
            if text.vector is None:
                lost = StoreUnavailable("The embedding worker lost a text's vector; retry.")
                self.waiter.set_exception(text.error or lost)
                return
            vectors.append(text.vector)
        self.waiter.set_result(vectors)


class BatchingEmbedder(EmbedderWrapper, _CachingEmbedder):
    """An `Embedder` that embeds the texts of concurrent calls to one model in one model call.

    Model, dimension and any other attribute are the wrapped embedder's (`EmbedderWrapper`).
    Input checks and the query cache are `_CachingEmbedder`'s, as for every embedder; what they
    let through goes to the worker thread, which calls the wrapped embedder's `_encode` with the
    texts of every caller waiting (see the module docstring). A call of more than `max_batch`
    texts is a batch already: it goes to the wrapped embedder directly.

    The vectors are the wrapped embedder's, up to the float rounding of a different batch
    (sentence-transformers pads a batch to its longest text: components differ by < 1e-6).
    """

    inner: _Batchable

    def __init__(
        self,
        inner: _Batchable,
        *,
        query_as_document: bool,
        max_batch: int = DEFAULT_EMBEDDING_BATCH_SIZE,
        window: float = 0.0,
    ) -> None:
        """Wraps `inner`; no thread starts before the first text.

        Args:
            inner: The embedder whose `_embed` makes the model calls.
            query_as_document: Whether `inner` embeds a query as it embeds a document; then
                queries and documents share model calls.
            max_batch: At most this many texts go into one model call.
            window: Seconds an idle worker waits for more texts before it starts a call.

        Raises:
            InvalidArgument: `max_batch` is below 1 or `window` is negative.
        """
        if max_batch < 1 or window < 0:
            raise InvalidArgument(
                f"An embedding batch needs max_batch >= 1 and window >= 0, got {max_batch} "
                f"and {window}.",
                field="max_batch" if max_batch < 1 else "window",
            )
        super().__init__(inner)
        self.query_as_document = query_as_document
        self.max_batch = max_batch
        self.window = window
        self._forget_work()
        _alive.add(self)

    def _forget_work(self) -> None:
        """Starts with no texts, no worker and new locks (also in a forked child)."""
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._queued: dict[tuple[bool, str], _Text] = {}
        self._running: dict[tuple[bool, str], _Text] = {}
        self._worker: threading.Thread | None = None
        self._closing = False

    async def _embed(self, texts: list[str], *, query: bool) -> list[Vector]:
        if len(texts) > self.max_batch:
            return await self.inner._embed(texts, query=query)
        call = self._submit(texts, query=query and not self.query_as_document)
        try:
            vectors = await call.waiter
        except asyncio.CancelledError:
            self._abandon(call)
            raise
        batch = call.texts[0].batch
        if batch is not None:
            telemetry.record_embedding_batch(texts=batch.texts, callers=batch.callers)
        return vectors

    def _submit(self, texts: list[str], *, query: bool) -> _Call:
        """Queues the texts not already queued or running, and wakes (or starts) the worker."""
        loop = asyncio.get_running_loop()
        call = _Call(loop, loop.create_future())
        now = time.monotonic()
        with self._lock:
            for text in texts:
                key = (query, text)
                item = self._queued.get(key) or self._running.get(key)
                if item is None:
                    item = self._queued[key] = _Text(text, query, now)
                # A text repeated in this call finds this call last: nothing else ran meanwhile.
                if not item.waiters or item.waiters[-1] is not call:
                    item.waiters.append(call)
                    call.remaining += 1
                call.texts.append(item)
            if self._worker is None:
                self._closing = False
                self._worker = threading.Thread(
                    target=self._work, name=f"adk-memory-embed-{self.model}", daemon=True
                )
                self._worker.start()
            self._wake.notify()
        return call

    def close(self) -> None:
        """Ends the worker thread once the texts queued are embedded (a later text starts one).

        The batchers `batched` hands out serve the whole process and are never closed; close
        one you built yourself when you are done with it.
        """
        with self._lock:
            worker, self._closing = self._worker, True
            self._wake.notify()
        if worker is not None and worker is not threading.current_thread():
            worker.join()

    def _abandon(self, call: _Call) -> None:
        """Stops `call` waiting; its queued texts nobody else waits for are not embedded."""
        with self._lock:
            for item in call.texts:
                if call in item.waiters:
                    item.waiters.remove(call)
                    if not item.waiters and self._queued.get(item.key) is item:
                        del self._queued[item.key]

    # The worker thread

    def _work(self) -> None:
        try:
            while groups := self._take():
                self._run(groups)
        except BaseException as exc:  # a bug here must not leave callers waiting forever
            logger.exception("The embedding worker for %s failed", self.model)
            self._fail_everything(exc)

    def _take(self) -> list[list[_Text]]:
        """The next texts, oldest first, one group per mode (a model call each).

        [] once closed with nothing queued.
        """
        with self._lock:
            while True:
                now = time.monotonic()
                if not self._queued:
                    if self._closing:
                        self._worker = None
                        return []
                    self._wake.wait()
                    continue
                start_at = next(iter(self._queued.values())).since + self.window
                if len(self._queued) < self.max_batch and now < start_at:
                    self._wake.wait(start_at - now)
                    continue
                taken = list(itertools.islice(self._queued.values(), self.max_batch))
                for item in taken:
                    del self._queued[item.key]
                    self._running[item.key] = item
                groups = [[item for item in taken if item.query is q] for q in (False, True)]
                groups = [group for group in groups if group]
                for group in groups:
                    callers = len({id(call) for item in group for call in item.waiters})
                    batch = _Batch(len(group), callers)
                    for item in group:
                        item.batch = batch
                return groups

    def _run(self, groups: list[list[_Text]]) -> None:
        """Embeds each group in a model call, then hands every finished caller its result."""
        started = time.perf_counter()
        for group in groups:
            self._embed_group(group)
        taken = [item for group in groups for item in group]
        logger.debug(
            "Embedded %d texts with %s in %.1f ms",
            len(taken),
            self.model,
            (time.perf_counter() - started) * 1000,
        )
        self._finish(taken)

    def _embed_group(self, group: list[_Text]) -> None:
        """Sets each text's vector or error; a failing call is split until each culprit is alone.

        The model runs on this worker thread (`_encode`), not on a pool thread it would wait for.
        """
        parts = [group]
        while parts:
            part = parts.pop()
            try:
                vectors = self.inner._encode([item.text for item in part], query=group[0].query)
                if len(vectors) != len(part):
                    raise StoreUnavailable(
                        f"The embedding model {self.model!r} returned {len(vectors)} vectors for "
                        f"{len(part)} texts; retry."
                    )
            except FailedPrecondition as exc:  # the model cannot run: no text is to blame
                for item in part:
                    item.error = exc
            except Exception as exc:
                if len(part) == 1:
                    part[0].error = exc
                else:
                    half = len(part) // 2
                    parts += [part[half:], part[:half]]
            else:
                for item, vector in zip(part, vectors, strict=True):
                    item.vector = vector

    def _finish(self, taken: list[_Text]) -> None:
        finished: list[_Call] = []
        with self._lock:
            for item in taken:
                del self._running[item.key]
                for call in item.waiters:
                    call.remaining -= 1
                    if call.remaining == 0:
                        finished.append(call)
        for call in finished:
            try:
                call.loop.call_soon_threadsafe(call.resolve)
            except RuntimeError:  # the caller's event loop is closed: nobody waits any more
                pass

    def _fail_everything(self, exc: BaseException) -> None:
        error = StoreUnavailable(
            f"The embedding worker for {self.model!r} failed ({type(exc).__name__}); retry."
        )
        with self._lock:
            items = [*self._running.values(), *self._queued.values()]
            self._queued.clear()
            self._running = {item.key: item for item in items}
            self._worker = None
        for item in items:
            if item.vector is None:
                item.error = error
        self._finish(items)


_alive: weakref.WeakSet[BatchingEmbedder] = weakref.WeakSet()
_batchers: dict[Embedder, BatchingEmbedder] = {}
_batchers_lock = threading.Lock()


def batched(embedder: Embedder) -> Embedder:
    """`embedder` behind this process's `BatchingEmbedder` for it, or itself if not batched.

    The embedders whose model runs in this process (`LocalEmbedder`, `MultilingualE5Embedder`:
    `embeddings._InProcessModel`) are batched, unless `ADK_MEMORY_EMBEDDING_BATCH_SIZE` is 0;
    queries share calls with documents for a `LocalEmbedder` only (its `_encode` ignores
    `query`). Batch size and window are read when an
    embedder's batcher is built, at its first use.

    A `BatchingEmbedder` is returned as it is.

    Raises:
        InvalidArgument: An `ADK_MEMORY_EMBEDDING_BATCH_*` variable is malformed.
    """
    if not isinstance(embedder, _InProcessModel):
        return embedder
    max_batch = embedding_batch_size()
    if max_batch == 0:
        return embedder
    with _batchers_lock:
        found = _batchers.get(embedder)
        if found is None:
            found = _batchers[embedder] = BatchingEmbedder(
                embedder,
                query_as_document=isinstance(embedder, LocalEmbedder),
                max_batch=max_batch,
                window=embedding_batch_window(),
            )
        return found


def _forget_work_in_child() -> None:
    """A forked child has none of the parent's threads, and a lock may have been held mid-fork."""
    global _batchers_lock
    _batchers_lock = threading.Lock()
    for embedder in list(_alive):
        embedder._forget_work()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_work_in_child)
