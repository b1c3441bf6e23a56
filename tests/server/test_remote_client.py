"""`Client("http://…")`: our client through the REST server, and the official SDK's retrieve-all.

The public-API suite runs through `http://` on Chroma and Redis (tests/integration); here are
what only a server adds: keys and scope-bound keys met through the http client, the errors it
rebuilds, our extensions over REST, and the official SDK's `list(retrieve(...))` of a large scope.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from joserfc import jwt
from joserfc.jwk import OctKey

from adk_memory import (
    Client,
    FailedPrecondition,
    InvalidArgument,
    ModelUnavailable,
    NotFound,
    PermissionDenied,
    Unauthenticated,
    types,
)
from adk_memory.server import create_app
from adk_memory.wording import render

ALICE = {"user_id": "alice"}
BOB = {"user_id": "bob"}


def _token(secret: str, user: str) -> str:
    claims = {"sub": user, "exp": int(time.time()) + 3600}
    return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(secret))


def _fill(server: Any, bank: str, scope: dict[str, str], count: int) -> list[str]:
    """`count` memories in `scope`, written by the server's own client (fast); their names."""

    async def write() -> list[str]:
        memories = server.client.memory_banks.memories
        return [
            (await memories.create(name=bank, fact=f"fact {i}", scope=scope)).response.name
            for i in range(count)
        ]

    names: list[str] = server.run(write())
    return names


def test_the_official_sdk_lists_every_memory_of_a_scope_of_250(
    open_server: Any, sdk: Any, bank: str
) -> None:
    """`list(retrieve(name, scope))` with the official SDK: all 250 (its pager cannot send a
    page token, so the server answers the whole scope at once), newest first, no other scope."""
    made = _fill(open_server, bank, ALICE, 250)
    _fill(open_server, bank, BOB, 3)
    hits = list(sdk.memory_banks.memories.retrieve(name=bank, scope=ALICE))
    assert len(hits) == 250
    assert {hit.memory.name for hit in hits} == set(made)
    times = [hit.memory.update_time for hit in hits]
    assert times == sorted(times, reverse=True)


async def test_the_official_async_sdk_lists_every_memory_too(
    open_server: Any, sdk: Any, bank: str
) -> None:
    _fill(open_server, bank, ALICE, 120)
    pager = await sdk.aio.memory_banks.memories.retrieve(name=bank, scope=ALICE)
    assert len([hit async for hit in pager]) == 120


def test_our_client_over_http_pages_every_listing(open_server: Any, bank: str) -> None:
    made = _fill(open_server, bank, ALICE, 7)
    with Client(open_server.url) as client:
        memories = client.memory_banks.memories
        listed = memories.list(name=bank, config={"page_size": 3})
        assert len(listed.page) == 3 and listed.next_page_token
        assert {memory.name for memory in listed} == set(made)
        pages = memories.retrieve(name=bank, scope=ALICE, simple_retrieval_params={"page_size": 2})
        assert len(pages.page) == 2 and len(list(pages)) == 7
        whole = memories.retrieve(name=bank, scope=ALICE)
        assert len(whole.page) == 7 and whole.next_page_token is None
        for i in range(3):
            memories.update(name=made[0], fact=f"version {i}")
        revisions = memories.revisions.list(name=made[0], config={"page_size": 2})
        assert len(revisions.page) == 2 and len(list(revisions)) == 4
        banks = client.memory_banks.list(config={"page_size": 1})
        assert len(banks.page) == 1 and bank in {listed.name for listed in banks}
        only = client.memory_banks.list(bank_ids=[bank.rsplit("/", 1)[-1]])
        assert [listed.name for listed in only] == [bank]


def test_errors_come_back_as_the_same_typed_errors(open_server: Any, bank: str) -> None:
    with Client(open_server.url) as client:
        memories = client.memory_banks.memories
        with pytest.raises(NotFound):
            memories.get(name=f"{bank}/memories/missing")
        with pytest.raises(InvalidArgument) as bad_scope:
            memories.create(name=bank, fact="x", scope={"user_id": "a*"})
        assert bad_scope.value.field == "scope.user_id"
        with pytest.raises(InvalidArgument):  # refused before anything is sent, as in process
            memories.create(name=bank, fact="x", scope=ALICE, config={"no_such_field": 1})
        memories.create(name=bank, fact="x", scope=ALICE)
        with pytest.raises(FailedPrecondition) as not_empty:
            client.memory_banks.delete(name=bank)
    # The advice names the option in the caller's terms, not in REST's (`force=true`).
    assert "force=True" in str(not_empty.value)
    assert "--force" in render(not_empty.value, "cli")


def test_a_model_failure_is_model_unavailable_not_store_unavailable(
    open_server: Any, model: Any, bank: str
) -> None:
    """Both are UNAVAILABLE (503); the envelope's ErrorInfo tells them apart."""
    model.extractions.append("not json at all")
    model.extractions.append("still not json")
    model.extractions.append("never json")
    events = [{"content": {"role": "user", "parts": [{"text": "I like tea."}]}}]
    with Client(open_server.url) as client, pytest.raises(ModelUnavailable):
        client.memory_banks.memories.generate(
            name=bank, scope=ALICE, direct_contents_source={"events": events}
        )


def test_a_keyed_server_asks_for_a_key_by_its_variable(keyed_server: Any) -> None:
    with Client(keyed_server.url, api_key=None) as client:
        with pytest.raises(Unauthenticated, match="ADK_MEMORY_API_KEY"):
            client.memory_banks.list()
    with Client(keyed_server.url, api_key="not-a-key-0123456789abcdef") as client:
        with pytest.raises(Unauthenticated, match="not valid"):
            client.memory_banks.list()


def test_the_key_comes_from_the_environment(
    keyed_server: Any, secrets: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ADK_MEMORY_API_KEY", secrets["admin"])
    with Client(keyed_server.url) as client:
        assert client.memory_banks.list().page


def test_a_scope_bound_token_through_the_http_client_reaches_only_its_scope(
    keyed_server: Any, secrets: dict[str, str]
) -> None:
    """Bob's memories stay out of reach of a client holding Alice's signed token: retrieve,
    create, get, update, delete, revisions, rollback, list and purge, and bank operations."""
    with Client(keyed_server.url, api_key=secrets["admin"]) as admin:
        bank = admin.memory_banks.create().name
        bobs = admin.memory_banks.memories.create(name=bank, fact="bob's", scope=BOB)
        bob = bobs.response.name
    with Client(keyed_server.url, api_key=_token(secrets["token_secret"], "alice")) as alice:
        memories = alice.memory_banks.memories
        mine = memories.create(name=bank, fact="alice's", scope=ALICE).response.name
        assert [hit.memory.fact for hit in memories.retrieve(name=bank, scope=ALICE)] == ["alice's"]
        with pytest.raises(PermissionDenied):
            list(memories.retrieve(name=bank, scope=BOB))
        with pytest.raises(PermissionDenied):
            memories.create(name=bank, fact="planted", scope=BOB)
        for attempt in (
            lambda: memories.get(name=bob),
            lambda: memories.update(name=bob, fact="changed"),
            lambda: memories.delete(name=bob),
        ):
            with pytest.raises(NotFound):
                attempt()
        with pytest.raises(PermissionDenied):  # the key has memories.* only
            list(memories.revisions.list(name=bob))
        assert [memory.fact for memory in memories.list(name=bank)] == ["alice's"]
        purged = memories.purge(name=bank, filter='fact=~"."', force=True)
        assert purged.response.purge_count == 1
        with pytest.raises(PermissionDenied):
            alice.operations.get(purged.name)
        with pytest.raises(NotFound):
            memories.get(name=mine)
    with Client(keyed_server.url, api_key=secrets["admin"]) as admin:
        assert admin.memory_banks.memories.get(name=bob).fact == "bob's"


def test_our_extensions_travel_over_rest(open_server: Any, sdk: Any) -> None:
    """A fixed bank id and bank extensions (ours) reach the server; a bank's id cannot change;
    the official SDK ignores the extension field it does not know."""
    with Client(open_server.url) as client:
        made = client.memory_banks.create(
            memory_bank_id="remote-ext", extensions={"retrieval": {"mode": "hybrid"}}
        )
        assert made.name.endswith("/reasoningEngines/remote-ext")
        assert client.memory_banks.get_extensions(name=made.name).retrieval.mode == "hybrid"
        client.memory_banks.update(name=made.name, extensions={"retrieval": {"mode": "dense"}})
        assert client.memory_banks.get_extensions(name=made.name).retrieval.mode == "dense"
        client.memory_banks.update(name=made.name, extensions={"retrieval": {"mode": "hybrid"}})
        with pytest.raises(InvalidArgument):
            client.memory_banks.get_extensions(name="reasoningEngines/bad/../x")
    assert sdk.memory_banks.get(name=made.name).name == made.name  # the SDK skips the field


def test_a_rest_server_is_not_built_on_another_server(open_server: Any) -> None:
    with pytest.raises(InvalidArgument, match="not another adk-memory server"):
        create_app(open_server.url)


def test_ingest_streams_are_listed_and_flushed_over_http(
    open_server: Any, model: Any, bank: str
) -> None:
    """`streams list` / `streams retry` (memory_banks.list_streams / flush_stream, ours) go
    through the server: the stream of buffered events is listed, then generated from."""
    model.extractions.append(
        {"memories": [{"fact": "I like tea.", "topics": ["USER_PREFERENCES"]}]}
    )
    model.consolidations.append({"actions": [{"fact_index": 0, "action": "CREATE"}]})
    events = [{"content": {"role": "user", "parts": [{"text": "I like tea."}]}}]
    idle = {"generation_rule": {"idle_duration": "3600s"}}
    with Client(open_server.url) as client:
        banks = client.memory_banks
        banks.ingest_events(
            name=bank,
            scope=ALICE,
            stream_id="s1",
            direct_contents_source={"events": events},
            generation_trigger_config=idle,
        )
        [stream] = banks.list_streams(name=bank)
        assert (stream.scope, stream.stream_id, stream.pending_events) == (ALICE, "s1", 1)
        assert banks.list_streams(name=bank, scope=BOB) == []
        assert banks.flush_stream(name=bank, key=stream.key) == 1
        assert banks.list_streams(name=bank) == []
        assert [hit.memory.fact for hit in banks.memories.retrieve(name=bank, scope=ALICE)] == [
            "I like tea."
        ]


def test_a_scope_bound_token_sees_and_flushes_only_its_scopes_streams(
    keyed_server: Any, secrets: dict[str, str]
) -> None:
    idle = {"generation_rule": {"idle_duration": "3600s"}}
    events = [{"content": {"role": "user", "parts": [{"text": "hello"}]}}]
    with Client(keyed_server.url, api_key=secrets["admin"]) as admin:
        bank = admin.memory_banks.create().name
        for scope in (ALICE, BOB):
            admin.memory_banks.ingest_events(
                name=bank,
                scope=scope,
                direct_contents_source={"events": events},
                generation_trigger_config=idle,
            )
        bobs = next(s for s in admin.memory_banks.list_streams(name=bank) if s.scope == BOB)
    with Client(keyed_server.url, api_key=_token(secrets["token_secret"], "alice")) as alice:
        assert [s.scope for s in alice.memory_banks.list_streams(name=bank)] == [ALICE]
        with pytest.raises(PermissionDenied):
            alice.memory_banks.list_streams(name=bank, scope=BOB)
        assert alice.memory_banks.flush_stream(name=bank, key=bobs.key) == 0
    with Client(keyed_server.url, api_key=secrets["admin"]) as admin:
        assert len(admin.memory_banks.list_streams(name=bank)) == 2  # bob's still buffered


def test_operations_come_back_typed_by_what_made_them(
    open_server: Any, model: Any, bank: str
) -> None:
    """The wire carries no operation type; the http client tells them apart by their fields."""
    model.extractions.append(
        {"memories": [{"fact": "I like tea.", "topics": ["USER_PREFERENCES"]}]}
    )
    model.consolidations.append({"actions": [{"fact_index": 0, "action": "CREATE"}]})
    events = [{"content": {"role": "user", "parts": [{"text": "I like tea."}]}}]
    with Client(open_server.url) as client:
        memories = client.memory_banks.memories
        made = memories.generate(name=bank, scope=ALICE, direct_contents_source={"events": events})
        [generated] = made.response.generated_memories
        deleted = memories.delete(name=generated.memory.name)
        ingested = client.memory_banks.ingest_events(
            name=bank,
            scope=ALICE,
            direct_contents_source={"events": events},
            generation_trigger_config={"generation_rule": {"idle_duration": "3600s"}},
        )
        for operation, kind in (
            (made, types.GenerateMemoriesOperation),
            (deleted, types.DeleteMemoryOperation),
            (ingested, types.MemoryBankIngestEventsOperation),
        ):
            assert type(client.operations.get(operation.name)) is kind
