"""Every seed snippet that needs no generation, run against adk-memory (SPEC §2–§3).

The seeds are Memory Bank's documentation pages (SPEC.md: `seeds/`):

* 000: German, the oldest spelling, the flat `client.agent_engines.{get,list,retrieve}_memor…`;
* 001: German, the new spelling, `client.memory_banks.memories.*`, `from agentplatform import types`;
* 002: Korean, `client.agent_engines.memories.*`, `from vertexai import types`;
* 003: Spanish, `client.memory_banks.memories.*`; its code is byte-for-byte the code of 001, so the
  001 tests below run 003's snippets too;
* 004: German setup: banks created and updated through `client.agent_engines.create/update` with
  `config={"context_spec": {"memory_bank_config": …}}`, in dictionary and class form.

The snippets are pasted as literally as possible. Only these lines differ from the seeds:

* the imports: `import vertexai`, `from vertexai import types`, `from agentplatform import types`
  and `from vertexai.types import X as Y` become `from adk_memory import Client, types` and
  `from adk_memory.types import X as Y` (and `from vertexai.preview.reasoning_engines import AdkApp`
  becomes the current SDK's `from agentplatform.frameworks import AdkApp`);
* the client: `client = vertexai.Client(project=…, location=…)` is the `client` fixture,
  `Client(uri=…, embedding_model="hash-64")`, on every installed backend;
* placeholders (`MEMORY_NAME`, `SCOPE`, `QUERY`, `PROJECT`, `LOCATION`, `TTL`, `EMBEDDING_MODEL`,
  `LLM_MODEL`, `[...]`, and `...` arguments) are filled with data the test created first;
* the Korean seed's filter line ends in a stray quote (a SyntaxError): the other seeds' line is used.

Snippets that generate memories, ingest events or deploy an agent are not run here, except that
deploying an agent must be `Unimplemented`. The bank configs of seed 004 also run through
`client.memory_banks.create/update` (the new spelling of the same call).
"""

# The seeds print, their lines are long, their imports unsorted and their layout their own; the
# snippets are pasted as they are, so neither the linter nor the formatter may rewrite them.
# ruff: noqa: E501, I001, T201
# fmt: off

from __future__ import annotations

import asyncio
import contextlib
import datetime
import importlib.util
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from adk_memory import Client, FailedPrecondition, Unimplemented, types
from adk_memory.embeddings import HashEmbedder

# ---------------------------------------------------------------------------------------------
# Fixtures: the client on every backend, the two spellings of a bank

_CHROMA_MISSING = importlib.util.find_spec("adk_memory_chroma") is None

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param(
        "chroma",
        id="chroma",
        marks=pytest.mark.skipif(
            _CHROMA_MISSING,
            reason="the embedded Chroma backend (adk-memory-chroma) is not installed; "
            "`pip install -e backends/chroma` runs these tests on chroma:// too",
        ),
    ),
]


@pytest.fixture(params=BACKENDS)
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """`memory://`, and embedded Chroma in a fresh folder when its backend is installed."""
    return "memory://" if request.param == "memory" else f"chroma://{tmp_path}/db"


@pytest.fixture
def client(uri: str) -> Iterator[Client]:
    """The seeds' `client = vertexai.Client(project=…, location=…)`."""
    client = Client(uri=uri, embedding_model="hash-64")
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def agent_engine(client: Client) -> Any:
    """Seed 004: `agent_engine = client.agent_engines.create()` (seeds 000 and 002 use it)."""
    agent_engine = client.agent_engines.create()
    return agent_engine


@pytest.fixture
def memory_bank(client: Client) -> types.MemoryBank:
    """The new spelling's bank (seeds 001 and 003 use `memory_bank.name`)."""
    memory_bank = client.memory_banks.create()
    return memory_bank


@pytest.fixture(params=["agent_engines", "memory_banks"])
def spelling(request: pytest.FixtureRequest) -> str:
    """Which spelling creates, updates and reads back a bank."""
    return str(request.param)


@pytest.fixture
def no_google_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No way to find Google credentials: no API key, no Vertex AI settings, no ADC."""
    for variable in (
        "GOOGLE_API_KEY",
        "GEMINI_API_KEY",
        "GOOGLE_GENAI_USE_VERTEXAI",
        "GOOGLE_GENAI_USE_ENTERPRISE",
        "GOOGLE_CLOUD_PROJECT",
        "GOOGLE_CLOUD_LOCATION",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ):
        monkeypatch.delenv(variable, raising=False)
    # Application Default Credentials: no gcloud credentials file, no GCE metadata server.
    monkeypatch.setenv("CLOUDSDK_CONFIG", str(tmp_path / "no-gcloud"))
    monkeypatch.setenv("NO_GCE_CHECK", "True")


# ---------------------------------------------------------------------------------------------
# Helpers: test data, exact distances, bank configs in both spellings


def remember(client: Client, bank_name: str, fact: str, scope: dict[str, str], **config: Any) -> types.Memory:
    """Creates a memory (test data, not a snippet) and returns it."""
    operation = client.memory_banks.memories.create(name=bank_name, fact=fact, scope=scope, config=config or None)
    assert operation.done
    memory: types.Memory = operation.response
    return memory


@contextlib.contextmanager
def clock_at(client: Client, when: datetime.datetime) -> Iterator[None]:
    """Writes made inside happen at `when` (to create memories updated before 2026)."""
    context = client.aio.engine.context
    previous = context.clock
    context.clock = lambda: when
    try:
        yield
    finally:
        context.clock = previous


def euclidean(fact: str, query: str) -> float:
    """The true Euclidean distance between the `hash-64` embeddings of a fact and a query."""
    embedder = HashEmbedder(64)
    [document] = asyncio.run(embedder.embed_documents([fact]))
    question = asyncio.run(embedder.embed_query(query))
    return math.dist(document, question)


def recency_order(memories: Sequence[types.Memory]) -> list[str]:
    """Names in retrieve-all order: `update_time` descending, then name."""
    ordered = sorted(memories, key=lambda m: m.name or "")
    ordered.sort(key=lambda m: m.update_time or datetime.datetime.min, reverse=True)
    return [m.name or "" for m in ordered]


def count_banks(client: Client) -> int:
    return len(list(client.memory_banks.list()))


def create_bank(client: Client, spelling: str, memory_bank_config: Any) -> str:
    """Seed 004's create call (`agent_engines`), or its `memory_banks` spelling; the bank's name."""
    if spelling == "agent_engines":
        agent_engine = client.agent_engines.create(
              config={
                    "context_spec": {
                          "memory_bank_config": memory_bank_config
                    }
              }
        )
        return str(agent_engine.api_resource.name)
    memory_bank = client.memory_banks.create(managed_semantic_memory_config=memory_bank_config)
    return str(memory_bank.name)


def update_bank(client: Client, spelling: str, name: str, memory_bank_config: Any) -> str:
    """Seed 004's update call (`agent_engines`), or its `memory_banks` spelling."""
    if spelling == "agent_engines":
        agent_engine = client.agent_engines.update(
              name=name,
              config={
                  "context_spec": {
                        "memory_bank_config": memory_bank_config
                  }
              }
        )
        return str(agent_engine.api_resource.name)
    memory_bank = client.memory_banks.update(name=name, managed_semantic_memory_config=memory_bank_config)
    return str(memory_bank.name)


def read_config(client: Client, spelling: str, name: str) -> dict[str, Any]:
    """The bank config read back with `agent_engines.get` / `memory_banks.get`, as wire JSON."""
    if spelling == "agent_engines":
        agent_engine = client.agent_engines.get(name=name)
        assert agent_engine.api_resource.name == name
        assert agent_engine.api_resource.context_spec is not None
        config: Any = agent_engine.api_resource.context_spec.memory_bank_config
        return dict(config.model_dump(mode="json", exclude_none=True))
    memory_bank = client.memory_banks.get(name=name)
    assert memory_bank.name == name
    data = dict(memory_bank.managed_semantic_memory_config.model_dump(mode="json", exclude_none=True))
    if "unstructured_memory_configs" in data:
        data["customization_configs"] = data.pop("unstructured_memory_configs")
    return data


def assert_contains(actual: Any, expected: Any, path: str = "memory_bank_config") -> None:
    """`actual` has every key of `expected` with equal values; lists match item by item."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), f"{path}: expected an object, got {actual!r}"
        for key, value in expected.items():
            assert key in actual, f"{path}.{key} is missing from {actual!r}"
            assert_contains(actual[key], value, f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list), f"{path}: expected a list, got {actual!r}"
        assert len(actual) == len(expected), f"{path}: {actual!r} != {expected!r}"
        for index, (got, want) in enumerate(zip(actual, expected, strict=True)):
            assert_contains(got, want, f"{path}[{index}]")
    else:
        assert actual == expected, f"{path}: {actual!r} != {expected!r}"


# ---------------------------------------------------------------------------------------------
# Seeds 000–003: get, list, retrieve

SCOPES = [
    pytest.param({"user_id": "123"}, id="user"),
    pytest.param({"user_id": "123", "app_name": "coffee"}, id="user+app"),
]
QUERY = "Which seat do I prefer on flights?"
FACTS = [
    "I prefer window seats on flights.",
    "I prefer aisle seats on trains.",
    "I am allergic to peanuts.",
    "My favourite colour is blue.",
    "I work as a nurse in Berlin.",
    "I have a dog called Bruno.",
]


def other_scopes(scope: dict[str, str]) -> list[dict[str, str]]:
    """Scopes that share keys or values with `scope` but are not equal to it."""
    return [
        {**scope, "user_id": "456"},
        {**scope, "user_id": "1234"},
        {**scope, "user_id": "123 "},
        {**scope, "session_id": "s1"},
        {key.upper(): value for key, value in scope.items()},
        *([{"user_id": "123"}] if len(scope) > 1 else []),
    ]


def fill_scopes(client: Client, bank_name: str, scope: dict[str, str]) -> tuple[list[types.Memory], list[types.Memory]]:
    """FACTS in `scope` (keys given in reverse order) and, nearer the query, facts elsewhere."""
    reversed_scope = dict(reversed(list(scope.items())))
    mine = [remember(client, bank_name, fact, reversed_scope) for fact in FACTS]
    theirs = [remember(client, bank_name, QUERY, other) for other in other_scopes(scope)]
    theirs += [remember(client, bank_name, "I prefer window seats on flights.", other) for other in other_scopes(scope)]
    return mine, theirs


def check_similarity_results(retrieved: Sequence[Any], mine: Sequence[types.Memory], scope: dict[str, str], query: str, top_k: int) -> None:
    """The `top_k` memories of exactly `scope` nearest the query, by ascending Euclidean distance."""
    assert len(retrieved) == min(top_k, len(mine))
    distances = [r.distance for r in retrieved]
    assert all(d is not None for d in distances)
    assert distances == sorted(distances)
    expected = sorted(mine, key=lambda m: (euclidean(m.fact or "", query), m.name))[:top_k]
    assert [r.memory.name for r in retrieved] == [m.name for m in expected]
    for r in retrieved:
        assert r.memory.scope == scope
        assert r.distance == pytest.approx(euclidean(r.memory.fact, query), abs=1e-4)


def check_all_results(retrieved: Sequence[Any], mine: Sequence[types.Memory], scope: dict[str, str]) -> None:
    """Every memory of exactly `scope`, none of another, newest update first, no distance."""
    assert [r.memory.name for r in retrieved] == recency_order(mine)
    assert all(r.memory.scope == scope and r.distance is None for r in retrieved)


def test_000_get_memory(client: Client, agent_engine: Any) -> None:
    created = remember(client, agent_engine.api_resource.name, "I like blue.", {"user_id": "123"})
    MEMORY_NAME = created.name

    memory = client.agent_engines.get_memory(name=MEMORY_NAME)

    assert memory == created
    assert MEMORY_NAME.startswith(f"{agent_engine.api_resource.name}/memories/")


def test_000_list_memories(client: Client, agent_engine: Any, capsys: pytest.CaptureFixture[str]) -> None:
    mine, theirs = fill_scopes(client, agent_engine.api_resource.name, {"user_id": "123"})
    elsewhere = client.agent_engines.create()
    remember(client, elsewhere.api_resource.name, "A memory of another bank.", {"user_id": "123"})

    pager = client.agent_engines.list_memories(name=agent_engine.api_resource.name)
    for page in pager:
      print(page)

    listed = list(client.agent_engines.list_memories(name=agent_engine.api_resource.name))
    assert sorted(m.name for m in listed) == sorted(m.name for m in mine + theirs)
    printed = capsys.readouterr().out
    assert all(m.name in printed for m in mine + theirs)
    assert "A memory of another bank." not in printed


@pytest.mark.parametrize("SCOPE", SCOPES)
def test_000_retrieve_memories_with_similarity_search(client: Client, agent_engine: Any, SCOPE: dict[str, str]) -> None:
    mine, _ = fill_scopes(client, agent_engine.api_resource.name, SCOPE)

    results = client.agent_engines.retrieve_memories(
        name=agent_engine.api_resource.name,
        scope=SCOPE,
        similarity_search_params={
            "search_query": QUERY,
            # Optional. Defaults to 3.
            "top_k": 3
        }
    )
    # RetrieveMemories returns a pager. You can use `list` to retrieve all memories.
    retrieved = list(results)

    check_similarity_results(retrieved, mine, SCOPE, QUERY, top_k=3)
    assert retrieved[0].memory.fact == "I prefer window seats on flights."


@pytest.mark.parametrize("SCOPE", SCOPES)
def test_000_retrieve_all_memories(client: Client, agent_engine: Any, SCOPE: dict[str, str]) -> None:
    mine, _ = fill_scopes(client, agent_engine.api_resource.name, SCOPE)

    results = client.agent_engines.retrieve_memories(
        name=agent_engine.api_resource.name,
        scope=SCOPE
    )
    # RetrieveMemories returns a pager. You can use `list` to retrieve all pages' memories.
    retrieved = list(results)

    check_all_results(retrieved, mine, SCOPE)


def test_000_retrieve_with_a_scope_that_has_no_memories_returns_nothing(client: Client, agent_engine: Any) -> None:
    fill_scopes(client, agent_engine.api_resource.name, {"user_id": "123"})
    SCOPE = {"user_id": "nobody"}

    results = client.agent_engines.retrieve_memories(
        name=agent_engine.api_resource.name,
        scope=SCOPE,
        similarity_search_params={
            "search_query": QUERY,
            # Optional. Defaults to 3.
            "top_k": 3
        }
    )

    assert list(results) == []
    assert list(client.agent_engines.retrieve_memories(name=agent_engine.api_resource.name, scope=SCOPE)) == []


def test_001_003_get_memory(client: Client, memory_bank: types.MemoryBank) -> None:
    created = remember(client, memory_bank.name or "", "I like blue.", {"user_id": "123"})
    MEMORY_NAME = created.name

    memory = client.memory_banks.memories.get(
        name=MEMORY_NAME)

    assert memory == created


@pytest.mark.parametrize("SCOPE", SCOPES)
def test_001_003_retrieve_with_similarity_search(client: Client, memory_bank: types.MemoryBank, SCOPE: dict[str, str]) -> None:
    mine, _ = fill_scopes(client, memory_bank.name or "", SCOPE)

    results = client.memory_banks.memories.retrieve(
        name=memory_bank.name,
        scope=SCOPE,
        similarity_search_params={
            "search_query": QUERY,
            # Optional. Defaults to 3.
            "top_k": 3
        }
    )
    # RetrieveMemories returns a pager. You can use `page` to retrieve memories.

    results.page  # noqa: B018

    assert len(results.page) <= 3
    check_similarity_results(results.page, mine, SCOPE, QUERY, top_k=3)
    assert results.page[0].memory.fact == "I prefer window seats on flights."


@pytest.mark.parametrize("top_k", [1, 5, 6, 50])
def test_001_003_retrieve_with_similarity_search_honours_top_k(client: Client, memory_bank: types.MemoryBank, top_k: int) -> None:
    SCOPE = {"user_id": "123"}
    mine, _ = fill_scopes(client, memory_bank.name or "", SCOPE)

    results = client.memory_banks.memories.retrieve(
        name=memory_bank.name,
        scope=SCOPE,
        similarity_search_params={
            "search_query": QUERY,
            # Optional. Defaults to 3.
            "top_k": top_k
        }
    )

    assert len(results.page) <= top_k
    check_similarity_results(results.page, mine, SCOPE, QUERY, top_k=top_k)


def test_001_003_retrieve_with_similarity_search_defaults_to_three(client: Client, memory_bank: types.MemoryBank) -> None:
    SCOPE = {"user_id": "123"}
    mine, _ = fill_scopes(client, memory_bank.name or "", SCOPE)

    results = client.memory_banks.memories.retrieve(
        name=memory_bank.name,
        scope=SCOPE,
        similarity_search_params={
            "search_query": QUERY,
        }
    )

    check_similarity_results(results.page, mine, SCOPE, QUERY, top_k=3)


@pytest.mark.parametrize("SCOPE", SCOPES)
def test_001_003_retrieve_all_memories(client: Client, memory_bank: types.MemoryBank, SCOPE: dict[str, str]) -> None:
    mine, _ = fill_scopes(client, memory_bank.name or "", SCOPE)

    results = client.memory_banks.memories.retrieve(
        name=memory_bank.name,
        scope=SCOPE
    )
    # RetrieveMemories returns a pager. You can use `page` to retrieve up to 100 memories per page.

    results.page  # noqa: B018

    check_all_results(results.page, mine, SCOPE)
    assert list(results) == results.page


def test_001_003_retrieve_all_memories_holds_the_whole_scope_in_its_page(client: Client, memory_bank: types.MemoryBank) -> None:
    # Seeds 001/003 say a page holds "up to 100 memories"; seeds 000/002 say `list` gets every
    # page's. The official SDK's pager cannot fetch a second page (reference §2.7), so the one
    # page holds the whole scope (SPEC §3), and both promises give every memory.
    SCOPE = {"user_id": "123"}
    mine = [remember(client, memory_bank.name or "", f"Fact number {i}.", SCOPE) for i in range(101)]
    remember(client, memory_bank.name or "", "Fact number 7.", {"user_id": "456"})

    results = client.memory_banks.memories.retrieve(
        name=memory_bank.name,
        scope=SCOPE
    )

    assert [r.memory.name for r in results.page] == recency_order(mine)
    assert results.next_page_token is None and list(results) == results.page


def test_001_003_list_memories(client: Client, memory_bank: types.MemoryBank, capsys: pytest.CaptureFixture[str]) -> None:
    mine, theirs = fill_scopes(client, memory_bank.name or "", {"user_id": "123"})
    many = [remember(client, memory_bank.name or "", f"Listed fact {i}.", {"user_id": "789"}) for i in range(100)]
    elsewhere = client.memory_banks.create()
    remember(client, elsewhere.name or "", "A memory of another bank.", {"user_id": "123"})

    pager = client.memory_banks.memories.list(name=memory_bank.name)
    for page in pager:
      print(page)

    everything = mine + theirs + many
    listed = list(client.memory_banks.memories.list(name=memory_bank.name))
    assert len(listed) == len(everything) > 100  # the pager followed a second page
    assert sorted(m.name for m in listed) == sorted(m.name for m in everything)
    printed = capsys.readouterr().out
    assert all(m.name in printed for m in everything)
    assert "A memory of another bank." not in printed


def test_002_get_memory(client: Client, agent_engine: Any) -> None:
    created = remember(client, agent_engine.api_resource.name, "I like blue.", {"user_id": "123"})
    MEMORY_NAME = created.name

    memory = client.agent_engines.memories.get(
        name=MEMORY_NAME)

    assert memory == created


def test_002_list_memories(client: Client, agent_engine: Any, capsys: pytest.CaptureFixture[str]) -> None:
    mine, theirs = fill_scopes(client, agent_engine.api_resource.name, {"user_id": "123"})

    pager = client.agent_engines.memories.list(name=agent_engine.api_resource.name)
    for page in pager:
      print(page)

    listed = list(client.agent_engines.memories.list(name=agent_engine.api_resource.name))
    assert sorted(m.name for m in listed) == sorted(m.name for m in mine + theirs)
    printed = capsys.readouterr().out
    assert all(m.name in printed for m in mine + theirs)


@pytest.mark.parametrize("SCOPE", SCOPES)
def test_002_retrieve_with_similarity_search(client: Client, agent_engine: Any, SCOPE: dict[str, str]) -> None:
    mine, _ = fill_scopes(client, agent_engine.api_resource.name, SCOPE)

    results = client.agent_engines.memories.retrieve(
        name=agent_engine.api_resource.name,
        scope=SCOPE,
        similarity_search_params={
            "search_query": QUERY,
            # Optional. Defaults to 3.
            "top_k": 3
        }
    )
    # RetrieveMemories returns a pager. You can use `list` to retrieve all memories.
    retrieved = list(results)

    assert len(results.page) <= 3
    check_similarity_results(retrieved, mine, SCOPE, QUERY, top_k=3)


@pytest.mark.parametrize("SCOPE", SCOPES)
def test_002_retrieve_all_memories(client: Client, agent_engine: Any, SCOPE: dict[str, str]) -> None:
    mine, _ = fill_scopes(client, agent_engine.api_resource.name, SCOPE)

    results = client.agent_engines.memories.retrieve(
        name=agent_engine.api_resource.name,
        scope=SCOPE
    )
    # RetrieveMemories returns a pager. You can use `list` to retrieve all pages' memories.
    retrieved = list(results)

    check_all_results(retrieved, mine, SCOPE)


def test_the_memories_resource_is_the_same_in_both_spellings(client: Client) -> None:
    assert client.agent_engines.memories is client.memory_banks.memories


# ---------------------------------------------------------------------------------------------
# Seeds 001–003: metadata

EXPECTED_METADATA = {
    "my_string_key": {"string_value": "my_string_value"},
    "my_double_key": {"double_value": 123.456},
    "my_boolean_key": {"bool_value": True},
    "my_timestamp_key": {"timestamp_value": "2027-01-01T12:30:00Z"},
}


def metadata_json(memory: types.Memory) -> dict[str, Any]:
    """A memory's metadata as JSON, with timestamps in UTC `Z` form."""
    result: dict[str, Any] = {}
    for key, value in (memory.metadata or {}).items():
        data = value.model_dump(mode="json", exclude_none=True)
        if "timestamp_value" in data:
            when = datetime.datetime.fromisoformat(data["timestamp_value"].replace("Z", "+00:00"))
            data["timestamp_value"] = when.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        result[key] = data
    return result


def test_001_003_create_and_update_with_metadata(client: Client, memory_bank: types.MemoryBank) -> None:
    SCOPE = {"user_id": "123"}
    plain = remember(client, memory_bank.name or "", "I like tea.", SCOPE)

    import datetime

    from adk_memory import types

    metadata = {
        "my_string_key": types.MemoryMetadataValue(string_value="my_string_value"),
        "my_double_key": types.MemoryMetadataValue(double_value=123.456),
        "my_boolean_key": types.MemoryMetadataValue(bool_value=True),
        "my_timestamp_key": types.MemoryMetadataValue(
            timestamp_value=datetime.datetime(
                2027, 1, 1, 12, 30, 00, tzinfo=datetime.timezone.utc  # noqa: UP017
            )
        ),
    }

    created = client.memory_banks.memories.create(
      name=memory_bank.name, fact="I like coffee.", scope=SCOPE,
      config={"metadata": metadata}
    )

    updated = client.memory_banks.memories.update(
      name=plain.name,
      config={"metadata": metadata}
    )

    assert metadata_json(created.response) == EXPECTED_METADATA
    assert metadata_json(client.memory_banks.memories.get(name=created.response.name)) == EXPECTED_METADATA
    after = client.memory_banks.memories.get(name=plain.name)
    assert metadata_json(updated.response) == metadata_json(after) == EXPECTED_METADATA
    assert (after.fact, after.scope, after.create_time) == (plain.fact, plain.scope, plain.create_time)


def test_002_create_and_update_with_metadata(client: Client, agent_engine: Any) -> None:
    SCOPE = {"user_id": "123"}
    plain = remember(client, agent_engine.api_resource.name, "I like tea.", SCOPE)

    import datetime

    from adk_memory import types

    metadata = {
        "my_string_key": types.MemoryMetadataValue(string_value="my_string_value"),
        "my_double_key": types.MemoryMetadataValue(double_value=123.456),
        "my_boolean_key": types.MemoryMetadataValue(bool_value=True),
        "my_timestamp_key": types.MemoryMetadataValue(
            timestamp_value=datetime.datetime(
                2027, 1, 1, 12, 30, 00, tzinfo=datetime.timezone.utc  # noqa: UP017
            )
        ),
    }

    created = client.agent_engines.memories.create(
      name=agent_engine.api_resource.name, fact="I like coffee.", scope=SCOPE,
      config={"metadata": metadata}
    )

    updated = client.agent_engines.memories.update(
      name=plain.name,
      config={"metadata": metadata}
    )

    assert metadata_json(client.agent_engines.memories.get(name=created.response.name)) == EXPECTED_METADATA
    after = client.agent_engines.memories.get(name=plain.name)
    assert metadata_json(updated.response) == metadata_json(after) == EXPECTED_METADATA
    assert (after.fact, after.scope) == (plain.fact, plain.scope)


def metadata_values(**values: Any) -> dict[str, types.MemoryMetadataValue]:
    """Test data: metadata from Python values (str, float, bool)."""
    kinds = {str: "string_value", float: "double_value", bool: "bool_value"}
    return {key: types.MemoryMetadataValue(**{kinds[type(value)]: value}) for key, value in values.items()}


def fill_metadata(client: Client, bank_name: str) -> tuple[dict[str, str], set[str]]:
    """Memories with matching and non-matching metadata; the scope and the facts that match."""
    scope = {"user_id": "123"}
    rows: list[tuple[str, dict[str, Any], bool]] = [
        ("my_value and 1.23", {"my_string_key": "my_value", "my_double_key": 1.23}, True),
        ("my_value and 1.23 and more", {"my_string_key": "my_value", "my_double_key": 1.23, "x": True}, True),
        ("other", {"my_string_key": "other"}, True),
        ("other and 9.0", {"my_string_key": "other", "my_double_key": 9.0}, True),
        ("my_value and 4.56", {"my_string_key": "my_value", "my_double_key": 4.56}, False),
        ("my_value without a double", {"my_string_key": "my_value"}, False),
        ("1.23 without a string", {"my_double_key": 1.23}, False),
        ("my_value and the string 1.23", {"my_string_key": "my_value", "my_double_key": "1.23"}, False),
        ("Other, capitalised", {"my_string_key": "Other"}, False),
        ("other as another key", {"my_other_key": "other"}, False),
        ("no metadata", {}, False),
    ]
    for fact, values, _ in rows:
        remember(client, bank_name, fact, scope, **({"metadata": metadata_values(**values)} if values else {}))
    remember(client, bank_name, "other, but another scope", {"user_id": "456"}, metadata=metadata_values(my_string_key="other"))
    return scope, {fact for fact, _, selected in rows if selected}


def test_001_003_filter_groups_dictionary(client: Client, memory_bank: types.MemoryBank) -> None:
    SCOPE, expected = fill_metadata(client, memory_bank.name or "")

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

    assert {r.memory.fact for r in results} == expected
    assert all(r.memory.scope == SCOPE for r in results)


def test_001_003_filter_groups_class_based(client: Client, memory_bank: types.MemoryBank) -> None:
    SCOPE, expected = fill_metadata(client, memory_bank.name or "")

    from adk_memory import types

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

    assert {r.memory.fact for r in results} == expected


def test_001_003_filter_groups_with_similarity_search_filter_before_top_k(client: Client, memory_bank: types.MemoryBank) -> None:
    SCOPE, expected = fill_metadata(client, memory_bank.name or "")

    results = client.memory_banks.memories.retrieve(
      name=memory_bank.name, scope=SCOPE,
      similarity_search_params={"search_query": "my_value and 4.56", "top_k": 2},
      config={"filter_groups": [{"filters": [{"key": "my_string_key", "value": {"string_value": "other"}}]}]},
    )

    assert len(results.page) == 2
    assert {r.memory.fact for r in results.page} == {"other", "other and 9.0"}
    assert [r.distance for r in results.page] == sorted(r.distance for r in results.page)


def test_002_filter_groups_dictionary(client: Client, agent_engine: Any) -> None:
    SCOPE, expected = fill_metadata(client, agent_engine.api_resource.name)

    results = client.agent_engines.memories.retrieve(
      name=agent_engine.api_resource.name, scope=SCOPE,
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

    assert {r.memory.fact for r in results} == expected


def test_002_filter_groups_class_based(client: Client, agent_engine: Any) -> None:
    SCOPE, expected = fill_metadata(client, agent_engine.api_resource.name)

    from adk_memory import types

    results = client.agent_engines.memories.retrieve(
      name=agent_engine.api_resource.name, scope=SCOPE,
      config=types.RetrieveAgentEngineMemoriesConfig(
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

    assert {r.memory.fact for r in results} == expected


# ---------------------------------------------------------------------------------------------
# Seeds 001–003: system fields and topics

ALLERGY_MATCHES = {"I have severe allergies to peanuts.", "My allergies get worse in spring.", "Seasonal allergies, noted at midnight."}


def fill_allergies(client: Client, bank_name: str) -> dict[str, str]:
    """Facts about allergies updated before and after 2026, and facts about other things."""
    scope = {"user_id": "123"}
    with clock_at(client, datetime.datetime(2025, 12, 31, 23, 59, 59, 999999, tzinfo=datetime.UTC)):
        remember(client, bank_name, "I had allergies as a child.", scope)
    with clock_at(client, datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)):
        remember(client, bank_name, "Seasonal allergies, noted at midnight.", scope)
    for fact in ("I have severe allergies to peanuts.", "My allergies get worse in spring.", "I like peanuts.", "Allergies run in my family.", "I am allergic to cats."):
        remember(client, bank_name, fact, scope)
    remember(client, bank_name, "Another user's allergies.", {"user_id": "456"})
    return scope


def test_001_003_filter_by_system_fields(client: Client, memory_bank: types.MemoryBank) -> None:
    SCOPE = fill_allergies(client, memory_bank.name or "")

    filter_string = 'fact=~".*allergies.*" AND update_time>="2026-01-01T00:00:00Z"'

    retrieved = client.memory_banks.memories.retrieve(
      name=memory_bank.name, scope=SCOPE,
      config={"filter": filter_string}
    )

    listed = client.memory_banks.memories.list(
      name=memory_bank.name,
      config={"filter": filter_string}
    )

    assert {r.memory.fact for r in retrieved} == ALLERGY_MATCHES
    assert {m.fact for m in listed} == ALLERGY_MATCHES | {"Another user's allergies."}


def test_002_filter_by_system_fields(client: Client, agent_engine: Any) -> None:
    SCOPE = fill_allergies(client, agent_engine.api_resource.name)

    # The Korean seed's line ends in a stray quote, a SyntaxError in Python: the filter is
    # used as the other seeds write it.
    with pytest.raises(SyntaxError):
        compile("""filter_string = 'fact=~".*allergies.*" AND update_time>="2026-01-01T00:00:00Z"''\n""", "seed-002", "exec")
    filter_string = 'fact=~".*allergies.*" AND update_time>="2026-01-01T00:00:00Z"'

    retrieved = client.agent_engines.memories.retrieve(
      name=agent_engine.api_resource.name, scope=SCOPE,
      config={"filter": filter_string}
    )

    listed = client.agent_engines.memories.list(
      name=agent_engine.api_resource.name,
      config={"filter": filter_string}
    )

    assert {r.memory.fact for r in retrieved} == ALLERGY_MATCHES
    assert {m.fact for m in listed} == ALLERGY_MATCHES | {"Another user's allergies."}


TOPIC_MATCHES = {"managed USER_PREFERENCES", "custom custom-label", "both managed topics"}


def fill_topics(client: Client, bank_name: str) -> dict[str, str]:
    """Memories labelled with managed and custom topics (as generation would label them)."""
    scope = {"user_id": "123"}
    rows: list[tuple[str, list[dict[str, str]]]] = [
        ("managed USER_PREFERENCES", [{"managed_memory_topic": "USER_PREFERENCES"}]),
        ("custom custom-label", [{"custom_memory_topic_label": "custom-label"}]),
        ("both managed topics", [{"managed_memory_topic": "USER_PERSONAL_INFO"}, {"managed_memory_topic": "USER_PREFERENCES"}]),
        ("managed USER_PERSONAL_INFO", [{"managed_memory_topic": "USER_PERSONAL_INFO"}]),
        ("custom custom-label-2", [{"custom_memory_topic_label": "custom-label-2"}]),
        ("custom USER_PREFERENCES label", [{"custom_memory_topic_label": "USER_PREFERENCES"}]),
        ("no topics", []),
    ]
    for fact, topics in rows:
        remember(client, bank_name, fact, scope, **({"topics": topics} if topics else {}))
    remember(client, bank_name, "another scope's preference", {"user_id": "456"}, topics=[{"managed_memory_topic": "USER_PREFERENCES"}])
    return scope


def test_001_003_filter_by_topics(client: Client, memory_bank: types.MemoryBank) -> None:
    SCOPE = fill_topics(client, memory_bank.name or "")

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

    assert {r.memory.fact for r in retrieved} == TOPIC_MATCHES
    assert {m.fact for m in listed} == TOPIC_MATCHES | {"another scope's preference"}


def test_002_filter_by_topics(client: Client, agent_engine: Any) -> None:
    SCOPE = fill_topics(client, agent_engine.api_resource.name)

    filter_string = "topics.managed_memory_topic: USER_PREFERENCES " + \
    "OR topics.custom_memory_topic_label: custom-label"

    retrieved = client.agent_engines.memories.retrieve(
      name=agent_engine.api_resource.name, scope=SCOPE,
      config={"filter": filter_string}
    )

    listed = client.agent_engines.memories.list(
      name=agent_engine.api_resource.name,
      config={"filter": filter_string}
    )

    assert {r.memory.fact for r in retrieved} == TOPIC_MATCHES
    assert {m.fact for m in listed} == TOPIC_MATCHES | {"another scope's preference"}


# ---------------------------------------------------------------------------------------------
# Seed 004: the client, creating a bank, deployment, the bank's name from the environment


def test_004_client_setup(uri: str) -> None:
    client = Client(uri=uri, embedding_model="hash-64",
      project="my-project",
      location="us-central1",
    )
    try:
        agent_engine = client.agent_engines.create()
        memory = remember(client, agent_engine.api_resource.name, "I like blue.", {"user_id": "123"})
    finally:
        client.close()

    assert agent_engine.api_resource.name.startswith("projects/my-project/locations/us-central1/reasoningEngines/")
    assert memory.name.startswith(f"{agent_engine.api_resource.name}/memories/")


def test_004_create_with_the_default_configuration(client: Client, spelling: str, capsys: pytest.CaptureFixture[str]) -> None:
    if spelling == "agent_engines":
        agent_engine = client.agent_engines.create()

        # Optionally, print out the Agent Platform resource name. You will need the
        # resource name to interact with your Agent Platform instance later on.
        print(agent_engine.api_resource.name)
        name = agent_engine.api_resource.name
    else:
        memory_bank = client.memory_banks.create()
        print(memory_bank.name)
        name = memory_bank.name or ""

    assert capsys.readouterr().out.strip() == name
    assert name.startswith("projects/local/locations/local/reasoningEngines/")
    bank_id = name.rsplit("/", 1)[1]
    assert bank_id.isdigit() or bank_id.replace("-", "").isalnum()
    # The bank records the embedding model it was created with.
    assert read_config(client, spelling, name)["similarity_search_config"]["embedding_model"] == "hash-64"
    memory = remember(client, name, "I like blue.", {"user_id": "123"})
    assert client.memory_banks.memories.get(name=memory.name or "") == memory


def test_004_deploying_an_agent_is_unimplemented(client: Client) -> None:
    from google.adk.agents import Agent
    from agentplatform.frameworks import AdkApp  # type: ignore[import-untyped]  # was vertexai.preview.reasoning_engines

    # Develop an agent using the ADK template.
    agent = Agent(name="coffee_agent", model="gemini-2.5-flash", instruction="Help the customer.")

    adk_app = AdkApp(
          agent=agent,
    )
    context_spec = {"context_spec": {"memory_bank_config": {"ttl_config": {"default_ttl": "3600s"}}}}
    banks_before = count_banks(client)

    # Deploy the agent to Agent Runtime.
    with pytest.raises(Unimplemented) as created:
        agent_engine = client.agent_engines.create(
              agent_engine=adk_app,
              config={
                    "staging_bucket": "gs://my-staging-bucket",
                    "requirements": ["google-cloud-aiplatform[agent_engines,adk]"],
                    # Optional.
                    **context_spec
              }
        )

    agent_engine = client.agent_engines.create()
    # Update an existing Agent Runtime to add or modify the Runtime.
    with pytest.raises(Unimplemented) as updated:
        agent_engine = client.agent_engines.update(
              name=agent_engine.api_resource.name,
              agent=adk_app,
              config={
                    "staging_bucket": "gs://my-staging-bucket",
                    "requirements": ["google-cloud-aiplatform[agent_engines,adk]"],
                    # Optional.
                    **context_spec
              }
        )

    assert "deployment" in str(created.value) and "deployment" in str(updated.value)
    assert count_banks(client) == banks_before + 1  # only the plain bank
    assert "ttl_config" not in read_config(client, "agent_engines", agent_engine.api_resource.name)


def test_004_custom_agent_reads_the_bank_name_from_the_environment(client: Client, agent_engine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    bank_id = agent_engine.api_resource.name.rsplit("/", 1)[1]
    monkeypatch.setenv("GOOGLE_CLOUD_PROJECT", "local")
    monkeypatch.setenv("GOOGLE_CLOUD_LOCATION", "local")
    monkeypatch.setenv("GOOGLE_CLOUD_AGENT_ENGINE_ID", bank_id)

    import os

    project = os.environ.get("GOOGLE_CLOUD_PROJECT")
    location = os.environ.get("GOOGLE_CLOUD_LOCATION")
    agent_engine_id = os.environ.get("GOOGLE_CLOUD_AGENT_ENGINE_ID")

    agent_engine_name = f"projects/{project}/locations/{location}/reasoningEngines/{agent_engine_id}"

    assert agent_engine_name == agent_engine.api_resource.name
    operation = client.agent_engines.memories.create(name=agent_engine_name, fact="I like blue.", scope={"user_id": "123"})
    assert operation.response.name.startswith(f"{agent_engine_name}/memories/")
    [retrieved] = client.agent_engines.memories.retrieve(name=agent_engine_name, scope={"user_id": "123"})
    assert retrieved.memory == operation.response


# ---------------------------------------------------------------------------------------------
# Seed 004: the bank's configuration

GOOGLE_EMBEDDING_MODELS = [
    pytest.param("projects/my-project/locations/us-central1/publishers/google/models/text-embedding-005", id="full-text-embedding-005"),
    pytest.param("projects/my-project/locations/us-central1/publishers/google/models/gemini-embedding-001", id="full-gemini-embedding-001"),
    pytest.param("projects/my-project/locations/us-central1/publishers/google/models/text-multilingual-embedding-002", id="full-text-multilingual-embedding-002"),
    pytest.param("text-embedding-005", id="text-embedding-005"),
    pytest.param("gemini-embedding-001", id="gemini-embedding-001"),
    pytest.param("text-multilingual-embedding-002", id="text-multilingual-embedding-002"),
]
ALL_GOOGLE_EMBEDDING_MODELS = [pytest.param(*p.values, id=p.id) for p in GOOGLE_EMBEDDING_MODELS]

PROJECT = "my-project"
LOCATION = "us-central1"
DEFAULT_CONFIG_EXPECTED = {
    "generation_config": {"model": f"projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/gemini-2.5-flash"},
    "ttl_config": {"memory_revision_default_ttl": "31536000s"},
    "customization_configs": [
        {
            "memory_topics": [
                {"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}},
                {"managed_memory_topic": {"managed_topic_enum": "USER_PREFERENCES"}},
                {"managed_memory_topic": {"managed_topic_enum": "KEY_CONVERSATION_DETAILS"}},
                {"managed_memory_topic": {"managed_topic_enum": "EXPLICIT_INSTRUCTIONS"}},
            ],
            "consolidation_config": {"revisions_per_candidate_count": 1},
            "generate_memories_examples": [],
            "enable_third_person_memories": False,
        }
    ],
    "disable_memory_revisions": False,
}


def default_config_dictionary(embedding_model: str) -> dict[str, Any]:
    """Seed 004's default bank config, dictionary form (`embedding_model` is its one varied line)."""
    memory_bank_config = {
      "generation_config": {
        # `gemini-2.5-flash` will be used to extract and consolidate memories.
        # Note: The global endpoint will be used for regions that don't have a
        # regional endpoint available.
        "model": f"projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/gemini-2.5-flash"
      },
      "similarity_search_config": {
        # `text-embedding-005` will be used for similarity search, including
        # during consolidation. Consolidation uses similarity search to find
        # candidate memories that may be updated with new information.
        "embedding_model": embedding_model
      },
      "ttl_config": {
        # Default TTL for memory revisions is 365 days.
        "memory_revision_default_ttl": f"{365 * 24 * 60 * 60}s"
      },
      "customization_configs": [
        {
          # Extract user information, preferences, key conversation details,
          # and information that the user explicitly asked to be remembered.
          "memory_topics": [
            {"managed_memory_topic": "USER_PERSONAL_INFO"},
            {"managed_memory_topic": "USER_PREFERENCES"},
            {"managed_memory_topic": "KEY_CONVERSATION_DETAILS"},
            {"managed_memory_topic": "EXPLICIT_INSTRUCTIONS"}
          ],
          "consolidation_config": {
            # Only use the latest memory revision of each candidate memory during
            # consolidation.
            "revisions_per_candidate_count": 1
          },
          # Only use the pre-defined set of examples.
          "generate_memories_examples": [],
          # Generate memories in the first person.
          "enable_third_person_memories": False
        }
      ],
      # Memory revisions will be persisted. This can be overridden on a request-level.
      "disable_memory_revisions": False
    }
    return memory_bank_config


def default_config_class_based(embedding_model: str) -> Any:
    """Seed 004's default bank config, class form (`embedding_model` is its one varied line)."""
    from adk_memory.types import MemoryBankCustomizationConfig as CustomizationConfig
    from adk_memory.types import MemoryBankCustomizationConfigConsolidationConfig as ConsolidationConfig
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopic as MemoryTopic
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopicManagedMemoryTopic as ManagedMemoryTopic
    from adk_memory.types import ManagedTopicEnum
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfig as MemoryBankConfig
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfigGenerationConfig as GenerationConfig
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfigSimilaritySearchConfig as SimilaritySearchConfig
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfigTtlConfig as TtlConfig

    memory_bank_config = MemoryBankConfig(
      generation_config=GenerationConfig(
        # `gemini-2.5-flash` will be used to extract and consolidate memories.
        # Note: The global endpoint will be used for regions that don't have a
        # regional endpoint available.
        model=f"projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/gemini-2.5-flash"
      ),
      similarity_search_config=SimilaritySearchConfig(
        # `text-embedding-005` will be used for similarity search, including
        # during consolidation. Consolidation uses similarity search to find
        # candidate memories that may be updated with new information.
        embedding_model=embedding_model
      ),
      ttl_config=TtlConfig(
        # Default TTL for memory revisions is 365 days.
        memory_revision_default_ttl=f"{365 * 24 * 60 * 60}s"
      ),
      customization_configs=[
        CustomizationConfig(
          # Extract personal information, preferences, key conversation details,
          # and information that the user explicitly asked to be remembered.
          memory_topics=[
            MemoryTopic(
              managed_memory_topic=ManagedMemoryTopic(
                managed_topic_enum=ManagedTopicEnum.USER_PERSONAL_INFO)),
            MemoryTopic(
              managed_memory_topic=ManagedMemoryTopic(
                managed_topic_enum=ManagedTopicEnum.USER_PREFERENCES)),
            MemoryTopic(
              managed_memory_topic=ManagedMemoryTopic(
                managed_topic_enum=ManagedTopicEnum.KEY_CONVERSATION_DETAILS)),
            MemoryTopic(
              managed_memory_topic=ManagedMemoryTopic(
                managed_topic_enum=ManagedTopicEnum.EXPLICIT_INSTRUCTIONS))
          ],
          # Only use the pre-defined set of examples.
          generate_memories_examples=[],
          consolidation_config=ConsolidationConfig(
            # Only use the latest memory revision of each candidate memory during
            # consolidation.
            revisions_per_candidate_count=1
          ),
          # Generate memories in the first person.
          enable_third_person_memories=False,
        )
      ],
      # Memory revisions will be persisted. This can be overridden on a request-level.
      disable_memory_revisions=False
    )
    return memory_bank_config


DEFAULT_CONFIG_FORMS = [
    pytest.param(default_config_dictionary, id="dictionary"),
    pytest.param(default_config_class_based, id="class"),
]


@pytest.mark.parametrize("form", DEFAULT_CONFIG_FORMS)
@pytest.mark.parametrize(
    "embedding_model",
    [
        pytest.param(f"projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/text-embedding-005", id="as-written"),
        pytest.param("text-embedding-005", id="short-name"),
    ],
)
@pytest.mark.usefixtures("no_google_credentials")
def test_004_default_config_with_text_embedding_005_and_no_credentials_is_failed_precondition(client: Client, spelling: str, form: Any, embedding_model: str) -> None:
    memory_bank_config = form(embedding_model)
    banks_before = count_banks(client)

    with pytest.raises(FailedPrecondition):
        create_bank(client, spelling, memory_bank_config)

    assert count_banks(client) == banks_before


@pytest.mark.parametrize("embedding_model", ALL_GOOGLE_EMBEDDING_MODELS)
@pytest.mark.usefixtures("no_google_credentials")
def test_004_a_google_embedding_model_never_falls_back_silently(client: Client, spelling: str, embedding_model: str) -> None:
    """Passes today and after the fix: refused at creation, or recorded and refused on first write."""
    memory_bank_config = default_config_dictionary(embedding_model)
    try:
        name = create_bank(client, spelling, memory_bank_config)
    except FailedPrecondition:
        return
    with pytest.raises(FailedPrecondition):
        remember(client, name, "I like blue.", {"user_id": "123"})


@pytest.mark.parametrize("form", DEFAULT_CONFIG_FORMS)
def test_004_default_config_with_hash_embeddings(client: Client, spelling: str, form: Any) -> None:
    memory_bank_config = form("hash-64")

    name = create_bank(client, spelling, memory_bank_config)

    config = read_config(client, spelling, name)
    assert_contains(config, {**DEFAULT_CONFIG_EXPECTED, "similarity_search_config": {"embedding_model": "hash-64"}})
    memory = remember(client, name, "I like blue.", {"user_id": "123"})
    assert memory.expire_time is None  # no ttl: memories do not expire
    [revision] = client.memory_banks.memories.revisions.list(name=memory.name or "")
    assert revision.expire_time is not None and revision.create_time is not None
    assert revision.expire_time - revision.create_time == pytest.approx(datetime.timedelta(days=365), abs=datetime.timedelta(seconds=1))


@pytest.mark.parametrize("form", DEFAULT_CONFIG_FORMS)
def test_004_create_then_update_with_a_memory_bank_config(client: Client, spelling: str, form: Any) -> None:
    memory_bank_config = form("hash-64")

    if spelling == "agent_engines":
        agent_engine = client.agent_engines.create(
              config={
                    "context_spec": {
                          "memory_bank_config": {"ttl_config": {"default_ttl": "60s"}, "disable_memory_revisions": True}
                    }
              }
        )

        # Alternatively, update an existing Agent Platform instance's Memory Bank config.
        agent_engine = client.agent_engines.update(
              name=agent_engine.api_resource.name,
              config={
                  "context_spec": {
                        "memory_bank_config": memory_bank_config
                  }
              }
        )
        name = agent_engine.api_resource.name
    else:
        memory_bank = client.memory_banks.create(managed_semantic_memory_config={"ttl_config": {"default_ttl": "60s"}, "disable_memory_revisions": True})
        memory_bank = client.memory_banks.update(name=memory_bank.name, managed_semantic_memory_config=memory_bank_config)
        name = memory_bank.name

    config = read_config(client, spelling, name)
    assert_contains(config, {**DEFAULT_CONFIG_EXPECTED, "similarity_search_config": {"embedding_model": "hash-64"}})
    assert config["ttl_config"] == {"memory_revision_default_ttl": "31536000s"}  # top-level fields are replaced


def test_004_create_and_update_snippets(client: Client) -> None:
    """The "Erstellen" and "Aktualisieren" snippets, with a config for their `...`."""
    agent_engine = client.agent_engines.create(
      config={
        "context_spec": {
          "memory_bank_config": {"customization_configs": [{"enable_third_person_memories": True}]}
        }
      }
    )
    AGENT_ENGINE_NAME = agent_engine.api_resource.name

    agent_engine = client.agent_engines.update(
      # You can access the name using `agent_engine.api_resource.name` for an AgentEngine object.
      name=AGENT_ENGINE_NAME,
      config={
        "context_spec": {
          "memory_bank_config": {"ttl_config": {"default_ttl": "3600s"}}
        }
      }
    )

    assert agent_engine.api_resource.name == AGENT_ENGINE_NAME
    config = read_config(client, "agent_engines", AGENT_ENGINE_NAME)
    assert_contains(config, {"customization_configs": [{"enable_third_person_memories": True}], "ttl_config": {"default_ttl": "3600s"}})
    assert read_config(client, "memory_banks", AGENT_ENGINE_NAME) == config


# Scope-specific customization: user_level_config and default_config

BUSINESS_FEEDBACK_DESCRIPTION = """Specific user feedback about their experience at
    the coffee shop. This includes opinions on drinks, food, pastries, ambiance,
    staff friendliness, service speed, cleanliness, and any suggestions for
    improvement."""


def test_004_scope_level_configs_dictionary(client: Client, spelling: str) -> None:
    memory_topics = [{"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}}]
    examples = [{"conversationSource": {"events": [{"content": {"role": "user", "parts": [{"text": "I live in Berlin."}]}}]}, "generatedMemories": [{"fact": "I live in Berlin."}]}]

    user_level_config = {
      "scope_keys": ["user_id"],
      "memory_topics": memory_topics,
      "generate_memories_examples": examples
    }

    default_config = {
      "memory_topics": memory_topics,
      "generate_memories_examples": examples
    }

    memory_bank_config = {
      "customization_configs": [
        user_level_config,
        default_config
      ]
    }

    name = create_bank(client, spelling, memory_bank_config)

    expected_example = {"conversation_source": {"events": [{"content": {"role": "user", "parts": [{"text": "I live in Berlin."}]}}]}, "generated_memories": [{"fact": "I live in Berlin."}]}
    expected_topics = [{"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}}]
    configs = read_config(client, spelling, name)["customization_configs"]
    assert_contains(configs, [
        {"scope_keys": ["user_id"], "memory_topics": expected_topics, "generate_memories_examples": [expected_example]},
        {"memory_topics": expected_topics, "generate_memories_examples": [expected_example]},
    ])
    assert "scope_keys" not in configs[1] or not configs[1]["scope_keys"]


def test_004_scope_level_configs_class_based(client: Client, spelling: str) -> None:
    from adk_memory.types import MemoryBankCustomizationConfigGenerateMemoriesExample as GenerateMemoriesExample
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopic as MemoryTopic

    memory_topics = [MemoryTopic(managed_memory_topic={"managed_topic_enum": "USER_PREFERENCES"})]
    # The seed's `[...]`, filled with a complete example (one without events is InvalidArgument).
    examples = [GenerateMemoriesExample(conversation_source={"events": [{"content": {"role": "user", "parts": [{"text": "Thanks, bye."}]}}]}, generated_memories=[])]

    from adk_memory.types import MemoryBankCustomizationConfig as CustomizationConfig

    user_level_config = CustomizationConfig(
      scope_keys=["user_id"],
      memory_topics=memory_topics,
      generate_memories_examples=examples
    )

    name = create_bank(client, spelling, {"customization_configs": [user_level_config]})

    configs = read_config(client, spelling, name)["customization_configs"]
    assert_contains(configs, [{"scope_keys": ["user_id"], "memory_topics": [{"managed_memory_topic": {"managed_topic_enum": "USER_PREFERENCES"}}]}])
    assert len(configs[0]["generate_memories_examples"]) == 1


# Memory topics

def managed_topic_dictionary() -> Any:
    memory_topic = {
      "managed_memory_topic": {
        "managed_topic_enum": "USER_PERSONAL_INFO"
      }
    }
    return memory_topic


def managed_topic_class_based() -> Any:
    from adk_memory.types import ManagedTopicEnum
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopic as MemoryTopic
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopicManagedMemoryTopic as ManagedMemoryTopic

    memory_topic = MemoryTopic(
        managed_memory_topic=ManagedMemoryTopic(
            managed_topic_enum=ManagedTopicEnum.USER_PERSONAL_INFO
        )
    )
    return memory_topic


def custom_topic_dictionary() -> Any:
    memory_topic = {
      "custom_memory_topic": {
        "label": "business_feedback",
        "description": """Specific user feedback about their experience at
    the coffee shop. This includes opinions on drinks, food, pastries, ambiance,
    staff friendliness, service speed, cleanliness, and any suggestions for
    improvement."""
        }
    }
    return memory_topic


def custom_topic_class_based() -> Any:
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopic as MemoryTopic
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopicCustomMemoryTopic as CustomMemoryTopic

    memory_topic = MemoryTopic(
      custom_memory_topic=CustomMemoryTopic(
        label="business_feedback",
        description="""Specific user feedback about their experience at
    the coffee shop. This includes opinions on drinks, food, pastries, ambiance,
    staff friendliness, service speed, cleanliness, and any suggestions for
    improvement."""
      )
    )
    return memory_topic


@pytest.mark.parametrize(
    ("make_topic", "expected"),
    [
        pytest.param(managed_topic_dictionary, {"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}}, id="managed-dictionary"),
        pytest.param(managed_topic_class_based, {"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}}, id="managed-class"),
        pytest.param(custom_topic_dictionary, {"custom_memory_topic": {"label": "business_feedback", "description": BUSINESS_FEEDBACK_DESCRIPTION}}, id="custom-dictionary"),
        pytest.param(custom_topic_class_based, {"custom_memory_topic": {"label": "business_feedback", "description": BUSINESS_FEEDBACK_DESCRIPTION}}, id="custom-class"),
    ],
)
def test_004_memory_topic(client: Client, spelling: str, make_topic: Any, expected: dict[str, Any]) -> None:
    memory_topic = make_topic()

    name = create_bank(client, spelling, {"customization_configs": [{"memory_topics": [memory_topic]}]})

    assert read_config(client, spelling, name)["customization_configs"] == [{"memory_topics": [expected]}]


SHORT_DESCRIPTION = """Specific user feedback about their experience at
the coffee shop. This includes opinions on drinks, food, pastries, ambiance,
staff friendliness, service speed, cleanliness, and any suggestions for
improvement."""


def managed_subset_dictionary() -> Any:
    customization_config = {
      "memory_topics": [
        { "managed_memory_topic": { "managed_topic_enum": "USER_PERSONAL_INFO" } },
        { "managed_memory_topic": { "managed_topic_enum": "USER_PREFERENCES" } }
      ]
    }
    return customization_config


def managed_subset_class_based() -> Any:
    from adk_memory.types import MemoryBankCustomizationConfig as CustomizationConfig
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopic as MemoryTopic
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopicManagedMemoryTopic as ManagedMemoryTopic
    from adk_memory.types import ManagedTopicEnum

    customization_config = CustomizationConfig(
      memory_topics=[
          MemoryTopic(
              managed_memory_topic=ManagedMemoryTopic(
                  managed_topic_enum=ManagedTopicEnum.USER_PERSONAL_INFO)
          ),
          MemoryTopic(
              managed_memory_topic=ManagedMemoryTopic(
                  managed_topic_enum=ManagedTopicEnum.USER_PREFERENCES)
          ),
      ]
    )
    return customization_config


def managed_and_custom_dictionary() -> Any:
    customization_config = {
      "memory_topics": [
        { "managed_memory_topic": { "managed_topic_enum": "USER_PERSONAL_INFO" } },
        {
          "custom_memory_topic": {
            "label": "business_feedback",
            "description": """Specific user feedback about their experience at
the coffee shop. This includes opinions on drinks, food, pastries, ambiance,
staff friendliness, service speed, cleanliness, and any suggestions for
improvement."""
            }
        }
      ]
    }
    return customization_config


def managed_and_custom_class_based() -> Any:
    from adk_memory.types import MemoryBankCustomizationConfig as CustomizationConfig
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopic as MemoryTopic
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopicCustomMemoryTopic as CustomMemoryTopic
    from adk_memory.types import MemoryBankCustomizationConfigMemoryTopicManagedMemoryTopic as ManagedMemoryTopic
    from adk_memory.types import ManagedTopicEnum

    customization_config = CustomizationConfig(
      memory_topics=[
          MemoryTopic(
              managed_memory_topic=ManagedMemoryTopic(
                  managed_topic_enum=ManagedTopicEnum.USER_PERSONAL_INFO)
          ),
          MemoryTopic(
              custom_memory_topic=CustomMemoryTopic(
                  label="business_feedback",
                  description="""Specific user feedback about their experience at
the coffee shop. This includes opinions on drinks, food, pastries, ambiance,
staff friendliness, service speed, cleanliness, and any suggestions for
improvement."""
              )
        )
      ]
    )
    return customization_config


def third_person_dictionary() -> Any:
    customization_config = {
      "enable_third_person_memories": True
    }
    return customization_config


def third_person_class_based() -> Any:
    from adk_memory.types import MemoryBankCustomizationConfig as CustomizationConfig

    customization_config = CustomizationConfig(
        enable_third_person_memories=True
    )
    return customization_config


MANAGED_SUBSET = {"memory_topics": [
    {"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}},
    {"managed_memory_topic": {"managed_topic_enum": "USER_PREFERENCES"}},
]}
MANAGED_AND_CUSTOM = {"memory_topics": [
    {"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}},
    {"custom_memory_topic": {"label": "business_feedback", "description": SHORT_DESCRIPTION}},
]}


@pytest.mark.parametrize(
    ("make_config", "expected"),
    [
        pytest.param(managed_subset_dictionary, MANAGED_SUBSET, id="managed-subset-dictionary"),
        pytest.param(managed_subset_class_based, MANAGED_SUBSET, id="managed-subset-class"),
        pytest.param(managed_and_custom_dictionary, MANAGED_AND_CUSTOM, id="managed-and-custom-dictionary"),
        pytest.param(managed_and_custom_class_based, MANAGED_AND_CUSTOM, id="managed-and-custom-class"),
        pytest.param(third_person_dictionary, {"enable_third_person_memories": True}, id="third-person-dictionary"),
        pytest.param(third_person_class_based, {"enable_third_person_memories": True}, id="third-person-class"),
    ],
)
def test_004_customization_config(client: Client, spelling: str, make_config: Any, expected: dict[str, Any]) -> None:
    customization_config = make_config()

    name = create_bank(client, spelling, {"customization_configs": [customization_config]})
    updated = update_bank(client, spelling, client.agent_engines.create().api_resource.name, {"customization_configs": [customization_config]})

    assert read_config(client, spelling, name)["customization_configs"] == [expected]
    assert read_config(client, spelling, updated)["customization_configs"] == [expected]


# Few-shot examples (configuration only: generation itself is not run here)

FEEDBACK_EXAMPLE = {
    "conversation_source": {"events": [
        {"content": {"role": "model", "parts": [{"text": "Welcome back to The Daily Grind! We'd love to hear your feedback on your visit."}]}},
        {"content": {"role": "user", "parts": [{"text": "Hey. The drip coffee was a bit lukewarm today, which was a bummer. Also, the music was way too loud, I could barely hear my friend."}]}},
    ]},
    "generated_memories": [
        {"fact": "The user reported that the drip coffee was lukewarm."},
        {"fact": "The user felt the music in the shop was too loud."},
    ],
}


def feedback_example_dictionary() -> Any:
    example = {
        "conversationSource": {
          "events": [
            {
              "content": {
                "role": "model",
                "parts": [{ "text": "Welcome back to The Daily Grind! We'd love to hear your feedback on your visit." }] }
            },
            {
              "content": {
                "role": "user",
                "parts": [{ "text": "Hey. The drip coffee was a bit lukewarm today, which was a bummer. Also, the music was way too loud, I could barely hear my friend." }] }
            }
          ]
        },
        "generatedMemories": [
          {
            "fact": "The user reported that the drip coffee was lukewarm."
          },
          {
            "fact": "The user felt the music in the shop was too loud."
          }
        ]
    }
    return example


def feedback_example_class_based() -> Any:
    from google.genai.types import Content, Part
    from adk_memory.types import MemoryBankCustomizationConfigGenerateMemoriesExample as GenerateMemoriesExample
    from adk_memory.types import MemoryBankCustomizationConfigGenerateMemoriesExampleConversationSource as ConversationSource
    from adk_memory.types import MemoryBankCustomizationConfigGenerateMemoriesExampleConversationSourceEvent as ConversationSourceEvent
    from adk_memory.types import MemoryBankCustomizationConfigGenerateMemoriesExampleGeneratedMemory as ExampleGeneratedMemory

    example = GenerateMemoriesExample(
        conversation_source=ConversationSource(
            events=[
                ConversationSourceEvent(
                    content=Content(
                        role="model",
                        parts=[Part(text="Welcome back to The Daily Grind! We'd love to hear your feedback on your visit.")]
                    )
                ),
                ConversationSourceEvent(
                    content=Content(
                        role="user",
                        parts=[Part(text= "Hey. The drip coffee was a bit lukewarm today, which was a bummer. Also, the music was way too loud, I could barely hear my friend.")]
                    )
                )
            ]
        ),
        generated_memories=[
            ExampleGeneratedMemory(
                fact="The user reported that the drip coffee was lukewarm."
            ),
            ExampleGeneratedMemory(
                fact="The user felt the music in the shop was too loud."
            )
        ]
    )
    return example


def nothing_to_remember_dictionary() -> Any:
    example = {
        "conversationSource": {
            "events": [
              {
                  "content": {
                      "role": "model",
                      "parts": [{ "text": "Good morning! What can I get for you at The Daily Grind?" }] }
              },
              {
                  "content": {
                      "role": "user",
                      "parts": [{ "text": "Thanks for the coffee." }] }
              }
            ]
        },
        "generatedMemories": []
    }
    return example


def nothing_to_remember_class_based() -> Any:
    from google.genai.types import Content, Part
    from adk_memory.types import MemoryBankCustomizationConfigGenerateMemoriesExample as GenerateMemoriesExample
    from adk_memory.types import MemoryBankCustomizationConfigGenerateMemoriesExampleConversationSource as ConversationSource
    from adk_memory.types import MemoryBankCustomizationConfigGenerateMemoriesExampleConversationSourceEvent as ConversationSourceEvent

    example = GenerateMemoriesExample(
        conversation_source=ConversationSource(
            events=[
                ConversationSourceEvent(
                    content=Content(
                        role="model",
                        parts=[Part(text="Welcome back to The Daily Grind! We'd love to hear your feedback on your visit.")]
                    )
                ),
                ConversationSourceEvent(
                    content=Content(
                        role="user",
                        parts=[Part(text= "Thanks for the coffee!")]
                    )
                )
            ]
        ),
        generated_memories=[]
    )
    return example


NOTHING_DICTIONARY = {
    "conversation_source": {"events": [
        {"content": {"role": "model", "parts": [{"text": "Good morning! What can I get for you at The Daily Grind?"}]}},
        {"content": {"role": "user", "parts": [{"text": "Thanks for the coffee."}]}},
    ]},
    "generated_memories": [],
}
NOTHING_CLASS = {
    "conversation_source": {"events": [
        {"content": {"role": "model", "parts": [{"text": "Welcome back to The Daily Grind! We'd love to hear your feedback on your visit."}]}},
        {"content": {"role": "user", "parts": [{"text": "Thanks for the coffee!"}]}},
    ]},
    "generated_memories": [],
}


@pytest.mark.parametrize(
    ("make_example", "expected"),
    [
        pytest.param(feedback_example_dictionary, FEEDBACK_EXAMPLE, id="feedback-dictionary"),
        pytest.param(feedback_example_class_based, FEEDBACK_EXAMPLE, id="feedback-class"),
        pytest.param(nothing_to_remember_dictionary, NOTHING_DICTIONARY, id="nothing-dictionary"),
        pytest.param(nothing_to_remember_class_based, NOTHING_CLASS, id="nothing-class"),
    ],
)
def test_004_few_shot_examples(client: Client, spelling: str, make_example: Any, expected: dict[str, Any]) -> None:
    example = make_example()
    memory_bank_config = {"customization_configs": [{
        "memory_topics": [custom_topic_dictionary()],
        "generate_memories_examples": [example],
    }]}

    name = create_bank(client, spelling, memory_bank_config)

    [customization] = read_config(client, spelling, name)["customization_configs"]
    [stored] = customization["generate_memories_examples"]
    assert_contains(stored, expected)
    # An empty `generated_memories` teaches "nothing to extract": it must survive as [], not vanish.
    assert stored["generated_memories"] == expected["generated_memories"]
    assert customization["memory_topics"][0]["custom_memory_topic"]["label"] == "business_feedback"


# Consolidation (the seed's old spelling `consolidation_customization`)


def test_004_consolidation_customization_dictionary(client: Client, spelling: str) -> None:
    customization_config = {
      "consolidation_customization": {
        "revisions_per_candidate_count": 10
      }
    }

    with pytest.warns(DeprecationWarning, match="consolidation_config"):
        name = create_bank(client, spelling, {"customization_configs": [customization_config]})
    with pytest.warns(DeprecationWarning, match="consolidation_config"):
        update_bank(client, spelling, name, {"customization_configs": [customization_config]})

    assert read_config(client, spelling, name)["customization_configs"] == [
        {"consolidation_config": {"revisions_per_candidate_count": 10}}
    ]


def test_004_consolidation_customization_class_based(client: Client, spelling: str) -> None:
    from adk_memory.types import MemoryBankCustomizationConfig as CustomizationConfig
    from adk_memory.types import MemoryBankCustomizationConfigConsolidationConfig as ConsolidationConfig

    with pytest.warns(DeprecationWarning, match="consolidation_config"):
        customization_config = CustomizationConfig(
            consolidation_customization=ConsolidationConfig(
              revisions_per_candidate_count=10
            )
        )

    name = create_bank(client, spelling, {"customization_configs": [customization_config]})

    assert customization_config.consolidation_config is not None
    assert customization_config.consolidation_config.revisions_per_candidate_count == 10
    assert read_config(client, spelling, name)["customization_configs"] == [
        {"consolidation_config": {"revisions_per_candidate_count": 10}}
    ]


# Similarity search configuration


def similarity_search_dictionary(EMBEDDING_MODEL: str) -> Any:
    memory_bank_config = {
        "similarity_search_config": {
            "embedding_model": EMBEDDING_MODEL,
        }
    }
    return memory_bank_config


def similarity_search_class_based(EMBEDDING_MODEL: str) -> Any:
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfig as MemoryBankConfig
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfigSimilaritySearchConfig as SimilaritySearchConfig

    memory_bank_config = MemoryBankConfig(
        similarity_search_config=SimilaritySearchConfig(
            embedding_model=EMBEDDING_MODEL
        )
    )
    return memory_bank_config


SIMILARITY_FORMS = [
    pytest.param(similarity_search_dictionary, id="dictionary"),
    pytest.param(similarity_search_class_based, id="class"),
]


@pytest.mark.parametrize("form", SIMILARITY_FORMS)
@pytest.mark.parametrize("EMBEDDING_MODEL", GOOGLE_EMBEDDING_MODELS)
@pytest.mark.usefixtures("no_google_credentials")
def test_004_similarity_search_config_with_a_google_model_and_no_credentials_is_failed_precondition(client: Client, spelling: str, form: Any, EMBEDDING_MODEL: str) -> None:
    memory_bank_config = form(EMBEDDING_MODEL)
    banks_before = count_banks(client)

    with pytest.raises(FailedPrecondition, match="credentials|Vertex AI"):
        create_bank(client, spelling, memory_bank_config)

    assert count_banks(client) == banks_before


@pytest.mark.parametrize("form", SIMILARITY_FORMS)
@pytest.mark.parametrize("EMBEDDING_MODEL", ALL_GOOGLE_EMBEDDING_MODELS)
@pytest.mark.usefixtures("no_google_credentials")
def test_004_changing_to_a_google_model_without_credentials_is_failed_precondition(client: Client, spelling: str, form: Any, EMBEDDING_MODEL: str) -> None:
    """Updating an (empty) bank to a Google model it cannot reach is refused, or refused on use."""
    name = create_bank(client, spelling, {})
    try:
        update_bank(client, spelling, name, form(EMBEDDING_MODEL))
    except FailedPrecondition:
        assert read_config(client, spelling, name)["similarity_search_config"]["embedding_model"] == "hash-64"
        return
    with pytest.raises(FailedPrecondition):
        remember(client, name, "I like blue.", {"user_id": "123"})


@pytest.mark.usefixtures("no_google_credentials")
def test_004_a_bank_with_a_google_model_can_be_read_and_deleted_without_credentials(client: Client, spelling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "an-api-key-of-another-process")
    memory_bank_config = similarity_search_dictionary("gemini-embedding-001")
    name = create_bank(client, spelling, memory_bank_config)
    monkeypatch.delenv("GOOGLE_API_KEY")
    banks_before = count_banks(client)

    config = read_config(client, spelling, name)
    if spelling == "agent_engines":
        client.agent_engines.delete(name=name)
    else:
        client.memory_banks.delete(name=name)

    assert config["similarity_search_config"] == {"embedding_model": "gemini-embedding-001"}
    assert count_banks(client) == banks_before - 1


@pytest.mark.parametrize("form", SIMILARITY_FORMS)
def test_004_similarity_search_config_with_a_local_model(client: Client, spelling: str, form: Any) -> None:
    memory_bank_config = form("hash-32")

    name = create_bank(client, spelling, memory_bank_config)

    assert read_config(client, spelling, name)["similarity_search_config"] == {"embedding_model": "hash-32"}
    SCOPE = {"user_id": "123"}
    remember(client, name, "I prefer window seats on flights.", SCOPE)
    remember(client, name, "I like blue.", SCOPE)
    results = client.memory_banks.memories.retrieve(name=name, scope=SCOPE, similarity_search_params={"search_query": QUERY})
    assert [r.memory.fact for r in results.page][0] == "I prefer window seats on flights."


# Generation configuration (stored; generation itself is not run here)


def generation_dictionary(LLM_MODEL: str) -> Any:
    memory_bank_config = {
      "generation_config": {
        "model": LLM_MODEL,
      }
    }
    return memory_bank_config


def generation_class_based(LLM_MODEL: str) -> Any:
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfig as MemoryBankConfig
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfigGenerationConfig as GenerationConfig

    memory_bank_config = MemoryBankConfig(
      generation_config=GenerationConfig(
        model=LLM_MODEL
      )
    )
    return memory_bank_config


@pytest.mark.parametrize("form", [pytest.param(generation_dictionary, id="dictionary"), pytest.param(generation_class_based, id="class")])
@pytest.mark.usefixtures("no_google_credentials")
def test_004_generation_config(client: Client, spelling: str, form: Any) -> None:
    LLM_MODEL = f"projects/{PROJECT}/locations/{LOCATION}/publishers/google/models/gemini-2.5-flash"
    memory_bank_config = form(LLM_MODEL)

    name = create_bank(client, spelling, memory_bank_config)

    assert read_config(client, spelling, name)["generation_config"] == {"model": LLM_MODEL}


# TTL configuration

TTL = 3600
CREATE_TTL = 3600
GENERATE_CREATED_TTL = 7200
GENERATE_UPDATED_TTL = 10800
SECOND = datetime.timedelta(seconds=1)


def default_ttl_dictionary() -> Any:
    memory_bank_config = {
      "ttl_config": {
          "default_ttl": f"{TTL}s"
      }
    }
    return memory_bank_config


def default_ttl_class_based() -> Any:
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfig as MemoryBankConfig
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfigTtlConfig as TtlConfig

    memory_bank_config = MemoryBankConfig(
      ttl_config=TtlConfig(
          default_ttl=f"{TTL}s"
      )
    )
    return memory_bank_config


@pytest.mark.parametrize("form", [pytest.param(default_ttl_dictionary, id="dictionary"), pytest.param(default_ttl_class_based, id="class")])
def test_004_default_ttl(client: Client, spelling: str, form: Any) -> None:
    memory_bank_config = form()

    name = create_bank(client, spelling, memory_bank_config)

    assert read_config(client, spelling, name)["ttl_config"] == {"default_ttl": "3600s"}
    created = remember(client, name, "I like blue.", {"user_id": "123"})
    assert created.expire_time is not None and created.create_time is not None
    assert created.expire_time - created.create_time == pytest.approx(datetime.timedelta(seconds=TTL), abs=SECOND)
    # On update, the new expiry (now + TTL) replaces the old one.
    updated = client.memory_banks.memories.update(name=created.name or "", fact="I like green.").response
    assert updated.update_time > created.update_time
    assert updated.expire_time - updated.update_time == pytest.approx(datetime.timedelta(seconds=TTL), abs=SECOND)
    assert updated.expire_time > created.expire_time
    assert client.memory_banks.memories.get(name=created.name or "").expire_time == updated.expire_time


def granular_ttl_dictionary() -> Any:
    memory_bank_config = {
      "ttl_config": {
          "granular_ttl": {
              "create_ttl": f"{CREATE_TTL}s",
              "generate_created_ttl": f"{GENERATE_CREATED_TTL}s",
              "generate_updated_ttl": f"{GENERATE_UPDATED_TTL}s"
          }
      }
    }
    return memory_bank_config


def granular_ttl_class_based() -> Any:
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfig as MemoryBankConfig
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfigTtlConfig as TtlConfig
    from adk_memory.types import ReasoningEngineContextSpecMemoryBankConfigTtlConfigGranularTtlConfig as GranularTtlConfig

    memory_bank_config = MemoryBankConfig(
      ttl_config=TtlConfig(
          granular_ttl_config=GranularTtlConfig(
              create_ttl=f"{CREATE_TTL}s",
              generate_created_ttl=f"{GENERATE_CREATED_TTL}s",
              generate_updated_ttl=f"{GENERATE_UPDATED_TTL}s",
          )
      )
    )
    return memory_bank_config


GRANULAR_EXPECTED = {"granular_ttl_config": {"create_ttl": "3600s", "generate_created_ttl": "7200s", "generate_updated_ttl": "10800s"}}


def check_granular_ttl(client: Client, spelling: str, name: str) -> None:
    assert read_config(client, spelling, name)["ttl_config"] == GRANULAR_EXPECTED
    created = remember(client, name, "I like blue.", {"user_id": "123"})
    assert created.expire_time is not None and created.create_time is not None
    assert created.expire_time - created.create_time == pytest.approx(datetime.timedelta(seconds=CREATE_TTL), abs=SECOND)
    # UpdateMemory is not one of the granular operations: the expiry stays as it was.
    updated = client.memory_banks.memories.update(name=created.name or "", fact="I like green.").response
    assert updated.fact == "I like green."
    assert updated.expire_time == created.expire_time
    assert client.memory_banks.memories.get(name=created.name or "").expire_time == created.expire_time


def test_004_granular_ttl_dictionary_old_spelling_warns(client: Client, spelling: str) -> None:
    memory_bank_config = granular_ttl_dictionary()

    with pytest.warns(DeprecationWarning, match="granular_ttl_config"):
        name = create_bank(client, spelling, memory_bank_config)

    check_granular_ttl(client, spelling, name)
    with pytest.warns(DeprecationWarning, match="granular_ttl_config"):
        update_bank(client, spelling, client.agent_engines.create().api_resource.name, memory_bank_config)


def test_004_granular_ttl_class_based(client: Client, spelling: str) -> None:
    memory_bank_config = granular_ttl_class_based()

    name = create_bank(client, spelling, memory_bank_config)

    check_granular_ttl(client, spelling, name)
