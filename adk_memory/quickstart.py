"""The quickstart tour: Memory Bank's main ideas, offline, in about a minute.

It creates a bank, stores a dozen memories for two users, retrieves by similarity with
distances, filters, updates a fact and rolls it back through its revisions, and watches a TTL
expire — all through the public `Client`, exactly as user code would.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from rich.console import Console
from rich.table import Table

from adk_memory import Client, types
from adk_memory.settings import gemini_credentials_configured

__all__ = ["run_quickstart"]

_MEMORIES = {
    "alice": [
        "I am a software engineer in Berlin.",
        "I prefer window seats on flights.",
        "I am allergic to peanuts.",
        "My daughter Mia turns 6 in June.",
        "I drink my coffee black, no sugar.",
        "I am training for the Berlin half marathon.",
    ],
    "bob": [
        "I am a nurse working night shifts.",
        "I prefer aisle seats on flights.",
        "I love spicy Thai food.",
        "My dog is called Rex.",
        "I drink green tea every morning.",
        "I am learning to play the cello.",
    ],
}


def _table(title: str, rows: Iterable[tuple[str, ...]], *columns: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    return table


def run_quickstart(
    uri: str, *, console: Console | None = None, keep: bool = False, **client_options: Any
) -> None:
    """Runs the tour against the store at `uri` (its bank is deleted at the end unless `keep`).

    `client_options` go to the `Client` (e.g. the `owner` record of a server's folder).
    """
    out = console or Console()
    out.rule("[bold]adk-memory quickstart[/bold]")
    out.print(f"Store: [cyan]{uri}[/cyan]  (embeddings: all-MiniLM-L6-v2, offline)")
    out.print(
        "Memories not in English? Create the bank with "
        '[cyan]embedding_model="multilingual-e5-small"[/cyan] (offline, about 100 languages).'
    )
    with Client(uri=uri, **client_options) as client:
        bank = client.memory_banks.create(
            config={"display_name": "quickstart"},
            managed_semantic_memory_config={
                "ttl_config": {"memory_revision_default_ttl": "86400s"}
            },
        )
        out.print(f"Created memory bank [green]{bank.name}[/green]\n")
        try:
            _tour(client, bank.name, out)
        finally:
            if not keep:
                client.memory_banks.delete(name=bank.name, force=True)
                out.print(f"\nDeleted the bank (pass --keep to keep it). Store: {uri}")


def _tour(client: Client, bank: str, out: Console) -> None:
    memories = client.memory_banks.memories
    started = time.perf_counter()
    names: dict[str, str] = {}
    first_done = 0.0
    for user, facts in _MEMORIES.items():
        for fact in facts:
            if names and not first_done:
                first_done = time.perf_counter()
            topic = (
                "USER_PREFERENCES" if "prefer" in fact or "love" in fact else "USER_PERSONAL_INFO"
            )
            operation = memories.create(
                name=bank,
                fact=fact,
                scope={"user_id": user},
                config={
                    "topics": [{"managed_memory_topic": topic}],
                    "metadata": {"source": types.MemoryMetadataValue(string_value="quickstart")},
                },
            )
            names[fact] = operation.response.name
    load, rest = first_done - started, time.perf_counter() - first_done
    out.print(
        f"Stored {len(names)} memories for 2 users: the first took {load:.1f} s (it loads the "
        f"embedding model), the other {len(names) - 1} took {rest:.2f} s together.\n"
    )

    query = "Where does the user like to sit on a plane?"
    for user in _MEMORIES:
        results = memories.retrieve(
            name=bank,
            scope={"user_id": user},
            similarity_search_params={"search_query": query, "top_k": 3},
        )
        rows = [(f"{hit.distance:.3f}", hit.memory.fact) for hit in results]
        out.print(
            _table(
                f"retrieve for {user}: {query!r} (top 3, Euclidean distance)",
                rows,
                "distance",
                "fact",
            )
        )
    out.print("Each user sees only their own memories: scope matching is exact.\n")

    flt = 'topics.managed_memory_topic: USER_PREFERENCES AND fact=~"(?i)seat|tea|coffee"'
    found = memories.retrieve(name=bank, scope={"user_id": "alice"}, config={"filter": flt})
    out.print(_table(f"retrieve with filter {flt}", [(hit.memory.fact,) for hit in found], "fact"))

    name = names["I drink my coffee black, no sugar."]
    memories.update(name=name, fact="I switched to oat-milk flat whites.")
    revisions = list(memories.revisions.list(name=name))
    rows = [(rev.name.rsplit("/", 1)[-1], rev.fact) for rev in revisions]
    out.print(_table("update → two revisions (newest first)", rows, "revision", "fact"))
    oldest = revisions[-1].name.rsplit("/", 1)[-1]
    memories.rollback(name=name, target_revision_id=oldest)
    out.print(
        f"rollback to {oldest} → fact is again: [green]{memories.get(name=name).fact!r}[/green]\n"
    )

    operation = memories.create(
        name=bank,
        fact="My one-time login code is 4711.",
        scope={"user_id": "alice"},
        config={"ttl": "2s"},
    )
    short = operation.response
    out.print(f"created a memory with ttl=2s, expire_time={short.expire_time:%H:%M:%S}")
    seen = [hit.memory.fact for hit in memories.retrieve(name=bank, scope={"user_id": "alice"})]
    out.print(f"  now:      visible = {short.fact in seen}")
    time.sleep(2.2)
    seen = [hit.memory.fact for hit in memories.retrieve(name=bank, scope={"user_id": "alice"})]
    out.print(f"  2 s later: visible = {short.fact in seen}\n")

    dry = memories.purge(name=bank, filter='scope.user_id="bob"', force=False)
    out.print(
        f"purge dry run for bob: would delete {dry.response.purge_count} memories (force=False)"
    )
    _generation_step(client, bank, out)


def _generation_step(client: Client, bank: str, out: Console) -> None:
    """GenerateMemories needs a model: run it when Gemini credentials exist, else say so."""
    if not gemini_credentials_configured():
        out.print(
            "\n[yellow]Skipped the generation step[/yellow] (memories.generate extracts and "
            "consolidates memories with an LLM): set GOOGLE_API_KEY, or "
            "GOOGLE_GENAI_USE_VERTEXAI=true "
            "with GOOGLE_CLOUD_PROJECT, and run the quickstart again."
        )
        return
    conversation = [
        ("user", "By the way, I moved from Berlin to Munich last month."),
        ("model", "Congratulations on the move! How do you like Munich?"),
        ("user", "Love it. Also, please remember I'm vegetarian now."),
    ]
    events = [{"content": {"role": role, "parts": [{"text": text}]}} for role, text in conversation]
    operation = client.memory_banks.memories.generate(
        name=bank, scope={"user_id": "alice"}, direct_contents_source={"events": events}
    )
    rows = [
        (item.action.value, item.memory.fact)
        for item in operation.response.generated_memories or []
    ]
    out.print(_table("generate from a conversation (gemini-2.5-flash)", rows, "action", "fact"))
    out.print(f"LLM usage: {operation.metadata}")
