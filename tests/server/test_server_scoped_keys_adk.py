"""ADK's own memory service with a per-user token (a key bound to a scope by a JWT claim): each
user's ADK traffic works, and a request for another user's scope is 403."""

from __future__ import annotations

import time
from typing import Any

import agentplatform
import pytest
from google.adk.memory.memory_entry import MemoryEntry
from google.genai import errors
from google.genai import types as genai_types
from joserfc import jwt
from joserfc.jwk import OctKey

from adk_memory.adk import SelfHostedVertexMemoryBankService


def entry(text: str) -> MemoryEntry:
    return MemoryEntry(
        content=genai_types.Content(role="user", parts=[genai_types.Part(text=text)])
    )


async def test_each_user_token_drives_adk_in_its_own_scope_only(
    keyed_server: Any, admin_sdk: agentplatform.Client, secrets: dict[str, str]
) -> None:
    def service(user: str) -> SelfHostedVertexMemoryBankService:
        claims = {"sub": user, "exp": int(time.time()) + 600}
        signed = jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(secrets["token_secret"]))
        return SelfHostedVertexMemoryBankService(
            bank, endpoint=keyed_server.url, bearer_token=signed
        )

    bank = admin_sdk.memory_banks.create().name
    alice, bob = service("alice"), service("bob")

    await alice.add_memory(app_name="app", user_id="alice", memories=[entry("I like figs.")])
    found = await alice.search_memory(app_name="app", user_id="alice", query="fruit")
    with pytest.raises(errors.ClientError) as read:
        await bob.search_memory(app_name="app", user_id="alice", query="fruit")
    with pytest.raises(errors.ClientError) as written:
        await bob.add_memory(app_name="app", user_id="alice", memories=[entry("I hate figs.")])
    own = await bob.search_memory(app_name="app", user_id="bob", query="fruit")

    assert [m.content.parts[0].text for m in found.memories] == ["I like figs."]
    assert read.value.code == 403 and written.value.code == 403
    assert own.memories == []
    stored = admin_sdk.memory_banks.memories.retrieve(
        name=bank, scope={"app_name": "app", "user_id": "alice"}
    )
    assert [hit.memory.fact for hit in stored] == ["I like figs."]


async def test_adk_memory_ids_of_one_user_cannot_be_claimed_by_another(
    keyed_server: Any,
    admin_sdk: agentplatform.Client,
    secrets: dict[str, str],
    make_sdk: Any,
) -> None:
    """ADK forwards `MemoryEntry.id` as `memory_id`. A key bound to one user chooses ids in that
    user's namespace, so alice claiming `favorite` first neither blocks bob's ADK write of it nor
    tells alice that bob has one; the official SDK gets the namespaced name and reads it back."""

    def signed(user: str) -> str:
        claims = {"sub": user, "exp": int(time.time()) + 600}
        return jwt.encode({"alg": "HS256"}, claims, OctKey.import_key(secrets["token_secret"]))

    bank = admin_sdk.memory_banks.create().name
    alice_sdk = make_sdk(keyed_server.url, token=signed("alice"))
    claimed = alice_sdk.memory_banks.memories.create(
        name=bank,
        fact="alice got here first",
        scope={"app_name": "app", "user_id": "alice"},
        config={"memory_id": "favorite"},
    )
    bob = SelfHostedVertexMemoryBankService(
        bank, endpoint=keyed_server.url, bearer_token=signed("bob")
    )
    favorite = entry("My favorite fruit is the fig.")
    favorite.id = "favorite"

    await bob.add_memory(app_name="app", user_id="bob", memories=[favorite])
    found = await bob.search_memory(app_name="app", user_id="bob", query="fruit")

    alices = claimed.response.name
    assert alices.rsplit("/", 1)[-1].startswith("favorite-")
    assert alice_sdk.memory_banks.memories.get(name=alices).fact == "alice got here first"
    assert [m.content.parts[0].text for m in found.memories] == ["My favorite fruit is the fig."]
    stored = admin_sdk.memory_banks.memories.retrieve(
        name=bank, scope={"app_name": "app", "user_id": "bob"}
    )
    [bobs] = [hit.memory.name for hit in stored]
    assert bobs.rsplit("/", 1)[-1].startswith("favorite-") and bobs != alices
