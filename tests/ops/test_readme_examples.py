"""Every fenced block of the READMEs is run by a test, as written, or named here with the reason
it cannot run on a test machine.

Only what a test machine needs is changed in a block before it runs: a store path becomes a
temporary folder, a server address a free loopback port, and placeholders (`...`, `<64 hex
digits>`) real values. Banks use the fast `hash-64` embedder unless the block names a model.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import re
import shlex
from collections.abc import Iterator
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.events import Event
from google.adk.memory.memory_entry import MemoryEntry
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService, Session
from google.genai import types as genai_types
from ops_support import RunningServer, start_server
from readme_blocks import READMES, ROOT, Block, block, blocks
from typer.testing import CliRunner

from adk_memory import AsyncClient, Client
from adk_memory.adk import MemoryServiceBuilder
from adk_memory.cli import app
from adk_memory.server import ApiKeys
from adk_memory.testing.agent_models import ScriptedAgentModel
from adk_memory.testing.models import ScriptedMemoryModel

# Blocks no test can run, with the reason; each is matched by a text only it contains.
NOT_RUN = {
    ("README.md", "./run quickstart"): "./run builds a venv from PyPI; `./run tests` is the "
    "suite itself (test_quickstart.py runs the quickstart's `adk-memory quickstart`)",
    ("README.md", "adk web --memory_service_uri"): "needs a Gemini key; the same URIs and "
    "folders are built by tests/adk/test_adk_registry.py, `adk api_server` by test_adk_on_time.py",
    ("backends/chroma/README.md", "pip install"): "installs from PyPI; the extras are checked "
    "by test_every_extra_the_readmes_install_exists",
    ("backends/redis/README.md", "pip install"): "installs from PyPI; the extras are checked "
    "by test_every_extra_the_readmes_install_exists",
}
# Blocks run by tests in other files (file, test).
ELSEWHERE = {
    ("README.md", "token_secret:"): "tests/mcp_tools/test_mcp_readme.py::"
    "test_the_readme_key_file_confines_each_user_over_rest",
    ("README.md", "def token_for"): "tests/mcp_tools/test_mcp_readme.py::"
    "test_the_readme_key_file_confines_each_user_over_rest",
    ("README.md", '"mcpServers"'): "tests/mcp_tools/test_mcp_readme.py::"
    "test_the_claude_desktop_configuration_serves_memories_on_stdio",
    ("README.md", "--scope app_name=ide --keys"): "tests/mcp_tools/test_mcp_readme.py::"
    "test_the_ide_configuration_reaches_only_the_users_memories",
    ("README.md", "--scope app_name=assistant --keys"): "tests/mcp_tools/test_mcp_readme.py::"
    "test_adks_mcp_toolset_from_the_readme_keeps_each_adk_user_in_their_scope",
    ("README.md", '"inputs"'): "tests/mcp_tools/test_mcp_readme.py::"
    "test_the_ide_configuration_reaches_only_the_users_memories",
    ("README.md", "McpToolset("): "tests/mcp_tools/test_mcp_readme.py::"
    "test_adks_mcp_toolset_from_the_readme_keeps_each_adk_user_in_their_scope",
    ("README.md", "# holds ~/.adk-memory"): "tests/ops/test_one_store_many_clients.py::"
    "test_one_server_on_the_default_folder_serves_every_client_at_once",
}
# Blocks run in this file: the text that identifies each, and its test.
HERE = {
    ("README.md", 'Client(uri="chroma:///var/lib/adk-memory")'): "test_use_it",
    ("README.md", "# before"): "test_porting_changes_two_lines",
    ("README.md", '"embedding_model": "multilingual-e5-small"'): "test_multilingual_bank",
    ("README.md", "redis+cluster://:secret@node-a"): "test_every_readme_uri_parses",
    ("README.md", "consolidations=[{"): "test_scripted_memory_model",
    ("README.md", "def extract(request)"): "test_scripted_memory_model_by_functions",
    ("README.md", "adk-memory serve --uri"): "test_serve_commands",
    ("README.md", "name: support-agent"): "test_the_key_file_loads_and_grants_what_it_says",
    ("README.md", "# or API-key mode"): "test_the_official_sdk_against_the_server",
    ("README.md", "SelfHostedVertexMemoryBankService("): "test_adks_vertex_service_self_hosted",
    ("README.md", "class MyService"): "test_adks_vertex_service_by_hand",
    ("README.md", "MemoryBankPlugin()])"): "test_use_with_adk",
    ("README.md", "AdkApp("): "test_agent_runtime_builder",
    ("README.md", "adk-memory banks create --id support"): "test_the_command_line_examples",
    ("README.md", "adk-memory export -b support"): "test_export_then_import",
    ("backends/chroma/README.md", "Client(uri="): "test_chroma_uris",
    ("backends/redis/README.md", "rediss://default:secret"): "test_every_readme_uri_parses",
}


def _owner(found: Block) -> list[str]:
    return [
        f"{where}: {owner}"
        for where, table in (("not run", NOT_RUN), ("elsewhere", ELSEWHERE), ("here", HERE))
        for (readme, text), owner in table.items()
        if readme == found.readme and text in found.text
    ]


def test_every_readme_block_is_run_or_says_why_not() -> None:
    unowned, shared = [], []
    for readme in READMES:
        for found in blocks(readme):
            owners = _owner(found)
            if not owners:
                unowned.append(f"{readme}: {found.text[:60]!r}")
            if len(owners) > 1:
                shared.append(f"{readme}: {found.text[:60]!r} -> {owners}")
    assert not unowned, "README blocks no test runs (add one, or a reason to NOT_RUN)"
    assert not shared
    for (readme, text), owner in ELSEWHERE.items():
        path, name = owner.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), owner
        block(readme, text)
    module = (ROOT / "tests/ops/test_readme_examples.py").read_text()
    for (readme, text), name in HERE.items():
        assert f"def {name}(" in module, name
        block(readme, text)


@pytest.fixture
def fast_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Banks created without a model use `hash-64`; no Google credential is in reach."""
    monkeypatch.setenv("ADK_MEMORY_EMBEDDING_MODEL", "hash-64")
    for name in ("GOOGLE_API_KEY", "GEMINI_API_KEY", "GOOGLE_APPLICATION_CREDENTIALS"):
        monkeypatch.delenv(name, raising=False)


def run_block(code: str, namespace: dict[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """Executes a Python block; returns its namespace and what it printed."""
    scope: dict[str, Any] = dict(namespace or {})
    printed = io.StringIO()
    with redirect_stdout(printed):
        exec(compile(code, "<README block>", "exec"), scope)
    return scope, printed.getvalue()


def readme_python(containing: str, *replacements: tuple[str, str]) -> str:
    """A README Python block with `replacements` applied (each must occur in it)."""
    code = block("README.md", containing).text
    for old, new in replacements:
        assert old in code, old
        code = code.replace(old, new)
    return code


def test_use_it(tmp_path: Path, fast_models: None) -> None:
    code = readme_python(
        'Client(uri="chroma:///var/lib/adk-memory")',
        ("chroma:///var/lib/adk-memory", f"chroma://{tmp_path}"),
    )
    scope, printed = run_block(code)
    fact, distance = printed.strip().rsplit(" ", 1)
    assert fact == "I like blue." and float(distance) >= 0
    scope["client"].close()


def test_porting_changes_two_lines(tmp_path: Path, fast_models: None) -> None:
    """The right-hand column of the porting block is code that runs."""
    lines = block("README.md", "# before").text.splitlines()
    column = lines[0].index("# after")
    after = "\n".join(line[column:] for line in lines[1:])
    after = after.replace("chroma:///data/memories", f"chroma://{tmp_path}")
    scope, _ = run_block(after)
    client = scope["client"]
    bank = client.memory_banks.create()
    made = client.memory_banks.memories.create(
        name=bank.name, fact="I like blue.", scope={"user_id": "1"}
    )
    assert isinstance(made.response, scope["types"].Memory) and made.response.fact == "I like blue."
    client.close()


def test_multilingual_bank(fast_models: None) -> None:
    with Client("memory://") as client:
        scope, _ = run_block(readme_python('"multilingual-e5-small"'), {"client": client})
        got = client.memory_banks.get(name=scope["bank"].name)
    config = got.managed_semantic_memory_config.similarity_search_config
    assert config.embedding_model == "multilingual-e5-small"


def _generate(client: Client, text: str, user: str) -> list[str]:
    bank = client.memory_banks.create()
    client.memory_banks.memories.generate(
        name=bank.name,
        scope={"user_id": user},
        direct_contents_source={
            "events": [{"content": {"role": "user", "parts": [{"text": text}]}}]
        },
    )
    return [m.fact for m in client.memory_banks.memories.list(name=bank.name)]


def test_scripted_memory_model(fast_models: None) -> None:
    scope, _ = run_block(readme_python("consolidations=[{"))
    with scope["client"] as client:
        assert _generate(client, "I drink tea every morning.", "1") == ["I like tea."]
    assert [scope["model"].kind_of(r) for r in scope["model"].requests] == [
        "extraction",
        "consolidation",
    ]


def test_scripted_memory_model_by_functions(fast_models: None) -> None:
    """`[...]` stands for any consolidation script: here one per user who mentions tea."""
    create = {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I like tea."}]}
    code = readme_python(
        "def extract(request)", ("consolidations=[...]", "consolidations=[CREATE]")
    )
    scope, _ = run_block(code, {"ScriptedMemoryModel": ScriptedMemoryModel, "CREATE": create})
    with Client("memory://", generation_model=scope["model"]) as client:
        assert _generate(client, "Coffee, never tea? No: tea.", "tea-drinker") == ["I like tea."]
        assert _generate(client, "I like coffee.", "coffee-drinker") == []


async def test_every_readme_uri_parses() -> None:
    """Each URI line of the Redis Cluster block and the Redis README makes a store (no I/O)."""
    from adk_memory_redis import RedisMemoryStore
    from adk_memory_redis._config import cluster_nodes

    uris = [
        line.split("#")[0].strip()
        for text in (
            block("README.md", "redis+cluster://:secret@node-a").text,
            block("backends/redis/README.md", "rediss://default:secret").text,
        )
        for line in text.splitlines()
        if "[" not in line  # the grammar lines, not URIs
    ]
    assert len(uris) == 3
    stores = [RedisMemoryStore.from_uri(uri) for uri in uris]
    assert stores[0].config.key_prefix == "prod"
    assert cluster_nodes(uris[0]) == [("node-a", 6379), ("node-b", 6379), ("node-c", 6379)]
    assert [store.config.ssl_ca_certs for store in stores[1:]] == ["/etc/ssl/ca.pem"] * 2
    for store in stores:
        await store.aclose()


def test_serve_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`serve` with the first line's options binds 127.0.0.1:8080 without keys; the second
    line's keys file is read and its host and port are used."""
    import uvicorn

    ran: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app_, **options: ran.append(options))
    keys = tmp_path / "keys.yaml"
    keys.write_text(_key_file())
    commands = [
        shlex.split(line.split("#")[0])
        for line in block("README.md", "adk-memory serve --uri").text.splitlines()
    ]
    for words in commands:
        assert words[:2] == ["adk-memory", "serve"]
        args = [str(keys) if w == "keys.yaml" else w for w in words[2:]]
        args = [f"chroma://{tmp_path}/db" if w.startswith("chroma://") else w for w in args]
        args = ["memory://" if w.startswith("redis://") else w for w in args]
        result = CliRunner().invoke(app, ["serve", *args])
        assert result.exit_code == 0, result.output
    assert [(o["host"], o["port"]) for o in ran] == [("127.0.0.1", 8080), ("0.0.0.0", 8080)]


def _key_file() -> str:
    """The README's key file with its placeholder hash filled in (the admin's secret is `admin`)."""
    text = block("README.md", "name: support-agent").text
    return text.replace("<64 hex digits>", hashlib.sha256(b"admin").hexdigest())


def test_the_key_file_loads_and_grants_what_it_says(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(_key_file())
    keys = {key.name: key for key in ApiKeys.from_file(path).keys}
    assert set(keys) == {"support-agent", "admin"}
    assert keys["support-agent"].banks == {"1234567890"}
    assert keys["admin"].key_sha256 == hashlib.sha256(b"admin").hexdigest()


@pytest.fixture
def keyed_readme_server(tmp_path: Path) -> Iterator[tuple[RunningServer, ScriptedMemoryModel]]:
    """A server with the README's key file and bank 1234567890, generating with a script."""
    path = tmp_path / "keys.yaml"
    path.write_text(_key_file())
    model = ScriptedMemoryModel()
    client = AsyncClient("memory://", embedding_model="hash-64", generation_model=model)
    for running in start_server(client, api_keys=ApiKeys.from_file(path)):
        running.run(client.memory_banks.create(memory_bank_id="1234567890"))
        yield running, model


@pytest.fixture
def open_readme_server() -> Iterator[RunningServer]:
    """`adk-memory serve` without keys."""
    client = AsyncClient("memory://", embedding_model="hash-64")
    yield from start_server(client)


def test_the_official_sdk_against_the_server(open_readme_server: RunningServer) -> None:
    code = readme_python("# or API-key mode", ("http://127.0.0.1:8080", open_readme_server.url))
    scope, _ = run_block(code, {"KEY": "any-token"})
    listed = list(scope["client"].memory_banks.memories.list(name=scope["bank"].name))
    assert [m.fact for m in listed] == ["I like blue."]


def _session(text: str) -> Session:
    said = genai_types.Content(role="user", parts=[genai_types.Part(text=text)])
    return Session(
        id="s1",
        app_name="app",
        user_id="u1",
        events=[Event(author="user", invocation_id="i1", content=said)],
    )


async def _search_until(service: Any, query: str) -> list[str]:
    """ADK's search_memory until the ingested session's memory is there."""
    for _ in range(100):
        found = await service.search_memory(app_name="app", user_id="u1", query=query)
        if found.memories:
            return [m.content.parts[0].text for m in found.memories]
        await asyncio.sleep(0.1)
    return []


async def test_adks_vertex_service_self_hosted(
    keyed_readme_server: tuple[RunningServer, ScriptedMemoryModel],
) -> None:
    """The README's key (`support-agent`: generate and retrieve on bank 1234567890) is all ADK
    needs to store a session and search it."""
    server, model = keyed_readme_server
    model.extractions.append(
        {"memories": [{"fact": "I fly often.", "topics": ["USER_PERSONAL_INFO"]}]}
    )
    model.consolidations.append(
        {"actions": [{"fact_index": 0, "action": "CREATE", "fact": "I fly often."}]}
    )
    root = LlmAgent(name="assistant", model=ScriptedAgentModel(), instruction="Help.")
    code = readme_python(
        "SelfHostedVertexMemoryBankService(",
        ("http://127.0.0.1:8080", server.url),
        ("session_service=...", "session_service=InMemorySessionService()"),
    )
    scope, _ = run_block(
        code,
        {"Runner": Runner, "agent": root, "InMemorySessionService": InMemorySessionService},
    )
    service = scope["memory_service"]
    assert scope["runner"].memory_service is service
    await service.add_session_to_memory(_session("I take a plane every week."))
    assert await _search_until(service, "travel") == ["I fly often."]


async def test_adks_vertex_service_by_hand(
    keyed_readme_server: tuple[RunningServer, ScriptedMemoryModel],
) -> None:
    import agentplatform
    from google.adk.memory import VertexAiMemoryBankService
    from google.oauth2.credentials import Credentials

    server, _ = keyed_readme_server
    server.run(
        server.client.memory_banks.memories.create(
            name="reasoningEngines/1234567890",
            fact="I like blue.",
            scope={"app_name": "app", "user_id": "u1"},
        )
    )
    code = readme_python("class MyService", ("http://127.0.0.1:8080", server.url))
    names = {"VertexAiMemoryBankService": VertexAiMemoryBankService, "agentplatform": agentplatform}
    names |= {"Credentials": Credentials, "KEY": "a-long-random-secret-value"}
    scope, _ = run_block(code, names)
    service = scope["MyService"](agent_engine_id="1234567890")
    assert await _search_until(service, "colour") == ["I like blue."]


async def test_use_with_adk(tmp_path: Path, fast_models: None) -> None:
    """The plugin puts what the bank holds for the user into the model's request."""
    model = ScriptedAgentModel()
    code = readme_python(
        "MemoryBankPlugin()])", ("chroma:///var/lib/adk-memory", f"chroma://{tmp_path}")
    )
    root = LlmAgent(name="assistant", model=model, instruction="Help.")
    scope, _ = run_block(code, {"agent": root, "sessions": InMemorySessionService()})
    memory, runner = scope["memory"], scope["runner"]
    try:
        tea = genai_types.Content(role="user", parts=[genai_types.Part(text="I like green tea.")])
        await memory.add_memory(
            app_name="assistant", user_id="u1", memories=[MemoryEntry(content=tea)]
        )
        session = await runner.session_service.create_session(app_name="assistant", user_id="u1")
        message = genai_types.Content(role="user", parts=[genai_types.Part(text="A drink?")])
        async for _ in runner.run_async(user_id="u1", session_id=session.id, new_message=message):
            pass
        prompt = ScriptedMemoryModel.prompt_text(model.requests[-1])
        assert re.search(r"<MEMORIES>.*I like green tea\..*</MEMORIES>", prompt, re.S)
    finally:
        await runner.close()
        await memory.aclose()


def test_agent_runtime_builder(monkeypatch: pytest.MonkeyPatch) -> None:
    """The block builds an `AdkApp` as written; nothing connects until the app is set up."""
    root = LlmAgent(name="assistant", model=ScriptedAgentModel(), instruction="Help.")
    scope, _ = run_block(readme_python("AdkApp("), {"root_agent": root})
    builder = scope["app"]._tmpl_attrs["memory_service_builder"]
    assert isinstance(builder, MemoryServiceBuilder) and builder.uri == "redis://10.0.0.5:6379/0"


def test_the_command_line_examples(
    tmp_path: Path, fast_models: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As written, the first command needs Vertex AI credentials (text-embedding-005) and
    says so in one line; with an offline model every command runs, and `generate` reads a
    JSON Lines conversation."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "conversation.jsonl").write_text(
        json.dumps({"role": "user", "text": "I always pick an aisle seat."}) + "\n"
    )
    uri = f"memory://readme-{tmp_path.name}"
    commands = [
        shlex.split(line) for line in block("README.md", "banks create --id").text.splitlines()
    ]
    first = CliRunner().invoke(app, [*commands[0][1:], "--uri", uri])
    assert first.exit_code == 1
    assert first.output.startswith("error: FAILED_PRECONDITION") and "credentials" in first.output
    offline = [w if w != "text-embedding-005" else "hash-64" for w in commands[0]]
    outputs = []
    for words in [offline, *commands[1:]]:
        extra = ["--model", "echo-memory-model"] if words[1] == "generate" else []
        result = CliRunner().invoke(app, [*words[1:], *extra, "--uri", uri])
        assert result.exit_code == 0, result.output
        outputs.append(result.stdout)
    [hit] = json.loads(outputs[2])
    assert hit["memory"]["fact"] == "I prefer aisle seats."
    assert hit["memory"]["topics"] == [{"managedMemoryTopic": "USER_PREFERENCES"}]
    assert "I always pick an aisle seat." in outputs[3]


def test_export_then_import(
    tmp_path: Path, fast_models: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    source, target = f"chroma://{tmp_path}/source", f"memory://readme-{tmp_path.name}"
    with Client(source) as client:
        client.memory_banks.create(memory_bank_id="support")
        client.memory_banks.memories.create(
            name="reasoningEngines/support", fact="I like tea.", scope={"user_id": "1"}
        )
    for line in block("README.md", "adk-memory export -b support").text.splitlines():
        words = shlex.split(line)
        words = [
            source if w.startswith("chroma://") else target if w.startswith("redis://") else w
            for w in words
        ]
        result = CliRunner().invoke(app, words[1:])
        assert result.exit_code == 0, result.output
    with Client(target) as client:
        [memory] = client.memory_banks.memories.list(name="reasoningEngines/support")
    assert memory.fact == "I like tea." and memory.scope == {"user_id": "1"}


def test_chroma_uris(tmp_path: Path, fast_models: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a client does no I/O; the relative folder is under the working directory."""
    monkeypatch.chdir(tmp_path)
    code = block("backends/chroma/README.md", "Client(uri=").text
    code = code.replace("chroma:///var/lib/adk-memory", f"chroma://{tmp_path}/abs")
    code = re.sub(r"client = (Client\(.*\))", r"clients.append(\1)", code)
    scope, _ = run_block(code, {"clients": []})
    embedded, relative, server, prefixed = scope["clients"]
    relative.memory_banks.create(memory_bank_id="here")
    assert server.aio.engine.store.config.single_host
    assert prefixed.aio.engine.store.config.lock_url == "rediss://:secret@redis.example.com:6380/0"
    assert (tmp_path / "memory-data").is_dir()
    for client in scope["clients"]:
        client.close()
    assert not (tmp_path / "abs").exists()


def test_every_extra_the_readmes_install_exists() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    named = {
        extra
        for readme in READMES
        for extra in re.findall(r"adk-memory\[(\w+)\]", (ROOT / readme).read_text())
    }
    assert named and named <= set(extras), named - set(extras)
