"""Fixtures for operating adk-memory: stores for the CLI, a registry-resolvable memory model."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import pytest
from google.adk.models import LlmRequest, LlmResponse
from google.adk.models.registry import LLMRegistry
from google.genai import types as genai_types

from adk_memory.testing.models import ScriptedMemoryModel


@pytest.fixture(params=["memory", "chroma"])
def cli_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store that survives between CLI invocations of one test process.

    `memory://NAME` is shared by every client of the process that names it (bare `memory://`
    would be a new empty store per command).
    """
    if request.param == "memory":
        return f"memory://ops-{uuid.uuid4().hex[:8]}"
    return f"chroma://{tmp_path / 'chroma'}"


@pytest.fixture
def hash_embeddings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Banks created without a model use the fast `hash-64` embedder."""
    monkeypatch.setenv("ADK_MEMORY_EMBEDDING_MODEL", "hash-64")


class EchoMemoryModel(ScriptedMemoryModel):
    """A registry-resolvable memory model: each user message becomes one new memory.

    Registered under `echo-memory-model` so that `adk-memory generate --model
    echo-memory-model` resolves it through ADK's `LLMRegistry` like any model name.
    """

    model: str = "echo-memory-model"

    @classmethod
    def supported_models(cls) -> list[str]:
        return [r"echo-memory-model"]

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        kind = self.kind_of(llm_request)
        prompt = self.prompt_text(llm_request)
        if kind == "extraction":
            conversation = prompt.rsplit("<conversation>", 1)[1].split("</conversation>")[0]
            texts = [
                line.removeprefix("user: ").strip()
                for line in conversation.splitlines()
                if line.startswith("user: ")
            ]
            answer: dict[str, Any] = {
                "memories": [{"fact": text, "topics": ["USER_PREFERENCES"]} for text in texts]
            }
        else:
            new_facts = prompt.split("NEW FACTS:", 1)[1].split("EXISTING MEMORIES:")[0]
            count = sum(1 for line in new_facts.splitlines() if line.startswith("["))
            answer = {
                "actions": [{"fact_index": index, "action": "CREATE"} for index in range(count)]
            }
        text = json.dumps(answer)
        yield LlmResponse(
            content=genai_types.Content(role="model", parts=[genai_types.Part(text=text)]),
            usage_metadata=genai_types.GenerateContentResponseUsageMetadata(
                prompt_token_count=100, candidates_token_count=10, total_token_count=110
            ),
        )


LLMRegistry.register(EchoMemoryModel)


@pytest.fixture
def clean_env() -> dict[str, str]:
    """The environment for `adk-memory` subprocesses: no Google settings, fast embeddings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GOOGLE_", "GEMINI_"))}
    env.update({"ADK_MEMORY_EMBEDDING_MODEL": "hash-64", "COLUMNS": "200"})
    env.pop("ADK_MEMORY_URI", None)
    return env
