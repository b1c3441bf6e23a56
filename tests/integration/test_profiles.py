"""Structured memory profiles with a scripted model, on every backend."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from adk_memory import Client, InvalidArgument, ModelUnavailable, types
from adk_memory.testing.models import ScriptedMemoryModel

SCOPE = {"user_id": "u1"}
PROFILE_SCHEMA = {
    "type": "OBJECT",
    "properties": {
        "name": {"type": "STRING"},
        "home_city": {"type": "STRING"},
        "age": {"type": "INTEGER"},
        "diet": {"type": "STRING", "enum": ["vegan", "vegetarian", "omnivore"]},
    },
    "required": ["name"],
}
BANK_CONFIG = {
    "structured_memory_configs": [
        {
            "scope_keys": ["user_id"],
            "schema_configs": [{"id": "user-profile", "schema": PROFILE_SCHEMA}],
        }
    ]
}


def conversation(text: str) -> dict[str, Any]:
    return {"events": [{"content": {"role": "user", "parts": [{"text": text}]}}]}


@pytest.fixture
def model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel()


@pytest.fixture
def client(store_uri: str, model: ScriptedMemoryModel) -> Iterator[Client]:
    with Client(uri=store_uri, embedding_model="hash-64", generation_model=model) as made:
        yield made


@pytest.fixture
def bank(client: Client) -> str:
    return client.memory_banks.create(managed_semantic_memory_config=BANK_CONFIG).name


def generate(
    client: Client, bank: str, text: str, scope: dict[str, str] = SCOPE
) -> types.GenerateMemoriesOperation:
    return client.memory_banks.memories.generate(
        name=bank, scope=scope, direct_contents_source=conversation(text)
    )


def profiles(client: Client, bank: str, scope: dict[str, str] = SCOPE) -> dict[str, Any]:
    response = client.memory_banks.memories.retrieve_profiles(name=bank, scope=scope)
    return {key: value.profile for key, value in (response.profiles or {}).items()}


def test_profile_created_then_updated_across_two_conversations(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += [
        {
            "memories": [{"fact": "I am Ada.", "topics": ["USER_PERSONAL_INFO"]}],
            "profiles": {"user-profile": {"name": "Ada", "home_city": "Berlin"}},
        },
    ]
    model.consolidations += [{"actions": [{"fact_index": 0, "action": "CREATE"}]}]
    first = generate(client, bank, "Hi, I'm Ada from Berlin.")
    assert first.metadata["llmCalls"] == 2
    assert profiles(client, bank) == {"user-profile": {"name": "Ada", "home_city": "Berlin"}}
    kinds = sorted(
        (g.action.value, g.memory.memory_type is not None)
        for g in first.response.generated_memories
    )
    assert kinds == [("CREATED", False), ("CREATED", True)]

    model.extractions += [
        {"memories": [], "profiles": {"user-profile": {"home_city": "Munich", "age": 36}}}
    ]
    second = generate(client, bank, "I moved to Munich, and I just turned 36.")
    assert second.metadata["llmCalls"] == 1
    assert profiles(client, bank) == {
        "user-profile": {"name": "Ada", "home_city": "Munich", "age": 36}
    }
    [updated] = second.response.generated_memories
    assert updated.action.value == "UPDATED" and updated.previous_revision
    assert updated.memory.structured_content.schema_id == "user-profile"
    revisions = list(client.memory_banks.memories.revisions.list(name=updated.memory.name))
    assert [r.structured_data for r in revisions] == [
        {"name": "Ada", "home_city": "Munich", "age": 36},
        {"name": "Ada", "home_city": "Berlin"},
    ]
    prompt = model.prompt_text(model.requests[-1])
    assert "user-profile" in prompt and '"home_city": "Berlin"' in prompt


def test_schema_violations_are_refused_with_nothing_applied(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    bad = {
        "memories": [{"fact": "I like tea.", "topics": ["USER_PREFERENCES"]}],
        "profiles": {"user-profile": {"name": "Ada", "diet": "carnivore"}},
    }
    missing_name = {"memories": [], "profiles": {"user-profile": {"age": 36}}}
    unknown_schema = {"memories": [], "profiles": {"other": {"x": 1}}}
    model.extractions += [bad, missing_name, unknown_schema]
    with pytest.raises(ModelUnavailable, match="no valid answer"):
        generate(client, bank, "I'm Ada and I eat everything.")
    assert profiles(client, bank) == {}
    assert list(client.memory_banks.memories.retrieve(name=bank, scope=SCOPE)) == []


def test_profiles_are_isolated_by_exact_scope(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += [{"memories": [], "profiles": {"user-profile": {"name": "Ada"}}}]
    generate(client, bank, "I'm Ada.")
    model.extractions += [{"memories": [], "profiles": {"user-profile": {"name": "Bob"}}}]
    generate(client, bank, "I'm Bob.", scope={"user_id": "u2"})
    assert profiles(client, bank) == {"user-profile": {"name": "Ada"}}
    assert profiles(client, bank, {"user_id": "u2"}) == {"user-profile": {"name": "Bob"}}
    assert profiles(client, bank, {"user_id": "u1", "app": "x"}) == {}
    assert profiles(client, bank, {"user_id": "U1"}) == {}


def test_retrieve_returns_natural_language_memories_by_default(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += [
        {
            "memories": [{"fact": "I like tea.", "topics": ["USER_PREFERENCES"]}],
            "profiles": {"user-profile": {"name": "Ada"}},
        }
    ]
    model.consolidations += [{"actions": [{"fact_index": 0, "action": "CREATE"}]}]
    generate(client, bank, "I'm Ada and I like tea.")
    memories = client.memory_banks.memories
    assert [hit.memory.fact for hit in memories.retrieve(name=bank, scope=SCOPE)] == ["I like tea."]
    search = {"search_query": "Ada", "top_k": 10}
    assert [
        hit.memory.fact
        for hit in memories.retrieve(name=bank, scope=SCOPE, similarity_search_params=search)
    ] == ["I like tea."]
    only_profiles = memories.retrieve(
        name=bank, scope=SCOPE, config={"memory_types": ["STRUCTURED_PROFILE"]}
    )
    assert [hit.memory.structured_content.data for hit in only_profiles] == [{"name": "Ada"}]
    both = memories.retrieve(
        name=bank,
        scope=SCOPE,
        similarity_search_params=search,
        config={"memory_types": ["NATURAL_LANGUAGE_COLLECTION", "STRUCTURED_PROFILE"]},
    )
    assert len(list(both)) == 2


def test_disable_natural_language_memories_keeps_only_profiles(
    client: Client, model: ScriptedMemoryModel
) -> None:
    config = {**BANK_CONFIG, "customization_configs": [{"disable_natural_language_memories": True}]}
    bank = client.memory_banks.create(managed_semantic_memory_config=config).name
    model.extractions += [
        {
            "memories": [{"fact": "I like tea.", "topics": ["USER_PREFERENCES"]}],
            "profiles": {"user-profile": {"name": "Ada"}},
        }
    ]
    operation = generate(client, bank, "I'm Ada and I like tea.")
    assert operation.metadata["llmCalls"] == 1
    assert "only update the profiles" in model.prompt_text(model.requests[0])
    assert profiles(client, bank) == {"user-profile": {"name": "Ada"}}
    assert list(client.memory_banks.memories.retrieve(name=bank, scope=SCOPE)) == []


def test_schema_configs_are_validated_at_bank_create_and_update(client: Client, bank: str) -> None:
    bad_configs = [
        {
            "structured_memory_configs": [
                {"schema_configs": [{"id": "Bad_Id", "schema": PROFILE_SCHEMA}]}
            ]
        },
        {
            "structured_memory_configs": [
                {"schema_configs": [{"id": "p", "schema": {"type": "STRING"}}]}
            ]
        },
        {
            "structured_memory_configs": [
                {
                    "schema_configs": [
                        {"id": "p", "schema": PROFILE_SCHEMA},
                        {"id": "p", "schema": PROFILE_SCHEMA},
                    ]
                }
            ]
        },
        {
            "structured_memory_configs": [
                {"schema_configs": [{"id": "p", "schema": PROFILE_SCHEMA}]},
                {"schema_configs": [{"id": "q", "schema": PROFILE_SCHEMA}]},
            ]
        },
    ]
    for config in bad_configs:
        with pytest.raises(InvalidArgument, match="structured_memory_configs"):
            client.memory_banks.create(managed_semantic_memory_config=config)
        with pytest.raises(InvalidArgument, match="structured_memory_configs"):
            client.memory_banks.update(name=bank, managed_semantic_memory_config=config)
