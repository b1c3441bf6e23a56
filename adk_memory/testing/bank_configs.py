"""Bank configs that every Memory Bank implementation must refuse, with the field to name.

Each `InvalidBankConfig` is a `managed_semantic_memory_config` (SDK form) that the service
documents as invalid or that could only degrade generation silently. Creating a bank with it,
or updating a bank to it, must be `InvalidArgument` naming `field`. Shared by the client tests
and the REST tests, so both refuse exactly the same list.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["INVALID_BANK_CONFIGS", "InvalidBankConfig"]


@dataclass(frozen=True, slots=True)
class InvalidBankConfig:
    """One refused config: a test id, the config, and the field the error must name."""

    id: str
    config: dict[str, Any]
    field: str


_CUSTOMIZATION = "customization_configs[0]"
_TOPIC = f"{_CUSTOMIZATION}.memory_topics[0]"
_EXAMPLE = f"{_CUSTOMIZATION}.generate_memories_examples[0]"


def _customization(**fields: Any) -> dict[str, Any]:
    return {"unstructured_memory_configs": [fields]}


def _managed(name: str) -> dict[str, Any]:
    return {"managed_memory_topic": {"managed_topic_enum": name}}


def _custom(label: str | None, description: str | None = "What to extract.") -> dict[str, Any]:
    topic = {"label": label, "description": description}
    given = {key: value for key, value in topic.items() if value is not None}
    return {"custom_memory_topic": given}


def _event(text: str) -> dict[str, Any]:
    return {"content": {"role": "user", "parts": [{"text": text}]}}


def _example(
    events: list[dict[str, Any]] | None = None, memories: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    example: dict[str, Any] = {"generated_memories": memories or []}
    if events is not None:
        example["conversation_source"] = {"events": events}
    return example


_JARGON = _custom("jargon", "Jargon the user uses.")
_MANAGED_PREFERENCES = {"managed_memory_topic": "USER_PREFERENCES"}
_CUSTOM_JARGON = {"custom_memory_topic_label": "jargon"}

INVALID_BANK_CONFIGS: list[InvalidBankConfig] = [
    InvalidBankConfig(
        "unknown-managed-topic",
        _customization(memory_topics=[_managed("NOT_A_TOPIC")]),
        f"{_TOPIC}.managed_memory_topic.managed_topic_enum",
    ),
    InvalidBankConfig(
        "unspecified-managed-topic",
        _customization(memory_topics=[_managed("MANAGED_TOPIC_ENUM_UNSPECIFIED")]),
        f"{_TOPIC}.managed_memory_topic.managed_topic_enum",
    ),
    InvalidBankConfig("empty-topic", _customization(memory_topics=[{}]), _TOPIC),
    InvalidBankConfig(
        "managed-and-custom-topic",
        _customization(memory_topics=[{**_managed("USER_PREFERENCES"), **_JARGON}]),
        _TOPIC,
    ),
    InvalidBankConfig(
        "custom-topic-without-label",
        _customization(memory_topics=[_custom(None)]),
        f"{_TOPIC}.custom_memory_topic.label",
    ),
    InvalidBankConfig(
        "custom-topic-with-blank-label",
        _customization(memory_topics=[_custom("  ")]),
        f"{_TOPIC}.custom_memory_topic.label",
    ),
    InvalidBankConfig(
        "custom-topic-without-description",
        _customization(memory_topics=[_custom("jargon", None)]),
        f"{_TOPIC}.custom_memory_topic.description",
    ),
    InvalidBankConfig(
        "duplicate-custom-labels",
        _customization(memory_topics=[_JARGON, _custom("jargon", "Other words.")]),
        f"{_CUSTOMIZATION}.memory_topics[1]",
    ),
    InvalidBankConfig(
        "duplicate-managed-topics",
        _customization(memory_topics=[_managed("USER_PREFERENCES"), _managed("user_preferences")]),
        f"{_CUSTOMIZATION}.memory_topics[1]",
    ),
    InvalidBankConfig(
        "custom-label-naming-a-managed-topic",
        _customization(memory_topics=[_custom("USER_PREFERENCES")]),
        f"{_TOPIC}.custom_memory_topic.label",
    ),
    InvalidBankConfig(
        "example-without-conversation-source",
        _customization(generate_memories_examples=[_example(None, [{"fact": "I like tea."}])]),
        f"{_EXAMPLE}.conversation_source",
    ),
    InvalidBankConfig(
        "example-without-events",
        _customization(generate_memories_examples=[_example([])]),
        f"{_EXAMPLE}.conversation_source",
    ),
    InvalidBankConfig(
        "example-event-without-content",
        _customization(generate_memories_examples=[_example([_event("Hi."), {}])]),
        f"{_EXAMPLE}.conversation_source.events[1].content",
    ),
    InvalidBankConfig(
        "example-with-empty-fact",
        _customization(
            generate_memories_examples=[_example([_event("I like tea.")], [{"fact": " "}])]
        ),
        f"{_EXAMPLE}.generated_memories[0].fact",
    ),
    InvalidBankConfig(
        "example-naming-an-undefined-topic",
        _customization(
            memory_topics=[_JARGON],
            generate_memories_examples=[
                _example(
                    [_event("I like tea.")],
                    [{"fact": "I like tea.", "topics": [_MANAGED_PREFERENCES]}],
                )
            ],
        ),
        f"{_EXAMPLE}.generated_memories[0].topics[0]",
    ),
    InvalidBankConfig(
        "example-naming-an-undefined-custom-label",
        _customization(
            generate_memories_examples=[
                _example(
                    [_event("Ship it.")],
                    [{"fact": "I say ship it.", "topics": [_CUSTOM_JARGON]}],
                )
            ],
        ),
        f"{_EXAMPLE}.generated_memories[0].topics[0]",
    ),
    *(
        InvalidBankConfig(
            f"revisions-per-candidate-{count}",
            _customization(consolidation_config={"revisions_per_candidate_count": count}),
            f"{_CUSTOMIZATION}.consolidation_config.revisions_per_candidate_count",
        )
        for count in (0, -1, 101, 1000)
    ),
    InvalidBankConfig(
        "six-scope-keys",
        _customization(scope_keys=["a", "b", "c", "d", "e", "f"]),
        f"{_CUSTOMIZATION}.scope_keys",
    ),
    InvalidBankConfig(
        "repeated-scope-keys",
        _customization(scope_keys=["user_id", "user_id"]),
        f"{_CUSTOMIZATION}.scope_keys",
    ),
    InvalidBankConfig(
        "structured-config-with-six-scope-keys",
        {
            "structured_memory_configs": [
                {
                    "scope_keys": ["a", "b", "c", "d", "e", "f"],
                    "schema_configs": [{"id": "profile", "memory_schema": {"type": "object"}}],
                }
            ]
        },
        "structured_memory_configs[0].scope_keys",
    ),
    InvalidBankConfig(
        "unknown-generation-model",
        {"generation_config": {"model": "no-such-model-anywhere"}},
        "generation_config.model",
    ),
]
