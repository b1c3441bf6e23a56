"""The fenced code blocks of the project's READMEs, for the tests that run them as written."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
READMES = ("README.md", "backends/chroma/README.md", "backends/redis/README.md")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """One fenced block: the README it is in, its language (may be empty) and its text."""

    readme: str
    language: str
    text: str


def blocks(readme: str) -> list[Block]:
    """Every fenced block of `readme` (a path relative to the repository root), in order."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    return [Block(readme, found.group(1), found.group(2)) for found in _FENCE.finditer(text)]


def block(readme: str, containing: str) -> Block:
    """The one block of `readme` whose text contains `containing`."""
    found = [b for b in blocks(readme) if containing in b.text]
    assert len(found) == 1, f"{len(found)} blocks of {readme} contain {containing!r}"
    return found[0]
