"""Keys bound to a scope over REST: a key of user alice never reads, changes or learns of bob's
memories, whatever route, path, scope, filter or token it sends (hypothesis), and still does
everything on alice's own memories."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from joserfc import jwt
from joserfc.jwk import OctKey
from test_rest_hostile import (
    FIELDS,
    FILTER,
    QUERY,
    ROUTES,
    TEXT,
    Rest,
    Route,
    _assert_answer,
    _quoted,
)

from adk_memory.errors import InvalidArgument
from adk_memory.server import ApiKey, ApiKeys

pytestmark = pytest.mark.filterwarnings("ignore:.* is not a valid .*:UserWarning")

ADMIN_KEY = "scoped-admin-key-0123456789"
ALICE_KEY = "scoped-alice-key-0123456789"
TOKEN_SECRET = "token-secret-0123456789abcdef-0123456789"
BOB_SECRET = "bob-secret-91c2"
BOB = {"user_id": "bob"}
ALICE = {"user_id": "alice"}
BANK = "reasoningEngines/shared"
BOB_MEMORY = f"{BANK}/memories/bobs"
ALICE_MEMORY = f"{BANK}/memories/alices"
ADMIN = {"x-goog-api-key": ADMIN_KEY}


def token(claims: dict[str, Any], secret: str = TOKEN_SECRET, alg: str = "HS256") -> str:
    """A signed JWT (expiring in an hour unless `claims` says otherwise)."""
    key = OctKey.import_key(secret)
    return jwt.encode({"alg": alg}, {"exp": int(time.time()) + 3600, **claims}, key)


def _unsigned(header: dict[str, Any], claims: dict[str, Any]) -> str:
    """An `alg: none` token, written by hand (joserfc refuses to make one)."""
    parts = [
        base64.urlsafe_b64encode(json.dumps(p).encode()).rstrip(b"=") for p in (header, claims)
    ]
    return b".".join(parts).decode() + "."


KEYS = [
    ApiKey(name="admin", key=ADMIN_KEY, permissions=["*"]),
    # "*" on purpose: a wildcard must not grant a bound key bank writes.
    ApiKey(name="alice", key=ALICE_KEY, permissions=["*"], scope=ALICE),
    ApiKey(
        name="end-users",
        token_secret=TOKEN_SECRET,
        permissions=["memories.*", "memoryRevisions.*", "reasoningEngines.get"],
        scope_claims={"user_id": "sub"},
    ),
]
ALICE_CREDENTIALS = [
    {"x-goog-api-key": ALICE_KEY},
    {"authorization": f"Bearer {ALICE_KEY}"},
    {"authorization": f"Bearer {token({'sub': 'alice'})}"},
]


@pytest.fixture(scope="module")
def rest() -> Iterator[Rest]:
    rest = Rest(api_keys=KEYS)
    try:
        rest.run(rest.client.memory_banks.create(memory_bank_id="shared"))
        rest.run(rest.client.memory_banks.create(memory_bank_id="elsewhere"))
        memories = rest.client.memory_banks.memories
        for bank in (BANK, "reasoningEngines/elsewhere"):
            rest.run(
                memories.create(name=bank, fact=BOB_SECRET, scope=BOB, config={"memory_id": "bobs"})
            )
        rest.run(memories.update(name=BOB_MEMORY, fact=f"{BOB_SECRET} v2"))
        yield rest
    finally:
        rest.close()


def _bob_state(rest: Rest) -> str:
    """Everything bob has (memories, revisions, both banks), as the admin sees it."""
    state = []
    for bank in (BANK, "reasoningEngines/elsewhere"):
        state.append(rest.call("GET", bank, headers=ADMIN).json())
        listed = rest.call(
            "GET", f"{bank}/memories", params={"filter": 'scope.user_id = "bob"'}, headers=ADMIN
        ).json()
        state.append(listed)
        for memory in listed.get("memories", []):
            path = memory["name"].split("/", 4)[-1]
            state.append(rest.call("GET", f"{path}/revisions", headers=ADMIN).json())
    return json.dumps(state, sort_keys=True)


@pytest.fixture
def bob_seen(rest: Rest) -> dict[str, str]:
    """Bob's state as the last example left it: read once when the test starts, then after each
    example, which compares with it instead of reading it again before its request."""
    return {"state": _bob_state(rest)}


def _ensure_alice(rest: Rest) -> None:
    """Gives alice a live memory `alices` (requests may have deleted it)."""
    memories = rest.client.memory_banks.memories
    try:
        rest.run(memories.get(name=ALICE_MEMORY))
    except Exception:
        revisions = rest.run(memories.revisions.list(name=ALICE_MEMORY)).page
        if revisions:
            revision = revisions[0].name.rsplit("/", 1)[-1]
            rest.run(memories.rollback(name=ALICE_MEMORY, target_revision_id=revision))
        else:
            rest.run(
                memories.create(
                    name=BANK, fact="alice likes tea", scope=ALICE, config={"memory_id": "alices"}
                )
            )


FOREIGN_SCOPES = st.sampled_from(
    [
        BOB,
        {"user_id": "bob", "app_name": "x"},
        {"user_id": "Alice"},
        {"user_id": "alice "},
        {"user": "alice"},
        {"app_name": "x"},
        {},
        {"user_id": "alice\u0000"},
    ]
)
"""Scopes that are not alice's (a request naming one must be PermissionDenied or 400)."""
SCOPES = st.one_of(FOREIGN_SCOPES, st.just(ALICE), st.just({**ALICE, "app_name": "x"}), TEXT)
INJECTED_FILTERS = st.sampled_from(
    [
        'scope.user_id = "bob"',
        'NOT scope.user_id = "alice"',
        'fact:"a") OR (scope.user_id = "bob"',
        'fact:"a" OR scope.user_id != "alice"',
        'fact:"x',
        '(fact:"a"',
        'fact:"a"))',
        'fact:"a") OR ("',
        f'fact:"{BOB_SECRET}"',
        'scope.user_id = "alice" OR scope.user_id = "bob"',
    ]
)
MEMORY_SEGMENTS = st.sampled_from(["bobs", "alices", "missing", "bobs/", "..%2Fbobs", "BOBS"])
BANK_SEGMENTS = st.sampled_from(["shared", "elsewhere", "missing"])


@st.composite
def scoped_requests(draw: st.DrawFn) -> tuple[Route, str, dict[str, str], bytes | None]:
    route = draw(st.sampled_from(ROUTES))
    bank = f"reasoningEngines/{draw(BANK_SEGMENTS)}"
    memory = f"{bank}/memories/{draw(MEMORY_SEGMENTS)}"
    path = (
        route.path.replace("{bank}", bank)
        .replace("{memory}", memory)
        .replace("{id}", _quoted(draw(TEXT)) or "x")
    )
    query = {k: QUERY[k] for k in route.query}
    if "filter" in query:
        query["filter"] = st.one_of(INJECTED_FILTERS, FILTER.map(str))
    params = draw(st.fixed_dictionaries({}, optional=query))
    fields = {f: FIELDS[f] for f in route.fields}
    required = {f: FIELDS[f] for f in route.required}
    for table in (fields, required):
        if "scope" in table:
            table["scope"] = SCOPES
        if "filter" in table:
            table["filter"] = st.one_of(INJECTED_FILTERS, FILTER.map(str))
    body = draw(st.fixed_dictionaries(required, optional=fields))
    if route.method != "GET" and "scope" not in body and draw(st.booleans()):
        body["scope"] = draw(SCOPES)
    return route, path, params, json.dumps(body).encode()


@settings(
    max_examples=400,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=scoped_requests(), credentials=st.sampled_from(ALICE_CREDENTIALS))
def test_a_key_bound_to_alice_never_touches_bob_on_any_route(
    rest: Rest,
    bob_seen: dict[str, str],
    request: tuple[Route, str, dict[str, str], bytes | None],
    credentials: dict[str, str],
) -> None:
    route, path, params, content = request
    before = bob_seen["state"]
    try:
        _ensure_alice(rest)
        response = rest.call(
            route.method, path, content=content, params=params, headers=credentials
        )
        body = _assert_answer(response)
        assert BOB_SECRET not in response.text
        assert '"bob"' not in response.text
        if response.status_code == 200:
            for memory in body.get("memories", []) + [
                hit["memory"] for hit in body.get("retrievedMemories", [])
            ]:
                assert memory["scope"]["user_id"] == "alice", body
    finally:
        bob_seen["state"] = _bob_state(rest)  # a failed example leaves the next one a true start
    assert bob_seen["state"] == before


def test_bank_writes_need_a_bank_permission_a_bound_key_does_not_get_from_a_wildcard(
    rest: Rest,
) -> None:
    alice = {"x-goog-api-key": ALICE_KEY}
    for method, path, content in [
        ("POST", "reasoningEngines", b"{}"),
        ("PATCH", BANK, b'{"displayName": "mine now"}'),
        ("DELETE", BANK, b'{"force": true}'),
        ("GET", f"{BANK}/operations/x", None),
    ]:
        response = rest.call(method, path, content=content, headers=alice)
        assert response.status_code == 403, response.text
    assert rest.call("GET", BANK, headers=alice).status_code == 200


def test_a_memory_of_another_scope_is_answered_like_one_that_does_not_exist(rest: Rest) -> None:
    alice = {"x-goog-api-key": ALICE_KEY}
    for suffix in ("", "/revisions", "/operations/x"):
        foreign = rest.call("GET", f"{BANK}/memories/bobs{suffix}", headers=alice)
        missing = rest.call("GET", f"{BANK}/memories/nobody{suffix}", headers=alice)
        assert foreign.status_code == missing.status_code == 404
        assert foreign.text.replace("bobs", "nobody") == missing.text


@pytest.mark.parametrize("credentials", ALICE_CREDENTIALS, ids=["key", "bearer", "jwt"])
def test_a_bound_key_does_everything_in_its_own_scope(
    rest: Rest, credentials: dict[str, str]
) -> None:
    def call(method: str, path: str, body: Any = None, **params: str) -> Any:
        content = json.dumps(body).encode() if body is not None else None
        response = rest.call(method, path, content=content, params=params, headers=credentials)
        assert response.status_code == 200, response.text
        return response.json()

    made = call("POST", f"{BANK}/memories", {"fact": "alice owns a cat", "scope": ALICE})
    name = made["response"]["name"].split("/", 4)[-1]
    listed = call("GET", f"{BANK}/memories", filter='fact:"cat"')["memories"]
    assert [m["name"].split("/", 4)[-1] for m in listed] == [name]
    everything = call("GET", f"{BANK}/memories")["memories"]
    assert everything and all(m["scope"]["user_id"] == "alice" for m in everything)
    hits = call("POST", f"{BANK}/memories:retrieve", {"scope": ALICE})["retrievedMemories"]
    assert name in {hit["memory"]["name"].split("/", 4)[-1] for hit in hits}
    call("PATCH", name, {"fact": "alice owns two cats"})
    revisions = call("GET", f"{name}/revisions")["memoryRevisions"]
    oldest = revisions[-1]["name"].rsplit("/", 1)[-1]
    call("POST", f"{name}:rollback", {"targetRevisionId": oldest})
    assert call("GET", name)["fact"] == "alice owns a cat"
    generated = call(
        "POST",
        f"{BANK}/memories:generate",
        {"directMemoriesSource": {"directMemories": [{"fact": "alice runs"}]}, "scope": ALICE},
    )
    assert generated["done"] is True
    call("DELETE", name)
    # Its kept revisions are of alice's scope, so the key brings back the memory it deleted.
    assert [r["name"] for r in call("GET", f"{name}/revisions")["memoryRevisions"]]
    call("POST", f"{name}:rollback", {"targetRevisionId": oldest})
    assert call("GET", name)["fact"] == "alice owns a cat"
    call("DELETE", name)  # the next credentials' run lists its own cat only
    # A scope with more entries than the key's is still the key's.
    call("POST", f"{BANK}/memories", {"fact": "alice in an app", "scope": {**ALICE, "app": "x"}})
    counted = call("POST", f"{BANK}/memories:purge", {"filter": 'fact:"a"'})
    listed = call("GET", f"{BANK}/memories", pageSize="100", filter='fact:"a"')["memories"]
    total = len(listed)  # the earlier examples may have left alice memories without an "a"
    assert int(counted["response"]["purgeCount"]) == total
    grouped = {"filterGroups": [{"filters": [{"key": "k", "value": {"stringValue": "v"}}]}]}
    assert int(call("POST", f"{BANK}/memories:purge", grouped)["response"]["purgeCount"]) == 0
    call("POST", f"{BANK}/memories:purge", {"filter": 'fact:"runs"', "force": True})
    # No filter at all is refused as for any key, not read as "everything in my scope".
    unfiltered = rest.call(
        "POST", f"{BANK}/memories:purge", content=b'{"force": true}', headers=credentials
    )
    assert unfiltered.status_code == 400, unfiltered.text


@pytest.mark.parametrize(
    "bearer",
    [
        token({"sub": "alice"}, secret="another-secret-0123456789abcdef-012345"),
        token({"sub": "alice", "exp": int(time.time()) - 10}),
        token({"user": "alice"}),
        token({"sub": ""}),
        token({"sub": ["alice"]}),
        _unsigned({"alg": "none", "typ": "JWT"}, {"sub": "alice", "exp": 2**40}),
        # alice's valid token with bob as the payload: the signature no longer matches
        ".".join(
            [
                token({"sub": "alice"}).split(".")[0],
                token({"sub": "bob"}).split(".")[1],
                token({"sub": "alice"}).split(".")[2],
            ]
        ),
        token({"sub": "alice"}) + "x",
        TOKEN_SECRET,  # the secret that signs tokens is not itself a key
    ],
    ids=[
        "foreign-secret",
        "expired",
        "no-sub",
        "empty-sub",
        "list-sub",
        "alg-none",
        "spliced",
        "tail",
        "the-secret",
    ],
)
def test_forged_or_expired_tokens_are_unauthenticated(rest: Rest, bearer: str) -> None:
    response = rest.call(
        "POST",
        f"{BANK}/memories:retrieve",
        content=json.dumps({"scope": BOB}).encode(),
        headers={"authorization": f"Bearer {bearer}"},
    )
    assert response.status_code == 401, response.text
    assert BOB_SECRET not in response.text


def test_a_token_for_bob_reads_bob_and_only_bob(rest: Rest) -> None:
    bob = {"authorization": f"Bearer {token({'sub': 'bob'})}"}
    response = rest.call("GET", f"{BANK}/memories", headers=bob)
    assert response.status_code == 200
    assert {m["scope"]["user_id"] for m in response.json()["memories"]} == {"bob"}


@pytest.mark.parametrize(
    "entry",
    [
        {"scope": {}},
        {"scope": {"user id": "a"}},
        {"scope": {"user_id": ""}},
        {"scope_claims": {"user_id": "sub"}, "key": "k" * 20},
        {"token_secret": "short"},
        {"scope": {f"k{i}": "v" for i in range(6)}},
    ],
)
def test_bad_scope_restrictions_are_refused_when_the_key_file_loads(
    tmp_path: Any, entry: dict[str, Any]
) -> None:
    base: dict[str, Any] = {"name": "k", "permissions": ["*"]}
    if "key" not in entry and "token_secret" not in entry:
        base["key"] = "k" * 20
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [{**base, **entry}]}))
    with pytest.raises(InvalidArgument):
        ApiKeys.from_file(path)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("memories", {"fact": "x", "scope": BOB}),
        ("memories:retrieve", {"scope": BOB}),
        ("memories:retrieveProfiles", {"scope": BOB}),
        (
            "memories:generate",
            {"scope": BOB, "directMemoriesSource": {"directMemories": [{"fact": "x"}]}},
        ),
        (
            "memories:ingestEvents",
            {
                "scope": BOB,
                "directContentsSource": {
                    "events": [{"content": {"role": "user", "parts": [{"text": "x"}]}}]
                },
            },
        ),
        ("memories:generate", {"directMemoriesSource": {"directMemories": [{"fact": "x"}]}}),
    ],
)
def test_a_request_naming_another_scope_is_permission_denied(
    rest: Rest, path: str, body: dict[str, Any]
) -> None:
    before = _bob_state(rest)
    response = rest.call(
        "POST",
        f"{BANK}/{path}",
        content=json.dumps(body).encode(),
        headers={"x-goog-api-key": ALICE_KEY},
    )
    assert response.status_code == 403, response.text
    assert response.json()["error"]["status"] == "PERMISSION_DENIED"
    _ensure_alice(rest)
    updated = rest.call(
        "PATCH",
        ALICE_MEMORY,
        content=json.dumps({"fact": "y", "scope": BOB}).encode(),
        headers={"x-goog-api-key": ALICE_KEY},
    )
    assert updated.status_code == 403, updated.text
    assert _bob_state(rest) == before


@pytest.mark.parametrize("wildcard", ["*", "reasoningEngines.*"])
def test_only_a_bank_permission_listed_by_name_grants_a_bound_key_bank_writes(
    wildcard: str,
) -> None:
    bound = ApiKey(name="k", key="k" * 20, permissions=[wildcard], scope=ALICE)
    named = ApiKey(name="k", key="k" * 20, permissions=["reasoningEngines.update"], scope=ALICE)
    unbound = ApiKey(name="k", key="k" * 20, permissions=[wildcard])
    for write in ("reasoningEngines.create", "reasoningEngines.update", "reasoningEngines.delete"):
        assert not bound.grants(write) and unbound.grants(write)
    assert bound.grants("reasoningEngines.get")
    assert named.grants("reasoningEngines.update")
