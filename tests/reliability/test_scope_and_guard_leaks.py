"""Issue 27's attacks, from the attacker's side: what a web page, a key bound to alice or a key
limited to one bank could learn or change before, each refused now.

- A keyless HTTP surface (REST and MCP) answers only its own Host names and origin, whatever
  address it is bound to (127.0.0.2 here), and never every Host name without keys.
- A key bound to alice choosing a memory id gets an id of alice's namespace: bob's live, deleted
  and future ids answer exactly as free ones, and bob's chosen ids stay his.
- Page tokens are sealed: they name no bank or memory, and open only for the caller and the
  listing they were given for.
- A blank filter is no filter: purge refuses it for every caller.

The store-touching attacks run on every backend (`store_uri`: memory://, embedded Chroma, a Chroma
server, Redis); the Host/Origin guard answers before any store is read, so it runs on memory://.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import uvicorn
from joserfc import jwt
from joserfc.jwk import OctKey

from adk_memory import AlreadyExists, AsyncClient, FailedPrecondition, InvalidArgument
from adk_memory.names import scoped_memory_id
from adk_memory.scope import scope_key
from adk_memory.server import ApiKey, ApiKeys, create_app, serve
from adk_memory.server.mcp_server import McpBinding, create_mcp_server, mcp_http_app

pytestmark = pytest.mark.filterwarnings("ignore:.* is not a valid .*:UserWarning")

ADMIN_KEY = "leaks-admin-key-0123456789"
ALICE_KEY = "leaks-alice-key-0123456789"
LIMITED_KEY = "leaks-limited-key-0123456789"
TOKEN_SECRET = "leaks-token-secret-0123456789abcdef-0123"
ALICE = {"user_id": "alice"}
BOB = {"user_id": "bob"}
KEYS = ApiKeys.of(
    [
        ApiKey(name="admin", key=ADMIN_KEY, permissions=["*"]),
        ApiKey(name="alice", key=ALICE_KEY, permissions=["memories.*"], scope=ALICE),
        ApiKey(
            name="limited",
            key=LIMITED_KEY,
            permissions=["memories.*", "reasoningEngines.list"],
            banks=["visible", "visible-too"],
        ),
        ApiKey(
            name="users",
            token_secret=TOKEN_SECRET,
            permissions=["memories.*"],
            scope_claims={"user_id": "sub"},
        ),
    ]
)
ADMIN = {"x-goog-api-key": ADMIN_KEY}
ALICE_HEADERS = {"x-goog-api-key": ALICE_KEY}
LIMITED = {"x-goog-api-key": LIMITED_KEY}
MCP_HEADERS = {"accept": "application/json, text/event-stream"}


def user_token(user: str) -> dict[str, str]:
    """Headers with a signed token of the `users` key for `user` (bound to user_id=user)."""
    claims = {"sub": user, "exp": int(time.time()) + 600}
    signed = jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(TOKEN_SECRET))
    return {"authorization": f"Bearer {signed}"}


def tag_of(scope: dict[str, str]) -> str:
    """The suffix a key bound to `scope` gets on the ids it chooses."""
    return scoped_memory_id("x", scope_key(scope))[2:]


@asynccontextmanager
async def rest(client: AsyncClient, **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    """The REST app in-process, called as http://127.0.0.1/v1beta1/…."""
    app = create_app(client, **options)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1/v1beta1/") as http:
        yield http


def _free_port(host: str) -> int:
    with socket.socket() as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


@asynccontextmanager
async def listening(app: Any, host: str) -> AsyncIterator[str]:
    """`app` served by uvicorn on `host` and a free port; yields `host:port`."""
    port = _free_port(host)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield f"{host}:{port}"
    finally:
        server.should_exit = True
        await task


def rpc(tool: str, **arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }


async def facts(client: AsyncClient, bank: str, scope: dict[str, str]) -> list[str]:
    hits = (await client.memory_banks.memories.retrieve(name=bank, scope=scope)).page
    return sorted(hit.memory.fact or "" for hit in hits if hit.memory)


# Case 3 and 8: one guard for every keyless HTTP surface, whatever address is bound.

REBOUND_HOSTS = [
    "evil.example",
    "EVIL.example:8080",
    "127.0.0.2.evil.example",
    "localhost.",  # a trailing dot is another name than the one served
    "localhost.evil.example",
    "[::ffff:127.0.0.2]",
    "127.1",
    "0x7f.0.0.2",
    "evil@127.0.0.2",
    "",
]


async def test_keyless_mcp_on_127_0_0_2_refuses_a_rebound_host_and_a_foreign_origin() -> None:
    """Case 3: the MCP SDK's own check knows only 127.0.0.1, localhost and ::1; served on
    127.0.0.2 a request with `Host: evil.example` read and wrote memories."""
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="notes")
        bank = "reasoningEngines/notes"
        await client.memory_banks.memories.create(name=bank, fact="my secret", scope=ALICE)
        server = await create_mcp_server(client, McpBinding(bank, ALICE))
        app = mcp_http_app(server, None)
        async with listening(app, "127.0.0.2") as address, httpx.AsyncClient() as http:
            url = f"http://{address}/mcp"
            for host in REBOUND_HOSTS:
                for body in (rpc("create_memory", fact="planted"), rpc("list_memories")):
                    answer = await http.post(url, json=body, headers={**MCP_HEADERS, "host": host})
                    assert answer.status_code == 403, (host, answer.text)
                    assert "my secret" not in answer.text
            port = int(address.rsplit(":", 1)[1])
            origins = [
                "http://evil.example",
                "HTTP://EVIL.EXAMPLE",
                "null",
                f"http://127.0.0.2:{port + 1}",  # another local server's page
                f"http://{address}.evil.example",
                f"http://{address}@evil.example",
                f"http://localhost:{port}",  # same port, another name: another origin
            ]
            headers = [{**MCP_HEADERS, "host": address, "origin": origin} for origin in origins]
            rebound = {**MCP_HEADERS, "host": "evil.example", "origin": "http://evil.example"}
            for sent in [*headers, rebound]:
                answer = await http.post(
                    url, json=rpc("create_memory", fact="planted"), headers=sent
                )
                assert answer.status_code == 403, (sent, answer.text)
            own = {**MCP_HEADERS, "host": address, "origin": f"HTTP://{address.upper()}"}
            listed = await http.post(url, json=rpc("list_memories"), headers=own)
        assert listed.status_code == 200 and "my secret" in listed.text
        assert await facts(client, bank, ALICE) == ["my secret"]  # nothing planted


async def test_keyless_mcp_answers_the_names_it_is_given_and_no_others() -> None:
    """`--allowed-host` works for MCP as for REST (the SDK's own check, which would refuse it,
    is replaced by the one guard): the named host is answered, the loopback names are not."""
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="notes")
        server = await create_mcp_server(client, McpBinding("reasoningEngines/notes", ALICE))
        app = mcp_http_app(server, None, allowed_hosts=["memory.internal"])
        async with listening(app, "127.0.0.1") as address, httpx.AsyncClient() as http:
            url = f"http://{address}/mcp"
            named = await http.post(
                url, json=rpc("list_memories"), headers={**MCP_HEADERS, "host": "memory.internal"}
            )
            loopback = await http.post(
                url, json=rpc("list_memories"), headers={**MCP_HEADERS, "host": address}
            )
    assert (named.status_code, loopback.status_code) == (200, 403), named.text


async def test_keyless_rest_on_127_0_0_2_refuses_the_same_hosts() -> None:
    """The REST app has the same guard (one implementation): served on 127.0.0.2 too."""
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        bank = (await client.memory_banks.create()).name or ""
        path = "v1beta1/" + bank[bank.index("reasoningEngines/") :] + "/memories"
        await client.memory_banks.memories.create(name=bank, fact="my secret", scope=ALICE)
        async with (
            listening(create_app(client), "127.0.0.2") as address,
            httpx.AsyncClient() as http,
        ):
            url = f"http://{address}/{path}"
            for host in REBOUND_HOSTS:
                answer = await http.get(url, headers={"host": host})
                assert answer.status_code == 403, (host, answer.text)
                assert "my secret" not in answer.text
            assert (await http.get(url, headers={"host": address})).status_code == 200


@pytest.mark.parametrize("surface", ["rest", "mcp", "serve"])
async def test_every_host_name_without_keys_is_refused_as_every_origin_is(surface: str) -> None:
    """Case 8: with `--allowed-host '*'` a rebinding page's Origin is `http://{its Host}`, so the
    origin check passed; without keys `*` is refused at start, as `--cors-origin '*'` is."""
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        with pytest.raises(FailedPrecondition, match="every Host name"):
            if surface == "rest":
                create_app(client, allowed_hosts=["*"])
            elif surface == "mcp":
                await client.memory_banks.create(memory_bank_id="notes")
                server = await create_mcp_server(
                    client, McpBinding("reasoningEngines/notes", ALICE)
                )
                mcp_http_app(server, None, allowed_hosts=["memory.internal", "*"])
            else:
                serve("memory://", allowed_hosts=["*"])
        # With keys a rebound page has no key, so `*` is allowed.
        create_app(client, api_keys=KEYS, allowed_hosts=["*"])


async def test_a_rebinding_page_with_its_own_origin_is_refused_by_a_keyless_rest_server() -> None:
    """Host `evil.example:8080` with Origin `http://evil.example:8080`: the pair a rebinding page
    sends, consistent with itself; the Host check refuses it."""
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        bank = (await client.memory_banks.create()).name or ""
        await client.memory_banks.memories.create(name=bank, fact="my secret", scope=ALICE)
        short = bank[bank.index("reasoningEngines/") :]
        async with rest(client, allowed_hosts=["memory.internal"]) as http:
            for host in ("evil.example:8080", "memory.internal.evil.example", "memory.internal."):
                headers = {"host": host, "origin": f"http://{host}"}
                body = {"filter": 'fact:"secret"', "force": True}
                purged = await http.post(f"{short}/memories:purge", json=body, headers=headers)
                assert purged.status_code == 403, purged.text
            named = await http.get(f"{short}/memories", headers={"host": "Memory.Internal:8080"})
            assert named.status_code == 200
        assert await facts(client, bank, ALICE) == ["my secret"]


# Case 5: a key bound to alice learns nothing of bob's ids, and cannot take them.


async def test_bobs_live_deleted_and_future_ids_answer_alice_as_free_ones(
    aclient: AsyncClient,
) -> None:
    """Before: bob's live id was 409, his deleted id 409 with his last write + 365 days, a free
    one 200. Now each is a new memory of alice's namespace, and bob's memories are untouched."""
    memories = aclient.memory_banks.memories
    bank = (await aclient.memory_banks.create()).name or ""
    short = bank[bank.index("reasoningEngines/") :]
    await memories.create(name=bank, fact="bob lives", scope=BOB, config={"memory_id": "live"})
    await memories.create(name=bank, fact="bob left", scope=BOB, config={"memory_id": "gone"})
    await memories.delete(name=f"{bank}/memories/gone")
    bob_revisions = (await memories.revisions.list(name=f"{bank}/memories/gone")).page
    expiries = {r.expire_time.isoformat() for r in bob_revisions if r.expire_time}
    answers = {}
    async with rest(aclient, api_keys=KEYS) as http:
        for chosen in ("live", "gone", "free"):
            answer = await http.post(
                f"{short}/memories",
                params={"memoryId": chosen},
                json={"fact": "alice's", "scope": ALICE},
                headers=ALICE_HEADERS,
            )
            assert answer.status_code == 200, answer.text
            assert not any(expiry[:19] in answer.text for expiry in expiries)
            answers[chosen] = answer.json()["response"]
    suffix = tag_of(ALICE)
    for chosen, memory in answers.items():
        assert memory["name"].rsplit("/", 1)[-1] == f"{chosen}-{suffix}"
        assert memory["scope"] == ALICE
    shapes = {json.dumps(sorted(memory)) for memory in answers.values()}
    assert len(shapes) == 1  # the same answer, field for field
    assert (await memories.get(name=f"{bank}/memories/live")).fact == "bob lives"
    assert [r.fact for r in (await memories.revisions.list(name=f"{bank}/memories/gone")).page] == [
        "bob left"
    ]


async def test_alice_cannot_claim_the_ids_bobs_writes_will_use(aclient: AsyncClient) -> None:
    """Alice creates `favorite` first; bob's own create of `favorite` still succeeds, in his
    namespace, and a second one of his is his own 409 (with his own expiry, not alice's)."""
    bank = (await aclient.memory_banks.create()).name or ""
    short = bank[bank.index("reasoningEngines/") :]
    async with rest(aclient, api_keys=KEYS) as http:

        async def create(headers: dict[str, str], scope: dict[str, str]) -> httpx.Response:
            body = {"fact": f"{scope['user_id']}'s favorite", "scope": scope}
            return await http.post(
                f"{short}/memories", params={"memoryId": "favorite"}, json=body, headers=headers
            )

        squatted = await create(ALICE_HEADERS, ALICE)
        bobs = await create(user_token("bob"), BOB)
        again = await create(user_token("bob"), BOB)
        alices_again = await create(user_token("alice"), ALICE)  # another key, same scope
    assert squatted.status_code == bobs.status_code == 200, (squatted.text, bobs.text)
    assert bobs.json()["response"]["name"].endswith(f"/favorite-{tag_of(BOB)}")
    assert again.status_code == alices_again.status_code == 409
    assert await facts(aclient, bank, BOB) == ["bob's favorite"]
    assert await facts(aclient, bank, ALICE) == ["alice's favorite"]


async def test_a_bound_key_names_its_own_memory_by_the_id_it_was_given(
    aclient: AsyncClient,
) -> None:
    """The returned name works for get; passing the namespaced id back names the same memory
    (409, not a second namespace); an id too long to carry the tag is a 400 saying why."""
    bank = (await aclient.memory_banks.create()).name or ""
    short = bank[bank.index("reasoningEngines/") :]
    body = {"fact": "alice's note", "scope": ALICE}
    async with rest(aclient, api_keys=KEYS) as http:
        made = await http.post(
            f"{short}/memories", params={"memoryId": "note"}, json=body, headers=ALICE_HEADERS
        )
        name = made.json()["response"]["name"]
        own_id = name.rsplit("/", 1)[-1]
        got = await http.get(f"{short}/memories/{own_id}", headers=ALICE_HEADERS)
        again = await http.post(
            f"{short}/memories", params={"memoryId": own_id}, json=body, headers=ALICE_HEADERS
        )
        too_long = await http.post(
            f"{short}/memories", params={"memoryId": "a" * 47}, json=body, headers=ALICE_HEADERS
        )
        longest = await http.post(
            f"{short}/memories", params={"memoryId": "a" * 46}, json=body, headers=ALICE_HEADERS
        )
        admin = await http.post(
            f"{short}/memories", params={"memoryId": "note"}, json=body, headers=ADMIN
        )
    assert got.status_code == 200 and got.json()["fact"] == "alice's note"
    assert again.status_code == 409
    assert too_long.status_code == 400 and "namespaced" in too_long.json()["error"]["message"]
    assert longest.status_code == 200, longest.text
    assert admin.json()["response"]["name"].endswith("/memories/note")  # unbound: as chosen


async def test_already_exists_never_tells_another_scopes_expiry(aclient: AsyncClient) -> None:
    """An unbound caller reusing bob's deleted id is still refused (one history per id), but
    without the microsecond bob's last revision expires; bob reusing it is told."""
    memories = aclient.memory_banks.memories
    bank = (await aclient.memory_banks.create()).name or ""
    await memories.create(name=bank, fact="bob left", scope=BOB, config={"memory_id": "gone"})
    await memories.delete(name=f"{bank}/memories/gone")
    [revision] = (await memories.revisions.list(name=f"{bank}/memories/gone")).page
    assert revision.expire_time is not None
    expiry = revision.expire_time.isoformat()[:19]
    with pytest.raises(AlreadyExists) as foreign:
        await memories.create(name=bank, fact="x", scope=ALICE, config={"memory_id": "gone"})
    with pytest.raises(AlreadyExists) as own:
        await memories.create(name=bank, fact="x", scope=BOB, config={"memory_id": "gone"})
    assert expiry not in str(foreign.value) and "frees up" not in str(foreign.value)
    assert expiry in str(own.value)


# Case 6: page tokens are sealed, and open only for their caller and listing.


def _readable(token: str) -> str:
    """Whatever a token shows when base64-decoded (the former tokens were JSON)."""
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode("latin-1")
    except (binascii.Error, ValueError):
        return ""


async def test_a_bank_limited_key_learns_no_other_bank_from_a_page_token(
    aclient: AsyncClient,
) -> None:
    """Before: the bank-list token was `{"v": [create_us], "i": "<bank id>"}`, naming banks the
    key may not use, and its pages counted them (empty pages). Now it is sealed, pages hold only
    the key's banks, and the admin's and the limited key's tokens are each their own."""
    for bank_id in ("hidden-one", "visible", "hidden-two", "visible-too"):
        await aclient.memory_banks.create(memory_bank_id=bank_id)
    async with rest(aclient, api_keys=KEYS) as http:

        async def page(headers: dict[str, str], token: str | None = None) -> httpx.Response:
            params = {"pageSize": 1, **({"pageToken": token} if token else {})}
            return await http.get("reasoningEngines", params=params, headers=headers)

        first = (await page(LIMITED)).json()
        token = first["nextPageToken"]
        admin_token = (await page(ADMIN)).json()["nextPageToken"]
        seen = [first]
        while "nextPageToken" in seen[-1]:
            seen.append((await page(LIMITED, seen[-1]["nextPageToken"])).json())
        replayed = await page(LIMITED, token)
        stolen = await page(ADMIN, token)
        borrowed = await page(LIMITED, admin_token)
    shown = [
        bank["name"].rsplit("/", 1)[-1] for answer in seen for bank in answer["reasoningEngines"]
    ]
    assert shown == ["visible", "visible-too"] and len(seen) == 2  # no page for a hidden bank
    for hidden in ("hidden-one", "hidden-two"):
        assert hidden not in _readable(token) and hidden not in json.dumps(seen)
    assert replayed.status_code == 200  # the same caller may ask for the same page again
    only = await aclient.memory_banks.list(config={"page_size": 1}, bank_ids=["visible-too"])
    assert [b.name.rsplit("/", 1)[-1] async for b in only if b.name] == ["visible-too"]
    assert stolen.status_code == borrowed.status_code == 400
    assert stolen.json()["error"]["status"] == "INVALID_ARGUMENT"


async def test_a_list_or_retrieve_token_opens_for_its_own_caller_only(
    aclient: AsyncClient,
) -> None:
    """Alice's tokens (by key or by her signed token) are refused from bob's token, from the
    other of her credentials and from the admin, and work again for herself."""
    memories = aclient.memory_banks.memories
    bank = (await aclient.memory_banks.create()).name or ""
    short = bank[bank.index("reasoningEngines/") :]
    for i in range(3):
        await memories.create(name=bank, fact=f"alice {i}", scope=ALICE)
        await memories.create(name=bank, fact=f"bob {i}", scope=BOB)
    async with rest(aclient, api_keys=KEYS) as http:

        async def listing(headers: dict[str, str], token: str | None = None) -> httpx.Response:
            params = {"pageSize": 1, **({"pageToken": token} if token else {})}
            return await http.get(f"{short}/memories", params=params, headers=headers)

        async def retrieval(headers: dict[str, str], token: str | None = None) -> httpx.Response:
            simple = {"pageSize": 1, **({"pageToken": token} if token else {})}
            body = {"scope": ALICE, "simpleRetrievalParams": simple}
            return await http.post(f"{short}/memories:retrieve", json=body, headers=headers)

        for call in (listing, retrieval):
            token = (await call(ALICE_HEADERS)).json()["nextPageToken"]
            assert "alice" not in _readable(token)
            assert (await call(ALICE_HEADERS, token)).status_code == 200
            for other in (user_token("bob"), user_token("alice"), ADMIN):
                refused = await call(other, token)
                assert refused.status_code in (400, 403), refused.text
                assert "alice" not in refused.text
            jwt_token = (await call(user_token("alice"))).json()["nextPageToken"]
            assert (await call(ALICE_HEADERS, jwt_token)).status_code == 400
            assert (await call(user_token("alice"), jwt_token)).status_code == 200


async def test_embedded_tokens_are_sealed_under_the_configured_secret(
    aclient: AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Processes sharing a store accept each other's tokens when they share
    ADK_MEMORY_PAGE_TOKEN_SECRET (two clients on the same store here); a token sealed under
    another key is refused, and a short secret is refused loudly."""
    memories = aclient.memory_banks.memories
    bank = (await aclient.memory_banks.create()).name or ""
    for i in range(3):
        await memories.create(name=bank, fact=f"fact {i}", scope=ALICE)
    unconfigured = (await memories.list(name=bank, config={"page_size": 1})).next_page_token
    monkeypatch.setenv("ADK_MEMORY_PAGE_TOKEN_SECRET", "s" * 40)
    sealed = (await memories.list(name=bank, config={"page_size": 1})).next_page_token
    async with AsyncClient(aclient.uri, embedding_model="hash-64") as other_process:
        other = other_process.memory_banks.memories
        if aclient.uri == "memory://":  # a private store: the same listing is another client's
            other = memories
        resumed = await other.list(name=bank, config={"page_size": 1, "page_token": sealed})
        assert len(resumed.page) == 1
        with pytest.raises(InvalidArgument, match="page_token"):
            await other.list(name=bank, config={"page_size": 1, "page_token": unconfigured})
    monkeypatch.setenv("ADK_MEMORY_PAGE_TOKEN_SECRET", "t" * 40)
    with pytest.raises(InvalidArgument, match="page_token"):
        await memories.list(name=bank, config={"page_size": 1, "page_token": sealed})
    monkeypatch.setenv("ADK_MEMORY_PAGE_TOKEN_SECRET", "short")
    with pytest.raises(FailedPrecondition, match="ADK_MEMORY_PAGE_TOKEN_SECRET"):
        await memories.list(name=bank, config={"page_size": 1})


_LIST_IN_ANOTHER_PROCESS = """
import asyncio, sys
from adk_memory import AsyncClient

async def main():
    async with AsyncClient(sys.argv[1], embedding_model="hash-64") as client:
        page = await client.memory_banks.memories.list(name=sys.argv[2], config={"page_size": 1})
        print(page.next_page_token)

asyncio.run(main())
"""


@pytest.mark.parametrize("store_uri", ["redis"], indirect=True)  # any shared store
async def test_a_server_process_with_the_same_secret_continues_anothers_listing(
    store_uri: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes on one shared store (as servers behind one address): a token one process
    gave is continued by the other when both have ADK_MEMORY_PAGE_TOKEN_SECRET, and refused
    when the giver had none (its key was its own)."""
    secret = "shared-page-token-secret-0123456789abcdef"

    def token_of_another_process(with_secret: bool) -> str:
        env = {k: v for k, v in os.environ.items() if k != "ADK_MEMORY_PAGE_TOKEN_SECRET"}
        if with_secret:
            env["ADK_MEMORY_PAGE_TOKEN_SECRET"] = secret
        command = [sys.executable, "-c", _LIST_IN_ANOTHER_PROCESS, store_uri, bank]
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    monkeypatch.setenv("ADK_MEMORY_PAGE_TOKEN_SECRET", secret)
    async with AsyncClient(store_uri, embedding_model="hash-64") as client:
        memories = client.memory_banks.memories
        bank = (await client.memory_banks.create()).name or ""
        for i in range(3):
            await memories.create(name=bank, fact=f"fact {i}", scope=ALICE)
        first = (await memories.list(name=bank, config={"page_size": 1})).page
        shared = await asyncio.to_thread(token_of_another_process, True)
        own_key = await asyncio.to_thread(token_of_another_process, False)
        resumed = await memories.list(name=bank, config={"page_size": 1, "page_token": shared})
        assert [m.name for m in resumed.page] != [m.name for m in first] and resumed.page
        with pytest.raises(InvalidArgument, match="page_token"):
            await memories.list(name=bank, config={"page_size": 1, "page_token": own_key})


async def test_an_mcp_page_token_opens_for_its_own_caller_only() -> None:
    """list_memories over MCP HTTP: alice's token is refused from bob's signed token."""
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="notes")
        bank = "reasoningEngines/notes"
        for i in range(3):
            await client.memory_banks.memories.create(name=bank, fact=f"alice {i}", scope=ALICE)
        server = await create_mcp_server(client, McpBinding(bank, {}, KEYS))
        app = mcp_http_app(server, KEYS)
        async with listening(app, "127.0.0.1") as address, httpx.AsyncClient() as http:
            url = f"http://{address}/mcp"

            async def listed(headers: dict[str, str], token: str | None = None) -> Any:
                body = rpc("list_memories", page_size=1, page_token=token)
                answer = await http.post(url, json=body, headers={**MCP_HEADERS, **headers})
                assert answer.status_code == 200, answer.text
                return answer.json()["result"]

            token = (await listed(user_token("alice")))["structuredContent"]["next_page_token"]
            again = await listed(user_token("alice"), token)
            stolen = await listed(user_token("bob"), token)
        assert not again["isError"] and again["structuredContent"]["memories"]
        assert stolen["isError"] and "page_token" in json.dumps(stolen)
        assert "alice" not in json.dumps(stolen)


# Case 7: a blank filter is no filter.

BLANK_FILTERS: list[dict[str, Any]] = [
    {"filter": " "},
    {"filter": "\t\n "},
    {"filter": ""},
    {"filter": " ", "filterGroups": []},
    {},
]


async def test_a_blank_filter_never_passes_purge_needs_a_filter(aclient: AsyncClient) -> None:
    """Before: `{"filter": " ", "force": true}` parsed to no condition and purged the whole
    bank (admin) or alice's whole scope (a bound key). Now 400 for both, nothing deleted."""
    memories = aclient.memory_banks.memories
    bank = (await aclient.memory_banks.create()).name or ""
    short = bank[bank.index("reasoningEngines/") :]
    for scope in (ALICE, BOB):
        await memories.create(name=bank, fact=f"{scope['user_id']} stays", scope=scope)
    async with rest(aclient, api_keys=KEYS) as http:
        for headers in (ADMIN, ALICE_HEADERS, user_token("alice")):
            for body in BLANK_FILTERS:
                answer = await http.post(
                    f"{short}/memories:purge", json={**body, "force": True}, headers=headers
                )
                assert answer.status_code == 400, (body, answer.text)
                assert "purge needs" in answer.json()["error"]["message"]
        # A blank filter lists and retrieves as no filter (the key's scope still applies).
        listed = await http.get(f"{short}/memories", params={"filter": "  "}, headers=ALICE_HEADERS)
        retrieved = await http.post(
            f"{short}/memories:retrieve", json={"scope": ALICE, "filter": " "}, headers=ADMIN
        )
        banks = await http.get("reasoningEngines", params={"filter": " "}, headers=ADMIN)
    assert [m["fact"] for m in listed.json()["memories"]] == ["alice stays"]
    assert [h["memory"]["fact"] for h in retrieved.json()["retrievedMemories"]] == ["alice stays"]
    assert banks.status_code == 200
    for blank in (" ", "\n"):
        with pytest.raises(InvalidArgument, match="purge needs"):
            await memories.purge(name=bank, filter=blank, force=True)
        with pytest.raises(InvalidArgument, match="purge needs"):
            await memories.purge(name=bank, filter=blank, filter_groups=[], force=True)
    assert await facts(aclient, bank, ALICE) == ["alice stays"]
    assert await facts(aclient, bank, BOB) == ["bob stays"]
