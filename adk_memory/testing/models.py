"""A deterministic memory model for your own tests: an ADK `BaseLlm` with scripted answers.

```python
from adk_memory import Client
from adk_memory.testing.models import ScriptedMemoryModel

model = ScriptedMemoryModel(
    extractions=[{"memories": [{"fact": "I like tea.", "topics": ["USER_PREFERENCES"]}]}],
    consolidations=[{"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I like tea."}]}],
)
client = Client("memory://", generation_model=model)
```

Each extraction call takes the next scripted extraction answer, each consolidation call the next
consolidation answer (a dict, a pydantic model, or a raw string to simulate a malformed answer).
Or compute the answers from the prompt, so they do not depend on the order of the calls (two
users' sessions generating at once, say):

```python
def extract(request: LlmRequest) -> dict[str, Any]:
    prompt = ScriptedMemoryModel.prompt_text(request)
    facts = ["I like tea."] if "tea" in prompt else []
    return {"memories": [{"fact": fact, "topics": ["USER_PREFERENCES"]} for fact in facts]}

model = ScriptedMemoryModel(extract=extract, consolidate=create_each_new_fact)
```
`requests` records every `LlmRequest` it received, so a test can read the prompts; token usage
is reported as characters / 4. `ExtractionsTogether`, given as `on_call`, shows how many
extractions run at once (a scheduler flushing due streams together, say).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types as genai_types
from pydantic import BaseModel, ConfigDict, Field

from adk_memory.generation.schemas import ConsolidationOutput, ExtractionOutput

__all__ = ["ExtractionsTogether", "ScriptedMemoryModel"]

Answer = dict[str, Any] | BaseModel | str


class ScriptedMemoryModel(BaseLlm):
    """Answers extraction and consolidation calls from two scripts, in order, or by functions."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "scripted-memory-model"
    extractions: list[Any] = Field(default_factory=list)
    consolidations: list[Any] = Field(default_factory=list)
    extract: Callable[[LlmRequest], Answer] | None = None
    """Optional: computes each extraction answer from the request instead of the script."""
    consolidate: Callable[[LlmRequest], Answer] | None = None
    """Optional: computes each consolidation answer from the request instead of the script."""
    on_call: Callable[[str], Awaitable[None]] | None = None
    """Optional: awaited with the call's kind (`extraction`, `consolidation`) before it answers,
    so a test can act while the model "thinks" (write concurrently, let a lock lease lapse)."""
    accepts_attachments: bool = True
    """Whether generation sends it a conversation's images and files (as to Gemini); False
    stands in for a text-only model, which gets a note instead."""
    requests: list[LlmRequest] = Field(default_factory=list)

    @classmethod
    def one_fact(
        cls, fact: str = "A fact.", *, on_call: Callable[[str], Awaitable[None]] | None = None
    ) -> ScriptedMemoryModel:
        """A model that extracts `fact` from every conversation and creates it."""
        return cls(
            extract=lambda request: {"memories": [{"fact": fact, "topics": ["USER_PREFERENCES"]}]},
            consolidate=lambda request: {"actions": [{"fact_index": 0, "action": "CREATE"}]},
            on_call=on_call,
        )

    @classmethod
    def supported_models(cls) -> list[str]:
        """No registry names: pass the instance itself."""
        return []

    def kind_of(self, request: LlmRequest) -> str:
        """`extraction` or `consolidation`, read from the request's response schema."""
        schema = request.config.response_schema if request.config else None
        wire = request.config.response_json_schema if request.config else None
        if schema is ExtractionOutput or (
            isinstance(wire, dict) and "memories" in wire.get("properties", {})
        ):
            return "extraction"
        if schema is ConsolidationOutput:
            return "consolidation"
        raise AssertionError(f"unexpected response schema {schema!r}")

    @staticmethod
    def prompt_text(request: LlmRequest) -> str:
        """The system instruction and every text part of a request, joined."""
        system = request.config.system_instruction if request.config else ""
        texts = [str(system or "")]
        for content in request.contents:
            texts.extend(part.text or "" for part in content.parts or ())
        return "\n".join(texts)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Yields the next scripted answer for the kind of call."""
        self.requests.append(llm_request)
        kind = self.kind_of(llm_request)
        if self.on_call is not None:
            await self.on_call(kind)
        compute = self.extract if kind == "extraction" else self.consolidate
        if compute is not None:
            answer: Answer = compute(llm_request)
        else:
            script = self.extractions if kind == "extraction" else self.consolidations
            if not script:
                raise AssertionError(f"ScriptedMemoryModel has no {kind} answer left")
            answer = script.pop(0)
        text = (
            answer
            if isinstance(answer, str)
            else json.dumps(answer.model_dump() if isinstance(answer, BaseModel) else answer)
        )
        prompt_tokens = len(self.prompt_text(llm_request)) // 4
        yield LlmResponse(
            content=genai_types.Content(role="model", parts=[genai_types.Part(text=text)]),
            usage_metadata=genai_types.GenerateContentResponseUsageMetadata(
                prompt_token_count=prompt_tokens,
                candidates_token_count=len(text) // 4,
                total_token_count=prompt_tokens + len(text) // 4,
            ),
        )


class ExtractionsTogether:
    """An `on_call` for `ScriptedMemoryModel`: how many extraction calls run at once.

    Each extraction waits until `together` of them are in flight (or `timeout` seconds pass);
    `most` is the largest number that ever were. Calls made one after the other each wait out
    the timeout alone and leave `most` at 1; calls without a bound pass `together`.
    """

    def __init__(self, together: int, *, timeout: float = 3.0) -> None:
        self.together = together
        self.timeout = timeout
        self.most = 0
        self._in_flight = 0
        self._enough = asyncio.Event()

    async def __call__(self, kind: str) -> None:
        """Counts an extraction in, waits for the others, and counts it out."""
        if kind != "extraction":
            return
        self._in_flight += 1
        self.most = max(self.most, self._in_flight)
        if self._in_flight >= self.together:
            self._enough.set()
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._enough.wait(), timeout=self.timeout)
        finally:
            self._in_flight -= 1
