"""Memory banks through the official SDK (`client.memory_banks.*`) against the REST server."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import agentplatform
import pytest
from google.genai import errors

FULL_CONFIG = {
    "unstructured_memory_configs": [
        {
            "scope_keys": ["user_id"],
            "memory_topics": [
                {"managed_memory_topic": {"managed_topic_enum": "USER_PREFERENCES"}},
                {"custom_memory_topic": {"label": "jargon", "description": "Jargon the user uses"}},
            ],
            "consolidation_config": {"revisions_per_candidate_count": 2},
        }
    ],
    "ttl_config": {"default_ttl": "86400s", "memory_revision_default_ttl": "31536000s"},
    "generation_config": {
        "generation_trigger_config": {"generation_rule": {"idle_duration": "60s"}}
    },
}


def test_create_returns_the_bank_name_and_get_returns_its_config(sdk: agentplatform.Client) -> None:
    created = sdk.memory_banks.create(
        managed_semantic_memory_config=FULL_CONFIG,
        config={"display_name": "bank-a", "description": "d"},
    )
    assert created.name.startswith("projects/local/locations/local/reasoningEngines/")

    fetched = sdk.memory_banks.get(name=created.name)

    assert fetched.name == created.name
    assert (fetched.display_name, fetched.description) == ("bank-a", "d")
    config = fetched.managed_semantic_memory_config
    [customization] = config.unstructured_memory_configs
    assert customization.scope_keys == ["user_id"]
    assert customization.memory_topics[1].custom_memory_topic.label == "jargon"
    assert customization.consolidation_config.revisions_per_candidate_count == 2
    assert config.ttl_config.default_ttl == "86400s"
    assert config.generation_config.generation_trigger_config.generation_rule.idle_duration == "60s"
    assert config.similarity_search_config.embedding_model == "hash-64"
    assert fetched.create_time is not None


def test_get_accepts_the_short_name(sdk: agentplatform.Client, bank: str) -> None:
    short = "reasoningEngines/" + bank.rsplit("/", 1)[1]
    assert sdk.memory_banks.get(name=short).name == bank


def test_an_invalid_config_is_a_client_error_naming_the_rule(sdk: agentplatform.Client) -> None:
    both_ttls = {"ttl_config": {"default_ttl": "60s", "granular_ttl_config": {"create_ttl": "60s"}}}

    with pytest.raises(errors.ClientError) as caught:
        sdk.memory_banks.create(managed_semantic_memory_config=both_ttls)

    assert caught.value.code == 400
    assert caught.value.status == "INVALID_ARGUMENT"
    assert "default_ttl" in caught.value.message and "granular_ttl_config" in caught.value.message


def test_list_pages_through_every_bank(sdk: agentplatform.Client) -> None:
    names = {sdk.memory_banks.create(config={"display_name": f"page-{i}"}).name for i in range(3)}

    listed = [bank.name for bank in sdk.memory_banks.list(config={"page_size": 2})]

    assert names <= set(listed)
    assert len(listed) == len(set(listed))


def test_update_merges_fields_and_keeps_the_rest_of_the_config(sdk: agentplatform.Client) -> None:
    name = sdk.memory_banks.create(
        managed_semantic_memory_config=FULL_CONFIG, config={"display_name": "old"}
    ).name

    updated = sdk.memory_banks.update(name=name, config={"display_name": "new"})
    sdk.memory_banks.update(
        name=name,
        managed_semantic_memory_config={"ttl_config": {"memory_revision_default_ttl": "3600s"}},
    )

    assert updated.name == name
    fetched = sdk.memory_banks.get(name=name)
    assert fetched.display_name == "new"
    assert fetched.managed_semantic_memory_config.ttl_config.memory_revision_default_ttl == "3600s"
    assert fetched.managed_semantic_memory_config.unstructured_memory_configs[0].scope_keys == [
        "user_id"
    ]


def test_delete_of_a_bank_with_memories_needs_force(sdk: agentplatform.Client, bank: str) -> None:
    sdk.memory_banks.memories.create(name=bank, fact="I like blue.", scope={"user_id": "u"})

    with pytest.raises(errors.ClientError) as caught:
        sdk.memory_banks.delete(name=bank)
    assert caught.value.status == "FAILED_PRECONDITION"

    operation = sdk.memory_banks.delete(name=bank, force=True)

    assert operation.done is True
    with pytest.raises(errors.ClientError) as gone:
        sdk.memory_banks.get(name=bank)
    assert gone.value.code == 404


def test_async_banks_work_through_the_aio_client(open_server: Any, make_sdk: Any) -> None:
    async def scenario() -> tuple[str, str]:
        client = make_sdk(open_server.url).aio
        created = await client.memory_banks.create(
            config={"display_name": f"aio-{uuid.uuid4().hex[:4]}"}
        )
        fetched = await client.memory_banks.get(name=created.name)
        return created.name, fetched.display_name or ""

    name, display_name = asyncio.run(scenario())
    assert name.startswith("projects/") and display_name.startswith("aio-")
