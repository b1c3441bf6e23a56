"""GenerateMemories and IngestEvents through the official SDK against the REST server.

The server's client has a scripted generation model (`adk_memory.testing.models`), so the LLM
answers are fixed; everything else is the real engine behind the real REST API.
"""

from __future__ import annotations

import time
from typing import Any

import agentplatform
import httpx
import pytest
from agentplatform import types

SCOPE = {"user_id": "gen-user"}


def test_generate_direct_memories_without_consolidation_creates_each_fact(
    sdk: agentplatform.Client, bank: str, model: Any
) -> None:
    operation = sdk.memory_banks.memories.generate(
        name=bank,
        direct_memories_source={
            "direct_memories": [{"fact": "I like tea."}, {"fact": "I have a cat."}]
        },
        scope=SCOPE,
        config={"disable_consolidation": True, "metadata": {"source": {"string_value": "test"}}},
    )

    assert operation.done is True
    generated = operation.response.generated_memories
    assert [g.action for g in generated] == [
        types.GenerateMemoriesResponseGeneratedMemoryAction.CREATED
    ] * 2
    assert sorted(g.memory.fact for g in generated) == ["I have a cat.", "I like tea."]
    assert all(g.memory.metadata["source"].string_value == "test" for g in generated)
    assert model.requests == []
    stored = sdk.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
    assert sorted(hit.memory.fact for hit in stored) == ["I have a cat.", "I like tea."]


def test_generate_direct_memories_with_consolidation_updates_and_can_be_rolled_back(
    sdk: agentplatform.Client, bank: str, model: Any
) -> None:
    sdk.memory_banks.memories.create(
        name=bank, fact="I like blue.", scope=SCOPE, config={"memory_id": "fav"}
    )
    model.consolidations.append(
        {
            "actions": [
                {"fact_index": 0, "action": "UPDATE", "memory_id": "fav", "fact": "I like green."}
            ]
        }
    )

    operation = sdk.memory_banks.memories.generate(
        name=bank,
        direct_memories_source={"direct_memories": [{"fact": "I like green now."}]},
        scope=SCOPE,
    )

    [generated] = operation.response.generated_memories
    assert generated.action == types.GenerateMemoriesResponseGeneratedMemoryAction.UPDATED
    assert generated.memory.name == f"{bank}/memories/fav"
    assert generated.memory.fact == "I like green."
    assert operation.metadata["llmCalls"] == 1
    assert generated.previous_revision.startswith(f"{bank}/memories/fav/revisions/")

    sdk.memory_banks.memories.rollback(
        name=generated.memory.name, target_revision_id=generated.previous_revision.rsplit("/", 1)[1]
    )
    assert sdk.memory_banks.memories.get(name=generated.memory.name).fact == "I like blue."


def test_generate_from_conversation_extracts_then_consolidates(
    sdk: agentplatform.Client, bank: str, model: Any
) -> None:
    model.extractions.append(
        {"memories": [{"fact": "I am a software engineer.", "topics": ["USER_PERSONAL_INFO"]}]}
    )
    model.consolidations.append(
        {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I am a software engineer."}]}
    )

    operation = sdk.memory_banks.memories.generate(
        name=bank,
        direct_contents_source={
            "events": [
                {"content": {"role": "user", "parts": [{"text": "I work as a software engineer."}]}}
            ]
        },
        scope=SCOPE,
    )

    [generated] = operation.response.generated_memories
    assert generated.action == types.GenerateMemoriesResponseGeneratedMemoryAction.CREATED
    assert (
        generated.memory.topics[0].managed_memory_topic == types.ManagedTopicEnum.USER_PERSONAL_INFO
    )
    assert [model.kind_of(request) for request in model.requests] == ["extraction", "consolidation"]


def test_generate_with_two_sources_is_400(sdk: agentplatform.Client, bank: str) -> None:
    from google.genai import errors

    with pytest.raises(errors.ClientError) as caught:
        sdk.memory_banks.memories.generate(
            name=bank,
            direct_memories_source={"direct_memories": [{"fact": "a"}]},
            direct_contents_source={
                "events": [{"content": {"role": "user", "parts": [{"text": "b"}]}}]
            },
            scope=SCOPE,
        )

    assert caught.value.code == 400


def test_ingest_events_returns_a_pending_operation_that_completes_after_the_flush(
    sdk: agentplatform.Client, bank: str, model: Any, open_server: Any
) -> None:
    model.extractions.append(
        {"memories": [{"fact": "I am a software engineer.", "topics": ["USER_PERSONAL_INFO"]}]}
    )
    model.consolidations.append(
        {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I am a software engineer."}]}
    )

    operation = sdk.memory_banks.ingest_events(
        name=bank,
        scope=SCOPE,
        stream_id="s1",
        direct_contents_source={
            "events": [
                {
                    "content": {"role": "user", "parts": [{"text": "I am a software engineer."}]},
                    "event_id": "e1",
                }
            ]
        },
        config={"force_flush": True},
    )

    assert operation.name.startswith(f"{bank}/operations/")
    deadline = time.monotonic() + 20
    polled = httpx.get(f"{open_server.url}/v1beta1/{operation.name}").json()
    while not polled.get("done") and time.monotonic() < deadline:
        time.sleep(0.2)
        polled = httpx.get(f"{open_server.url}/v1beta1/{operation.name}").json()
    assert polled["done"] is True and "error" not in polled
    found = sdk.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
    assert [hit.memory.fact for hit in found] == ["I am a software engineer."]


def test_ingest_events_waits_for_completion_when_asked(
    sdk: agentplatform.Client, bank: str, model: Any
) -> None:
    model.extractions.append({"memories": []})

    operation = sdk.memory_banks.ingest_events(
        name=bank,
        scope=SCOPE,
        direct_contents_source={
            "events": [{"content": {"role": "user", "parts": [{"text": "Hello."}]}}]
        },
        config={"wait_for_completion": True},
    )

    assert operation.done is True


def test_an_ingest_operation_stays_pending_until_its_stream_triggers(
    sdk: agentplatform.Client, bank: str, model: Any, open_server: Any
) -> None:
    model.extractions.append(
        {"memories": [{"fact": "I live in Porto.", "topics": ["USER_PERSONAL_INFO"]}]}
    )
    model.consolidations.append(
        {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I live in Porto."}]}
    )
    trigger = {"generation_rule": {"event_count": 2}}

    def ingest(text: str, event_id: str) -> types.MemoryBankIngestEventsOperation:
        return sdk.memory_banks.ingest_events(
            name=bank,
            scope=SCOPE,
            stream_id="counted",
            direct_contents_source={
                "events": [
                    {"content": {"role": "user", "parts": [{"text": text}]}, "event_id": event_id}
                ]
            },
            generation_trigger_config=trigger,
        )

    first = ingest("Hi.", "e1")
    time.sleep(0.3)
    waiting = httpx.get(f"{open_server.url}/v1beta1/{first.name}").json()
    assert first.done is not True and waiting.get("done") is not True

    second = ingest("I live in Porto.", "e2")
    deadline = time.monotonic() + 20
    states = [httpx.get(f"{open_server.url}/v1beta1/{op.name}").json() for op in (first, second)]
    while not all(state.get("done") for state in states) and time.monotonic() < deadline:
        time.sleep(0.2)
        states = [
            httpx.get(f"{open_server.url}/v1beta1/{op.name}").json() for op in (first, second)
        ]

    assert [state.get("done") for state in states] == [True, True]
    assert [
        hit.memory.fact for hit in sdk.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
    ] == ["I live in Porto."]
