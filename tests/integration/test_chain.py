"""The chain job: a DAG of durable child runs with templated inputs, on every backend."""

from __future__ import annotations

import asyncio
import json

import pytest

import runwright as rw
from runwright.store._params import EventListParams, RunCountParams, RunListParams

from .conftest import running_worker
from .test_webhook import SECRET, Receiver, verified


def register(app: rw.App, made: list[str]) -> None:
    @app.task
    async def split(ctx: rw.Context, text: str) -> list[str]:
        made.append("split")
        return text.split()

    @app.task
    async def count(ctx: rw.Context, words: list[str], letter: str) -> int:
        made.append(f"count {letter}")
        return sum(word.count(letter) for word in words)

    @app.task
    async def report(ctx: rw.Context, a: int, b: int, title: str) -> str:
        made.append("report")
        return f"{title}: a={a} b={b}"

    @app.task(retries=0)
    async def explode(ctx: rw.Context, words: list[str]) -> None:
        raise rw.FinalError(f"cannot handle {len(words)} words")


DAG = [
    {"id": "words", "task": "split", "args": {"text": "{{input}}"}},
    {"id": "as", "task": "count", "args": {"words": "{{steps.words.output}}", "letter": "a"}},
    {"id": "bs", "task": "count", "args": {"words": "{{steps.words.output}}", "letter": "b"}},
    {"id": "sum", "task": "report", "needs": ["as", "bs"],
     "args": {"a": "{{steps.as.output}}", "b": "{{steps.bs.output}}",
              "title": "counts of {{steps.words.output.0}}"}},
]


async def test_a_dag_fans_out_and_in_with_templated_inputs(app):
    made: list[str] = []
    register(app, made)
    async with running_worker(app, concurrency=4):
        run = await app.submit("chain", steps=DAG, input="banana bread abba")
        outputs = await run.result(timeout_s=60)
    assert outputs == {"words": ["banana", "bread", "abba"], "as": 6, "bs": 4,
                       "sum": "counts of banana: a=6 b=4"}
    assert made[0] == "split" and made[-1] == "report" and sorted(made[1:3]) == ["count a", "count b"]
    children = await app.store.run_list(RunListParams(limit=100))
    assert sum(1 for r in children if r.parent_id == run.id) == 4  # each step one child run


async def test_a_failed_step_fails_the_chain_and_is_named(app):
    register(app, [])
    steps = [{"id": "words", "task": "split", "args": {"text": "{{input}}"}},
             {"id": "boom", "task": "explode", "args": {"words": "{{steps.words.output}}"}}]
    async with running_worker(app):
        run = await app.submit("chain", steps=steps, input="a b c")
        with pytest.raises(rw.RunFailed, match="chain step 'boom' \\(explode\\) ended failed: "
                                               "FinalError: cannot handle 3 words"):
            await run.result(timeout_s=60)


@pytest.mark.parametrize("steps, match", [
    ([], "non-empty list"),
    ([{"id": "a", "task": "nope"}], "unknown task 'nope'"),
    ([{"id": "a", "task": "split", "args": {"text": "x"}}, {"id": "a", "task": "split"}], "used twice"),
    ([{"id": "a", "task": "split", "needs": ["ghost"], "args": {"text": "x"}}], "needs 'ghost'"),
    ([{"id": "a", "task": "split", "args": {"text": "{{steps.ghost.output}}"}}], "needs 'ghost'"),
    ([{"id": "a", "task": "split", "needs": ["b"], "args": {"text": "x"}},
      {"id": "b", "task": "split", "needs": ["a"], "args": {"text": "x"}}], "cycle"),
    ([{"task": "split"}], "needs an `id`"),
    ([{"id": "a", "task": "split", "args": {"txt": "x"}}],
     "chain step 'a': .*missing a required argument: 'text'"),
])
async def test_a_bad_dag_is_refused_at_submission_and_nothing_is_stored(app, steps, match):
    register(app, [])
    with pytest.raises(rw.InvalidInput, match=match):
        await app.submit("chain", steps=steps, input="x")
    assert await app.store.run_count_by_state(RunCountParams()) == {}


async def child_runs(app: rw.App, chain_id: int) -> dict[str, rw.Run]:
    """The chain's child runs by step id (from its `chain_step` events)."""
    events = await app.store.event_list(EventListParams(chain_id))
    ids = {e.data["step"]: e.data["run_id"] for e in events
           if e.kind == "chain_step" and e.data["status"] == "started"}
    runs = {run.id: run for run in await app.store.run_get_many(list(ids.values()))}
    return {step: runs[run_id] for step, run_id in ids.items()}


async def test_a_step_starts_once_its_needs_succeeded_not_when_its_level_has(app):
    released = asyncio.Event()

    @app.task
    async def slow(ctx: rw.Context) -> str:
        # Ends only once `then` has started (or after a long timeout): with level-by-level
        # scheduling `then` would wait for this step, and this step would time out.
        try:
            await asyncio.wait_for(released.wait(), 30)
            return "released"
        except TimeoutError:
            return "timed out"

    @app.task
    async def quick(ctx: rw.Context) -> int:
        return 1

    @app.task
    async def then(ctx: rw.Context, value: int) -> int:
        released.set()
        return value + 1

    steps = [{"id": "a", "task": "slow"}, {"id": "b", "task": "quick"},
             {"id": "c", "task": "then", "args": {"value": "{{steps.b.output}}"}}]
    async with running_worker(app, concurrency=4):
        run = await app.submit("chain", steps=steps)
        assert await run.result(timeout_s=60) == {"a": "released", "b": 1, "c": 2}
    children = await child_runs(app, run.id)
    assert children["b"].finished_at <= children["c"].started_at < children["a"].finished_at


def register_branches(app: rw.App, made: list[str]) -> None:
    @app.task
    async def inspect(ctx: rw.Context, text: str) -> dict:
        return {"verdict": {"spam": "buy" in text}, "words": text.split()}

    @app.task
    async def act(ctx: rw.Context, what: str, on: object = None) -> str:
        made.append(what)
        return what


BRANCHES = [
    {"id": "check", "task": "inspect", "args": {"text": "{{input}}"}},
    {"id": "block", "task": "act", "args": {"what": "block"},
     "when": {"step": "check", "path": "verdict.spam", "equals": True}},
    {"id": "deliver", "task": "act", "args": {"what": "deliver"},
     "when": {"not": {"step": "check", "path": "verdict.spam", "equals": True}}},
    {"id": "notify", "task": "act", "args": {"what": "notify", "on": "{{steps.block.output}}"}},
    {"id": "audit", "task": "act", "needs": ["block", "deliver"], "if_needs_skipped": "run",
     "args": {"what": "audit"}},
]


async def test_when_branches_skip_a_step_and_its_dependents_unless_they_say_run(app):
    made: list[str] = []
    register_branches(app, made)
    async with running_worker(app, concurrency=4):
        run = await app.submit("chain", steps=BRANCHES, input="hello there")
        outputs = await run.result(timeout_s=60)
    assert outputs == {"check": {"verdict": {"spam": False}, "words": ["hello", "there"]},
                       "block": None, "deliver": "deliver", "notify": None, "audit": "audit"}
    assert sorted(made) == ["audit", "deliver"]
    events = await app.store.event_list(EventListParams(run.id))
    statuses = {(e.data["step"], e.data["status"]) for e in events if e.kind == "chain_step"}
    assert {("block", "skipped"), ("notify", "skipped"), ("deliver", "succeeded"),
            ("audit", "succeeded")} <= statuses
    assert not {("block", "started"), ("notify", "started")} & statuses
    assert sum(1 for e in events if e.kind == "chain_step" and e.data["status"] == "skipped") == 2

    made.clear()
    async with running_worker(app, concurrency=4):
        spam = await app.submit("chain", steps=BRANCHES, input="buy now")
        assert (await spam.result(timeout_s=60))["notify"] == "notify"
    assert sorted(made) == ["audit", "block", "notify"]


@pytest.mark.parametrize("when, match", [
    ("b == 1", "`when` must be an object"),
    ({"step": "a"}, "exactly one of"),
    ({"step": "a", "equals": 1, "in": [1]}, "exactly one of"),
    ({"step": "a", "matches": ".*"}, "unknown: \\['matches'\\]"),
    ({"step": "ghost", "equals": 1}, "needs 'ghost'"),
    ({"all": []}, "non-empty list"),
    ({"step": "a", "in": 3}, "takes a list"),
])
async def test_a_malformed_condition_is_refused_at_submission(app, when, match):
    register(app, [])
    steps = [{"id": "a", "task": "split", "args": {"text": "x"}},
             {"id": "b", "task": "split", "args": {"text": "y"}, "when": when}]
    with pytest.raises(rw.InvalidInput, match=match):
        await app.submit("chain", steps=steps)
    assert await app.store.run_count_by_state(RunCountParams()) == {}


async def test_the_chain_calls_back_signed_when_it_ends(app, monkeypatch):
    monkeypatch.setenv("RUNWRIGHT_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("RUNWRIGHT_WEBHOOK_ALLOW", "127.0.0.1")
    register(app, [])
    receiver = Receiver(lambda i: (200, "{}", 0))
    good = [{"id": "words", "task": "split", "args": {"text": "{{input}}"}}]
    bad = [*good, {"id": "boom", "task": "explode", "args": {"words": "{{steps.words.output}}"}}]
    try:
        async with running_worker(app):
            ok = await app.submit("chain", steps=good, input="a b", callback={"url": receiver.url})
            await ok.result(timeout_s=60)
            failed = await app.submit("chain", steps=bad, input="a b", callback={"url": receiver.url})
            with pytest.raises(rw.RunFailed, match="chain step 'boom'"):
                await failed.result(timeout_s=60)
    finally:
        receiver.close()
    assert len(receiver.requests) == 2 and all(verified(r) for r in receiver.requests)
    first, second = (json.loads(r["body"]) for r in receiver.requests)
    assert first == {"run_id": ok.id, "state": "succeeded", "outputs": {"words": ["a", "b"]},
                     "skipped": [], "error": None}
    assert second["run_id"] == failed.id and second["state"] == "failed"
    assert second["error"].startswith("chain step 'boom' (explode) ended failed: FinalError")
    with pytest.raises(rw.InvalidInput, match="unknown fields \\['allow'\\]"):
        await app.submit("chain", steps=good, callback={"url": receiver.url, "allow": "10.0.0.0/8"})
