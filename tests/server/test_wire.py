"""The wire format, with raw HTTP: casings in and out, paths, status codes, OpenAPI."""

from __future__ import annotations

import json
from typing import Any

import agentplatform
import httpx
import pytest
from google.genai import errors

SCOPE = {"user_id": "wire"}
OPENAPI_TIMEOUT = 60.0
"""FastAPI builds the description on the first request: seconds on a loaded machine."""


def call(method: str, url: str, path: str, body: Any = None, **params: str) -> httpx.Response:
    content = None if body is None else json.dumps(body)
    return httpx.request(method, f"{url}/v1beta1/{path}", content=content, params=params or None)


def test_responses_are_camel_case_without_nulls(open_server: Any, bank: str) -> None:
    created = call(
        "POST",
        open_server.url,
        f"{bank}/memories",
        {"fact": "I like blue.", "scope": SCOPE, "display_name": "dn"},
        memoryId="m-camel",
    )

    memory = created.json()["response"]
    assert created.status_code == 200
    assert {"createTime", "updateTime", "displayName"} <= set(memory)
    assert "create_time" not in memory and None not in memory.values()
    assert memory["name"] == f"{bank}/memories/m-camel"


def test_nested_fields_are_accepted_in_both_casings(open_server: Any, bank: str) -> None:
    for fact in ("I like blue.", "I live in Berlin.", "I have a dog."):
        call("POST", open_server.url, f"{bank}/memories", {"fact": fact, "scope": SCOPE})

    old_sdk = call(
        "POST",
        open_server.url,
        f"{bank}/memories:retrieve",
        {"scope": SCOPE, "similaritySearchParams": {"searchQuery": "I like blue.", "topK": 1}},
    )
    snake = call(
        "POST",
        open_server.url,
        f"{bank}/memories:retrieve",
        {"scope": SCOPE, "similarity_search_params": {"search_query": "I like blue.", "top_k": 1}},
    )
    pages = call(
        "POST",
        open_server.url,
        f"{bank}/memories:retrieve",
        {"scope": SCOPE, "simpleRetrievalParams": {"pageSize": 2}},
    )

    assert old_sdk.status_code == snake.status_code == 200
    assert old_sdk.json()["retrievedMemories"][0]["memory"]["fact"] == "I like blue."
    assert old_sdk.json() == snake.json()
    assert len(pages.json()["retrievedMemories"]) == 2 and pages.json()["nextPageToken"]


def test_bank_configs_are_accepted_in_both_casings_and_returned_in_camel_case(
    open_server: Any,
) -> None:
    camel = {
        "contextSpec": {
            "memoryBankConfig": {
                "customizationConfigs": [
                    {"scopeKeys": ["user_id"], "enableThirdPersonMemories": True}
                ],
                "ttlConfig": {"defaultTtl": "60s"},
            }
        }
    }
    snake = {
        "context_spec": {
            "memory_bank_config": {
                "customization_configs": [
                    {"scope_keys": ["user_id"], "enable_third_person_memories": True}
                ],
                "ttl_config": {"default_ttl": "60s"},
            }
        }
    }

    made = [
        call("POST", open_server.url, "projects/p/locations/l/reasoningEngines", body).json()
        for body in (camel, snake)
    ]
    fetched = [
        call("GET", open_server.url, operation["response"]["name"]).json() for operation in made
    ]

    configs = [engine["contextSpec"]["memoryBankConfig"] for engine in fetched]
    assert configs[0] == configs[1]
    assert configs[0]["customizationConfigs"] == [
        {"scopeKeys": ["user_id"], "enableThirdPersonMemories": True}
    ]
    assert configs[0]["ttlConfig"] == {"defaultTtl": "60s"}
    assert all(
        operation["done"] is True
        and operation["name"].startswith(operation["response"]["name"] + "/operations/")
        for operation in made
    )


def test_paths_without_project_and_location_are_served(open_server: Any, bank: str) -> None:
    bank_id = bank.rsplit("/", 1)[1]

    response = httpx.get(f"{open_server.url}/v1beta1/reasoningEngines/{bank_id}")

    assert response.status_code == 200 and response.json()["name"] == bank
    assert response.json()["contextSpec"]["memoryBankConfig"]["similaritySearchConfig"] == {
        "embeddingModel": "hash-64"
    }


@pytest.mark.parametrize("where", ["body", "query"])
def test_bank_delete_takes_force_from_the_body_or_the_query(
    open_server: Any, sdk: agentplatform.Client, where: str
) -> None:
    bank = sdk.memory_banks.create().name
    sdk.memory_banks.memories.create(name=bank, fact="I like blue.", scope=SCOPE)

    refused = call("DELETE", open_server.url, bank)
    deleted = (
        call("DELETE", open_server.url, bank, {"force": True})
        if where == "body"
        else call("DELETE", open_server.url, bank, force="true")
    )

    assert refused.status_code == 400 and refused.json()["error"]["status"] == "FAILED_PRECONDITION"
    assert deleted.status_code == 200 and deleted.json()["done"] is True
    assert call("GET", open_server.url, bank).status_code == 404


def test_agent_deployment_fields_are_501(open_server: Any, sdk: agentplatform.Client) -> None:
    deployment = call(
        "POST",
        open_server.url,
        "projects/p/locations/l/reasoningEngines",
        {"spec": {"packageSpec": {"pickleObjectGcsUri": "gs://b/o"}}},
    )
    with pytest.raises(errors.ServerError) as encryption:
        sdk.memory_banks.create(
            config={
                "encryption_spec": {
                    "kms_key_name": "projects/p/locations/l/keyRings/r/cryptoKeys/k"
                }
            }
        )

    assert deployment.status_code == 501
    assert (
        deployment.json()["error"]["status"] == "UNIMPLEMENTED"
        and "spec" in deployment.json()["error"]["message"]
    )
    assert encryption.value.code == 501 and "encryptionSpec" in encryption.value.message


def test_unknown_paths_are_404_and_wrong_methods_405_in_the_envelope(
    open_server: Any, bank: str
) -> None:
    unknown = httpx.get(f"{open_server.url}/v1beta1/projects/p/locations/l/sessions")
    wrong_method = httpx.put(f"{open_server.url}/v1beta1/{bank}")

    assert unknown.status_code == 404 and unknown.json()["error"]["status"] == "NOT_FOUND"
    assert wrong_method.status_code == 405 and set(wrong_method.json()["error"]) == {
        "code",
        "message",
        "status",
    }


def test_every_success_is_http_200(open_server: Any, bank: str) -> None:
    created = call(
        "POST", open_server.url, f"{bank}/memories", {"fact": "I like blue.", "scope": SCOPE}
    )
    name = created.json()["response"]["name"]
    responses = [
        created,
        call("PATCH", open_server.url, name, {"fact": "I like green."}, updateMask="fact"),
        call("GET", open_server.url, f"{name}/revisions"),
        call(
            "POST",
            open_server.url,
            f"{bank}/memories:purge",
            {"filter": 'fact:"nothing"', "force": True},
        ),
        call("DELETE", open_server.url, name),
        call("DELETE", open_server.url, bank),
    ]

    assert [response.status_code for response in responses] == [200] * len(responses)


def test_list_query_parameters_accept_both_casings_and_name_a_bad_one(
    open_server: Any, bank: str
) -> None:
    for fact in ("a1", "a2", "a3"):
        call("POST", open_server.url, f"{bank}/memories", {"fact": fact, "scope": SCOPE})

    camel = call("GET", open_server.url, f"{bank}/memories", pageSize="2", orderBy="create_time")
    snake = call("GET", open_server.url, f"{bank}/memories", page_size="2", order_by="create_time")
    bad = call("GET", open_server.url, f"{bank}/memories", pageSize="two")

    assert (
        [m["fact"] for m in camel.json()["memories"]]
        == [m["fact"] for m in snake.json()["memories"]]
        == ["a1", "a2"]
    )
    assert camel.json()["nextPageToken"]
    assert bad.status_code == 400 and "pageSize" in bad.json()["error"]["message"]


def test_a_bank_update_mask_limits_the_change(open_server: Any, sdk: agentplatform.Client) -> None:
    bank = sdk.memory_banks.create(config={"display_name": "before", "description": "kept"}).name

    masked = call(
        "PATCH",
        open_server.url,
        bank,
        {"displayName": "after", "description": "ignored"},
        updateMask="displayName",
    )
    unset = call("PATCH", open_server.url, bank, {"displayName": "x"}, updateMask="description")

    assert masked.status_code == 200
    fetched = sdk.memory_banks.get(name=bank)
    assert (fetched.display_name, fetched.description) == ("after", "kept")
    assert unset.status_code == 400 and "clearing" in unset.json()["error"]["message"]


def test_the_openapi_description_lists_every_route(open_server: Any) -> None:
    described = httpx.get(f"{open_server.url}/openapi.json", timeout=OPENAPI_TIMEOUT).json()

    prefix = "/v1beta1/projects/{project}/locations/{location}/reasoningEngines"
    paths = described["paths"]
    assert {"post", "get"} <= set(paths[prefix])
    assert {"get", "patch", "delete"} <= set(paths[prefix + "/{bank}/memories/{memory}"])
    for verb in ("generate", "retrieve", "retrieveProfiles", "purge", "ingestEvents"):
        assert "post" in paths[f"{prefix}/{{bank}}/memories:{verb}"]
    assert "post" in paths[prefix + "/{bank}/memories/{memory}:rollback"]
    retrieve = paths[f"{prefix}/{{bank}}/memories:retrieve"]["post"]
    body_ref = retrieve["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    body = described["components"]["schemas"][body_ref.rsplit("/", 1)[1]]
    assert {"scope", "similaritySearchParams", "filterGroups"} <= set(body["properties"])
    assert retrieve["x-permission"] == "aiplatform.memories.retrieve"
    assert httpx.get(f"{open_server.url}/healthz").json() == {"status": "ok"}


def test_the_openapi_description_names_key_schemes_only_when_keys_are_required(
    open_server: Any, keyed_server: Any
) -> None:
    keyless = httpx.get(f"{open_server.url}/openapi.json", timeout=OPENAPI_TIMEOUT).json()
    keyed = httpx.get(f"{keyed_server.url}/openapi.json", timeout=OPENAPI_TIMEOUT).json()

    get_memory = (
        "/v1beta1/projects/{project}/locations/{location}/reasoningEngines/{bank}/memories/{memory}"
    )
    assert "securitySchemes" not in keyless["components"]
    assert "security" not in keyless["paths"][get_memory]["get"]
    assert set(keyed["components"]["securitySchemes"]) == {"apiKey", "bearer"}
    assert keyed["paths"][get_memory]["get"]["security"] == [
        {"apiKey": ["memories.get"]},
        {"bearer": ["memories.get"]},
    ]
