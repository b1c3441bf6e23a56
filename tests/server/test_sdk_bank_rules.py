"""Bank config rules over REST, through the official SDK (issue 16).

The same refused configs as the client tests (`adk_memory.testing.bank_configs`): each is a 400
INVALID_ARGUMENT naming the field, on create and on update, and a refused update changes nothing.
"""

from __future__ import annotations

import agentplatform
import pytest
from google.genai import errors

from adk_memory.testing.bank_configs import INVALID_BANK_CONFIGS, InvalidBankConfig

# The SDK's enum keeps an unknown name and warns; the refusal under test is the server's.
pytestmark = pytest.mark.filterwarnings("ignore:.* is not a valid .*:UserWarning")

CASES = [pytest.param(case, id=case.id) for case in INVALID_BANK_CONFIGS]


def assert_invalid_argument_naming(caught: errors.ClientError, field: str) -> None:
    assert caught.code == 400
    assert caught.status == "INVALID_ARGUMENT"
    assert caught.message is not None and field in caught.message


@pytest.mark.parametrize("case", CASES)
def test_create_is_a_400_naming_the_field(
    sdk: agentplatform.Client, case: InvalidBankConfig
) -> None:
    with pytest.raises(errors.ClientError) as caught:
        sdk.memory_banks.create(managed_semantic_memory_config=case.config)

    assert_invalid_argument_naming(caught.value, case.field)


@pytest.mark.parametrize("case", CASES)
def test_update_is_a_400_naming_the_field_and_keeps_the_bank(
    sdk: agentplatform.Client, case: InvalidBankConfig
) -> None:
    name = sdk.memory_banks.create(
        managed_semantic_memory_config={"unstructured_memory_configs": [{"scope_keys": ["u"]}]}
    ).name
    before = sdk.memory_banks.get(name=name)

    with pytest.raises(errors.ClientError) as caught:
        sdk.memory_banks.update(name=name, managed_semantic_memory_config=case.config)

    assert_invalid_argument_naming(caught.value, case.field)
    assert sdk.memory_banks.get(name=name) == before
