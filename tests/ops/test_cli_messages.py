"""Every error the command line prints is in the command line's terms (its flags and commands,
never Python calls), names the installed schemes for an unknown one, shows the cause of an
UNAVAILABLE, and counts import progress in memories. Each message is checked word for word."""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from adk_memory import Client
from adk_memory.cli import app
from adk_memory.errors import FailedPrecondition, InvalidArgument, NotFound
from adk_memory.server.wire import error_envelope
from adk_memory.wording import render

BANK = "msg-bank"


def failing(*args: str) -> str:
    """Runs one command that must fail; returns what it printed on stderr, unwrapped."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 1, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result.stderr


@pytest.fixture
def bank_with_a_memory(tmp_path: Path, hash_embeddings: None) -> str:
    uri = f"chroma://{tmp_path / 'store'}"
    with Client(uri) as client:
        client.memory_banks.create(memory_bank_id=BANK)
        client.memory_banks.memories.create(
            name=f"reasoningEngines/{BANK}", fact="I like tea.", scope={"user_id": "alice"}
        )
    return uri


def test_deleting_a_bank_that_holds_memories_names_the_flag(bank_with_a_memory: str) -> None:
    said = failing("banks", "delete", "-b", BANK, "--uri", bank_with_a_memory)
    assert said == (
        f"error: FAILED_PRECONDITION: Memory bank '{BANK}' still holds memories; delete them "
        "first or pass --force to delete the bank with its memories, revisions and vectors.\n"
    )


def test_a_purge_without_a_filter_names_the_flags_and_the_command(
    bank_with_a_memory: str,
) -> None:
    said = failing("memories", "purge", "-b", BANK, "--uri", bank_with_a_memory)
    assert said == (
        "error: INVALID_ARGUMENT: purge needs --filter or --scope; to empty a bank, delete it "
        "with adk-memory banks delete --force.\n"
    )


def test_a_missing_revision_points_at_the_revisions_command(bank_with_a_memory: str) -> None:
    with Client(bank_with_a_memory) as client:
        [memory] = client.memory_banks.memories.list(name=f"reasoningEngines/{BANK}")
    memory_id = memory.name.rsplit("/", 1)[1]
    said = failing("rollback", memory_id, "999", "-b", BANK, "--uri", bank_with_a_memory)
    assert said == (
        f"error: NOT_FOUND: Revision '999' of memory '{memory_id}' does not exist or has "
        "expired; list them with adk-memory revisions list.\n"
    )


def test_a_missing_bank_points_at_the_create_command(tmp_path: Path) -> None:
    said = failing("memories", "list", "-b", "nobank", "--uri", f"memory://{tmp_path.name}")
    assert said == (
        "error: NOT_FOUND: Memory bank 'projects/local/locations/local/reasoningEngines/nobank' "
        "does not exist; create it with adk-memory banks create or check the name.\n"
    )


def test_an_unknown_scheme_lists_the_installed_ones() -> None:
    said = failing("banks", "list", "--uri", "foo://bar")
    assert said == (
        "error: INVALID_ARGUMENT: No storage backend handles 'foo' URIs. Installed schemes: "
        "chroma://, chroma+http://, chroma+https://, memory://, redis://, redis+cluster://, "
        "rediss://, rediss+cluster://.\n"
    )


def test_an_unusable_directory_prints_the_cause(tmp_path: Path) -> None:
    # Root writes anywhere, so the directory is made unusable by a file standing in its path.
    (tmp_path / "a-file").write_text("not a directory")
    where = tmp_path / "a-file" / "store"
    said = failing("banks", "list", "--uri", f"chroma://{where}")
    assert said == (
        f"error: UNAVAILABLE: embedded Chroma at {where} failed to connect "
        "(NotADirectoryError). Check that the server is running or the directory is "
        f"writable.\n  cause: NotADirectoryError: [Errno 20] Not a directory: '{where}'\n"
    )


def test_generate_without_model_credentials_is_a_configuration_error(
    bank_with_a_memory: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_GENAI_USE_VERTEXAI"):
        monkeypatch.delenv(name, raising=False)
    conversation = tmp_path / "conversation.json"
    conversation.write_text(json.dumps({"role": "user", "parts": [{"text": "I love tea."}]}))
    said = failing(
        "generate", str(conversation), "-b", BANK, "-s", "user_id=alice",
        "--uri", bank_with_a_memory,
    )  # fmt: skip
    assert said == (
        "error: FAILED_PRECONDITION: The memory model refused the call for lack of credentials "
        "(ValueError); nothing was changed. Set GOOGLE_API_KEY, or GOOGLE_GENAI_USE_VERTEXAI=true "
        "with GOOGLE_CLOUD_PROJECT and GOOGLE_CLOUD_LOCATION, or choose another "
        "generation_config.model.\n"
    )


def test_import_progress_counts_memories(tmp_path: Path, hash_embeddings: None) -> None:
    uri = f"chroma://{tmp_path / 'store'}"
    with Client(uri) as client:
        client.memory_banks.create(memory_bank_id=BANK)
        for i in range(7):
            client.memory_banks.memories.create(
                name=f"reasoningEngines/{BANK}", fact=f"fact {i}", scope={"user_id": "alice"}
            )
    exported = tmp_path / "bank.jsonl"
    CliRunner().invoke(app, ["export", "-b", BANK, "--uri", uri, "-o", str(exported)])
    # The bar is drawn only on a terminal: stderr is a pseudo-terminal here.
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "adk_memory.cli", "import", str(exported)]
    command += ["-b", "copy", "--uri", f"chroma://{tmp_path / 'copy'}"]
    done = subprocess.run(
        command,
        stdout=subprocess.PIPE,
        stderr=follower,
        env={**os.environ, "COLUMNS": "100"},
        timeout=120,
    )
    os.close(follower)
    drawn = _read_all(leader)
    assert done.returncode == 0, drawn
    final = re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", drawn).splitlines()
    assert any(
        re.fullmatch(r"importing memories\s+━+\s+7/7\s+[0-9:]+\s*", line) for line in final
    ), final


def _read_all(descriptor: int) -> str:
    chunks = []
    while True:
        try:
            chunk = os.read(descriptor, 65536)
        except OSError:  # the follower side is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(descriptor)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r", "\n")


@pytest.mark.parametrize(
    ("error", "surface", "wording"),
    [
        (FailedPrecondition("pass [[option:force]]."), "python", "pass force=True."),
        (FailedPrecondition("pass [[option:force]]."), "cli", "pass --force."),
        (FailedPrecondition("pass [[option:force]]."), "rest", "pass force=true."),
        (FailedPrecondition("pass [[option:force]]."), "mcp", "pass force: true."),
        (
            NotFound("list them with [[call:memories.revisions.list]]."),
            "mcp",
            "list them with the list_revisions tool.",
        ),
        (
            InvalidArgument("purge needs [[option:filters]]."),
            "rest",
            'purge needs "filter" or "filterGroups".',
        ),
    ],
)
def test_each_surface_words_advice_its_own_way(
    error: FailedPrecondition, surface: str, wording: str
) -> None:
    assert render(error, surface) == wording  # type: ignore[arg-type]
    assert "[[" not in str(error)  # the message itself is the Python wording


def test_rest_envelopes_carry_the_rest_wording() -> None:
    envelope = error_envelope(FailedPrecondition("pass [[option:force]].", field="force"))
    assert envelope["error"]["message"] == "pass force=true."
    assert envelope["error"]["details"][0]["fieldViolations"][0]["description"] == (
        "pass force=true."
    )
