"""The worker processes of the multi-process reliability tests: `reliability_support` forks
each from its server process and runs `run_job` there (never imported by the tests themselves).

Modes: `mixed` (create the memory id `same-id`, then `count` times: one generate on the shared
scope and one on the worker's own scope, each updating that scope's single memory), `hold_lock`
(take a Redis lock and hang), `hold_folder` (open an embedded Chroma directory, write one memory
and hang), `embedded` (write `count` memories into an embedded Chroma directory, waiting while
another process holds it), `schedule` (run an ingest scheduler for `seconds`), `produce`
(the same while ingesting events into several streams) and `serve` (`adk-memory serve` over an
embedded folder on a given port, whose memory model or store can hang on purpose, telling the
parent, so that it can be killed mid-call). Each calls `started` once connected (the `hold_*`
and `serve` modes once holding): it tells the parent and waits for its signal, so that the
parent can release several at once.
"""

from __future__ import annotations

import asyncio
import time
import traceback
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

Started = Callable[[], None]
"""Called by a worker once connected: tells the parent and waits for its start signal."""
Say = Callable[[dict[str, Any]], None]
"""Sends the parent a message (`serve`: what the server is doing when it hangs)."""


def consolidate_append(request: Any) -> dict[str, Any]:
    """UPDATE the only candidate by appending the new fact's last word; CREATE if none."""
    from adk_memory.testing.models import ScriptedMemoryModel

    text = ScriptedMemoryModel().prompt_text(request)
    new_fact = text.split('[0] {"fact": "')[1].split('"')[0]
    token = new_fact.split()[-1]
    if "id=" not in text:
        return {"actions": [{"fact_index": 0, "action": "CREATE", "fact": f"tokens +{token}"}]}
    memory_id = text.split("id=")[1].split(":")[0]
    old = text.split("id=")[1].split(': "')[1].split('"')[0]
    return {
        "actions": [
            {"fact_index": 0, "action": "UPDATE", "memory_id": memory_id, "fact": f"{old} +{token}"}
        ]
    }


async def embedded(args: dict[str, Any], started: Started) -> dict[str, Any]:
    """Writes `count` memories into an embedded Chroma directory, in one session of its own.

    While another process holds the directory, each attempt is refused with FailedPrecondition;
    the worker then waits and tries again (until `seconds` have passed).
    """
    from adk_memory import AsyncClient, FailedPrecondition

    started()
    deadline = time.monotonic() + args["seconds"]
    refusals: list[str] = []
    while True:
        try:
            async with AsyncClient(
                args["uri"], embedding_model="hash-64", run_scheduler=False
            ) as client:
                for index in range(args["count"]):
                    await client.memory_banks.memories.create(
                        name=args["bank"],
                        fact=f"{args['tag']} fact {index}",
                        scope={"user_id": args["tag"]},
                        config={"memory_id": f"{args['tag']}-{index}"},
                    )
            return {"refusals": len(refusals), "messages": refusals[:1]}
        except FailedPrecondition as exc:
            refusals.append(exc.message)
            if time.monotonic() > deadline:
                return {"refusals": len(refusals), "messages": refusals[:1], "gave_up": True}
            await asyncio.sleep(0.05)


async def ingest_work(args: dict[str, Any], started: Started) -> dict[str, Any]:
    """`schedule`: runs the client's ingest scheduler for `seconds` (`schedule_for`); `produce`:
    the same while ingesting the events of `reliability_support.produce_events`."""
    from reliability_support import EchoModel, produce_events, schedule_for

    from adk_memory import AsyncClient

    model = EchoModel()
    async with AsyncClient(
        args["uri"], embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as client:
        await client.memory_banks.get(name=args["bank"])
        started()
        if args["mode"] == "schedule":
            passes = await schedule_for(client, args["seconds"])
            return {"seen": model.seen, "passes": passes, "flushes": _extractions(model)}
        streams = [(scope, stream_id) for scope, stream_id in args["streams"]]
        sent, passes = await asyncio.gather(
            produce_events(client, args["bank"], streams, args["per_stream"], args["seed"]),
            schedule_for(client, args["seconds"]),
        )
    return {"sent": sent, "seen": model.seen, "passes": passes, "flushes": _extractions(model)}


async def serve(args: dict[str, Any], started: Started, say: Say) -> dict[str, Any]:
    """`adk-memory serve` over `uri` on 127.0.0.1:`port` until killed.

    `hang` chooses where a request stops for good, after telling the parent: `model` (in the
    memory model's call, before anything is written) or `after_commit` (once a store write has
    committed, before the answer is sent).
    """
    import uvicorn

    from adk_memory import AsyncClient
    from adk_memory.server import create_app
    from adk_memory.testing.models import ScriptedMemoryModel

    async def hang(kind: str) -> None:
        say({"hanging": kind})
        await asyncio.sleep(3600)

    model = ScriptedMemoryModel(
        extract=lambda request: {"memories": [{"fact": "I like green tea."}]},
        consolidate=lambda request: {"actions": [{"fact_index": 0, "action": "CREATE"}]},
        on_call=hang if args.get("hang") == "model" else None,
    )
    client = AsyncClient(args["uri"], embedding_model="hash-64", generation_model=model)
    if args.get("hang") == "after_commit":
        store, apply = client.engine.store, client.engine.store.apply

        async def apply_then_hang(bank_id: str, batch: Any) -> None:
            await apply(bank_id, batch)
            await hang("after_commit")

        store.apply = apply_then_hang  # type: ignore[method-assign]
    url = f"http://127.0.0.1:{args['port']}"
    app = create_app(client, served_url=url)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=args["port"], log_level="warning")
    )
    serving = asyncio.get_running_loop().create_task(server.serve())
    while not server.started:
        assert not serving.done(), "the server did not start"
        await asyncio.sleep(0.02)
    started()
    await serving
    return {}


def _extractions(model: Any) -> int:
    return sum(1 for request in model.requests if model.kind_of(request) == "extraction")


async def main(args: dict[str, Any], started: Started, say: Say) -> dict[str, Any]:
    from adk_memory import AdkMemoryError, AsyncClient
    from adk_memory.testing.models import ScriptedMemoryModel

    mode = args["mode"]
    if mode == "serve":
        return await serve(args, started, say)
    if mode == "hold_lock":
        from adk_memory_redis import RedisLockProvider

        provider = RedisLockProvider.from_uri(args["redis_url"])
        await provider.acquire(args["name"], lease_seconds=args["lease"])
        started()
        await asyncio.sleep(3600)
        return {}
    if mode == "hold_folder":
        async with AsyncClient(args["uri"], embedding_model="hash-64", run_scheduler=False) as c:
            await c.memory_banks.memories.create(
                name=args["bank"], fact="held", scope={"user_id": "holder"}
            )
            started()
            await asyncio.sleep(3600)
        return {}
    if mode == "embedded":
        return await embedded(args, started)
    if mode in ("produce", "schedule"):
        return await ingest_work(args, started)
    model = ScriptedMemoryModel(consolidate=consolidate_append)
    async with AsyncClient(
        args["uri"], embedding_model="hash-64", generation_model=model, run_scheduler=False
    ) as client:
        await client.memory_banks.get(name=args["bank"])  # connect before the start signal
        started()  # the parent releases every worker at once
        began_all = time.perf_counter()
        latencies: dict[str, list[float]] = {"create": [], "shared": [], "own": []}
        errors: dict[str, list[str]] = {"create": [], "shared": [], "own": []}

        async def timed(kind: str, call: Any) -> None:
            began = time.perf_counter()
            try:
                await call
            except AdkMemoryError as exc:
                errors[kind].append(type(exc).__name__)
            latencies[kind].append(time.perf_counter() - began)

        memories = client.memory_banks.memories
        await timed(
            "create",
            memories.create(
                name=args["bank"],
                fact=f"created by {args['tag']}",
                scope={"user_id": "dup"},
                config={"memory_id": "same-id"},
            ),
        )
        for index in range(args["count"]):
            for kind, scope in (("shared", {"user_id": "shared"}), ("own", args["own_scope"])):
                source = {"direct_memories": [{"fact": f"token {args['tag']}i{index}"}]}
                await timed(
                    kind,
                    memories.generate(
                        name=args["bank"], scope=scope, direct_memories_source=source
                    ),
                )
        return {
            "latencies": latencies,
            "errors": errors,
            "seconds": time.perf_counter() - began_all,
        }


def run_job(job: dict[str, Any], parent: Connection) -> None:
    """Runs `job` in this process, talking to the parent over `parent`: `{"ready": true}`, then
    (after its signal) `{"result": …}`, or `{"error": traceback}` when the job raised."""

    def started() -> None:
        parent.send({"ready": True})
        parent.recv()

    try:
        parent.send({"result": asyncio.run(main(job, started, parent.send))})
    except BaseException:
        parent.send({"error": traceback.format_exc()})
        raise
