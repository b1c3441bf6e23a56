"""A bank holding every kind of state an export carries, for tests of export and import.

`seed_rich_bank` fills a new bank through the public API: bank settings (display name,
description, a revision TTL, a profile schema), memories with topics, metadata, names and a
TTL, updates and a rollback (revisions of live memories), two deleted memories whose revisions
stay (one deleted by the API, one by generation: a tombstone with revision labels and the
extracted memories), and a pending ingest stream with a trigger and generate settings. Shared by
the transfer tests and the import-integrity tests, so that a round trip and a crafted file start
from the same bank.
"""

from __future__ import annotations

from typing import Any

from adk_memory import AsyncClient
from adk_memory.testing.models import ScriptedMemoryModel

__all__ = ["ALICE", "BOB", "CELLO", "PROFILE_SCHEMA_ID", "seed_rich_bank"]

ALICE = {"user_id": "alice"}
"""The scope of the live memories' revisions (tea, rolled back; Lisbon, with a TTL)."""

BOB = {"user_id": "bob", "app_name": "shop"}
"""The scope of the deleted memories, of one live memory and of the ingest stream."""

PROFILE_SCHEMA_ID = "user-profile"
"""The bank's profile schema (an object with a `city`), keyed by `user_id`."""

CELLO = {"events": [{"content": {"role": "user", "parts": [{"text": "I play the cello."}]}}]}
"""The events of the generations that create, then delete, the cello memory."""

_PROFILE_SCHEMA: dict[str, Any] = {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}}


async def seed_rich_bank(client: AsyncClient, model: ScriptedMemoryModel, bank_id: str) -> str:
    """Creates `bank_id` and fills it; returns the bank's name (``reasoningEngines/{bank_id}``).

    Args:
        client: A client with `model` as its generation model and no scheduler running (the
            stream must stay pending).
        model: The client's scripted model; the answers of two generations are appended.
        bank_id: The id of the bank to create (embedding model ``hash-64``).

    Returns:
        The new bank's name: 3 live memories (tea, Lisbon, shop), 2 deleted ones (car, cello),
        9 revisions and 1 ingest stream.
    """
    made = await client.memory_banks.create(
        memory_bank_id=bank_id,
        managed_semantic_memory_config={
            "similarity_search_config": {"embedding_model": "hash-64"},
            "ttl_config": {"memory_revision_default_ttl": "864000s"},
            "structured_memory_configs": [
                {
                    "scope_keys": ["user_id"],
                    "schema_configs": [{"id": PROFILE_SCHEMA_ID, "schema": _PROFILE_SCHEMA}],
                }
            ],
        },
        config={"display_name": "Rich", "description": "every kind of state"},
    )
    bank = str(made.name)
    await _seed_live_memories(client, bank)
    await _seed_deleted_memories(client, model, bank)
    await client.memory_banks.ingest_events(
        name=bank,
        scope=BOB,
        stream_id="s1",
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
    return bank


async def _seed_live_memories(client: AsyncClient, bank: str) -> None:
    """Tea (topics, metadata, names; updated, then rolled back), Lisbon (a TTL), shop."""
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


async def _seed_deleted_memories(
    client: AsyncClient, model: ScriptedMemoryModel, bank: str
) -> None:
    """Two deleted memories whose revisions stay: car and cello.

    Car is deleted by the API (no tombstone), cello by generation (a tombstone carrying revision
    labels and the extracted memories).
    """
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
