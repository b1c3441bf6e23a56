"""Hostile requests to the REST server, property-based: a Google error envelope or a correct 200.

The app of `adk_memory.server.create_app` runs in-process (httpx's ASGI transport, on an event
loop thread of this module) over `memory://`, with the fast hash embedder and `EchoModel`.
Hypothesis (derandomized, `tests/conftest.py`) builds requests to every route: hostile path
segments, query parameters, JSON bodies with the routes' own fields (both casings) holding hostile
or mistyped values, unknown fields, and raw bodies that are not JSON, not an object, not UTF-8,
nested thousands deep or over the body limit. Every answer must be a 200 with a JSON object, or
the error envelope `{"error": {"code", "message", "status"}}` with a 4xx code equal to the HTTP
status (never a 500, never a hang: each request has 20 s); a retrieve returns only memories of
exactly its scope; and a bank of memories nobody in the test names (the victim) is never shown
and never changed.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from reliability_support import EchoModel

from adk_memory import AsyncClient, NotFound
from adk_memory.server import ApiKey, create_app

pytestmark = pytest.mark.filterwarnings(
    # google-genai warns about an unknown enum value (and keeps it); the engine then refuses it
    # with a 400. Under this suite's `filterwarnings = error` the warning would be the 500.
    "ignore:.* is not a valid .*:UserWarning"
)

MAX_BODY = 200_000
"""The test app's body limit (the default is 10 MiB; a smaller one keeps huge bodies cheap)."""
ERROR_STATUSES = frozenset({400, 401, 403, 404, 405, 409, 413, 501})
"""What a hostile request may get: 4xx, or 501 for a field adk-memory does not implement."""
SECRET = "victim-secret-7f3a"
VICTIM_SCOPE = {"user_id": "victim"}
ADMIN_KEY = "rest-admin-key-0123456789"
LIMITED_KEY = "rest-limited-key-0123456789"

NASTY_TEXT = [
    "",
    " ",
    "*",
    "-",
    "'",
    '"',
    "{}",
    "|",
    "\\",
    "\x00",
    "\ud800",
    "é",
    "/",
    "..",
    "%2F",
    "?a=b",
    "#",
    "user_id",
    "victim",
    "a" * 3000,
    "*)(|",
    "-@x:{y}",
    "1e309",
    "NaN",
    "projects/p/locations/l/reasoningEngines/x",
]
TEXT = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=30))
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
"""Any JSON value (NaN and infinities are not JSON; `json.dumps` would write them anyway)."""


def mostly(
    valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """A valid value five times in six, else a hostile one (or any JSON value: a wrong type).

    A request has several fields, so most requests still carry something hostile."""
    hostile_or_json = st.one_of(hostile, JSON)
    return st.sampled_from([True] * 5 + [False]).flatmap(
        lambda ok: valid if ok else hostile_or_json
    )


SCOPE = mostly(
    st.fixed_dictionaries({"user_id": st.sampled_from(["u1", "u2", "Ünï ☕"])}),
    st.dictionaries(TEXT, TEXT, max_size=6),
)
FACT = mostly(st.sampled_from(["I like tea.", "evt-a happened", "x" * 2000]), TEXT)
INTEGER = mostly(
    st.integers(min_value=1, max_value=20),
    st.one_of(
        st.integers(min_value=-5, max_value=200),
        st.sampled_from([0, -(2**63), 2**63, 10**12, "3", "x", "1.5"]),
    ),
)
FILTER = mostly(
    st.sampled_from(
        ['fact="I like tea."', 'scope.user_id="u1"', "create_time>2000-01-01T00:00:00Z"]
    ),
    st.one_of(
        TEXT,
        st.sampled_from(
            [
                'fact=~"(a+)+$"',
                "NOT NOT (",
                'scope.user_id="victim"',
                "create_time>" + "9" * 400,
                'fact:"x" OR ' * 300 + 'fact:"y"',
                'metadata.k.string_value="v"',
            ]
        ),
    ),
)
METADATA_VALUE = mostly(
    st.builds(lambda v: {"stringValue": v}, st.sampled_from(["v", "w"])),
    st.one_of(
        st.builds(lambda v: {"string_value": v}, TEXT),
        st.builds(lambda v: {"doubleValue": v}, st.floats()),
        st.builds(lambda v: {"boolValue": v}, st.booleans()),
        st.builds(lambda v: {"timestampValue": v}, TEXT),
        st.just({"stringValue": "v", "boolValue": True}),
    ),
)
METADATA = mostly(
    st.dictionaries(st.sampled_from(["k", "lang"]), METADATA_VALUE, max_size=2),
    st.dictionaries(TEXT, METADATA_VALUE, max_size=4),
)
FILTER_GROUPS = mostly(
    st.just([{"filters": [{"key": "k", "value": {"stringValue": "v"}}]}]),
    st.lists(
        st.fixed_dictionaries(
            {
                "filters": st.lists(
                    st.fixed_dictionaries(
                        {"key": TEXT, "value": METADATA_VALUE},
                        optional={"op": st.sampled_from(["EQUAL", "GREATER_THAN", "X", ""])},
                    ),
                    max_size=3,
                )
            }
        ),
        max_size=3,
    ),
)
TEXT_PART = mostly(st.sampled_from(["evt-a hello", "evt-b I like tea", "hi"]), TEXT)
EVENT = mostly(
    st.builds(lambda t: {"content": {"role": "user", "parts": [{"text": t}]}}, TEXT_PART),
    st.fixed_dictionaries(
        {"content": st.fixed_dictionaries({"role": TEXT, "parts": st.lists(JSON, max_size=2)})},
        optional={"eventId": TEXT, "event_time": TEXT},
    ),
)
DURATION = mostly(
    st.sampled_from(["60s", "3600s"]), st.one_of(TEXT, st.sampled_from(["0s", "-1s", "1e99s"]))
)
TIME = mostly(
    st.sampled_from(["2030-01-01T00:00:00Z"]),
    st.one_of(TEXT, st.sampled_from(["1970-01-01T00:00:00Z", "9999-12-31T23:59:59Z"])),
)
BOOLEAN = mostly(st.booleans(), st.sampled_from(["true", 1, "yes"]))
NAME = mostly(st.sampled_from(["a name", "Ünï ☕"]), TEXT)

FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "scope": SCOPE,
    "fact": FACT,
    "displayName": NAME,
    "description": NAME,
    "ttl": DURATION,
    "expire_time": TIME,
    "revisionTtl": DURATION,
    "revision_expire_time": TIME,
    "disableMemoryRevisions": BOOLEAN,
    "topics": mostly(
        st.just([{"managedMemoryTopic": "USER_PREFERENCES"}]),
        st.lists(st.fixed_dictionaries({"managedMemoryTopic": TEXT}), max_size=2),
    ),
    "metadata": METADATA,
    "metadataMergeStrategy": mostly(
        st.sampled_from(["OVERWRITE", "MERGE", "REQUIRE_EXACT_MATCH"]), TEXT
    ),
    "revisionLabels": mostly(st.just({"source": "test"}), st.dictionaries(TEXT, TEXT, max_size=3)),
    "directMemoriesSource": mostly(
        st.builds(lambda f: {"directMemories": [{"fact": f}]}, FACT),
        st.fixed_dictionaries({"directMemories": st.lists(JSON, max_size=3)}),
    ),
    "direct_contents_source": mostly(
        st.builds(lambda events: {"events": events}, st.lists(EVENT, min_size=1, max_size=3)),
        st.fixed_dictionaries({"events": JSON}),
    ),
    "vertexSessionSource": JSON,
    "disableConsolidation": BOOLEAN,
    "allowedTopics": JSON,
    "similaritySearchParams": mostly(
        st.fixed_dictionaries({"searchQuery": FACT}, optional={"top_k": INTEGER}),
        st.fixed_dictionaries({}, optional={"searchQuery": JSON, "topK": JSON}),
    ),
    "simpleRetrievalParams": mostly(
        st.fixed_dictionaries({}, optional={"pageSize": INTEGER}),
        st.fixed_dictionaries({}, optional={"pageSize": JSON, "pageToken": TEXT}),
    ),
    "filter": FILTER,
    "filterGroups": FILTER_GROUPS,
    "memoryTypes": mostly(
        st.just(["NATURAL_LANGUAGE_COLLECTION"]),
        st.lists(st.sampled_from(["STRUCTURED_PROFILE", "X", ""]), max_size=2),
    ),
    "force": BOOLEAN,
    "targetRevisionId": TEXT,
    "streamId": mostly(st.sampled_from(["", "s"]), TEXT),
    "forceFlush": BOOLEAN,
    "generationTriggerConfig": mostly(
        st.builds(lambda n: {"generationRule": {"eventCount": n}}, st.integers(1, 3)),
        st.fixed_dictionaries(
            {
                "generationRule": st.fixed_dictionaries(
                    {},
                    optional={
                        "eventCount": INTEGER,
                        "idle_duration": DURATION,
                        "fixedInterval": DURATION,
                    },
                )
            }
        ),
    ),
    "contextSpec": JSON,
    "labels": JSON,
    "name": TEXT,
    "nonsenseField": JSON,
}


@dataclass(frozen=True)
class Route:
    method: str
    path: str
    fields: tuple[str, ...] = ()
    """Body fields, each present or not."""
    query: tuple[str, ...] = ()
    required: tuple[str, ...] = ()
    """Body fields nearly always present (a request without them is a plain 400)."""


_COMMON_MEMORY = (
    "displayName",
    "description",
    "ttl",
    "expire_time",
    "revisionTtl",
    "revision_expire_time",
    "disableMemoryRevisions",
    "topics",
    "metadata",
)
_GENERATION = (
    "disableMemoryRevisions",
    "metadata",
    "metadataMergeStrategy",
    "revisionLabels",
    "revisionTtl",
    "revision_expire_time",
)
ROUTES = [
    Route(
        "POST", "reasoningEngines", ("displayName", "description", "contextSpec", "labels", "name")
    ),
    Route("GET", "reasoningEngines", query=("pageSize", "pageToken", "filter")),
    Route("GET", "{bank}"),
    Route("PATCH", "{bank}", ("displayName", "description", "contextSpec"), ("updateMask",)),
    Route("DELETE", "{bank}", ("force",), ("force",)),
    Route("GET", "{bank}/operations/{id}"),
    Route("POST", "{bank}/memories", _COMMON_MEMORY, ("memoryId",), ("fact", "scope")),
    Route("GET", "{bank}/memories", query=("pageSize", "pageToken", "filter", "orderBy")),
    Route(
        "POST",
        "{bank}/memories:generate",
        (
            *_GENERATION,
            "direct_contents_source",
            "vertexSessionSource",
            "disableConsolidation",
            "allowedTopics",
        ),
        required=("scope", "directMemoriesSource"),
    ),
    Route(
        "POST",
        "{bank}/memories:retrieve",
        (
            "similaritySearchParams",
            "simpleRetrievalParams",
            "filter",
            "filterGroups",
            "memoryTypes",
        ),
        required=("scope",),
    ),
    Route("POST", "{bank}/memories:retrieveProfiles", required=("scope",)),
    Route("POST", "{bank}/memories:purge", ("filter", "filterGroups", "force")),
    Route(
        "POST",
        "{bank}/memories:ingestEvents",
        (*_GENERATION, "streamId", "forceFlush", "generationTriggerConfig"),
        required=("scope", "direct_contents_source"),
    ),
    Route("GET", "{memory}"),
    Route("PATCH", "{memory}", ("fact", "scope", *_COMMON_MEMORY), ("updateMask", "memoryId")),
    Route("DELETE", "{memory}"),
    Route("POST", "{memory}:rollback", required=("targetRevisionId",)),
    Route("GET", "{memory}/operations/{id}"),
    Route("GET", "{memory}/revisions", query=("pageSize", "pageToken", "filter")),
    Route("GET", "{memory}/revisions/{id}"),
]
QUERY: dict[str, st.SearchStrategy[str]] = {
    "pageSize": INTEGER.map(str),
    "pageToken": TEXT,
    "filter": FILTER.map(str),
    "orderBy": mostly(st.sampled_from(["create_time desc", "updateTime"]), TEXT).map(str),
    "updateMask": mostly(
        st.sampled_from(["fact", "displayName,description", "fact,scope"]), TEXT
    ).map(str),
    "memoryId": mostly(st.sampled_from(["m-1", "m-2"]), TEXT).map(str),
    "force": mostly(st.sampled_from(["true", "false"]), TEXT).map(str),
    "x": TEXT,
}
RAW_BODIES = st.one_of(
    st.binary(max_size=40),
    st.sampled_from(
        [
            b"{",
            b"[]",
            b"null",
            b'"x"',
            b"1",
            b"\xff\xfe{}",
            b'{"scope": NaN}',
            b'{"fact": "\\ud800", "scope": {"u": "1"}}',
            b'{"scope": {"\\udc00": "1"}}',
            b'{"scope": {"a": 1}}',
            b"[" * 5000 + b"]" * 5000,
            b'{"a":' * 3000 + b"1" + b"}" * 3000,
            b'{"scope": {"u": "1"}, "scope": {"u": "2"}}',
        ]
    ),
    st.integers(min_value=MAX_BODY - 10, max_value=MAX_BODY + 10).map(
        lambda size: b'{"fact": "' + b"x" * (size - 12) + b'"}'
    ),
)


class Rest:
    """The app on an event loop thread; `call` sends one request and waits at most 20 s."""

    def __init__(self, api_keys: list[ApiKey] | None = None) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.client = AsyncClient(
            "memory://", embedding_model="hash-64", generation_model=EchoModel()
        )
        app = create_app(self.client, api_keys=api_keys, max_body_bytes=MAX_BODY)
        self.http = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        )

    def run(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=20)

    def call(
        self,
        method: str,
        path: str,
        *,
        content: bytes | None = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        query = "&".join(f"{_quoted(k)}={_quoted(v)}" for k, v in (params or {}).items())
        url = f"/v1beta1/{path}" + (f"?{query}" if query else "")
        response: httpx.Response = self.run(
            self.http.request(method, url, content=content, headers=headers)
        )
        return response

    def close(self) -> None:
        self.run(self.http.aclose())
        self.run(self.client.aclose())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@dataclass
class World:
    rest: Rest
    bank: str
    """`reasoningEngines/{id}` of the bank the hostile requests go to."""
    memory: str
    """A memory of that bank."""
    victim: str
    """A bank no request names, holding SECRET in VICTIM_SCOPE."""
    victim_state: str


def _victim_state(rest: Rest, victim: str) -> str:
    listed = rest.call("GET", f"{victim}/memories").json()
    revisions = [
        rest.call("GET", f"{m['name'].split('/', 4)[-1]}/revisions").json()
        for m in listed["memories"]
    ]
    return json.dumps([listed, revisions], sort_keys=True)


FUZZ_BANK = "reasoningEngines/fuzz"
TARGET = f"{FUZZ_BANK}/memories/target"


def _ensure_targets(rest: Rest) -> None:
    """Re-creates the bank and the memory the requests aim at if a request deleted them."""
    memories = rest.client.memory_banks.memories
    try:
        rest.run(rest.client.memory_banks.get(name=FUZZ_BANK))
    except NotFound:
        rest.run(rest.client.memory_banks.create(memory_bank_id="fuzz"))
    try:
        rest.run(memories.get(name=TARGET))
    except NotFound:
        # A deleted memory's id stays taken while its revisions live: restore it instead.
        pager = rest.run(memories.revisions.list(name=TARGET))
        if pager.page:
            revision = pager.page[0].name.rsplit("/", 1)[-1]
            rest.run(memories.rollback(name=TARGET, target_revision_id=revision))
            return
        rest.run(
            memories.create(
                name=FUZZ_BANK,
                fact="I like tea.",
                scope={"user_id": "u1"},
                config={"memory_id": "target"},
            )
        )


@pytest.fixture(scope="module")
def world() -> Iterator[World]:
    rest = Rest()
    try:
        created = rest.call("POST", "reasoningEngines", content=b"{}").json()
        victim = created["response"]["name"].split("/", 4)[-1]
        made = rest.call(
            "POST",
            f"{victim}/memories",
            content=json.dumps({"fact": SECRET, "scope": VICTIM_SCOPE}).encode(),
        )
        assert made.status_code == 200, made.text
        _ensure_targets(rest)
        yield World(rest, FUZZ_BANK, TARGET, victim, _victim_state(rest, victim))
    finally:
        rest.close()


def _assert_answer(response: httpx.Response) -> Any:
    """A 200 with a JSON object, or the Google error envelope with a 4xx code; the body."""
    body = response.json()
    assert isinstance(body, dict), response.text[:300]
    if response.status_code == 200:
        return body
    assert response.status_code in ERROR_STATUSES, response.text[:500]
    error = body["error"]
    assert error["code"] == response.status_code, body
    assert isinstance(error["message"], str) and error["message"], body
    assert isinstance(error["status"], str) and error["status"].isupper(), body
    assert set(body) == {"error"}, body
    return body


SEGMENT = mostly(st.just(None), TEXT).map(
    lambda s: s if s is None or isinstance(s, str) else str(s)
)
"""A path segment: None for the real one (the test bank or memory), else hostile text."""


@st.composite
def requests(draw: st.DrawFn) -> tuple[Route, dict[str, Any], dict[str, str], bytes | None]:
    route = draw(st.sampled_from(ROUTES))
    segments = {"bank": draw(SEGMENT), "memory": draw(SEGMENT), "id": draw(TEXT)}
    params = draw(st.fixed_dictionaries({}, optional={k: QUERY[k] for k in (*route.query, "x")}))
    kind = draw(st.sampled_from(["fields"] * 6 + ["json", "raw", "none"]))
    if kind == "fields" and route.fields + route.required:
        body = draw(
            st.fixed_dictionaries(
                {f: FIELDS[f] for f in route.required},
                optional={f: FIELDS[f] for f in route.fields},
            )
        )
        if draw(st.integers(0, 9)) == 0:
            body["nonsenseField"] = draw(JSON)
        content: bytes | None = json.dumps(body).encode()
    elif kind == "json":
        content = json.dumps(draw(JSON)).encode()
    elif kind == "raw":
        content = draw(RAW_BODIES)
    else:
        content = None
    return route, segments, params, content


def _quoted(segment: str) -> str:
    return quote(segment, safe="", errors="surrogatepass")


def _path(route: Route, segments: dict[str, Any], world: World) -> str:
    bank = (
        world.bank if segments["bank"] is None else f"reasoningEngines/{_quoted(segments['bank'])}"
    )
    memory = (
        world.memory
        if segments["memory"] is None
        else f"{bank}/memories/{_quoted(segments['memory'])}"
    )
    return (
        route.path.replace("{bank}", bank)
        .replace("{memory}", memory)
        .replace("{id}", _quoted(segments["id"]) or "x")
    )


@settings(
    max_examples=400,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(request=requests())
def test_every_route_answers_hostile_requests_with_an_envelope_or_a_correct_200(
    world: World, request: tuple[Route, dict[str, Any], dict[str, str], bytes | None]
) -> None:
    route, segments, params, content = request
    _ensure_targets(world.rest)
    response = world.rest.call(
        route.method, _path(route, segments, world), content=content, params=params
    )
    body = _assert_answer(response)
    assert SECRET not in response.text
    if response.status_code == 200 and route.path.endswith(":retrieve"):
        scope = json.loads(content or b"{}")["scope"]
        assert all(hit["memory"]["scope"] == scope for hit in body.get("retrievedMemories", []))
    assert _victim_state(world.rest, world.victim) == world.victim_state


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scope=SCOPE, fact=FACT, metadata=METADATA, query=FACT, top_k=INTEGER)
def test_a_memory_created_over_rest_is_retrieved_in_exactly_its_scope(
    world: World, scope: Any, fact: Any, metadata: Any, query: Any, top_k: Any
) -> None:
    rest, bank = world.rest, world.bank
    made = rest.call(
        "POST",
        f"{bank}/memories",
        content=json.dumps({"fact": fact, "scope": scope, "metadata": metadata}).encode(
            "utf-8", "surrogatepass"
        ),
    )
    _assert_answer(made)
    retrieve = {"scope": scope, "similaritySearchParams": {"searchQuery": query, "topK": top_k}}
    found = rest.call(
        "POST",
        f"{bank}/memories:retrieve",
        content=json.dumps(retrieve).encode("utf-8", "surrogatepass"),
    )
    hits = _assert_answer(found).get("retrievedMemories", [])
    if found.status_code == 200:
        assert all(hit["memory"]["scope"] == scope for hit in hits)
        assert len(hits) <= min(top_k if isinstance(top_k, int) else 3, 100)
    if made.status_code == 200 and found.status_code == 200 and scope:
        name = made.json()["response"]["name"]
        others = {**scope, next(iter(scope)): next(iter(scope.values())) + "x"}
        nearby = rest.call(
            "POST",
            f"{bank}/memories:retrieve",
            content=json.dumps({"scope": others}).encode("utf-8", "surrogatepass"),
        )
        assert name not in nearby.text
        everything = rest.call(
            "POST",
            f"{bank}/memories:retrieve",
            content=json.dumps({"scope": scope}).encode("utf-8", "surrogatepass"),
        )
        assert name in everything.text
    assert _victim_state(rest, world.victim) == world.victim_state


@pytest.fixture(scope="module")
def keyed() -> Iterator[tuple[Rest, str, str]]:
    """An app with an admin key and a key limited to one bank; (rest, its bank, another)."""
    rest = Rest(
        api_keys=[
            ApiKey(name="admin", key=ADMIN_KEY, permissions=["*"]),
            ApiKey(name="limited", key=LIMITED_KEY, permissions=["memories.*"], banks=["mine"]),
        ]
    )
    try:
        admin = {"x-goog-api-key": ADMIN_KEY}
        for bank_id in ("mine", "theirs"):
            rest.run(rest.client.memory_banks.create(memory_bank_id=bank_id))
        made = rest.call(
            "POST",
            "reasoningEngines/theirs/memories",
            content=json.dumps({"fact": SECRET, "scope": VICTIM_SCOPE}).encode(),
            headers=admin,
        )
        assert made.status_code == 200, made.text
        yield rest, "reasoningEngines/mine", "reasoningEngines/theirs"
    finally:
        rest.close()


RAW_BANK_SEGMENTS = [
    "theirs",
    "mine",
    "-",
    "*",
    "THEIRS",
    "theirs/",
    "mine/../theirs",
    "mine%2F..%2Ftheirs",
]
"""Bank segments sent as they are (other text is percent-encoded)."""


@settings(max_examples=100, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    header=st.sampled_from(["x-goog-api-key", "authorization", "Authorization", "X-Goog-Api-Key"]),
    value=st.one_of(
        TEXT.filter(lambda v: v.isascii()),
        st.sampled_from(
            [f"Bearer {LIMITED_KEY}", LIMITED_KEY, f"Bearer {LIMITED_KEY} ", "Bearer", "Basic eA=="]
        ),
    ),
    route=st.sampled_from([r for r in ROUTES if r.path.startswith("{bank}")]),
    bank=st.one_of(
        st.sampled_from(RAW_BANK_SEGMENTS),
        TEXT,
    ),
)
def test_hostile_keys_and_bank_names_never_reach_another_bank(
    keyed: tuple[Rest, str, str], header: str, value: str, route: Route, bank: str
) -> None:
    rest, _mine, _theirs = keyed
    segment = bank if bank in RAW_BANK_SEGMENTS else _quoted(bank)
    path = route.path.replace("{bank}", f"reasoningEngines/{segment}").replace("{id}", "x")
    try:
        response = rest.call(route.method, path, headers={header: value}, content=b"{}")
    except httpx.LocalProtocolError:
        return  # a header value httpx itself refuses to send (a control character)
    _assert_answer(response)
    assert SECRET not in response.text
    if LIMITED_KEY not in value:
        # Without a valid key: 401, unless no route matches the path at all (404, 405).
        assert response.status_code in (401, 404, 405), response.text[:300]
        if response.status_code != 401:
            assert response.json()["error"]["message"].startswith(("No method", "GET", "POST"))
    if response.status_code == 200:
        assert bank == "mine" and LIMITED_KEY in value
