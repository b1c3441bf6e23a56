"""Changing a bank's embedding model: batches, reads during the work, resumption, catch-up."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from adk_memory import AsyncClient, FailedPrecondition, InvalidArgument
from adk_memory.cli import app
from adk_memory.embeddings import HashEmbedder
from adk_memory.engine import context as engine_context
from adk_memory.engine.reembed import Reembedder, reembed
from adk_memory.store import ScanQuery

BANK = "reembed-bank"
NAME = f"reasoningEngines/{BANK}"
ALICE = {"user_id": "alice"}
FACTS = [f"I remember fact number {index} about topic {index % 7}." for index in range(23)]


@pytest.fixture(params=["memory", "chroma", "redis"])
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "chroma":
        return f"chroma://{tmp_path / 'chroma'}"
    url = request.getfixturevalue("redis_url")
    return f"{url}?key_prefix=t{uuid.uuid4().hex[:10]}&index_algorithm=FLAT"


async def seeded(client: AsyncClient, facts: Sequence[str] = FACTS) -> None:
    await client.memory_banks.create(
        memory_bank_id=BANK,
        managed_semantic_memory_config={"similarity_search_config": {"embedding_model": "hash-64"}},
    )
    for index, fact in enumerate(facts):
        await client.memory_banks.memories.create(
            name=NAME, fact=fact, scope=ALICE, config={"memory_id": f"m{index:02d}"}
        )


async def records(client: AsyncClient) -> dict[str, Any]:
    store = client.engine.store
    now = datetime.now(UTC)
    ids = sorted(r.memory_id for r in await store.scan(BANK, ScanQuery(now=now)))
    return {r.memory_id: r for r in await store.get_memories(BANK, ids, now)}


async def nearest_facts(client: AsyncClient, query: str) -> list[str]:
    pager = await client.memory_banks.memories.retrieve(
        name=NAME, scope=ALICE, similarity_search_params={"search_query": query, "top_k": 3}
    )
    return [hit.memory.fact or "" for hit in pager.page]


def close(a: Sequence[float], b: Sequence[float]) -> bool:
    return len(a) == len(b) and all(abs(x - y) < 1e-6 for x, y in zip(a, b, strict=True))


async def test_reembed_switches_model_and_dimension_keeping_everything_else(uri: str) -> None:
    async with AsyncClient(uri, run_scheduler=False) as client:
        await seeded(client)
        before = await records(client)
        revisions = await client.engine.store.list_revisions(BANK, "m03", datetime.now(UTC))
        status = await reembed(client.engine, BANK, "hash-32", batch_size=5)
        assert (status.phase, status.embedded, status.total) == ("done", 23, 23)
        bank = await client.engine.store.get_bank(BANK)
        assert bank is not None and (bank.embedding_model, bank.embedding_dimension) == (
            "hash-32",
            32,
        )
        after = await records(client)
        expected = await HashEmbedder(32).embed_documents([r.fact for r in before.values()])
        for (memory_id, old), vector in zip(before.items(), expected, strict=True):
            assert replace(after[memory_id], embedding=()) == replace(old, embedding=())
            assert close(after[memory_id].embedding, vector)
        assert await client.engine.store.list_revisions(BANK, "m03", datetime.now(UTC)) == (
            revisions
        )
        assert (await nearest_facts(client, FACTS[5]))[0] == FACTS[5]
        assert await Reembedder(client.engine).status(BANK) is None
        assert (await client.engine.store.list_documents(BANK, "reembed")) == []
        with pytest.raises(InvalidArgument, match="already uses"):
            await reembed(client.engine, BANK, "hash-32")


class Interrupted(Exception):
    pass


async def test_an_interrupted_reembed_resumes_and_reads_work_meanwhile(uri: str) -> None:
    async with AsyncClient(uri, run_scheduler=False) as client:
        await seeded(client)
        seen: list[tuple[str, int]] = []

        def stop_after_two_batches(phase: str, done: int, total: int | None) -> None:
            seen.append((phase, done))
            if done >= 10:
                raise Interrupted

        with pytest.raises(Interrupted):
            await reembed(
                client.engine, BANK, "hash-32", batch_size=5, progress=stop_after_two_batches
            )
        status = await Reembedder(client.engine).status(BANK)
        assert status is not None and (status.phase, status.embedded) == ("computing", 10)
        # Reads still use the old model and the old vectors.
        bank = await client.engine.store.get_bank(BANK)
        assert bank is not None and bank.embedding_model == "hash-64"
        assert (await nearest_facts(client, FACTS[4]))[0] == FACTS[4]
        with pytest.raises(FailedPrecondition, match="under way"):
            await reembed(client.engine, BANK, "hash-16")

        seen.clear()
        status = await reembed(
            client.engine,
            BANK,
            "hash-32",
            batch_size=5,
            progress=lambda phase, done, total: seen.append((phase, done)),
        )
        assert status.phase == "done"
        computed = [done for phase, done in seen if phase == "compute"]
        assert computed == [15, 20, 23]  # resumed after the 10 already parked
        assert (await nearest_facts(client, FACTS[4]))[0] == FACTS[4]
        assert all(len(r.embedding) == 32 for r in (await records(client)).values())


async def test_the_switch_catches_up_with_writes_made_while_computing(uri: str) -> None:
    async with AsyncClient(uri, run_scheduler=False) as client:
        await seeded(client, FACTS[:8])
        status = await reembed(client.engine, BANK, "hash-32", batch_size=3, switch=False)
        assert status.phase == "computed"
        memories = client.memory_banks.memories
        cello = "I started learning the cello."
        await memories.create(name=NAME, fact=cello, scope=ALICE, config={"memory_id": "new"})
        await memories.update(name=f"{NAME}/memories/m01", fact="I moved to Porto.")
        await memories.delete(name=f"{NAME}/memories/m02")
        status = await reembed(client.engine, BANK, "hash-32", batch_size=3)
        assert status.phase == "done"
        after = await records(client)
        assert sorted(after) == sorted(["new", "m00", "m01", *[f"m{i:02d}" for i in range(3, 8)]])
        for record in after.values():
            [vector] = await HashEmbedder(32).embed_documents([record.fact])
            assert close(record.embedding, vector), record.memory_id
        assert (await nearest_facts(client, "I moved to Porto."))[0] == "I moved to Porto."


async def test_an_interrupted_swap_is_finished_by_the_next_run(
    uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with AsyncClient(uri, run_scheduler=False) as client:
        await seeded(client, FACTS[:7])
        before = await records(client)
        store = client.engine.store
        real_update = store.update_bank

        async def crash(bank: Any) -> None:
            raise ConnectionError("store went away")

        monkeypatch.setattr(store, "update_bank", crash)
        with pytest.raises(ConnectionError):
            await reembed(client.engine, BANK, "hash-16", batch_size=3)
        status = await Reembedder(client.engine).status(BANK)
        assert status is not None and status.phase == "swapping"
        with pytest.raises(FailedPrecondition, match="finish it"):
            await Reembedder(client.engine).abort(BANK)
        monkeypatch.setattr(store, "update_bank", real_update)
        status = await reembed(client.engine, BANK, "hash-16")
        assert status.phase == "done"
        after = await records(client)
        assert sorted(after) == sorted(before)
        for memory_id, record in before.items():
            assert replace(after[memory_id], embedding=()) == replace(record, embedding=())
            assert len(after[memory_id].embedding) == 16


class ReversedHash:
    """Another 64-dimensional model: the hash embedder's vectors, reversed."""

    def __init__(self) -> None:
        self._inner = HashEmbedder(64)
        self.model = "reversed-hash-64"
        self.dimension = 64

    async def embed_documents(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
        return [v[::-1] for v in await self._inner.embed_documents(texts)]

    async def embed_query(self, text: str) -> tuple[float, ...]:
        return (await self._inner.embed_query(text))[::-1]


async def test_a_model_of_the_same_dimension_is_switched_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = engine_context.embedder_for

    def embedder_for(model: str | None, **options: Any) -> Any:
        return ReversedHash() if model == "reversed-hash-64" else real(model, **options)

    monkeypatch.setattr(engine_context, "embedder_for", embedder_for)
    async with AsyncClient("memory://", run_scheduler=False) as client:
        await seeded(client, FACTS[:6])
        status = await reembed(client.engine, BANK, "reversed-hash-64", batch_size=4)
        assert status.phase == "done"
        for record in (await records(client)).values():
            [vector] = await ReversedHash().embed_documents([record.fact])
            assert close(record.embedding, vector)
        assert (await nearest_facts(client, FACTS[2]))[0] == FACTS[2]


def test_reembed_command(tmp_path: Path) -> None:
    uri = f"chroma://{tmp_path / 'chroma'}"

    async def prepare() -> None:
        async with AsyncClient(uri, run_scheduler=False) as client:
            await seeded(client, FACTS[:5])

    asyncio.run(prepare())
    runner = CliRunner()

    def cli(*args: str) -> str:
        result = runner.invoke(app, ["reembed", "--uri", uri, "--bank", BANK, *args])
        assert result.exit_code == 0, result.stderr
        return result.stdout

    assert "No re-embedding under way." in cli("--status")
    assert "computed, 5 of about 5" in cli("--model", "hash-32", "--no-switch")
    assert "computed" in cli("--status")
    assert "Cancelled" in cli("--abort")
    assert "No re-embedding under way." in cli("--status")
    assert "now uses hash-32 (32 dimensions): 5 memories re-embedded" in cli("-m", "hash-32")
    missing = runner.invoke(app, ["reembed", "--uri", uri, "--bank", BANK])
    assert missing.exit_code == 1 and missing.stderr.startswith("error: INVALID_ARGUMENT: --model")


async def test_two_reembeddings_of_one_bank_never_run_at_once() -> None:
    async with AsyncClient("memory://", run_scheduler=False) as client:
        await seeded(client, FACTS[:2])
        async with client.engine.store.lock_provider().lock(f"reembed:{BANK}"):
            with pytest.raises(FailedPrecondition, match="Another re-embedding"):
                await reembed(client.engine, BANK, "hash-32")
        assert (await reembed(client.engine, BANK, "hash-32")).phase == "done"


async def test_an_in_place_switch_never_revives_a_memory_deleted_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writers are not locked out of a switch: a memory deleted while the switch re-embeds its
    changed fact stays deleted (the in-place write expects each memory as it read it)."""
    reached, release = asyncio.Event(), asyncio.Event()

    class Pausing(ReversedHash):
        async def embed_documents(self, texts: Sequence[str]) -> list[tuple[float, ...]]:
            if any("CHANGED" in text for text in texts):
                reached.set()
                await release.wait()
            return await super().embed_documents(texts)

    real = engine_context.embedder_for

    def embedder_for(model: str | None, **options: Any) -> Any:
        return Pausing() if model == "reversed-hash-64" else real(model, **options)

    monkeypatch.setattr(engine_context, "embedder_for", embedder_for)
    async with AsyncClient("memory://", run_scheduler=False) as client:
        await seeded(client, FACTS[:6])
        await reembed(client.engine, BANK, "reversed-hash-64", batch_size=4, switch=False)
        memories = client.memory_banks.memories
        await memories.update(name=f"{NAME}/memories/m01", fact="A CHANGED fact.")
        switching = asyncio.ensure_future(reembed(client.engine, BANK, "reversed-hash-64"))
        await asyncio.wait_for(reached.wait(), 30)
        await memories.delete(name=f"{NAME}/memories/m01")
        release.set()
        assert (await switching).phase == "done"
        stored = await records(client)
        assert "m01" not in stored and len(stored) == 5
