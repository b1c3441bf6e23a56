"""Bank configs are validated as strictly as the service, on create and on update (issue 16).

Every config of `adk_memory.testing.bank_configs.INVALID_BANK_CONFIGS` is `InvalidArgument`
naming its field, and a refused update leaves the stored bank as it was. The boundaries just
inside each rule are accepted. The REST side of the same list: tests/server/test_sdk_bank_rules.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google.adk.models.registry import LLMRegistry

from adk_memory import Client, InvalidArgument
from adk_memory.filters import parse_filter
from adk_memory.generation.prompts import MANAGED_TOPICS
from adk_memory.testing.bank_configs import INVALID_BANK_CONFIGS, InvalidBankConfig
from adk_memory.testing.models import ScriptedMemoryModel
from adk_memory.types import MANAGED_TOPIC_NAMES

# The SDK's enum keeps an unknown name and warns; the refusal under test is ours.
pytestmark = pytest.mark.filterwarnings("ignore:.* is not a valid .*:UserWarning")

CASES = [pytest.param(case, id=case.id) for case in INVALID_BANK_CONFIGS]
JARGON, PREFERENCES = "jargon", "USER_PREFERENCES"
VALID_EDGES: dict[str, dict[str, Any]] = {
    "five-scope-keys": {"scope_keys": ["a", "b", "c", "d", "e"]},
    "one-revision": {"consolidation_config": {"revisions_per_candidate_count": 1}},
    "hundred-revisions": {"consolidation_config": {"revisions_per_candidate_count": 100}},
    "managed-and-custom-topics-with-matching-examples": {
        "memory_topics": [
            {"managed_memory_topic": {"managed_topic_enum": "user_preferences"}},
            {"custom_memory_topic": {"label": "jargon", "description": "Jargon the user uses."}},
        ],
        "generate_memories_examples": [
            {
                "conversation_source": {
                    "events": [{"content": {"role": "user", "parts": [{"text": "Ship it!"}]}}]
                },
                "generated_memories": [
                    {"fact": "I say 'ship it'.", "topics": [{"custom_memory_topic_label": JARGON}]},
                    {"fact": "I like tea.", "topics": [{"managed_memory_topic": PREFERENCES}]},
                ],
            }
        ],
    },
}


@pytest.fixture(scope="module")
def memory_client() -> Iterator[Client]:
    with Client(uri="memory://", embedding_model="hash-64") as made:
        yield made


@pytest.mark.parametrize("case", CASES)
def test_create_refuses_the_config_naming_the_field(
    memory_client: Client, case: InvalidBankConfig
) -> None:
    before = [bank.name for bank in memory_client.memory_banks.list()]

    with pytest.raises(InvalidArgument) as raised:
        memory_client.memory_banks.create(managed_semantic_memory_config=case.config)

    assert raised.value.field == case.field
    assert case.field in str(raised.value)
    assert [bank.name for bank in memory_client.memory_banks.list()] == before


@pytest.mark.parametrize("case", CASES)
def test_update_refuses_the_config_and_keeps_the_bank(
    memory_client: Client, case: InvalidBankConfig
) -> None:
    name = memory_client.memory_banks.create(
        managed_semantic_memory_config={"unstructured_memory_configs": [{"scope_keys": ["u"]}]}
    ).name
    before = memory_client.memory_banks.get(name=name)

    with pytest.raises(InvalidArgument) as raised:
        memory_client.memory_banks.update(name=name, managed_semantic_memory_config=case.config)

    assert raised.value.field == case.field
    assert memory_client.memory_banks.get(name=name) == before


def test_a_refused_update_leaves_the_stored_bank_on_every_backend(client: Client) -> None:
    name = client.memory_banks.create(
        managed_semantic_memory_config={"generation_config": {"model": "gemini-2.5-flash"}}
    ).name
    before = client.memory_banks.get(name=name)

    for case in (INVALID_BANK_CONFIGS[0], INVALID_BANK_CONFIGS[-1]):
        with pytest.raises(InvalidArgument):
            client.memory_banks.update(name=name, managed_semantic_memory_config=case.config)

    assert client.memory_banks.get(name=name) == before


@pytest.mark.parametrize("customization", VALID_EDGES.values(), ids=VALID_EDGES.keys())
def test_configs_just_inside_the_rules_are_accepted(
    memory_client: Client, customization: dict[str, Any]
) -> None:
    config = {"unstructured_memory_configs": [customization]}

    name = memory_client.memory_banks.create(managed_semantic_memory_config=config).name
    memory_client.memory_banks.update(name=name, managed_semantic_memory_config=config)

    stored = memory_client.memory_banks.get(name=name).managed_semantic_memory_config
    assert stored is not None and stored.unstructured_memory_configs is not None
    assert len(stored.unstructured_memory_configs) == 1


@pytest.mark.parametrize(
    "model",
    [
        "gemini-2.5-flash",
        "gemma-3-27b-it",
        "projects/p/locations/us-central1/publishers/google/models/gemini-2.5-flash",
    ],
)
def test_generation_models_adk_resolves_are_accepted(memory_client: Client, model: str) -> None:
    config = {"generation_config": {"model": model}}

    name = memory_client.memory_banks.create(managed_semantic_memory_config=config).name

    stored = memory_client.memory_banks.get(name=name).managed_semantic_memory_config
    assert stored is not None and stored.generation_config is not None
    assert stored.generation_config.model == model


class RegisteredMemoryModel(ScriptedMemoryModel):
    """A model class registered with ADK's LLMRegistry under its own name pattern."""

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"registered-memory-model-.*"]


def test_a_model_class_registered_with_adk_resolves(memory_client: Client) -> None:
    config = {"generation_config": {"model": "registered-memory-model-v1"}}
    with pytest.raises(InvalidArgument):
        memory_client.memory_banks.create(managed_semantic_memory_config=config)

    LLMRegistry.register(RegisteredMemoryModel)

    assert memory_client.memory_banks.create(managed_semantic_memory_config=config).name


def test_an_unknown_model_is_refused_on_update_even_when_only_it_changes(
    memory_client: Client,
) -> None:
    name = memory_client.memory_banks.create().name

    with pytest.raises(InvalidArgument, match="litellm") as raised:
        memory_client.memory_banks.update(
            name=name,
            managed_semantic_memory_config={
                "generation_config": {"model": "no-such-provider/some-model"}
            },
        )

    assert raised.value.field == "generation_config.model"


@pytest.mark.parametrize("name", ["NOT_A_TOPIC", "MANAGED_TOPIC_ENUM_UNSPECIFIED"])
def test_filters_prompts_and_configs_agree_on_the_managed_topics(
    memory_client: Client, name: str
) -> None:
    """One list: what a config refuses, a filter refuses, and the prompt describes the rest."""
    topic = {"managed_memory_topic": {"managed_topic_enum": name}}
    with pytest.raises(InvalidArgument):
        parse_filter(f"topics.managed_memory_topic = {name}")
    with pytest.raises(InvalidArgument):
        memory_client.memory_banks.create(
            managed_semantic_memory_config={
                "unstructured_memory_configs": [{"memory_topics": [topic]}]
            }
        )
    assert list(MANAGED_TOPICS) == list(MANAGED_TOPIC_NAMES)
    for known in MANAGED_TOPIC_NAMES:
        parse_filter(f"topics.managed_memory_topic = {known}")
