"""The engine issue's acceptance script, through the public `Client` only, on every backend.

Also through `http://`: `adk-memory serve` on embedded Chroma and on Redis, reached by the same
`Client` (`api_uri`), so the remote client is held to the same behaviour.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from adk_memory import AlreadyExists, Client, FailedPrecondition, InvalidArgument, NotFound, types

SCOPE = {"user_id": "123"}
FACTS = [
    "I like blue.",
    "I live in Berlin.",
    "My dog is called Rex.",
    "I prefer tea over coffee.",
    "I am allergic to peanuts.",
    "My sister lives in Lisbon.",
]
CRAFTED = [
    {"user_id": "123", "app": "x"},
    {"user_id": "1234"},
    {"user_id": '123" OR "1"="1'},
    {"user_id": "123}|{@scope:{x}"},
    {"user_id": "123 | @fact:blue"},
    {"user_id": "123@example"},
    {"user_id": "１２３"},
    {"user_id": "123" + "9" * 5000},
    {"USER_ID": "123"},
]


@pytest.fixture
def client(api_uri: str) -> Iterator[Client]:
    """A blocking client of each store, and of `adk-memory serve` on Chroma and Redis."""
    with Client(uri=api_uri, embedding_model="hash-64") as made:
        yield made


@pytest.fixture
def bank(client: Client) -> str:
    return client.memory_banks.create().name


def create(
    client: Client, bank: str, fact: str, scope: dict[str, str] = SCOPE, **config: object
) -> types.Memory:
    return client.memory_banks.memories.create(
        name=bank, fact=fact, scope=scope, config=config or None
    ).response


def facts(results: object) -> list[str]:
    return [item.memory.fact for item in results]  # type: ignore[attr-defined]


def test_create_with_and_without_id_and_duplicate_id(client: Client, bank: str) -> None:
    named = create(client, bank, "I like blue.", memory_id="fav-color")
    assert named.name == f"{bank}/memories/fav-color"
    generated = create(client, bank, "I live in Berlin.")
    assert generated.name.startswith(f"{bank}/memories/") and generated.name != named.name
    with pytest.raises(AlreadyExists):
        create(client, bank, "I like red.", memory_id="fav-color")
    assert client.memory_banks.memories.get(name=named.name).fact == "I like blue."
    short = named.name[named.name.index("reasoningEngines/") :]
    assert client.memory_banks.memories.get(name=short).name == named.name


def test_retrieve_defaults_to_three_nearest_ascending(client: Client, bank: str) -> None:
    for fact in FACTS:
        create(client, bank, fact)
    results = client.memory_banks.memories.retrieve(
        name=bank, scope=SCOPE, similarity_search_params={"search_query": "My dog is called Rex."}
    )
    hits = list(results)
    assert len(hits) == 3
    assert hits[0].memory.fact == "My dog is called Rex."
    assert hits[0].distance < 1e-3
    distances = [hit.distance for hit in hits]
    assert distances == sorted(distances)
    assert results.page == hits


def test_no_other_scope_is_ever_returned(client: Client, bank: str) -> None:
    mine = create(client, bank, "I like blue.")
    for scope in CRAFTED:
        create(client, bank, "I like blue.", scope=scope)
    search = {"search_query": "I like blue.", "top_k": 100}
    memories = client.memory_banks.memories
    assert [
        hit.memory.name
        for hit in memories.retrieve(name=bank, scope=SCOPE, similarity_search_params=search)
    ] == [mine.name]
    assert [hit.memory.name for hit in memories.retrieve(name=bank, scope=SCOPE)] == [mine.name]
    for scope in CRAFTED:
        hits = list(memories.retrieve(name=bank, scope=scope, similarity_search_params=search))
        assert len(hits) == 1 and hits[0].memory.scope == scope
    assert list(memories.retrieve(name=bank, scope={"user_id": "nobody"})) == []


def test_simple_retrieval_pages_through_everything(client: Client, bank: str) -> None:
    for fact in FACTS:
        create(client, bank, fact)
    pager = client.memory_banks.memories.retrieve(
        name=bank, scope=SCOPE, simple_retrieval_params={"page_size": 4}
    )
    assert len(pager.page) == 4 and pager.next_page_token
    assert sorted(facts(pager)) == sorted(FACTS)
    default = client.memory_banks.memories.retrieve(
        name=bank, scope=SCOPE, simple_retrieval_params={}
    )
    assert len(default.page) == 3


def test_filters_select_before_top_k(client: Client, bank: str) -> None:
    for fact in FACTS:
        create(client, bank, fact)
    memories = client.memory_banks.memories
    allergies = memories.retrieve(
        name=bank,
        scope=SCOPE,
        similarity_search_params={"search_query": "blue", "top_k": 1},
        config={"filter": 'fact=~"peanut|Lisbon"'},
    )
    assert facts(allergies) in (["I am allergic to peanuts."], ["My sister lives in Lisbon."])
    since = (datetime.now(UTC) - timedelta(minutes=5)).isoformat().replace("+00:00", "Z")
    both = memories.retrieve(
        name=bank, scope=SCOPE, config={"filter": f'create_time>="{since}" AND fact=~"^My "'}
    )
    assert sorted(facts(both)) == ["My dog is called Rex.", "My sister lives in Lisbon."]
    future = memories.retrieve(
        name=bank, scope=SCOPE, config={"filter": f"create_time>={int((time.time() + 3600) * 1e6)}"}
    )
    assert list(future) == []


def test_filter_groups_equal_greater_less_and_negate(client: Client, bank: str) -> None:
    value = types.MemoryMetadataValue
    create(
        client,
        bank,
        "a",
        metadata={"author": value(string_value="agent 123"), "score": value(double_value=0.5)},
    )
    create(
        client,
        bank,
        "b",
        metadata={"label": value(string_value="travel"), "score": value(double_value=2.0)},
    )
    create(
        client,
        bank,
        "c",
        metadata={"label": value(string_value="travel"), "score": value(double_value=0.1)},
    )
    create(client, bank, "d")
    groups = [
        {"filters": [{"key": "author", "value": {"string_value": "agent 123"}, "op": "EQUAL"}]},
        {
            "filters": [
                {"key": "label", "value": {"string_value": "travel"}},
                {
                    "key": "score",
                    "negate": True,
                    "op": "GREATER_THAN",
                    "value": {"double_value": 1.0},
                },
            ]
        },
    ]
    found = client.memory_banks.memories.retrieve(
        name=bank, scope=SCOPE, config={"filter_groups": groups}
    )
    assert sorted(facts(found)) == ["a", "c"]
    below = [{"filters": [{"key": "score", "op": "LESS_THAN", "value": {"double_value": 1.0}}]}]
    assert sorted(
        facts(
            client.memory_banks.memories.retrieve(
                name=bank, scope=SCOPE, config={"filter_groups": below}
            )
        )
    ) == ["a", "c"]
    missing = [{"filters": [{"key": "score", "negate": True, "value": {"double_value": 0.5}}]}]
    assert sorted(
        facts(
            client.memory_banks.memories.retrieve(
                name=bank, scope=SCOPE, config={"filter_groups": missing}
            )
        )
    ) == ["b", "c", "d"]


@pytest.mark.parametrize(
    "bad_filter",
    ['fact=~"unclosed', "fact >", "no_such_field = 1", 'fact=~"(?<=x)"', "create_time > yesterday"],
)
def test_bad_filter_is_invalid_argument(client: Client, bank: str, bad_filter: str) -> None:
    with pytest.raises(InvalidArgument):
        list(
            client.memory_banks.memories.retrieve(
                name=bank, scope=SCOPE, config={"filter": bad_filter}
            )
        )


@pytest.mark.parametrize(
    "bad_scope",
    [
        {},
        {"a": "1", "b": "2", "c": "3", "d": "4", "e": "5", "f": "6"},
        {"user_id": "*"},
        {"user_id": ""},
        {"": "x"},
        {"user_id": 5},
    ],
)
def test_invalid_scope_is_invalid_argument_everywhere(
    client: Client, bank: str, bad_scope: dict[str, object]
) -> None:
    with pytest.raises(InvalidArgument):
        client.memory_banks.memories.create(name=bank, fact="x", scope=bad_scope)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument):
        client.memory_banks.memories.retrieve(
            name=bank, scope=bad_scope, similarity_search_params={"search_query": "x"}
        )  # type: ignore[arg-type]


def test_update_then_rollback_through_revisions(client: Client, bank: str) -> None:
    memory = create(client, bank, "I like blue.")
    memories = client.memory_banks.memories
    updated = memories.update(name=memory.name, fact="I like green.").response
    assert updated.fact == "I like green."
    revisions = list(memories.revisions.list(name=memory.name))
    assert [revision.fact for revision in revisions] == ["I like green.", "I like blue."]
    hit = next(
        iter(
            memories.retrieve(
                name=bank, scope=SCOPE, similarity_search_params={"search_query": "I like green."}
            )
        )
    )
    assert hit.distance < 1e-3
    first = revisions[-1].name.rsplit("/", 1)[-1]
    memories.rollback(name=memory.name, target_revision_id=first)
    assert memories.get(name=memory.name).fact == "I like blue."
    assert [r.fact for r in memories.revisions.list(name=memory.name)] == [
        "I like blue.",
        "I like green.",
        "I like blue.",
    ]
    assert memories.revisions.get(name=revisions[0].name).fact == "I like green."


def test_update_with_mask_changes_only_masked_fields(client: Client, bank: str) -> None:
    value = types.MemoryMetadataValue
    memory = create(
        client, bank, "I like blue.", display_name="old", metadata={"k": value(string_value="v")}
    )
    memories = client.memory_banks.memories
    memories.update(
        name=memory.name,
        fact="ignored",
        config={"display_name": "new", "update_mask": "displayName"},
    )
    after = memories.get(name=memory.name)
    assert (after.fact, after.display_name, after.metadata["k"].string_value) == (
        "I like blue.",
        "new",
        "v",
    )
    memories.update(name=memory.name, config={"metadata": {"k": value(string_value="w")}})
    assert memories.get(name=memory.name).metadata["k"].string_value == "w"
    assert len(list(memories.revisions.list(name=memory.name))) == 1
    with pytest.raises(InvalidArgument):
        memories.update(name=memory.name, scope={"user_id": "other"})


def test_ttl_hides_a_memory_when_it_expires(client: Client, bank: str) -> None:
    short = create(client, bank, "temporary code 4711", ttl="2s")
    assert short.expire_time is not None
    memories = client.memory_banks.memories
    assert memories.get(name=short.name).fact == "temporary code 4711"
    time.sleep(2.1)
    with pytest.raises(NotFound):
        memories.get(name=short.name)
    assert list(memories.retrieve(name=bank, scope=SCOPE)) == []
    assert (
        list(
            memories.retrieve(
                name=bank, scope=SCOPE, similarity_search_params={"search_query": "code"}
            )
        )
        == []
    )


def test_delete_keeps_revisions_and_rollback_recreates(client: Client, bank: str) -> None:
    memory = create(client, bank, "I like blue.")
    memories = client.memory_banks.memories
    memories.delete(name=memory.name)
    with pytest.raises(NotFound):
        memories.get(name=memory.name)
    [revision] = list(memories.revisions.list(name=memory.name))
    memories.rollback(name=memory.name, target_revision_id=revision.name.rsplit("/", 1)[-1])
    assert memories.get(name=memory.name).fact == "I like blue."


def test_purge_dry_run_counts_and_force_deletes(client: Client, bank: str) -> None:
    for fact in FACTS:
        create(client, bank, fact)
    create(client, bank, "other user's fact", scope={"user_id": "456"})
    memories = client.memory_banks.memories
    with pytest.raises(InvalidArgument):
        memories.purge(name=bank)
    dry = memories.purge(name=bank, filter='scope.user_id="123" AND fact=~"^I "', force=False)
    assert dry.done and dry.response.purge_count == 4
    assert len(list(memories.retrieve(name=bank, scope=SCOPE))) == 6
    forced = memories.purge(name=bank, filter='scope.user_id="123" AND fact=~"^I "', force=True)
    assert forced.response.purge_count == 4
    assert sorted(facts(memories.retrieve(name=bank, scope=SCOPE))) == [
        "My dog is called Rex.",
        "My sister lives in Lisbon.",
    ]
    assert len(list(memories.retrieve(name=bank, scope={"user_id": "456"}))) == 1


def test_list_pages_filters_and_orders(client: Client, bank: str) -> None:
    for fact in FACTS:
        create(client, bank, fact)
    pager = client.memory_banks.memories.list(name=bank, config={"page_size": 4})
    assert len(pager.page) == 4
    listed = list(pager)
    assert len(listed) == 6
    assert [m.create_time for m in listed] == sorted((m.create_time for m in listed), reverse=True)
    oldest_first = list(
        client.memory_banks.memories.list(name=bank, config={"order_by": "create_time"})
    )
    assert [m.name for m in oldest_first] == [m.name for m in reversed(listed)]
    dogs = list(client.memory_banks.memories.list(name=bank, config={"filter": 'fact:"dog"'}))
    assert [m.fact for m in dogs] == ["My dog is called Rex."]


def test_bank_delete_needs_force_when_it_holds_memories(client: Client, bank: str) -> None:
    create(client, bank, "I like blue.")
    with pytest.raises(FailedPrecondition):
        client.memory_banks.delete(name=bank)
    client.memory_banks.delete(name=bank, force=True)
    with pytest.raises(NotFound):
        client.memory_banks.get(name=bank)


def test_bank_update_merges_and_refuses_model_change_with_memories(
    client: Client, bank: str
) -> None:
    client.memory_banks.update(
        name=bank,
        managed_semantic_memory_config={"ttl_config": {"default_ttl": "3600s"}},
        config={"display_name": "renamed"},
    )
    client.memory_banks.update(name=bank, managed_semantic_memory_config={})
    got = client.memory_banks.get(name=bank)
    assert got.display_name == "renamed"
    assert got.managed_semantic_memory_config.ttl_config.default_ttl == "3600s"
    assert got.managed_semantic_memory_config.similarity_search_config.embedding_model == "hash-64"
    memory = create(client, bank, "I like blue.")
    assert memory.expire_time is not None
    with pytest.raises(FailedPrecondition):
        client.memory_banks.update(
            name=bank,
            managed_semantic_memory_config={
                "similarity_search_config": {"embedding_model": "hash-32"}
            },
        )


def test_operations_are_recorded(client: Client, bank: str) -> None:
    operation = client.memory_banks.memories.create(name=bank, fact="I like blue.", scope=SCOPE)
    fetched = client.operations.get(operation.name)
    assert fetched.done and fetched.response.fact == "I like blue."
    purge = client.memory_banks.memories.purge(name=bank, filter='fact="I like blue."', force=True)
    assert client.operations.get(purge.name).response.purge_count == 1


def test_a_create_records_its_operation_in_the_memorys_own_atomic_write(
    store_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No separate `put_operation` a crash could fall between: memory and operation, or none.

    On the stores only: it watches the engine's store, which over http(s) is the server's.
    """
    with Client(uri=store_uri, embedding_model="hash-64") as client:
        bank = client.memory_banks.create().name
        store = client.aio.engine.store

        async def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("memories.create wrote its operation apart from its memory")

        monkeypatch.setattr(store, "put_operation", refuse)
        memories = client.memory_banks.memories
        operation = memories.create(name=bank, fact="I like green.", scope=SCOPE)
        fetched = client.operations.get(operation.name)
        assert fetched.done and fetched.response.name == operation.response.name
        assert memories.get(name=operation.response.name).fact == "I like green."
