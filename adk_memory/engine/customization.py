"""The rules a bank's customization configs must follow (SPEC §3 "Banks", reference §4.3).

`validate_customization_configs` refuses, with `InvalidArgument` naming the field, every
customization the service would refuse or that would silently degrade generation: a topic that
is neither one managed enum nor one labelled and described custom topic, ambiguous labels,
few-shot examples the prompt could not show, out-of-range consolidation depth and `scope_keys`
that no scope could ever match. It only reads the config; generation trusts what it let through.
"""

from __future__ import annotations

from collections.abc import Sequence

from adk_memory import types
from adk_memory.engine.convert import topics_from_request
from adk_memory.errors import InvalidArgument
from adk_memory.scope import MAX_SCOPE_PAIRS

__all__ = ["MAX_REVISIONS_PER_CANDIDATE", "validate_customization_configs", "validate_scope_keys"]

MAX_REVISIONS_PER_CANDIDATE = 100
"""Upper bound of `consolidation_config.revisions_per_candidate_count` (ours: the service
documents only the default, 1; every revision considered is sent to the model)."""


def validate_customization_configs(
    configs: Sequence[types.MemoryBankCustomizationConfig] | None,
) -> None:
    """Raises InvalidArgument, naming the field, for the first broken rule."""
    seen_key_sets: set[frozenset[str]] = set()
    for index, customization in enumerate(configs or ()):
        where = f"customization_configs[{index}]"
        keys = validate_scope_keys(customization.scope_keys, where=where)
        if keys in seen_key_sets:
            which = "default config (no scope_keys)" if not keys else f"config for {sorted(keys)}"
            raise InvalidArgument(
                f"{where}: only one {which} is allowed per bank.", field=f"{where}.scope_keys"
            )
        seen_key_sets.add(keys)
        labels = _topic_labels(customization.memory_topics, where=f"{where}.memory_topics")
        _check_examples(
            customization.generate_memories_examples,
            labels,
            where=f"{where}.generate_memories_examples",
        )
        _check_revisions_per_candidate(customization, where=where)


def validate_scope_keys(keys: Sequence[str] | None, *, where: str) -> frozenset[str]:
    """The key set of a config's `scope_keys`: unique, non-empty, at most a scope's 5 keys."""
    field = f"{where}.scope_keys"
    given = list(keys or ())
    if len(set(given)) != len(given) or any(not key for key in given):
        raise InvalidArgument(f"{field} must be unique, non-empty keys.", field=field)
    if len(given) > MAX_SCOPE_PAIRS:
        raise InvalidArgument(
            f"{field} has {len(given)} keys; a scope holds at most {MAX_SCOPE_PAIRS}, so this "
            "config could never apply.",
            field=field,
        )
    return frozenset(given)


def _topic_labels(
    topics: Sequence[types.MemoryBankCustomizationConfigMemoryTopic] | None, *, where: str
) -> frozenset[str]:
    """The labels the config's topics define (the managed ones when it lists none)."""
    if not topics:
        return frozenset(types.MANAGED_TOPIC_NAMES)
    labels: list[str] = []
    for index, topic in enumerate(topics):
        label = _topic_label(topic, where=f"{where}[{index}]")
        if label in labels:
            raise InvalidArgument(
                f"{where}[{index}] repeats the topic {label[:40]!r}; topic filters and the model's "
                "labels would be ambiguous. Give each topic once, with a distinct label.",
                field=f"{where}[{index}]",
            )
        labels.append(label)
    return frozenset(labels)


def _topic_label(topic: types.MemoryBankCustomizationConfigMemoryTopic, *, where: str) -> str:
    managed, custom = topic.managed_memory_topic, topic.custom_memory_topic
    if managed is not None and custom is None:
        return _managed_name(managed.managed_topic_enum, where=f"{where}.managed_memory_topic")
    if custom is None or managed is not None:
        raise InvalidArgument(
            f"{where} must set exactly one of managed_memory_topic and custom_memory_topic.",
            field=where,
        )
    for part in ("label", "description"):
        if not (getattr(custom, part) or "").strip():
            raise InvalidArgument(
                f"{where}.custom_memory_topic.{part} is required: the extraction prompt shows "
                "the model each custom topic's label and what to extract for it.",
                field=f"{where}.custom_memory_topic.{part}",
            )
    label = custom.label or ""
    if label.strip().upper() in types.MANAGED_TOPIC_NAMES:
        raise InvalidArgument(
            f"{where}.custom_memory_topic.label {label[:40]!r} is the name of a managed topic; use "
            "managed_memory_topic for it, or choose another label.",
            field=f"{where}.custom_memory_topic.label",
        )
    return label


def _managed_name(value: object, *, where: str) -> str:
    field = f"{where}.managed_topic_enum"
    name = str(getattr(value, "value", value) or "").upper()
    if name not in types.MANAGED_TOPIC_NAMES:
        raise InvalidArgument(
            f"{field}: {name[:40] or 'an empty value'!r} is not a managed topic; use one of "
            f"{', '.join(types.MANAGED_TOPIC_NAMES)}.",
            field=field,
        )
    return name


def _check_examples(
    examples: Sequence[types.MemoryBankCustomizationConfigGenerateMemoriesExample] | None,
    labels: frozenset[str],
    *,
    where: str,
) -> None:
    for index, example in enumerate(examples or ()):
        here = f"{where}[{index}]"
        _check_example_conversation(example.conversation_source, where=here)
        for fact_index, generated in enumerate(example.generated_memories or ()):
            memory_where = f"{here}.generated_memories[{fact_index}]"
            if not (generated.fact or "").strip():
                raise InvalidArgument(
                    f"{memory_where}.fact must not be empty (an example that should teach "
                    "'nothing to extract' has an empty generated_memories list).",
                    field=f"{memory_where}.fact",
                )
            _check_example_topics(generated.topics, labels, where=f"{memory_where}.topics")


def _check_example_conversation(
    source: types.MemoryBankCustomizationConfigGenerateMemoriesExampleConversationSource | None,
    *,
    where: str,
) -> None:
    field = f"{where}.conversation_source"
    if source is None or not source.events:
        raise InvalidArgument(
            f"{field} is required: a few-shot example shows the model a conversation "
            "(events with content) and the memories expected from it.",
            field=field,
        )
    for index, event in enumerate(source.events):
        content = event.content
        if content is None or not any((part.text or "").strip() for part in content.parts or ()):
            raise InvalidArgument(
                f"{field}.events[{index}].content must hold text (role and parts[].text).",
                field=f"{field}.events[{index}].content",
            )


def _check_example_topics(
    topics: Sequence[types.MemoryTopicId] | None, labels: frozenset[str], *, where: str
) -> None:
    for index, ref in enumerate(topics_from_request(topics, field=where)):
        label = ref.managed or ref.custom or ""
        if label not in labels:
            raise InvalidArgument(
                f"{where}[{index}]: the config has no topic {label[:40]!r}; its topics are "
                f"{', '.join(sorted(labels))}.",
                field=f"{where}[{index}]",
            )


def _check_revisions_per_candidate(
    customization: types.MemoryBankCustomizationConfig, *, where: str
) -> None:
    consolidation = customization.consolidation_config
    count = consolidation.revisions_per_candidate_count if consolidation else None
    if count is not None and not 1 <= count <= MAX_REVISIONS_PER_CANDIDATE:
        field = f"{where}.consolidation_config.revisions_per_candidate_count"
        raise InvalidArgument(
            f"{field} must be between 1 and {MAX_REVISIONS_PER_CANDIDATE} (got {count}); leave "
            "it unset for the default, 1 (only the latest revision).",
            field=field,
        )
