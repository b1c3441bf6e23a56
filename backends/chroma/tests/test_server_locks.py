"""Locks on a Chroma server (issue 27, case 2): stores writing to one server exclude each other.

Without `lock_url` or `single_host=true` a server store refuses every write. With
`single_host=true` its locks are files in `lock_dir`, in a folder named after an id read from
the server, so processes that spell the server differently and have different temporary
directories meet the same locks. The race test runs two forked processes, one spelling the
server `127.0.0.1` and the other `localhost`, each with its own `TMPDIR`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import chromadb
import pytest
from adk_memory_chroma import ChromaMemoryStore, ChromaStoreConfig
from adk_memory_chroma._chroma import close_client
from adk_memory_chroma._locks import SERVER_ID_COLLECTION
from chromadb.config import Settings

from adk_memory import AlreadyExists, AsyncClient
from adk_memory.errors import FailedPrecondition, InvalidArgument, ResourceExhausted
from adk_memory.store import OperationRecord, ScanQuery, WriteBatch
from adk_memory.testing.conformance import BANK, T0, bank_record, memory, unit
from adk_memory.testing.processes import FORKS, run_in_processes

ROUNDS = 20


def server(chroma_http_url: str) -> str:
    """The session server's URL without its query: no locks configured."""
    return chroma_http_url.split("?")[0]


def spelled(url: str, host: str) -> str:
    """`url` with the server's address written as `host` (same port, same query)."""
    parts = urlsplit(url)
    return parts._replace(netloc=f"{host}:{parts.port}").geturl()


def prefix() -> str:
    return f"sl-{uuid.uuid4().hex[:8]}"


@contextlib.contextmanager
def http_client(url: str) -> Iterator[Any]:
    """A chromadb client of the server at `url`, closed after the block."""
    parts = urlsplit(url)
    settings = Settings(anonymized_telemetry=False)
    client = chromadb.HttpClient(host=str(parts.hostname), port=parts.port, settings=settings)
    try:
        yield client
    finally:
        close_client(client)


def server_id(url: str) -> str:
    """The id that names the server's `single_host` lock folder."""
    with http_client(url) as client:
        return str(client.get_collection(SERVER_ID_COLLECTION).id)


# Refusal without locks


@pytest.fixture
async def unlocked(chroma_http_url: str) -> AsyncIterator[tuple[ChromaMemoryStore, Any]]:
    """A server store without locks, beside a single-host one on the same data with a bank."""
    name = prefix()
    writer = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=name)
    store = ChromaMemoryStore.from_uri(server(chroma_http_url), collection_prefix=name)
    await writer.create_bank(bank_record())
    await writer.put_document(BANK, "stream", "kept", {"a": 1})
    try:
        yield store, writer
    finally:
        await writer.drop_all()
        await writer.aclose()
        await store.aclose()


async def _hold_a_lock(store: ChromaMemoryStore) -> None:
    async with store.lock_provider().lock("x", wait_seconds=1):
        pass


OPERATION = OperationRecord(BANK, "operations/o1", True, {}, T0)
WRITES: dict[str, Callable[[ChromaMemoryStore], Awaitable[Any]]] = {
    "create_bank": lambda store: store.create_bank(bank_record("other")),
    "update_bank": lambda store: store.update_bank(bank_record()),
    "delete_bank": lambda store: store.delete_bank(BANK),
    "apply": lambda store: store.apply(BANK, WriteBatch(inserts=(memory("m1", unit(0)),))),
    "put_operation": lambda store: store.put_operation(OPERATION),
    "put_document": lambda store: store.put_document(BANK, "stream", "new", {"b": 2}),
    "delete_document": lambda store: store.delete_document(BANK, "stream", "kept"),
    "set_due": lambda store: store.set_due(BANK, "stream", {"kept": T0}),
    "sweep_expired": lambda store: store.sweep_expired(BANK, T0),
    "lock": _hold_a_lock,
}


@pytest.mark.parametrize("write", WRITES)
async def test_a_server_store_without_locks_refuses_every_write_naming_both_options(
    unlocked: tuple[ChromaMemoryStore, ChromaMemoryStore], write: str
) -> None:
    """FailedPrecondition naming `lock_url` and `single_host`, and nothing is written."""
    store, writer = unlocked
    with pytest.raises(FailedPrecondition) as refused:
        await WRITES[write](store)
    message = str(refused.value)
    assert "lock_url=" in message and "single_host=true" in message, message
    assert refused.value.field == "uri"
    assert [bank.bank_id for bank in await writer.list_banks()] == [BANK]
    assert await writer.scan(BANK, ScanQuery(T0)) == []
    assert [key for key, _ in await writer.list_documents(BANK, "stream")] == ["kept"]
    assert await writer.get_operation(BANK, OPERATION.operation_path) is None
    assert await writer.due_documents("stream", T0) == []


async def test_a_server_store_without_locks_still_reads(
    unlocked: tuple[ChromaMemoryStore, ChromaMemoryStore],
) -> None:
    store, _ = unlocked
    assert [bank.bank_id for bank in await store.list_banks()] == [BANK]
    assert await store.get_document(BANK, "stream", "kept") == {"a": 1}


async def test_the_client_refuses_a_server_uri_without_locks(chroma_http_url: str) -> None:
    """Through the public API: creating a bank on `chroma+http://h:p` alone is refused."""
    uri = f"{server(chroma_http_url)}?collection_prefix={prefix()}"
    async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
        with pytest.raises(FailedPrecondition, match="single_host=true"):
            await client.memory_banks.create()


async def test_an_http_client_passed_in_needs_locks_too(chroma_http_url: str) -> None:
    name = prefix()
    with http_client(chroma_http_url) as client:
        bare = ChromaMemoryStore(ChromaStoreConfig(collection_prefix=name), client=client)
        with pytest.raises(FailedPrecondition, match="lock_url="):
            await bare.create_bank(bank_record())
        store = ChromaMemoryStore(
            ChromaStoreConfig(collection_prefix=name, single_host=True), client=client
        )
        try:
            await store.create_bank(bank_record())
            await store.apply(BANK, WriteBatch(inserts=(memory("m1", unit(0)),)))
            assert [m.memory_id for m in await store.scan(BANK, ScanQuery(T0))] == ["m1"]
        finally:
            await store.drop_all()
            await store.aclose()
            await bare.aclose()


@pytest.mark.parametrize(
    ("uri", "field"),
    [
        ("chroma:///x?single_host=true", "single_host"),
        ("chroma+http://h:1?single_host=true&lock_url=redis://r:6379/0", "single_host"),
        ("chroma+http://h:1?lock_dir=/x", "lock_dir"),
        ("chroma+http://h:1?single_host=false&lock_dir=/x", "lock_dir"),
        ("chroma+http://h:1?single_host=true&lock_dir=locks", "lock_dir"),
    ],
)
def test_lock_options_that_cannot_work_are_invalid_argument(uri: str, field: str) -> None:
    """`single_host` is for servers and excludes `lock_url`; `lock_dir` is absolute and only
    with `single_host`."""
    with pytest.raises(InvalidArgument) as raised:
        ChromaMemoryStore.from_uri(uri)
    assert raised.value.field == field


@pytest.mark.parametrize(
    ("query", "lock_url"),
    [
        (
            f"lock_url={quote('redis://:p%40ss@r:6379/0?x=1&y=2', safe='')}",
            "redis://:p%40ss@r:6379/0?x=1&y=2",
        ),
        ("lock_url=redis://:pass@r:6379/0", "redis://:pass@r:6379/0"),
    ],
)
def test_lock_url_is_taken_percent_encoded_or_plain(query: str, lock_url: str) -> None:
    """The README's advice (percent-encode it) keeps a URL with its own query whole."""
    assert ChromaMemoryStore.from_uri(f"chroma+http://h:1?{query}").config.lock_url == lock_url


# What single_host does


@contextlib.contextmanager
def temporary_directory(path: Path) -> Iterator[None]:
    """`tempfile.gettempdir()` is `path` in the block, as in a process with another TMPDIR (or
    systemd's PrivateTmp)."""
    path.mkdir(exist_ok=True)
    saved, tempfile.tempdir = tempfile.tempdir, str(path)
    try:
        yield
    finally:
        tempfile.tempdir = saved


async def test_single_host_locks_meet_across_spellings_and_temporary_directories(
    chroma_http_url: str, tmp_path: Path
) -> None:
    """A store on `127.0.0.1` holding a lock blocks one on `localhost` with another TMPDIR; both
    lock in `lock_dir/<id of adk-memory-lock-id>/<prefix>`."""
    name = prefix()
    first = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=name)
    second = ChromaMemoryStore.from_uri(
        spelled(chroma_http_url, "localhost"), collection_prefix=name
    )
    try:
        async with first.lock_provider().lock("memory-id:b:m", wait_seconds=1):
            with temporary_directory(tmp_path / "other"), pytest.raises(ResourceExhausted):
                async with second.lock_provider().lock("memory-id:b:m", wait_seconds=0.5):
                    pass
        with temporary_directory(tmp_path / "other"):
            async with second.lock_provider().lock("memory-id:b:m", wait_seconds=1):
                pass
        folder = Path(first.config.lock_dir) / server_id(chroma_http_url) / name
        assert first.config.lock_dir == "/var/lock/adk-memory"
        assert len(list(folder.glob("*.lock"))) == 1
    finally:
        await first.aclose()
        await second.aclose()


async def test_single_host_locks_follow_a_replaced_server_id(
    chroma_http_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that knew the old id still meets a store that only knows the new one: the id is
    read again under each lock (here the id collection is deleted, as when a server's data is
    replaced while stores run)."""
    name = prefix()
    old = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=name)
    new = ChromaMemoryStore.from_uri(chroma_http_url, collection_prefix=name)
    replaced = ""
    try:
        async with old.lock_provider().lock("x", wait_seconds=1):
            pass
        replaced = server_id(chroma_http_url)
        with http_client(chroma_http_url) as client:
            client.delete_collection(SERVER_ID_COLLECTION)
        async with new.lock_provider().lock("x", wait_seconds=1):
            with caplog.at_level(logging.WARNING), pytest.raises(ResourceExhausted):
                async with old.lock_provider().lock("x", wait_seconds=0.5):
                    pass
        assert "lock id" in caplog.text and SERVER_ID_COLLECTION in caplog.text
        async with old.lock_provider().lock("x", wait_seconds=1):
            pass
    finally:
        await old.aclose()
        await new.aclose()
        if replaced:  # a folder no store will use again
            shutil.rmtree(Path(old.config.lock_dir) / replaced, ignore_errors=True)


async def test_a_lock_dir_that_cannot_hold_files_is_failed_precondition_naming_it(
    chroma_http_url: str, tmp_path: Path
) -> None:
    """Found at the first write that locks, which writes nothing."""
    (tmp_path / "a-file").write_text("")
    store = ChromaMemoryStore.from_uri(
        chroma_http_url, collection_prefix=prefix(), lock_dir=str(tmp_path / "a-file" / "locks")
    )
    try:
        await store.create_bank(bank_record())
        with pytest.raises(FailedPrecondition, match="Set lock_dir") as refused:
            await store.apply(BANK, WriteBatch(inserts=(memory("m1", unit(0)),)))
        assert refused.value.field == "lock_dir"
        assert await store.scan(BANK, ScanQuery(T0)) == []
    finally:
        await store.drop_all()
        await store.aclose()


# Two processes racing creates of one memory id (the reproduction)


def _race(uri: str, bank: str, user: str, tmpdir: str, start: Any) -> dict[str, Any]:
    """Run in a forked process with its own TMPDIR: ROUNDS creates of `race-<round>` by `user`,
    each begun together with the other process; what each create answered."""
    os.environ["TMPDIR"] = tmpdir
    tempfile.tempdir = None  # read TMPDIR again, as a process started with it would

    async def main() -> list[str]:
        answers = []
        async with AsyncClient(uri, embedding_model="hash-64", run_scheduler=False) as client:
            await client.memory_banks.get(name=bank)  # connected before the first round
            for round_ in range(ROUNDS):
                await asyncio.to_thread(start.wait, 60)
                try:
                    await client.memory_banks.memories.create(
                        name=bank,
                        fact=f"{user}'s memory",
                        scope={"user_id": user},
                        config={"memory_id": f"race-{round_}"},
                    )
                    answers.append("created")
                except AlreadyExists:
                    answers.append("AlreadyExists")
        return answers

    return {"tempdir": tempfile.gettempdir(), "answers": asyncio.run(main())}


@pytest.mark.parametrize("locks", ["single_host", "lock_url"])
def test_two_processes_spelling_the_server_differently_never_both_create_one_id(
    chroma_http_url: str, request: pytest.FixtureRequest, tmp_path: Path, locks: str
) -> None:
    """Issue 27 case 2: `127.0.0.1` and `localhost`, two TMPDIRs, ROUNDS racing creates of one
    memory id by two users. Each round exactly one create is acknowledged, the other gets
    `AlreadyExists`, and the memory is the acknowledged user's. Before the fix (file locks in
    `$TMPDIR` named after the URI's host) both were acknowledged and one memory vanished."""
    query = f"collection_prefix={prefix()}"
    if locks == "lock_url":
        redis_url = request.getfixturevalue("redis_url")
        query += f"&lock_url={quote(redis_url, safe='')}"
    else:
        query += "&single_host=true"
    uris = [
        f"{spelled(server(chroma_http_url), host)}?{query}" for host in ("127.0.0.1", "localhost")
    ]

    async def new_bank() -> str:
        async with AsyncClient(uris[0], embedding_model="hash-64", run_scheduler=False) as c:
            return (await c.memory_banks.create()).name

    bank = asyncio.run(new_bank())
    start = FORKS.Barrier(2)
    users = ["alice", "bob"]
    tmpdirs = [tmp_path / "tmp-a", tmp_path / "tmp-b"]
    for folder in tmpdirs:
        folder.mkdir()
    results = run_in_processes(
        _race,
        [
            (uri, bank, user, str(t), start)
            for uri, user, t in zip(uris, users, tmpdirs, strict=True)
        ],
    )
    assert [result["tempdir"] for result in results] == [str(t) for t in tmpdirs]

    async def owners() -> list[str]:
        async with AsyncClient(uris[1], embedding_model="hash-64", run_scheduler=False) as c:
            found = []
            for round_ in range(ROUNDS):
                got = await c.memory_banks.memories.get(name=f"{bank}/memories/race-{round_}")
                found.append(got.scope["user_id"])
            return found

    stored = asyncio.run(owners())
    for round_, owner in enumerate(stored):
        answers = {
            user: result["answers"][round_] for user, result in zip(users, results, strict=True)
        }
        assert sorted(answers.values()) == ["AlreadyExists", "created"], (round_, answers)
        assert answers[owner] == "created", (round_, answers, owner)
