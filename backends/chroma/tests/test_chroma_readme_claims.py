"""Claims of backends/chroma/README.md no other test exercised: the option table's defaults,
the collections a bank is stored in with their HNSW settings, and the options that are gone."""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Any

import chromadb
import pytest
from adk_memory_chroma import ChromaMemoryStore, ChromaStoreConfig

from adk_memory import Client
from adk_memory.errors import InvalidArgument
from adk_memory.testing.processes import run_in_a_process

README = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")


def _literal(text: str) -> Any:
    """A README default (`adkmem`, `256`, `none`, `false`) as the value the config holds."""
    text = text.strip("` ")
    if text == "none":
        return None
    if text in ("true", "false"):
        return text == "true"
    try:
        return float(text)
    except ValueError:
        return text


def _documented_defaults() -> dict[str, Any]:
    """`option -> default` from the README's option table, for the rows with literal defaults."""
    table = README.split("| parameter | default | meaning |", 1)[1].split("\n\n", 1)[0]
    defaults: dict[str, Any] = {}
    for row in table.splitlines()[2:]:
        names, values = row.split("|")[1:3]
        if "Chroma's" in values:
            continue  # tenant and database: whatever chromadb's defaults are
        options = re.findall(r"`(\w+)`", names)
        given = [_literal(v) for v in values.split(",")]
        defaults.update(
            zip(options, given * len(options) if len(given) == 1 else given, strict=True)
        )
    return defaults


def test_the_option_table_gives_the_configs_defaults() -> None:
    documented = _documented_defaults()
    assert set(documented) >= {
        "collection_prefix",
        "vector_cache_mb",
        "hnsw_max_neighbors",
        "lock_url",
        "single_host",
        "lock_dir",
    }
    config = ChromaStoreConfig(path="/x")
    assert {name: getattr(config, name) for name in documented} == documented
    assert (config.tenant, config.database) == (
        chromadb.DEFAULT_TENANT,
        chromadb.DEFAULT_DATABASE,
    )


def test_a_bank_lives_in_the_named_collections_with_the_documented_hnsw_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`<prefix>.banks`, `<prefix>.due`, `<prefix>.<bank>.mem`, `<prefix>.<bank>.aux`; space
    l2, the URI's HNSW options, and a save every 128 log entries."""
    monkeypatch.setenv("ADK_MEMORY_EMBEDDING_MODEL", "hash-64")
    uri = f"chroma://{tmp_path}?collection_prefix=team-a&hnsw_ef_search=50"
    with Client(uri) as client:
        client.memory_banks.create(memory_bank_id="support")
        client.memory_banks.memories.create(
            name="reasoningEngines/support", fact="I like tea.", scope={"user_id": "1"}
        )
    collections = chromadb.PersistentClient(path=str(tmp_path)).list_collections()
    settings = {c.name: c.configuration["hnsw"] for c in collections}
    assert set(settings) == {
        "team-a.banks",
        "team-a.due",
        "team-a.support.mem",
        "team-a.support.aux",
    }
    memory = settings["team-a.support.mem"]
    assert memory["space"] == "l2" and memory["sync_threshold"] == 128
    assert (memory["ef_construction"], memory["ef_search"], memory["max_neighbors"]) == (
        100,
        50,
        16,
    )


@pytest.mark.parametrize("gone", ["exact_limit", "overfetch", "overfetch_min"])
def test_options_that_are_gone_are_refused(gone: str) -> None:
    with pytest.raises(InvalidArgument) as raised:
        ChromaMemoryStore.from_uri(f"chroma:///data?{gone}=10")
    assert raised.value.field == gone


def _open_folder_error(path: Path) -> str:
    """Run in another process: the error a store opening `path` raises, or "" when it opens."""

    async def main() -> str:
        store = ChromaMemoryStore.from_uri(f"chroma://{path}")
        try:
            await store.list_banks()
        except Exception as error:
            return f"{type(error).__name__} {error}"
        finally:
            await store.aclose()
        return ""

    return asyncio.run(main())


async def test_an_open_folder_is_locked_in_its_lock_file_until_the_last_store_closes(
    tmp_path: Path,
) -> None:
    """ "The first store of a process takes an OS lock on `<path>/.adk-memory.lock` (shared by
    that process's stores, freed by the last `aclose()`)": another process is refused while a
    store is open, and opens the folder once they are all closed."""
    first = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    second = ChromaMemoryStore.from_uri(f"chroma://{tmp_path}")
    await first.list_banks()
    await second.list_banks()
    assert (tmp_path / ".adk-memory.lock").read_text().strip() == str(os.getpid())
    await first.aclose()
    refused = run_in_a_process(_open_folder_error, tmp_path)
    assert refused.startswith("FailedPrecondition") and f"pid {os.getpid()}" in refused
    await second.aclose()
    assert run_in_a_process(_open_folder_error, tmp_path) == ""


def test_the_open_file_limit_is_raised_to_at_most_65536() -> None:
    from adk_memory_chroma import _folder

    assert _folder.OPEN_FILES_WANTED == 65_536
