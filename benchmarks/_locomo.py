"""LoCoMo loading: one memory per dialogue turn, one scope per conversation, questions 1-4."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

DEFAULT_PATH = Path("/work/shared/data/locomo10.json")
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}


@dataclass(frozen=True)
class Turn:
    conv: str
    dia_id: str
    text: str


@dataclass(frozen=True)
class Question:
    conv: str
    text: str
    category: int
    evidence: frozenset[str]


def load(path: Path = DEFAULT_PATH) -> tuple[list[Turn], list[Question]]:
    data = json.loads(Path(path).read_text())
    turns: list[Turn] = []
    questions: list[Question] = []
    for sample in data:
        conv_id = sample["sample_id"]
        conv = sample["conversation"]
        n = 1
        while f"session_{n}" in conv:
            date = conv.get(f"session_{n}_date_time", "")
            for turn in conv[f"session_{n}"]:
                turns.append(
                    Turn(conv_id, turn["dia_id"], f"[{date}] {turn['speaker']}: {turn['text']}")
                )
            n += 1
        ids = {t.dia_id for t in turns if t.conv == conv_id}
        for qa in sample["qa"]:
            if qa.get("category") not in CATEGORIES:
                continue
            evidence = frozenset(e.strip() for e in qa.get("evidence", []) if e.strip() in ids)
            if not evidence:
                continue
            questions.append(Question(conv_id, qa["question"], qa["category"], evidence))
    return turns, questions
