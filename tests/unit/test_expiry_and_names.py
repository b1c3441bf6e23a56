from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from adk_memory import InvalidArgument, types
from adk_memory.engine.expiry import UNCHANGED, Action, memory_expiry, revision_expiry
from adk_memory.names import Names, validate_memory_id
from adk_memory.scope import scope_key, validate_scope

NOW = datetime(2026, 1, 1, tzinfo=UTC)
TtlConfig = types.ReasoningEngineContextSpecMemoryBankConfigTtlConfig


def ttl(**fields: object) -> TtlConfig:
    return TtlConfig.model_validate(fields)


def test_request_ttl_wins_over_bank_config() -> None:
    bank = ttl(default_ttl="100s")
    assert memory_expiry(now=NOW, action=Action.CREATE, ttl="5s", bank_ttl=bank) == NOW + timedelta(
        seconds=5
    )
    at = NOW + timedelta(days=2)
    assert memory_expiry(now=NOW, action=Action.CREATE, expire_time=at, bank_ttl=bank) == at


def test_ttl_and_expire_time_together_are_refused() -> None:
    with pytest.raises(InvalidArgument, match="both ttl and expire_time"):
        memory_expiry(now=NOW, action=Action.CREATE, ttl="5s", expire_time=NOW, bank_ttl=None)


def test_granular_ttl_applies_per_operation_and_leaves_others_unchanged() -> None:
    bank = ttl(granular_ttl_config={"create_ttl": "10s", "generate_updated_ttl": "20s"})
    assert memory_expiry(now=NOW, action=Action.CREATE, bank_ttl=bank) == NOW + timedelta(
        seconds=10
    )
    assert memory_expiry(now=NOW, action=Action.GENERATE_UPDATED, bank_ttl=bank) == NOW + timedelta(
        seconds=20
    )
    assert memory_expiry(now=NOW, action=Action.GENERATE_CREATED, bank_ttl=bank) is None
    assert memory_expiry(now=NOW, action=Action.UPDATE, bank_ttl=bank) is UNCHANGED


def test_default_ttl_applies_to_create_update_and_generate() -> None:
    bank = ttl(default_ttl="60s")
    for action in Action:
        assert memory_expiry(now=NOW, action=action, bank_ttl=bank) == NOW + timedelta(seconds=60)


def test_no_ttl_config_means_no_expiry_and_updates_keep_theirs() -> None:
    assert memory_expiry(now=NOW, action=Action.CREATE, bank_ttl=None) is None
    assert memory_expiry(now=NOW, action=Action.UPDATE, bank_ttl=None) is UNCHANGED


@pytest.mark.parametrize("bad", ["10", "ten s", "-5s", "0s", "1h"])
def test_bad_durations_are_refused(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="ttl"):
        memory_expiry(now=NOW, action=Action.CREATE, ttl=bad, bank_ttl=None)


def test_revision_expiry_precedence() -> None:
    assert revision_expiry(
        now=NOW, revision_ttl="7s", bank_ttl=ttl(memory_revision_default_ttl="9s")
    ) == NOW + timedelta(seconds=7)
    assert revision_expiry(
        now=NOW, bank_ttl=ttl(memory_revision_default_ttl="9s")
    ) == NOW + timedelta(seconds=9)
    assert revision_expiry(now=NOW, bank_ttl=None) == NOW + timedelta(days=365)


def test_names_parse_full_and_short_forms() -> None:
    names = Names("p", "l")
    full = names.revision("123", "m-1", "r9")
    assert full == "projects/p/locations/l/reasoningEngines/123/memories/m-1/revisions/r9"
    assert Names.parse_revision(full) == ("123", "m-1", "r9")
    assert Names.parse_memory("reasoningEngines/123/memories/m-1") == ("123", "m-1")
    assert Names.parse_bank("projects/x/locations/y/reasoningEngines/abc-1") == "abc-1"
    assert Names.parse_operation(names.operation("123", "memories/m-1/operations/o1")) == (
        "123",
        "memories/m-1/operations/o1",
    )


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "reasoningEngines/",
        "reasoningEngines/UPPER",
        "reasoningEngines/1/memories",
        "reasoningEngines/1/memories/Bad_Id",
        "reasoningEngines/1/memories/m/extra",
        "projects/p/reasoningEngines/1",
    ],
)
def test_malformed_names_are_invalid_argument(bad: str) -> None:
    with pytest.raises(InvalidArgument, match="expected|memory id"):
        Names.parse_memory(bad)


@pytest.mark.parametrize("memory_id", ["a", "my-memory-1", "a" * 63])
def test_valid_memory_ids(memory_id: str) -> None:
    assert validate_memory_id(memory_id) == memory_id


@pytest.mark.parametrize("memory_id", ["1abc", "abc-", "a" * 64, "a_b", "Abc", ""])
def test_invalid_memory_ids(memory_id: str) -> None:
    with pytest.raises(InvalidArgument):
        validate_memory_id(memory_id)


def test_scope_digest_ignores_order_and_respects_case() -> None:
    assert scope_key({"a": "1", "b": "2"}) == scope_key({"b": "2", "a": "1"})
    assert scope_key({"a": "1"}) != scope_key({"a": "1", "b": "2"})
    assert scope_key({"user": "A"}) != scope_key({"user": "a"})
    assert scope_key({"a": '1","b":"2'}) != scope_key({"a": "1", "b": "2"})
    assert validate_scope({"user_id": "ü🙂"}) == {"user_id": "ü🙂"}


@pytest.mark.parametrize("memory_id", ["note\n", "note\r", "note ", "\nnote", "note\n\n"])
def test_a_memory_id_with_a_trailing_newline_is_not_another_memory(memory_id: str) -> None:
    """`re.match` with `$` accepted "note\\n", a memory distinct from "note" (issue 14, case 4)."""
    with pytest.raises(InvalidArgument):
        validate_memory_id(memory_id)


@pytest.mark.parametrize(
    ("parse", "name"),
    [
        (Names.parse_bank, "reasoningEngines/123\n"),
        (Names.parse_bank, "projects/p\n/locations/l/reasoningEngines/123"),
        (Names.parse_memory, "reasoningEngines/1/memories/note\n"),
        (Names.parse_revision, "reasoningEngines/1/memories/note/revisions/r1\n"),
        (Names.parse_operation, "reasoningEngines/1/operations/op\n"),
    ],
)
def test_names_with_a_newline_resolve_to_nothing(parse: Any, name: str) -> None:
    """`reasoningEngines/123\n` resolved to bank 123 (issue 14, case 4)."""
    with pytest.raises(InvalidArgument):
        parse(name)


def test_memory_bank_numeric_ids_are_valid_in_names_but_not_chosen_at_create() -> None:
    assert Names.parse_memory("reasoningEngines/1/memories/3858070028511346688") == (
        "1",
        "3858070028511346688",
    )
    with pytest.raises(InvalidArgument):
        validate_memory_id("3858070028511346688")
