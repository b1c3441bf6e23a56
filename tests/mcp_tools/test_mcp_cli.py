"""`adk-memory mcp` refuses what it cannot serve safely, with one line; the generation tool is
offered only when a model is configured."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from adk_memory import AsyncClient
from adk_memory.cli import app
from adk_memory.server.mcp_server import McpBinding, create_mcp_server
from adk_memory.testing.models import ScriptedMemoryModel


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["-s", "app=x", "--transport", "http", "--host", "0.0.0.0"], "without API keys"),
        (["--scope", "user_id"], "KEY=VALUE"),
        (["-s", "user_id=a", "--scope", "user_id=b"], "twice"),
        (["-s", "app=x", "--transport", "pigeon"], "stdio or http"),
        (["--transport", "stdio"], "Whose memories?"),
        (["--transport", "http"], "Whose memories?"),
        (["-s", "app=x", "--keys", "/nonexistent/keys.yaml", "--transport", "http"], "Cannot read"),
        (["-s", "app=x", "--transport", "http", "--allowed-host", "*"], "every Host name"),
        (["-s", "app=x", "--transport", "http", "--allowed-host", "a.test:80"], "without a port"),
    ],
)
def test_mcp_refuses_a_bad_configuration_with_one_line(arguments: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["mcp", "--uri", "memory://", "--bank", "b", *arguments])
    assert result.exit_code == 1, result.output
    assert message in result.output, result.output
    assert "Traceback" not in result.output


async def test_the_generation_tool_is_offered_only_with_a_model() -> None:
    async with AsyncClient("memory://", embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="plain")
        await client.memory_banks.create(
            memory_bank_id="modelled",
            managed_semantic_memory_config={"generation_config": {"model": "gemini-2.5-flash"}},
        )
        scope = {"user_id": "u"}
        plain = await create_mcp_server(client, McpBinding("reasoningEngines/plain", scope))
        modelled = await create_mcp_server(client, McpBinding("reasoningEngines/modelled", scope))
        assert "remember_conversation" not in {t.name for t in await plain.list_tools()}
        assert "remember_conversation" in {t.name for t in await modelled.list_tools()}
    model = ScriptedMemoryModel()
    async with AsyncClient(
        "memory://", embedding_model="hash-64", generation_model=model
    ) as client:
        await client.memory_banks.create(memory_bank_id="plain")
        server = await create_mcp_server(client, McpBinding("reasoningEngines/plain", scope))
        assert "remember_conversation" in {t.name for t in await server.list_tools()}
