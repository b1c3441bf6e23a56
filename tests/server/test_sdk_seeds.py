"""The seeds' snippets, run through the official SDK against the REST server.

Seeds 001 (German) and 003 (Spanish) show the same `client.memory_banks.*` code; each test below
is one snippet as written, with only the client line changed (`make_sdk(url)` instead of
`agentplatform.Client(project=…, location=…)`) and the placeholders (`MEMORY_NAME`, `SCOPE`,
`QUERY`, `...`) filled in. Seeds 000 and 002 use the older `client.agent_engines.*` spelling, which
`agentplatform` 2.6 does not have; seed 004 is configuration (covered by the bank tests). The
seeds' `memories.update(...)` is `memories._update(...)` in this SDK version, which has no public
`update`.
"""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from agentplatform import types

# The snippets keep the seeds' own layout, so that each reads as the seed prints it.
# fmt: off

SCOPE = {"user_id": "123"}


@pytest.fixture
def client(open_server: Any, make_sdk: Any) -> Any:
    return make_sdk(open_server.url)  # the one line that differs from the seeds


@pytest.fixture
def memory_bank(client: Any) -> Any:
    return client.memory_banks.create()


def remember(
    client: Any, memory_bank: Any, fact: str, scope: dict[str, str] = SCOPE, **config: Any
) -> str:
    operation = client.memory_banks.memories.create(
        name=memory_bank.name, fact=fact, scope=scope, config=config or None
    )
    return str(operation.response.name)


def test_get_memory(client: Any, memory_bank: Any) -> None:
    MEMORY_NAME = remember(client, memory_bank, "This is a fact.")

    memory = client.memory_banks.memories.get(
        name=MEMORY_NAME)

    assert memory.fact == "This is a fact."


def test_retrieve_with_similarity_search(client: Any, memory_bank: Any) -> None:
    facts = ("This is a fact.", "This is another fact.", "Something else.", "Unrelated words.")
    for fact in facts:
        remember(client, memory_bank, fact)
    remember(client, memory_bank, "This is a fact.", scope={"user_id": "456"})

    results = client.memory_banks.memories.retrieve(
        name=memory_bank.name,
        scope=SCOPE,
        similarity_search_params={
            "search_query": "This is a fact.",
            # Optional. Defaults to 3.
            "top_k": 3
        }
    )
    # RetrieveMemories returns a pager. You can use `page` to retrieve memories.

    page = results.page
    assert len(page) == 3
    assert page[0].memory.fact == "This is a fact." and page[0].memory.scope == SCOPE
    distances = [hit.distance for hit in page]
    assert distances == sorted(distances)


def test_retrieve_all_memories_of_the_scope(client: Any, memory_bank: Any) -> None:
    for fact in ("This is a fact.", "This is another fact."):
        remember(client, memory_bank, fact)
    remember(client, memory_bank, "Someone else's fact.", scope={"user_id": "456"})

    results = client.memory_banks.memories.retrieve(
        name=memory_bank.name,
        scope=SCOPE
    )
    # RetrieveMemories returns a pager. You can use `page` to retrieve up to 100 memories per page.

    found = sorted(hit.memory.fact for hit in results.page)
    assert found == ["This is a fact.", "This is another fact."]


def test_list_memories(client: Any, memory_bank: Any, capsys: pytest.CaptureFixture[str]) -> None:
    remember(client, memory_bank, "This is a fact.")
    remember(client, memory_bank, "Another scope's fact.", scope={"user_id": "456"})

    pager = client.memory_banks.memories.list(name=memory_bank.name)
    for page in pager:
      print(page)  # noqa: T201 - the seed prints each memory

    printed = capsys.readouterr().out
    assert "This is a fact." in printed and "Another scope's fact." in printed


def test_metadata_on_create_update_and_generate(client: Any, memory_bank: Any, model: Any) -> None:
    create = {"fact_index": 0, "action": "CREATE", "fact": "I like sailing."}
    model.consolidations.append({"actions": [create]})
    name = remember(client, memory_bank, "I like blue.")

    metadata = {
        "my_string_key": types.MemoryMetadataValue(string_value="my_string_value"),
        "my_double_key": types.MemoryMetadataValue(double_value=123.456),
        "my_boolean_key": types.MemoryMetadataValue(bool_value=True),
        "my_timestamp_key": types.MemoryMetadataValue(
            timestamp_value=datetime.datetime(
                2027, 1, 1, 12, 30, 00, tzinfo=datetime.UTC
            )
        ),
    }

    created = client.memory_banks.memories.create(
      name=memory_bank.name, fact="I like green.", scope=SCOPE,
      config={"metadata": metadata}
    )

    client.memory_banks.memories._update(
      name=name,
      config={"metadata": metadata}
    )

    generated = client.memory_banks.memories.generate(
      name=memory_bank.name, scope=SCOPE,
      direct_memories_source={"direct_memories": [{"fact": "I like sailing."}]},
      config={"metadata": metadata}
    )

    new_memory = generated.response.generated_memories[0].memory
    for memory in (created.response, client.memory_banks.memories.get(name=name), new_memory):
        assert memory.metadata == metadata


def _with_metadata(client: Any, memory_bank: Any) -> None:
    mine = {"string_value": "my_value"}
    remember(
        client, memory_bank, "both keys",
        metadata={"my_string_key": mine, "my_double_key": {"double_value": 1.23}},
    )
    remember(client, memory_bank, "only the string", metadata={"my_string_key": mine})
    remember(client, memory_bank, "other", metadata={"my_string_key": {"string_value": "other"}})
    remember(client, memory_bank, "no metadata")


def test_filter_groups_as_a_dictionary(client: Any, memory_bank: Any) -> None:
    _with_metadata(client, memory_bank)

    results = client.memory_banks.memories.retrieve(
      name=memory_bank.name, scope=SCOPE,
      config={
        # Each element of `filter_groups` is combined using OR logic.
        "filter_groups": [
          {
            # Each element of `filters` is combined using AND logic.
            "filters": [
              {
                "key": "my_string_key",
                "value": {"string_value": "my_value"}
              },
              {
                "key": "my_double_key",
                "value": {"double_value": 1.23}
              }
            ]
          },
          {
            "filters": [
              {
                "key": "my_string_key",
                "value": {"string_value": "other"}
              }
            ]
          }
        ]
      }
    )

    assert sorted(hit.memory.fact for hit in results) == ["both keys", "other"]


def test_filter_groups_as_classes(client: Any, memory_bank: Any) -> None:
    _with_metadata(client, memory_bank)

    results = client.memory_banks.memories.retrieve(
      name=memory_bank.name, scope=SCOPE,
      config=types.RetrieveMemoriesConfig(
        # Each element of `filter_groups` is combined using OR logic.
        filter_groups=[
          types.MemoryConjunctionFilter(
            # Each element of `filters` is combined using AND logic.
            filters=[
              types.MemoryFilter(
                key="my_string_key",
                value=types.MemoryMetadataValue(string_value="my_value")
              ),
              types.MemoryFilter(
                key="my_double_key",
                value=types.MemoryMetadataValue(double_value=1.23)
              )
            ]
          ),
          types.MemoryConjunctionFilter(
            filters=[
              types.MemoryFilter(
                key="my_string_key",
                value=types.MemoryMetadataValue(string_value="other")
              )
            ]
          )
        ]
      )
    )

    assert sorted(hit.memory.fact for hit in results) == ["both keys", "other"]


def test_filter_by_system_fields(client: Any, memory_bank: Any) -> None:
    remember(client, memory_bank, "I have allergies to nuts.")
    remember(client, memory_bank, "I like blue.")
    new_year = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    after_2026 = datetime.datetime.now(datetime.UTC) >= new_year
    expected = ["I have allergies to nuts."] if after_2026 else []

    filter_string = 'fact=~".*allergies.*" AND update_time>="2026-01-01T00:00:00Z"'

    retrieved = client.memory_banks.memories.retrieve(
      name=memory_bank.name, scope=SCOPE,
      config={"filter": filter_string}
    )

    listed = client.memory_banks.memories.list(
      name=memory_bank.name,
      config={"filter": filter_string}
    )

    assert [hit.memory.fact for hit in retrieved] == expected
    assert [memory.fact for memory in listed] == expected


def test_filter_by_topics(client: Any, memory_bank: Any) -> None:
    preferences = [{"managed_memory_topic": "USER_PREFERENCES"}]
    remember(client, memory_bank, "I like tea.", topics=preferences)
    custom = [{"custom_memory_topic_label": "custom-label"}]
    remember(client, memory_bank, "We say ship it.", topics=custom)
    personal = [{"managed_memory_topic": "USER_PERSONAL_INFO"}]
    remember(client, memory_bank, "My name is Ana.", topics=personal)

    filter_string = "topics.managed_memory_topic: USER_PREFERENCES " + \
    "OR topics.custom_memory_topic_label: custom-label"

    retrieved = client.memory_banks.memories.retrieve(
      name=memory_bank.name, scope=SCOPE,
      config={"filter": filter_string}
    )

    listed = client.memory_banks.memories.list(
      name=memory_bank.name,
      config={"filter": filter_string}
    )

    assert sorted(hit.memory.fact for hit in retrieved) == ["I like tea.", "We say ship it."]
    assert sorted(memory.fact for memory in listed) == ["I like tea.", "We say ship it."]
