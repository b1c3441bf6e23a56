"""The key file format and `adk-memory serve`."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from typer.testing import CliRunner

from adk_memory import InvalidArgument
from adk_memory.cli import app
from adk_memory.server.auth import ApiKey, ApiKeys, is_loopback

SECRET = "s3cret-key-for-tests-only"


def test_a_yaml_key_file_accepts_both_permission_spellings_and_hashed_secrets(
    tmp_path: Path,
) -> None:
    hashed = hashlib.sha256(b"another-secret-value-123").hexdigest()
    path = tmp_path / "keys.yaml"
    path.write_text(
        f"""
keys:
  - name: agent
    key: {SECRET}
    permissions: [aiplatform.memories.generate, memories.retrieve]
    banks: ["123", "projects/p/locations/l/reasoningEngines/my-bank"]
  - name: admin
    key_sha256: {hashed}
    permissions: ["*"]
"""
    )

    keys = ApiKeys.from_file(path)

    agent = keys.find(SECRET)
    assert agent is not None and agent.name == "agent"
    assert agent.permissions == {"memories.generate", "memories.retrieve"}
    assert agent.banks == {"123", "my-bank"}
    assert keys.find("another-secret-value-123").name == "admin"  # type: ignore[union-attr]
    assert keys.find("wrong") is None


def test_a_json_key_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "keys.json"
    path.write_text(
        json.dumps(
            [{"name": "ops", "key": SECRET, "permissions": ["memories.*", "reasoningEngines.get"]}]
        )
    )

    [key] = ApiKeys.from_file(path).keys

    assert key.grants("memories.delete") and key.grants("reasoningEngines.get")
    assert not key.grants("reasoningEngines.delete")


@pytest.mark.parametrize(
    ("entry", "complaint"),
    [
        ({"name": "a", "key": SECRET, "permissions": ["memories.retreive"]}, "unknown permission"),
        ({"name": "a", "key": "short", "permissions": ["*"]}, "at least 16"),
        ({"name": "a", "permissions": ["*"]}, "exactly one of key and key_sha256"),
        ({"name": "a", "key": SECRET, "permissions": ["*"], "bank": ["1"]}, "keys.0.bank"),
    ],
)
def test_a_bad_key_file_names_the_problem_and_never_the_secret(
    tmp_path: Path, entry: dict[str, object], complaint: str
) -> None:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps({"keys": [entry]}))

    with pytest.raises(InvalidArgument) as caught:
        ApiKeys.from_file(path)

    assert complaint in str(caught.value)
    assert SECRET not in str(caught.value)


def test_two_keys_with_one_name_are_refused() -> None:
    with pytest.raises(ValueError, match="unique"):
        ApiKeys.of(
            [
                ApiKey(name="a", key=SECRET, permissions=["*"]),
                ApiKey(name="a", key=SECRET + "x", permissions=["*"]),
            ]
        )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("localhost", True), ("::1", True), ("[::1]", True), ("127.0.0.2", True),
     ("0.0.0.0", False), ("::", False), ("192.168.1.10", False), ("example.com", False)],
)  # fmt: skip
def test_loopback_hosts_are_recognised(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_serve_refuses_a_public_host_without_keys_with_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("ADK_MEMORY_API_KEYS_FILE", raising=False)

    result = CliRunner().invoke(app, ["serve", "--uri", "memory://", "--host", "0.0.0.0"])

    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "--keys" in lines[0] and "Traceback" not in result.output


def test_serve_with_a_key_file_serves_and_checks_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(f"keys:\n  - name: admin\n    key: {SECRET}\n    permissions: ['*']\n")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GOOGLE_", "GEMINI_", "ADK_MEMORY_"))
    }
    env["ADK_MEMORY_EMBEDDING_MODEL"] = "hash-64"
    command = [
        sys.executable,
        "-c",
        "from adk_memory.cli import app; app()",
        "serve",
        "--uri",
        "memory://",
        "--port",
        str(port),
        "--keys",
        str(path),
    ]
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(150):
            try:
                httpx.get(f"{url}/healthz")
                break
            except httpx.TransportError:
                time.sleep(0.1)
        anonymous = httpx.post(f"{url}/v1beta1/reasoningEngines", json={})
        admin = httpx.post(
            f"{url}/v1beta1/reasoningEngines", json={}, headers={"x-goog-api-key": SECRET}
        )
    finally:
        process.terminate()
        output = process.communicate(timeout=10)[0].decode()

    assert anonymous.status_code == 401
    assert admin.status_code == 200 and admin.json()["done"] is True
    assert "POST memoryBanks.create -> 401" in output
    assert "POST memoryBanks.create -> 200" in output and "(key admin)" in output
    assert SECRET not in output


def test_the_server_package_exports_are_pinned() -> None:
    import adk_memory.server

    assert adk_memory.server.__all__ == [
        "DEFAULT_MAX_BODY_BYTES",
        "PERMISSIONS",
        "ApiKey",
        "ApiKeys",
        "create_app",
        "serve",
    ]
    assert all(hasattr(adk_memory.server, name) for name in adk_memory.server.__all__)


def test_serve_passes_allowed_hosts_and_cors_origins(monkeypatch: pytest.MonkeyPatch) -> None:
    import adk_memory.server

    monkeypatch.delenv("ADK_MEMORY_API_KEYS_FILE", raising=False)
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(adk_memory.server, "serve", lambda uri, **options: calls.append(options))
    arguments = ["serve", "--uri", "memory://", "--allowed-host", "memory.internal"]
    arguments += ["--allowed-host", "localhost", "--cors-origin", "https://app.example"]

    result = CliRunner().invoke(app, arguments)
    default = CliRunner().invoke(app, ["serve", "--uri", "memory://"])

    assert result.exit_code == 0 and default.exit_code == 0, result.output + default.output
    assert calls[0]["allowed_hosts"] == ["memory.internal", "localhost"]
    assert calls[0]["cors_origins"] == ["https://app.example"]
    assert (calls[1]["allowed_hosts"], calls[1]["cors_origins"]) == (None, ())
