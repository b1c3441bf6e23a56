"""Every response type, read back by the official SDK's own converters, equals what we hold.

For each route, the JSON the server sends goes through the SDK's parsing path for that response
(`_<Type>_from_vertex` of `agentplatform._genai.memory_banks` where the SDK has one, then
`<Type>._from_response`, then `_reasoning_engine_to_memory_bank` for banks) and must equal the
server's `AsyncClient` answer for the same resource. A field the server spells differently from
what the SDK reads (as `memorySchema` for `schema` once was) would vanish here and fail the test.
"""

from __future__ import annotations

import json
from typing import Any

import agentplatform
import httpx
import pytest
from agentplatform._genai import _memory_bank_utils
from agentplatform._genai import memory_banks as sdk_converters
from agentplatform._genai import types as sdk_types
from pydantic import BaseModel

from adk_memory.testing.models import ScriptedMemoryModel

SCOPE = {"user_id": "trip"}
PROFILE_SCHEMA = {
    "type": "OBJECT",
    "properties": {"name": {"type": "STRING"}, "age": {"type": "INTEGER"}},
    "required": ["name"],
}
BANK_CONFIG = {
    "unstructured_memory_configs": [
        {
            "scope_keys": ["user_id"],
            "memory_topics": [{"custom_memory_topic": {"label": "tea", "description": "Tea"}}],
        }
    ],
    "structured_memory_configs": [
        {
            "scope_keys": ["user_id"],
            "schema_configs": [{"id": "person", "memory_schema": PROFILE_SCHEMA}],
        }
    ],
    "ttl_config": {"default_ttl": "86400s"},
}


def sdk_reads(type_name: str, payload: dict[str, Any]) -> Any:
    """`payload` parsed as the SDK parses a response of `type_name`."""
    converter = getattr(sdk_converters, f"_{type_name}_from_vertex", None)
    data = converter(payload) if converter is not None else payload
    parsed = getattr(sdk_types, type_name)._from_response(response=data, kwargs={})
    if type_name == "ReasoningEngine":
        return _memory_bank_utils._reasoning_engine_to_memory_bank(parsed)
    return parsed


def dump(model: BaseModel | None) -> Any:
    assert model is not None
    return json.loads(model.model_dump_json(exclude_none=True))


class Wire:
    """Raw HTTP to the open server, and its own client's answers."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.aio = server.client

    def call(self, method: str, path: str, body: Any = None, **params: str) -> dict[str, Any]:
        response = httpx.request(
            method,
            f"{self.server.url}/v1beta1/{path}",
            content=None if body is None else json.dumps(body),
            params=params or None,
        )
        assert response.status_code == 200, response.text
        payload: dict[str, Any] = response.json()
        return payload

    def held(self, coro: Any) -> Any:
        return self.server.run(coro)


@pytest.fixture
def wire(open_server: Any) -> Wire:
    return Wire(open_server)


@pytest.fixture
def full_bank(sdk: agentplatform.Client) -> str:
    return sdk.memory_banks.create(
        managed_semantic_memory_config=BANK_CONFIG, config={"display_name": "trip"}
    ).name


def test_the_sdk_reads_a_banks_profile_schemas_back(
    sdk: agentplatform.Client, full_bank: str
) -> None:
    """Case 2 of issue 15: `schemaConfigs[].schema`, not `memorySchema`."""
    fetched = sdk.memory_banks.get(name=full_bank)

    [structured] = fetched.managed_semantic_memory_config.structured_memory_configs
    [schema_config] = structured.schema_configs
    assert schema_config.id == "person"
    assert schema_config.memory_schema is not None
    assert set(schema_config.memory_schema.properties or {}) == {"name", "age"}
    assert schema_config.memory_schema.required == ["name"]


def test_banks_round_trip(wire: Wire, full_bank: str) -> None:
    short = full_bank.split("/", 4)[-1]
    held = dump(wire.held(wire.aio.memory_banks.get(name=full_bank)))

    assert dump(sdk_reads("ReasoningEngine", wire.call("GET", short))) == held
    # The server is shared by the session's tests: one page holds every bank they made.
    listed = sdk_reads(
        "ListReasoningEnginesResponse", wire.call("GET", "reasoningEngines", pageSize="1000")
    )
    engines = [e for e in listed.reasoning_engines if e.name == full_bank]
    assert [dump(_memory_bank_utils._reasoning_engine_to_memory_bank(e)) for e in engines] == [held]
    updated = wire.call("PATCH", short, {"description": "d2"}, updateMask="description")
    operation = sdk_reads("MemoryBankOperation", updated)
    after = wire.held(wire.aio.memory_banks.get(name=full_bank))
    # The SDK's bank operation reads the response as a MemoryBank, of which it uses the name.
    assert (operation.done, operation.response.name) == (True, after.name)
    stored = wire.held(wire.aio.operations.get(operation.name))
    assert stored.response.description == "d2"
    assert dump(sdk_reads("ReasoningEngine", updated["response"])) == dump(after)
    polled = wire.call("GET", operation.name)
    assert dump(sdk_reads("ReasoningEngine", polled["response"])) == dump(stored.response)

    created = wire.call("POST", "reasoningEngines", {"displayName": "second"})
    held_created = wire.held(wire.aio.memory_banks.get(name=created["response"]["name"]))
    assert dump(sdk_reads("ReasoningEngine", created["response"])) == dump(held_created)


def test_memories_operations_and_revisions_round_trip(
    wire: Wire, full_bank: str, model: ScriptedMemoryModel
) -> None:
    short = full_bank.split("/", 4)[-1]
    created = wire.call(
        "POST",
        f"{short}/memories",
        {"fact": "I like tea.", "scope": SCOPE, "metadata": {"n": {"doubleValue": 2}}},
        memoryId="tea",
    )
    name = created["response"]["name"]
    memories = wire.aio.memory_banks.memories
    held = dump(wire.held(memories.get(name=name)))

    assert dump(sdk_reads("MemoryOperation", created).response) == held
    assert dump(sdk_reads("Memory", wire.call("GET", name))) == held
    stored_create = wire.held(wire.aio.operations.get(created["name"]))
    assert dump(sdk_reads("MemoryOperation", wire.call("GET", created["name"]))) == dump(
        stored_create
    )
    listed = sdk_reads("ListMemoriesResponse", wire.call("GET", f"{short}/memories"))
    assert [dump(m) for m in listed.memories] == [held]

    updated = sdk_reads(
        "MemoryOperation", wire.call("PATCH", name, {"fact": "I love tea."}, updateMask="fact")
    )
    assert dump(updated.response) == dump(wire.held(memories.get(name=name)))

    revisions = wire.held(memories.revisions.list(name=name))
    listed_revisions = sdk_reads(
        "ListMemoryRevisionsResponse", wire.call("GET", f"{name}/revisions")
    )
    assert [dump(r) for r in listed_revisions.memory_revisions] == [dump(r) for r in revisions.page]
    oldest = revisions.page[-1]
    assert dump(sdk_reads("MemoryRevision", wire.call("GET", oldest.name))) == dump(oldest)

    target = {"targetRevisionId": oldest.name.rsplit("/", 1)[1]}
    rolled = wire.call("POST", f"{name}:rollback", target)
    assert dump(sdk_reads("RollbackMemoryOperation", rolled)) == rolled
    # The SDK polls a rollback as a MemoryOperation and reads the restored memory from it.
    polled = sdk_reads("MemoryOperation", wire.call("GET", rolled["name"]))
    assert dump(polled) == dump(wire.held(wire.aio.operations.get(rolled["name"])))
    assert dump(polled.response) == dump(wire.held(memories.get(name=name)))

    retrieve = {"scope": SCOPE, "similaritySearchParams": {"searchQuery": "tea", "topK": 3}}
    retrieved = sdk_reads(
        "RetrieveMemoriesResponse", wire.call("POST", f"{short}/memories:retrieve", retrieve)
    )
    held_hits = wire.held(
        memories.retrieve(
            name=full_bank, scope=SCOPE, similarity_search_params={"search_query": "tea"}
        )
    )
    assert [dump(h) for h in retrieved.retrieved_memories] == [dump(h) for h in held_hits.page]
    assert retrieved.retrieved_memories[0].distance is not None

    deleted = wire.call("DELETE", name)
    assert dump(sdk_reads("DeleteMemoryOperation", deleted)) == deleted


def test_generate_profiles_purge_and_ingest_round_trip(
    wire: Wire, full_bank: str, model: ScriptedMemoryModel
) -> None:
    short = full_bank.split("/", 4)[-1]
    model.extractions.append(
        {
            "memories": [{"fact": "I am Ada.", "topics": ["USER_PERSONAL_INFO"]}],
            "profiles": {"person": {"name": "Ada", "age": 36}},
        }
    )
    model.consolidations.append({"actions": [{"fact_index": 0, "action": "CREATE"}]})
    source = {"events": [{"content": {"role": "user", "parts": [{"text": "I am Ada, 36."}]}}]}

    generated = sdk_reads(
        "GenerateMemoriesOperation",
        wire.call(
            "POST",
            f"{short}/memories:generate",
            {"directContentsSource": source, "scope": SCOPE},
        ),
    )
    assert generated.response.generated_memories
    held_generated = dump(wire.held(wire.aio.operations.get(generated.name)))
    assert dump(generated) == held_generated
    polled = wire.call("GET", generated.name)
    assert dump(sdk_reads("GenerateMemoriesOperation", polled)) == held_generated

    profiles = sdk_reads(
        "RetrieveProfilesResponse",
        wire.call("POST", f"{short}/memories:retrieveProfiles", {"scope": SCOPE}),
    )
    held_profiles = wire.held(
        wire.aio.memory_banks.memories.retrieve_profiles(name=full_bank, scope=SCOPE)
    )
    assert dump(profiles) == dump(held_profiles)
    assert profiles.profiles["person"].profile == {"name": "Ada", "age": 36}

    purged = sdk_reads(
        "PurgeMemoriesOperation",
        wire.call("POST", f"{short}/memories:purge", {"filter": 'fact="nothing"'}),
    )
    assert dump(purged) == dump(wire.held(wire.aio.operations.get(purged.name)))

    ingested = sdk_reads(
        "MemoryBankIngestEventsOperation",
        wire.call(
            "POST",
            f"{short}/memories:ingestEvents",
            {
                "scope": SCOPE,
                "directContentsSource": {"events": [{"content": source["events"][0]["content"]}]},
            },
        ),
    )
    assert dump(ingested) == dump(wire.held(wire.aio.operations.get(ingested.name)))

    deleted = wire.call("DELETE", short, force="true")
    assert dump(sdk_reads("DeleteMemoryBankOperation", deleted)) == deleted
