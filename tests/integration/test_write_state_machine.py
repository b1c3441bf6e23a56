"""Concurrent writes against a serial model of Memory Bank (issue 14), on every backend.

A hypothesis `RuleBasedStateMachine` runs create / update / delete / rollback / purge / generate
(scripted consolidation) on a few ids and two scopes, one at a time or two at once
(`asyncio.gather`). After each step the bank's live memories must be a state the serial model
reaches by running the calls that succeeded in some order, each one valid where it runs (a
failed call, e.g. `Aborted`, must have changed nothing), and no fact may ever appear, as a
memory, a retrieval hit or a revision, in a scope other than the one it was written for.

Facts carry their scope's name, so a fact seen elsewhere is caught wherever it shows up.
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import random
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest
from google.adk.models.llm_request import LlmRequest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    rule,
    run_state_machine_as_test,
)

from adk_memory import AsyncClient
from adk_memory.errors import Aborted, AlreadyExists, InvalidArgument, NotFound
from adk_memory.reference_store import ReferenceMemoryStore
from adk_memory.testing.models import ScriptedMemoryModel

SCOPES = {"alice": {"user_id": "alice"}, "bob": {"user_id": "bob"}}
IDS = ("a", "b", LIVE := "live", LIVE, LIVE)
"""Chosen ids, and `live`: the newest live memory (often one a generate created)."""
EXAMPLES = {"memory": 100, "chroma": 3, "chroma_http": 3, "redis": 20}
"""Examples per backend: memory:// checks the engine; the others its stores' atomic checks (a
few examples, as each costs real round trips; the whole test stays under a minute)."""
STEPS = 10
FAILURES = (Aborted, NotFound, AlreadyExists)
"""The errors a call may end in under concurrency; any of them must have changed nothing."""

State = dict[str, tuple[str, str]]
"""Live memories: id -> (scope name, fact)."""


@dataclass(frozen=True)
class Call:
    """One API call and, once run, what the model needs to replay it."""

    kind: str
    scope: str = ""
    memory_id: str = ""
    fact: str = ""
    target: str = ""
    """generate: the candidate to UPDATE or DELETE (`mode`); create otherwise."""
    mode: str = "create"


@dataclass
class Outcome:
    call: Call
    error: BaseException | None = None
    created: dict[str, str] = field(default_factory=dict)
    """generate: the actions it reports, id -> action (CREATED / UPDATED / DELETED)."""
    count: int = 0
    """purge: the memories it deleted."""


@dataclass
class Model:
    """The serial model: live memories and the scope each id's history belongs to."""

    live: State = field(default_factory=dict)
    owner: dict[str, str] = field(default_factory=dict)
    revisions: dict[str, set[str]] = field(default_factory=dict)
    """Facts each id's history holds (rollback may restore any of them)."""

    def copy(self) -> Model:
        revisions = {key: set(facts) for key, facts in self.revisions.items()}
        return Model(dict(self.live), dict(self.owner), revisions)

    def written(self, memory_id: str, scope: str, fact: str) -> None:
        self.live[memory_id] = (scope, fact)
        self.owner.setdefault(memory_id, scope)
        self.revisions.setdefault(memory_id, set()).add(fact)

    def replay(self, outcome: Outcome) -> bool:
        """Applies a call that succeeded; False when it could not have succeeded here."""
        call = outcome.call
        if call.kind == "create":
            if call.memory_id in self.live or call.memory_id in self.owner:
                return False
            self.written(call.memory_id, call.scope, call.fact)
        elif call.kind == "update":
            if self.live.get(call.memory_id, ("", ""))[0] != call.scope:
                return False
            self.written(call.memory_id, call.scope, call.fact)
        elif call.kind == "delete":
            return self.live.pop(call.memory_id, None) is not None
        elif call.kind == "rollback":
            owner = self.owner.get(call.memory_id)
            if owner is None or call.fact not in self.revisions.get(call.memory_id, ()):
                return False
            self.written(call.memory_id, owner, call.fact)
        elif call.kind == "purge":
            doomed = [
                key
                for key, (scope, fact) in self.live.items()
                if scope == call.scope and (call.mode == "all" or fact.endswith(" odd"))
            ]
            if len(doomed) != outcome.count:
                return False
            for key in doomed:
                del self.live[key]
        else:
            return self._replay_generate(outcome)
        return True

    def _replay_generate(self, outcome: Outcome) -> bool:
        call = outcome.call
        for memory_id, action in outcome.created.items():
            if action == "CREATED":
                if memory_id in self.live or memory_id in self.owner:
                    return False
                self.written(memory_id, call.scope, call.fact)
            elif self.live.get(memory_id, ("", ""))[0] != call.scope:
                return False  # UPDATED / DELETED only a live memory of the request's scope
            elif action == "UPDATED":
                self.written(memory_id, call.scope, call.fact)
            else:
                del self.live[memory_id]
        return True


def _fact(scope: str, number: int) -> str:
    """A unique fact, tagged with its scope, ending in "odd" or "even" (for purge filters)."""
    return f"{scope} fact {number} {'odd' if number % 2 else 'even'}"


def fact_scope(fact: str) -> str:
    return fact.split(" ", 1)[0]


def answer_for(plans: dict[str, Call]) -> Callable[[LlmRequest], dict[str, Any]]:
    """The scripted consolidation: the generate's planned action on its target if the target is
    a candidate, else a CREATE (the serial model does the same from the reported actions)."""

    def consolidate(request: LlmRequest) -> dict[str, Any]:
        text = ScriptedMemoryModel().prompt_text(request)
        [tag] = re.findall(r"\[0\] .*?\b(g\d+)\b", text)
        plan = plans[tag]
        candidates = re.findall(r"^- id=(\S+):", text, re.M)
        if plan.mode != "create" and plan.target in candidates:
            action = {"action": plan.mode.upper(), "memory_id": plan.target}
            if plan.mode == "update":
                action["fact"] = plan.fact
            return {"actions": [{"fact_index": 0, **action}]}
        return {"actions": [{"fact_index": 0, "action": "CREATE", "fact": plan.fact}]}

    return consolidate


creates = st.builds(Call, st.just("create"), st.sampled_from(list(SCOPES)), st.sampled_from(IDS))
updates = st.builds(
    Call, st.just("update"), st.sampled_from(["", "", "", "bob"]), st.sampled_from(IDS)
)
deletes = st.builds(Call, st.just("delete"), memory_id=st.sampled_from(IDS))
rollbacks = st.builds(Call, st.just("rollback"), memory_id=st.sampled_from(IDS))
purges = st.builds(
    Call, st.just("purge"), st.sampled_from(list(SCOPES)), mode=st.sampled_from(["all", "odd"])
)
"""A purge of the scope's memories, all or those whose fact ends in "odd" (which an update may
change meanwhile)."""
generates = st.builds(
    Call,
    st.just("generate"),
    st.sampled_from(["", "", "bob"]),
    target=st.sampled_from(IDS),
    mode=st.sampled_from(["create", "update", "update", "delete"]),
)
calls = st.one_of(
    creates, updates, updates, deletes, deletes, rollbacks, purges, generates, generates
)
"""A scope of "" is the memory's own (most updates and generates act on their own scope)."""


RACES = [
    ("update", "delete"),
    ("delete", "update"),
    ("update", "update"),
    ("generate", "delete"),
    ("generate", "update"),
    ("update", "generate"),
    ("purge", "update"),
    ("update", "purge"),
    ("rollback", "delete"),
    ("rollback", "update"),
    ("delete", "purge"),
    ("generate", "purge"),
    ("delete", "delete"),
]


class YieldingStore:
    """memory:// that hands the event loop over 0-3 times before each call, as a networked
    store does, so gathered calls interleave at every store call (the reference store itself
    never suspends, which would run them one after the other)."""

    def __init__(self, inner: ReferenceMemoryStore, chance: random.Random) -> None:
        self._inner = inner
        self._chance = chance

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if not inspect.iscoroutinefunction(found):
            return found

        async def yielding(*args: Any, **kwargs: Any) -> Any:
            for _ in range(self._chance.randrange(4)):
                await asyncio.sleep(0)
            return await found(*args, **kwargs)

        return yielding


class WriteRaces(RuleBasedStateMachine):
    uri = "memory://"

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.plans: dict[str, Call] = {}
        self.model_llm = ScriptedMemoryModel(consolidate=answer_for(self.plans))
        self.chance = random.Random(0)
        options: dict[str, Any] = (
            {"store": YieldingStore(ReferenceMemoryStore(), self.chance)}
            if self.uri == "memory://"
            else {"uri": self.uri}
        )
        self.client = AsyncClient(
            embedding_model="hash-64", generation_model=self.model_llm, **options
        )
        self.bank = str(self.run(self.client.memory_banks.create()).name)
        self.model = Model()
        self.counter = itertools.count()

    def run(self, call: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(call)

    def teardown(self) -> None:
        try:
            self.run(self.client.memory_banks.delete(name=self.bank, force=True))
            self.run(self.client.aclose())
        finally:
            self.loop.close()

    # Preparing and running calls

    def resolve(self, memory_id: str) -> str:
        if memory_id != LIVE:
            return memory_id
        return max(self.model.live, key=lambda key: self.model.live[key][1], default="a")

    async def prepared(self, call: Call) -> Call:
        """The call with its fact (tagged with its scope) and, for rollback, a revision."""
        number = next(self.counter)
        call = replace(
            call, memory_id=self.resolve(call.memory_id), target=self.resolve(call.target)
        )
        if call.kind == "generate":
            tag = f"g{number}"
            scope = call.scope or self.model.live.get(call.target, ("alice", ""))[0]
            fact = f"{scope} {tag} fact"
            ready = Call("generate", scope, fact=fact, target=call.target, mode=call.mode)
            self.plans[tag] = ready
            return ready
        if call.kind == "create":
            return Call("create", call.scope, call.memory_id, _fact(call.scope, number))
        if call.kind == "update":  # mostly of the memory's scope; another scope is refused
            scope = call.scope or self.model.owner.get(call.memory_id, "alice")
            return Call("update", scope, call.memory_id, _fact(scope, number))
        if call.kind == "purge" and call.memory_id:  # racing a call on this memory: its scope
            scope = self.model.live.get(call.memory_id, (call.scope or "alice", ""))[0]
            return Call("purge", scope, mode=call.mode)
        if call.kind == "rollback":
            name = f"{self.bank}/memories/{call.memory_id}"
            pager = await self.client.memory_banks.memories.revisions.list(name=name)
            revisions = [revision async for revision in pager]
            if not revisions:
                return Call("rollback", memory_id=call.memory_id, target="0")
            chosen = revisions[number % len(revisions)]
            return Call(
                "rollback",
                memory_id=call.memory_id,
                fact=chosen.fact or "",
                target=chosen.name.rsplit("/", 1)[-1],
            )
        return call

    async def perform(self, call: Call) -> Outcome:
        memories = self.client.memory_banks.memories
        name = f"{self.bank}/memories/{call.memory_id}"
        outcome = Outcome(call)
        try:
            if call.kind == "create":
                await memories.create(
                    name=self.bank,
                    fact=call.fact,
                    scope=SCOPES[call.scope],
                    config={"memory_id": call.memory_id},
                )
            elif call.kind == "update":
                await memories.update(name=name, fact=call.fact, scope=SCOPES[call.scope])
            elif call.kind == "delete":
                await memories.delete(name=name)
            elif call.kind == "rollback":
                await memories.rollback(name=name, target_revision_id=call.target)
            elif call.kind == "purge":
                odd = ' AND fact=~" odd$"' if call.mode == "odd" else ""
                done = await memories.purge(
                    name=self.bank, filter=f'scope.user_id="{call.scope}"{odd}', force=True
                )
                outcome.count = int(done.response.purge_count or 0)
            else:
                done = await memories.generate(
                    name=self.bank,
                    scope=SCOPES[call.scope],
                    direct_memories_source={"direct_memories": [{"fact": call.fact}]},
                )
                for generated in done.response.generated_memories or ():
                    memory_id = generated.memory.name.rsplit("/", 1)[-1]
                    outcome.created[memory_id] = generated.action.value
        except FAILURES as exc:
            outcome.error = exc
        except InvalidArgument as exc:  # a rollback to a tombstone, an update of another scope
            assert call.kind in ("rollback", "update"), exc
            outcome.error = exc
        return outcome

    def step(self, *chosen: Call) -> None:
        async def together() -> list[Outcome]:
            ready = [await self.prepared(call) for call in chosen]
            return list(await asyncio.gather(*(self.perform(call) for call in ready)))

        outcomes = self.run(together())
        observed = self.run(self.observe())
        succeeded = [outcome for outcome in outcomes if outcome.error is None]
        for order in itertools.permutations(succeeded):
            candidate = self.model.copy()
            if all(candidate.replay(outcome) for outcome in order) and candidate.live == observed:
                self.model = candidate
                return
        raise AssertionError(
            f"no serial order of {[(o.call, o.error, o.created, o.count) for o in outcomes]} "
            f"turns {self.model.live} into the observed {observed}"
        )

    async def observe(self) -> State:
        memories = self.client.memory_banks.memories
        pager = await memories.list(name=self.bank, config={"page_size": 1000})
        state: State = {}
        async for memory in pager:
            scope = memory.scope["user_id"]
            assert fact_scope(memory.fact) == scope, f"{memory.fact!r} is in scope {scope}"
            state[memory.name.rsplit("/", 1)[-1]] = (scope, memory.fact)
        return state

    # Rules

    @rule(call=calls)
    def one(self, call: Call) -> None:
        self.step(call)

    @rule(
        first=calls,
        second=calls,
        same_memory=st.booleans(),
        interleaving=st.integers(0, 2**16),
    )
    def two_at_once(self, first: Call, second: Call, same_memory: bool, interleaving: int) -> None:
        """`interleaving` chooses where the yielding memory:// store lets the other call run."""
        if same_memory:  # races on one memory are the interesting ones
            target = first.memory_id or first.target or LIVE
            first = replace(first, memory_id=first.memory_id or target)
            second = Call(second.kind, second.scope, target, target=target, mode=second.mode)
        if not self.model.live:  # something to race on
            self.step(Call("generate", "alice", target="a"))
        self.chance.seed(interleaving)
        self.step(first, second)

    @rule(
        kinds=st.sampled_from(RACES),
        modes=st.tuples(st.sampled_from(["update", "delete"]), st.sampled_from(["odd", "all"])),
        interleaving=st.integers(0, 2**16),
    )
    def race_on_one_memory(
        self, kinds: tuple[str, str], modes: tuple[str, str], interleaving: int
    ) -> None:
        """Two calls on the newest live memory (the races that could lose or revive a write)."""
        if not self.model.live:
            self.step(Call("generate", "alice", target="a"))
        mode = {"generate": modes[0], "purge": modes[1]}
        first, second = (
            Call(kind, "", LIVE, target=LIVE, mode=mode.get(kind, "create")) for kind in kinds
        )
        self.chance.seed(interleaving)
        self.step(first, second)

    @invariant()
    def no_fact_crosses_a_scope(self) -> None:
        async def check() -> None:
            memories = self.client.memory_banks.memories
            for scope_name, scope in SCOPES.items():
                pager = await memories.retrieve(name=self.bank, scope=scope)
                async for hit in pager:
                    assert hit.memory and fact_scope(hit.memory.fact or "") == scope_name
            for memory_id, owner in self.model.owner.items():
                pager = await memories.revisions.list(name=f"{self.bank}/memories/{memory_id}")
                async for revision in pager:
                    assert fact_scope(revision.fact or "") == owner, (memory_id, revision.fact)

        self.run(check())


@pytest.mark.parametrize("store_uri", list(EXAMPLES), indirect=True)
def test_concurrent_writes_match_a_serial_order_and_never_cross_scopes(
    store_uri: str, request: pytest.FixtureRequest
) -> None:
    backend = request.node.callspec.params["store_uri"]
    machine = type("Machine", (WriteRaces,), {"uri": store_uri})
    run_state_machine_as_test(
        machine,
        settings=settings(max_examples=EXAMPLES[backend], stateful_step_count=STEPS),
    )
