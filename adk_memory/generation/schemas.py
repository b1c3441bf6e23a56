"""The structured outputs the model must return: one schema for extraction, one for consolidation.

These pydantic models are sent as the response schema of each LLM call and validate its answer.
Anything that does not validate is a malformed answer (retried a bounded number of times).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ConsolidationAction",
    "ConsolidationOutput",
    "ExtractedFact",
    "ExtractionOutput",
    "ExtractionWithProfiles",
    "extraction_wire_schema",
]


class ExtractedFact(BaseModel):
    """One piece of information worth remembering, as the extraction step found it."""

    model_config = ConfigDict(extra="ignore")

    fact: str = Field(
        description="The memory, a self-contained sentence in the requested perspective."
    )
    topics: list[str] = Field(
        default_factory=list,
        description="Labels of the topics it belongs to, exactly as listed in the instructions.",
    )
    context: str | None = Field(default=None, description="Why this was extracted, briefly.")
    forget: bool = Field(
        default=False,
        description=(
            "True when the user asked to forget this information: it must be deleted, not stored."
        ),
    )


class ExtractionOutput(BaseModel):
    """What the extraction call returns."""

    model_config = ConfigDict(extra="ignore")

    memories: list[ExtractedFact] = Field(
        default_factory=list,
        description="Empty when nothing in the conversation is worth remembering.",
    )


class ConsolidationAction(BaseModel):
    """The decision for one new fact against the existing memories."""

    model_config = ConfigDict(extra="ignore")

    fact_index: int = Field(description="The index of the new fact this action is about.")
    action: Literal["CREATE", "UPDATE", "DELETE", "NONE"]
    memory_id: str | None = Field(
        default=None,
        description="For UPDATE and DELETE: the id of an existing memory listed above.",
    )
    fact: str | None = Field(
        default=None,
        description=(
            "For CREATE and UPDATE: the resulting memory text (for UPDATE it may be unchanged)."
        ),
    )


class ConsolidationOutput(BaseModel):
    """What the consolidation call returns."""

    model_config = ConfigDict(extra="ignore")

    actions: list[ConsolidationAction] = Field(default_factory=list)


class ExtractionWithProfiles(ExtractionOutput):
    """What the extraction call returns when profile schemas apply to the scope."""

    profiles: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="By schema id: only the profile fields this conversation sets or changes.",
    )


_FACT_ITEM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "fact": {"type": "string"},
        "topics": {"type": "array", "items": {"type": "string"}},
        "context": {"type": "string"},
        "forget": {"type": "boolean"},
    },
    "required": ["fact"],
}


def extraction_wire_schema(profile_schemas: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The JSON Schema sent to the model when profiles apply (each profile's update is partial)."""
    return {
        "title": "ExtractionWithProfiles",
        "type": "object",
        "properties": {
            "memories": {"type": "array", "items": _FACT_ITEM},
            "profiles": {"type": "object", "properties": dict(profile_schemas)},
        },
        "required": ["memories"],
    }
