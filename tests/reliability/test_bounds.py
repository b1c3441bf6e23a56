"""Durations and timestamps out of range, from the attacker's side (issue 14, case 5).

Every duration a request carries (a memory's ttl and revision_ttl, a bank's default and granular
TTLs, generation trigger intervals) and every timestamp (expire_time, revision_expire_time,
filter and metadata times) is bounded: a value outside is `InvalidArgument` naming the field and
the bound, on every backend and as HTTP 400 over REST, never an OverflowError or a 500. Values at
the bounds are stored and read back.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import httpx
import pytest

from adk_memory import AsyncClient, InvalidArgument
from adk_memory.bounds import MAX_DURATION, MIN_TIME
from adk_memory.server import create_app

SCOPE = {"user_id": "bounds"}
HUGE_DURATIONS = ["300000000000s", "3155760001s", "9" * 400 + "s", "1" + "0" * 30 + ".5s"]
AHEAD_OF_UTC = timezone(timedelta(hours=1))
BEHIND_UTC = timezone(timedelta(hours=-1))


def _rest(aclient: AsyncClient) -> httpx.AsyncClient:
    """An HTTP client of the REST app over `aclient`, in this process."""
    transport = httpx.ASGITransport(app=create_app(aclient))
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


async def _refused(call: Any, field: str, bound: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        await call
    assert caught.value.field == field, caught.value
    assert bound in str(caught.value), caught.value


async def test_memory_durations_beyond_100_years_are_refused(
    aclient: AsyncClient, bank: str
) -> None:
    memories = aclient.memory_banks.memories
    for ttl in HUGE_DURATIONS:
        for key in ("ttl", "revision_ttl"):
            call = memories.create(name=bank, fact="f", scope=SCOPE, config={key: ttl})
            await _refused(call, f"config.{key}", "3155760000s")
    made = await memories.create(name=bank, fact="f", scope=SCOPE, config={"ttl": "1s"})
    for key in ("ttl", "revision_ttl"):
        call = memories.update(name=made.response.name, fact="g", config={key: HUGE_DURATIONS[0]})
        await _refused(call, f"config.{key}", "3155760000s")
    assert (await memories.get(name=made.response.name)).fact == "f"
    assert [m.fact async for m in await memories.list(name=bank)] == ["f"]


async def test_the_longest_duration_and_the_last_timestamp_are_stored(
    aclient: AsyncClient, bank: str
) -> None:
    memories = aclient.memory_banks.memories
    longest = await memories.create(
        name=bank, fact="long", scope=SCOPE, config={"ttl": "3155760000s"}
    )
    stored = await memories.get(name=longest.response.name)
    assert stored.expire_time - stored.create_time == MAX_DURATION
    last = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)
    final = await memories.create(
        name=bank,
        fact="until the end",
        scope=SCOPE,
        config={"expire_time": last, "revision_expire_time": last},
    )
    assert (await memories.get(name=final.response.name)).expire_time == last
    await memories.create(
        name=bank, fact="born expired", scope=SCOPE, config={"expire_time": MIN_TIME}
    )
    found = await memories.retrieve(name=bank, scope=SCOPE)
    assert sorted(hit.memory.fact for hit in found.page) == ["long", "until the end"]


async def test_timestamps_that_overflow_utc_are_refused(aclient: AsyncClient, bank: str) -> None:
    memories = aclient.memory_banks.memories
    first_hour = datetime(1, 1, 1, 0, 30, tzinfo=AHEAD_OF_UTC)  # before 0001-01-01T00:00Z
    last_hour = datetime(9999, 12, 31, 23, 30, tzinfo=BEHIND_UTC)  # after 9999-12-31
    for when in (first_hour, last_hour):
        for key in ("expire_time", "revision_expire_time"):
            call = memories.create(name=bank, fact="f", scope=SCOPE, config={key: when})
            await _refused(call, f"config.{key}", "9999-12-31T23:59:59.999999Z")
        metadata = {"when": {"timestamp_value": when}}
        call = memories.create(name=bank, fact="f", scope=SCOPE, config={"metadata": metadata})
        with pytest.raises(InvalidArgument, match="9999-12-31T23:59:59.999999Z"):
            await call
        group = [{"filters": [{"key": "when", "value": {"timestamp_value": when}, "op": "EQUAL"}]}]
        call = memories.retrieve(name=bank, scope=SCOPE, config={"filter_groups": group})
        with pytest.raises(InvalidArgument, match="9999-12-31T23:59:59.999999Z"):
            await call
    for text in ('"0001-01-01T00:30:00+01:00"', '"9999-12-31T23:30:00-01:00"', "9" * 30):
        with pytest.raises(InvalidArgument, match="9999-12-31T23:59:59.999999Z"):
            await memories.list(name=bank, config={"filter": f"create_time > {text}"})
    assert [m async for m in await memories.list(name=bank)] == []


async def test_bank_ttls_and_trigger_intervals_are_bounded(aclient: AsyncClient) -> None:
    banks = aclient.memory_banks
    huge = HUGE_DURATIONS[0]
    configs = {
        "ttl_config.default_ttl": {"ttl_config": {"default_ttl": huge}},
        "ttl_config.memory_revision_default_ttl": {
            "ttl_config": {"memory_revision_default_ttl": huge}
        },
        "ttl_config.granular_ttl_config.create_ttl": {
            "ttl_config": {"granular_ttl_config": {"create_ttl": huge}}
        },
        "generation_config.generation_trigger_config.generation_rule.idle_duration": {
            "generation_config": {
                "generation_trigger_config": {"generation_rule": {"idle_duration": huge}}
            }
        },
        "generation_config.generation_trigger_config.generation_rule.fixed_interval": {
            "generation_config": {
                "generation_trigger_config": {"generation_rule": {"fixed_interval": huge}}
            }
        },
    }
    for field, config in configs.items():
        await _refused(banks.create(managed_semantic_memory_config=config), field, "3155760000s")
    assert [bank async for bank in await banks.list()] == []


async def test_over_rest_a_huge_ttl_is_a_400_naming_the_bound(
    aclient: AsyncClient, bank: str
) -> None:
    path = "/v1beta1/" + bank[bank.index("reasoningEngines/") :]
    async with _rest(aclient) as http:
        for body in (
            {"fact": "f", "scope": SCOPE, "ttl": "300000000000s"},
            {"fact": "f", "scope": SCOPE, "revisionTtl": "9" * 400 + "s"},
            {"fact": "f", "scope": SCOPE, "expireTime": "9999-12-31T23:30:00-01:00"},
        ):
            answer = await http.post(f"{path}/memories", json=body)
            assert answer.status_code == 400, (body, answer.text)
            error = answer.json()["error"]
            assert error["status"] == "INVALID_ARGUMENT"
            assert "3155760000s" in error["message"] or "9999-12-31" in error["message"]
        listed = await http.get(f"{path}/memories")
        assert listed.json().get("memories", []) == []


async def test_a_metadata_number_that_is_not_finite_is_refused_on_create_and_update(
    aclient: AsyncClient, bank: str
) -> None:
    """JSON has no NaN or infinity: stored, such a value would make the memory unreadable over
    REST (and compare with nothing in a filter)."""
    memories = aclient.memory_banks.memories
    for value in (float("nan"), float("inf"), float("-inf")):
        bad = {"metadata": {"score": {"double_value": value}}}
        await _refused(
            memories.create(name=bank, fact="f", scope=SCOPE, config=bad),
            "config.metadata.score",
            "finite number",
        )
    kept = await memories.create(name=bank, fact="f", scope=SCOPE)
    await _refused(
        memories.update(
            name=kept.response.name,
            fact="f",
            config={
                "metadata": {"score": {"double_value": float("nan")}},
                "update_mask": "metadata",
            },
        ),
        "config.metadata.score",
        "finite number",
    )
    assert [memory.metadata async for memory in await memories.list(name=bank)] == [None]


async def test_over_rest_a_nan_literal_in_metadata_is_a_400_and_nothing_is_stored(
    aclient: AsyncClient, bank: str
) -> None:
    """Python's JSON parser takes the non-standard `NaN` literal; the engine refuses its value."""
    path = "/v1beta1/" + bank[bank.index("reasoningEngines/") :]
    async with _rest(aclient) as http:
        body = (
            '{"fact": "f", "scope": {"user_id": "bounds"}, "metadata": {"k": {"doubleValue": NaN}}}'
        )
        answer = await http.post(
            f"{path}/memories", content=body, headers={"content-type": "application/json"}
        )
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["status"] == "INVALID_ARGUMENT"
        listed = await http.get(f"{path}/memories")
        assert listed.status_code == 200 and listed.json().get("memories", []) == []
