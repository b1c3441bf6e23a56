"""Ids over REST: Memory Bank's numeric memory ids, whole-string matching; errors as the SDK's."""

from __future__ import annotations

import json
from typing import Any

import agentplatform
import httpx
import pytest
from google.genai import errors as genai_errors

from adk_memory.transfer import export_bank, import_bank

SCOPE = {"user_id": "ids"}
NUMERIC = "3858070028511346688"


def _get(url: str, path: str) -> httpx.Response:
    return httpx.get(f"{url}/v1beta1/{path}")


def test_an_absent_numeric_memory_id_in_a_path_is_not_found(
    open_server: Any, sdk: agentplatform.Client, bank: str
) -> None:
    name = f"{bank}/memories/{NUMERIC}"
    revisions = _get(open_server.url, f"{name}/revisions")
    responses = [
        _get(open_server.url, name),
        httpx.delete(f"{open_server.url}/v1beta1/{name}"),
        httpx.post(f"{open_server.url}/v1beta1/{name}:rollback", json={"targetRevisionId": "r1"}),
    ]

    assert [r.json()["error"]["status"] for r in responses] == ["NOT_FOUND"] * 3
    assert revisions.status_code == 200 and not revisions.json()["memoryRevisions"]
    with pytest.raises(genai_errors.ClientError) as caught:
        sdk.memory_banks.memories.get(name=name)
    assert (caught.value.code, caught.value.status) == (404, "NOT_FOUND")


def test_a_memory_bank_numeric_memory_id_is_served(open_server: Any, bank: str) -> None:
    """A memory imported from Memory Bank keeps its numeric id and is reachable by it."""
    source = open_server.client.memory_banks.memories
    created = open_server.run(source.create(name=bank, fact="I like tea.", scope=SCOPE))
    lines: list[str] = []
    bank_id = bank.rsplit("/", 1)[1]
    open_server.run(export_bank(open_server.client.engine, bank_id, lines.append))
    memory_id = created.response.name.rsplit("/", 1)[1]
    numbered = [line.replace(f'"{memory_id}"', f'"{NUMERIC}"') for line in lines]
    open_server.run(import_bank(open_server.client.engine, numbered, bank_id=f"{bank_id}-n"))
    name = f"reasoningEngines/{bank_id}-n/memories/{NUMERIC}"

    fetched = _get(open_server.url, name)
    revisions = _get(open_server.url, f"{name}/revisions")

    assert fetched.status_code == 200 and fetched.json()["fact"] == "I like tea."
    assert fetched.json()["name"].endswith(f"/memories/{NUMERIC}")
    assert revisions.status_code == 200 and revisions.json()["memoryRevisions"]


def test_a_numeric_memory_id_cannot_be_chosen_at_create(open_server: Any, bank: str) -> None:
    response = httpx.post(
        f"{open_server.url}/v1beta1/{bank}/memories",
        params={"memoryId": NUMERIC},
        json={"fact": "x", "scope": SCOPE},
    )

    assert response.status_code == 400 and response.json()["error"]["status"] == "INVALID_ARGUMENT"


@pytest.mark.parametrize("memory_id", ["note\n", "note%0A", "note%0D", "note%20"])
def test_a_memory_id_with_trailing_whitespace_is_refused_over_rest(
    open_server: Any, bank: str, memory_id: str
) -> None:
    """Issue 14, case 4: `note\\n` was a memory distinct from `note`."""
    created = httpx.post(
        f"{open_server.url}/v1beta1/{bank}/memories",
        params={"memoryId": memory_id.replace("%0A", "\n").replace("%0D", "\r")},
        json={"fact": "x", "scope": SCOPE},
    )
    in_path = _get(open_server.url, f"{bank}/memories/{memory_id.replace(chr(10), '%0A')}")

    assert created.status_code == 400, created.text
    assert in_path.status_code == 400, in_path.text


def test_a_bank_name_with_a_trailing_newline_resolves_to_no_bank(
    open_server: Any, bank: str
) -> None:
    """Issue 14, case 4: `reasoningEngines/123\\n` resolved to bank 123."""
    response = _get(open_server.url, f"{bank}%0A/memories")

    assert response.status_code == 400 and json.loads(response.text)["error"]["code"] == 400
