"""Claims of backends/redis/README.md no other test exercised: the option table's defaults, the
index name's form and `full_text`."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aredis
from adk_memory_redis import RedisStoreConfig

from adk_memory import AsyncClient

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _literal(text: str) -> Any:
    """A README default (`adkmem`, `2.0`, `true`) as the value the config holds."""
    text = text.strip("` ")
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def _documented_defaults() -> dict[str, Any]:
    """`option -> default` from the README's option table (rows with a default)."""
    table = README.split("| option | default | meaning |", 1)[1].split("\n\n", 1)[0]
    defaults: dict[str, Any] = {}
    for row in table.splitlines()[2:]:
        names, values = row.split("|")[1:3]
        if not values.strip():
            continue  # the TLS options: no default
        options = re.findall(r"`(\w+)`", names)
        defaults.update(zip(options, [_literal(v) for v in values.split(",")], strict=True))
    return defaults


def test_the_option_table_gives_the_configs_defaults() -> None:
    documented = _documented_defaults()
    assert {"key_prefix", "hnsw_graph_from", "query_timeout_ms", "full_text"} <= set(documented)
    config = RedisStoreConfig()
    assert {name: getattr(config, name) for name in documented} == documented


def _value(attribute: list[Any], key: str) -> str:
    """A value of FT.INFO's flat `[key, value, …]` attribute list (bytes or text)."""
    words = [w.decode() if isinstance(w, bytes) else w for w in attribute]
    return str(words[words.index(key) + 1])


async def _index_fields(redis_url: str, prefix: str, full_text: bool) -> tuple[str, list[str]]:
    """Creates bank `b1` holding one fact; returns its index name and its `field:TYPE`s."""
    uri = f"{redis_url}?key_prefix={prefix}&full_text={str(full_text).lower()}"
    async with AsyncClient(uri, embedding_model="hash-64") as client:
        await client.memory_banks.create(memory_bank_id="b1")
        await client.memory_banks.memories.create(
            name="reasoningEngines/b1", fact="I like green tea.", scope={"user_id": "1"}
        )
    raw = aredis.Redis.from_url(redis_url)
    try:
        names = [n.decode() for n in await raw.execute_command("FT._LIST")]
        [index] = [n for n in names if n.startswith(f"{{{prefix}:b1}}")]
        info = await raw.ft(index).info()  # type: ignore[no-untyped-call]
        return index, [f"{_value(a, 'identifier')}:{_value(a, 'type')}" for a in info["attributes"]]
    finally:
        await raw.aclose()


@pytest.mark.parametrize("full_text", [True, False])
async def test_full_text_indexes_the_fact_as_text_in_the_banks_hash_tagged_index(
    redis_url: str, full_text: bool
) -> None:
    prefix = f"readme{uuid.uuid4().hex[:8]}"
    index, fields = await _index_fields(redis_url, prefix, full_text)
    assert re.fullmatch(rf"\{{{prefix}:b1\}}:[0-9a-f]+:idx", index), index
    assert ("fact:TEXT" in fields) is full_text
    assert "embedding:VECTOR" in fields
