"""What memory costs ADK turns with many users at once, on a hung store, and at start-up (issue 29).

Run: `python -m benchmarks.adk_users [--users 20] [--rounds 3] [--only users,hung,startup]`.
Models are scripted (no network, no keys); the embedder is the default all-MiniLM-L6-v2 unless
`--embedder hash-64`. Every setup runs in a process of its own (one `Runner`, one process).

* `users`    N users at once on one `Runner`: each user's session 1 states a fact and chats once,
             then session 2 asks for the fact (a new session: it waits for the user's memories)
             and follows up. p50 per turn, and what it adds over the same turns with no memory
             service, for: the plugin and ADK's callback pattern (after-agent
             `add_session_to_memory` + `PreloadMemoryTool`) on `MemoryBankService` (embedded
             Chroma, Redis, memory://), and ADK's own InMemory and Sqlite services. Checked on
             every run: each user's session 2 saw its own fact and nobody else's (isolation), and
             each user ends with exactly one memory (exactly once).
* `hung`     a Redis that accepts connections and never answers (a TCP listener), then heals
             (forwards to a real Redis): the first and the later turns' added time while it
             hangs, the plugin and the callback pattern, and how long after healing the
             memories come back.
* `startup`  `adk api_server` with `--memory_service_uri=chroma://…`: the first request's time
             against the second's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

COLOURS = [
    "amber", "azure", "beige", "coral", "crimson", "cyan", "emerald", "fuchsia", "gold", "indigo",
    "ivory", "jade", "khaki", "lavender", "lilac", "magenta", "maroon", "mauve", "navy", "ochre",
    "olive", "orchid", "peach", "plum", "rose", "ruby", "saffron", "salmon", "scarlet", "sepia",
    "sienna", "silver", "tan", "teal", "turquoise", "umber", "violet", "wheat", "coffee", "mint",
]  # fmt: skip
APP = "bench"

# One setup in its own process: prints one JSON line of its samples.


def _extract(request: Any) -> dict[str, Any]:
    from adk_memory.testing.models import ScriptedMemoryModel

    conversation = ScriptedMemoryModel.prompt_text(request).split("</conversation>")[-2]
    found = re.findall(r"My favourite colour is (\w+)\.", conversation)
    facts = [f"The user's favourite colour is {colour}." for colour in dict.fromkeys(found)]
    return {"memories": [{"fact": fact, "topics": ["USER_PREFERENCES"]} for fact in facts]}


def _create_each_new_fact(request: Any) -> dict[str, Any]:
    from adk_memory.testing.models import ScriptedMemoryModel

    text = ScriptedMemoryModel.prompt_text(request)
    indexes = sorted({int(found) for found in re.findall(r"^\[(\d+)\] ", text, re.MULTILINE)})
    return {"actions": [{"fact_index": index, "action": "CREATE"} for index in indexes]}


def _service(kind: str, uri: str, embedder: str) -> Any:
    from google.adk.memory import InMemoryMemoryService

    from adk_memory.testing.models import ScriptedMemoryModel

    if kind == "none":
        return None
    if kind == "adk-inmemory":
        return InMemoryMemoryService()
    if kind == "adk-sqlite":
        from google.adk.memory import SqliteMemoryService

        return SqliteMemoryService(db_path=uri)
    from adk_memory.adk import MemoryBankService

    model = ScriptedMemoryModel(extract=_extract, consolidate=_create_each_new_fact)
    return MemoryBankService(uri, embedding_model=embedder, generation_model=model)


def _runner(service: Any, pattern: str) -> tuple[Any, Any]:
    from google.adk.agents import LlmAgent
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.adk.tools.preload_memory_tool import PreloadMemoryTool

    from adk_memory.adk import MemoryBankPlugin
    from adk_memory.testing.agent_models import ScriptedAgentModel

    model = ScriptedAgentModel()
    tools: list[Any] = []
    callback = None
    if pattern == "callback":

        async def remember(callback_context: Any) -> None:
            await callback_context.add_session_to_memory()

        tools, callback = [PreloadMemoryTool()], remember
    agent = LlmAgent(
        name="bench", model=model, instruction="Help.", tools=tools, after_agent_callback=callback
    )
    plugins = [MemoryBankPlugin()] if pattern == "plugin" else []
    runner = Runner(
        app_name=APP,
        agent=agent,
        session_service=InMemorySessionService(),
        memory_service=service,
        plugins=plugins,
    )
    return runner, model


async def _turn(runner: Any, user: str, session: str, text: str) -> float:
    from google.genai import types

    message = types.Content(role="user", parts=[types.Part(text=text)])
    started = time.perf_counter()
    async for _ in runner.run_async(user_id=user, session_id=session, new_message=message):
        pass
    return time.perf_counter() - started


async def _user(
    runner: Any, user: str, colour: str, times: dict[str, list[float]], delay: float = 0.0
) -> None:
    await asyncio.sleep(delay)
    sessions = runner.session_service
    first = (await sessions.create_session(app_name=APP, user_id=user)).id
    times["first"].append(await _turn(runner, user, first, f"My favourite colour is {colour}."))
    times["warm"].append(await _turn(runner, user, first, "Thanks, that is all for now."))
    second = (await sessions.create_session(app_name=APP, user_id=user)).id
    times["new_session"].append(await _turn(runner, user, second, "What is my favourite colour?"))
    times["warm"].append(await _turn(runner, user, second, "And what goes well with it?"))


async def _one_setup(
    kind: str, pattern: str, uri: str, embedder: str, users: int, rounds: int, stagger: float
):
    from adk_memory.testing.agent_models import ScriptedAgentModel

    service = _service(kind, uri, embedder)
    runner, model = _runner(service, pattern)
    times: dict[str, list[float]] = {"first": [], "warm": [], "new_session": []}
    scratch: dict[str, list[float]] = {"first": [], "warm": [], "new_session": []}
    # Warm-up round (not timed): the embedder, the store's first use, ADK's first calls.
    await asyncio.gather(*(_user(runner, f"w{i}", COLOURS[i], scratch) for i in range(users)))
    for round_ in range(rounds):
        await asyncio.gather(
            *(
                _user(
                    runner,
                    f"r{round_}u{i}",
                    COLOURS[(i + round_) % len(COLOURS)],
                    times,
                    delay=stagger * i / users,
                )
                for i in range(users)
            )
        )
    checks: dict[str, Any] = {}
    if kind.startswith("bank"):
        await service.drain()
        wrong, counts = 0, []
        for round_ in range(rounds):
            for i in range(users):
                user = f"r{round_}u{i}"
                found = await service.search_memory(
                    app_name=APP, user_id=user, query="favourite colour", top_k=10
                )
                facts = [entry.content.parts[0].text for entry in found.memories]
                counts.append(len(facts))
                colour = COLOURS[(i + round_) % len(COLOURS)]
                wrong += sum(1 for fact in facts if colour not in fact)
        checks = {"memories_per_user": sorted(set(counts)), "foreign_memories": wrong}
    # Isolation as the model saw it: every session-2 question's request holds its own colour
    # and no other user's.
    leaks = missing = 0
    for request in model.requests:
        last = request.contents[-1].parts or [] if request.contents else []
        if not any(part.text == "What is my favourite colour?" for part in last):
            continue  # not a new session's question (nor its tool round)
        text = ScriptedAgentModel.request_text(request)
        seen = [c for c in COLOURS if re.search(rf"\b{c}\b", text)]
        if kind != "none":
            missing += not seen
            leaks += len(seen) > 1
    checks.update({"requests_with_foreign_colours": leaks, "questions_without_memory": missing})
    if service is not None and hasattr(service, "aclose"):
        await runner.close()
        await service.aclose()
    print(json.dumps({"times": times, "checks": checks}))


def _child(argv: list[str]) -> None:
    kind, pattern, uri, embedder, users, rounds, stagger = argv
    asyncio.run(_one_setup(kind, pattern, uri, embedder, int(users), int(rounds), float(stagger)))


def _run_child(*args: str, env: dict[str, str] | None = None, timeout: float = 1800) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.adk_users", "--child", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def _p50_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000 if values else float("nan")


def users_section(
    users: int, rounds: int, embedder: str, stores: list[str], stagger_ms: float = 0.0
) -> list[dict]:
    from adk_memory.testing._redis_server import redis_server

    rows = []
    with tempfile.TemporaryDirectory(prefix="adk-users-") as tmp, redis_server() as redis_url:
        uris = {
            "chroma": lambda tag: f"chroma://{tmp}/chroma-{tag}",  # a child process: the default
            "chroma-inline": lambda tag: f"chroma://{tmp}/chroma-{tag}?process=inline",
            "redis": lambda tag: f"{redis_url}?key_prefix=u{tag}",
            "memory": lambda tag: f"memory://users-{tag}",
        }
        setups: list[tuple[str, str, str, str]] = [("none", "none", "-", "no memory service")]
        for store in stores:
            for pattern in ("plugin", "callback"):
                setups.append(("bank", pattern, store, f"{pattern}, {store}"))
        setups += [
            ("adk-inmemory", "callback", "-", "ADK InMemoryMemoryService (callback)"),
            ("adk-sqlite", "callback", "sqlite", "ADK SqliteMemoryService (callback)"),
        ]
        base = None
        for index, (kind, pattern, store, label) in enumerate(setups):
            if store == "sqlite":
                uri = f"{tmp}/adk-{index}.db"
            elif store in uris:
                uri = uris[store](str(index))
            else:
                uri = "-"
            result = _run_child(
                kind, pattern, uri, embedder, str(users), str(rounds), str(stagger_ms / 1000)
            )
            times = result["times"]
            every = [t for values in times.values() for t in values]
            row = {
                "setup": label,
                "p50_all_ms": _p50_ms(every),
                "p50_new_session_ms": _p50_ms(times["new_session"]),
                "p50_warm_ms": _p50_ms(times["warm"]),
                "checks": result["checks"],
            }
            if base is None:
                base = row
            for key in ("all", "new_session", "warm"):
                row[f"added_{key}_ms"] = row[f"p50_{key}_ms"] - base[f"p50_{key}_ms"]
            rows.append(row)
            print(
                f"{label:42s} all {row['p50_all_ms']:7.0f} ms ({row['added_all_ms']:+6.0f}) | "
                f"new session {row['p50_new_session_ms']:7.0f} "
                f"({row['added_new_session_ms']:+6.0f}) | "
                f"warm {row['p50_warm_ms']:7.0f} ({row['added_warm_ms']:+6.0f}) | "
                f"{row['checks']}",
                flush=True,
            )
    return rows


async def _hung_setup(pattern: str, redis_url: str, embedder: str) -> dict[str, Any]:
    from adk_memory.adk import MemoryBankService
    from adk_memory.testing.models import ScriptedMemoryModel
    from adk_memory.testing.proxies import HangingProxy

    port = int(redis_url.rsplit(":", 1)[1].split("/")[0])
    proxy = HangingProxy(port)
    await proxy.start()
    model = ScriptedMemoryModel(extract=_extract, consolidate=_create_each_new_fact)
    prefix = f"h{pattern}{os.getpid()}"
    # Memories stored while the store is healthy, through a direct service.
    direct = MemoryBankService(
        f"{redis_url}?key_prefix={prefix}", embedding_model=embedder, generation_model=model
    )
    from google.adk.memory.memory_entry import MemoryEntry
    from google.genai import types

    fact = types.Content(
        role="user", parts=[types.Part(text="The user's favourite colour is teal.")]
    )
    await direct.add_memory(app_name=APP, user_id="h0", memories=[MemoryEntry(content=fact)])
    await direct.aclose()
    service = MemoryBankService(
        f"redis://127.0.0.1:{proxy.port}/0?key_prefix={prefix}",
        embedding_model=embedder,
        generation_model=model,
    )
    runner, agent_model = _runner(service, pattern)
    plain, _ = _runner(None, "none")
    sessions = runner.session_service
    healthy: list[float] = []
    for _ in range(5):
        session = (await plain.session_service.create_session(app_name=APP, user_id="p")).id
        healthy.append(await _turn(plain, "p", session, "What is my favourite colour?"))
    base = statistics.median(healthy)
    hung: list[float] = []
    for _ in range(8):
        session = (await sessions.create_session(app_name=APP, user_id="h0")).id
        hung.append(await _turn(runner, "h0", session, "What is my favourite colour?") - base)
    proxy.hung = False
    healed = time.perf_counter()
    back_after = None
    from adk_memory.testing.agent_models import ScriptedAgentModel

    while time.perf_counter() - healed < 90:
        session = (await sessions.create_session(app_name=APP, user_id="h0")).id
        await _turn(runner, "h0", session, "What is my favourite colour?")
        if "teal" in ScriptedAgentModel.request_text(agent_model.requests[-1]):
            back_after = time.perf_counter() - healed
            break
        await asyncio.sleep(0.5)
    await runner.close()
    await service.aclose()
    await proxy.stop()
    return {
        "first_turn_added_s": hung[0],
        "later_turns_added_ms": [round(t * 1000, 1) for t in hung[1:]],
        "memories_back_after_s": back_after,
    }


def hung_section(embedder: str) -> list[dict]:
    from adk_memory.testing._redis_server import redis_server

    rows = []
    with redis_server() as redis_url:
        for pattern in ("plugin", "callback"):
            result = _run_child("hung", pattern, redis_url, embedder, "0", "0", timeout=900)
            result["setup"] = pattern
            rows.append(result)
            print(f"hung store, {pattern:8s}: {result}", flush=True)
    return rows


# Start-up: `adk api_server`, first request against the second.

_AGENT = """
from google.adk.agents import LlmAgent
from adk_memory.testing.agent_models import ScriptedAgentModel
root_agent = LlmAgent(name="probe", model=ScriptedAgentModel(), instruction="Help.")
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _post(url: str, body: dict[str, Any]) -> Any:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return json.loads(response.read() or b"null")


def _api_server_requests(memory_uri: str | None, embedder: str) -> list[float]:
    """Seconds of the first three `/run` requests after `adk api_server` answers."""
    adk = shutil.which("adk") or str(Path(sys.executable).with_name("adk"))
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="adk-startup-") as tmp:
        agents = Path(tmp, "agents")
        (agents / "probe").mkdir(parents=True)
        (agents / "probe" / "__init__.py").write_text("from . import agent\n")
        (agents / "probe" / "agent.py").write_text(_AGENT)
        shutil.copy(repo / "sample_agents" / "services.yaml", agents / "services.yaml")
        port = _free_port()
        env = dict(os.environ)
        if embedder != "all-MiniLM-L6-v2":
            env["ADK_MEMORY_EMBEDDING_MODEL"] = embedder
        uri = [f"--memory_service_uri={memory_uri.format(tmp=tmp)}"] if memory_uri else []
        server = subprocess.Popen(
            [adk, "api_server", "--port", str(port), *uri, str(agents)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        base = f"http://127.0.0.1:{port}"
        times = []
        try:
            deadline = time.time() + 120
            while time.time() < deadline:
                try:
                    urllib.request.urlopen(f"{base}/list-apps", timeout=2).read()
                    break
                except OSError:
                    time.sleep(0.2)
            for index in range(3):
                session = _post(f"{base}/apps/probe/users/u{index}/sessions", {})
                started = time.perf_counter()
                _post(
                    f"{base}/run",
                    {
                        "app_name": "probe",
                        "user_id": f"u{index}",
                        "session_id": session["id"],
                        "new_message": {"role": "user", "parts": [{"text": "What do I like?"}]},
                    },
                )
                times.append(time.perf_counter() - started)
        finally:
            server.terminate()
            server.wait(timeout=30)
    return times


def startup_section(embedder: str) -> list[dict[str, Any]]:
    rows = []
    for label, uri in (
        ("ADK's in-memory service", None),
        ("MemoryBankService, embedded Chroma", "chroma://{tmp}/store"),
    ):
        first, second, third = _api_server_requests(uri, embedder)
        row = {
            "setup": label,
            "first_request_s": first,
            "second_request_s": second,
            "third_request_s": third,
            "first_minus_second_s": first - second,
        }
        rows.append(row)
        print(f"adk api_server, {label}: {row}", flush=True)
    return rows


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        if sys.argv[2] == "hung":
            pattern, redis_url, embedder = sys.argv[3:6]
            print(json.dumps(asyncio.run(_hung_setup(pattern, redis_url, embedder))))
        else:
            _child(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--embedder", default="all-MiniLM-L6-v2")
    parser.add_argument("--stores", default="chroma,chroma-inline,redis,memory")
    parser.add_argument("--only", default="users,hung,startup")
    parser.add_argument(
        "--stagger-ms",
        type=float,
        default=0.0,
        help="spread the users' starts of each round over this many ms (0: all at once)",
    )
    args = parser.parse_args()
    sections = args.only.split(",")
    results: dict[str, Any] = {}
    if "users" in sections:
        results["users"] = users_section(
            args.users, args.rounds, args.embedder, args.stores.split(","), args.stagger_ms
        )
    if "hung" in sections:
        results["hung"] = hung_section(args.embedder)
    if "startup" in sections:
        results["startup"] = startup_section(args.embedder)
    print(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
