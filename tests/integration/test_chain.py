"""The chain job: a DAG of durable child runs with templated inputs, on every backend."""

from __future__ import annotations

import pytest

import runwright as rw
from runwright.store.params import RunCountParams, RunListParams

from .conftest import running_worker


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
