"""IngestEvents: buffering, triggers, dedup, overlap and restarts, with a scripted model."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from adk_memory import Client, types
from adk_memory.testing.models import ScriptedMemoryModel

SCOPE = {"user_id": "u1"}


def event(text: str, event_id: str | None = None) -> dict[str, Any]:
    item: dict[str, Any] = {"content": {"role": "user", "parts": [{"text": text}]}}
    if event_id:
        item["event_id"] = event_id
    return item


@pytest.fixture
def model() -> ScriptedMemoryModel:
    return ScriptedMemoryModel(
        consolidate=lambda request: {"actions": [{"fact_index": 0, "action": "CREATE"}]}
    )


@pytest.fixture
def uri(store_uri: str) -> str:
    return "memory://ingest-" + uuid.uuid4().hex[:8] if store_uri == "memory://" else store_uri


@pytest.fixture
def client(uri: str, model: ScriptedMemoryModel) -> Iterator[Client]:
    with Client(uri=uri, embedding_model="hash-64", generation_model=model) as made:
        yield made


@pytest.fixture
def bank(client: Client) -> str:
    return client.memory_banks.create().name


def wait_done(client: Client, name: str, seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        operation = client.operations.get(name)
        if operation.done:
            return operation
        time.sleep(0.1)
    raise AssertionError(f"operation {name} did not finish in {seconds} s")


def facts(client: Client, bank: str) -> list[str]:
    return sorted(
        hit.memory.fact for hit in client.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
    )


def extracting(model: ScriptedMemoryModel, *facts: str) -> None:
    model.extractions.append(
        {"memories": [{"fact": fact, "topics": ["USER_PREFERENCES"]} for fact in facts]}
    )


def test_without_a_rule_events_flush_at_once(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    extracting(model, "I like tea.")
    operation = client.memory_banks.ingest_events(
        name=bank, scope=SCOPE, direct_contents_source={"events": [event("I like tea")]}
    )
    assert operation.name.startswith(bank + "/operations/")
    finished = wait_done(client, operation.name)
    assert finished.metadata["generatedMemories"] == 1
    assert facts(client, bank) == ["I like tea."]


def test_event_count_trigger_waits_for_enough_events(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    trigger = {"generation_rule": {"event_count": 3}}
    banks = client.memory_banks
    first = banks.ingest_events(
        name=bank,
        scope=SCOPE,
        stream_id="s",
        direct_contents_source={"events": [event("one", "e1"), event("two", "e2")]},
        generation_trigger_config=trigger,
    )
    time.sleep(0.5)
    assert not client.operations.get(first.name).done and model.requests == []
    extracting(model, "I said three things.")
    third = banks.ingest_events(
        name=bank,
        scope=SCOPE,
        stream_id="s",
        direct_contents_source={"events": [event("three", "e3")]},
    )
    wait_done(client, third.name)
    assert client.operations.get(first.name).done
    prompt = model.prompt_text(model.requests[0])
    assert prompt.index("user: one") < prompt.index("user: two") < prompt.index("user: three")


def test_duplicate_event_ids_are_ignored(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    trigger = {"generation_rule": {"event_count": 10}}
    banks = client.memory_banks
    for _ in range(3):
        banks.ingest_events(
            name=bank,
            scope=SCOPE,
            direct_contents_source={"events": [event("same words", "dup-1")]},
            generation_trigger_config=trigger,
        )
    extracting(model)
    operation = banks.ingest_events(name=bank, scope=SCOPE, config={"force_flush": True})
    wait_done(client, operation.name) if not operation.done else None
    deadline = time.monotonic() + 5
    while not model.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert model.prompt_text(model.requests[0]).count("same words") == 1


def test_idle_duration_flushes_after_silence(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    extracting(model, "I like tea.")
    operation = client.memory_banks.ingest_events(
        name=bank,
        scope=SCOPE,
        direct_contents_source={"events": [event("tea")]},
        generation_trigger_config={"generation_rule": {"idle_duration": "1s"}},
    )
    time.sleep(0.3)
    assert not client.operations.get(operation.name).done
    wait_done(client, operation.name, seconds=6)
    assert facts(client, bank) == ["I like tea."]


def test_bank_default_trigger_applies_without_a_request_rule(
    uri: str, model: ScriptedMemoryModel
) -> None:
    with Client(uri=uri, embedding_model="hash-64", generation_model=model) as client:
        bank = client.memory_banks.create(
            managed_semantic_memory_config={
                "generation_config": {
                    "generation_trigger_config": {"generation_rule": {"event_count": 2}}
                }
            }
        ).name
        first = client.memory_banks.ingest_events(
            name=bank, scope=SCOPE, direct_contents_source={"events": [event("one")]}
        )
        time.sleep(0.4)
        assert not client.operations.get(first.name).done
        extracting(model, "x")
        second = client.memory_banks.ingest_events(
            name=bank, scope=SCOPE, direct_contents_source={"events": [event("two")]}
        )
        wait_done(client, second.name)


def test_overlap_re_includes_processed_events(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    trigger = {"generation_rule": {"event_count": 1, "overlap_event_count": 1}}
    banks = client.memory_banks
    extracting(model)
    extracting(model)
    wait_done(
        client,
        banks.ingest_events(
            name=bank,
            scope=SCOPE,
            direct_contents_source={"events": [event("first message")]},
            generation_trigger_config=trigger,
        ).name,
    )
    wait_done(
        client,
        banks.ingest_events(
            name=bank, scope=SCOPE, direct_contents_source={"events": [event("second message")]}
        ).name,
    )
    second_prompt = model.prompt_text(model.requests[1])
    assert "first message" in second_prompt and "second message" in second_prompt


def test_wait_for_completion_returns_a_done_operation(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    extracting(model, "I like tea.")
    operation = client.memory_banks.ingest_events(
        name=bank,
        scope=SCOPE,
        direct_contents_source={"events": [event("tea")]},
        config={"wait_for_completion": True},
    )
    assert operation.done and operation.metadata["generatedMemories"] == 1


def test_buffered_events_survive_and_a_new_client_flushes_them(
    uri: str, model: ScriptedMemoryModel
) -> None:
    with Client(
        uri=uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as first:
        bank = first.memory_banks.create().name
        operation = first.memory_banks.ingest_events(
            name=bank,
            scope=SCOPE,
            direct_contents_source={"events": [event("I like tea", "e1")]},
            generation_trigger_config={"generation_rule": {"event_count": 50}},
        )
        assert not operation.done
    extracting(model, "I like tea.")
    with Client(uri=uri, embedding_model="hash-64", generation_model=model) as second:
        assert not second.operations.get(operation.name).done
        second.memory_banks.ingest_events(name=bank, scope=SCOPE, config={"force_flush": True})
        finished = wait_done(second, operation.name)
        assert finished.metadata["generatedMemories"] == 1
        assert facts(second, bank) == ["I like tea."]


def test_ingest_validates_its_input(client: Client, bank: str) -> None:
    from adk_memory import InvalidArgument

    banks = client.memory_banks
    with pytest.raises(InvalidArgument):
        banks.ingest_events(name=bank, scope={}, direct_contents_source={"events": [event("x")]})
    with pytest.raises(InvalidArgument):
        banks.ingest_events(
            name=bank, scope=SCOPE, direct_contents_source={"events": [{"event_id": "no-content"}]}
        )
    with pytest.raises(InvalidArgument):
        banks.ingest_events(
            name=bank,
            scope=SCOPE,
            generation_trigger_config={"generation_rule": {"idle_duration": "soon"}},
        )
    assert isinstance(
        banks.ingest_events(name=bank, scope=SCOPE), types.MemoryBankIngestEventsOperation
    )


WAIT_FOR_MORE = {"generation_rule": {"event_count": 50}}
BAD_GENERATE_SETTINGS = [
    ({"revision_ttl": "soon"}, "config.revision_ttl", "a duration in seconds such as '86400s'"),
    ({"revision_ttl": "-5s"}, "config.revision_ttl", "a duration in seconds such as '86400s'"),
    ({"revision_ttl": "99999999999999s"}, "config.revision_ttl", r"at most 3155760000s"),
    (
        {"revision_ttl": "60s", "revision_expire_time": "2030-01-01T00:00:00Z"},
        "config.revision_ttl",
        "sets both revision_ttl and revision_expire_time; set one",
    ),
    ({"metadata": {"k": {}}}, "config.metadata.k", "must set exactly one of string_value"),
    ({"metadata": {"k": {"double_value": float("nan")}}}, "config.metadata.k", "finite number"),
    ({"metadata": {"k": {"double_value": float("-inf")}}}, "config.metadata.k", "finite number"),
    ({"revision_labels": {"": "chat"}}, "config.revision_labels", "keys must not be empty"),
    pytest.param(
        {"metadata_merge_strategy": "MERGE_EVERYTHING"},
        "config.metadata_merge_strategy",
        "'MERGE_EVERYTHING' is not one of .*OVERWRITE, MERGE, REQUIRE_EXACT_MATCH",
        # google-genai warns about an unknown enum value and keeps it; the engine refuses it.
        marks=pytest.mark.filterwarnings("ignore:.* is not a valid .*:UserWarning"),
        id="config.metadata_merge_strategy=unknown",
    ),
]


def _setting_ids(cases: list[Any]) -> list[str]:
    return [
        case.id if hasattr(case, "id") else f"{case[1]}={case[0]}"  # pytest.param carries its id
        for case in cases
    ]


on_memory = pytest.mark.parametrize("store_uri", ["memory"], indirect=True)
each_bad_generate_setting = pytest.mark.parametrize(
    ("settings", "field", "message"),
    BAD_GENERATE_SETTINGS,
    ids=_setting_ids(BAD_GENERATE_SETTINGS),
)


@on_memory
@each_bad_generate_setting
async def test_ingest_refuses_generate_settings_no_flush_could_use_and_stores_nothing(
    uri: str, settings: dict[str, Any], field: str, message: str
) -> None:
    """A stream keeps its request's generate settings for a flush to come: both ingest paths
    (the API's and the ADK writer's `ingest_many`) check them as an import checks a stream's,
    naming the field, before anything is written."""
    from adk_memory import AsyncClient, InvalidArgument
    from adk_memory.engine.ingest import IngestRequest

    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
        bank = (await client.memory_banks.create()).name
        bank_id = bank.rsplit("/", 1)[1]
        source = {"events": [event("I like tea.")]}
        with pytest.raises(InvalidArgument, match=message) as refused:
            await client.memory_banks.ingest_events(
                name=bank,
                scope=SCOPE,
                stream_id="s",
                direct_contents_source=source,
                generation_trigger_config=WAIT_FOR_MORE,
                config=settings,
            )
        assert refused.value.field == field
        config = types.IngestEventsConfig.model_validate(settings)
        [result] = await client.engine.ingest.ingest_many(
            bank_id, [IngestRequest(SCOPE, "s", source, WAIT_FOR_MORE, config)]
        )
        assert isinstance(result, InvalidArgument) and result.field == field
        assert await client.engine.store.list_documents(bank_id, "stream") == []


@on_memory
@each_bad_generate_setting
async def test_generate_refuses_the_same_settings_before_its_model_call(
    uri: str, settings: dict[str, Any], field: str, message: str
) -> None:
    """`generate` checks what it would apply to its writes as a stream's settings are checked,
    before the model is asked anything (no tokens spent on a request that cannot be stored)."""
    from adk_memory import AsyncClient, InvalidArgument

    model = ScriptedMemoryModel()
    async with AsyncClient(
        uri, embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as client:
        bank = (await client.memory_banks.create()).name
        with pytest.raises(InvalidArgument, match=message) as refused:
            await client.memory_banks.memories.generate(
                name=bank,
                scope=SCOPE,
                direct_contents_source={"events": [event("I like tea.")]},
                config=settings,
            )
        assert refused.value.field == field
        assert model.requests == []
        assert [memory async for memory in await client.memory_banks.memories.list(name=bank)] == []


def test_a_streams_generate_settings_reach_the_revisions_its_flush_writes(
    client: Client, bank: str, model: ScriptedMemoryModel
) -> None:
    extracting(model, "I like tea.")
    before = time.time()
    operation = client.memory_banks.ingest_events(
        name=bank,
        scope=SCOPE,
        direct_contents_source={"events": [event("I like tea")]},
        config={
            "wait_for_completion": True,
            "revision_ttl": "3600s",
            "revision_labels": {"source": "stream"},
            "metadata": {"channel": {"string_value": "chat"}},
        },
    )
    assert operation.done
    [hit] = client.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
    assert hit.memory.metadata["channel"].string_value == "chat"
    [revision] = client.memory_banks.memories.revisions.list(name=hit.memory.name)
    assert revision.labels == {"source": "stream"}
    assert before + 3600 <= revision.expire_time.timestamp() <= time.time() + 3600


def test_the_scheduler_sweeps_expired_memories(uri: str) -> None:
    from adk_memory import AsyncClient
    from adk_memory.scheduler import IngestScheduler

    async def scenario() -> int:
        async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
            bank = (await client.memory_banks.create()).name
            await client.memory_banks.memories.create(
                name=bank, fact="brief", scope=SCOPE, config={"ttl": "0.2s"}
            )
            await client.memory_banks.memories.create(name=bank, fact="kept", scope=SCOPE)
            await asyncio.sleep(0.3)
            scheduler = IngestScheduler(client.engine, sweep_seconds=0)
            await scheduler.run_once()
            bank_id = bank.rsplit("/", 1)[-1]
            from datetime import UTC, datetime, timedelta

            from adk_memory.store import ScanQuery

            past = datetime.now(UTC) - timedelta(hours=1)
            return len(await client.engine.store.scan(bank_id, ScanQuery(now=past)))

    assert asyncio.run(scenario()) == 1


class _CallLog:
    """Forwards to a store and records the names of the coroutine methods called."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.capabilities = inner.capabilities
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        target = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(target) or name == "aclose":
            return target

        @functools.wraps(target)
        async def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            self.before(name)
            result = await target(*args, **kwargs)
            self.after(name, args)
            return result

        return call

    def before(self, name: str) -> None:
        """Called before each call is forwarded."""

    def after(self, name: str, args: tuple[Any, ...]) -> None:
        """Called after each call returned."""


class _FailingAfterApply(_CallLog):
    """Once armed, every call after the next `apply` of memories raises (a flush's batch; an
    ingest's stream and operation go in an `apply` of their own).

    With `lose_reply`, that `apply` itself raises too, after it committed (a lost reply).
    """

    def __init__(self, inner: Any, *, lose_reply: bool = False) -> None:
        super().__init__(inner)
        self.lose_reply = lose_reply
        self.armed = False
        self.failing = False

    def before(self, name: str) -> None:
        from adk_memory import StoreUnavailable

        if self.failing:
            raise StoreUnavailable(f"injected: the store went away before {name}")

    def after(self, name: str, args: tuple[Any, ...]) -> None:
        from adk_memory import StoreUnavailable

        if self.armed and name == "apply" and (args[1].inserts or args[1].upserts):
            self.armed, self.failing = False, True
            if self.lose_reply:
                self.failing = False
                raise StoreUnavailable("injected: the reply of apply was lost")


async def _next_flush_generates_nothing(banks: Any, bank: str, model: ScriptedMemoryModel) -> None:
    """After one flush of "I like tea" (2 model calls), a forced flush asks the model nothing and
    the bank holds that one memory."""
    assert len(model.requests) == 2  # one extraction, one consolidation
    await banks.ingest_events(
        name=bank,
        scope=SCOPE,
        stream_id="s",
        direct_contents_source={},
        config={"force_flush": True, "wait_for_completion": True},
    )
    assert len(model.requests) == 2
    found = [hit.memory.fact async for hit in await banks.memories.retrieve(name=bank, scope=SCOPE)]
    assert found == ["I like tea."]


def test_a_store_failure_after_the_flush_batch_cannot_make_the_next_flush_regenerate(
    uri: str, model: ScriptedMemoryModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream is committed with the memories: losing the store right after that batch (for
    longer than any retry) leaves the events flushed, so a second flush generates nothing."""
    from adk_memory import AdkMemoryError, AsyncClient
    from adk_memory._registry import store_from_uri
    from adk_memory.engine import ingest as ingest_module

    monkeypatch.setattr(ingest_module, "_COMMIT_RETRY_DELAYS", (0.01,))
    store = _FailingAfterApply(store_from_uri(uri))
    flush = {"force_flush": True, "wait_for_completion": True}

    async def scenario() -> None:
        async with AsyncClient(
            store=store, embedding_model="hash-64", generation_model=model, run_scheduler=False
        ) as client:
            banks = client.memory_banks
            bank = (await banks.create()).name
            extracting(model, "I like tea.")
            store.armed = True
            with contextlib.suppress(AdkMemoryError):
                await banks.ingest_events(
                    name=bank,
                    scope=SCOPE,
                    stream_id="s",
                    direct_contents_source={"events": [event("I like tea", "e1")]},
                    config=flush,
                )
            assert store.failing, "the flush's batch was never applied"
            store.failing = False
            await _next_flush_generates_nothing(banks, bank, model)

    asyncio.run(scenario())


def test_a_flush_whose_batch_reply_is_lost_is_recognised_as_stored(
    uri: str, model: ScriptedMemoryModel
) -> None:
    """`apply` commits but raises: the flush re-reads its stream, completes its operation and
    records no failure, and the next flush generates nothing."""
    from adk_memory import AsyncClient
    from adk_memory._registry import store_from_uri

    store = _FailingAfterApply(store_from_uri(uri), lose_reply=True)
    flush = {"force_flush": True, "wait_for_completion": True}

    async def scenario() -> None:
        async with AsyncClient(
            store=store, embedding_model="hash-64", generation_model=model, run_scheduler=False
        ) as client:
            banks = client.memory_banks
            bank = (await banks.create()).name
            extracting(model, "I like tea.")
            store.armed = True
            operation = await banks.ingest_events(
                name=bank,
                scope=SCOPE,
                stream_id="s",
                direct_contents_source={"events": [event("I like tea", "e1")]},
                config=flush,
            )
            assert not store.armed, "the flush's batch was never applied"
            assert operation.done and not operation.error
            await _next_flush_generates_nothing(banks, bank, model)

    asyncio.run(scenario())


async def test_ingest_many_stores_many_streams_in_one_write_each_event_once(uri: str) -> None:
    """The ADK writer's group commit: several streams (one named twice) in one store write;
    an invalid request is refused alone; ids already seen are dropped; nothing else is lost."""
    from adk_memory import AsyncClient, InvalidArgument
    from adk_memory.engine.ingest import IngestRequest, IngestResult

    def request(user: str, *events: dict[str, Any], stream: str = "s") -> IngestRequest:
        return IngestRequest(
            scope={"user_id": user}, stream_id=stream, source={"events": list(events)}
        )

    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
        bank_id = (await client.memory_banks.create()).name.rsplit("/", 1)[1]
        store = client.engine.context.store
        writes = []
        real_apply = store.apply

        async def counted(*args: Any, **kwargs: Any) -> None:
            writes.append(args)
            await real_apply(*args, **kwargs)

        store.apply = counted  # type: ignore[method-assign]
        results = await client.engine.ingest.ingest_many(
            bank_id,
            [
                request("u1", event("one", "e1")),
                request("u2", event("two", "e2")),
                request("u1", event("one again", "e1"), event("three", "e3")),
                request("u*", event("bad scope", "e4")),  # '*' is reserved in scopes
            ],
        )
        assert len(writes) == 1
        assert [type(result) for result in results[:3]] == [IngestResult] * 3
        assert isinstance(results[3], InvalidArgument) and results[3].field
        streams = {
            status.scope["user_id"]: status.pending_events
            for status in await client.engine.ingest.streams(bank_id)
        }
        assert streams == {"u1": 2, "u2": 1}  # e1 once, e3; e2
        again = await client.engine.ingest.ingest_many(bank_id, [request("u2", event("x", "e2"))])
        assert isinstance(again[0], IngestResult)
        streams = {
            status.scope["user_id"]: status.pending_events
            for status in await client.engine.ingest.streams(bank_id)
        }
        assert streams == {"u1": 2, "u2": 1}


async def test_ingest_many_skipping_busy_streams_writes_the_others_at_once(uri: str) -> None:
    """A stream a flush holds (its lock, through the model calls) does not hold up the other
    streams of the group write: its requests are refused with `ResourceExhausted` and write
    nothing; sent again once it is free, each event is stored once."""
    from adk_memory import AsyncClient, ResourceExhausted
    from adk_memory.engine.ingest import IngestRequest, IngestResult, stream_key

    def request(user: str, *events: dict[str, Any]) -> IngestRequest:
        return IngestRequest(
            scope={"user_id": user}, stream_id="s", source={"events": list(events)}
        )

    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
        bank_id = (await client.memory_banks.create()).name.rsplit("/", 1)[1]
        ingest = client.engine.ingest
        busy = f"stream:{bank_id}:{stream_key({'user_id': 'u1'}, 's')}"
        batch = [request("u1", event("one", "e1")), request("u2", event("two", "e2"))]
        async with client.engine.context.store.lock_provider().lock(busy):
            started = time.monotonic()
            results = await ingest.ingest_many(bank_id, batch, skip_busy=True)
            assert time.monotonic() - started < 5, "waited for the busy stream's lock"
            assert isinstance(results[0], ResourceExhausted)
            assert "locked" in results[0].message
            assert isinstance(results[1], IngestResult)
            pending = {s.scope["user_id"]: s.pending_events for s in await ingest.streams(bank_id)}
            assert pending == {"u2": 1}
            with pytest.raises(ResourceExhausted):  # without skip_busy it waits, here 0 s
                async with client.engine.context.store.lock_provider().lock(busy, wait_seconds=0):
                    pass
        again = await ingest.ingest_many(bank_id, batch, skip_busy=True)
        assert [type(result) for result in again] == [IngestResult, IngestResult]
        pending = {s.scope["user_id"]: s.pending_events for s in await ingest.streams(bank_id)}
        assert pending == {"u1": 1, "u2": 1}


def test_an_ingest_is_one_store_write_of_its_stream_and_operation(uri: str) -> None:
    """The stream and its operation are one atomic write (a crash between two writes left an
    operation pending forever, naming events no stream held), and the answer is the operation
    as written, not read back."""
    from adk_memory import AsyncClient
    from adk_memory._registry import store_from_uri

    store = _CallLog(store_from_uri(uri))

    async def scenario() -> None:
        async with AsyncClient(store=store, embedding_model="hash-64", run_scheduler=False) as c:
            bank = (await c.memory_banks.create()).name
            store.calls.clear()
            answer = await c.memory_banks.ingest_events(
                name=bank,
                scope=SCOPE,
                stream_id="s",
                direct_contents_source={"events": [event("I like tea.", "e1")]},
                generation_trigger_config=WAIT_FOR_MORE,
            )
            writes = [name for name in store.calls if name.startswith(("apply", "put_"))]
            assert writes == ["apply"]
            assert "get_operation" not in store.calls
            stored = await c.operations.get(answer.name)
            assert stored.model_dump() == answer.model_dump()
            assert answer.done is not True and answer.metadata is not None

    asyncio.run(scenario())


def test_a_flush_completes_every_operation_of_its_stream_in_one_write_reading_the_bank_once(
    uri: str, model: ScriptedMemoryModel
) -> None:
    from adk_memory import AsyncClient
    from adk_memory._registry import store_from_uri

    store = _CallLog(store_from_uri(uri))

    async def scenario() -> None:
        async with AsyncClient(
            store=store, embedding_model="hash-64", generation_model=model, run_scheduler=False
        ) as c:
            bank = (await c.memory_banks.create()).name
            extracting(model, "I like tea.")
            waiting = [
                await c.memory_banks.ingest_events(
                    name=bank,
                    scope=SCOPE,
                    stream_id="s",
                    direct_contents_source={"events": [event(text, f"e{n}")]},
                    generation_trigger_config=WAIT_FOR_MORE,
                )
                for n, text in enumerate(("I like tea.", "Green, mostly.", "No sugar."))
            ]
            key = (await c.memory_banks.list_streams(name=bank))[0].key
            store.calls.clear()
            assert await c.memory_banks.flush_stream(name=bank, key=key) == 1
            writes = [name for name in store.calls if name.startswith(("apply", "put_"))]
            assert writes == ["apply", "apply"]  # the memories with the stream; the operations
            assert store.calls.count("get_bank") == 1  # read under the stream lock, generated with
            for operation in waiting:
                done = await c.operations.get(operation.name)
                assert done.done is True
                assert done.metadata is not None

    asyncio.run(scenario())
