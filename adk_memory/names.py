"""Resource names: `projects/{p}/locations/{l}/reasoningEngines/{bank}/memories/{m}/…`.

Parsing accepts full names with any project and location, and the short forms that start at
`reasoningEngines/` (SPEC §2). Formatting always uses the client's prefix. Ids are validated
here, so a malformed name is an `InvalidArgument` that quotes the expected format. Every rule
matches the whole string (`fullmatch`): `re.match` with `$` would let a trailing newline through,
making `note` plus a newline a memory distinct from `note`.

A memory id chosen at create starts with a letter; a memory id inside a name may also be
numeric, as Memory Bank generates them (`…/memories/3858070028511346688`).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from adk_memory.errors import InvalidArgument

__all__ = [
    "MEMORY_ID_PATTERN",
    "SCOPE_TAG_LENGTH",
    "Names",
    "new_bank_id",
    "new_memory_id",
    "scoped_memory_id",
    "validate_memory_id",
]

MEMORY_ID_PATTERN = re.compile(r"[a-z]([a-z0-9-]{0,61}[a-z0-9])?")
_NAMED_MEMORY_ID_PATTERN = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_BANK_ID_PATTERN = re.compile(r"\d{1,30}|[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
_REVISION_ID_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,128}")
_OPERATION_ID_PATTERN = _REVISION_ID_PATTERN
_PREFIX = re.compile(r"(?:projects/[^/\n]+/locations/[^/\n]+/)?(?:reasoningEngines|memoryBanks)/")
_BANK_FORMAT = "projects/{project}/locations/{location}/reasoningEngines/{bank}"


def validate_memory_id(memory_id: str, *, field: str = "memory_id") -> str:
    """Returns the id if it matches Memory Bank's memory-id rule, else raises InvalidArgument."""
    return _matching(
        MEMORY_ID_PATTERN,
        memory_id,
        field,
        "1-63 characters of lowercase letters, digits and '-', starting with a letter and ending "
        "with a letter or digit (e.g. 'my-memory-1')",
    )


def validate_stored_memory_id(memory_id: object, *, field: str = "memory_id") -> str:
    """The id if a stored memory may carry it (as in a name: generated, numeric, profile ids)."""
    return _matching(
        _NAMED_MEMORY_ID_PATTERN,
        memory_id,
        field,
        "1-63 characters of lowercase letters, digits and '-', starting and ending with a letter "
        "or digit",
    )


def validate_revision_id(revision_id: object, *, field: str = "revision_id") -> str:
    """The id if it is a revision id (1-128 letters, digits, '_' and '-')."""
    return _matching(_REVISION_ID_PATTERN, revision_id, field, "1-128 letters, digits, '_' or '-'")


def _matching(pattern: re.Pattern[str], value: object, field: str, rule: str) -> str:
    """`value` if it is a string the whole of which `pattern` matches, else `InvalidArgument`."""
    if not isinstance(value, str) or not pattern.fullmatch(value):
        raise InvalidArgument(f"{field} must be {rule}.", field=field)
    return value


SCOPE_TAG_LENGTH = 16
"""Hex digits of the scope tag `scoped_memory_id` appends (64 bits of the scope's digest)."""


def scoped_memory_id(memory_id: str, scope_key: str, *, field: str = "memory_id") -> str:
    """A chosen memory id in the namespace of one scope: `{memory_id}-{tag}`.

    The tag is the first hex digits of the SHA-256 of the scope key, so the same scope gets the
    same id in every process, and two scopes never share one: a caller confined to a scope can
    neither collide with nor squat another scope's chosen ids. An id that already carries the
    scope's tag (the name a create returned) is its own namespaced form.

    Raises:
        InvalidArgument: `memory_id` breaks the memory-id rule, or is too long to carry the tag.
    """
    validate_memory_id(memory_id, field=field)
    tag = hashlib.sha256(f"memory-id-namespace:{scope_key}".encode()).hexdigest()
    suffix = f"-{tag[:SCOPE_TAG_LENGTH]}"
    if memory_id.endswith(suffix):
        return memory_id
    longest = 63 - len(suffix)
    if len(memory_id) > longest:
        raise InvalidArgument(
            f"{field} has {len(memory_id)} characters; a key bound to a scope gets its chosen "
            f"ids namespaced by the scope ('{{id}}{suffix}'), so at most {longest} are allowed.",
            field=field,
        )
    return memory_id + suffix


def new_memory_id() -> str:
    """A generated memory id (letter first, 20 chars)."""
    return "m" + secrets.token_hex(10)[:19]


def new_bank_id() -> str:
    """A generated numeric bank id, like Agent Platform's reasoning-engine ids."""
    return str(1_000_000_000_000_000_000 + secrets.randbelow(8_999_999_999_999_999_999))


@dataclass(frozen=True, slots=True)
class Names:
    """Formats and parses resource names under one project and location."""

    project: str = "local"
    location: str = "local"

    def bank(self, bank_id: str) -> str:
        """The full bank name."""
        return _BANK_FORMAT.format(project=self.project, location=self.location, bank=bank_id)

    def memory(self, bank_id: str, memory_id: str) -> str:
        """The full memory name."""
        return f"{self.bank(bank_id)}/memories/{memory_id}"

    def revision(self, bank_id: str, memory_id: str, revision_id: str) -> str:
        """The full revision name."""
        return f"{self.memory(bank_id, memory_id)}/revisions/{revision_id}"

    def operation(self, bank_id: str, operation_path: str) -> str:
        """The full operation name from its path relative to the bank."""
        return f"{self.bank(bank_id)}/{operation_path}"

    @staticmethod
    def parse_bank(name: str, *, field: str = "name") -> str:
        """The bank id of a bank name."""
        return _parse(name, field, ("bank",))[0]

    @staticmethod
    def parse_bank_id(id_or_name: str, *, field: str = "name") -> str:
        """The bank id of a bank id (`my-bank`) or bank name (`…/reasoningEngines/my-bank`)."""
        name = id_or_name if "/" in id_or_name else f"reasoningEngines/{id_or_name}"
        return _parse(name, field, ("bank",))[0]

    @staticmethod
    def parse_memory(name: str, *, field: str = "name") -> tuple[str, str]:
        """(bank id, memory id) of a memory name."""
        bank_id, memory_id = _parse(name, field, ("bank", "memories"))
        return bank_id, memory_id

    @staticmethod
    def parse_revision(name: str, *, field: str = "name") -> tuple[str, str, str]:
        """(bank id, memory id, revision id) of a revision name."""
        bank_id, memory_id, revision_id = _parse(name, field, ("bank", "memories", "revisions"))
        return bank_id, memory_id, revision_id

    @staticmethod
    def parse_operation(name: str, *, field: str = "name") -> tuple[str, str]:
        """(bank id, operation path relative to the bank) of an operation name."""
        rest = _strip_prefix(name, field)
        bank_id, _, path = rest.partition("/")
        _check_bank_id(bank_id, name, field)
        segments = path.split("/")
        shapes = (["operations", "*"], ["memories", "*", "operations", "*"])
        if not any(_shape_matches(segments, shape) for shape in shapes):
            raise _bad_name(name, field, "…/reasoningEngines/{bank}[/memories/{m}]/operations/{id}")
        if not _OPERATION_ID_PATTERN.fullmatch(segments[-1]):
            raise _bad_name(name, field, "an operation id of letters, digits, '-' and '_'")
        return bank_id, path


def _shape_matches(segments: list[str], shape: list[str]) -> bool:
    return len(segments) == len(shape) and all(
        want == "*" or want == got for got, want in zip(segments, shape, strict=True)
    )


def _strip_prefix(name: str, field: str) -> str:
    if not isinstance(name, str) or not _PREFIX.match(name):
        raise _bad_name(str(name)[:80], field, _BANK_FORMAT)
    return _PREFIX.sub("", name, count=1)


def _check_bank_id(bank_id: str, name: str, field: str) -> None:
    if not _BANK_ID_PATTERN.fullmatch(bank_id):
        raise _bad_name(name, field, "a bank id that is numeric or [a-z0-9-]")


def _parse(name: str, field: str, kinds: tuple[str, ...]) -> list[str]:
    segments = _strip_prefix(name, field).split("/")
    expected = "/".join(
        ["…/reasoningEngines/{bank}"]
        + [f"{kind}/{{{kind[:-1] if kind.endswith('s') else kind}}}" for kind in kinds[1:]]
    )
    if len(segments) != 2 * len(kinds) - 1:
        raise _bad_name(name, field, expected)
    ids = [segments[0]]
    for index, kind in enumerate(kinds[1:]):
        collection, value = segments[1 + 2 * index], segments[2 + 2 * index]
        if collection != kind:
            raise _bad_name(name, field, expected)
        ids.append(value)
    _check_bank_id(ids[0], name, field)
    if len(ids) > 1 and not _NAMED_MEMORY_ID_PATTERN.fullmatch(ids[1]):
        raise _bad_name(
            name,
            field,
            "a memory id of 1-63 lowercase letters, digits and '-' (or Memory Bank's numeric ids)",
        )
    if len(ids) > 2 and not _REVISION_ID_PATTERN.fullmatch(ids[2]):
        raise _bad_name(name, field, expected)
    return ids


def _bad_name(name: str, field: str, expected: str) -> InvalidArgument:
    return InvalidArgument(
        f"{field} {name[:120]!r} is not a valid resource name; expected {expected} "
        "(the projects/…/locations/… prefix may be omitted).",
        field=field,
    )
