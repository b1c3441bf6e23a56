"""Keys, permissions, banks, size limits and error hygiene of the REST server."""

from __future__ import annotations

import json
from typing import Any

import agentplatform
import httpx
import pytest
from google.genai import errors

SCOPE = {"user_id": "sec"}


def post(url: str, path: str, body: Any, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1beta1/{path}",
        content=json.dumps(body),
        headers={"content-type": "application/json", **headers},
    )


def test_a_request_without_a_key_is_401_in_the_google_envelope(
    keyed_server: Any, secrets: dict[str, str]
) -> None:
    response = httpx.get(
        f"{keyed_server.url}/v1beta1/projects/p/locations/l/reasoningEngines/{secrets['limited_bank']}"
    )

    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["error"]["status"] == "UNAUTHENTICATED"
    assert response.json()["error"]["code"] == 401


def test_the_sdk_without_a_valid_key_gets_401(keyed_server: Any, make_sdk: Any) -> None:
    with pytest.raises(errors.ClientError) as caught:
        make_sdk(keyed_server.url, token="not-a-configured-key").memory_banks.create()

    assert (caught.value.code, caught.value.status) == (401, "UNAUTHENTICATED")
    assert "not-a-configured-key" not in caught.value.message


def test_the_api_key_header_of_express_mode_is_accepted(
    keyed_server: Any, secrets: dict[str, str]
) -> None:
    express = agentplatform.Client(
        api_key=secrets["admin"], http_options={"base_url": keyed_server.url}
    )

    created = express.memory_banks.create()
    express.memory_banks.memories.create(name=created.name, fact="I like blue.", scope=SCOPE)

    assert [
        hit.memory.fact
        for hit in express.memory_banks.memories.retrieve(name=created.name, scope=SCOPE)
    ] == ["I like blue."]


def test_a_key_without_the_permission_is_403_naming_it(
    keyed_server: Any, admin_sdk: agentplatform.Client, make_sdk: Any, secrets: dict[str, str]
) -> None:
    bank = admin_sdk.memory_banks.create().name
    admin_sdk.memory_banks.memories.create(name=bank, fact="I like blue.", scope=SCOPE)
    reader = make_sdk(keyed_server.url, token=secrets["reader"])
    agent = make_sdk(keyed_server.url, token=secrets["agent"])

    assert [memory.fact for memory in reader.memory_banks.memories.list(name=bank)] == [
        "I like blue."
    ]
    assert [
        hit.memory.fact for hit in agent.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
    ] == ["I like blue."]
    with pytest.raises(errors.ClientError) as retrieving:
        reader.memory_banks.memories.retrieve(name=bank, scope=SCOPE)
    with pytest.raises(errors.ClientError) as deleting:
        agent.memory_banks.delete(name=bank, force=True)
    with pytest.raises(errors.ClientError) as listing:
        list(agent.memory_banks.memories.list(name=bank))

    assert (retrieving.value.code, retrieving.value.status) == (403, "PERMISSION_DENIED")
    assert (
        "memories.retrieve" in retrieving.value.message and "'reader'" in retrieving.value.message
    )
    assert deleting.value.code == 403 and "reasoningEngines.delete" in deleting.value.message
    assert listing.value.code == 403 and "memories.list" in listing.value.message


def test_a_key_limited_to_a_bank_is_403_on_other_banks(
    keyed_server: Any, make_sdk: Any, secrets: dict[str, str]
) -> None:
    limited = make_sdk(keyed_server.url, token=secrets["limited"])
    mine = f"reasoningEngines/{secrets['limited_bank']}"
    other = f"reasoningEngines/{secrets['other_bank']}"

    limited.memory_banks.memories.create(name=mine, fact="Allowed here.", scope=SCOPE)
    with pytest.raises(errors.ClientError) as elsewhere:
        limited.memory_banks.memories.create(name=other, fact="Not here.", scope=SCOPE)
    with pytest.raises(errors.ClientError) as creating_banks:
        limited.memory_banks.create()
    visible = [bank.name.rsplit("/", 1)[1] for bank in limited.memory_banks.list()]

    assert elsewhere.value.code == 403 and secrets["other_bank"] in elsewhere.value.message
    assert creating_banks.value.code == 403
    assert visible == [secrets["limited_bank"]]


def test_operations_of_a_bank_need_access_to_that_bank(
    keyed_server: Any, admin_sdk: agentplatform.Client, secrets: dict[str, str]
) -> None:
    operation = admin_sdk.memory_banks.memories.purge(
        name=f"reasoningEngines/{secrets['other_bank']}", filter='fact:"x"'
    )

    as_limited = httpx.get(
        f"{keyed_server.url}/v1beta1/{operation.name}",
        headers={"x-goog-api-key": secrets["limited"]},
    )
    as_reader = httpx.get(
        f"{keyed_server.url}/v1beta1/{operation.name}",
        headers={"x-goog-api-key": secrets["reader"]},
    )

    assert as_limited.status_code == 403
    assert as_reader.status_code == 200 and as_reader.json()["response"] == {"purgeCount": 0}


def test_a_20_mb_body_is_413(
    keyed_server: Any, admin_sdk: agentplatform.Client, secrets: dict[str, str]
) -> None:
    bank = admin_sdk.memory_banks.create().name
    body = {"fact": "x" * 20_000_000, "scope": SCOPE}

    declared = post(
        keyed_server.url, f"{bank}/memories", body, **{"x-goog-api-key": secrets["admin"]}
    )
    with pytest.raises(errors.ClientError) as through_sdk:
        admin_sdk.memory_banks.memories.create(name=bank, fact="x" * 20_000_000, scope=SCOPE)

    assert declared.status_code == 413
    assert (
        declared.json()["error"]["code"] == 413 and "limit" in declared.json()["error"]["message"]
    )
    assert through_sdk.value.code == 413


def test_a_streamed_body_over_the_limit_is_413_too(open_server: Any, bank: str) -> None:
    chunk = b"x" * 1_048_576

    def body() -> Any:
        yield b'{"fact": "'
        for _ in range(12):
            yield chunk
        yield b'", "scope": {"user_id": "a"}}'

    response = httpx.post(f"{open_server.url}/v1beta1/{bank}/memories", content=body())

    assert response.status_code == 413


def test_a_malformed_body_is_400_naming_the_field(open_server: Any, bank: str) -> None:
    wrong_type = post(open_server.url, f"{bank}/memories:retrieve", {"scope": {"user_id": 5}})
    unknown = post(
        open_server.url,
        f"{bank}/memories:retrieve",
        {"scope": SCOPE, "similaritySearchParams": {"searchQuery": "x", "topk": 3}},
    )
    missing = post(open_server.url, f"{bank}/memories", {"scope": SCOPE})
    not_json = httpx.post(f"{open_server.url}/v1beta1/{bank}/memories", content=b'{"fact": "x",')

    assert wrong_type.status_code == 400
    assert "'scope.user_id'" in wrong_type.json()["error"]["message"]
    assert (
        wrong_type.json()["error"]["details"][0]["fieldViolations"][0]["field"] == "scope.user_id"
    )
    assert (
        unknown.status_code == 400
        and "similaritySearchParams.topk" in unknown.json()["error"]["message"]
    )
    assert missing.status_code == 400 and "'fact'" in missing.json()["error"]["message"]
    assert not_json.status_code == 400 and "not valid JSON" in not_json.json()["error"]["message"]


def test_an_unexpected_failure_is_500_without_a_stack_trace(
    open_server: Any, bank: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(**kwargs: Any) -> Any:
        raise RuntimeError("secret internals at line 42")

    monkeypatch.setattr(open_server.client.memory_banks.memories, "get", broken)

    response = httpx.get(f"{open_server.url}/v1beta1/{bank}/memories/m1")

    assert response.status_code == 500
    assert response.json() == {
        "error": {
            "code": 500,
            "message": "Internal error; the server log has the details.",
            "status": "INTERNAL",
        }
    }
    assert "Traceback" not in response.text and "secret internals" not in response.text
