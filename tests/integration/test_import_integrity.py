"""Issue 27 (cases 1, 4, 9, 10), from the attacker's side, on every backend.

1. One import line with a vector no store can hold (NaN, ±inf, 1e300) must not brick the bank
   for every user; no write path (import, re-embedding, an embedder returning NaN, a caller of
   the store) stores such a vector. 4. An import line cannot point one user's ingest stream at
   another user's memories. 9. An edited export is refused (or re-embedded on request), never
   imported with its old vectors. 10. A failed import into a new bank leaves nothing behind; a
   failed merge names exactly the lines it wrote.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from typer.testing import CliRunner

from adk_memory import AlreadyExists, AsyncClient, FailedPrecondition, InvalidArgument
from adk_memory.cli import app
from adk_memory.embeddings import HashEmbedder
from adk_memory.engine.ingest import stream_key
from adk_memory.engine.reembed import reembed
from adk_memory.scope import scope_key
from adk_memory.store import ScanQuery, WriteBatch, set_aside_batches
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.transfer import export_bank, import_bank, vector_digest, vector_to_text

ALICE = {"user_id": "alice"}
BOB = {"user_id": "bob"}
MODEL = "hash-64"
BAD_VALUES = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf"), "1e300": 1e300}


@pytest.fixture
def uri(store_uri: str) -> str:
    """The store; `memory://` is named, so that a second client (a "restart") finds it."""
    return f"memory://imports-{uuid.uuid4().hex[:8]}" if store_uri == "memory://" else store_uri


@pytest.fixture
def model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel(
        consolidate=lambda request: {"actions": [{"fact_index": 0, "action": "CREATE"}]}
    )


@pytest.fixture
async def client(uri: str, model: ScriptedMemoryModel) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(
        uri, embedding_model=MODEL, generation_model=model, run_scheduler=False
    ) as made:
        yield made


@pytest.fixture
async def bank(client: AsyncClient) -> str:
    """A bank where alice and bob each have two memories."""
    name = str((await client.memory_banks.create(memory_bank_id=f"b{uuid.uuid4().hex[:8]}")).name)
    memories = client.memory_banks.memories
    for scope, facts in (
        (ALICE, ("I like green tea.", "I live in Lisbon.")),
        (BOB, ("I play the cello.", "I shop on Fridays.")),
    ):
        for fact in facts:
            await memories.create(name=name, fact=fact, scope=scope)
    return name


def bank_id(name: str) -> str:
    return name.rsplit("/", 1)[1]


async def exported(client: AsyncClient, name: str) -> list[dict[str, Any]]:
    buffer = io.StringIO()
    await export_bank(client.engine, bank_id(name), buffer.write)
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


def dumped(lines: list[dict[str, Any]]) -> list[str]:
    return [json.dumps(line) for line in lines]


def with_counts(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines with the `end` line's counts made to match (what a careful attacker sends)."""
    kinds = [line["kind"] for line in lines]
    end = next(line for line in lines if line["kind"] == "end")
    end.update(
        memories=kinds.count("memory"),
        revisions=kinds.count("revision"),
        documents=kinds.count("document"),
    )
    return lines


def forged_memory(
    template: dict[str, Any], memory_id: str, scope: dict[str, str], fact: str, vector: list[float]
) -> dict[str, Any]:
    """A memory line with a correct scope digest and vector digest: every check but the values'."""
    return {
        **template,
        "memory_id": memory_id,
        "scope": scope,
        "scope_key": scope_key(scope),
        "fact": fact,
        "embedding_f64": vector_to_text(tuple(vector)),
        "vector_digest": vector_digest(MODEL, fact, tuple(vector)),
    }


async def facts_of(client: AsyncClient, name: str, scope: dict[str, str]) -> list[str]:
    pager = await client.memory_banks.memories.retrieve(name=name, scope=scope)
    return sorted([hit.memory.fact async for hit in pager if hit.memory and hit.memory.fact])


async def everyone_reads_and_writes(client: AsyncClient, name: str) -> None:
    """Alice and bob each write, search by similarity and list their own memories."""
    memories = client.memory_banks.memories
    for scope, fact in ((ALICE, "I drink oolong now."), (BOB, "I walk to work.")):
        await memories.create(name=name, fact=fact, scope=scope)
        found = await memories.retrieve(
            name=name, scope=scope, similarity_search_params={"search_query": fact, "top_k": 10}
        )
        assert found.page and found.page[0].memory.fact == fact
        assert all(np.isfinite(hit.distance) for hit in found.page)
        assert fact in await facts_of(client, name, scope)


# Case 1: non-finite vectors


@pytest.mark.parametrize("value", list(BAD_VALUES), ids=list(BAD_VALUES))
async def test_a_vector_no_store_can_hold_is_refused_and_the_bank_serves_everyone(
    client: AsyncClient, bank: str, uri: str, value: str
) -> None:
    """A merged line in bob's scope whose vector holds NaN, ±inf or 1e300 (with a digest that
    matches, as an attacker computes it) is refused naming its line, before anything is
    written or journaled; every user still reads and writes, also after a restart."""
    lines = await exported(client, bank)
    template = next(line for line in lines if line["kind"] == "memory")
    vector = [0.0] * 64
    vector[7] = BAD_VALUES[value]
    forged = forged_memory(template, "poison", BOB, "I like jazz.", vector)
    crafted = with_counts([*lines[:-1], forged, lines[-1]])
    with pytest.raises(InvalidArgument, match=rf"line {len(lines)}: embedding_f64 holds"):
        await import_bank(client.engine, dumped(crafted), merge=True)
    store = client.engine.store
    assert await store.get_memories(bank_id(bank), ["poison"], datetime.now(UTC)) == []
    assert await set_aside_batches(store, bank_id(bank)) == []  # nothing was journaled
    await everyone_reads_and_writes(client, bank)
    async with AsyncClient(uri, embedding_model=MODEL, run_scheduler=False) as restarted:
        await everyone_reads_and_writes(restarted, bank)
    # Into a new bank: refused the same way, and the bank is gone.
    with pytest.raises(InvalidArgument, match="was removed"):
        await import_bank(client.engine, dumped(crafted), bank_id="copy")
    assert await store.get_bank("copy") is None


async def test_the_store_refuses_a_non_finite_vector_from_any_caller(
    client: AsyncClient, bank: str
) -> None:
    """A caller of the store itself (not the engine) cannot write NaN, inf or a float32
    overflow either: `apply` refuses the batch, naming the memory, and writes none of it."""
    store = client.engine.store
    now = datetime.now(UTC)
    [record] = await store.get_memories(
        bank_id(bank), [(await store.scan(bank_id(bank), ScanQuery(now)))[0].memory_id], now
    )
    healthy = replace(record, memory_id="healthy")
    for value in BAD_VALUES.values():
        sick = replace(record, memory_id="sick", embedding=(value, *record.embedding[1:]))
        with pytest.raises(InvalidArgument, match="'sick' has an embedding holding"):
            await store.apply(bank_id(bank), WriteBatch(upserts=(healthy, sick)))
    assert await store.get_memories(bank_id(bank), ["healthy", "sick"], now) == []
    assert await set_aside_batches(store, bank_id(bank)) == []
    await everyone_reads_and_writes(client, bank)


def poison_embedder(monkeypatch: pytest.MonkeyPatch, marker: str) -> None:
    """The test embedder returns NaN for a text containing `marker` (a custom model gone bad)."""
    original = HashEmbedder._embed

    async def embed(self: HashEmbedder, texts: list[str], *, query: bool) -> Any:
        vectors = await original(self, texts, query=query)
        return [
            tuple(float("nan") for _ in vector) if marker in text else vector
            for text, vector in zip(texts, vectors, strict=True)
        ]

    monkeypatch.setattr(HashEmbedder, "_embed", embed)


async def test_no_write_path_stores_a_vector_an_embedder_botched(
    client: AsyncClient, bank: str, model: ScriptedMemoryModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An embedder returning NaN for some text: create, update, generate, an import that embeds
    and a re-embedding each fail with `InvalidArgument` naming the model, and change nothing;
    a query it botches is refused too. Every user goes on reading and writing."""
    poison_embedder(monkeypatch, "poison")
    memories = client.memory_banks.memories
    lines = await exported(client, bank)
    before = {scope["user_id"]: await facts_of(client, bank, scope) for scope in (ALICE, BOB)}
    botched = f"The embedding model '{MODEL}' returned a vector holding nan"
    with pytest.raises(InvalidArgument, match=botched):
        await memories.create(name=bank, fact="poison", scope=BOB)
    name = next(h.memory.name for h in (await memories.retrieve(name=bank, scope=BOB)).page)
    with pytest.raises(InvalidArgument, match=botched):
        await memories.update(name=name, fact="poison, updated")
    model.extractions.append(
        {"memories": [{"fact": "poison fact", "topics": ["USER_PREFERENCES"]}]}
    )
    with pytest.raises(InvalidArgument, match=botched):
        await memories.generate(
            name=bank,
            scope=BOB,
            direct_contents_source={
                "events": [{"content": {"role": "user", "parts": [{"text": "poison"}]}}]
            },
        )
    vector_fields = ("embedding_f64", "vector_digest")
    without_vectors = [
        {key: value for key, value in line.items() if key not in vector_fields} for line in lines
    ]
    memory = next(line for line in without_vectors if line["kind"] == "memory")
    memory["fact"] = "poison in a file"
    with pytest.raises(InvalidArgument, match=botched):
        await import_bank(client.engine, dumped(without_vectors), bank_id="embedded")
    assert await client.engine.store.get_bank("embedded") is None
    with pytest.raises(InvalidArgument, match="returned a vector holding nan"):
        await memories.retrieve(
            name=bank, scope=BOB, similarity_search_params={"search_query": "poison"}
        )
    assert {s["user_id"]: await facts_of(client, bank, s) for s in (ALICE, BOB)} == before
    # Re-embedding into another model whose vectors are botched for one fact stops before any
    # switch: the bank keeps its model and its vectors.
    await memories.create(name=bank, fact="a quiet fact", scope=ALICE)
    poison_embedder(monkeypatch, "quiet")
    with pytest.raises(InvalidArgument, match="returned a vector holding nan"):
        await reembed(client.engine, bank_id(bank), "hash-32")
    record = await client.engine.store.get_bank(bank_id(bank))
    assert record is not None and record.embedding_model == MODEL
    await everyone_reads_and_writes(client, bank)


# Case 4: stream keys


async def test_an_import_cannot_point_one_users_stream_at_another_users_memories(
    client: AsyncClient, bank: str, model: ScriptedMemoryModel
) -> None:
    """A document line holding alice's scope at bob's stream key is refused (the key is derived
    from the line's scope and stream id); bob's later conversation becomes bob's memories."""
    banks = client.memory_banks
    await banks.ingest_events(
        name=bank,
        scope=ALICE,
        stream_id="chat",
        direct_contents_source={
            "events": [{"content": {"role": "user", "parts": [{"text": "I like jazz."}]}}]
        },
        generation_trigger_config={"generation_rule": {"event_count": 50}},
    )
    lines = await exported(client, bank)
    stream = next(line for line in lines if line["kind"] == "document")
    assert stream["key"] == stream_key(ALICE, "chat")
    stream["key"] = stream_key(BOB, "chat")  # alice's scope, bob's key
    for target in ({"merge": True}, {"bank_id": "copy"}):
        with pytest.raises(InvalidArgument, match=rf"line {lines.index(stream) + 1}: key is not"):
            await import_bank(client.engine, dumped(lines), **target)
    assert await client.engine.store.get_bank("copy") is None
    assert (
        await client.engine.store.get_document(bank_id(bank), "stream", stream_key(BOB, "chat"))
        is None
    )
    model.extractions.append(
        {"memories": [{"fact": "My card PIN is 4921.", "topics": ["USER_PERSONAL_INFO"]}]}
    )
    await banks.ingest_events(
        name=bank,
        scope=BOB,
        stream_id="chat",
        direct_contents_source={
            "events": [{"content": {"role": "user", "parts": [{"text": "my card PIN is 4921"}]}}]
        },
        config={"force_flush": True, "wait_for_completion": True},
    )
    assert "My card PIN is 4921." in await facts_of(client, bank, BOB)
    assert "My card PIN is 4921." not in await facts_of(client, bank, ALICE)


# Case 9: a vector that does not belong to its fact


async def test_an_edited_fact_is_refused_or_re_embedded_on_request(
    client: AsyncClient, bank: str
) -> None:
    """A fact changed in the file keeps its old vector and digest: the import is refused naming
    the line; with `reembed` its vector is computed from the new fact (and only its)."""
    lines = await exported(client, bank)
    edited = next(line for line in lines if line.get("fact") == "I like green tea.")
    edited["fact"] = "I like black coffee."
    number = lines.index(edited) + 1
    with pytest.raises(InvalidArgument, match=rf"line {number}: the vector does not belong"):
        await import_bank(client.engine, dumped(lines), bank_id="edited")
    assert await client.engine.store.get_bank("edited") is None
    summary = await import_bank(client.engine, dumped(lines), bank_id="edited", reembed=True)
    assert summary.reembedded == 1
    [stored] = await client.engine.store.get_memories(
        "edited", [edited["memory_id"]], datetime.now(UTC)
    )
    [expected] = await HashEmbedder(64).embed_documents(["I like black coffee."])
    assert np.allclose(stored.embedding, expected)
    hits = await client.memory_banks.memories.retrieve(
        name="reasoningEngines/edited",
        scope=ALICE,
        similarity_search_params={"search_query": "I like black coffee.", "top_k": 1},
    )
    assert hits.page[0].memory.fact == "I like black coffee."


async def test_vectors_moved_between_lines_or_undigested_are_refused(
    client: AsyncClient, bank: str
) -> None:
    """Two lines' vectors swapped (digests kept) or swapped with their digests (which then
    cover another fact), and a version 1 export (no digests): refused without `reembed`."""
    lines = await exported(client, bank)
    first, second = (line for line in lines if line["kind"] == "memory" and line["scope"] == BOB)
    swapped = json.loads(json.dumps(lines))
    a, b = (line for line in swapped if line["kind"] == "memory" and line["scope"] == BOB)
    a["embedding_f64"], b["embedding_f64"] = second["embedding_f64"], first["embedding_f64"]
    with_digests = json.loads(json.dumps(swapped))
    c, d = (line for line in with_digests if line["kind"] == "memory" and line["scope"] == BOB)
    c["vector_digest"], d["vector_digest"] = second["vector_digest"], first["vector_digest"]
    version_1 = json.loads(json.dumps(lines))
    version_1[0]["version"] = 1
    for line in version_1:
        line.pop("vector_digest", None)
    for case, file in (("swapped", swapped), ("with digests", with_digests), ("v1", version_1)):
        with pytest.raises(InvalidArgument, match="does not belong to the fact"):
            await import_bank(client.engine, dumped(file), bank_id="moved")
        assert await client.engine.store.get_bank("moved") is None, case
    summary = await import_bank(client.engine, dumped(version_1), bank_id="moved", reembed=True)
    assert summary.reembedded == summary.memories == 4


# Case 10: all or nothing


async def test_a_failed_import_into_a_new_bank_leaves_nothing_behind(
    client: AsyncClient, bank: str
) -> None:
    """Batches already written when a later line fails (batches of one), a file cut short,
    altered `end` counts: the import fails, the bank it created is gone, and the same import of
    the whole file then succeeds (no `AlreadyExists`)."""
    lines = dumped(await exported(client, bank))
    late_failure = [*lines[:-2], "{not json", lines[-1]]
    altered_end = [
        *lines[:-1],
        json.dumps({"kind": "end", "memories": 1, "revisions": 0, "documents": 0}),
    ]
    for case, file in (("late", late_failure), ("cut", lines[:-1]), ("end", altered_end)):
        with pytest.raises(InvalidArgument, match="was removed") as caught:
            await import_bank(client.engine, file, bank_id="fresh", batch_size=1)
        assert "Nothing was imported" in str(caught.value), case
        assert await client.engine.store.get_bank("fresh") is None, case
    summary = await import_bank(client.engine, lines, bank_id="fresh", batch_size=1)
    assert summary.memories == 4
    assert await facts_of(client, "reasoningEngines/fresh", BOB) == await facts_of(
        client, bank, BOB
    )


async def test_a_failed_merge_names_exactly_the_lines_it_wrote(
    client: AsyncClient, bank: str
) -> None:
    """A merge (batches of two records) failing at a line: the message names the lines
    written, those lines' memories are there, and no later line's is."""
    lines = await exported(client, bank)
    await import_bank(client.engine, dumped(lines), bank_id="target")
    await client.memory_banks.memories.create(  # the target's own memory must survive
        name="reasoningEngines/target", fact="I was here first.", scope=ALICE
    )
    renamed = json.loads(json.dumps(lines))
    for line in renamed:  # new ids, so what the merge wrote is visible
        if line["kind"] in ("memory", "revision"):
            line["memory_id"] = "m-" + line["memory_id"]
    records = [i for i, line in enumerate(renamed) if line["kind"] in ("memory", "revision")]
    bad = records[5]  # after two full batches of two records
    renamed[bad]["create_time"] = "yesterday"
    with pytest.raises(InvalidArgument, match=rf"line {bad + 1}\.create_time") as caught:
        await import_bank(
            client.engine, dumped(renamed), bank_id="target", merge=True, batch_size=2
        )
    written = [number + 1 for number in records[:4]]
    report = f"Lines {written[0]}-{written[-1]} were written into bank 'target'; no other line"
    assert report in str(caught.value)
    now = datetime.now(UTC)
    store = client.engine.store
    memory_lines = {
        i: line["memory_id"] for i, line in enumerate(renamed) if line["kind"] == "memory"
    }
    for index, memory_id in memory_lines.items():
        stored = await store.get_memories("target", [memory_id], now)
        assert bool(stored) == (index + 1 in written), (index, memory_id)
    assert "I was here first." in await facts_of(client, "reasoningEngines/target", ALICE)


def test_the_import_command_removes_the_bank_of_a_failed_import(
    tmp_path: Path, uri: str, hash_embeddings: None
) -> None:
    """The issue's case through the CLI: a truncated file prints "line 3 is not JSON", exits 1,
    says the bank was removed, and the next import of a whole file succeeds. An edited fact is
    refused pointing at --reembed, which then embeds it."""

    async def prepare() -> list[str]:
        async with AsyncClient(uri, embedding_model=MODEL, run_scheduler=False) as source:
            made = await source.memory_banks.create(memory_bank_id="cli-source")
            await source.memory_banks.memories.create(
                name=made.name, fact="I like tea.", scope=ALICE
            )
            return dumped(await exported(source, made.name))

    lines = asyncio.run(prepare())
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    whole.write_text("\n".join(lines) + "\n")
    cut.write_text("\n".join(lines)[: len(lines[0]) + len(lines[1]) + 20])
    runner = CliRunner()
    failed = runner.invoke(app, ["import", str(cut), "--uri", uri, "--bank", "cli-copy"])
    assert failed.exit_code == 1
    assert "line 3 is not JSON" in failed.stderr and "was removed" in failed.stderr
    missing = runner.invoke(app, ["banks", "get", "-b", "cli-copy", "--uri", uri])
    assert missing.exit_code == 1 and "NOT_FOUND" in missing.stderr
    again = runner.invoke(app, ["import", str(whole), "--uri", uri, "--bank", "cli-copy"])
    assert again.exit_code == 0, again.stderr
    edited = tmp_path / "edited.jsonl"
    edited.write_text(whole.read_text().replace("I like tea.", "I like coffee."))
    refused = runner.invoke(app, ["import", str(edited), "--uri", uri, "--bank", "cli-edit"])
    assert refused.exit_code == 1 and "--reembed" in refused.stderr
    taken = runner.invoke(
        app, ["import", str(edited), "--uri", uri, "--bank", "cli-edit", "--reembed", "--json"]
    )
    assert taken.exit_code == 0, taken.stderr
    assert json.loads(taken.stdout)["reembedded"] == 1


@pytest.fixture
def hash_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ADK_MEMORY_EMBEDDING_MODEL", MODEL)


# Crafted files: every field of every line kind

PROFILE_CONFIG = {
    "similarity_search_config": {"embedding_model": MODEL},
    "ttl_config": {"memory_revision_default_ttl": "864000s"},
    "structured_memory_configs": [
        {
            "scope_keys": ["user_id"],
            "schema_configs": [
                {
                    "id": "user-profile",
                    "schema": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
                }
            ],
        }
    ],
}
HOSTILE: list[Any] = [
    None,
    True,
    0,
    -1,
    2**70,
    1.5,
    float("nan"),
    "",
    "x" * 300,
    "\ud800",
    "../x",
    "a,b",
    "*",
    "2024-01-01T00:00:00",
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59+00:00",
    "9999-12-31T23:59:59.999999+00:00",
    {},
    {"user_id": "mallory"},
    [],
    [None],
    [{"managed": "NOT_A_TOPIC"}],
    {"k": {"double_value": "nan"}},
]
"""Values each field is set to in turn (and each field is removed)."""


async def rich_export() -> list[dict[str, Any]]:
    """An export holding every line kind and field: topics, metadata, names, TTLs, a profile,
    revisions of a live and of a deleted memory, a pending ingest stream with a trigger and
    generate settings."""
    model = ScriptedMemoryModel()
    model.extractions.append(
        {
            "memories": [{"fact": "I live in Lisbon.", "topics": ["USER_PERSONAL_INFO"]}],
            "profiles": {"user-profile": {"city": "Lisbon"}},
        }
    )
    model.consolidations.append({"actions": [{"fact_index": 0, "action": "CREATE"}]})
    async with AsyncClient("memory://", generation_model=model, run_scheduler=False) as source:
        made = await source.memory_banks.create(
            memory_bank_id="rich",
            managed_semantic_memory_config=PROFILE_CONFIG,
            config={"display_name": "Rich", "description": "every field"},
        )
        memories = source.memory_banks.memories
        await memories.create(
            name=made.name,
            fact="I like green tea.",
            scope=ALICE,
            config={
                "memory_id": "tea",
                "topics": [
                    {"managed_memory_topic": "USER_PREFERENCES"},
                    {"custom_memory_topic_label": "drinks"},
                ],
                "metadata": {
                    "source": {"string_value": "chat"},
                    "score": {"double_value": 0.25},
                    "verified": {"bool_value": True},
                    "seen": {"timestamp_value": "2024-05-01T12:30:00Z"},
                },
                "display_name": "Tea",
                "description": "a drink",
                "ttl": "86400s",
            },
        )
        await memories.update(name=f"{made.name}/memories/tea", fact="I like black tea.")
        await memories.create(
            name=made.name, fact="I drive a car.", scope=BOB, config={"memory_id": "car"}
        )
        await memories.delete(name=f"{made.name}/memories/car")
        await memories.generate(
            name=made.name,
            scope=ALICE,
            direct_contents_source={
                "events": [{"content": {"role": "user", "parts": [{"text": "Lisbon"}]}}]
            },
            config={"revision_labels": {"source": "chat"}},
        )
        await source.memory_banks.ingest_events(
            name=made.name,
            scope=BOB,
            stream_id="chat",
            direct_contents_source={
                "events": [
                    {
                        "content": {"role": "user", "parts": [{"text": "I like jazz."}]},
                        "event_id": "e1",
                    }
                ]
            },
            generation_trigger_config={
                "generation_rule": {"event_count": 50, "idle_duration": "3600s"}
            },
            config={"revision_labels": {"source": "stream"}, "revision_ttl": "3600s"},
        )
        lines = await exported(source, made.name)
    kinds = {line["kind"] for line in lines}
    assert kinds == {"export", "bank", "memory", "revision", "document", "end"}, kinds
    assert any(line.get("memory_type") == "STRUCTURED_PROFILE" for line in lines)
    return lines


def mutations(lines: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(case, file) for every field of one line of each kind (and each field of a memory of each
    type, of the bank's config and of the stream's body) set to each hostile value, or removed."""
    chosen: dict[str, int] = {}
    for index, line in enumerate(lines):
        kind = line["kind"] if line.get("memory_type") != "STRUCTURED_PROFILE" else "profile"
        chosen.setdefault(kind, index)
    cases: list[tuple[str, list[str]]] = []
    for kind, index in chosen.items():
        paths = [(key,) for key in lines[index]]
        for nested in ("config", "body"):
            if isinstance(lines[index].get(nested), dict):
                paths += [(nested, key) for key in lines[index][nested]]
        for path in paths:
            for value in [*HOSTILE, "<removed>"]:
                file = json.loads(json.dumps(lines))
                target = file[index]
                for key in path[:-1]:
                    target = target[key]
                if value == "<removed>":
                    del target[path[-1]]
                else:
                    target[path[-1]] = value
                cases.append((f"{kind}.{'.'.join(path)}={str(value)[:30]!r}", dumped(file)))
    return cases


async def serves(client: AsyncClient, name: str, *, thorough: bool) -> None:
    """The imported bank answers every user, flushes its streams, and takes writes.

    `thorough`: also lists everything, and updates each memory with its revisions listed (what
    the engine computes from stored times); the stores' side needs only the rest.
    """
    memories = client.memory_banks.memories
    for scope in (ALICE, BOB):
        found = await memories.retrieve(
            name=name, scope=scope, similarity_search_params={"search_query": "tea", "top_k": 10}
        )
        assert all(np.isfinite(hit.distance) for hit in found.page)
        await client.memory_banks.memories.retrieve_profiles(name=name, scope=scope)
    if thorough:
        for memory in [memory async for memory in await memories.list(name=name)]:
            _ = [revision async for revision in await memories.revisions.list(name=memory.name)]
            await memories.update(name=memory.name, config={"ttl": "60s"})
    for key, _body in await client.engine.store.list_documents(bank_id(name), "stream"):
        await client.engine.ingest.flush(bank_id(name), key, now_or_never=True, raise_failure=True)
    memory_id = f"still-here-{uuid.uuid4().hex[:8]}"
    await memories.create(
        name=name, fact="I am still here.", scope=BOB, config={"memory_id": memory_id}
    )
    await memories.delete(name=f"{name}/memories/{memory_id}")


async def test_every_field_of_every_line_kind_is_checked(uri: str) -> None:
    """Each field of each line kind (header, bank and its config, memory, profile, revision,
    stream document and its body, end) set to each hostile value, or removed: the import either
    fails with a typed error and leaves no bank, or succeeds into a bank that answers every
    user, flushes its streams and takes writes. Never another exception, never a bank that
    fails later. Mutations of memory, revision and stream lines are also merged into a live
    bank, which must go on serving. On `memory://` every case runs; on the other stores, for
    each field, the last value `memory://` accepted (the refused ones never reach the store),
    merged only when it is a record's (on a Chroma server only merged: a bank line's fields
    reach the same registry rows as embedded)."""
    lines = await rich_export()
    cases = mutations(lines)
    model = ScriptedMemoryModel(extract=lambda request: {"memories": []})
    accepted: list[str] = []
    full = uri.startswith("memory://")
    server = uri.startswith("chroma+http://")  # the bank line's cases run on embedded Chroma
    if not full:
        async with AsyncClient(
            "memory://", embedding_model=MODEL, generation_model=model, run_scheduler=False
        ) as reference:
            for case, file in cases:
                try:
                    await import_bank(reference.engine, file, bank_id="probe")
                except (InvalidArgument, FailedPrecondition, AlreadyExists):
                    continue
                accepted.append(case)
                await reference.engine.store.delete_bank("probe")
        # One accepted value per field (the last, most unusual one): what reaches the store.
        chosen = {case.split("=", 1)[0]: case for case in accepted}
        cases = [(case, file) for case, file in cases if case in chosen.values()]
    outcomes = {"imported": 0, "refused": 0, "merged": 0}
    async with AsyncClient(
        uri, embedding_model=MODEL, generation_model=model, run_scheduler=False
    ) as client:
        shared = "fuzz-merged"  # mutations of the records are also merged into one live bank
        await import_bank(client.engine, dumped(lines), bank_id=shared)
        for number, (case, file) in enumerate(cases):
            records = not case.startswith(("export.", "bank."))
            if full or not (records or server):  # into a new bank
                target = f"fuzz-{number}"
                try:
                    await import_bank(client.engine, file, bank_id=target)
                except (InvalidArgument, FailedPrecondition, AlreadyExists) as exc:
                    assert await client.engine.store.get_bank(target) is None, case
                    assert exc.field, (case, str(exc))  # the field (or the file) to fix is named
                    outcomes["refused"] += 1
                else:
                    await serves(client, f"reasoningEngines/{target}", thorough=full)
                    outcomes["imported"] += 1
                    await client.engine.store.delete_bank(target)
            if records:  # and merged into a live bank, which must go on serving
                try:
                    await import_bank(client.engine, file, bank_id=shared, merge=True)
                except (InvalidArgument, FailedPrecondition, AlreadyExists):
                    continue  # refused before its one batch: nothing was written
                outcomes["merged"] += 1
                await serves(client, f"reasoningEngines/{shared}", thorough=full)
    assert (
        outcomes["merged"]
        and (outcomes["imported"] or server)
        and (outcomes["refused"] or not full)
    )
