"""Memories through the official SDK (`client.memory_banks.memories.*`) against the REST server."""

from __future__ import annotations

import asyncio
import datetime
from typing import Any

import agentplatform
import httpx
import pytest
from agentplatform import types
from google.genai import errors

SCOPE = {"user_id": "123"}
FACTS = [
    "I like blue.",
    "I live in Berlin.",
    "My dog is called Rex.",
    "I prefer tea over coffee.",
    "I am allergic to peanuts.",
]


def add(
    sdk: agentplatform.Client, bank: str, fact: str, scope: dict[str, str] = SCOPE, **config: Any
) -> types.Memory:
    operation = sdk.memory_banks.memories.create(
        name=bank, fact=fact, scope=scope, config=config or None
    )
    assert operation.response is not None
    return operation.response


def test_create_waits_and_returns_the_stored_memory(sdk: agentplatform.Client, bank: str) -> None:
    expire = datetime.datetime(2099, 1, 1, tzinfo=datetime.UTC)
    operation = sdk.memory_banks.memories.create(
        name=bank,
        fact="I like blue.",
        scope=SCOPE,
        config={
            "memory_id": "fav-color",
            "display_name": "dn",
            "description": "desc",
            "expire_time": expire,
            "topics": [
                {"managed_memory_topic": "USER_PREFERENCES"},
                {"custom_memory_topic_label": "colors"},
            ],
            "metadata": {
                "author": {"string_value": "agent-1"},
                "score": {"double_value": 0.5},
                "flag": {"bool_value": True},
                "ts": {"timestamp_value": datetime.datetime(2027, 1, 1, tzinfo=datetime.UTC)},
            },
        },
    )

    memory = operation.response
    assert operation.done is True
    assert memory.name == f"{bank}/memories/fav-color"
    assert (memory.fact, memory.scope, memory.display_name, memory.description) == (
        "I like blue.",
        SCOPE,
        "dn",
        "desc",
    )
    assert memory.expire_time == expire
    assert [t.managed_memory_topic or t.custom_memory_topic_label for t in memory.topics] == [
        types.ManagedTopicEnum.USER_PREFERENCES,
        "colors",
    ]
    assert memory.metadata["score"].double_value == 0.5
    assert memory.metadata["flag"].bool_value is True
    assert memory.metadata["ts"].timestamp_value == datetime.datetime(
        2027, 1, 1, tzinfo=datetime.UTC
    )
    assert memory.create_time is not None


def test_create_without_waiting_returns_the_done_operation_with_the_memory(
    sdk: agentplatform.Client, bank: str
) -> None:
    operation = sdk.memory_banks.memories.create(
        name=bank,
        fact="I live in Berlin.",
        scope=SCOPE,
        config={"wait_for_completion": False, "ttl": "3600s"},
    )

    assert operation.done is True
    assert operation.name.startswith(f"{operation.response.name}/operations/")
    assert operation.response.fact == "I live in Berlin."
    assert operation.response.expire_time is not None


def test_a_duplicate_memory_id_is_409_already_exists(sdk: agentplatform.Client, bank: str) -> None:
    add(sdk, bank, "I like blue.", memory_id="dup")

    with pytest.raises(errors.ClientError) as caught:
        add(sdk, bank, "I like red.", memory_id="dup")

    assert (caught.value.code, caught.value.status) == (409, "ALREADY_EXISTS")


def test_get_returns_the_memory_and_404_after_delete(sdk: agentplatform.Client, bank: str) -> None:
    memory = add(sdk, bank, "I like blue.")

    assert sdk.memory_banks.memories.get(name=memory.name).fact == "I like blue."
    operation = sdk.memory_banks.memories.delete(name=memory.name)
    assert operation.done is True

    with pytest.raises(errors.ClientError) as caught:
        sdk.memory_banks.memories.get(name=memory.name)
    assert (caught.value.code, caught.value.status) == (404, "NOT_FOUND")


def test_list_follows_pages_and_applies_filter_and_order(
    sdk: agentplatform.Client, bank: str
) -> None:
    for fact in FACTS:
        add(sdk, bank, fact)
    add(sdk, bank, "I like green.", scope={"user_id": "other"})

    everything = list(sdk.memory_banks.memories.list(name=bank, config={"page_size": 2}))
    filtered = list(
        sdk.memory_banks.memories.list(
            name=bank,
            config={
                "page_size": 1,
                "filter": 'scope.user_id="123" AND fact:"I"',
                "order_by": "create_time",
            },
        )
    )

    assert len(everything) == 6
    assert [memory.fact for memory in filtered] == [fact for fact in FACTS if "I" in fact]


def test_update_with_a_mask_changes_only_the_masked_fields_and_writes_a_revision(
    sdk: agentplatform.Client, bank: str
) -> None:
    memory = add(sdk, bank, "I like blue.", display_name="before")

    operation = sdk.memory_banks.memories._update(
        name=memory.name,
        fact="I like green.",
        config={"update_mask": "fact", "display_name": "ignored"},
    )
    sdk.memory_banks.memories._update(
        name=memory.name, config={"metadata": {"source": {"string_value": "test"}}}
    )

    assert operation.response.fact == "I like green."
    fetched = sdk.memory_banks.memories.get(name=memory.name)
    assert (fetched.fact, fetched.display_name) == ("I like green.", "before")
    assert fetched.metadata["source"].string_value == "test"
    revisions = list(sdk.memory_banks.memories.revisions.list(name=memory.name))
    assert [revision.fact for revision in revisions] == ["I like green.", "I like blue."]


def test_update_of_the_scope_is_refused(sdk: agentplatform.Client, bank: str) -> None:
    memory = add(sdk, bank, "I like blue.")

    with pytest.raises(errors.ClientError) as caught:
        sdk.memory_banks.memories._update(name=memory.name, scope={"user_id": "someone-else"})

    assert caught.value.code == 400 and "scope" in caught.value.message


def test_similarity_retrieval_returns_the_nearest_of_exactly_the_scope(
    sdk: agentplatform.Client, bank: str
) -> None:
    for fact in FACTS:
        add(sdk, bank, fact)
    add(sdk, bank, "I like blue.", scope={"user_id": "123", "app": "x"})

    results = sdk.memory_banks.memories.retrieve(
        name=bank,
        scope=SCOPE,
        similarity_search_params={"search_query": "I like blue.", "top_k": 2},
    )

    page = results.page
    assert len(page) == 2
    assert page[0].memory.fact == "I like blue." and page[0].memory.scope == SCOPE
    assert page[0].distance == pytest.approx(0.0, abs=1e-6)
    assert page[0].distance <= page[1].distance


def test_retrieval_without_params_returns_every_memory_of_the_scope(
    sdk: agentplatform.Client, bank: str
) -> None:
    for fact in FACTS:
        add(sdk, bank, fact)
    add(sdk, bank, "Not mine.", scope={"user_id": "456"})

    results = list(sdk.memory_banks.memories.retrieve(name=bank, scope=SCOPE))

    assert sorted(hit.memory.fact for hit in results) == sorted(FACTS)
    assert all(hit.distance is None for hit in results)


def test_simple_retrieval_returns_a_page_and_a_token(sdk: agentplatform.Client, bank: str) -> None:
    for fact in FACTS:
        add(sdk, bank, fact)

    results = sdk.memory_banks.memories.retrieve(
        name=bank, scope=SCOPE, simple_retrieval_params={"page_size": 2}
    )

    assert len(results.page) == 2
    # Reference §2.7: the SDK cannot follow the token (its retrieve config has no page_token),
    # but the server sets it, and it resumes where the first page stopped.
    token = results.config["page_token"]
    assert token
    rest = sdk.memory_banks.memories.retrieve(
        name=bank, scope=SCOPE, simple_retrieval_params={"page_size": 10, "page_token": token}
    )
    assert sorted(hit.memory.fact for hit in [*results.page, *rest.page]) == sorted(FACTS)


def test_retrieve_filters_by_metadata_and_system_fields(
    sdk: agentplatform.Client, bank: str
) -> None:
    add(sdk, bank, "I like blue.", metadata={"author": {"string_value": "a1"}})
    add(sdk, bank, "I like red.", metadata={"author": {"string_value": "a2"}})
    add(sdk, bank, "I have allergies.", metadata={"author": {"string_value": "a2"}})

    by_metadata = sdk.memory_banks.memories.retrieve(
        name=bank,
        scope=SCOPE,
        config=types.RetrieveMemoriesConfig(
            filter_groups=[
                types.MemoryConjunctionFilter(
                    filters=[
                        types.MemoryFilter(
                            key="author", value=types.MemoryMetadataValue(string_value="a2")
                        )
                    ]
                )
            ],
            filter='fact=~".*allergies.*"',
        ),
    )

    assert [hit.memory.fact for hit in by_metadata] == ["I have allergies."]


def test_purge_dry_run_counts_and_forced_purge_deletes(
    sdk: agentplatform.Client, bank: str
) -> None:
    for fact in FACTS:
        add(sdk, bank, fact)

    dry = sdk.memory_banks.memories.purge(name=bank, filter='fact:"I l"')
    assert dry.done is True and dry.response.purge_count == 2
    assert len(list(sdk.memory_banks.memories.list(name=bank))) == 5

    forced = sdk.memory_banks.memories.purge(name=bank, filter='fact:"I l"', force=True)

    assert forced.response.purge_count == 2
    remaining = sorted(memory.fact for memory in sdk.memory_banks.memories.list(name=bank))
    assert remaining == [
        "I am allergic to peanuts.",
        "I prefer tea over coffee.",
        "My dog is called Rex.",
    ]


def test_purge_without_a_filter_is_refused(sdk: agentplatform.Client, bank: str) -> None:
    with pytest.raises(errors.ClientError) as caught:
        sdk.memory_banks.memories.purge(name=bank)

    assert caught.value.code == 400 and "filter" in caught.value.message


def test_rollback_restores_a_revision_even_after_delete(
    sdk: agentplatform.Client, bank: str
) -> None:
    memory = add(sdk, bank, "I like blue.")
    sdk.memory_banks.memories._update(name=memory.name, fact="I like green.")
    first = list(sdk.memory_banks.memories.revisions.list(name=memory.name))[-1]
    sdk.memory_banks.memories.delete(name=memory.name)

    operation = sdk.memory_banks.memories.rollback(
        name=memory.name, target_revision_id=first.name.rsplit("/", 1)[1]
    )

    assert operation.done is True
    assert sdk.memory_banks.memories.get(name=memory.name).fact == "I like blue."
    assert len(list(sdk.memory_banks.memories.revisions.list(name=memory.name))) == 3


def test_revisions_get_and_list_with_pages(sdk: agentplatform.Client, bank: str) -> None:
    memory = add(sdk, bank, "v1")
    for text in ("v2", "v3"):
        sdk.memory_banks.memories._update(name=memory.name, fact=text)

    revisions = list(
        sdk.memory_banks.memories.revisions.list(name=memory.name, config={"page_size": 1})
    )
    one = sdk.memory_banks.memories.revisions.get(name=revisions[1].name)

    assert [revision.fact for revision in revisions] == ["v3", "v2", "v1"]
    assert one.fact == "v2" and one.name == revisions[1].name
    assert one.expire_time is not None


def test_operations_are_readable_by_their_full_names(
    sdk: agentplatform.Client, bank: str, open_server: Any
) -> None:
    created = sdk.memory_banks.memories.create(
        name=bank, fact="I like blue.", scope=SCOPE, config={"wait_for_completion": False}
    )
    purge = sdk.memory_banks.memories.purge(name=bank, filter='fact:"blue"')

    memory_op = httpx.get(f"{open_server.url}/v1beta1/{created.name}").json()
    purge_op = httpx.get(f"{open_server.url}/v1beta1/{purge.name}").json()
    polled = sdk.memory_banks.memories._get_memory_operation(operation_name=created.name)

    assert memory_op["done"] is True and memory_op["response"]["fact"] == "I like blue."
    assert purge_op["response"] == {"purgeCount": 1}
    assert polled.response.name == created.response.name


def test_async_memories_work_through_the_aio_client(open_server: Any, make_sdk: Any) -> None:
    async def scenario() -> list[str]:
        client = make_sdk(open_server.url).aio
        bank = (await client.memory_banks.create()).name
        await client.memory_banks.memories.create(name=bank, fact="I like blue.", scope=SCOPE)
        found = await client.memory_banks.memories.retrieve(
            name=bank, scope=SCOPE, similarity_search_params={"search_query": "blue"}
        )
        return [hit.memory.fact async for hit in found]

    assert asyncio.run(scenario()) == ["I like blue."]
