"""The `adk-memory` command line: every command on memory:// and embedded Chroma, in-process
(typer's runner) and as a subprocess; errors are one line, never a traceback."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from adk_memory import Client
from adk_memory.cli import app

BANK = "ops-bank"
ALICE = ["--scope", "user_id=alice"]


def cli(uri: str, *args: str, code: int = 0) -> str:
    """Runs one command in-process; returns stdout (asserting the exit code)."""
    result = CliRunner().invoke(app, [*args, "--uri", uri])
    assert result.exit_code == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stdout + result.stderr
    return result.stdout if code == 0 else result.stderr


def cli_json(uri: str, *args: str) -> Any:
    return json.loads(cli(uri, *args, "--json"))


def test_retrieve_without_a_query_prints_every_page(cli_uri: str, hash_embeddings: None) -> None:
    """105 memories in a scope: the command prints all of them, not the first page of 100."""
    cli(cli_uri, "banks", "create", "--id", BANK)
    with Client(cli_uri) as client:
        for i in range(105):
            client.memory_banks.memories.create(
                name=f"reasoningEngines/{BANK}", fact=f"fact {i}", scope={"user_id": "alice"}
            )
    hits = cli_json(cli_uri, "memories", "retrieve", "-b", BANK, *ALICE)
    assert sorted(hit["memory"]["fact"] for hit in hits) == sorted(f"fact {i}" for i in range(105))


def test_every_command_on_a_store(cli_uri: str, hash_embeddings: None, tmp_path: Path) -> None:
    created = cli_json(cli_uri, "banks", "create", "--id", BANK, "--display-name", "Ops")
    assert created["name"].endswith(f"reasoningEngines/{BANK}")
    assert [bank["displayName"] for bank in cli_json(cli_uri, "banks", "list")] == ["Ops"]
    assert "hash-64" in cli(cli_uri, "banks", "get", "--bank", BANK)

    tea = cli_json(
        cli_uri,
        "memories", "create", "I like green tea.", "--bank", BANK, *ALICE,
        "--id", "tea", "--topic", "USER_PREFERENCES", "--topic", "drinks",
        "--metadata", "source=cli",
    )  # fmt: skip
    assert tea["topics"] == [
        {"managedMemoryTopic": "USER_PREFERENCES"},
        {"customMemoryTopicLabel": "drinks"},
    ]
    assert tea["metadata"] == {"source": {"stringValue": "cli"}}
    cli(cli_uri, "memories", "create", "I live in Lisbon.", "-b", BANK, *ALICE, "--id", "home")
    cli(
        cli_uri,
        "memories", "create", "I like coffee.", "-b", BANK, "--scope", "user_id=bob",
        "--id", "coffee", "--ttl", "3600s",
    )  # fmt: skip

    listed = cli_json(cli_uri, "memories", "list", "--bank", BANK, *ALICE)
    assert sorted(m["name"].rsplit("/", 1)[1] for m in listed) == ["home", "tea"]
    teas = cli_json(cli_uri, "memories", "list", "-b", BANK, "-f", 'fact:"tea"')
    assert [m["fact"] for m in teas] == ["I like green tea."]
    table = cli(cli_uri, "memories", "list", "-b", BANK)
    assert "I like coffee." in table and "user_id=bob" in table and "USER_PREFERENCES" in table
    got = cli_json(cli_uri, "memories", "get", "tea", "--bank", BANK)
    assert got["fact"] == "I like green tea."
    assert "expireTime" in cli_json(cli_uri, "memories", "get", "coffee", "--bank", BANK)

    [hit] = cli_json(
        cli_uri, "memories", "retrieve", "-b", BANK, *ALICE, "-q", "green tea", "--top-k", "1"
    )
    assert hit["memory"]["fact"] == "I like green tea." and hit["distance"] >= 0
    everything = cli(cli_uri, "memories", "retrieve", "-b", BANK, *ALICE)
    assert "I live in Lisbon." in everything and "coffee" not in everything

    # A second revision, written through the API, then rolled back from the command line.
    with Client(cli_uri) as client:
        client.memory_banks.memories.update(
            name=f"reasoningEngines/{BANK}/memories/tea", fact="I like black tea."
        )
    revisions = cli_json(cli_uri, "revisions", "list", "tea", "--bank", BANK)
    assert [r["fact"] for r in revisions] == ["I like black tea.", "I like green tea."]
    first = revisions[-1]["name"].rsplit("/", 1)[1]
    assert "I like black tea." in cli(cli_uri, "revisions", "list", "tea", "-b", BANK)
    restored = cli_json(cli_uri, "rollback", "tea", first, "--bank", BANK)
    assert restored["fact"] == "I like green tea."

    conversation = tmp_path / "conversation.jsonl"
    conversation.write_text(
        json.dumps({"role": "user", "text": "I play the cello."})
        + "\n"
        + json.dumps({"content": {"role": "model", "parts": [{"text": "Nice!"}]}})
        + "\n"
    )
    operation = cli_json(
        cli_uri, "generate", str(conversation), "-b", BANK, *ALICE, "--model", "echo-memory-model"
    )
    [generated] = operation["response"]["generatedMemories"]
    assert generated["action"] == "CREATED" and generated["memory"]["fact"] == "I play the cello."
    assert operation["metadata"]["llmCalls"] == 2

    assert "Would delete 1 memories" in cli(
        cli_uri, "memories", "purge", "-b", BANK, "--scope", "user_id=bob"
    )
    assert cli_json(cli_uri, "memories", "purge", "-b", BANK, "-s", "user_id=bob", "--force") == {
        "purgeCount": 1,
        "force": True,
    }
    assert "Deleted memory home" in cli(cli_uri, "memories", "delete", "home", "--bank", BANK)
    assert "NOT_FOUND" in cli(cli_uri, "memories", "get", "home", "--bank", BANK, code=1)
    assert len(cli_json(cli_uri, "memories", "list", "-b", BANK)) == 2

    refused = cli(cli_uri, "banks", "delete", "--bank", BANK, code=1)
    assert refused.startswith("error: FAILED_PRECONDITION") and len(refused.splitlines()) == 1
    assert "Deleted bank" in cli(cli_uri, "banks", "delete", "--bank", BANK, "--force")
    assert cli_json(cli_uri, "banks", "list") == []


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["banks", "get", "--bank", "missing"], "error: NOT_FOUND: Memory bank"),
        (["memories", "list", "-b", "x", "-s", "no-equals"], "error: INVALID_ARGUMENT: --scope"),
        (["memories", "list", "-b", "missing", "-f", "fact = "], "error: INVALID_ARGUMENT"),
        (["memories", "retrieve", "-b", "missing"], "error: INVALID_ARGUMENT: --scope is required"),
        (["generate", "/nonexistent.jsonl", "-b", "x", "-s", "u=1"], "error: No such file"),
        (["import", "/nonexistent.jsonl"], "error: No such file"),
        (["reembed", "--bank", "missing", "--model", "hash-8"], "error: NOT_FOUND"),
    ],
)
def test_errors_print_one_line_and_exit_non_zero(args: list[str], expected: str) -> None:
    message = cli("memory://", *args, code=1)
    assert message.startswith(expected), message
    assert len(message.strip().splitlines()) == 1


def test_a_conversation_file_that_is_not_events_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"events": [{"author": "user"}]}))
    message = cli("memory://", "generate", str(bad), "-b", "x", "-s", "u=1", code=1)
    assert message.startswith("error: INVALID_ARGUMENT: event 1: an event needs `content`")


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).parent / "adk-memory"
    return subprocess.run(
        [str(script), *args], env=env, capture_output=True, text=True, timeout=120
    )


def test_commands_as_a_subprocess_on_chroma(clean_env: dict[str, str], tmp_path: Path) -> None:
    """The installed `adk-memory` script on embedded Chroma, as a user runs it: JSON and the
    export on a clean stdout, summaries and errors on stderr, one line, no traceback."""
    clean_env["ADK_MEMORY_URI"] = f"chroma://{tmp_path / 'db'}"
    assert run(clean_env, "banks", "create", "--id", "sub").stdout == "Created bank sub.\n"
    created = run(
        clean_env, "memories", "create", "I like tea.", "-b", "sub", "-s", "user_id=u1", "--json"
    )
    assert json.loads(created.stdout)["fact"] == "I like tea.", created.stderr
    exported = run(clean_env, "export", "-b", "sub")
    kinds = [json.loads(line)["kind"] for line in exported.stdout.splitlines()]
    assert kinds == ["export", "bank", "memory", "revision", "end"]
    assert exported.stderr == "Exported bank sub: 1 memories, 1 revisions, 0 ingest streams.\n"
    missing = run(clean_env, "memories", "get", "nope", "--bank", "sub")
    assert missing.returncode == 1 and missing.stdout == ""
    assert missing.stderr.startswith("error: NOT_FOUND: Memory")
    assert len(missing.stderr.splitlines()) == 1
