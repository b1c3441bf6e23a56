"""Memory generation: the prompts, the structured outputs and the model call of GenerateMemories.

The engine (`adk_memory.engine.generate`) decides what to extract from and what to consolidate
with; this package knows how to ask the model.
"""

from __future__ import annotations

from adk_memory.generation.model import DEFAULT_MODEL, CallStats, call_structured, resolve_model
from adk_memory.generation.schemas import (
    ConsolidationAction,
    ConsolidationOutput,
    ExtractedFact,
    ExtractionOutput,
    ExtractionWithProfiles,
)

__all__ = [
    "DEFAULT_MODEL",
    "CallStats",
    "ConsolidationAction",
    "ConsolidationOutput",
    "ExtractedFact",
    "ExtractionOutput",
    "ExtractionWithProfiles",
    "call_structured",
    "resolve_model",
]
