"""Creates in flight together through the public API, on every backend (issue 18): creates of
many scopes and of one scope at once, and two scopes racing for one caller-chosen id. Each fact
lands in its own scope with its revision; of two creates of one id exactly one wins."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from adk_memory import AlreadyExists, AsyncClient

SCOPES = [{"user_id": f"user-{i}"} for i in range(4)]


@pytest.fixture
async def client(store_uri: str) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(store_uri, embedding_model="hash-64") as made:
        yield made


async def facts_of(client: AsyncClient, bank: str, scope: dict[str, str]) -> set[str]:
    pager = await client.memory_banks.memories.retrieve(name=bank, scope=scope)
    return {hit.memory.fact async for hit in pager if hit.memory and hit.memory.fact}


async def test_creates_in_flight_together_each_land_in_their_scope(client: AsyncClient) -> None:
    bank = str((await client.memory_banks.create()).name)
    memories = client.memory_banks.memories
    plan = [
        (i % 4 if i < 16 else 0, f"fact {i} of user-{i % 4 if i < 16 else 0}") for i in range(24)
    ]
    created = await asyncio.gather(
        *(memories.create(name=bank, fact=fact, scope=SCOPES[scope]) for scope, fact in plan)
    )
    for index, scope in enumerate(SCOPES):
        assert await facts_of(client, bank, scope) == {fact for s, fact in plan if s == index}
    for operation in created:
        pager = await memories.revisions.list(name=operation.response.name)
        assert [revision.fact async for revision in pager] == [operation.response.fact]


async def test_two_scopes_racing_for_one_id_let_exactly_one_create_through(
    client: AsyncClient,
) -> None:
    bank = str((await client.memory_banks.create()).name)
    memories = client.memory_banks.memories
    for round_ in range(3):
        memory_id = f"contested-{round_}"
        outcomes = await asyncio.gather(
            *(
                memories.create(
                    name=bank,
                    fact=f"{memory_id} by user-{index}",
                    scope=scope,
                    config={"memory_id": memory_id},
                )
                for index, scope in enumerate(SCOPES[:2])
            ),
            return_exceptions=True,
        )
        winners = [o.response for o in outcomes if not isinstance(o, BaseException)]
        assert len(winners) == 1, outcomes
        assert sum(isinstance(o, AlreadyExists) for o in outcomes) == 1, outcomes
        [winner] = winners
        owner = SCOPES[0] if winner.fact.endswith("user-0") else SCOPES[1]
        other = SCOPES[1] if owner is SCOPES[0] else SCOPES[0]
        assert winner.fact in await facts_of(client, bank, owner)
        assert not any(memory_id in fact for fact in await facts_of(client, bank, other))
