"""The client's shape: SDK names and signatures, the sync/async pairing, exported names."""

from __future__ import annotations

import asyncio
import inspect
import warnings

import pytest

import adk_memory
from adk_memory import AsyncClient, Client, InvalidArgument, NotFound, Unimplemented, types
from adk_memory import _async_client as aio
from adk_memory import _client as sync
from adk_memory._remote import _client as remote

PAIRS = [
    (sync.Memories, aio.AsyncMemories),
    (sync.MemoryRevisions, aio.AsyncMemoryRevisions),
    (sync.MemoryBanks, aio.AsyncMemoryBanks),
    (sync.AgentEngines, aio.AsyncAgentEngines),
    (sync.Operations, aio.AsyncOperations),
]


def _public_coroutines(cls: type) -> list[str]:
    """The public coroutine methods of a resource class, inherited ones too (and `_update`)."""
    return [
        name
        for name in dir(cls)
        if (not name.startswith("_") or name == "_update")
        and inspect.iscoroutinefunction(getattr(cls, name))
    ]


def test_exported_names_are_pinned() -> None:
    assert adk_memory.__all__ == [
        "Aborted",
        "AdkMemoryError",
        "AlreadyExists",
        "AsyncClient",
        "AsyncPager",
        "Client",
        "FailedPrecondition",
        "InvalidArgument",
        "ModelUnavailable",
        "NotFound",
        "Pager",
        "PermissionDenied",
        "ResourceExhausted",
        "StoreUnavailable",
        "Unauthenticated",
        "Unimplemented",
        "types",
    ]


@pytest.mark.parametrize(("blocking", "asynchronous"), PAIRS)
def test_every_async_method_has_a_blocking_twin_with_the_same_signature(
    blocking: type, asynchronous: type
) -> None:
    public = _public_coroutines(asynchronous)
    assert public
    for name in public:
        assert inspect.signature(getattr(blocking, name)) == inspect.signature(
            getattr(asynchronous, name)
        ), name


REMOTE_PAIRS = [
    (remote.RemoteMemories, aio.AsyncMemories),
    (remote.RemoteMemoryRevisions, aio.AsyncMemoryRevisions),
    (remote.RemoteMemoryBanks, aio.AsyncMemoryBanks),
    (remote.RemoteAgentEngines, aio.AsyncAgentEngines),
    (remote.RemoteOperations, aio.AsyncOperations),
]


@pytest.mark.parametrize(("http", "local"), REMOTE_PAIRS)
def test_the_http_client_has_every_method_with_the_same_signature(http: type, local: type) -> None:
    """`AsyncClient("http://…")` (and `Client`, calling methods by name) has the same surface."""
    public = _public_coroutines(local)
    assert public
    for name in public:
        assert inspect.signature(getattr(http, name)) == inspect.signature(getattr(local, name)), (
            name
        )


def test_a_server_uri_makes_the_http_client_with_the_same_constructor() -> None:
    """Every option of `AsyncClient` is accepted by the http client (refused when it cannot
    apply), so `AsyncClient(uri, **options)` never fails on a keyword alone."""
    local = inspect.signature(AsyncClient.__init__).parameters
    from adk_memory._remote import RemoteAsyncClient

    accepted = inspect.signature(RemoteAsyncClient.__init__).parameters
    assert set(local) - {"store_options"} <= set(accepted)
    made = AsyncClient("http://127.0.0.1:1")
    assert isinstance(made, AsyncClient) and isinstance(made, RemoteAsyncClient) and made.remote
    asyncio.run(made.aclose())
    with pytest.raises(InvalidArgument, match="generation_model"):
        AsyncClient("http://127.0.0.1:1", generation_model="gemini-2.5-flash")
    with pytest.raises(InvalidArgument, match="key_prefix"):
        AsyncClient("http://127.0.0.1:1", key_prefix="x")
    with pytest.raises(InvalidArgument, match="credentials"):
        AsyncClient("http://user:secret@127.0.0.1:1")
    with pytest.raises(InvalidArgument, match="no query parameters"):
        AsyncClient("http://127.0.0.1:1?api_key=secret")


@pytest.mark.parametrize(
    "uri",
    [
        "http://user:s3cr3t@/memories",  # credentials and no host
        "http://:s3cr3t@",
        "http://127.0.0.1:1?api_key=s3cr3t",
        "https://127.0.0.1:1/#s3cr3t",
        "http://127.0.0.1:s3cr3t",  # a key typed where the port goes
    ],
)
def test_a_refused_server_uri_is_not_echoed_with_what_it_carries(uri: str) -> None:
    """The error names what to fix without repeating the URI's credentials, query, fragment or
    port text: error messages get logged and shown, keys must not be."""
    with pytest.raises(InvalidArgument) as refused:
        AsyncClient(uri)
    assert "s3cr3t" not in str(refused.value)
    assert refused.value.field == "uri"


def test_sdk_method_names_exist() -> None:
    memories = {
        "create",
        "get",
        "list",
        "update",
        "_update",
        "delete",
        "generate",
        "retrieve",
        "retrieve_profiles",
        "rollback",
        "purge",
    }
    assert memories <= set(dir(aio.AsyncMemories))
    assert {"create", "get", "list", "update", "delete", "ingest_events"} <= set(
        dir(aio.AsyncMemoryBanks)
    )
    flat = {
        "get_memory",
        "list_memories",
        "retrieve_memories",
        "create_memory",
        "generate_memories",
        "delete_memory",
    }
    assert flat <= set(dir(aio.AsyncAgentEngines))


def test_sdk_keyword_only_parameters_match_the_official_sdk() -> None:
    from agentplatform._genai.memories import Memories as SdkMemories

    for name in ("create", "get", "list", "delete", "retrieve", "rollback", "purge"):
        ours = [
            p.name
            for p in inspect.signature(getattr(aio.AsyncMemories, name)).parameters.values()
            if p.name != "self"
        ]
        theirs = [
            p.name
            for p in inspect.signature(getattr(SdkMemories, name)).parameters.values()
            if p.name != "self"
        ]
        assert ours == theirs, name


def test_long_vertexai_names_and_seed_spellings() -> None:
    assert types.RetrieveAgentEngineMemoriesConfig is types.RetrieveMemoriesConfig
    with pytest.warns(DeprecationWarning, match="granular_ttl"):
        ttl = types.ReasoningEngineContextSpecMemoryBankConfigTtlConfig(
            granular_ttl={"create_ttl": "60s"}
        )
    assert ttl.granular_ttl_config.create_ttl == "60s"
    with pytest.warns(DeprecationWarning, match="consolidation_customization"):
        custom = types.MemoryBankCustomizationConfig(
            consolidation_customization={"revisions_per_candidate_count": 10}
        )
    assert custom.consolidation_config.revisions_per_candidate_count == 10
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        topic = types.MemoryBankCustomizationConfigMemoryTopic.model_validate(
            {"managed_memory_topic": "USER_PREFERENCES"}
        )
        camel = types.Memory.model_validate(
            {
                "fact": "x",
                "createTime": "2026-01-01T00:00:00Z",
                "topics": [{"managedMemoryTopic": "USER_PREFERENCES"}],
            }
        )
    assert topic.managed_memory_topic.managed_topic_enum == types.ManagedTopicEnum.USER_PREFERENCES
    assert camel.model_dump(mode="json", by_alias=True, exclude_none=True)["createTime"].startswith(
        "2026-01-01"
    )


def test_typo_in_a_config_is_invalid_argument() -> None:
    with Client("memory://", embedding_model="hash-8") as client:
        bank = client.memory_banks.create().name
        with pytest.raises(InvalidArgument, match="memory_idd"):
            client.memory_banks.memories.create(
                name=bank, fact="x", scope={"u": "1"}, config={"memory_idd": "a"}
            )
        with pytest.raises(InvalidArgument, match="name"):
            client.memory_banks.memories.get(name="banks/1/memories/x")
        with pytest.raises(NotFound):
            client.memory_banks.memories.get(name="reasoningEngines/42/memories/x")
        with pytest.raises(InvalidArgument, match="exactly one"):
            client.memory_banks.memories.generate(name=bank)
        with pytest.raises(Unimplemented, match="encryption_spec"):
            client.memory_banks.create(config={"encryption_spec": {"kms_key_name": "k"}})


async def test_async_client_and_pager() -> None:
    async with AsyncClient("memory://", embedding_model="hash-8") as client:
        bank = (await client.memory_banks.create()).name
        for index in range(5):
            await client.memory_banks.memories.create(
                name=bank, fact=f"fact {index}", scope={"u": "1"}
            )
        pager = await client.memory_banks.memories.list(name=bank, config={"page_size": 2})
        assert len(pager.page) == 2
        assert len([memory async for memory in pager]) == 5


def test_closed_client_refuses_calls() -> None:
    client = Client("memory://", embedding_model="hash-8")
    client.close()
    with pytest.raises(RuntimeError, match="closed"):
        client.memory_banks.create()
