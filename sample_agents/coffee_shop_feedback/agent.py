"""The Daily Grind's feedback agent: collects customer feedback into a topic of its own.

The bank is configured as in the Memory Bank documentation's example (seed 004): besides the
managed `USER_PERSONAL_INFO` topic, a custom `business_feedback` topic, with few-shot examples
showing what to extract from a conversation, and what not to (an empty `generated_memories`).
The configuration selects ADK's scope keys (`app_name`, `user_id`), so it applies to this
agent's traffic exactly.

The bank has its own configuration, so the plugin gets its own service. Its store is chosen by
`ADK_MEMORY_URI` (default: embedded Chroma in `~/.adk-memory`):

    ADK_MEMORY_URI=chroma://$HOME/.adk-memory adk run sample_agents/coffee_shop_feedback
    ADK_MEMORY_URI=redis://localhost:6379/0 adk web sample_agents

Needs a Gemini key (`GOOGLE_API_KEY`) for the agent and for memory generation.
"""

from __future__ import annotations

from typing import Any

from google.adk.agents import LlmAgent
from google.adk.apps import App

from adk_memory.adk import MemoryBankPlugin, MemoryBankService

MODEL = "gemini-2.5-flash"
BANK_ID = "coffee-shop-feedback"

BUSINESS_FEEDBACK = {
    "custom_memory_topic": {
        "label": "business_feedback",
        "description": (
            "Specific user feedback about their experience at the coffee shop. This includes "
            "opinions on drinks, food, pastries, ambiance, staff friendliness, service speed, "
            "cleanliness, and any suggestions for improvement."
        ),
    }
}


def _turn(role: str, text: str) -> dict[str, Any]:
    return {"content": {"role": role, "parts": [{"text": text}]}}


FEEDBACK_EXAMPLE = {
    "conversation_source": {
        "events": [
            _turn(
                "model",
                "Welcome back to The Daily Grind! We'd love to hear your feedback on your visit.",
            ),
            _turn(
                "user",
                "Hey. The drip coffee was a bit lukewarm today, which was a bummer. Also, the "
                "music was way too loud, I could barely hear my friend.",
            ),
        ]
    },
    "generated_memories": [
        {"fact": "The user reported that the drip coffee was lukewarm."},
        {"fact": "The user felt the music in the shop was too loud."},
    ],
}

NOTHING_TO_REMEMBER_EXAMPLE = {
    "conversation_source": {
        "events": [
            _turn("model", "Good morning! What can I get for you at The Daily Grind?"),
            _turn("user", "Thanks for the coffee."),
        ]
    },
    "generated_memories": [],
}

COFFEE_SHOP_MEMORY = {
    "scope_keys": ["app_name", "user_id"],
    "memory_topics": [
        {"managed_memory_topic": {"managed_topic_enum": "USER_PERSONAL_INFO"}},
        BUSINESS_FEEDBACK,
    ],
    "generate_memories_examples": [FEEDBACK_EXAMPLE, NOTHING_TO_REMEMBER_EXAMPLE],
}
"""The bank's customization config (seed 004), for ADK's scope `{app_name, user_id}`."""

root_agent = LlmAgent(
    name="coffee_shop_feedback",
    model=MODEL,
    description="Collects customer feedback for The Daily Grind coffee shop.",
    instruction=(
        "You are the friendly feedback host of The Daily Grind coffee shop. Ask the customer "
        "about their visit: drinks, food, pastries, ambiance, staff, speed, cleanliness. Ask "
        "one short follow-up question at a time and thank them. If you remember feedback they "
        "gave before, acknowledge it and ask whether it has improved."
    ),
)

memory = MemoryBankService(bank=BANK_ID, customization_configs=[COFFEE_SHOP_MEMORY])
"""The feedback bank, on `ADK_MEMORY_URI` (created with its configuration on first use)."""

app = App(
    name="coffee_shop_feedback",
    root_agent=root_agent,
    plugins=[MemoryBankPlugin(service=memory, top_k=5)],
)
