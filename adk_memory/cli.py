"""The `adk-memory` command line (typer + rich).

`quickstart`, `serve` and `worker` run the product; `banks`, `memories`, `revisions`,
`rollback` and `generate` operate a store through the same `AsyncClient` an application uses;
`export`/`import` move a bank between stores (`adk_memory.transfer`) and `reembed` changes a
bank's embedding model (`adk_memory.engine.reembed`). Every command takes `--uri` (default
`$ADK_MEMORY_URI`, else embedded Chroma in `~/.adk-memory`); commands on a bank take `--bank`;
results print as tables, or as JSON with `--json` (camelCase, as the REST API writes them).
Long work shows a progress bar on stderr, so stdout stays clean for `export` and `--json`.

Errors print one line (`error: NOT_FOUND: …`) and exit 1, never a traceback (`-vv` logs one at
DEBUG level for unexpected errors); Ctrl-C exits 130.
"""

from __future__ import annotations

import gc
import os
import sys

# A command's start-up makes some 100,000 objects (the SDK's pydantic types, typer's command
# tree) and frees almost none, so collecting them is pure cost: about a third of a command that
# goes through a server. As the process's own entry point (not imported by another program), the
# CLI turns collection off until `_started`, which freezes what start-up made and turns it back
# on before the command's own work.
_ENTRY_POINT = __name__ == "__main__" or os.path.basename(sys.argv[0] if sys.argv else "") in (
    "adk-memory",
    "adk-memory.exe",
)
if _ENTRY_POINT:
    gc.disable()

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TextIO, TypeVar
from urllib.parse import urlsplit, urlunsplit

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from adk_memory.errors import AdkMemoryError, FailedPrecondition, InvalidArgument
from adk_memory.settings import api_keys_file, default_embedding_model, default_uri
from adk_memory.wording import render

if TYPE_CHECKING:
    from adk_memory import AsyncClient as LocalClient
    from adk_memory._remote import RemoteAsyncClient

    AsyncClient = LocalClient | RemoteAsyncClient
    """Commands work on either client; the engine's commands only on the in-process one."""

__all__ = ["app"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

# Never print locals in a traceback (they can hold keys and facts); `_errors` prints one line.
_APP_OPTIONS: dict[str, Any] = {"no_args_is_help": True, "pretty_exceptions_show_locals": False}
app = typer.Typer(help="adk-memory: a self-hosted Memory Bank.", **_APP_OPTIONS)
banks_app = typer.Typer(help="Memory banks: list, get, create, delete.", **_APP_OPTIONS)
memories_app = typer.Typer(
    help="Memories: list, get, create, delete, retrieve, purge.", **_APP_OPTIONS
)
revisions_app = typer.Typer(help="Revisions of a memory.", **_APP_OPTIONS)
app.add_typer(banks_app, name="banks")
app.add_typer(memories_app, name="memories")
app.add_typer(revisions_app, name="revisions")
streams_app = typer.Typer(
    help="Ingest streams holding events not yet generated from (failed ones with their error).",
    **_APP_OPTIONS,
)
app.add_typer(streams_app, name="streams")

UriOption = Annotated[
    str | None,
    typer.Option(
        "--uri",
        help="Store URI, or an adk-memory server's http://host:port (default: $ADK_MEMORY_URI, "
        "else embedded Chroma in ~/.adk-memory, through the server holding it if one does).",
    ),
]
BankOption = Annotated[
    str, typer.Option("--bank", "-b", help="The bank: its id or its resource name.")
]
ScopeOption = Annotated[
    list[str] | None,
    typer.Option("--scope", "-s", help="A scope entry KEY=VALUE (repeat for each key)."),
]
FilterOption = Annotated[
    str | None, typer.Option("--filter", "-f", help="An AIP-160 filter, e.g. 'fact:\"tea\"'.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
HostOption = Annotated[
    str, typer.Option(help="Address to bind; anything but loopback needs --keys.")
]
PortOption = Annotated[int, typer.Option(help="TCP port.")]
KeysOption = Annotated[
    str | None,
    typer.Option("--keys", help="API key file, YAML or JSON (default: $ADK_MEMORY_API_KEYS_FILE)."),
]
AllowedHostOption = Annotated[
    list[str] | None,
    typer.Option(
        help="A Host name the server answers to (repeatable; '*' for any, with --keys only). "
        "Default: loopback names without --keys, any with --keys."
    ),
]

_SCOPE_KEY = re.compile(r"[A-Za-z0-9_.:+-]+")

_err = Console(stderr=True, highlight=False)
_PIPE_WIDTH = 200  # tables written to a file or a pipe are not cut to 80 columns


def _stdout() -> Console:
    """A console on the current stdout (a terminal's width, else `_PIPE_WIDTH`)."""
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=_PIPE_WIDTH)
    return console


# Running commands


def _fail(message: str, code: int = 1) -> NoReturn:
    _err.print(f"[red]error:[/red] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def _cause(error: AdkMemoryError) -> str:
    """The driver's own words behind an UNAVAILABLE (only this operator's terminal sees them)."""
    cause = error.__cause__
    if error.status != "UNAVAILABLE" or cause is None:
        return ""
    return f"\n  cause: {type(cause).__name__}: {cause}"


@contextlib.contextmanager
def _errors(*, interrupt_ok: bool = False) -> Iterator[None]:
    """Turns every failure into one line on stderr and a non-zero exit."""
    try:
        yield
    except (typer.Exit, typer.Abort):
        raise
    except AdkMemoryError as exc:
        _fail(f"{exc.status}: {render(exc, 'cli')}{_cause(exc)}")
    except KeyboardInterrupt:
        if interrupt_ok:
            return
        _fail("interrupted.", code=130)
    except OSError as exc:
        where = f" ({exc.filename})" if getattr(exc, "filename", None) else ""
        _fail(f"{exc.strerror or type(exc).__name__}{where}.")
    except Exception as exc:
        logger.debug("Unexpected error", exc_info=True)
        _fail(f"internal error ({type(exc).__name__}); run with -vv to log the details.")


def _run(
    uri: str | None,
    work: Callable[[AsyncClient], Awaitable[T]],
    *,
    interrupt_ok: bool = False,
    embeds: bool = False,
    serving: bool = False,
    **options: Any,
) -> T:
    """Runs `work` with an `AsyncClient` on the store, mapping errors to one line.

    `embeds`: the command embeds a text, so an in-process client starts loading the default
    local model in the background now, while the store opens and the bank loads (through a
    server, the server embeds: nothing is loaded here). `serving`: the command serves callers
    until stopped (`AsyncClient(serving=True)`).
    """

    async def main() -> T:
        client = _client(uri or default_uri(), options, embeds=embeds, serving=serving)
        _started()
        async with client:
            return await work(client)

    with _errors(interrupt_ok=interrupt_ok):
        return asyncio.run(main())
    raise typer.Exit(0)  # interrupted, and that is how this command stops


def _started() -> None:
    """Start-up is over (its imports are done): garbage collection is back on.

    What start-up made is frozen first (`gc.freeze`): left to the collector, its objects would
    be walked by the next full collections, which cost what disabling saved.
    """
    if _ENTRY_POINT and not gc.isenabled():
        gc.freeze()
        gc.enable()


def _client(
    uri: str, options: dict[str, Any], *, embeds: bool, serving: bool = False
) -> AsyncClient:
    """The client for `uri`, or of the server holding its embedded folder (`_through_server`).

    `embeds`: an in-process client's default local model starts loading in the background.
    """
    from adk_memory._registry import is_server_uri
    from adk_memory._remote import RemoteAsyncClient

    target, through = _through_server(uri, options)
    if is_server_uri(target):  # not through AsyncClient, which would import the engine for nothing
        return RemoteAsyncClient(target, **through, **options)
    from adk_memory import AsyncClient

    if embeds:
        from adk_memory.embeddings import warm_up

        warm_up(options.get("embedding_model") or default_embedding_model())
    return AsyncClient(target, run_scheduler=False, serving=serving, **options)


def _through_server(uri: str, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """`uri` and no client options, or the server holding its embedded folder and its record.

    Returns the server's URL and `{"owner": record}` when another process serves the folder:
    `adk-memory serve` records in a folder it holds where it serves it; a command started on
    the folder goes through it (saying so once on stderr) instead of failing "in use". The
    record is followed only once the server proves it holds the folder (`_remote.owner`).
    """
    from adk_memory._remote.owner import find_server

    served = find_server(uri)
    if served is None:
        return uri, {}
    if options.get("generation_model") is not None:
        raise FailedPrecondition(
            f"{served.folder} is held by adk-memory serve (pid {served.pid}) at {served.url}, "
            "whose model generates: restart it with --model, or stop it to use --model here.",
            field="--model",
        )
    _err.print(
        f"note: {escape(served.folder)} is held by adk-memory serve (pid {served.pid}); "
        f"going through it at {served.url}.",
        soft_wrap=True,
    )
    return served.url, {"owner": served}


@app.callback()
def main(
    verbose: Annotated[
        int,
        typer.Option(
            "--verbose", "-v", count=True, help="Log to stderr: -v info, -vv debug (repeatable)."
        ),
    ] = 0,
) -> None:
    """A self-hosted Memory Bank: long-term memory for AI agents."""
    if verbose:
        from rich.logging import RichHandler

        handler = RichHandler(console=_err, show_path=False, rich_tracebacks=False)
        package = logging.getLogger("adk_memory")
        package.addHandler(handler)
        package.setLevel(logging.DEBUG if verbose > 1 else logging.INFO)


def _without_password(uri: str) -> str:
    """The URI with its password (if any) masked, for printing."""
    parts = urlsplit(uri)
    if parts.password is None:
        return uri
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit(parts._replace(netloc=netloc))


# Parsing options


def _bank_name(bank: str) -> str:
    if "/" in bank:
        return bank
    if not bank:
        raise InvalidArgument("--bank must name a bank.", field="--bank")
    return f"reasoningEngines/{bank}"


def _memory_name(bank: str | None, memory: str) -> str:
    if "/" in memory:
        return memory
    if not bank:
        raise InvalidArgument(
            "Name the bank with --bank, or give the memory's full resource name.", field="--bank"
        )
    return f"{_bank_name(bank)}/memories/{memory}"


def _bank_id(name: str) -> str:
    from adk_memory.names import Names

    return Names.parse_bank(name, field="--bank")


def _pairs(values: list[str] | None, option: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for value in values or ():
        key, sep, item = value.partition("=")
        if not sep or not key:
            raise InvalidArgument(
                f"{option} takes KEY=VALUE; got an entry without '=' or without a key.",
                field=option,
            )
        if key in pairs:
            raise InvalidArgument(f"{option} names the key {key!r} twice.", field=option)
        pairs[key] = item
    return pairs


def _scope(values: list[str] | None, *, required: bool) -> dict[str, str]:
    scope = _pairs(values, "--scope")
    if required and not scope:
        raise InvalidArgument(
            "--scope is required: whose memories, e.g. --scope user_id=123.", field="--scope"
        )
    return scope


def _scope_filter(scope: dict[str, str], user_filter: str | None) -> str | None:
    """`user_filter` AND `scope.KEY = "VALUE"` for each entry (list and purge)."""
    from adk_memory.filters import quote_string

    clauses = [f"({user_filter})"] if user_filter and user_filter.strip() else []
    for key, value in scope.items():
        if not _SCOPE_KEY.fullmatch(key):
            raise InvalidArgument(
                f"The scope key {key[:40]!r} cannot be used in a filter (letters, digits and "
                "'_.:+-' only); use --filter on other fields instead.",
                field="--scope",
            )
        clauses.append(f"scope.{key} = {quote_string(value)}")
    return " AND ".join(clauses) or None


def _topics(values: list[str] | None) -> list[dict[str, str]] | None:
    from adk_memory.types import MANAGED_TOPIC_NAMES

    if not values:
        return None
    return [
        {"managed_memory_topic": value.upper()}
        if value.upper() in MANAGED_TOPIC_NAMES
        else {"custom_memory_topic_label": value}
        for value in values
    ]


# Output


def _wire(model: Any) -> Any:
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


def _print_json(data: Any) -> None:
    typer.echo(json.dumps(data, indent=2, ensure_ascii=False))


def _short(name: str | None) -> str:
    return (name or "").rsplit("/", 1)[-1]


def _when(value: Any) -> str:
    return value.strftime("%Y-%m-%d %H:%M") if value is not None else "-"


def _topic_text(topics: Any) -> str:
    labels = []
    for topic in topics or ():
        managed = getattr(topic, "managed_memory_topic", None)
        labels.append(
            str(getattr(managed, "value", managed)) if managed else topic.custom_memory_topic_label
        )
    return ", ".join(label for label in labels if label)


def _metadata_text(metadata: Any) -> str:
    parts = []
    for key, value in (metadata or {}).items():
        shown = next(
            (
                getattr(value, name)
                for name in ("string_value", "double_value", "bool_value", "timestamp_value")
                if getattr(value, name, None) is not None
            ),
            "",
        )
        parts.append(f"{key}={shown}")
    return ", ".join(parts)


def _scope_text(scope: Any) -> str:
    return ", ".join(f"{key}={value}" for key, value in sorted((scope or {}).items()))


def _memory_table(memories: list[Any], *, distances: list[float | None] | None = None) -> Table:
    """A table of memories; optional columns appear only when some memory has a value."""
    columns: list[tuple[str, Callable[[Any], str], dict[str, Any]]] = [
        ("memory", lambda m: _short(m.name), {"overflow": "fold", "min_width": 8}),
        ("scope", lambda m: _scope_text(m.scope), {"overflow": "fold"}),
        ("fact", lambda m: m.fact or "", {"ratio": 3, "min_width": 12, "overflow": "fold"}),
        ("topics", lambda m: _topic_text(m.topics), {"overflow": "fold"}),
        ("metadata", lambda m: _metadata_text(m.metadata), {"overflow": "fold"}),
        ("updated", lambda m: _when(m.update_time), {}),
        ("expires", lambda m: _when(m.expire_time) if m.expire_time else "", {}),
    ]
    rows = [[cell(memory) for _name, cell, _style in columns] for memory in memories]
    shown = [
        index
        for index, (name, _cell, _style) in enumerate(columns)
        if name in ("memory", "fact") or any(row[index] for row in rows)
    ]
    table = Table()
    for index in shown:
        name, _cell, style = columns[index]
        table.add_column(name, **style)
    if distances is not None:
        table.add_column("distance", justify="right", no_wrap=True)
    for position, row in enumerate(rows):
        cells = [row[index] for index in shown]
        if distances is not None:
            distance = distances[position]
            cells.append("-" if distance is None else f"{distance:.4f}")
        table.add_row(*(escape(cell) for cell in cells))
    return table


def _print_memory(memory: Any, *, as_json: bool) -> None:
    if as_json:
        _print_json(_wire(memory))
    else:
        _stdout().print(_memory_table([memory]))


def _print_memories(memories: list[Any], *, as_json: bool, what: str = "memories") -> None:
    if as_json:
        _print_json([_wire(memory) for memory in memories])
    elif not memories:
        _stdout().print(f"No {what}.")
    else:
        _stdout().print(_memory_table(memories))


def _progress() -> Progress:
    """A progress bar on stderr (stdout may be the export itself); off when not a terminal."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_err,
        disable=not _err.is_terminal,
    )


def _memory_lines(path: Path) -> int:
    """How many memories an export file holds (as `export` writes them), for the progress bar."""
    with path.open(encoding="utf-8") as lines:
        return sum(1 for line in lines if line.startswith('{"kind":"memory"'))


# Existing commands


@app.command()
def quickstart(
    uri: UriOption = None,
    keep: Annotated[bool, typer.Option(help="Keep the quickstart bank afterwards.")] = False,
) -> None:
    """A one-minute tour on embedded Chroma: memories, retrieval, filters, revisions, TTL."""
    from adk_memory.quickstart import run_quickstart

    _started()
    with _errors():
        target, through = _through_server(uri or default_uri(), {})
        run_quickstart(target, keep=keep, **through)


@app.command()
def serve(
    uri: UriOption = None,
    host: HostOption = "127.0.0.1",
    port: PortOption = 8080,
    keys: KeysOption = None,
    allowed_host: AllowedHostOption = None,
    cors_origin: Annotated[
        list[str] | None,
        typer.Option(help="An origin whose web pages may call the API (repeatable; CORS)."),
    ] = None,
    mcp_bank: Annotated[
        str | None,
        typer.Option(
            help="Also serve this bank to MCP clients at /mcp (streamable HTTP), behind the "
            "same keys; created if missing."
        ),
    ] = None,
    mcp_scope: Annotated[
        list[str] | None,
        typer.Option(help="A scope entry KEY=VALUE of the MCP tools (repeat for each key)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="The memory model that generates for every bank (default: each bank's "
            "generation_config.model, else gemini-2.5-flash)."
        ),
    ] = None,
) -> None:
    """Serve the REST API for the official SDK and ADK, the memory browser at /ui and MCP.

    On an embedded folder, adk-memory commands started on the folder go through this server.
    """
    try:
        import uvicorn  # noqa: F401 - checked here so that a missing extra is one line

        from adk_memory.server import ApiKeys
        from adk_memory.server import serve as run_server
    except ImportError as exc:
        _fail(
            f"the REST server needs {exc.name or 'fastapi and uvicorn'}. "
            "Install it with: pip install 'adk-memory[server]'"
        )
    _started()
    with _errors():
        keys_path = keys or api_keys_file()
        api_keys = ApiKeys.from_file(keys_path) if keys_path else None
        binding = _mcp_binding(mcp_bank, mcp_scope, api_keys) if mcp_bank else None
        if mcp_scope and not mcp_bank:
            raise InvalidArgument("--mcp-scope needs --mcp-bank.", field="--mcp-scope")
        run_server(
            uri or default_uri(),
            host=host,
            port=port,
            api_keys=api_keys,
            allowed_hosts=allowed_host or None,
            cors_origins=cors_origin or (),
            mcp=binding,
            generation_model=model,
        )


def _mcp_binding(bank: str, scope: list[str] | None, keys: Any) -> Any:
    """The MCP tools' bank and scope (`McpBinding`), checked before any store opens."""
    try:
        from adk_memory.server.mcp_server import McpBinding
    except ImportError as exc:
        _fail(
            f"the MCP server needs {exc.name or 'mcp'}. Install it with: "
            "pip install 'adk-memory[mcp]'"
        )
    bank_name = f"reasoningEngines/{_bank_id(_bank_name(bank))}"
    return McpBinding(bank_name, _pairs(scope, "--scope"), keys)


@app.command("mcp")
def mcp_command(
    bank: BankOption,
    uri: UriOption = None,
    scope: ScopeOption = None,
    transport: Annotated[
        str,
        typer.Option(
            help="stdio (desktop and IDE clients) or http (streamable, at /mcp; --host, --port "
            "and --keys apply to it)."
        ),
    ] = "stdio",
    host: HostOption = "127.0.0.1",
    port: PortOption = 8765,
    keys: KeysOption = None,
    allowed_host: AllowedHostOption = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="A memory model for remember_conversation (offered only with --model or a bank "
            "whose generation_config names one)."
        ),
    ] = None,
) -> None:
    """Serve the memories of one bank and scope to MCP clients (Claude Desktop, IDE agents)."""
    try:
        from adk_memory.server import ApiKeys
        from adk_memory.server.mcp_server import serve_mcp
    except ImportError as exc:
        _fail(
            f"the MCP server needs {exc.name or 'mcp'}. Install it with: "
            "pip install 'adk-memory[mcp]'"
        )
    if transport not in ("stdio", "http"):
        _fail("--transport is stdio or http")

    with _errors():
        keys_path = keys or (api_keys_file() if transport == "http" else None)
        api_keys = ApiKeys.from_file(keys_path) if keys_path else None
        binding = _mcp_binding(bank, scope, api_keys)  # before the store opens

    async def run(client: AsyncClient) -> None:
        await serve_mcp(
            client,  # type: ignore[arg-type]  # a RemoteAsyncClient is a virtual AsyncClient
            binding,
            transport=transport,  # type: ignore[arg-type]
            host=host,
            port=port,
            allowed_hosts=allowed_host or None,
        )

    options: dict[str, Any] = {"generation_model": model} if model else {}
    _run(uri, run, interrupt_ok=True, serving=True, **options)


@app.command()
def worker(
    uri: UriOption = None,
    poll_seconds: Annotated[float, typer.Option(help="Seconds between scans.")] = 1.0,
    once: Annotated[bool, typer.Option(help="Flush what is due once, then exit.")] = False,
) -> None:
    """Flush due ingest streams (IngestEvents) until stopped: the scheduler for deployments."""
    from adk_memory.scheduler import IngestScheduler

    async def work(client: AsyncClient) -> None:
        scheduler = IngestScheduler(client.engine, poll_seconds=poll_seconds)
        if once:
            changed = await scheduler.run_once()
            _stdout().print(f"Flushed due streams: {changed} memories changed.")
        else:
            _stdout().print(
                f"adk-memory worker on {_without_password(client.uri)}: flushing due ingest "
                "streams."
            )
            await scheduler.run_forever()

    _run(uri, work, interrupt_ok=True, serving=True)  # Ctrl-C is how a worker stops


# Banks


def _bank_row(bank: Any) -> list[str]:
    config = bank.managed_semantic_memory_config
    search = config.similarity_search_config if config else None
    return [
        _short(bank.name),
        bank.display_name or "",
        (search.embedding_model if search else None) or "",
        _when(bank.create_time),
    ]


def _print_banks(banks: list[Any], *, as_json: bool) -> None:
    if as_json:
        _print_json([_wire(bank) for bank in banks])
        return
    if not banks:
        _stdout().print("No memory banks.")
        return
    table = Table()
    for column in ("bank", "display name", "embedding model", "created"):
        table.add_column(column)
    for bank in banks:
        table.add_row(*(escape(cell) for cell in _bank_row(bank)))
    _stdout().print(table)


@banks_app.command("list")
def banks_list(uri: UriOption = None, as_json: JsonOption = False) -> None:
    """List the memory banks of the store."""

    async def work(client: AsyncClient) -> list[Any]:
        return [bank async for bank in await client.memory_banks.list()]

    _print_banks(_run(uri, work), as_json=as_json)


@banks_app.command("get")
def banks_get(bank: BankOption, uri: UriOption = None, as_json: JsonOption = False) -> None:
    """Show a bank and its configuration."""

    async def work(client: AsyncClient) -> Any:
        return await client.memory_banks.get(name=_bank_name(bank))

    found = _run(uri, work)
    if as_json:
        _print_json(_wire(found))
    else:
        _print_banks([found], as_json=False)
        config = found.managed_semantic_memory_config
        if config is not None:
            _stdout().print(escape(json.dumps(_wire(config), indent=2, ensure_ascii=False)))


@banks_app.command("create")
def banks_create(
    uri: UriOption = None,
    bank_id: Annotated[
        str | None, typer.Option("--id", help="A fixed bank id (default: a new numeric id).")
    ] = None,
    display_name: Annotated[str | None, typer.Option(help="A display name.")] = None,
    description: Annotated[str | None, typer.Option(help="A description.")] = None,
    embedding_model: Annotated[
        str | None,
        typer.Option(help="The bank's embedding model (default: all-MiniLM-L6-v2, offline)."),
    ] = None,
    config: Annotated[
        str | None,
        typer.Option(
            help="ManagedSemanticMemoryConfig as JSON, or @FILE with it (topics, TTLs, …)."
        ),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a memory bank."""

    async def work(client: AsyncClient) -> Any:
        managed: dict[str, Any] = {}
        if config:
            text = Path(config[1:]).read_text("utf-8") if config.startswith("@") else config
            try:
                managed = json.loads(text)
            except json.JSONDecodeError as exc:
                raise InvalidArgument(
                    f"--config is not JSON (line {exc.lineno}, column {exc.colno}).",
                    field="--config",
                ) from None
        if embedding_model:
            search = dict(managed.get("similarity_search_config") or {})
            search["embedding_model"] = embedding_model
            managed["similarity_search_config"] = search
        return await client.memory_banks.create(
            managed_semantic_memory_config=managed,
            config={"display_name": display_name, "description": description},
            memory_bank_id=bank_id,
        )

    created = _run(uri, work)
    if as_json:
        _print_json(_wire(created))
    else:
        _stdout().print(f"Created bank {escape(_short(created.name))}.")


@banks_app.command("delete")
def banks_delete(
    bank: BankOption,
    uri: UriOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Also delete its memories, revisions and streams.")
    ] = False,
) -> None:
    """Delete a bank (one that holds memories needs --force)."""

    async def work(client: AsyncClient) -> None:
        await client.memory_banks.delete(name=_bank_name(bank), force=force)

    _run(uri, work)
    _stdout().print(f"Deleted bank {escape(_short(bank))}.")


@banks_app.command("set-aside")
def banks_set_aside(
    uri: UriOption = None,
    bank: Annotated[
        str | None, typer.Option("--bank", "-b", help="Only this bank (default: every bank).")
    ] = None,
    discard: Annotated[
        str | None,
        typer.Option(help="Delete this set-aside batch (its report and kept journal); needs -b."),
    ] = None,
    as_json: JsonOption = False,
) -> None:
    """List write batches the store set aside instead of completing them (Chroma's journal)."""
    from adk_memory.store import discard_set_aside, set_aside_batches

    async def work(client: AsyncClient) -> list[tuple[str, dict[str, Any]]]:
        store = client.engine.store
        if discard is not None:
            if bank is None:
                raise InvalidArgument("--discard needs --bank.", field="--discard")
            bank_id = _bank_id(_bank_name(bank))
            await client.memory_banks.get(name=_bank_name(bank))  # NotFound for a missing bank
            if not await discard_set_aside(store, bank_id, discard):
                raise InvalidArgument(
                    f"Bank {bank_id!r} has no set-aside batch {discard[:80]!r}; list them with "
                    f"`adk-memory banks set-aside -b {bank_id}`.",
                    field="--discard",
                )
            return []
        if bank is not None:
            await client.memory_banks.get(name=_bank_name(bank))
            bank_ids = [_bank_id(_bank_name(bank))]
        else:
            bank_ids = [record.bank_id for record in await store.list_banks()]
        return [
            (bank_id, report)
            for bank_id in bank_ids
            for report in await set_aside_batches(store, bank_id)
        ]

    found = _run(uri, work)
    if discard is not None:
        _stdout().print(f"Discarded set-aside batch {escape(discard)}.")
        return
    if as_json:
        _print_json([{"bank": bank_id, **report} for bank_id, report in found])
        return
    if not found:
        _stdout().print("No set-aside batches.")
        return
    table = Table()
    for column in ("bank", "batch", "journaled", "set aside", "memories", "deletions", "reason"):
        table.add_column(column)
    for bank_id, report in found:
        cells = [
            bank_id,
            str(report.get("batch_id", "")),
            str(report.get("journaled_at") or ""),
            str(report.get("set_aside_at") or ""),
            str(report.get("memories", "")),
            str(report.get("deletions", "")),
            str(report.get("reason", "")),
        ]
        table.add_row(*(escape(cell) for cell in cells))
    _stdout().print(table)


# Memories


@memories_app.command("list")
def memories_list(
    bank: BankOption,
    uri: UriOption = None,
    scope: ScopeOption = None,
    filter: FilterOption = None,
    order_by: Annotated[
        str | None, typer.Option(help="create_time or update_time, optionally 'desc'.")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many memories (0: all of them).")] = 100,
    as_json: JsonOption = False,
) -> None:
    """List a bank's memories (all scopes, or the memories whose scope has the given entries)."""

    async def work(client: AsyncClient) -> list[Any]:
        expr = _scope_filter(_scope(scope, required=False), filter)
        page_size = min(limit, 1000) if limit > 0 else 1000
        pager = await client.memory_banks.memories.list(
            name=_bank_name(bank),
            config={"filter": expr, "order_by": order_by, "page_size": page_size},
        )
        found: list[Any] = []
        async for memory in pager:
            found.append(memory)
            if limit > 0 and len(found) >= limit:
                break
        return found

    _print_memories(_run(uri, work), as_json=as_json)


@memories_app.command("get")
def memories_get(
    memory: Annotated[str, typer.Argument(help="The memory id (with --bank) or its full name.")],
    bank: Annotated[str | None, typer.Option("--bank", "-b", help="The bank.")] = None,
    uri: UriOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show one memory."""

    async def work(client: AsyncClient) -> Any:
        return await client.memory_banks.memories.get(name=_memory_name(bank, memory))

    _print_memory(_run(uri, work), as_json=as_json)


@memories_app.command("create")
def memories_create(
    fact: Annotated[str, typer.Argument(help="The fact to remember.")],
    bank: BankOption,
    uri: UriOption = None,
    scope: ScopeOption = None,
    memory_id: Annotated[str | None, typer.Option("--id", help="A fixed memory id.")] = None,
    topic: Annotated[
        list[str] | None,
        typer.Option(help="A managed topic (USER_PREFERENCES, …) or a custom label; repeat."),
    ] = None,
    metadata: Annotated[
        list[str] | None, typer.Option(help="A string metadata entry KEY=VALUE; repeat.")
    ] = None,
    ttl: Annotated[str | None, typer.Option(help="Time to live, e.g. 3600s.")] = None,
    display_name: Annotated[str | None, typer.Option(help="A display name.")] = None,
    as_json: JsonOption = False,
) -> None:
    """Create a memory in a scope."""

    async def work(client: AsyncClient) -> Any:
        config: dict[str, Any] = {
            "memory_id": memory_id,
            "topics": _topics(topic),
            "metadata": {
                key: {"string_value": value}
                for key, value in _pairs(metadata, "--metadata").items()
            }
            or None,
            "ttl": ttl,
            "display_name": display_name,
        }
        operation = await client.memory_banks.memories.create(
            name=_bank_name(bank),
            fact=fact,
            scope=_scope(scope, required=True),
            config={key: value for key, value in config.items() if value is not None},
        )
        return operation.response

    _print_memory(_run(uri, work, embeds=True), as_json=as_json)


@memories_app.command("delete")
def memories_delete(
    memory: Annotated[str, typer.Argument(help="The memory id (with --bank) or its full name.")],
    bank: Annotated[str | None, typer.Option("--bank", "-b", help="The bank.")] = None,
    uri: UriOption = None,
) -> None:
    """Delete a memory (its revisions stay until they expire)."""

    async def work(client: AsyncClient) -> None:
        await client.memory_banks.memories.delete(name=_memory_name(bank, memory))

    _run(uri, work)
    _stdout().print(f"Deleted memory {escape(_short(memory))}.")


@memories_app.command("retrieve")
def memories_retrieve(
    bank: BankOption,
    uri: UriOption = None,
    scope: ScopeOption = None,
    query: Annotated[
        str | None,
        typer.Option("--query", "-q", help="Search by similarity to this text (else: all)."),
    ] = None,
    top_k: Annotated[int, typer.Option(help="How many nearest memories (with --query).")] = 3,
    filter: FilterOption = None,
    as_json: JsonOption = False,
) -> None:
    """Retrieve the memories of exactly one scope, by similarity or newest first."""

    async def work(client: AsyncClient) -> list[Any]:
        params = {"search_query": query, "top_k": top_k} if query is not None else None
        pager = await client.memory_banks.memories.retrieve(
            name=_bank_name(bank),
            scope=_scope(scope, required=True),
            similarity_search_params=params,
            config={"filter": filter} if filter else None,
        )
        return [hit async for hit in pager]  # every page of a retrieve-all

    hits = _run(uri, work, embeds=query is not None)
    if as_json:
        _print_json([_wire(hit) for hit in hits])
    elif not hits:
        _stdout().print("No memories in that scope.")
    else:
        memories = [hit.memory for hit in hits]
        _stdout().print(_memory_table(memories, distances=[hit.distance for hit in hits]))


@memories_app.command("purge")
def memories_purge(
    bank: BankOption,
    uri: UriOption = None,
    scope: ScopeOption = None,
    filter: FilterOption = None,
    force: Annotated[
        bool, typer.Option("--force", help="Delete them (without it, only count them).")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Count (default) or delete (--force) the memories a filter and/or scope entries select."""

    async def work(client: AsyncClient) -> int:
        expr = _scope_filter(_scope(scope, required=False), filter)
        operation = await client.memory_banks.memories.purge(
            name=_bank_name(bank), filter=expr, force=force
        )
        return int(operation.response.purge_count or 0)

    count = _run(uri, work)
    if as_json:
        _print_json({"purgeCount": count, "force": force})
    elif force:
        _stdout().print(f"Deleted {count} memories.")
    else:
        _stdout().print(f"Would delete {count} memories (add --force to delete them).")


# Revisions and rollback


@streams_app.command("list")
def streams_list(
    bank: BankOption,
    uri: UriOption = None,
    failed: Annotated[
        bool, typer.Option("--failed", help="Only streams whose last generation failed.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """List a bank's streams with unflushed events: pending, failures, last error, next retry."""

    async def work(client: AsyncClient) -> list[Any]:
        return await client.memory_banks.list_streams(name=_bank_name(bank))

    streams = [stream for stream in _run(uri, work) if stream.failures or not failed]
    if as_json:
        _print_json([stream.to_json() for stream in streams])
        return
    if not streams:
        _stdout().print("No streams hold unflushed events.")
        return
    table = Table()
    for column in ("key", "scope", "stream", "pending", "failures", "next retry", "last error"):
        table.add_column(column, no_wrap=column not in ("scope", "last error"))
    for stream in streams:
        table.add_row(
            *(
                escape(cell)
                for cell in (
                    stream.key[:12],
                    _scope_text(stream.scope),
                    stream.stream_id,
                    str(stream.pending_events),
                    str(stream.failures),
                    stream.retry_after or "",
                    stream.last_error or "",
                )
            )
        )
    _stdout().print(table)


@streams_app.command("retry")
def streams_retry(
    key: Annotated[
        str, typer.Argument(help="The stream's key (or its first characters), as listed.")
    ],
    bank: BankOption,
    uri: UriOption = None,
) -> None:
    """Generate from a stream's events now, whatever its back-off; print the outcome."""

    async def work(client: AsyncClient) -> int:
        name = _bank_name(bank)
        keys = [stream.key for stream in await client.memory_banks.list_streams(name=name)]
        matches = [found for found in keys if found.startswith(key)]
        if len(matches) != 1:
            _fail(f"{len(matches)} streams with unflushed events match {key!r}; give a longer key.")
        return await client.memory_banks.flush_stream(name=name, key=matches[0])

    changed = _run(uri, work)
    _stdout().print(f"Generated from the stream: {changed} memories created or changed.")


@revisions_app.command("list")
def revisions_list(
    memory: Annotated[str, typer.Argument(help="The memory id (with --bank) or its full name.")],
    bank: Annotated[str | None, typer.Option("--bank", "-b", help="The bank.")] = None,
    uri: UriOption = None,
    filter: FilterOption = None,
    as_json: JsonOption = False,
) -> None:
    """List a memory's revisions, newest first (also of a deleted memory)."""

    async def work(client: AsyncClient) -> list[Any]:
        pager = await client.memory_banks.memories.revisions.list(
            name=_memory_name(bank, memory), config={"filter": filter} if filter else None
        )
        return [revision async for revision in pager]

    revisions = _run(uri, work)
    if as_json:
        _print_json([_wire(revision) for revision in revisions])
        return
    if not revisions:
        _stdout().print("No revisions.")
        return
    table = Table()
    for column in ("revision", "created", "expires", "fact"):
        table.add_column(column, no_wrap=column != "fact")
    for revision in revisions:
        table.add_row(
            *(
                escape(cell)
                for cell in (
                    _short(revision.name),
                    _when(revision.create_time),
                    _when(revision.expire_time),
                    revision.fact or "(deleted)",
                )
            )
        )
    _stdout().print(table)


@app.command()
def rollback(
    memory: Annotated[str, typer.Argument(help="The memory id (with --bank) or its full name.")],
    revision: Annotated[str, typer.Argument(help="The revision id to restore.")],
    bank: Annotated[str | None, typer.Option("--bank", "-b", help="The bank.")] = None,
    uri: UriOption = None,
    as_json: JsonOption = False,
) -> None:
    """Restore a revision of a memory (recreating it if it was deleted)."""

    async def work(client: AsyncClient) -> Any:
        name = _memory_name(bank, memory)
        await client.memory_banks.memories.rollback(name=name, target_revision_id=revision)
        return await client.memory_banks.memories.get(name=name)

    _print_memory(_run(uri, work), as_json=as_json)


# Generate


def _event(data: Any, where: str) -> dict[str, Any]:
    """One conversation event in the `direct_contents_source.events` form."""
    if isinstance(data, dict):
        if "content" in data:
            return {"content": data["content"]}
        if "parts" in data:
            return {"content": data}
        if isinstance(data.get("text"), str):
            role = data.get("role") or "user"
            return {"content": {"role": role, "parts": [{"text": data["text"]}]}}
    raise InvalidArgument(
        f"{where}: an event needs `content` (an ADK or Memory Bank event), `parts` (a Content) "
        "or `text` (with an optional `role`).",
        field="FILE",
    )


def _read_events(path: str) -> list[dict[str, Any]]:
    """A conversation from a JSON file (events, a list, or {"events": […]}) or JSON Lines."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text("utf-8")
    numbered: list[tuple[str, Any]] = []
    try:
        whole = json.loads(text)
    except json.JSONDecodeError:
        for number, line in enumerate(text.splitlines(), start=1):
            if not line.strip():
                continue
            try:
                numbered.append((f"line {number}", json.loads(line)))
            except json.JSONDecodeError as exc:
                raise InvalidArgument(
                    f"line {number} of the conversation is not JSON (column {exc.colno}).",
                    field="FILE",
                ) from None
    else:
        if isinstance(whole, dict):
            source = whole.get("direct_contents_source") or whole.get("directContentsSource")
            holder = source if isinstance(source, dict) else whole
            whole = holder["events"] if isinstance(holder.get("events"), list) else [whole]
        if not isinstance(whole, list):
            raise InvalidArgument("The conversation must be JSON events.", field="FILE")
        numbered = [(f"event {index}", event) for index, event in enumerate(whole, start=1)]
    if not numbered:
        raise InvalidArgument("The conversation holds no events.", field="FILE")
    return [_event(event, where) for where, event in numbered]


@app.command()
def generate(
    file: Annotated[
        str, typer.Argument(help="The conversation: JSON or JSON Lines events ('-': stdin).")
    ],
    bank: BankOption,
    uri: UriOption = None,
    scope: ScopeOption = None,
    model: Annotated[
        str | None,
        typer.Option(help="The memory model (default: the bank's, else gemini-2.5-flash)."),
    ] = None,
    disable_consolidation: Annotated[
        bool, typer.Option(help="Add every extracted fact as a new memory.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Generate memories from a conversation: extraction, then consolidation."""

    async def work(client: AsyncClient) -> Any:
        events = _read_events(file)
        config = {"disable_consolidation": True} if disable_consolidation else None
        return await client.memory_banks.memories.generate(
            name=_bank_name(bank),
            scope=_scope(scope, required=True),
            direct_contents_source={"events": events},
            config=config,
        )

    options: dict[str, Any] = {"generation_model": model} if model else {}
    operation = _run(uri, work, **options)
    if as_json:
        _print_json(_wire(operation))
        return
    generated = list(operation.response.generated_memories or ()) if operation.response else []
    if not generated:
        _stdout().print("Nothing to remember in that conversation.")
    else:
        table = Table()
        for column in ("action", "memory", "fact"):
            table.add_column(column, no_wrap=column != "fact")
        for item in generated:
            action = getattr(item.action, "value", item.action)
            table.add_row(
                escape(str(action)),
                escape(_short(item.memory.name)),
                escape(item.memory.fact or ""),
            )
        _stdout().print(table)
    usage = operation.metadata or {}
    _err.print(
        f"{usage.get('llmCalls', 0)} model calls, {usage.get('promptTokens', 0)} prompt and "
        f"{usage.get('outputTokens', 0)} output tokens."
    )


# Export, import, reembed


@app.command("export")
def export_command(
    bank: BankOption,
    uri: UriOption = None,
    output: Annotated[
        str, typer.Option("--output", "-o", help="The JSON Lines file to write ('-': stdout).")
    ] = "-",
    vectors: Annotated[
        bool, typer.Option("--vectors/--no-vectors", help="Include the vectors (exact).")
    ] = True,
    page_size: Annotated[int, typer.Option(help="Memories read per round trip.")] = 500,
    as_json: JsonOption = False,
) -> None:
    """Export a bank (config, memories, revisions, ingest streams) as JSON Lines."""
    from adk_memory.transfer import export_bank

    async def work(client: AsyncClient) -> Any:
        bank_id = _bank_id(_bank_name(bank))
        with contextlib.ExitStack() as stack:
            target: TextIO = (
                sys.stdout
                if output == "-"
                else stack.enter_context(Path(output).open("w", encoding="utf-8"))
            )
            bar = stack.enter_context(_progress())
            task = bar.add_task(f"exporting {bank_id}", total=None)

            def advance(done: int, total: int | None) -> None:
                bar.update(task, completed=done, total=total)

            return await export_bank(
                client.engine,
                bank_id,
                target.write,
                vectors=vectors,
                page_size=page_size,
                progress=advance if _err.is_terminal else None,  # a count costs a full scan
            )

    summary = _run(uri, work)
    _summary(summary, "Exported", as_json=as_json)


def _summary(summary: Any, verb: str, *, as_json: bool) -> None:
    if as_json:
        _print_json(
            {
                "bank": summary.bank_id,
                "memories": summary.memories,
                "revisions": summary.revisions,
                "documents": summary.documents,
                "reembedded": summary.reembedded,
            }
        )
        return
    _err.print(
        f"{verb} bank {escape(summary.bank_id)}: {summary.memories} memories, "
        f"{summary.revisions} revisions, {summary.documents} ingest streams"
        + (f", {summary.reembedded} re-embedded." if summary.reembedded else ".")
    )


@app.command("import")
def import_command(
    file: Annotated[str, typer.Argument(help="The JSON Lines export ('-': stdin).")],
    uri: UriOption = None,
    bank: Annotated[
        str | None, typer.Option("--bank", "-b", help="Import under this id instead.")
    ] = None,
    merge: Annotated[
        bool,
        typer.Option(help="Write into an existing bank (also resumes an interrupted import)."),
    ] = False,
    embedding_model: Annotated[
        str | None,
        typer.Option(help="Re-embed every fact with this model instead of the file's vectors."),
    ] = None,
    reembed: Annotated[
        bool,
        typer.Option(
            "--reembed",
            help="Embed the facts whose vector does not match them (edited since the export, or "
            "an export without digests) instead of refusing the file.",
        ),
    ] = False,
    batch_size: Annotated[int, typer.Option(help="Records written per batch.")] = 1000,
    as_json: JsonOption = False,
) -> None:
    """Import a bank exported with `adk-memory export`, exactly (names, times, revisions).

    Every line is checked; a failed import into a new bank removes the bank.
    """
    from adk_memory.transfer import import_bank

    async def work(client: AsyncClient) -> Any:
        target = _bank_id(_bank_name(bank)) if bank else None
        with contextlib.ExitStack() as stack:
            source: TextIO = (
                sys.stdin if file == "-" else stack.enter_context(Path(file).open(encoding="utf-8"))
            )
            total = _memory_lines(Path(file)) if file != "-" and _err.is_terminal else None
            bar = stack.enter_context(_progress())
            task = bar.add_task("importing memories", total=total)
            return await import_bank(
                client.engine,
                source,
                bank_id=target,
                merge=merge,
                embedding_model=embedding_model,
                reembed=reembed,
                batch_size=batch_size,
                progress=lambda imported, _: bar.update(task, completed=imported),
            )

    summary = _run(uri, work)
    _summary(summary, "Imported", as_json=as_json)


@app.command()
def reembed(
    bank: BankOption,
    uri: UriOption = None,
    model: Annotated[
        str | None, typer.Option("--model", "-m", help="The new embedding model.")
    ] = None,
    batch_size: Annotated[int, typer.Option(help="Memories per embedding request.")] = 256,
    switch: Annotated[
        bool,
        typer.Option(
            "--switch/--no-switch",
            help="Switch the bank to the new vectors once computed (--no-switch: compute only).",
        ),
    ] = True,
    status: Annotated[
        bool, typer.Option("--status", help="Show the re-embedding under way, if any.")
    ] = False,
    abort: Annotated[
        bool, typer.Option("--abort", help="Cancel a re-embedding that has not switched yet.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Change a bank's embedding model: recompute every vector, resumably, then switch."""
    from adk_memory.engine.reembed import Reembedder

    async def work(client: AsyncClient) -> Any:
        bank_id = _bank_id(_bank_name(bank))
        reembedder = Reembedder(client.engine, batch_size=batch_size)
        if status:
            return await reembedder.status(bank_id)
        if abort:
            return await reembedder.abort(bank_id)
        if not model:
            raise InvalidArgument(
                "--model is required: the new embedding model, e.g. --model text-embedding-005.",
                field="--model",
            )
        with _progress() as bar:
            tasks: dict[str, TaskID] = {}

            def advance(phase: str, done: int, total: int | None) -> None:
                if phase not in tasks:
                    tasks[phase] = bar.add_task(f"{phase} {bank_id}", total=total)
                bar.update(tasks[phase], completed=done, total=total)

            return await reembedder.run(bank_id, model, switch=switch, progress=advance)

    result = _run(uri, work)
    if abort:
        _stdout().print("Cancelled the re-embedding." if result else "No re-embedding under way.")
        return
    if result is None:
        _stdout().print("No re-embedding under way.") if not as_json else _print_json(None)
        return
    if as_json:
        _print_json(
            {
                "bank": result.bank_id,
                "sourceModel": result.source_model,
                "targetModel": result.target_model,
                "dimension": result.dimension,
                "phase": result.phase,
                "embedded": result.embedded,
                "total": result.total,
                "started": result.started.isoformat(),
            }
        )
    elif result.phase == "done":
        _stdout().print(
            f"Bank {escape(result.bank_id)} now uses {escape(result.target_model)} "
            f"({result.dimension} dimensions): {result.embedded} memories re-embedded."
        )
    else:
        _stdout().print(
            f"Re-embedding of bank {escape(result.bank_id)} from {escape(result.source_model)} "
            f"to {escape(result.target_model)}: {result.phase}, {result.embedded} of about "
            f"{result.total} memories embedded. Reads use the old vectors until the switch; run "
            "`adk-memory reembed --model MODEL` again to continue."
        )


if __name__ == "__main__":
    app()
