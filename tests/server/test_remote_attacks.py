"""A scope-bound signed token through `Client("http://…")`, by every other route to a scope.

`test_remote_client` covers create, get, update, delete, list, purge and operations; here are
the rest: a list filtered on another scope, retrieve in every mode and with a superset or a
subset of the other scope, generate (direct memories and contents) and ingest into it,
rollback and revisions of its memory, its profiles, a purge filtered on it, and moving its
memory into the caller's scope. Each is refused or answers nothing of it, and nothing of it
changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from joserfc import jwt
from joserfc.jwk import OctKey

from adk_memory import AdkMemoryError, Client

ALICE = {"user_id": "alice"}
BOB = {"user_id": "bob"}
EVENTS = [{"content": {"role": "user", "parts": [{"text": "I keep bees."}]}}]


def _token(secret: str, user: str) -> str:
    claims = {"sub": user, "exp": int(time.time()) + 3600}
    return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(secret))


def test_a_scope_bound_token_reaches_no_other_scope_by_any_route(
    keyed_server: Any, secrets: dict[str, str]
) -> None:
    with Client(keyed_server.url, api_key=secrets["admin"]) as admin:
        bank = admin.memory_banks.create().name
        bob = admin.memory_banks.memories.create(name=bank, fact="bob's", scope=BOB)
        bobs = bob.response.name
        admin.memory_banks.memories.update(name=bobs, fact="bob's second")
    attempts: dict[str, Callable[[Any], Any]] = {
        "list filtered on bob": lambda m: list(
            m.list(name=bank, config={"filter": 'scope.user_id="bob"'})
        ),
        "retrieve similar in bob": lambda m: list(
            m.retrieve(name=bank, scope=BOB, similarity_search_params={"search_query": "x"})
        ),
        "retrieve pages of bob": lambda m: list(
            m.retrieve(name=bank, scope=BOB, simple_retrieval_params={"page_size": 5})
        ),
        "retrieve bob plus a key": lambda m: list(
            m.retrieve(name=bank, scope={"user_id": "bob", "app": "x"})
        ),
        "retrieve without user": lambda m: list(m.retrieve(name=bank, scope={"app": "x"})),
        "generate into bob": lambda m: m.generate(
            name=bank, scope=BOB, direct_memories_source={"direct_memories": [{"fact": "evil"}]}
        ),
        "generate contents into bob": lambda m: m.generate(
            name=bank, scope=BOB, direct_contents_source={"events": EVENTS}
        ),
        "rollback bob's": lambda m: m.rollback(name=bobs, target_revision_id="1"),
        "revision of bob's": lambda m: m.revisions.get(name=f"{bobs}/revisions/1"),
        "profiles of bob": lambda m: m.retrieve_profiles(name=bank, scope=BOB),
        "purge bob by filter": lambda m: m.purge(
            name=bank, filter='scope.user_id="bob"', force=True
        ),
        "update bob's scope": lambda m: m.update(name=bobs, scope=ALICE),
    }
    outcomes: dict[str, str] = {}
    with Client(keyed_server.url, api_key=_token(secrets["token_secret"], "alice")) as alice:
        memories = alice.memory_banks.memories
        for label, attempt in attempts.items():
            try:
                outcomes[label] = f"answered {attempt(memories)!r}"
            except AdkMemoryError as exc:
                outcomes[label] = type(exc).__name__
        streams = alice.memory_banks
        try:
            streams.ingest_events(name=bank, scope=BOB, direct_contents_source={"events": EVENTS})
            outcomes["ingest into bob"] = "answered"
        except AdkMemoryError as exc:
            outcomes["ingest into bob"] = type(exc).__name__
    with Client(keyed_server.url, api_key=secrets["admin"]) as admin:
        left = [m.fact for m in admin.memory_banks.memories.list(name=bank)]
        streams_left = admin.memory_banks.list_streams(name=bank)
    assert left == ["bob's second"], (left, outcomes)
    assert streams_left == [], outcomes
    assert not [seen for seen in outcomes.values() if "bob" in seen], outcomes
    assert "purge_count=0" in outcomes["purge bob by filter"], outcomes
