"""The http(s) client and a folder's owner record, from the unlucky user's and attacker's side.

A server that dies in the middle of a call, cannot be reached or never answers: a clear
`StoreUnavailable`, and the store holds each write entirely or not at all. A folder's owner record
that is stale (its server died), forged (a URL pointing elsewhere, a pid that is not the
folder's holder) or readable by others is never followed: the client sends nothing but a
challenge before the server has proved it holds the folder.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import os
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from reliability_support import holding, talking
from typer.testing import CliRunner

from adk_memory import AsyncClient, FailedPrecondition, StoreUnavailable
from adk_memory._remote import RemoteAsyncClient
from adk_memory._remote.owner import RECORD_FILE, find_server
from adk_memory.cli import app

SCOPE = {"user_id": "u1"}
BANK = "reasoningEngines/owned"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _serving(folder: Path, *, hang: str | None = None) -> Any:
    """`adk-memory serve` over `folder` in a process of its own: (process, connection, URL)."""
    port = _free_port()
    job = {"mode": "serve", "uri": f"chroma://{folder}", "port": port, "hang": hang}
    return talking(job), f"http://127.0.0.1:{port}"


def cli(*args: str, code: int = 0) -> tuple[str, str]:
    """One command in this process: (stdout, stderr), asserting the exit code."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    return result.stdout, result.stderr


async def _local_state(folder: Path) -> tuple[list[str], list[int]]:
    """(Facts of SCOPE, revision counts of each), read from the folder in this process."""
    async with AsyncClient(f"chroma://{folder}", embedding_model="hash-64") as client:
        memories = client.memory_banks.memories
        hits = [hit async for hit in await memories.retrieve(name=BANK, scope=SCOPE)]
        revisions = [
            len([r async for r in await memories.revisions.list(name=hit.memory.name)])
            for hit in hits
        ]
        return [hit.memory.fact for hit in hits], revisions


def _killed_during(folder: Path, hang: str, call: Callable[[Any], Awaitable[Any]]) -> str:
    """Runs `call(client)` against a server over `folder` that hangs at `hang` (telling this
    process), SIGKILLs the server then, and returns the client's StoreUnavailable message."""
    serving, url = _serving(folder, hang=hang)

    async def killed(process: Any, connection: Any) -> str:
        async with AsyncClient(url) as client:
            await client.memory_banks.create(memory_bank_id="owned")
            running = asyncio.ensure_future(call(client))
            assert (await asyncio.to_thread(connection.recv))["hanging"]
            process.kill()
            with pytest.raises(StoreUnavailable) as failed:
                await running
            return failed.value.message

    with serving as (process, connection):
        message = asyncio.run(killed(process, connection))
        process.join()
    return message


def test_a_server_killed_inside_a_generate_leaves_nothing_written(tmp_path: Path) -> None:
    """The model call hangs, the server is SIGKILLed: StoreUnavailable saying the connection
    closed before the answer, and the folder holds no memory of that generate."""
    events = [{"content": {"role": "user", "parts": [{"text": "I like green tea."}]}}]

    def generate(client: Any) -> Awaitable[Any]:
        source = {"events": events}
        return client.memory_banks.memories.generate(
            name=BANK, scope=SCOPE, direct_contents_source=source
        )

    message = _killed_during(tmp_path / "store", "model", generate)
    assert "closed the connection before answering" in message
    assert asyncio.run(_local_state(tmp_path / "store")) == ([], [])


def test_a_server_killed_after_a_write_committed_has_the_whole_write(tmp_path: Path) -> None:
    """The create's store write commits, then the server dies before answering: the client
    cannot know the outcome (StoreUnavailable says so), and the memory is there with its
    revision, as one atomic write leaves it."""

    def create(client: Any) -> Awaitable[Any]:
        return client.memory_banks.memories.create(name=BANK, fact="I like tea.", scope=SCOPE)

    message = _killed_during(tmp_path / "store", "after_commit", create)
    assert "either done entirely or not at all" in message
    assert asyncio.run(_local_state(tmp_path / "store")) == (["I like tea."], [1])


async def test_an_unreachable_server_is_store_unavailable() -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    async with AsyncClient(url) as client:
        with pytest.raises(StoreUnavailable, match="Cannot reach the adk-memory server"):
            await client.memory_banks.get(name="reasoningEngines/any")


async def test_a_server_that_never_answers_times_out() -> None:
    """A server that accepts the connection and says nothing: StoreUnavailable after `timeout`."""

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(30)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with AsyncClient(f"http://127.0.0.1:{port}", timeout=1.0) as client:
            started = asyncio.get_running_loop().time()
            with pytest.raises(StoreUnavailable, match="did not answer in time"):
                await client.memory_banks.get(name="reasoningEngines/any")
            assert asyncio.get_running_loop().time() - started < 10
    finally:
        server.close()


def test_a_command_on_a_served_folder_goes_through_the_server(tmp_path: Path) -> None:
    """`adk-memory` commands on a folder `adk-memory serve` holds go through it, say so once,
    and what they write is what the server serves (nothing fails "in use")."""
    folder = tmp_path / "store"
    serving, url = _serving(folder)
    uri = f"chroma://{folder}"
    with serving:
        out, err = cli("banks", "create", "--id", "owned", "--uri", uri)
        assert f"going through it at {url}" in err and err.count("note:") == 1
        cli("memories", "create", "I like tea.", "-b", "owned", "-s", "user_id=u1", "--uri", uri)
        out, _ = cli("memories", "list", "-b", "owned", "--uri", uri, "--json")
        assert [memory["fact"] for memory in json.loads(out)] == ["I like tea."]

        async def through_rest() -> list[str]:
            async with AsyncClient(url) as client:
                hits = await client.memory_banks.memories.retrieve(name=BANK, scope=SCOPE)
                return [hit.memory.fact for hit in hits.page]

        assert asyncio.run(through_rest()) == ["I like tea."]


def test_the_record_of_a_dead_server_is_not_followed(tmp_path: Path) -> None:
    """The server is SIGKILLed and leaves its record: the pid is dead and the lock free, so a
    command opens the folder itself, without a note."""
    folder = tmp_path / "store"
    serving, _ = _serving(folder)
    with serving as (process, _connection):
        cli("banks", "create", "--id", "owned", "--uri", f"chroma://{folder}")
        process.kill()
        process.join()
    assert (folder / RECORD_FILE).exists()
    assert find_server(f"chroma://{folder}") is None
    _, err = cli("memories", "list", "-b", "owned", "--uri", f"chroma://{folder}")
    assert "going through" not in err


class _Decoy:
    """An HTTP server on `port` (default: a free one) that records every request and answers
    each with a wrong proof (`drip`: a body said to be a billion bytes, one sent a second)."""

    def __init__(self, port: int = 0, *, drip: bool = False) -> None:
        self.requests: list[str] = []
        self._drip = drip
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self.url = ""
        threading.Thread(target=self._run, args=(port,), daemon=True).start()
        assert self._ready.wait(10)

    def _run(self, port: int) -> None:
        asyncio.set_event_loop(self._loop)
        serving = asyncio.start_server(self._answer, "127.0.0.1", port)
        server = self._loop.run_until_complete(serving)
        self.url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self._ready.set()
        self._loop.run_forever()

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        self.requests.append(head)
        body = json.dumps({"proof": "0" * 64}).encode()
        length = 10**9 if self._drip else len(body)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {length}\r\nconnection: close\r\n\r\n".encode()
        )
        for byte in range(45 if self._drip else 0):
            writer.write(body[byte % len(body) : byte % len(body) + 1])
            await writer.drain()
            await asyncio.sleep(1)
        writer.write(body)
        await writer.drain()
        writer.close()


@pytest.fixture
def decoy() -> Iterator[_Decoy]:
    yield _Decoy()


def _forge(folder: Path, pid: int, url: str) -> None:
    path = folder / RECORD_FILE
    path.write_text(json.dumps({"pid": pid, "url": url, "secret": "ab" * 32, "options": []}))
    path.chmod(0o600)


def test_a_forged_record_pointing_elsewhere_gets_nothing_but_a_challenge(
    tmp_path: Path, decoy: _Decoy
) -> None:
    """A record names the folder's real holder (a process that does not serve it) and a URL
    elsewhere: the command asks that URL to prove it holds the folder, gets a wrong proof, and
    fails with FailedPrecondition. The decoy saw one challenge and no API call, no key."""
    folder = tmp_path / "store"
    uri = f"chroma://{folder}"
    bank = asyncio.run(_new_bank(uri))
    with holding({"mode": "hold_folder", "uri": uri, "bank": bank}) as holder:
        _forge(folder, holder.pid, decoy.url)
        assert find_server(uri) is not None  # every check without the network passes
        _, err = cli("memories", "list", "-b", "owned", "--uri", uri, code=1)
    assert "could not prove it holds the folder" in err
    assert len(decoy.requests) == 1, decoy.requests
    assert decoy.requests[0].startswith("GET /adk-memory/owner?challenge=")
    assert "authorization" not in decoy.requests[0].lower()


async def _new_bank(uri: str) -> str:
    async with AsyncClient(uri, embedding_model="hash-64") as client:
        return (await client.memory_banks.create(memory_bank_id="owned")).name or ""


def test_a_record_naming_a_live_process_that_does_not_hold_the_folder_is_ignored(
    tmp_path: Path,
) -> None:
    """The record's pid is alive (this test's parent) but the lock's holder is another process:
    not followed, and opening the folder names the holder and the fix."""
    folder = tmp_path / "store"
    uri = f"chroma://{folder}"
    bank = asyncio.run(_new_bank(uri))
    with holding({"mode": "hold_folder", "uri": uri, "bank": bank}) as holder:
        _forge(folder, os.getppid(), "http://127.0.0.1:9")
        assert find_server(uri) is None
        _, err = cli("memories", "list", "-b", "owned", "--uri", uri, code=1)
    assert f"in use by another process (pid {holder.pid}), which does not serve it" in err
    assert "adk-memory serve --uri" in err


def test_a_record_others_can_read_or_naming_another_host_is_ignored(tmp_path: Path) -> None:
    """A record readable by the group or others (its secret is no secret), a symlinked one, or
    one naming a non-loopback URL is ignored, whatever else holds."""
    folder = tmp_path / "store"
    uri = f"chroma://{folder}"
    serving, _ = _serving(folder)
    with serving:
        record = folder / RECORD_FILE
        assert find_server(uri) is not None
        record.chmod(0o640)
        assert find_server(uri) is None
        record.chmod(0o600)
        content = json.loads(record.read_text())
        elsewhere = tmp_path / "elsewhere.json"
        elsewhere.write_text(json.dumps(content))
        elsewhere.chmod(0o600)
        record.rename(tmp_path / "kept.json")
        record.symlink_to(elsewhere)
        assert find_server(uri) is None
        record.unlink()
        _forge(folder, content["pid"], "http://10.1.2.3:8080")
        assert find_server(uri) is None
        (tmp_path / "kept.json").rename(record)
        assert find_server(uri) is not None


def test_opening_a_served_folder_with_other_options_names_the_server(tmp_path: Path) -> None:
    """A store on the served folder with other URI options is not redirected (it would be
    another store); the "in use" error names the server's URL to use instead."""
    folder = tmp_path / "store"
    serving, url = _serving(folder)

    async def open_with_other_options() -> None:
        async with AsyncClient(f"chroma://{folder}?collection_prefix=other") as client:
            await client.memory_banks.list()

    with serving:
        assert find_server(f"chroma://{folder}?collection_prefix=other") is None
        with pytest.raises(FailedPrecondition, match=f"which serves it at {url}"):
            asyncio.run(open_with_other_options())


def test_a_challenge_answered_drop_by_drop_does_not_hang_a_command(tmp_path: Path) -> None:
    """The recorded URL answers the challenge one byte a second, forever: the command gives up
    within the challenge's deadline instead of hanging (each byte came before the read
    timeout, so only a deadline on the whole answer ends it)."""
    folder = tmp_path / "store"
    uri = f"chroma://{folder}"
    bank = asyncio.run(_new_bank(uri))
    slow = _Decoy(drip=True)
    with holding({"mode": "hold_folder", "uri": uri, "bank": bank}) as holder:
        _forge(folder, holder.pid, slow.url)
        started = time.monotonic()
        _, err = cli("memories", "list", "-b", "owned", "--uri", uri, code=1)
        assert time.monotonic() - started < 30
    assert "could not prove it holds the folder" in err


def test_a_followed_server_replaced_by_another_gets_no_request(tmp_path: Path) -> None:
    """The folder's server proves itself and answers; then it dies, and another program takes
    its port. The client, still open (`adk-memory mcp` runs for hours), sends that program no
    request and no key: the folder no longer names a live holder, so the call stops with
    StoreUnavailable before anything is sent."""
    folder = tmp_path / "store"
    serving, url = _serving(folder)

    async def before(client: Any) -> None:
        await client.memory_banks.create(memory_bank_id="owned")

    async def after(client: Any) -> str:
        with pytest.raises(StoreUnavailable) as stopped:
            await client.memory_banks.get(name=BANK)
        return stopped.value.message

    with serving as (process, _connection):
        record = find_server(f"chroma://{folder}")
        assert record is not None and record.url == url
        client = RemoteAsyncClient(url, owner=record, api_key="the-users-key-0123456789")
        loop = asyncio.new_event_loop()
        try:
            loop.run_until_complete(before(client))
            process.kill()
            process.join()
            impostor = _Decoy(int(url.rsplit(":", 1)[1]))
            message = loop.run_until_complete(after(client))
        finally:
            loop.run_until_complete(client.aclose())
            loop.close()
    assert impostor.requests == []
    assert "stopped" in message and str(folder.resolve()) in message


_CALLS: dict[str, Callable[[Any], Awaitable[Any]]] = {
    "get": lambda client: client.memory_banks.get(name=BANK),
    "retrieve": lambda client: client.memory_banks.memories.retrieve(name=BANK, scope=SCOPE),
    "operation": lambda client: client.operations.get(f"{BANK}/operations/one"),
    "streams": lambda client: client.memory_banks.list_streams(name=BANK),
}


_NOT_OBJECTS = {"not-json": b"not json!", "a-list": b"[]", "null": b"null", "empty": b""}
_WRONG_TYPES = b'{"name": 5, "displayName": {"a": 1}, "done": "maybe"}'


@pytest.mark.parametrize(
    ("call", "body"),
    [
        *[
            pytest.param(call, body, id=f"{call}-{kind}")
            for kind, body in _NOT_OBJECTS.items()
            for call in _CALLS
        ],
        pytest.param("get", _WRONG_TYPES, id="get-wrong-types"),
        pytest.param("operation", _WRONG_TYPES, id="operation-wrong-types"),
    ],
)
async def test_a_success_answer_that_is_not_the_apis_json_is_a_typed_error(
    call: str, body: bytes
) -> None:
    """Something else answering 200 at the URI (a proxy's page, another program): a
    FailedPrecondition naming the server and the fix, never a JSONDecodeError, AttributeError or
    ValidationError, nor InvalidArgument blaming the caller's arguments, nor an empty answer
    taken for an empty result. (Fields the client does not know are skipped, as the SDK does.)"""
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\nconnection: close\r\n"

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(head + b"content-length: %d\r\n\r\n" % len(body) + body)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with AsyncClient(url, timeout=5.0) as client:
            with pytest.raises(FailedPrecondition, match="not adk-memory's API") as refused:
                await _CALLS[call](client)
    finally:
        server.close()
    assert url in refused.value.message and refused.value.field == "uri"


def _self_signed(folder: Path) -> ssl.SSLContext:
    """A TLS context serving a certificate for 127.0.0.1 that no CA signed."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    (folder / "cert.pem").write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    (folder / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(folder / "cert.pem", folder / "key.pem")
    return context


async def test_a_certificate_no_trusted_ca_signed_is_refused_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    """https to a server whose certificate no trusted CA signed: refused during the handshake
    (no request, no key sent, no fall-back to http), and the message names the certificate and
    how to trust it, not a server that is not running."""
    requests: list[bytes] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            requests.append(await reader.readuntil(b"\r\n\r\n"))
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=_self_signed(tmp_path))
    url = f"https://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    try:
        async with AsyncClient(url, api_key="k-secret", timeout=5.0) as client:
            with pytest.raises(StoreUnavailable, match="certificate") as refused:
                await client.memory_banks.get(name="reasoningEngines/any")
    finally:
        server.close()
    assert requests == []
    assert "SSL_CERT_FILE" in refused.value.message
    assert "running there" not in refused.value.message


async def test_a_key_sent_unencrypted_to_another_machine_is_warned_about_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """http:// to a host that is not this machine carries the key in the clear: a WARNING, once
    per URL, naming the fix; not for loopback, https:// or a client without a key."""
    monkeypatch.delenv("ADK_MEMORY_API_KEY", raising=False)
    caplog.set_level("WARNING", logger="adk_memory._remote._client")
    far = "http://192.0.2.10:8080"  # TEST-NET-1: never routed, nothing is sent here
    for uri, key in [
        (far, "k-1"),
        (far, "k-2"),
        ("http://127.0.0.1:8080", "k-1"),
        ("https://192.0.2.10:8443", "k-1"),
        ("http://192.0.2.11:8080", None),
    ]:
        async with AsyncClient(uri, api_key=key):
            pass
    warned = [r.getMessage() for r in caplog.records if "unencrypted" in r.getMessage()]
    assert len(warned) == 1
    assert far in warned[0] and "https://" in warned[0]
    assert "k-1" not in warned[0]
