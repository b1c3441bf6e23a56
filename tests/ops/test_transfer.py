"""Export and import of a bank: exact round trips between stores, streamed, checked on import."""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from adk_memory import AlreadyExists, AsyncClient, FailedPrecondition, InvalidArgument
from adk_memory.cli import app
from adk_memory.store import MemoryRecord, MemoryStore, RevisionRecord, ScanQuery, WriteBatch
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.transfer import export_bank, import_bank, scan_pages

BANK = "transfer-bank"
ALICE = {"user_id": "alice"}
BOB = {"user_id": "bob", "app_name": "shop"}
CELLO = {"events": [{"content": {"role": "user", "parts": [{"text": "I play the cello."}]}}]}


def store_uri(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "chroma":
        return f"chroma://{tmp_path / f'chroma-{uuid.uuid4().hex[:6]}'}"
    redis_url = request.getfixturevalue("redis_url")
    return f"{redis_url}?key_prefix=t{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"


async def seed(client: AsyncClient, model: ScriptedMemoryModel) -> None:
    """A bank with every kind of state a transfer must keep; `model` is the client's."""
    await client.memory_banks.create(
        memory_bank_id=BANK,
        managed_semantic_memory_config={
            "similarity_search_config": {"embedding_model": "hash-64"},
            "ttl_config": {"memory_revision_default_ttl": "864000s"},
        },
        config={"display_name": "Transfer", "description": "moved between stores"},
    )
    bank = f"reasoningEngines/{BANK}"
    memories = client.memory_banks.memories
    await memories.create(
        name=bank,
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
        },
    )
    await memories.update(name=f"{bank}/memories/tea", fact="I like black tea.")
    await memories.create(
        name=bank, fact="I live in Lisbon.", scope=ALICE, config={"ttl": "86400s"}
    )
    await memories.create(name=bank, fact="I shop on Fridays.", scope=BOB)
    revisions = [r async for r in await memories.revisions.list(name=f"{bank}/memories/tea")]
    await memories.rollback(
        name=f"{bank}/memories/tea", target_revision_id=revisions[-1].name.rsplit("/", 1)[1]
    )
    await seed_deleted_memories(client, model)
    # A buffered ingest stream (its trigger is not reached, so it stays pending).
    await client.memory_banks.ingest_events(
        name=bank,
        scope=BOB,
        stream_id="s1",
        direct_contents_source={
            "events": [{"content": {"role": "user", "parts": [{"text": "I like jazz."}]}}]
        },
        generation_trigger_config={"generation_rule": {"event_count": 50}},
    )


async def seed_deleted_memories(client: AsyncClient, model: ScriptedMemoryModel) -> None:
    """Two deleted memories whose revisions stay: one deleted by the API (no tombstone), one by
    generation (a tombstone carrying revision labels and the extracted memories)."""
    bank = f"reasoningEngines/{BANK}"
    memories = client.memory_banks.memories
    await memories.create(
        name=bank, fact="I drive a red car.", scope=BOB, config={"memory_id": "car"}
    )
    await memories.update(name=f"{bank}/memories/car", fact="I drive a blue car.")
    await memories.delete(name=f"{bank}/memories/car")
    fact = {"fact": "I play the cello.", "topics": ["USER_PREFERENCES"]}
    model.extractions += [{"memories": [fact]}, {"memories": [{**fact, "forget": True}]}]
    model.consolidations.append(
        {"actions": [{"fact_index": 0, "action": "CREATE", "fact": fact["fact"]}]}
    )
    labelled = {"revision_labels": {"source": "chat"}}
    created = await memories.generate(
        name=bank, scope=BOB, direct_contents_source=CELLO, config=labelled
    )
    cello = created.response.generated_memories[0].memory.name.rsplit("/", 1)[1]
    model.consolidations.append(
        {"actions": [{"fact_index": 0, "action": "DELETE", "memory_id": cello}]}
    )
    await memories.generate(name=bank, scope=BOB, direct_contents_source=CELLO, config=labelled)


async def snapshot(store: MemoryStore, bank_id: str) -> dict[str, Any]:
    """Everything a bank holds, as the store returns it (revisions of deleted memories too)."""
    now = datetime.now(UTC)
    records = await store.scan(bank_id, ScanQuery(now=now))
    ids = sorted(record.memory_id for record in records)
    full = await store.get_memories(bank_id, ids, now)
    with_history = await store.list_revision_memory_ids(bank_id, now)
    return {
        "bank": await store.get_bank(bank_id),
        "memories": {record.memory_id: record for record in full},
        "revisions": {
            i: await store.list_revisions(bank_id, i, now) for i in sorted({*ids, *with_history})
        },
        "streams": await store.list_documents(bank_id, "stream"),
    }


def same_vectors(a: tuple[float, ...], b: tuple[float, ...]) -> bool:
    return len(a) == len(b) and all(abs(x - y) < 1e-6 for x, y in zip(a, b, strict=True))


PAIRS = [("chroma", "memory"), ("chroma", "redis"), ("redis", "memory")]


@pytest.mark.parametrize(("source_kind", "target_kind"), PAIRS, ids=["-".join(p) for p in PAIRS])
async def test_a_bank_moves_between_stores_with_nothing_lost_or_changed(
    source_kind: str, target_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    model = ScriptedMemoryModel()
    async with (
        AsyncClient(
            store_uri(source_kind, tmp_path, request), generation_model=model, run_scheduler=False
        ) as source,
        AsyncClient(store_uri(target_kind, tmp_path, request), run_scheduler=False) as target,
    ):
        await seed(source, model)
        buffer = io.StringIO()
        exported = await export_bank(source.engine, BANK, buffer.write, page_size=2)
        assert (exported.memories, exported.revisions, exported.documents) == (3, 9, 1)
        lines = buffer.getvalue().splitlines()
        assert [json.loads(line)["kind"] for line in (lines[0], lines[1], lines[-1])] == [
            "export",
            "bank",
            "end",
        ]
        imported = await import_bank(target.engine, lines, batch_size=2)
        assert imported == exported

        before = await snapshot(source.engine.store, BANK)
        after = await snapshot(target.engine.store, BANK)
        assert after["bank"] == before["bank"]
        assert after["revisions"] == before["revisions"]
        assert after["streams"] == before["streams"]
        assert after["memories"].keys() == before["memories"].keys()
        for memory_id, record in before["memories"].items():
            moved = after["memories"][memory_id]
            assert replace(moved, embedding=()) == replace(record, embedding=())
            assert same_vectors(moved.embedding, record.embedding)

        # The moved bank works: the same retrieval answer, the same revisions API.
        def query(client: AsyncClient) -> Any:
            return client.memory_banks.memories.retrieve(
                name=f"reasoningEngines/{BANK}",
                scope=ALICE,
                similarity_search_params={"search_query": "tea", "top_k": 2},
            )

        expected = [(h.memory.name, round(h.distance, 5)) for h in (await query(source)).page]
        assert [(h.memory.name, round(h.distance, 5)) for h in (await query(target)).page] == (
            expected
        )
        await check_deleted_memories_moved(before["revisions"], before["memories"], target)


async def check_deleted_memories_moved(
    revisions: dict[str, list[RevisionRecord]],
    live: dict[str, MemoryRecord],
    target: AsyncClient,
) -> None:
    """The deleted memories' histories (already compared) are complete, and rollback restores
    each deleted memory in the target store."""
    gone = {memory_id: history for memory_id, history in revisions.items() if memory_id not in live}
    assert sorted(len(history) for history in gone.values()) == [2, 2]
    tombstone = next(history[0] for history in gone.values() if history[0].deleted)
    assert tombstone.labels == {"source": "chat"}
    assert tombstone.extracted_memories and tombstone.expire_time is not None
    memories = target.memory_banks.memories
    for memory_id, history in gone.items():
        name = f"reasoningEngines/{BANK}/memories/{memory_id}"
        restore = next(revision for revision in history if not revision.deleted)
        await memories.rollback(name=name, target_revision_id=restore.revision_id)
        assert (await memories.get(name=name)).fact == restore.fact


def seeded_source() -> tuple[AsyncClient, ScriptedMemoryModel]:
    model = ScriptedMemoryModel()
    return AsyncClient("memory://", generation_model=model, run_scheduler=False), model


async def test_import_refuses_an_existing_bank_unless_merging(tmp_path: Path) -> None:
    source, model = seeded_source()
    async with source:
        await seed(source, model)
        buffer = io.StringIO()
        await export_bank(source.engine, BANK, buffer.write)
    lines = buffer.getvalue().splitlines()
    async with AsyncClient("memory://", run_scheduler=False) as target:
        await import_bank(target.engine, lines)
        with pytest.raises(AlreadyExists, match="--merge"):
            await import_bank(target.engine, lines)
        again = await import_bank(target.engine, lines, merge=True)
        assert again.memories == 3
        renamed = await import_bank(target.engine, lines, bank_id="copy")
        assert renamed.bank_id == "copy"
        copy = await target.memory_banks.memories.get(name="reasoningEngines/copy/memories/tea")
        assert copy.fact == "I like green tea."
        with pytest.raises(FailedPrecondition, match="embedding model"):
            await import_bank(target.engine, lines, merge=True, embedding_model="hash-32")


async def test_a_cut_or_altered_file_is_reported() -> None:
    source, model = seeded_source()
    async with source:
        await seed(source, model)
        buffer = io.StringIO()
        await export_bank(source.engine, BANK, buffer.write)
    lines = buffer.getvalue().splitlines()
    async with AsyncClient("memory://", run_scheduler=False) as target:
        with pytest.raises(InvalidArgument, match="cut short"):
            await import_bank(target.engine, lines[:-1], bank_id="cut")
        altered = [json.loads(line) for line in lines]
        memory = next(line for line in altered if line["kind"] == "memory")
        memory["scope"] = {"user_id": "mallory"}
        with pytest.raises(InvalidArgument, match=r"line \d+: scope_key does not match"):
            await import_bank(target.engine, [json.dumps(line) for line in altered], bank_id="x")
        with pytest.raises(InvalidArgument, match="line 1 is not an adk-memory export header"):
            await import_bank(target.engine, lines[1:], bank_id="y")
        with pytest.raises(InvalidArgument, match="line 2 is not JSON"):
            await import_bank(target.engine, [lines[0], "{oops"], bank_id="z")


async def test_import_can_reembed_with_another_model_or_without_exported_vectors() -> None:
    source, model = seeded_source()
    async with source:
        await seed(source, model)
        with_vectors, without = io.StringIO(), io.StringIO()
        await export_bank(source.engine, BANK, with_vectors.write)
        await export_bank(source.engine, BANK, without.write, vectors=False)
        original = await snapshot(source.engine.store, BANK)
    assert "embedding_f64" not in without.getvalue()
    async with AsyncClient("memory://", run_scheduler=False) as target:
        plain = await import_bank(target.engine, without.getvalue().splitlines())
        assert plain.reembedded == 3
        restored = await snapshot(target.engine.store, BANK)
        for memory_id, record in original["memories"].items():
            assert same_vectors(restored["memories"][memory_id].embedding, record.embedding)
        other = await import_bank(
            target.engine,
            with_vectors.getvalue().splitlines(),
            bank_id="small",
            embedding_model="hash-32",
        )
        assert other.reembedded == 3
        bank = await target.memory_banks.get(name="reasoningEngines/small")
        assert bank.managed_semantic_memory_config.similarity_search_config.embedding_model == (
            "hash-32"
        )
        [hit] = (
            await target.memory_banks.memories.retrieve(
                name="reasoningEngines/small",
                scope=BOB,
                similarity_search_params={"search_query": "shopping", "top_k": 1},
            )
        ).page
        assert hit.memory.fact == "I shop on Fridays."


async def test_pages_never_repeat_or_skip_memories_sharing_a_create_time() -> None:
    async with AsyncClient("memory://", embedding_model="hash-8") as client:
        await client.memory_banks.create(memory_bank_id="ties")
        store = client.engine.store
        t0 = datetime(2025, 1, 1, tzinfo=UTC)
        await client.memory_banks.memories.create(
            name="reasoningEngines/ties", fact="seed", scope=ALICE, config={"memory_id": "seed"}
        )
        [template] = await store.get_memories("ties", ["seed"], datetime.now(UTC))
        records = [
            replace(
                template,
                memory_id=f"m{index:02d}",
                create_time=t0 + timedelta(seconds=index // 5),
                update_time=t0,
            )
            for index in range(12)
        ]
        await store.apply("ties", WriteBatch(upserts=tuple(records)))
        seen: list[str] = []
        async for page, _cursor in scan_pages(store, "ties", now=datetime.now(UTC), page_size=3):
            seen += [record.memory_id for record in page]
        assert seen == [f"m{index:02d}" for index in range(12)] + ["seed"]


def test_export_and_import_commands_round_trip(tmp_path: Path, hash_embeddings: None) -> None:
    source = f"chroma://{tmp_path / 'source'}"
    target = f"memory://import-{uuid.uuid4().hex[:6]}"

    async def prepare() -> None:
        model = ScriptedMemoryModel()
        async with AsyncClient(source, generation_model=model, run_scheduler=False) as client:
            await seed(client, model)

    asyncio.run(prepare())
    runner = CliRunner()
    exported = tmp_path / "bank.jsonl"
    result = runner.invoke(app, ["export", "--uri", source, "-b", BANK, "-o", str(exported)])
    assert result.exit_code == 0, result.stderr
    assert "Exported bank transfer-bank: 3 memories, 9 revisions, 1 ingest streams." in (
        result.stderr
    )
    result = runner.invoke(app, ["import", str(exported), "--uri", target, "--json"])
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout) == {
        "bank": BANK,
        "memories": 3,
        "revisions": 9,
        "documents": 1,
        "reembedded": 0,
    }

    def listing(uri: str) -> list[dict[str, Any]]:
        out = runner.invoke(app, ["memories", "list", "--uri", uri, "-b", BANK, "--json"])
        assert out.exit_code == 0, out.stderr
        return sorted(json.loads(out.stdout), key=lambda memory: memory["name"])

    assert listing(target) == listing(source)
    # The deleted memory's history moved too, and rolling back to it recreates the memory.
    history = ["revisions", "list", "car", "-b", BANK, "--json"]
    moved = runner.invoke(app, [*history, "--uri", target])
    assert moved.exit_code == 0, moved.stderr
    assert json.loads(moved.stdout) == json.loads(
        runner.invoke(app, [*history, "--uri", source]).stdout
    )
    [newest, _oldest] = json.loads(moved.stdout)
    revision_id = newest["name"].rsplit("/", 1)[1]
    restored = runner.invoke(
        app, ["rollback", "car", revision_id, "-b", BANK, "--uri", target, "--json"]
    )
    assert restored.exit_code == 0, restored.stderr
    assert json.loads(restored.stdout)["fact"] == "I drive a blue car."
    again = runner.invoke(app, ["import", str(exported), "--uri", target])
    assert again.exit_code == 1 and again.stderr.startswith("error: ALREADY_EXISTS")


PROFILE_BANK_CONFIG = {
    "similarity_search_config": {"embedding_model": "hash-64"},
    "structured_memory_configs": [
        {
            "scope_keys": ["user_id"],
            "schema_configs": [
                {
                    "id": "user-profile",
                    "schema": {"type": "OBJECT", "properties": {"name": {"type": "STRING"}}},
                }
            ],
        }
    ],
}


async def exported_profile_bank() -> list[dict[str, Any]]:
    """The export lines of a bank holding one memory and one profile of ALICE."""
    model = ScriptedMemoryModel()
    model.extractions.append(
        {
            "memories": [{"fact": "I am Ada.", "topics": ["USER_PERSONAL_INFO"]}],
            "profiles": {"user-profile": {"name": "Ada"}},
        }
    )
    model.consolidations.append({"actions": [{"fact_index": 0, "action": "CREATE"}]})
    async with AsyncClient("memory://", generation_model=model, run_scheduler=False) as source:
        bank = await source.memory_banks.create(
            memory_bank_id="profiles", managed_semantic_memory_config=PROFILE_BANK_CONFIG
        )
        await source.memory_banks.memories.generate(
            name=bank.name, scope=ALICE, direct_contents_source=CELLO
        )
        buffer = io.StringIO()
        await export_bank(source.engine, "profiles", buffer.write)
    return [json.loads(line) for line in buffer.getvalue().splitlines()]


async def test_a_profile_moves_between_stores_and_is_found_as_a_profile() -> None:
    lines = await exported_profile_bank()
    assert any(line.get("memory_type") == "STRUCTURED_PROFILE" for line in lines)
    async with AsyncClient("memory://", run_scheduler=False) as target:
        await import_bank(target.engine, [json.dumps(line) for line in lines], bank_id="moved")
        found = await target.memory_banks.memories.retrieve_profiles(
            name="reasoningEngines/moved", scope=ALICE
        )
    assert {key: value.profile for key, value in (found.profiles or {}).items()} == {
        "user-profile": {"name": "Ada"}
    }


def _altered(lines: list[dict[str, Any]], kind: str, **changes: Any) -> list[str]:
    """The lines with the first line of `kind` changed (and the profile one for "profile")."""
    altered = json.loads(json.dumps(lines))
    if kind == "profile":
        target = next(line for line in altered if line.get("memory_type") == "STRUCTURED_PROFILE")
    else:
        target = next(
            line
            for line in altered
            if line["kind"] == kind and line.get("memory_type") != "STRUCTURED_PROFILE"
        )
    target.update(changes)
    return [json.dumps(line) for line in altered]


async def test_an_import_cannot_plant_an_id_no_export_could_hold() -> None:
    """A crafted file: ids that split into several on a store (`,`), a plain memory at a
    profile's id (where generate would look for the profile), a profile at an id its scope and
    schema do not give, bad revision ids. Each is refused naming the line, and nothing lands (not
    even the bank the import created)."""
    from adk_memory.engine.profiles import profile_memory_id

    lines = await exported_profile_bank()
    squatted_id = profile_memory_id({"user_id": "bob"}, "user-profile")
    crafted = {
        "a list-like id": _altered(lines, "memory", memory_id="tea,profile"),
        "a plain memory at a profile's id": _altered(lines, "memory", memory_id=squatted_id),
        "a profile at another id": _altered(lines, "profile", memory_id="ada"),
        "a profile of another schema": _altered(lines, "profile", schema_id="other"),
        "a revision id with a slash": _altered(lines, "revision", revision_id="../x"),
        "a revision of a list-like id": _altered(lines, "revision", memory_id="a,b"),
    }
    async with AsyncClient("memory://", run_scheduler=False) as target:
        for number, (case, file) in enumerate(crafted.items()):
            bank_id = f"planted-{number}"
            with pytest.raises(
                InvalidArgument, match=r"line \d+(: |\.)(memory|revision)_id"
            ) as caught:
                await import_bank(target.engine, file, bank_id=bank_id)
            assert "altered" in str(caught.value) or "must be" in str(caught.value), case
            assert "was removed" in str(caught.value), case
            assert await target.engine.store.get_bank(bank_id) is None, case
