"""The README's MCP and per-user key examples, run as written: the key file and `token_for`
over REST, the Claude Desktop configuration and ADK's `McpToolset` on stdio (a real
`adk-memory mcp` process), and the IDE configuration against `adk-memory mcp --transport http`.

Only what a test machine needs differs: HOME is a temporary folder (so `chroma://~/.adk-memory`
is fresh), the fast `hash-64` embedder replaces the default model, the HTTP port is a free one,
and PYTHONPATH points the child process at this checkout.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
import yaml  # type: ignore[import-untyped]
from mcp import Client, StdioServerParameters
from mcp.client import stdio
from mcp.client.streamable_http import streamable_http_client

from adk_memory import AsyncClient
from adk_memory.server import ApiKeys, create_app
from adk_memory.server.mcp_server import McpBinding, create_mcp_server

README = Path(__file__).resolve().parents[2] / "README.md"
TEXT = README.read_text(encoding="utf-8")
CHILD_ENV = {"ADK_MEMORY_EMBEDDING_MODEL": "hash-64", "PYTHONPATH": os.pathsep.join(sys.path)}


def block(after: str, language: str) -> str:
    """The first fenced block in `language` after the README text `after`."""
    start = TEXT.index(after)
    found = re.compile(rf"```{language}\n(.*?)```", re.S).search(TEXT, start)
    assert found is not None, f"no {language} block after {after!r}"
    return found.group(1)


def executable(command: str) -> str:
    """`command` as installed next to this Python (the venv's `bin`)."""
    found = shutil.which(command, path=os.path.dirname(sys.executable))
    assert found, f"{command} is not installed in {os.path.dirname(sys.executable)}"
    return found


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HOME, passed on to MCP server processes with the test's environment."""
    monkeypatch.setenv("HOME", str(tmp_path))
    inherited = stdio.get_default_environment
    monkeypatch.setattr(
        stdio,
        "get_default_environment",
        lambda: {**inherited(), **CHILD_ENV, "HOME": str(tmp_path)},
    )
    return tmp_path


def token_for(user_id: str, secret: str) -> str:
    """The README's `token_for`, executed from its text."""
    namespace: dict[str, Any] = {}
    exec(block("**One key per end user.**", "python"), namespace)
    made: str = namespace["token_for"](user_id, secret)
    return made


def readme_keys(tmp_path: Path) -> tuple[Path, ApiKeys, dict[str, Any]]:
    text = block("**One key per end user.**", "yaml")
    path = tmp_path / "keys.yaml"
    path.write_text(text)
    return path, ApiKeys.from_file(path), yaml.safe_load(text)


async def test_the_readme_key_file_confines_each_user_over_rest(tmp_path: Path) -> None:
    _, keys, entries = readme_keys(tmp_path)
    by_name = {entry["name"]: entry for entry in entries["keys"]}
    secret = by_name["end-users"]["token_secret"]
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="1234567890")
        bank = "reasoningEngines/1234567890"
        for user in ("alice", "bob"):
            await client.memory_banks.memories.create(
                name=bank, fact=f"{user}'s fact", scope={"user_id": user}
            )
        app = create_app(client, api_keys=keys)
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
            url = f"/v1beta1/{bank}/memories"
            alice_key = {"x-goog-api-key": by_name["alice-laptop"]["key"]}
            bob_token = {"authorization": f"Bearer {token_for('bob', secret)}"}
            for headers, user in ((alice_key, "alice"), (bob_token, "bob")):
                mine = await http.post(
                    f"{url}:retrieve", json={"scope": {"user_id": user}}, headers=headers
                )
                assert [h["memory"]["fact"] for h in mine.json()["retrievedMemories"]] == [
                    f"{user}'s fact"
                ]
                other = "bob" if user == "alice" else "alice"
                theirs = await http.post(
                    f"{url}:retrieve", json={"scope": {"user_id": other}}, headers=headers
                )
                assert theirs.status_code == 403
            # The token key also lists, and sees only bob.
            listed = await http.get(url, headers=bob_token)
            assert [m["fact"] for m in listed.json()["memories"]] == ["bob's fact"]


async def _create_and_retrieve(session: Client) -> None:
    names = {tool.name for tool in (await session.list_tools()).tools}
    assert {"create_memory", "retrieve_memories"} <= names
    made = await session.call_tool("create_memory", {"fact": "I keep bees."})
    assert not made.is_error, made.content
    found = await session.call_tool("retrieve_memories", {"query": "hobby"})
    assert not found.is_error
    assert [hit["fact"] for hit in found.structured_content["result"]] == ["I keep bees."]


async def test_the_claude_desktop_configuration_serves_memories_on_stdio(home: Path) -> None:
    server = json.loads(block("**Claude Desktop**", "json"))["mcpServers"]["memory"]
    params = StdioServerParameters(
        command=executable(server["command"]), args=server["args"], env=server.get("env")
    )
    async with Client(params) as session:
        await _create_and_retrieve(session)
    assert (home / ".adk-memory").is_dir()  # the store the configuration names


async def test_adks_mcp_toolset_from_the_readme_keeps_each_adk_user_in_their_scope(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two ADK users of one process, one `McpToolset` (the README's, as written): bob never
    retrieves what alice stored, alice does; each call carried its own user's token."""
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types as genai_types

    from adk_memory.testing.agent_models import ScriptedAgentModel

    with readme_http_server(home, "**ADK's `McpToolset`**") as (port, _, entries):
        secret = {e["name"]: e for e in entries["keys"]}["end-users"]["token_secret"]
        monkeypatch.setenv("MEMORY_TOKEN_SECRET", secret)
        code = block("**ADK's `McpToolset`**", "python").replace("8765", str(port))
        namespace: dict[str, Any] = {}
        exec(code, namespace)
        toolset, readme_agent = namespace["memory_tools"], namespace["agent"]
        assert readme_agent.tools == [toolset]

        def call(name: str, **args: Any) -> dict[str, Any]:
            return {"function_call": {"name": name, "args": args}}

        model = ScriptedAgentModel(
            replies=[
                call("create_memory", fact="I keep bees."),
                "Noted.",
                call("retrieve_memories", query="hobby"),
                "Nothing known.",
                call("retrieve_memories", query="hobby"),
                "Bees.",
            ]
        )
        agent = LlmAgent(
            name="assistant", model=model, instruction=readme_agent.instruction, tools=[toolset]
        )
        runner = Runner(app_name="assistant", agent=agent, session_service=InMemorySessionService())

        async def turn(user: str, text: str) -> dict[str, Any]:
            session = await runner.session_service.create_session(
                app_name="assistant", user_id=user
            )
            message = genai_types.Content(role="user", parts=[genai_types.Part(text=text)])
            responses = [
                part.function_response.response
                async for event in runner.run_async(
                    user_id=user, session_id=session.id, new_message=message
                )
                for part in (event.content.parts if event.content else None) or ()
                if part.function_response is not None
            ]
            assert len(responses) == 1, responses
            return dict(responses[0] or {})

        try:
            made = await turn("alice", "Remember that I keep bees.")
            assert not made.get("isError"), made
            bobs = await turn("bob", "What is my hobby?")
            assert bobs["structuredContent"]["result"] == [], bobs
            alices = await turn("alice", "What is my hobby?")
            assert [hit["fact"] for hit in alices["structuredContent"]["result"]] == [
                "I keep bees."
            ]
        finally:
            await runner.close()
            await toolset.close()


def test_a_user_token_is_reused_until_near_its_expiry_and_names_the_user() -> None:
    from joserfc import jwt
    from joserfc.jwk import OctKey

    from adk_memory import InvalidArgument
    from adk_memory.adk import user_token_headers

    secret = "s" * 40

    class Session:
        app_name = "assistant"

    class Context:
        session = Session()

        def __init__(self, user_id: str) -> None:
            self.user_id = user_id

    headers = user_token_headers(secret, hours=1)
    alice = headers(Context("alice"))  # type: ignore[arg-type]
    assert headers(Context("alice")) == alice  # type: ignore[arg-type]
    bob = headers(Context("bob"))  # type: ignore[arg-type]
    assert bob != alice
    token = alice["Authorization"].removeprefix("Bearer ")
    claims = jwt.decode(token, OctKey.import_key(secret)).claims
    assert claims["sub"] == "alice" and claims["app"] == "assistant"
    with pytest.raises(InvalidArgument, match="32 characters"):
        user_token_headers("short")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def readme_http_server(home: Path, after: str) -> Iterator[tuple[int, ApiKeys, dict[str, Any]]]:
    """The README's `adk-memory mcp --transport http …` command after `after`, with its keys."""
    path, keys, entries = readme_keys(home)
    port = _free_port()
    words = shlex.split(block(after, "bash"))
    assert words[:2] == ["adk-memory", "mcp"]
    words = [str(path) if w == "keys.yaml" else str(port) if w == "8765" else w for w in words]
    env = {**os.environ, **CHILD_ENV, "HOME": str(home), "ADK_MEMORY_URI": "memory://"}
    process = subprocess.Popen(
        [executable(words[0]), *words[1:]],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        for _ in range(600):
            if process.poll() is not None:
                raise AssertionError(process.stderr.read().decode() if process.stderr else "")
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.05)
        yield port, keys, entries
    finally:
        process.terminate()
        process.wait(timeout=20)


@pytest.fixture
def http_server(home: Path) -> Iterator[tuple[int, ApiKeys, dict[str, Any]]]:
    """The IDE example's server."""
    with readme_http_server(home, "**An IDE agent over HTTP**") as server:
        yield server


async def test_the_ide_configuration_reaches_only_the_users_memories(
    http_server: tuple[int, ApiKeys, dict[str, Any]],
) -> None:
    port, _, entries = http_server
    secret = {e["name"]: e for e in entries["keys"]}["end-users"]["token_secret"]
    config = json.loads(block("**An IDE agent over HTTP**", "json"))
    server = config["servers"]["memory"]
    assert server["type"] == "http"
    assert config["inputs"][0]["id"] == "memory-token"
    url = server["url"].replace("8765", str(port))

    async def session_of(user: str) -> Any:
        headers = {
            name: value.replace("${input:memory-token}", token_for(user, secret))
            for name, value in server["headers"].items()
        }
        return httpx2.AsyncClient(headers=headers)

    async with await session_of("alice") as http:
        async with Client(streamable_http_client(url, http_client=http)) as session:
            await _create_and_retrieve(session)
    async with await session_of("bob") as http:
        async with Client(streamable_http_client(url, http_client=http)) as session:
            found = await session.call_tool("retrieve_memories", {"query": "hobby"})
            assert found.structured_content["result"] == []
    async with httpx2.AsyncClient() as http:
        refused = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert refused.status_code == 401
    await asyncio.sleep(0)


def _parameters(schema: dict[str, Any]) -> dict[str, Any]:
    """`{parameter: default}` of a tool's input schema (a required one: `...`)."""
    required = set(schema.get("required", []))
    return {
        name: ... if name in required else spec.get("default")
        for name, spec in schema["properties"].items()
    }


def _documented_tools() -> dict[str, dict[str, Any]]:
    """`tool -> {parameter: default}` from the README's tool table (no default: `...`)."""
    table = TEXT.split("| tool | what it does |", 1)[1].split("\n\n", 1)[0]
    tools: dict[str, dict[str, Any]] = {}
    for name, params in re.findall(r"`(\w+)\(([^)]*)\)`", table):
        tools[name] = {}
        for param in filter(None, (p.strip() for p in params.split(","))):
            key, _, default = param.partition("=")
            tools[name][key] = eval(default) if default else ...  # noqa: S307
    return tools


async def test_the_tool_table_names_each_tool_with_its_parameters_and_defaults() -> None:
    """Every tool is in the table with its parameters and defaults; the generation tool only
    with a model."""
    documented = _documented_tools()
    model = {"generation_model": "gemini-2.5-flash"}
    async with AsyncClient("memory://", embedding_model="hash-64", **model) as client:
        await client.memory_banks.create(memory_bank_id="tools")
        server = await create_mcp_server(client, McpBinding("reasoningEngines/tools", {"u": "1"}))
        async with Client(server) as session:
            tools = (await session.list_tools()).tools
    actual = {tool.name: _parameters(tool.input_schema) for tool in tools}
    assert actual == documented
