"""Keyset pages from the attacker's side, on every backend (issue 14, cases 6 and 7).

Writes between two pages of `memories.list`, simple retrieval and `revisions.list`
never repeat or skip a memory; forged, altered, outdated or foreign page tokens are
`InvalidArgument` (HTTP 400 over REST), never `StoreUnavailable` or another listing's page; and
retrieve without search params answers the whole scope at once instead of truncating.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from adk_memory import AsyncClient, InvalidArgument
from adk_memory.server import create_app

SCOPE = {"user_id": "pager"}
OTHER = {"user_id": "someone-else"}


async def _create(
    client: AsyncClient, bank: str, fact: str, scope: dict[str, str] = SCOPE, **config: Any
) -> str:
    operation = await client.memory_banks.memories.create(
        name=bank, fact=fact, scope=scope, config=config or None
    )
    return str(operation.response.name).rsplit("/", 1)[-1]


def _ids(items: list[Any]) -> list[str]:
    return [str(getattr(item, "memory", item).name).rsplit("/", 1)[-1] for item in items]


def _forged(token: str) -> list[str]:
    """Tokens an attacker derives from a real (sealed) one, and tokens made up outright."""
    raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    encode = lambda data: base64.urlsafe_b64encode(data).decode().rstrip("=")  # noqa: E731
    flipped = [encode(raw[:i] + bytes([raw[i] ^ 1]) + raw[i + 1 :]) for i in (0, 12, len(raw) - 1)]
    readable = {"v": [1_700_000_000_000_000], "i": "zzzz", "q": "0" * 24}  # the former format
    return [
        "garbage",
        "e30",  # {}
        encode(json.dumps(readable).encode()),
        encode(json.dumps({"o": 1_000_000}).encode()),  # the old offset token
        *flipped,  # the nonce, the ciphertext and the tag, each with one bit changed
        encode(raw[:12]),  # the nonce alone
        encode(raw[12:]),  # without the nonce
        token[:-2],
        token + "A" * 2000,
        "é" * 10,
    ]


async def test_list_never_repeats_or_skips_under_inserts_and_deletes(
    aclient: AsyncClient, bank: str
) -> None:
    """Between every two pages a memory is inserted and one seen and one unseen are deleted."""
    memories = aclient.memory_banks.memories
    created = [await _create(aclient, bank, f"fact {i}") for i in range(24)]
    deleted: set[str] = set()
    for order_by in (None, "create_time", "update_time desc, create_time"):
        config: dict[str, Any] = {"page_size": 5, "order_by": order_by}
        pager = await memories.list(name=bank, config=config)
        seen, deleted_unseen = _ids(pager.page), set[str]()
        while pager.next_page_token:
            created.append(await _create(aclient, bank, f"inserted while paging {order_by}"))
            seen_victim = next(m for m in reversed(seen) if m not in deleted)
            unseen = [m for m in created[:24] if m not in {*seen, *deleted}]
            for victim in [seen_victim, *unseen[-1:]]:
                await memories.delete(name=f"{bank}/memories/{victim}")
                deleted.add(victim)
            deleted_unseen.update(unseen[-1:])
            seen += _ids(await pager.next_page())
        assert len(seen) == len(set(seen)), f"a memory repeated with order_by={order_by}"
        stable = {m for m in created[:24] if m not in deleted}
        assert stable <= set(seen), f"a memory was skipped with order_by={order_by}"
        assert not deleted_unseen & set(seen), "a deleted memory was listed"


async def test_retrieve_all_answers_the_whole_scope_at_once(
    aclient: AsyncClient, bank: str
) -> None:
    """105 memories: one page holds all of them, newest first, with no token (SPEC §3)."""
    made = [await _create(aclient, bank, f"memory {i}") for i in range(105)]
    await _create(aclient, bank, "not mine", scope=OTHER)
    pager = await aclient.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
    assert len(pager.page) == 105 and pager.next_page_token is None
    everything = [hit async for hit in pager]
    assert sorted(_ids(everything)) == sorted(made)
    times = [(hit.memory.update_time, _ids([hit])[0]) for hit in everything]
    assert times == sorted(times, key=lambda pair: (-pair[0].timestamp(), pair[1]))
    simple = await aclient.memory_banks.memories.retrieve(
        name=bank, scope=SCOPE, simple_retrieval_params={"page_size": 7}
    )
    assert len(simple.page) == 7 and simple.next_page_token
    assert _ids([hit async for hit in simple]) == _ids(everything)


async def test_retrieve_pages_never_repeat_under_writes(aclient: AsyncClient, bank: str) -> None:
    """A memory updated (moved to the front) or created between pages is not seen twice."""
    made = [await _create(aclient, bank, f"memory {i}") for i in range(12)]
    pager = await aclient.memory_banks.memories.retrieve(
        name=bank, scope=SCOPE, simple_retrieval_params={"page_size": 4}
    )
    seen = _ids(pager.page)
    while pager.next_page_token:
        await _create(aclient, bank, "newer than every page")
        await aclient.memory_banks.memories.update(
            name=f"{bank}/memories/{seen[0]}", fact="updated, now newest"
        )
        seen += _ids(await pager.next_page())
    assert sorted(seen) == sorted(made)


async def test_forged_tokens_are_invalid_argument_everywhere(
    aclient: AsyncClient, bank: str
) -> None:
    """Forged, altered, outdated and foreign tokens: InvalidArgument on every listing."""
    memories = aclient.memory_banks.memories
    for i in range(4):
        name = f"{bank}/memories/" + await _create(aclient, bank, f"fact {i}")
        await memories.update(name=name, fact=f"fact {i} again")
    await _create(aclient, bank, "theirs", scope=OTHER)
    listing = await memories.list(name=bank, config={"page_size": 2})
    retrieval = await memories.retrieve(
        name=bank, scope=SCOPE, simple_retrieval_params={"page_size": 2}
    )
    revisions = await memories.revisions.list(name=name, config={"page_size": 1})
    tokens = {
        "list": listing.next_page_token,
        "retrieve": retrieval.next_page_token,
        "revisions": revisions.next_page_token,
    }
    assert all(tokens.values())

    async def use(kind: str, token: str) -> None:
        if kind == "list":
            await memories.list(name=bank, config={"page_size": 2, "page_token": token})
        elif kind == "retrieve":
            await memories.retrieve(
                name=bank, scope=SCOPE, simple_retrieval_params={"page_token": token}
            )
        else:
            await memories.revisions.list(name=name, config={"page_token": token})

    for kind, token in tokens.items():
        assert token is not None
        await use(kind, token)  # the real token works
        for forged in _forged(token):
            with pytest.raises(InvalidArgument):
                await use(kind, forged)
        for other_kind in tokens:
            if other_kind != kind:
                with pytest.raises(InvalidArgument):
                    await use(other_kind, token)
    with pytest.raises(InvalidArgument):  # another scope
        await memories.retrieve(
            name=bank, scope=OTHER, simple_retrieval_params={"page_token": tokens["retrieve"]}
        )
    with pytest.raises(InvalidArgument):  # another filter
        await memories.list(name=bank, config={"filter": 'fact="x"', "page_token": tokens["list"]})
    with pytest.raises(InvalidArgument):  # another order
        await memories.list(
            name=bank, config={"order_by": "update_time", "page_token": tokens["list"]}
        )


async def test_tokens_over_rest_page_and_refuse_forgeries(aclient: AsyncClient, bank: str) -> None:
    """Over REST: retrieve-all answers all 105 memories without nextPageToken; simple retrieval
    pages by token; a forged token is a 400 INVALID_ARGUMENT on list and retrieve."""
    made = [await _create(aclient, bank, f"memory {i}") for i in range(105)]
    app = create_app(aclient)
    path = "/v1beta1/" + bank[bank.index("reasoningEngines/") :]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as http:
        whole = (await http.post(f"{path}/memories:retrieve", json={"scope": SCOPE})).json()
        assert "nextPageToken" not in whole
        names = [hit["memory"]["name"] for hit in whole["retrievedMemories"]]
        assert sorted(name.rsplit("/", 1)[-1] for name in names) == sorted(made)
        params = {"pageSize": 100}
        first = await http.post(
            f"{path}/memories:retrieve", json={"scope": SCOPE, "simpleRetrievalParams": params}
        )
        params["pageToken"] = first.json()["nextPageToken"]
        body = {"scope": SCOPE, "simpleRetrievalParams": params}
        rest = (await http.post(f"{path}/memories:retrieve", json=body)).json()
        assert len(rest["retrievedMemories"]) == 5 and "nextPageToken" not in rest
        paged = [hit["memory"]["name"] for hit in first.json()["retrievedMemories"]]
        paged += [hit["memory"]["name"] for hit in rest["retrievedMemories"]]
        assert paged == names
        listed = (await http.get(f"{path}/memories", params={"pageSize": 10})).json()
        for forged in _forged(listed["nextPageToken"]):
            answer = await http.get(f"{path}/memories", params={"pageToken": forged})
            assert answer.status_code == 400, forged
            assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
            body = {"scope": SCOPE, "simpleRetrievalParams": {"pageToken": forged}}
            answer = await http.post(f"{path}/memories:retrieve", json=body)
            assert answer.status_code == 400, forged


async def test_pages_of_a_filter_the_store_cannot_run(
    aclient: AsyncClient, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A regex filter (evaluated by the engine on Chroma and Redis) pages by keyset too, over
    several store reads per page (chunks shrunk so that each page needs more than one)."""
    monkeypatch.setattr("adk_memory.engine.memories._RESIDUAL_CHUNK", 1)
    memories = aclient.memory_banks.memories
    kept = [await _create(aclient, bank, f"keep {i}") for i in range(14)]
    for i in range(14):
        await _create(aclient, bank, f"drop {i}")
    config = {"page_size": 4, "filter": 'fact=~"^keep"', "order_by": "create_time"}
    pager = await memories.list(name=bank, config=config)
    seen = _ids(pager.page)
    while pager.next_page_token:
        await _create(aclient, bank, "drop, written while paging")
        seen += _ids(await pager.next_page())
    assert seen == kept


async def test_revision_pages_never_repeat_under_updates(aclient: AsyncClient, bank: str) -> None:
    """New revisions (newest first, so before the cursor) written between pages repeat none."""
    memories = aclient.memory_banks.memories
    name = f"{bank}/memories/" + await _create(aclient, bank, "version 0")
    for version in range(1, 7):
        await memories.update(name=name, fact=f"version {version}")
    pager = await memories.revisions.list(name=name, config={"page_size": 2})
    facts = [revision.fact for revision in pager.page]
    while pager.next_page_token:
        await memories.update(name=name, fact="written while paging")
        facts += [revision.fact for revision in await pager.next_page()]
    assert facts == [f"version {version}" for version in range(6, -1, -1)]


async def test_a_token_of_another_bank_is_refused(aclient: AsyncClient, bank: str) -> None:
    other = (await aclient.memory_banks.create()).name
    for i in range(3):
        await _create(aclient, bank, f"fact {i}")
        await _create(aclient, other, f"fact {i}")
    token = await aclient.memory_banks.memories.list(name=bank, config={"page_size": 1})
    assert token.next_page_token
    with pytest.raises(InvalidArgument):
        await aclient.memory_banks.memories.list(
            name=other, config={"page_size": 1, "page_token": token.next_page_token}
        )


async def test_bank_pages_never_repeat_and_refuse_forgeries(aclient: AsyncClient) -> None:
    """Banks list oldest first; deleting a listed bank between pages skips no other."""
    banks = aclient.memory_banks
    made = [(await banks.create()).name for _ in range(5)]
    pager = await banks.list(config={"page_size": 2})
    seen = [bank.name for bank in pager.page]
    while pager.next_page_token:
        await banks.delete(name=seen[-1])
        seen += [bank.name for bank in await pager.next_page()]
    assert seen == made
    token = (await banks.list(config={"page_size": 1})).next_page_token
    assert token
    for forged in _forged(token):
        with pytest.raises(InvalidArgument):
            await banks.list(config={"page_token": forged})
