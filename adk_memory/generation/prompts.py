"""The prompts of the two LLM calls, built from a bank's customization config (seed 004).

Extraction ("tell and show"): the topics to remember (managed topics with their descriptions and
built-in examples, custom topics with the bank's descriptions), narrowed by `allowed_topics`;
few-shot examples (built-in ones for the managed topics plus the bank's own; an example with no
memories teaches "nothing to extract"); first or third person. Consolidation: the new facts, the
candidate memories with their latest revisions, and the four possible actions.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from google.genai import types as genai_types

from adk_memory.types import MANAGED_TOPIC_NAMES

__all__ = [
    "MANAGED_TOPICS",
    "Candidate",
    "ExtractionPrompt",
    "Topic",
    "attachments_of",
    "consolidation_prompt",
    "extraction_prompt",
    "render_conversation",
]


@dataclass(frozen=True, slots=True)
class Topic:
    """A topic the extraction may label facts with."""

    label: str
    description: str
    managed: bool


_MANAGED_TOPIC_DESCRIPTIONS = {
    "USER_PERSONAL_INFO": (
        "Significant personal information about the user, like names, relationships, hobbies, "
        "important dates. For example: 'I work at Google' or 'My wedding anniversary is on "
        "December 31'."
    ),
    "USER_PREFERENCES": (
        "Stated or implied likes, dislikes, preferred styles, or patterns. For example: 'I "
        "prefer the middle seat.'"
    ),
    "KEY_CONVERSATION_DETAILS": (
        "Important milestones or conclusions within the dialogue, such as key events and task "
        "outcomes. For example: 'I booked round-trip flights between JFK and SFO, leaving on "
        "June 1, 2025 and returning on June 7, 2025.'"
    ),
    "EXPLICIT_INSTRUCTIONS": (
        "Information the user explicitly asks the agent to remember or to forget. For example, "
        "when the user says 'Remember that I mostly use Python', the memory is 'I mostly use "
        "Python'. When the user asks to forget something, mark it with forget=true."
    ),
}

MANAGED_TOPICS: dict[str, str] = {
    name: _MANAGED_TOPIC_DESCRIPTIONS[name] for name in MANAGED_TOPIC_NAMES
}
"""Each managed topic with its description (a KeyError at import if the enum gains a topic)."""

_BUILT_IN_EXAMPLES: dict[str, tuple[list[tuple[str, str]], list[str]]] = {
    "USER_PERSONAL_INFO": (
        [
            ("user", "My daughter Emma starts school next week, I'm a bit nervous."),
            ("model", "That's a big step! How old is she?"),
        ],
        ["My daughter is called Emma and starts school next week."],
    ),
    "USER_PREFERENCES": (
        [("user", "Can you book me a table? No seafood places please, I really don't like fish.")],
        ["I don't like fish or seafood."],
    ),
    "KEY_CONVERSATION_DETAILS": (
        [
            ("model", "Your flight LH400 to New York on March 3 is booked."),
            ("user", "Perfect, thanks!"),
        ],
        ["I booked flight LH400 to New York on March 3."],
    ),
    "EXPLICIT_INSTRUCTIONS": (
        [("user", "Please remember that I always want answers in metric units.")],
        ["I always want answers in metric units."],
    ),
}
_NOTHING_EXAMPLE: tuple[list[tuple[str, str]], list[str]] = (
    [("user", "Thanks, that's all for today."), ("model", "You're welcome, goodbye!")],
    [],
)

_EXTRACTION_RULES = """\
You extract long-term memories from a conversation between a user and an AI agent.
Only information that fits one of the topics below is worth remembering; ignore everything else
(small talk, the agent's own statements unless the user confirmed them, transient details).
Write each memory as one self-contained sentence {perspective}.
Label every memory with the topics it belongs to, using the labels exactly as listed.
If the user asks to forget something, output that information with "forget": true instead of
storing it; it will be deleted.
If nothing is worth remembering, return an empty list.
Answer only with JSON matching the response schema."""

_PERSPECTIVE = {
    False: 'in the first person, from the user\'s point of view (e.g. "I prefer window seats.")',
    True: 'in the third person (e.g. "The user prefers window seats.")',
}

_CONSOLIDATION_RULES = """\
You maintain an agent's long-term memory about one user. You receive NEW FACTS just extracted
from a conversation and EXISTING MEMORIES that may be related (each with its id and its most
recent revisions, newest first). For each new fact decide one action:
- CREATE: the fact is new information; give the memory text in "fact".
- UPDATE: the fact refines, corrects or confirms an existing memory; give that memory's id in
  "memory_id" and the resulting text in "fact" (you may keep the existing text unchanged).
- DELETE: the fact contradicts an existing memory so that it is no longer true, or the fact asks
  to forget it (forget=true); give that memory's id in "memory_id".
- NONE: the fact is already fully captured by an existing memory.
Use only the memory ids listed. Never merge information into a memory it does not belong to.
A fact marked forget=true must never be CREATEd.
Answer only with JSON matching the response schema."""


_NO_MEMORIES = "TOPICS: none. Return an empty `memories` list; only update the profiles below."
_PROFILE_RULES = """\
PROFILES: also keep these structured profiles of the user up to date. In "profiles", by schema
id, return only the fields this conversation sets or changes (omit a profile with nothing new).
Values must match the schema. A field the user asks to forget is set to null when the schema
allows it."""


def _profiles_section(
    profiles: Sequence[tuple[str, dict[str, object], dict[str, object] | None]],
) -> str:
    lines = [_PROFILE_RULES]
    for schema_id, schema, current in profiles:
        lines.append(
            f"- {schema_id}: schema {json.dumps(schema, ensure_ascii=False)}; current value "
            f"{json.dumps(current, ensure_ascii=False) if current is not None else '(none yet)'}"
        )
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class ExtractionPrompt:
    """The system instruction and the user content of the extraction call."""

    system_instruction: str
    contents: list[genai_types.Content]


@dataclass(frozen=True, slots=True)
class Candidate:
    """An existing memory offered to consolidation, with its latest revisions' facts."""

    memory_id: str
    fact: str
    revision_facts: tuple[str, ...] = field(default_factory=tuple)


_TOOL_PAYLOAD_CHARS = 2_000
"""A tool call's arguments or response beyond this many characters are cut (with a marker)."""


def render_conversation(events: Sequence[genai_types.Content]) -> str:
    """The conversation as `role: text` lines; tool calls and responses as compact JSON.

    Each inline or file attachment is `[attachment N: mime type]`, numbered as
    `attachments_of` lists them.
    """
    lines = []
    attachments = 0
    for content in events:
        role = content.role or "user"
        texts = []
        for part in content.parts or ():
            if _is_attachment(part):
                attachments += 1
                texts.append(f"[attachment {attachments}: {_mime_type(part)}]")
            elif text := _part_text(part):
                texts.append(text)
        if texts:
            lines.append(f"{role}: {' '.join(texts)}")
    return "\n".join(lines)


def attachments_of(events: Sequence[genai_types.Content]) -> list[genai_types.Part]:
    """The conversation's `inline_data` and `file_data` parts, in order (thoughts skipped)."""
    return [
        part
        for content in events
        for part in content.parts or ()
        if _is_attachment(part) and not part.thought
    ]


def _is_attachment(part: genai_types.Part) -> bool:
    return not part.thought and (part.inline_data is not None or part.file_data is not None)


def _mime_type(part: genai_types.Part) -> str:
    source = part.inline_data or part.file_data
    return (getattr(source, "mime_type", None) or "unknown type")[:100]


def _part_text(part: genai_types.Part) -> str:
    if part.thought:
        return ""
    if part.text:
        return part.text
    if part.function_call is not None:
        call = part.function_call
        return f"[tool call {call.name}: {_payload(call.args)}]"
    if part.function_response is not None:
        response = part.function_response
        return f"[tool {response.name} returned: {_payload(response.response)}]"
    if part.executable_code is not None:
        return f"[code: {_cut(part.executable_code.code or '')}]"
    if part.code_execution_result is not None:
        return f"[code output: {_cut(part.code_execution_result.output or '')}]"
    return ""


def _payload(value: object) -> str:
    return _cut(json.dumps(value or {}, ensure_ascii=False, default=str, sort_keys=True))


def _cut(text: str) -> str:
    if len(text) <= _TOOL_PAYLOAD_CHARS:
        return text
    return text[:_TOOL_PAYLOAD_CHARS] + " …(cut)"


def _example_block(
    turns: Sequence[tuple[str, str]], facts: Sequence[str], third_person: bool
) -> str:
    conversation = "\n".join(f"{role}: {text}" for role, text in turns)
    if third_person:
        facts = [_to_third_person(fact) for fact in facts]
    answer = json.dumps({"memories": [{"fact": fact} for fact in facts]}, ensure_ascii=False)
    return f"<conversation>\n{conversation}\n</conversation>\n<answer>{answer}</answer>"


def _to_third_person(fact: str) -> str:
    if fact.startswith("My "):
        return "The user's " + fact[3:]
    if fact.startswith("I "):
        return "The user " + fact[2:]
    return fact


def extraction_prompt(
    conversation: str,
    *,
    topics: Sequence[Topic],
    examples: Sequence[tuple[Sequence[tuple[str, str]], Sequence[dict[str, object]]]],
    third_person: bool,
    profiles: Sequence[tuple[str, dict[str, object], dict[str, object] | None]] = (),
    attachments: Sequence[genai_types.Part] = (),
    attachments_shown: bool = True,
) -> ExtractionPrompt:
    """The extraction call's prompt.

    Args:
        conversation: The rendered conversation to extract from.
        topics: The topics in force (already narrowed by `allowed_topics`).
        examples: The bank's few-shot examples: (turns as (role, text), generated memories as
            dicts with `fact` and optional `topics`).
        third_person: `enable_third_person_memories`.
        profiles: The structured profiles in force: (schema id, JSON schema of an update,
            current value or None). Empty `topics` with profiles means profiles only.
        attachments: The conversation's attachments (`attachments_of`), sent after the
            conversation as parts of the user content, each after its label.
        attachments_shown: False for a model that takes text only: the attachments are left
            out and a note says so.
    """
    topic_lines = "\n".join(f"- {topic.label}: {topic.description}" for topic in topics)
    blocks = [
        _example_block(*_BUILT_IN_EXAMPLES[topic.label], third_person)
        for topic in topics
        if topic.managed and topic.label in _BUILT_IN_EXAMPLES
    ]
    blocks.append(_example_block(*_NOTHING_EXAMPLE, third_person))
    for turns, memories in examples:
        conversation_text = "\n".join(f"{role}: {text}" for role, text in turns)
        answer = json.dumps({"memories": list(memories)}, ensure_ascii=False)
        blocks.append(
            f"<conversation>\n{conversation_text}\n</conversation>\n<answer>{answer}</answer>"
        )
    sections = [
        _EXTRACTION_RULES.format(perspective=_PERSPECTIVE[third_person]),
        f"TOPICS:\n{topic_lines}" if topics else _NO_MEMORIES,
        "EXAMPLES:\n" + "\n\n".join(blocks),
    ]
    if profiles:
        sections.append(_profiles_section(profiles))
    system = "\n\n".join(sections)
    user = (
        "Extract the memories from this conversation:\n"
        f"<conversation>\n{conversation}\n</conversation>"
    )
    parts = [genai_types.Part(text=user)]
    if attachments and attachments_shown:
        for number, attachment in enumerate(attachments, start=1):
            parts += [genai_types.Part(text=f"[attachment {number}]:"), attachment]
    elif attachments:
        parts[0].text = (
            f"{user}\nNote: the {len(attachments)} attachment(s) of the conversation are not "
            "shown (this model reads text only); extract only what the text says."
        )
    return ExtractionPrompt(system, [genai_types.Content(role="user", parts=parts)])


def consolidation_prompt(
    facts: Sequence[dict[str, object]], candidates: Sequence[Candidate]
) -> ExtractionPrompt:
    """The consolidation call's prompt: new facts (indexed) against candidate memories."""
    fact_lines = "\n".join(
        f"[{index}] {json.dumps(fact, ensure_ascii=False)}" for index, fact in enumerate(facts)
    )
    memory_lines = (
        "\n".join(
            f"- id={candidate.memory_id}: {json.dumps(candidate.fact, ensure_ascii=False)}"
            + (
                "\n  revisions: " + json.dumps(list(candidate.revision_facts), ensure_ascii=False)
                if candidate.revision_facts
                else ""
            )
            for candidate in candidates
        )
        or "(none)"
    )
    user = f"NEW FACTS:\n{fact_lines}\n\nEXISTING MEMORIES:\n{memory_lines}"
    return ExtractionPrompt(
        _CONSOLIDATION_RULES,
        [genai_types.Content(role="user", parts=[genai_types.Part(text=user)])],
    )
