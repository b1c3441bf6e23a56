"""A deterministic *agent* model for tests of agents that use memory: records what it is asked.

```python
from google.adk.agents import LlmAgent
from adk_memory.testing.agent_models import ScriptedAgentModel

model = ScriptedAgentModel(replies=["Hello!"])
agent = LlmAgent(name="assistant", model=model, instruction="Be helpful.")
# … run it through a Runner, then:
assert "I like green tea." in model.request_text(model.requests[-1])
```

Each model call takes the next scripted reply: a string (a text answer), or a dict
`{"function_call": {"name": …, "args": {…}}}` (the agent then calls that tool and asks the model
again). When the script runs out it answers `default_reply`. `requests` keeps every `LlmRequest`,
so a test can check what memory put into the prompt. `EchoMemoriesModel` answers with what
memory put there, for agents in another process (`adk api_server`), whose requests a test cannot
read. These are agents' models; the memory model of generation is
`adk_memory.testing.models.ScriptedMemoryModel`.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types as genai_types
from pydantic import ConfigDict, Field

__all__ = ["EchoMemoriesModel", "ScriptedAgentModel", "write_echo_agent"]


class ScriptedAgentModel(BaseLlm):
    """Answers each model call from a script and records the requests."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model: str = "scripted-agent-model"
    replies: list[Any] = Field(default_factory=list)
    """Answers in order: a text, or `{"function_call": {"name": …, "args": {…}}}`."""
    default_reply: str = "OK."
    """The answer once `replies` is used up."""
    requests: list[LlmRequest] = Field(default_factory=list)
    """Every request received, in order."""

    @classmethod
    def supported_models(cls) -> list[str]:
        """No registry names: pass the instance itself."""
        return []

    @staticmethod
    def request_text(request: LlmRequest) -> str:
        """The system instruction and every text part of a request's contents, joined."""
        system = request.config.system_instruction if request.config else None
        texts = [system if isinstance(system, str) else ""]
        for content in request.contents:
            for part in content.parts or ():
                if part.text:
                    texts.append(part.text)
                if part.function_response is not None:
                    texts.append(str(part.function_response.response))
        return "\n".join(texts)

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Yields the next scripted answer."""
        self.requests.append(llm_request)
        reply = self.replies.pop(0) if self.replies else self.default_reply
        if isinstance(reply, dict) and "function_call" in reply:
            call = reply["function_call"]
            part = genai_types.Part(
                function_call=genai_types.FunctionCall(name=call["name"], args=call.get("args", {}))
            )
        else:
            part = genai_types.Part(text=str(reply))
        prompt_tokens = len(self.request_text(llm_request)) // 4
        yield LlmResponse(
            content=genai_types.Content(role="model", parts=[part]),
            usage_metadata=genai_types.GenerateContentResponseUsageMetadata(
                prompt_token_count=prompt_tokens,
                candidates_token_count=1,
                total_token_count=prompt_tokens + 1,
            ),
        )


class EchoMemoriesModel(ScriptedAgentModel):
    """Answers `remembered:` followed by the `<MEMORIES>` block memory put into the request."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        """Yields the echo of the request's memories (empty without any)."""
        self.requests.append(llm_request)
        text = self.request_text(llm_request)
        found = text.split("<MEMORIES>")[-1].split("</MEMORIES>")[0] if "<MEMORIES>" in text else ""
        part = genai_types.Part(text="remembered:" + found)
        yield LlmResponse(content=genai_types.Content(role="model", parts=[part]))


_ECHO_AGENT = """
from google.adk.agents import LlmAgent
from google.adk.apps import App

from adk_memory.adk import MemoryBankPlugin
from adk_memory.testing.agent_models import EchoMemoriesModel

root_agent = LlmAgent(name="echo", model=EchoMemoriesModel(), instruction="Help.")
app = App(name="{name}", root_agent=root_agent, plugins=[MemoryBankPlugin()])
"""


def write_echo_agent(agents: Path, name: str = "echo_agent") -> None:
    """Writes the agent `name` into the ADK agents folder `agents` (for `adk api_server`).

    Its model is `EchoMemoriesModel` and its app has `MemoryBankPlugin` on the runner's memory
    service, so each answer shows what memory gave the turn.
    """
    folder = agents / name
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text("from . import agent\n", encoding="utf-8")
    (folder / "agent.py").write_text(_ECHO_AGENT.format(name=name), encoding="utf-8")
