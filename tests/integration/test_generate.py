"""GenerateMemories with a scripted model, on every backend."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from adk_memory import AsyncClient, Client, InvalidArgument, ModelUnavailable, types
from adk_memory.testing.models import ScriptedMemoryModel

SCOPE = {"user_id": "u1"}
EVENTS = {
    "events": [
        {"content": {"role": "user", "parts": [{"text": "I love green tea and I live in Berlin."}]}}
    ]
}


def extraction(*facts: tuple[str, list[str]] | str, forget: tuple[str, ...] = ()) -> dict[str, Any]:
    memories = [
        {"fact": fact, "topics": ["USER_PREFERENCES"]}
        if isinstance(fact, str)
        else {"fact": fact[0], "topics": fact[1]}
        for fact in facts
    ]
    memories += [
        {"fact": fact, "topics": ["EXPLICIT_INSTRUCTIONS"], "forget": True} for fact in forget
    ]
    return {"memories": memories}


def creates(*facts: str) -> dict[str, Any]:
    return {
        "actions": [
            {"fact_index": index, "action": "CREATE", "fact": fact}
            for index, fact in enumerate(facts)
        ]
    }


@pytest.fixture
def model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel()


@pytest.fixture
def gen_client(store_uri: str, model: ScriptedMemoryModel) -> Iterator[Client]:
    with Client(uri=store_uri, embedding_model="hash-64", generation_model=model) as made:
        yield made


@pytest.fixture
def bank(gen_client: Client) -> str:
    return gen_client.memory_banks.create().name


def generate(
    client: Client, bank: str, scope: dict[str, str] = SCOPE, **kwargs: Any
) -> types.GenerateMemoriesOperation:
    if "direct_memories_source" not in kwargs and "direct_contents_source" not in kwargs:
        kwargs["direct_contents_source"] = EVENTS
    return client.memory_banks.memories.generate(name=bank, scope=scope, **kwargs)


def actions(operation: types.GenerateMemoriesOperation) -> list[tuple[str, str]]:
    return [
        (item.action.value, item.memory.fact)
        for item in operation.response.generated_memories or []
    ]


def stored(client: Client, bank: str, scope: dict[str, str] = SCOPE) -> list[str]:
    return sorted(
        hit.memory.fact for hit in client.memory_banks.memories.retrieve(name=bank, scope=scope)
    )


def test_create_update_delete_and_noop(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += [extraction("I love green tea.", "I live in Berlin.")]
    model.consolidations += [creates("I love green tea.", "I live in Berlin.")]
    first = generate(gen_client, bank)
    assert sorted(actions(first)) == [
        ("CREATED", "I live in Berlin."),
        ("CREATED", "I love green tea."),
    ]
    assert first.done and first.metadata["llmCalls"] == 2
    ids = {
        item.memory.fact: item.memory.name.rsplit("/", 1)[-1]
        for item in first.response.generated_memories
    }

    model.extractions += [extraction("I moved to Munich.", "I love green tea.")]
    model.consolidations += [
        {
            "actions": [
                {
                    "fact_index": 0,
                    "action": "UPDATE",
                    "memory_id": ids["I live in Berlin."],
                    "fact": "I live in Munich.",
                },
                {"fact_index": 1, "action": "NONE"},
            ]
        }
    ]
    second = generate(gen_client, bank)
    assert actions(second) == [("UPDATED", "I live in Munich.")]
    assert second.response.generated_memories[0].previous_revision.endswith(
        "/revisions/" + second.response.generated_memories[0].previous_revision.rsplit("/", 1)[-1]
    )
    assert stored(gen_client, bank) == ["I live in Munich.", "I love green tea."]

    model.extractions += [extraction(forget=("I love green tea.",))]
    model.consolidations += [
        {"actions": [{"fact_index": 0, "action": "DELETE", "memory_id": ids["I love green tea."]}]}
    ]
    third = generate(gen_client, bank)
    assert actions(third) == [("DELETED", "I love green tea.")]
    assert stored(gen_client, bank) == ["I live in Munich."]

    memories = gen_client.memory_banks.memories
    for operation in (second, third):
        [item] = operation.response.generated_memories
        memories.rollback(
            name=item.memory.name, target_revision_id=item.previous_revision.rsplit("/", 1)[-1]
        )
    assert stored(gen_client, bank) == ["I live in Berlin.", "I love green tea."]


def test_revisions_record_labels_and_extracted_memories(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += [
        {
            "memories": [
                {"fact": "I love green tea.", "topics": ["USER_PREFERENCES"], "context": "said so"}
            ]
        }
    ]
    model.consolidations += [creates("I love green tea.")]
    operation = generate(gen_client, bank, config={"revision_labels": {"source": "chat"}})
    name = operation.response.generated_memories[0].memory.name
    [revision] = list(gen_client.memory_banks.memories.revisions.list(name=name))
    assert revision.labels == {"source": "chat"}
    assert [(m.fact, m.context) for m in revision.extracted_memories] == [
        ("I love green tea.", "said so")
    ]
    topics = gen_client.memory_banks.memories.get(name=name).topics
    assert [t.managed_memory_topic for t in topics] == [types.ManagedTopicEnum.USER_PREFERENCES]


def test_empty_extraction_makes_no_second_call(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += [{"memories": []}]
    operation = generate(gen_client, bank)
    assert actions(operation) == []
    assert operation.metadata["llmCalls"] == 1
    assert [model.kind_of(r) for r in model.requests] == ["extraction"]


def test_two_calls_whatever_the_number_of_facts(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    facts = [f"Fact number {i} about me." for i in range(12)]
    model.extractions += [extraction(*facts)]
    model.consolidations += [creates(*facts)]
    operation = generate(gen_client, bank)
    assert len(actions(operation)) == 12
    assert len(model.requests) == 2 and operation.metadata["llmCalls"] == 2
    assert (
        operation.metadata["promptTokens"] > 0
        and operation.metadata["totalTokens"] > operation.metadata["promptTokens"]
    )


def test_malformed_output_is_retried_then_fails_with_nothing_applied(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += ['{"memories": [{"fact": "I like tea."', extraction("I like tea.")]
    model.consolidations += [
        "not json",
        {"actions": [{"fact_index": 7, "action": "CREATE"}]},
        '{"actions": "nope"}',
    ]
    with pytest.raises(ModelUnavailable, match="no valid answer after 3 attempts"):
        generate(gen_client, bank)
    assert stored(gen_client, bank) == []
    assert [model.kind_of(r) for r in model.requests] == ["extraction"] * 2 + ["consolidation"] * 3


def test_retry_success_is_reported_apart(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += ["{", extraction("I like tea.")]
    model.consolidations += [creates("I like tea.")]
    operation = generate(gen_client, bank)
    assert operation.metadata["llmCalls"] == 2 and operation.metadata["llmRetries"] == 1
    assert stored(gen_client, bank) == ["I like tea."]


def test_hallucinated_or_foreign_memory_id_is_refused(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    other = gen_client.memory_banks.memories.create(
        name=bank, fact="I like tea.", scope={"user_id": "u2"}
    ).response
    foreign = other.name.rsplit("/", 1)[-1]
    model.extractions += [extraction("I like coffee.")]
    bad = {"actions": [{"fact_index": 0, "action": "DELETE", "memory_id": foreign}]}
    model.consolidations += [
        bad,
        bad,
        {"actions": [{"fact_index": 0, "action": "UPDATE", "memory_id": "made-up", "fact": "x"}]},
    ]
    with pytest.raises(ModelUnavailable, match="not one of the listed memories"):
        generate(gen_client, bank)
    assert stored(gen_client, bank, {"user_id": "u2"}) == ["I like tea."]
    assert stored(gen_client, bank) == []


def test_disable_consolidation_adds_every_fact(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    gen_client.memory_banks.memories.create(name=bank, fact="I like tea.", scope=SCOPE)
    model.extractions += [extraction("I like tea.", "I like cake.", forget=("my address",))]
    operation = generate(gen_client, bank, config={"disable_consolidation": True})
    assert sorted(actions(operation)) == [("CREATED", "I like cake."), ("CREATED", "I like tea.")]
    assert stored(gen_client, bank) == ["I like cake.", "I like tea.", "I like tea."]
    assert [model.kind_of(r) for r in model.requests] == ["extraction"]


def test_direct_memories_skip_extraction(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.consolidations += [creates("I like tea.")]
    source = {
        "direct_memories": [
            {"fact": "I like tea.", "topics": [{"custom_memory_topic_label": "drinks"}]}
        ]
    }
    operation = generate(gen_client, bank, direct_memories_source=source)
    assert actions(operation) == [("CREATED", "I like tea.")]
    assert [model.kind_of(r) for r in model.requests] == ["consolidation"]
    with pytest.raises(InvalidArgument, match="At most 5"):
        generate(
            gen_client,
            bank,
            direct_memories_source={"direct_memories": [{"fact": f"f{i}"} for i in range(6)]},
        )


@pytest.mark.parametrize(
    ("strategy", "expected"),
    [("OVERWRITE", {"b": "new"}), ("MERGE", {"a": "old", "b": "new"}), (None, {"b": "new"})],
)
def test_metadata_merge_strategies_on_update(
    gen_client: Client,
    bank: str,
    model: ScriptedMemoryModel,
    strategy: str | None,
    expected: dict[str, str],
) -> None:
    value = types.MemoryMetadataValue
    existing = gen_client.memory_banks.memories.create(
        name=bank,
        fact="I like tea.",
        scope=SCOPE,
        config={"metadata": {"a": value(string_value="old"), "b": value(string_value="older")}},
    ).response
    model.consolidations += [
        {
            "actions": [
                {
                    "fact_index": 0,
                    "action": "UPDATE",
                    "memory_id": existing.name.rsplit("/", 1)[-1],
                    "fact": "I like green tea.",
                }
            ]
        }
    ]
    config: dict[str, Any] = {"metadata": {"b": {"string_value": "new"}}}
    if strategy:
        config["metadata_merge_strategy"] = strategy
    generate(
        gen_client,
        bank,
        direct_memories_source={"direct_memories": [{"fact": "I like green tea."}]},
        config=config,
    )
    got = gen_client.memory_banks.memories.get(name=existing.name).metadata
    assert {key: item.string_value for key, item in got.items()} == expected


def test_require_exact_match_offers_only_same_metadata_candidates(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    value = types.MemoryMetadataValue
    memories = gen_client.memory_banks.memories
    same = memories.create(
        name=bank,
        fact="I like tea.",
        scope=SCOPE,
        config={"metadata": {"src": value(string_value="a")}},
    ).response
    memories.create(
        name=bank,
        fact="I like tea!",
        scope=SCOPE,
        config={"metadata": {"src": value(string_value="b")}},
    )
    memories.create(name=bank, fact="I like tea?", scope=SCOPE)
    model.consolidations += [{"actions": [{"fact_index": 0, "action": "NONE"}]}]
    generate(
        gen_client,
        bank,
        direct_memories_source={"direct_memories": [{"fact": "I like tea"}]},
        config={
            "metadata": {"src": {"string_value": "a"}},
            "metadata_merge_strategy": "REQUIRE_EXACT_MATCH",
        },
    )
    prompt = model.prompt_text(model.requests[-1])
    assert same.name.rsplit("/", 1)[-1] in prompt
    assert prompt.count("id=") == 1


def test_generate_ttls_and_revision_ttl(gen_client: Client, model: ScriptedMemoryModel) -> None:
    bank = gen_client.memory_banks.create(
        managed_semantic_memory_config={
            "ttl_config": {
                "granular_ttl_config": {
                    "generate_created_ttl": "3600s",
                    "generate_updated_ttl": "7200s",
                }
            }
        }
    ).name
    model.consolidations += [creates("I like tea.")]
    created = (
        generate(
            gen_client,
            bank,
            direct_memories_source={"direct_memories": [{"fact": "I like tea."}]},
            config={"revision_ttl": "60s"},
        )
        .response.generated_memories[0]
        .memory
    )
    assert 3590 < (created.expire_time - created.create_time).total_seconds() <= 3600
    [revision] = list(gen_client.memory_banks.memories.revisions.list(name=created.name))
    assert 50 < (revision.expire_time - revision.create_time).total_seconds() <= 60
    model.consolidations += [
        {
            "actions": [
                {
                    "fact_index": 0,
                    "action": "UPDATE",
                    "memory_id": created.name.rsplit("/", 1)[-1],
                    "fact": "I like tea.",
                }
            ]
        }
    ]
    updated = (
        generate(
            gen_client, bank, direct_memories_source={"direct_memories": [{"fact": "I like tea."}]}
        )
        .response.generated_memories[0]
        .memory
    )
    assert 7190 < (updated.expire_time - updated.update_time).total_seconds() <= 7200


def test_prompt_carries_topics_examples_perspective_and_allowed_topics(
    gen_client: Client, model: ScriptedMemoryModel
) -> None:
    bank = gen_client.memory_banks.create(
        managed_semantic_memory_config={
            "customization_configs": [
                {
                    "scope_keys": ["user_id"],
                    "enable_third_person_memories": True,
                    "memory_topics": [
                        {"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}},
                        {
                            "custom_memory_topic": {
                                "label": "business_feedback",
                                "description": "Feedback about the coffee shop.",
                            }
                        },
                        {
                            "custom_memory_topic": {
                                "label": "jargon",
                                "description": "Words the user invents.",
                            }
                        },
                    ],
                    "generate_memories_examples": [
                        {
                            "conversation_source": {
                                "events": [
                                    {
                                        "content": {
                                            "role": "user",
                                            "parts": [{"text": "The drip coffee was lukewarm."}],
                                        }
                                    }
                                ]
                            },
                            "generated_memories": [
                                {"fact": "The user reported that the drip coffee was lukewarm."}
                            ],
                        },
                        {
                            "conversation_source": {
                                "events": [
                                    {
                                        "content": {
                                            "role": "user",
                                            "parts": [{"text": "Thanks for the coffee."}],
                                        }
                                    }
                                ]
                            },
                            "generated_memories": [],
                        },
                    ],
                },
                {
                    "memory_topics": [
                        {
                            "custom_memory_topic": {
                                "label": "default_only",
                                "description": "Only in the default config.",
                            }
                        }
                    ]
                },
            ]
        }
    ).name
    model.extractions += [{"memories": []}, {"memories": []}]
    generate(
        gen_client,
        bank,
        config={
            "allowed_topics": [
                {"custom_memory_topic_label": "business_feedback"},
                {"managed_memory_topic": "USER_PERSONAL_INFO"},
            ]
        },
    )
    prompt = model.prompt_text(model.requests[0])
    assert "business_feedback: Feedback about the coffee shop." in prompt
    assert (
        "USER_PERSONAL_INFO" in prompt and "jargon" not in prompt and "default_only" not in prompt
    )
    assert (
        "The user reported that the drip coffee was lukewarm." in prompt
        and "Thanks for the coffee." in prompt
    )
    assert "third person" in prompt and "I love green tea" in prompt
    generate(gen_client, bank, scope={"user_id": "u1", "session": "s"})
    other = model.prompt_text(model.requests[1])
    assert "default_only" in other and "business_feedback" not in other and "first person" in other
    with pytest.raises(InvalidArgument, match="allowed_topics"):
        generate(
            gen_client,
            bank,
            config={"allowed_topics": [{"custom_memory_topic_label": "default_only"}]},
        )


def test_default_config_uses_the_four_managed_topics(
    gen_client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    model.extractions += [{"memories": []}]
    generate(gen_client, bank)
    prompt = model.prompt_text(model.requests[0])
    for topic in (
        "USER_PERSONAL_INFO",
        "USER_PREFERENCES",
        "KEY_CONVERSATION_DETAILS",
        "EXPLICIT_INSTRUCTIONS",
    ):
        assert topic in prompt


def test_crash_before_the_write_leaves_nothing(
    gen_client: Client, bank: str, model: ScriptedMemoryModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    model.extractions += [extraction("I like tea.", "I like cake.")]
    model.consolidations += [creates("I like tea.", "I like cake.")]
    store = gen_client.aio.engine.store

    async def crash(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("store went away")

    monkeypatch.setattr(store, "apply", crash)
    with pytest.raises(ConnectionError):
        generate(gen_client, bank)
    monkeypatch.undo()
    assert stored(gen_client, bank) == []


async def test_concurrent_generates_on_one_scope_do_not_lose_updates(store_uri: str) -> None:
    """Each request updates the single memory it finds; serialised, every update is kept."""

    def consolidate_latest(request: Any) -> dict[str, Any]:
        text = ScriptedMemoryModel().prompt_text(request)
        memory_id = text.split("id=")[1].split(":")[0] if "id=" in text else None
        new_fact = text.split('[0] {"fact": "')[1].split('"')[0]
        if memory_id is None:
            return {"actions": [{"fact_index": 0, "action": "CREATE", "fact": new_fact}]}
        old = text.split("id=")[1].split(': "')[1].split('"')[0]
        return {
            "actions": [
                {
                    "fact_index": 0,
                    "action": "UPDATE",
                    "memory_id": memory_id,
                    "fact": f"{old} +{new_fact[-1]}",
                }
            ]
        }

    model = ScriptedMemoryModel(consolidate=consolidate_latest)
    async with AsyncClient(store_uri, embedding_model="hash-64", generation_model=model) as client:
        bank = (await client.memory_banks.create()).name
        await client.memory_banks.memories.generate(
            name=bank,
            scope=SCOPE,
            direct_memories_source={"direct_memories": [{"fact": "count 0"}]},
        )
        await asyncio.gather(
            *(
                client.memory_banks.memories.generate(
                    name=bank,
                    scope=SCOPE,
                    direct_memories_source={"direct_memories": [{"fact": f"count {i}"}]},
                )
                for i in range(1, 6)
            )
        )
        pager = await client.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
        [only] = [hit.memory.fact async for hit in pager]
        assert sorted(only.split(" +")[1:]) == ["1", "2", "3", "4", "5"]


def test_session_source_reads_the_adk_session_window(store_uri: str) -> None:
    from google.adk.events import Event
    from google.adk.sessions import InMemorySessionService
    from google.genai import types as genai_types

    sessions = InMemorySessionService()

    async def prepare() -> Any:
        session = await sessions.create_session(app_name="42", user_id="u1", session_id="s1")
        for index, text in enumerate(["early", "inside", "late"]):
            event = Event(
                author="user",
                timestamp=1000.0 + index * 100,
                content=genai_types.Content(role="user", parts=[genai_types.Part(text=text)]),
            )
            await sessions.append_event(session, event)
        return session

    asyncio.run(prepare())
    model = ScriptedMemoryModel(extractions=[{"memories": []}])
    with Client(
        store_uri, embedding_model="hash-64", generation_model=model, session_service=sessions
    ) as client:
        bank = client.memory_banks.create().name
        from datetime import UTC, datetime

        source = {
            "session": "projects/p/locations/l/reasoningEngines/42/sessions/s1",
            "start_time": datetime.fromtimestamp(1050, UTC),
            "end_time": datetime.fromtimestamp(1200, UTC),
        }
        client.memory_banks.memories.generate(
            name=bank, scope={"user_id": "u1"}, vertex_session_source=source
        )
        prompt = model.prompt_text(model.requests[0])
        assert "user: inside" in prompt and "early" not in prompt and "late" not in prompt
