"""A personal assistant that remembers the user across sessions.

Memory is automatic: `MemoryBankPlugin` puts what the assistant remembers about the user into
every model request and, once a conversation has been idle for a minute, has Memory Bank
extract new memories from it. `load_memory` lets the model search memory on its own as well.

Memory lives where the runner's memory service puts it (`services.py` makes ADK build
adk-memory's service from the URI):

    adk run --memory_service_uri=chroma://$HOME/.adk-memory sample_agents/personal_assistant
    adk web --memory_service_uri=redis://localhost:6379/0 sample_agents

Needs a Gemini key (`GOOGLE_API_KEY`) for the agent and for memory generation.
"""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.tools.load_memory_tool import load_memory_tool

from adk_memory.adk import MemoryBankPlugin

MODEL = "gemini-2.5-flash"

root_agent = LlmAgent(
    name="personal_assistant",
    model=MODEL,
    description="A personal assistant that remembers the user across conversations.",
    instruction=(
        "You are a warm, concise personal assistant. Use what you remember about the user "
        "(their name, preferences, plans and instructions) to personalise your help, without "
        "reciting it back unasked. When the user refers to something from an earlier "
        "conversation that is not in front of you, call load_memory to look it up. When the "
        "user asks you to forget something, confirm that you will."
    ),
    tools=[load_memory_tool],
)

app = App(name="personal_assistant", root_agent=root_agent, plugins=[MemoryBankPlugin()])
