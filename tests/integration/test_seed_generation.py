"""The seeds' generation snippets, with only import and client lines changed and a scripted model.

Seed 001/003 (`memory_banks`) and 002 (`agent_engines.memories`) generate with metadata; seed 004
generates through `agent_engines.memories.generate` on a bank configured with the coffee-shop
custom topic and few-shot examples, in dictionary and class form.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterator
from typing import Any

import pytest

from adk_memory import Client
from adk_memory.testing.models import ScriptedMemoryModel

SCOPE = {"user_id": "123"}
FEEDBACK = [
    {"content": {"role": "model", "parts": [{"text": "Welcome back to The Daily Grind!"}]}},
    {
        "content": {
            "role": "user",
            "parts": [{"text": "The oat latte was great but the music was too loud."}],
        }
    },
]


@pytest.fixture
def model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel()


@pytest.fixture
def client(store_uri: str, model: ScriptedMemoryModel) -> Iterator[Client]:
    with Client(uri=store_uri, embedding_model="hash-64", generation_model=model) as made:
        yield made


def script(model: ScriptedMemoryModel, *facts: tuple[str, str]) -> None:
    model.extractions.append(
        {"memories": [{"fact": fact, "topics": [topic]} for fact, topic in facts]}
    )
    model.consolidations.append(
        {"actions": [{"fact_index": i, "action": "CREATE"} for i in range(len(facts))]}
    )


@pytest.mark.parametrize("spelling", ["memory_banks", "agent_engines"])
def test_seed_001_002_generate_with_metadata(
    client: Client, model: ScriptedMemoryModel, spelling: str
) -> None:
    from adk_memory import types

    metadata = {
        "my_string_key": types.MemoryMetadataValue(string_value="my_string_value"),
        "my_double_key": types.MemoryMetadataValue(double_value=123.456),
        "my_boolean_key": types.MemoryMetadataValue(bool_value=True),
        "my_timestamp_key": types.MemoryMetadataValue(
            timestamp_value=datetime.datetime(2027, 1, 1, 12, 30, 00, tzinfo=datetime.timezone.utc)
        ),
    }
    bank = client.memory_banks.create().name
    script(model, ("I like blue.", "USER_PREFERENCES"))
    memories = (
        client.memory_banks.memories
        if spelling == "memory_banks"
        else client.agent_engines.memories
    )
    memories.generate(
        name=bank,
        scope=SCOPE,
        direct_contents_source={
            "events": [{"content": {"role": "user", "parts": [{"text": "I like blue."}]}}]
        },
        config={"metadata": metadata},
    )
    [hit] = list(client.memory_banks.memories.retrieve(name=bank, scope=SCOPE))
    assert hit.memory.fact == "I like blue."
    assert hit.memory.metadata["my_double_key"].double_value == 123.456
    assert hit.memory.metadata["my_timestamp_key"].timestamp_value == datetime.datetime(
        2027, 1, 1, 12, 30, tzinfo=datetime.timezone.utc
    )
    groups = [{"filters": [{"key": "my_boolean_key", "value": {"bool_value": True}}]}]
    assert (
        len(
            list(
                client.memory_banks.memories.retrieve(
                    name=bank, scope=SCOPE, config={"filter_groups": groups}
                )
            )
        )
        == 1
    )


def coffee_shop_config_dict() -> dict[str, Any]:
    return {
        "customization_configs": [
            {
                "memory_topics": [
                    {"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}},
                    {
                        "custom_memory_topic": {
                            "label": "business_feedback",
                            "description": """Specific user feedback about their experience at
the coffee shop. This includes opinions on drinks, food, pastries, ambiance,
staff friendliness, service speed, cleanliness, and any suggestions for
improvement.""",
                        }
                    },
                ],
                "generate_memories_examples": [
                    {
                        "conversationSource": {
                            "events": [
                                {
                                    "content": {
                                        "role": "model",
                                        "parts": [
                                            {
                                                "text": "Welcome back to The Daily Grind! We'd love to hear your feedback on your visit."
                                            }
                                        ],
                                    }
                                },
                                {
                                    "content": {
                                        "role": "user",
                                        "parts": [
                                            {
                                                "text": "Hey. The drip coffee was a bit lukewarm today, which was a bummer. Also, the music was way too loud, I could barely hear my friend."
                                            }
                                        ],
                                    }
                                },
                            ]
                        },
                        "generatedMemories": [
                            {"fact": "The user reported that the drip coffee was lukewarm."},
                            {"fact": "The user felt the music in the shop was too loud."},
                        ],
                    },
                    {
                        "conversationSource": {
                            "events": [
                                {
                                    "content": {
                                        "role": "model",
                                        "parts": [
                                            {
                                                "text": "Good morning! What can I get for you at The Daily Grind?"
                                            }
                                        ],
                                    }
                                },
                                {
                                    "content": {
                                        "role": "user",
                                        "parts": [{"text": "Thanks for the coffee."}],
                                    }
                                },
                            ]
                        },
                        "generatedMemories": [],
                    },
                ],
                "enable_third_person_memories": True,
            }
        ]
    }


def coffee_shop_config_classes() -> Any:
    from google.genai.types import Content, Part

    from adk_memory.types import MemoryBankCustomizationConfig as CustomizationConfig
    from adk_memory.types import (
        MemoryBankCustomizationConfigGenerateMemoriesExample as GenerateMemoriesExample,
    )
    from adk_memory.types import (
        MemoryBankCustomizationConfigGenerateMemoriesExampleConversationSource as ConversationSource,
    )
    from adk_memory.types import (
        MemoryBankCustomizationConfigGenerateMemoriesExampleConversationSourceEvent as ConversationSourceEvent,
    )
    from adk_memory.types import (
        MemoryBankCustomizationConfigGenerateMemoriesExampleGeneratedMemory as ExampleGeneratedMemory,
    )
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopic as MemoryTopic
    from adk_memory.types import (
        MemoryBankCustomizationConfigMemoryTopicCustomMemoryTopic as CustomMemoryTopic,
    )
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfig as MemoryBankConfig

    example = GenerateMemoriesExample(
        conversation_source=ConversationSource(
            events=[
                ConversationSourceEvent(
                    content=Content(
                        role="model",
                        parts=[
                            Part(
                                text="Welcome back to The Daily Grind! We'd love to hear your feedback on your visit."
                            )
                        ],
                    )
                ),
                ConversationSourceEvent(
                    content=Content(
                        role="user",
                        parts=[
                            Part(
                                text="Hey. The drip coffee was a bit lukewarm today, which was a bummer. Also, the music was way too loud, I could barely hear my friend."
                            )
                        ],
                    )
                ),
            ]
        ),
        generated_memories=[
            ExampleGeneratedMemory(fact="The user reported that the drip coffee was lukewarm."),
            ExampleGeneratedMemory(fact="The user felt the music in the shop was too loud."),
        ],
    )
    memory_topic = MemoryTopic(
        custom_memory_topic=CustomMemoryTopic(
            label="business_feedback",
            description="""Specific user feedback about their experience at
the coffee shop. This includes opinions on drinks, food, pastries, ambiance,
staff friendliness, service speed, cleanliness, and any suggestions for
improvement.""",
        )
    )
    return MemoryBankConfig(
        customization_configs=[
            CustomizationConfig(
                memory_topics=[memory_topic],
                generate_memories_examples=[example],
                enable_third_person_memories=True,
            )
        ]
    )


@pytest.mark.parametrize("form", ["dictionary", "classes"])
def test_seed_004_coffee_shop_generation(
    client: Client, model: ScriptedMemoryModel, form: str
) -> None:
    memory_bank_config = (
        coffee_shop_config_dict() if form == "dictionary" else coffee_shop_config_classes()
    )
    agent_engine = client.agent_engines.create(
        config={"context_spec": {"memory_bank_config": memory_bank_config}}
    )
    script(
        model,
        ("The user loved the oat latte.", "business_feedback"),
        ("The user found the music too loud.", "business_feedback"),
    )
    # Generate memories using your Memory Bank instance.
    client.agent_engines.memories.generate(
        # `name` should have the format `projects/.../locations/.../reasoningEngines/...`.
        name=agent_engine.api_resource.name,
        scope=SCOPE,
        direct_contents_source={"events": FEEDBACK},
    )
    prompt = model.prompt_text(model.requests[0])
    assert (
        "business_feedback: Specific user feedback about their experience at the coffee shop."
        in prompt
    )
    assert "The user reported that the drip coffee was lukewarm." in prompt
    assert "third person" in prompt
    assert ("Thanks for the coffee." in prompt) == (form == "dictionary")  # only that form has it
    stored = client.memory_banks.memories.retrieve(
        name=agent_engine.api_resource.name,
        scope=SCOPE,
        config={"filter": "topics.custom_memory_topic_label: business_feedback"},
    )
    assert sorted(hit.memory.fact for hit in stored) == [
        "The user found the music too loud.",
        "The user loved the oat latte.",
    ]
