"""README claims that no other test exercised (the audit of 2026-12-02): command-line options,
conversation file forms, the worker, the quickstart's clean-up, the default store, `/docs`,
the failed-generation back-off and the ADK signatures the README prints."""

from __future__ import annotations

import inspect
import json
import logging
import re
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from readme_blocks import ROOT
from typer.testing import CliRunner

from adk_memory import AsyncClient, Client
from adk_memory.adk import MemoryBankPlugin, MemoryBankService
from adk_memory.adk._options import ServiceOptions
from adk_memory.cli import app
from adk_memory.errors import ModelUnavailable
from adk_memory.server import ApiKey, ApiKeys, create_app
from adk_memory.testing.models import ScriptedMemoryModel

README = (ROOT / "README.md").read_text(encoding="utf-8")
BANK = "reasoningEngines/claims"


def cli(*args: str, code: int = 0) -> str:
    """One command in-process; its stdout (stderr when it fails), the exit code checked."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == code, result.output
    return result.stdout if code == 0 else result.stderr


@pytest.fixture
def uri(hash_embeddings: None) -> str:
    """A `memory://` store every command of the test shares, holding bank `claims`."""
    shared = f"memory://claims-{uuid.uuid4().hex[:8]}"
    cli("banks", "create", "--id", "claims", "--uri", shared)
    return shared


def _create(uri: str, *facts: str, user: str = "u1") -> None:
    with Client(uri) as client:
        for fact in facts:
            client.memory_banks.memories.create(name=BANK, fact=fact, scope={"user_id": user})


# The command line


def test_memories_list_prints_100_unless_limit_says_otherwise(uri: str) -> None:
    _create(uri, *(f"fact {i}" for i in range(103)))

    def listed(*limit: str) -> int:
        return len(
            json.loads(cli("memories", "list", "-b", "claims", "--uri", uri, "--json", *limit))
        )

    assert (listed(), listed("--limit", "5"), listed("--limit", "0")) == (100, 5, 103)


def test_verbose_before_the_command_logs_to_stderr(
    clean_env: dict[str, str], tmp_path: Path, hash_embeddings: None
) -> None:
    """Subprocesses: `-v` installs a log handler for the rest of the process (the bank they
    export is made in-process, which is not what this test is about)."""
    clean_env["ADK_MEMORY_URI"] = f"chroma://{tmp_path}/db"
    script = str(Path(sys.executable).parent / "adk-memory")
    cli("banks", "create", "--id", "b", "--uri", clean_env["ADK_MEMORY_URI"])
    export = ["export", "-b", "b", "-o", str(tmp_path / "b.jsonl")]
    runs = [
        subprocess.run([script, *flag, *export], env=clean_env, capture_output=True, text=True)
        for flag in ([], ["-v"])
    ]
    logged = "INFO     Exported bank b: 0 memories, 0 revisions, 0 documents"
    assert [logged in run.stderr for run in runs] == [False, True]
    assert runs[0].stderr in runs[1].stderr and runs[0].stdout == runs[1].stdout == ""


def test_banks_create_takes_a_model_and_a_config_inline_or_from_a_file(
    uri: str, tmp_path: Path
) -> None:
    config = {"ttl_config": {"default_ttl": "3600s"}}
    (tmp_path / "bank.json").write_text(json.dumps(config))
    cli("banks", "create", "--id", "inline", "--config", json.dumps(config), "--uri", uri)
    cli("banks", "create", "--id", "file", "--config", f"@{tmp_path}/bank.json", "--uri", uri)
    cli("banks", "create", "--id", "model", "--embedding-model", "hash-8", "--uri", uri)
    with Client(uri) as client:
        banks = {
            b: client.memory_banks.get(name=f"reasoningEngines/{b}").managed_semantic_memory_config
            for b in ("inline", "file", "model")
        }
    assert banks["inline"].ttl_config.default_ttl == banks["file"].ttl_config.default_ttl
    assert banks["file"].ttl_config.default_ttl in ("3600s", timedelta(hours=1))
    assert banks["model"].similarity_search_config.embedding_model == "hash-8"


def test_memories_purge_counts_or_deletes_what_a_filter_selects(uri: str) -> None:
    _create(uri, "I like tea.", "I like coffee.")
    purge = ["memories", "purge", "-b", "claims", "-f", 'fact:"tea"', "--uri", uri, "--json"]
    assert json.loads(cli(*purge))["purgeCount"] == 1
    assert json.loads(cli(*purge, "--force"))["purgeCount"] == 1
    left = json.loads(cli("memories", "list", "-b", "claims", "--uri", uri, "--json"))
    assert [m["fact"] for m in left] == ["I like coffee."]


SAID = "I play the cello."
EVENT = {"content": {"role": "user", "parts": [{"text": SAID}]}}
CONVERSATIONS = {
    "a list": [{"role": "user", "text": SAID}],
    '{"events": [...]}': {"events": [EVENT]},
    "a request's direct_contents_source": {"direct_contents_source": {"events": [EVENT]}},
    "a Content": {"role": "user", "parts": [{"text": SAID}]},
}


@pytest.mark.parametrize("form", CONVERSATIONS)
def test_generate_reads_each_documented_conversation_form(
    uri: str, tmp_path: Path, form: str
) -> None:
    path = tmp_path / "conversation.json"
    path.write_text(json.dumps(CONVERSATIONS[form]))
    generate = ["generate", str(path), "-b", "claims", "-s", "user_id=u1", "--uri", uri]
    operation = json.loads(cli(*generate, "--model", "echo-memory-model", "--json"))
    [made] = operation["response"]["generatedMemories"]
    assert made["memory"]["fact"] == SAID


def test_an_export_without_vectors_is_re_embedded_on_import(uri: str, tmp_path: Path) -> None:
    _create(uri, "I like tea.")
    out = tmp_path / "bank.jsonl"
    cli("export", "-b", "claims", "-o", str(out), "--no-vectors", "--uri", uri)
    assert all("vector" not in json.loads(line).get("memory", {}) for line in out.open())
    target = f"memory://claims-target-{uuid.uuid4().hex[:8]}"
    cli("import", str(out), "--bank", "copy", "--uri", target)
    with Client(target) as client:
        [hit] = client.memory_banks.memories.retrieve(
            name="reasoningEngines/copy",
            scope={"user_id": "u1"},
            similarity_search_params={"search_query": "I like tea.", "top_k": 1},
        )
    assert hit.memory.fact == "I like tea." and hit.distance == pytest.approx(0, abs=1e-6)


def test_the_worker_flushes_streams_that_came_due(uri: str) -> None:
    """What a deployment's `adk-memory worker` is for: streams no client is left to flush.

    The clients here run no scheduler of their own, which would flush the stream as soon as it
    is due (a slow machine can make a client outlive the 1 s).
    """
    with Client(uri, run_scheduler=False) as client:
        client.memory_banks.create(
            memory_bank_id="worker",
            managed_semantic_memory_config={"generation_config": {"model": "echo-memory-model"}},
        )
        client.memory_banks.ingest_events(
            name="reasoningEngines/worker",
            scope={"user_id": "u1"},
            direct_contents_source={"events": [EVENT]},
            generation_trigger_config={"generation_rule": {"idle_duration": "1s"}},
        )
    time.sleep(1.2)
    with Client(uri, run_scheduler=False) as client:
        assert list(client.memory_banks.memories.list(name="reasoningEngines/worker")) == []
    flushed = CliRunner().invoke(app, ["worker", "--once", "--uri", uri])
    assert flushed.exit_code == 0, flushed.output
    assert flushed.stdout == "Flushed due streams: 1 memories changed.\n"
    with Client(uri, run_scheduler=False) as client:
        memories = client.memory_banks.memories.list(name="reasoningEngines/worker")
        assert [m.fact for m in memories] == [SAID]


@pytest.mark.parametrize("keep", [False, True])
def test_the_quickstart_deletes_its_bank_unless_kept(hash_embeddings: None, keep: bool) -> None:
    uri = f"memory://quickstart-{uuid.uuid4().hex[:8]}"
    cli("quickstart", "--uri", uri, *(["--keep"] if keep else []))
    with Client(uri) as client:
        banks = [b.display_name for b in client.memory_banks.list()]
    assert banks == (["quickstart"] if keep else [])


_CLIENT_THEN_COMMAND = """
import sys
from adk_memory import Client
from adk_memory.cli import app

with Client() as client:
    client.memory_banks.create(memory_bank_id="py")
sys.argv = ["adk-memory", "banks", "create", "--id", "cli"]
sys.exit(app())
"""


def test_without_a_uri_the_store_is_embedded_chroma_in_the_home_folder(
    clean_env: dict[str, str], tmp_path: Path
) -> None:
    """`ADK_MEMORY_URI` when set, else `~/.adk-memory`; the same for commands and `Client()`.

    One new process per environment (the home folder is read at import) runs `Client()` and
    then the command line as the `adk-memory` script does."""
    for home in ("home", "other"):
        env = {**clean_env, "HOME": str(tmp_path / home)}
        if home == "other":
            env["ADK_MEMORY_URI"] = f"chroma://{tmp_path}/named"
        made = subprocess.run(
            [sys.executable, "-c", _CLIENT_THEN_COMMAND], env=env, capture_output=True, text=True
        )
        assert made.returncode == 0, made.stderr
    with Client(f"chroma://{tmp_path}/home/.adk-memory") as client:
        assert sorted(b.name.rsplit("/", 1)[1] for b in client.memory_banks.list()) == ["cli", "py"]
    assert not (tmp_path / "other" / ".adk-memory").exists()
    with Client(f"chroma://{tmp_path}/named") as client:
        assert len(list(client.memory_banks.list())) == 2


async def test_the_server_describes_itself_at_openapi_json_and_docs() -> None:
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            docs = await http.get("/docs")
            described = await http.get("/openapi.json")
    assert docs.status_code == 200 and "/openapi.json" in docs.text
    assert described.json()["info"]["title"]


async def test_the_server_logs_method_route_status_and_key_name_only(
    caplog: pytest.LogCaptureFixture,
) -> None:
    secret = "SECRET-KEY-0123456789abcdef"
    keys = ApiKeys(keys=[ApiKey(name="support-agent", key=secret, permissions=["*"])])
    headers = {"x-goog-api-key": secret}
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="logged")
        transport = httpx.ASGITransport(app=create_app(client, api_keys=keys))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            with caplog.at_level(logging.INFO, logger="adk_memory.server"):
                url = "/v1beta1/reasoningEngines/logged/memories"
                body = {"fact": "SECRET-FACT", "scope": {"user_id": "SECRET-SCOPE"}}
                made = await http.post(url, json=body, headers=headers)
                listed = await http.get(
                    url, params={"filter": 'fact:"SECRET-FILTER"'}, headers=headers
                )
    assert made.status_code == listed.status_code == 200
    lines = [r.getMessage() for r in caplog.records if r.name == "adk_memory.server.app"]
    assert len(lines) == 2
    assert lines[0].startswith("POST ") and " -> 200 " in lines[0]
    assert lines[1].startswith("GET ") and "(key support-agent)" in lines[1]
    assert not any(
        s in caplog.text for s in ("SECRET-KEY", "SECRET-FACT", "SECRET-SCOPE", "SECRET-FILTER")
    )


def _documented_commands() -> list[tuple[list[str], list[str]]]:
    """(command words, options) of each usage in the README's command table."""
    table = README.split("| command | what it does |", 1)[1].split("\n\n", 1)[0]
    usages = [
        usage
        for row in table.splitlines()[2:]
        for usage in re.findall(r"`([a-z][^`]*)`", row.split(" | ")[0])
    ]
    commands = []
    for usage in usages:
        words = usage.split()
        command = [w for w in words[:2] if re.fullmatch(r"[a-z][a-z-]*", w)]
        if command[0] not in ("banks", "memories", "revisions", "reembed", "streams"):
            command = command[:1]
        commands.append((command, re.findall(r"(?<![\w-])--?[a-z][a-z-]*", usage)))
    return commands


@pytest.mark.parametrize(
    ("command", "options"), _documented_commands(), ids=lambda v: " ".join(v) if v else "-"
)
def test_each_documented_command_takes_the_options_the_table_shows(
    command: list[str], options: list[str]
) -> None:
    shown = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    for option in [*options, "--uri"]:
        assert re.search(rf"(?<![\w-]){option}(?![\w-])", shown.stdout), (command, option)


async def test_a_request_body_may_hold_10_mib_and_not_a_byte_more() -> None:
    """At the limit the body is read (and answered on its merits); one byte more is 413."""
    limit = 10 * 1024 * 1024
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="big")
        transport = httpx.ASGITransport(app=create_app(client))
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            url = "/v1beta1/reasoningEngines/big/memories"
            statuses = []
            for size in (limit, limit + 1):
                body = b'{"fact": "' + b"x" * (size - 12) + b'"}'
                assert len(body) == size
                response = await http.post(
                    url, content=body, headers={"content-type": "application/json"}
                )
                statuses.append(response.status_code)
    assert statuses == [400, 413]  # a fact of 10 MiB is over its own limit: a 400, not a 413


# Failed generation


async def test_a_failed_generation_is_retried_after_2_s_doubling_to_5_minutes(
    hash_embeddings: None,
) -> None:
    def fail(request: Any) -> Any:
        raise RuntimeError("the model is down")

    model = ScriptedMemoryModel(extract=fail)
    async with AsyncClient("memory://", generation_model=model) as client:
        bank = (await client.memory_banks.create(memory_bank_id="backoff")).name
        now = datetime(2026, 12, 2, tzinfo=UTC)
        client.engine.context.clock = lambda: now
        await client.memory_banks.ingest_events(
            name=bank,
            scope={"user_id": "u1"},
            direct_contents_source={"events": [EVENT]},
            generation_trigger_config={"generation_rule": {"event_count": 2}},
        )
        [stream] = await client.engine.ingest.streams("backoff")
        delays = []
        for _ in range(10):
            with pytest.raises(ModelUnavailable):
                await client.engine.ingest.flush(
                    "backoff", stream.key, now_or_never=True, raise_failure=True
                )
            [stream] = await client.engine.ingest.streams("backoff")
            assert stream.retry_after is not None
            delays.append((datetime.fromisoformat(stream.retry_after) - now).total_seconds())
    assert delays == [2, 4, 8, 16, 32, 64, 128, 256, 300, 300]
    assert stream.pending_events == 1 and stream.failures == 10


# The ADK signatures the README prints


def _documented_signature(call: str) -> dict[str, str]:
    """`name -> default` of a signature the README prints as `call(…)` (no default: "")."""
    found = re.search(rf"`{call}\((.*?)\)`", README, re.S)
    assert found, call
    params: dict[str, str] = {}
    for part in found.group(1).replace("\n", " ").split(","):
        name, _, default = part.strip().partition("=")
        if name not in ("*", "") and not name.startswith("**"):
            params[name] = default
    return params


@pytest.mark.parametrize(
    ("call", "target", "effective"),
    [
        ("MemoryBankService", MemoryBankService, ServiceOptions),
        ("MemoryBankPlugin", MemoryBankPlugin, None),
    ],
)
def test_the_printed_signatures_match_the_code(
    call: str, target: Any, effective: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each documented parameter exists with the documented default: the signature's, or for
    the service's options given as None, the default they resolve to (without the test suite's
    ADK_MEMORY_SEARCH_TIMEOUT)."""
    monkeypatch.delenv("ADK_MEMORY_SEARCH_TIMEOUT", raising=False)
    effective = effective() if effective is not None else None
    actual = inspect.signature(target).parameters
    for name, default in _documented_signature(call).items():
        assert name in actual, name
        value = actual[name].default
        documented = eval(default) if default else inspect.Parameter.empty  # noqa: S307
        if value is None and documented is not None:  # an option that can come from the URI
            value = getattr(effective, name)
        assert value == documented, (name, value, documented)
