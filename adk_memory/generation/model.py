"""Calling the memory model: any ADK `BaseLlm`, with structured output and bounded retries.

`resolve_model` turns `generation_config.model` (any name ADK's `LLMRegistry` resolves, a full
`projects/…/publishers/google/models/…` name, or a `BaseLlm` instance) into a `BaseLlm`.
`call_structured` makes one logical call: it sends the response schema, parses and validates the
answer, and re-asks (at most `max_retries` times, counted apart) when the answer is malformed,
truncated or rejected by `check`. Usage (tokens) is summed across attempts.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from google.genai import types as genai_types
from pydantic import BaseModel, ValidationError

from adk_memory.errors import FailedPrecondition, InvalidArgument, ModelUnavailable
from adk_memory.telemetry import llm_span, record_llm_usage

__all__ = [
    "DEFAULT_MODEL",
    "CallStats",
    "ModelAnswerRejected",
    "accepts_attachments",
    "call_structured",
    "check_model_name",
    "resolve_model",
]

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "gemini-2.5-flash"
DEFAULT_TIMEOUT_SECONDS = 120.0
M = TypeVar("M", bound=BaseModel)


class ModelAnswerRejected(ValueError):
    """Raised by a `check` callback when a well-formed answer breaks a rule (e.g. unknown id)."""


@dataclass(slots=True)
class CallStats:
    """LLM usage of one request, reported in the operation metadata."""

    calls: int = 0
    retries: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0

    def as_metadata(self) -> dict[str, int]:
        """The camelCase metadata of the operation."""
        return {
            "llmCalls": self.calls,
            "llmRetries": self.retries,
            "promptTokens": self.prompt_tokens,
            "outputTokens": self.output_tokens,
            "totalTokens": self.total_tokens,
        }


def resolve_model(model: Any) -> Any:
    """A `BaseLlm` for a model name or instance (None: the default Gemini model)."""
    from google.adk.models import BaseLlm
    from google.adk.models.registry import LLMRegistry

    if isinstance(model, BaseLlm):
        return model
    name = model or DEFAULT_MODEL
    if not isinstance(name, str):
        raise FailedPrecondition(
            "generation_config.model must be a model name or a google.adk BaseLlm instance."
        )
    try:
        return LLMRegistry.new_llm(name)
    except (ValueError, ImportError) as exc:
        raise FailedPrecondition(_no_backend(name, exc), field="generation_config.model") from None


def accepts_attachments(llm: Any) -> bool:
    """Whether a generation model reads image, audio and file parts (not only text).

    A model may say so itself (an `accepts_attachments` attribute, as `ScriptedMemoryModel`
    has); otherwise ADK's Gemini models do, and other models are sent text only.
    """
    declared = getattr(llm, "accepts_attachments", None)
    if isinstance(declared, bool):
        return declared
    from google.adk.models import Gemini

    return isinstance(llm, Gemini)


def check_model_name(name: str) -> None:
    """Raises InvalidArgument unless ADK's `LLMRegistry` resolves `name` to a model class.

    Offline: the registry matches the name against the patterns its classes registered (importing
    the class's module), and neither builds the model nor calls it, so credentials and the
    model's existence at the provider are checked only at the first generate.
    """
    from google.adk.models.registry import LLMRegistry

    try:
        LLMRegistry.resolve(name)
    except (ValueError, ImportError) as exc:
        raise InvalidArgument(_no_backend(name, exc), field="generation_config.model") from None


def _no_backend(name: str, exc: Exception) -> str:
    return (
        f"No model backend for generation_config.model {name[:80]!r}: "
        + str(exc).split("\n")[0]
        + " Use a Gemini model name (gemini-…, or projects/…/publishers/google/models/gemini-…), "
        "install litellm for provider/model names, register your BaseLlm class with ADK's "
        "LLMRegistry, or pass a BaseLlm instance to the client."
    )


async def call_structured(
    llm: Any,
    *,
    system_instruction: str,
    contents: list[genai_types.Content],
    schema: type[M],
    stats: CallStats,
    wire_schema: dict[str, Any] | None = None,
    max_retries: int = 2,
    timeout_seconds: float | None = None,
    check: Callable[[M], None] | None = None,
) -> M:
    """One logical call: the validated answer, after at most `max_retries` re-asks.

    `schema` validates the answer; it is also what the model is sent, unless `wire_schema` (a
    JSON Schema) is given for shapes a pydantic model cannot state, such as per-schema profiles.
    """
    from google.adk.models.llm_request import LlmRequest

    timeout = DEFAULT_TIMEOUT_SECONDS if timeout_seconds is None else timeout_seconds
    stats.calls += 1
    history = list(contents)
    problem = ""
    for attempt in range(max_retries + 1):
        if attempt:
            stats.retries += 1
            history = [
                *contents,
                genai_types.Content(
                    role="user",
                    parts=[
                        genai_types.Part(
                            text=(
                                f"Your previous answer was not valid: {problem}. "
                                "Answer again with JSON that matches the response schema."
                            )
                        )
                    ],
                ),
            ]
        request = LlmRequest(
            model=getattr(llm, "model", None),
            contents=history,
            config=genai_types.GenerateContentConfig(
                system_instruction=system_instruction,
                response_mime_type="application/json",
                response_schema=None if wire_schema else schema,
                response_json_schema=wire_schema,
                temperature=0.0,
            ),
        )
        with llm_span(llm, schema=schema.__name__, attempt=attempt + 1) as span:
            before = (stats.prompt_tokens, stats.output_tokens)
            text = await _complete(llm, request, stats, timeout)
            record_llm_usage(
                span,
                input_tokens=stats.prompt_tokens - before[0],
                output_tokens=stats.output_tokens - before[1],
            )
        try:
            answer = schema.model_validate_json(text)
            if check is not None:
                check(answer)
            return answer
        except (ValidationError, ModelAnswerRejected, ValueError) as exc:
            problem = _describe(exc)
            logger.warning("Memory model answer rejected (attempt %d): %s", attempt + 1, problem)
    raise ModelUnavailable(
        f"The memory model gave no valid answer after {max_retries + 1} attempts (last problem: "
        f"{problem}). Nothing was changed; retry, or use a more capable generation model."
    )


async def _complete(llm: Any, request: Any, stats: CallStats, timeout_seconds: float) -> str:
    async def collect() -> str:
        parts: list[str] = []
        async for response in llm.generate_content_async(request, stream=False):
            usage = response.usage_metadata
            if usage is not None:
                stats.prompt_tokens += usage.prompt_token_count or 0
                stats.output_tokens += usage.candidates_token_count or 0
                stats.total_tokens += usage.total_token_count or 0
            if response.error_code:
                raise ModelUnavailable(
                    f"The memory model returned an error ({response.error_code}); nothing was "
                    "changed. Retry later."
                )
            content = response.content
            for part in (content.parts if content else None) or ():
                if part.text and not part.thought:
                    parts.append(part.text)
        return "".join(parts)

    try:
        return await asyncio.wait_for(collect(), timeout=timeout_seconds)
    except TimeoutError:
        raise ModelUnavailable(
            f"The memory model did not answer within {timeout_seconds:g} s; nothing was changed."
        ) from None
    except ModelUnavailable:
        raise
    except Exception as exc:  # the model client's own errors, whatever the provider
        if _lacks_credentials(exc):
            # A configuration problem, not an outage: retrying cannot help (so not UNAVAILABLE).
            raise FailedPrecondition(
                f"The memory model refused the call for lack of credentials "
                f"({type(exc).__name__}); nothing was changed. Set GOOGLE_API_KEY, or "
                "GOOGLE_GENAI_USE_VERTEXAI=true with GOOGLE_CLOUD_PROJECT and "
                "GOOGLE_CLOUD_LOCATION, or choose another generation_config.model.",
                field="generation_config.model",
            ) from exc
        raise ModelUnavailable(
            f"Calling the memory model failed ({type(exc).__name__}); nothing was changed."
        ) from exc


def _lacks_credentials(exc: Exception) -> bool:
    if getattr(exc, "code", None) in (401, 403):  # google.genai's APIError, litellm's errors
        return True
    text = str(exc).lower()
    return "api key" in text or "credentials" in text or "api_key" in text


def _describe(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}"[:200]
    return str(exc)[:200]
