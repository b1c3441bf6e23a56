"""ADK's `VertexAiMemoryBankService`, subclassed only to aim it at the REST server.

`SelfHostedVertexMemoryBankService` overrides `_build_api_client`; everything ADK sends (scope
`{app_name, user_id}`, create for add_memory, ingest_events for sessions, retrieve for search)
is ADK's own code talking to the server through the official SDK.
"""

from __future__ import annotations

import asyncio
from typing import Any

import agentplatform
import pytest
from google.adk.events import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.sessions import Session
from google.genai import errors
from google.genai import types as genai_types

from adk_memory.adk import SelfHostedVertexMemoryBankService


def entry(text: str, **fields: Any) -> MemoryEntry:
    return MemoryEntry(
        content=genai_types.Content(role="user", parts=[genai_types.Part(text=text)]), **fields
    )


async def search_until(
    service: SelfHostedVertexMemoryBankService, query: str, *, want: int, user: str = "u1"
) -> list[str]:
    """search_memory until `want` memories are there (ingest flushes in the background)."""
    texts: list[str] = []
    for _ in range(100):
        found = await service.search_memory(app_name="app", user_id=user, query=query)
        texts = [memory.content.parts[0].text for memory in found.memories]
        if len(texts) >= want:
            break
        await asyncio.sleep(0.1)
    return texts


async def test_add_memory_then_search_memory_finds_it_in_the_adk_scope(
    open_server: Any, bank: str, sdk: agentplatform.Client
) -> None:
    service = SelfHostedVertexMemoryBankService(bank, endpoint=open_server.url)

    await service.add_memory(
        app_name="app",
        user_id="u1",
        memories=[entry("I prefer green tea.", id="tea-1", custom_metadata={"source": "test"})],
    )
    found = await service.search_memory(app_name="app", user_id="u1", query="green tea")
    other_user = await service.search_memory(app_name="app", user_id="u2", query="green tea")

    assert [memory.content.parts[0].text for memory in found.memories] == ["I prefer green tea."]
    assert found.memories[0].custom_metadata == {"source": "test"}
    assert found.memories[0].timestamp is not None
    assert other_user.memories == []
    stored = sdk.memory_banks.memories.get(name=f"{bank}/memories/tea-1")
    assert stored.scope == {"app_name": "app", "user_id": "u1"}


async def test_add_memory_with_consolidation_goes_through_generate(
    open_server: Any, bank: str, model: Any
) -> None:
    model.consolidations.append(
        {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I own a bicycle."}]}
    )
    service = SelfHostedVertexMemoryBankService(bank.rsplit("/", 1)[1], endpoint=open_server.url)

    await service.add_memory(
        app_name="app",
        user_id="u1",
        memories=[entry("I own a bicycle.")],
        custom_metadata={"enable_consolidation": True},
    )

    assert [model.kind_of(request) for request in model.requests] == ["consolidation"]
    assert await search_until(service, "bicycle", want=1) == ["I own a bicycle."]


async def test_add_session_to_memory_ingests_the_session_and_generates(
    open_server: Any, bank: str, model: Any
) -> None:
    model.extractions.append(
        {"memories": [{"fact": "I am a software engineer.", "topics": ["USER_PERSONAL_INFO"]}]}
    )
    model.consolidations.append(
        {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I am a software engineer."}]}
    )
    service = SelfHostedVertexMemoryBankService(bank, endpoint=open_server.url)
    said = genai_types.Content(
        role="user", parts=[genai_types.Part(text="I work as a software engineer.")]
    )
    session = Session(
        id="s1",
        app_name="app",
        user_id="u1",
        events=[Event(author="user", invocation_id="i1", content=said)],
    )

    await service.add_session_to_memory(session)

    assert await search_until(service, "job", want=1) == ["I am a software engineer."]
    assert "I work as a software engineer." in model.prompt_text(model.requests[0])


async def test_an_agent_key_may_search_but_not_create(
    keyed_server: Any, admin_sdk: agentplatform.Client, secrets: dict[str, str]
) -> None:
    bank = admin_sdk.memory_banks.create().name
    admin_sdk.memory_banks.memories.create(
        name=bank, fact="I like blue.", scope={"app_name": "app", "user_id": "u1"}
    )
    agent = SelfHostedVertexMemoryBankService(
        bank, endpoint=keyed_server.url, api_key=secrets["agent"]
    )

    found = await agent.search_memory(app_name="app", user_id="u1", query="blue")
    with pytest.raises(errors.ClientError) as caught:
        await agent.add_memory(app_name="app", user_id="u1", memories=[entry("I like red.")])

    assert [memory.content.parts[0].text for memory in found.memories] == ["I like blue."]
    assert caught.value.code == 403 and "memories.create" in caught.value.message


async def test_a_bearer_token_authenticates_like_an_api_key(
    keyed_server: Any, admin_sdk: agentplatform.Client, secrets: dict[str, str]
) -> None:
    bank = admin_sdk.memory_banks.create().name
    service = SelfHostedVertexMemoryBankService(
        bank, endpoint=keyed_server.url, bearer_token=secrets["admin"]
    )
    anonymous = SelfHostedVertexMemoryBankService(bank, endpoint=keyed_server.url)

    await service.add_memory(app_name="app", user_id="u1", memories=[entry("I like jazz.")])
    with pytest.raises(errors.ClientError) as caught:
        await anonymous.search_memory(app_name="app", user_id="u1", query="jazz")

    assert await search_until(service, "jazz", want=1) == ["I like jazz."]
    assert caught.value.code == 401


def test_the_service_refuses_two_credentials() -> None:
    with pytest.raises(ValueError, match="not both"):
        SelfHostedVertexMemoryBankService("123", api_key="a" * 20, bearer_token="b" * 20)
