"""What a web page can make a browser send to a server: refused without keys, unless allowed.

A keyless server (`adk-memory serve` on loopback) trusts whoever reaches it. A page on another
site can still make the developer's browser send it a preflight-free request (text/plain, or no
content type, with a foreign `Origin`), or point a name of its own at 127.0.0.1 (DNS rebinding,
a foreign `Host`). Each attack below is refused and changes nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import agentplatform
import httpx
import pytest

from adk_memory import AsyncClient, FailedPrecondition, InvalidArgument, PermissionDenied
from adk_memory.server import ApiKey, create_app
from adk_memory.server.auth import RequestGuard

SCOPE = {"user_id": "browser"}
EVIL = "https://evil.example"
KEY = "browser-test-key-0123456789"


def _purge(url: str, bank: str, **headers: str) -> httpx.Response:
    body = json.dumps({"filter": 'scope.user_id="browser"', "force": True})
    return httpx.post(f"{url}/v1beta1/{bank}/memories:purge", content=body, headers=headers)


def _facts(sdk: agentplatform.Client, bank: str) -> list[str]:
    return sorted(m.fact or "" for m in sdk.memory_banks.memories.list(name=bank))


@pytest.fixture
def remembered(sdk: agentplatform.Client, bank: str) -> str:
    """A bank holding one memory in SCOPE."""
    sdk.memory_banks.memories.create(name=bank, fact="I like tea.", scope=SCOPE)
    return bank


def test_a_text_plain_write_to_a_keyless_server_is_415_and_changes_nothing(
    open_server: Any, sdk: agentplatform.Client, remembered: str
) -> None:
    for content_type in ("text/plain", "text/plain;charset=UTF-8", "multipart/form-data"):
        response = _purge(open_server.url, remembered, **{"content-type": content_type})

        assert response.status_code == 415, response.text
        assert response.json()["error"]["code"] == 415
    assert _facts(sdk, remembered) == ["I like tea."]


def test_a_foreign_origin_write_to_a_keyless_server_is_403_and_changes_nothing(
    open_server: Any, sdk: agentplatform.Client, remembered: str
) -> None:
    as_json = _purge(
        open_server.url, remembered, origin=EVIL, **{"content-type": "application/json"}
    )
    untyped = _purge(open_server.url, remembered, origin=EVIL)  # fetch() of a Blob: no type
    text = _purge(open_server.url, remembered, origin=EVIL, **{"content-type": "text/plain"})
    null = _purge(open_server.url, remembered, origin="null")  # a sandboxed page or a file

    assert [r.status_code for r in (as_json, untyped, null)] == [403, 403, 403]
    assert text.status_code in (403, 415)
    assert "origin" in as_json.json()["error"]["message"]
    assert _facts(sdk, remembered) == ["I like tea."]


def test_a_page_of_the_server_itself_may_write(
    open_server: Any, sdk: agentplatform.Client, remembered: str
) -> None:
    """The memory browser at /ui sends its own origin; its writes go through."""
    same = _purge(open_server.url, remembered, origin=open_server.url)

    assert same.status_code == 200, same.text
    assert _facts(sdk, remembered) == []


def test_a_foreign_host_is_refused_so_dns_rebinding_reads_and_writes_nothing(
    open_server: Any, sdk: agentplatform.Client, remembered: str
) -> None:
    port = open_server.url.rsplit(":", 1)[1]
    rebound = {"host": f"evil.example:{port}"}
    read = httpx.get(f"{open_server.url}/v1beta1/{remembered}/memories", headers=rebound)
    write = _purge(open_server.url, remembered, **rebound)
    local = httpx.get(
        f"{open_server.url}/v1beta1/{remembered}/memories", headers={"host": f"localhost:{port}"}
    )

    assert (read.status_code, write.status_code) == (403, 403)
    assert "I like tea." not in read.text and "host" in read.json()["error"]["message"]
    assert local.status_code == 200
    assert _facts(sdk, remembered) == ["I like tea."]


class _InProcess:
    """An app over memory:// called through httpx's ASGI transport on a private event loop."""

    def __init__(self, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.client = AsyncClient("memory://", embedding_model="hash-64")
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=create_app(self.client, **options)),
            base_url="http://127.0.0.1",
        )
        self.bank = self.loop.run_until_complete(self.client.memory_banks.create()).name

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        url = f"/v1beta1/{self.bank.split('/', 4)[-1]}{path}"
        response: httpx.Response = self.loop.run_until_complete(
            self.http.request(method, url, **kwargs)
        )
        return response

    def close(self) -> None:
        self.loop.run_until_complete(self.http.aclose())
        self.loop.run_until_complete(self.client.aclose())
        self.loop.close()


@pytest.fixture
def in_process() -> Iterator[Any]:
    made: list[_InProcess] = []

    def make(**options: Any) -> _InProcess:
        made.append(_InProcess(**options))
        return made[-1]

    yield make
    for app in made:
        app.close()


def test_allowed_hosts_replace_the_loopback_names(in_process: Any) -> None:
    app = in_process(allowed_hosts=["memory.internal"])

    named = app.request("GET", "/memories", headers={"host": "memory.internal:8080"})
    loopback = app.request("GET", "/memories", headers={"host": "127.0.0.1"})

    assert (named.status_code, loopback.status_code) == (200, 403)


def test_a_server_with_keys_answers_any_host_and_origin_with_a_key(in_process: Any) -> None:
    app = in_process(api_keys=[ApiKey(name="k", key=KEY, permissions=["*"])])
    headers = {"host": "memory.example.com", "origin": EVIL}

    without_key = app.request("GET", "/memories", headers=headers)
    with_key = app.request("GET", "/memories", headers={**headers, "x-goog-api-key": KEY})

    assert (without_key.status_code, with_key.status_code) == (401, 200)
    assert "access-control-allow-origin" not in with_key.headers


def test_cors_is_off_by_default_and_explicit_when_configured(in_process: Any) -> None:
    preflight = {
        "origin": "https://app.example",
        "access-control-request-method": "POST",
        "access-control-request-headers": "content-type",
    }
    closed = in_process()
    opened = in_process(cors_origins=["https://app.example"])

    refused = closed.request("OPTIONS", "/memories:retrieve", headers=preflight)
    allowed = opened.request("OPTIONS", "/memories:retrieve", headers=preflight)
    other = opened.request("OPTIONS", "/memories:retrieve", headers={**preflight, "origin": EVIL})
    retrieved = opened.request(
        "POST",
        "/memories:retrieve",
        json={"scope": SCOPE},
        headers={"origin": "https://app.example"},
    )
    foreign = opened.request(
        "POST", "/memories:retrieve", json={"scope": SCOPE}, headers={"origin": EVIL}
    )

    assert "access-control-allow-origin" not in refused.headers
    assert allowed.headers["access-control-allow-origin"] == "https://app.example"
    assert "access-control-allow-origin" not in other.headers
    assert retrieved.status_code == 200
    assert retrieved.headers["access-control-allow-origin"] == "https://app.example"
    assert foreign.status_code == 403


def test_cors_works_with_keys_too(in_process: Any) -> None:
    app = in_process(
        api_keys=[ApiKey(name="k", key=KEY, permissions=["*"])],
        cors_origins=["https://app.example"],
    )
    headers = {"origin": "https://app.example", "x-goog-api-key": KEY}

    listed = app.request("GET", "/memories", headers=headers)

    assert listed.status_code == 200
    assert listed.headers["access-control-allow-origin"] == "https://app.example"


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "127.0.0.1.evil.example",
        "localhost.evil.example:8080",
        "evil@127.0.0.1",
        "127.0.0.1/x",
        "127.0.0.1:8080 ",
        "0.0.0.0:8080",
        "",
        None,
    ],
)
def test_a_keyless_guard_refuses_every_host_that_is_not_a_loopback_name(host: str | None) -> None:
    guard = RequestGuard(allowed_hosts=None, cors_origins=frozenset(), keyless=True)

    with pytest.raises(PermissionDenied):
        guard.check(host, None)
    for loopback in ("localhost:8080", "LOCALHOST", "127.0.0.1", "127.0.0.2:1", "[::1]:8080"):
        guard.check(loopback, None)


@pytest.mark.parametrize(
    "origin",
    [
        EVIL,
        "null",
        "http://127.0.0.1:8080.evil.example",
        "http://127.0.0.1:8081",
        "https://127.0.0.1:8080@evil.example",
        "file://",
        "",
    ],
)
def test_a_keyless_guard_refuses_every_origin_but_its_own(origin: str) -> None:
    guard = RequestGuard(allowed_hosts=None, cors_origins=frozenset(), keyless=True)

    with pytest.raises(PermissionDenied):
        guard.check("127.0.0.1:8080", origin)
    guard.check("127.0.0.1:8080", "http://127.0.0.1:8080")
    guard.check("127.0.0.1:8080", None)


async def test_a_keyless_server_refuses_every_origin_or_host_and_malformed_options() -> None:
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        _refuses_bad_browser_options(client)


def _refuses_bad_browser_options(client: AsyncClient) -> None:
    keys = [ApiKey(name="k", key=KEY, permissions=["*"])]
    with pytest.raises(FailedPrecondition, match="every origin"):
        create_app(client, cors_origins=["*"])
    with pytest.raises(InvalidArgument, match="cors_origins"):
        create_app(client, cors_origins=["app.example"])
    with pytest.raises(InvalidArgument, match="cors_origins"):
        create_app(client, cors_origins=["https://app.example/path"])
    with pytest.raises(InvalidArgument, match="allowed_hosts"):
        create_app(client, allowed_hosts=["memory.internal:8080"])
    with pytest.raises(FailedPrecondition, match="every Host name"):
        create_app(client, allowed_hosts=["memory.internal", "*"])
    create_app(client, api_keys=keys, cors_origins=["*"])
    create_app(client, api_keys=keys, allowed_hosts=["[::1]", "Memory.Internal", "*"])
    create_app(client, allowed_hosts=["[::1]", "Memory.Internal"])


def test_an_ipv6_allowed_host_matches_its_bracketed_host_header(in_process: Any) -> None:
    app = in_process(allowed_hosts=["[::1]"])

    assert app.request("GET", "/memories", headers={"host": "[::1]:8080"}).status_code == 200
    assert app.request("GET", "/memories", headers={"host": "localhost"}).status_code == 403
