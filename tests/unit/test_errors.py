"""Our errors are google-genai's: code ported from the SDK catches them unchanged."""

from __future__ import annotations

import copy
import pickle

import pytest
from google.genai import errors as genai_errors

import adk_memory.errors as ours
from adk_memory import AsyncClient, InvalidArgument, NotFound

ERRORS = [getattr(ours, name) for name in ours.__all__ if name != "AdkMemoryError"]


@pytest.mark.parametrize("error_class", ERRORS)
def test_each_error_is_the_sdks_client_or_server_error_by_its_status(
    error_class: type[ours.AdkMemoryError],
) -> None:
    error = error_class("what to fix", field="scope")
    family = genai_errors.ClientError if error.code < 500 else genai_errors.ServerError
    other = genai_errors.ServerError if error.code < 500 else genai_errors.ClientError

    assert isinstance(error, family) and not isinstance(error, other)
    assert isinstance(error, genai_errors.APIError)
    assert (error.message, error.field, str(error)) == ("what to fix", "scope", "what to fix")
    assert error.status == error_class.status and error.status.isupper()
    assert error.details == {
        "error": {"code": error.code, "message": "what to fix", "status": error.status}
    }


async def test_except_client_error_catches_our_not_found() -> None:
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        bank = await client.memory_banks.create()
        try:
            await client.memory_banks.memories.get(name=f"{bank.name}/memories/absent")
        except genai_errors.ClientError as caught:
            assert isinstance(caught, NotFound)
            assert (caught.code, caught.status) == (404, "NOT_FOUND")
        else:
            pytest.fail("NotFound was not raised")


@pytest.mark.parametrize("error_class", ERRORS)
def test_pickling_and_copying_keep_the_class_message_and_field(
    error_class: type[ours.AdkMemoryError],
) -> None:
    error = error_class("why", field="name")

    for clone in (pickle.loads(pickle.dumps(error)), copy.copy(error), copy.deepcopy(error)):
        assert type(clone) is error_class
        assert (clone.message, clone.field, clone.code, clone.status) == (
            "why",
            "name",
            error.code,
            error.status,
        )


def test_a_subclass_keeps_its_own_code() -> None:
    class TooLarge(InvalidArgument):
        code = 413

    error = TooLarge("big")

    assert (error.code, error.status) == (413, "INVALID_ARGUMENT")
    assert error.details["error"]["code"] == 413
    assert isinstance(error, genai_errors.ClientError)
