"""Structured memory profiles: schema configs, validation, and profiles stored as memories.

A bank's `structured_memory_configs` hold schema configs (`id`, a google-genai `Schema` as
`memory_schema`, `memory_type` STRUCTURED_PROFILE), selected for a request by `scope_keys` like
customization configs: the config whose keys equal the scope's keys exactly, else the default
config. A profile is one JSON object per (bank, scope, schema id), kept as a memory of type
`STRUCTURED_PROFILE` with a deterministic id that no public id can equal, under the scope's
profile key (`adk_memory.scope.profile_scope_key`), with revisions carrying `structured_data`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonschema

from adk_memory import types
from adk_memory.engine.customization import validate_scope_keys
from adk_memory.errors import InvalidArgument
from adk_memory.scope import scope_key

__all__ = [
    "PROFILE_ID_PREFIX",
    "PROFILE_TYPE",
    "ProfileSchema",
    "SCHEMA_ID",
    "canonical_json",
    "profile_memory_id",
    "schemas_for",
    "validate_profile",
    "validate_structured_configs",
]

PROFILE_TYPE = "STRUCTURED_PROFILE"
PROFILE_ID_PREFIX = "profile--"
"""Reserved: the memory ids of profiles, and no caller-chosen id, start with it."""
SCHEMA_ID = re.compile(r"[a-z][a-z0-9-]{0,62}")
"""The form of a profile schema's id (`schema_configs[].id`)."""


@dataclass(frozen=True, slots=True)
class ProfileSchema:
    """One profile schema in force for a request."""

    schema_id: str
    json_schema: dict[str, Any]
    """The schema as JSON Schema (converted from the google-genai `Schema`)."""

    def partial_schema(self) -> dict[str, Any]:
        """The schema of an update: the same properties, none of them required."""
        partial = dict(self.json_schema)
        partial.pop("required", None)
        return partial


def _json_schema(schema: Any, *, field: str) -> dict[str, Any]:
    if schema is None:
        raise InvalidArgument(f"{field}.memory_schema is required.", field=field)
    converted: dict[str, Any] = schema.json_schema.model_dump(mode="json", exclude_none=True)
    if converted.get("type") != "object" or not converted.get("properties"):
        raise InvalidArgument(
            f"{field}.memory_schema must be an OBJECT schema with properties, e.g. "
            '{"type": "OBJECT", "properties": {"name": {"type": "STRING"}}}.',
            field=field,
        )
    try:
        jsonschema.Draft202012Validator.check_schema(converted)
    except jsonschema.SchemaError as exc:
        raise InvalidArgument(
            f"{field}.memory_schema is not a valid schema: {exc.message[:120]}", field=field
        ) from None
    return converted


def validate_structured_configs(configs: Sequence[types.StructuredMemoryConfig] | None) -> None:
    """Raises InvalidArgument for schema configs Memory Bank would refuse."""
    seen_key_sets: set[frozenset[str]] = set()
    for index, config in enumerate(configs or ()):
        where = f"structured_memory_configs[{index}]"
        keys = validate_scope_keys(config.scope_keys, where=where)
        if keys in seen_key_sets:
            raise InvalidArgument(
                f"{where}: another structured config has the same scope_keys.", field=where
            )
        seen_key_sets.add(keys)
        ids: set[str] = set()
        if not config.schema_configs:
            raise InvalidArgument(f"{where}.schema_configs must not be empty.", field=where)
        for position, schema_config in enumerate(config.schema_configs):
            at = f"{where}.schema_configs[{position}]"
            schema_id = schema_config.id or ""
            if not SCHEMA_ID.fullmatch(schema_id):
                raise InvalidArgument(
                    f"{at}.id must be 1-63 lowercase letters, digits or '-', "
                    "starting with a letter.",
                    field=f"{at}.id",
                )
            if schema_id in ids:
                raise InvalidArgument(f"{at}.id {schema_id!r} is used twice.", field=f"{at}.id")
            ids.add(schema_id)
            kind = schema_config.memory_type
            if kind is not None and getattr(kind, "value", kind) not in (
                PROFILE_TYPE,
                "MEMORY_TYPE_UNSPECIFIED",
            ):
                raise InvalidArgument(
                    f"{at}.memory_type must be STRUCTURED_PROFILE.", field=f"{at}.memory_type"
                )
            _json_schema(schema_config.memory_schema, field=at)


def schemas_for(
    config: types.ReasoningEngineContextSpecMemoryBankConfig, scope: Mapping[str, str]
) -> list[ProfileSchema]:
    """The profile schemas in force for a scope (exact scope_keys match, else the default)."""
    configs = config.structured_memory_configs or []
    keys = set(scope)
    exact = [item for item in configs if item.scope_keys and set(item.scope_keys) == keys]
    default = [item for item in configs if not item.scope_keys]
    chosen = (exact or default or [None])[0]
    if chosen is None:
        return []
    return [
        ProfileSchema(
            item.id or "", _json_schema(item.memory_schema, field="structured_memory_configs")
        )
        for item in chosen.schema_configs or ()
    ]


def validate_profile(data: Any, schema: ProfileSchema) -> None:
    """Raises ValueError naming the first violation of the schema."""
    if not isinstance(data, dict):
        raise ValueError(f"profile {schema.schema_id!r} must be a JSON object")
    error = jsonschema.exceptions.best_match(
        jsonschema.Draft202012Validator(schema.json_schema).iter_errors(data)
    )
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(root)"
        raise ValueError(f"profile {schema.schema_id!r} at {where}: {error.message[:160]}")


def profile_memory_id(scope: Mapping[str, str], schema_id: str) -> str:
    """The deterministic memory id of a scope's profile for one schema.

    It starts with `PROFILE_ID_PREFIX`, which `memories.create` (and so ADK's `add_memory`)
    refuses in a caller-chosen id, so nobody can take a profile's id before its first write.
    """
    digest = hashlib.sha256(f"{scope_key(scope)}\x1f{schema_id}".encode()).hexdigest()[:32]
    return f"{PROFILE_ID_PREFIX}{digest}"


def canonical_json(data: Mapping[str, Any]) -> str:
    """The profile as compact, key-sorted JSON (its `fact` text and embedding input)."""
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(", ", ": "))
