"""Code changed under runs in flight: `ctx.patched` sends a run that already went past the
change down its old path forever, and a new run down the new one; `deprecate_patch` keeps
the marked runs replaying once the old branch is gone; `patch_runs` says which live runs
take which path. On every backend, with the code of each version in its own App."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

import runwright as rw
from runwright.testing import export_runs, replay

from ..process import patch_apps
from ..process.harness import ROOT
from .conftest import running_worker


def _version(url: str, patch: str) -> rw.App:
    """The app at one version: "old" (no patch), "new" (behind ctx.patched), "deprecated"."""
    app = rw.App(url)

    @app.task(name="flow", retries=0)
    async def flow(ctx: rw.Context) -> list[str]:
        path = [await ctx.step("a", lambda: "a")]
        if patch == "new":
            if await ctx.patched("lookup-v2"):
                path.append(await ctx.step("b_new", lambda: "b_new"))
            else:
                path.append(await ctx.step("b_old", lambda: "b_old"))
            assert await ctx.patched("lookup-v2") == (path[-1] == "b_new"), "decided once per run"
        elif patch == "deprecated":
            await ctx.deprecate_patch("lookup-v2")
            path.append(await ctx.step("b_new", lambda: "b_new"))
        else:
            path.append(await ctx.step("b_old", lambda: "b_old"))
        path.append(await ctx.wait_signal("go"))
        path.append(await ctx.step("c", lambda: "c"))
        return path

    return app


async def _parked(app: rw.App, handle: rw.RunHandle) -> None:
    for _ in range(600):
        run = await handle.refresh()
        if run.waiting == rw.WaitReason.SIGNAL:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {handle.id} never parked on its signal")


async def test_a_patch_sends_old_runs_down_the_old_path_and_new_runs_down_the_new(store_url: str) -> None:
    old, new, deprecated = (_version(store_url, v) for v in ("old", "new", "deprecated"))
    try:
        async with running_worker(old):
            before = await old.submit("flow")
            await _parked(old, before)  # journaled a, b_old; waits for "go"
        async with running_worker(new):
            after = await new.submit("flow")
            await _parked(new, after)
            report = await new.patch_runs("lookup-v2", task="flow")
            assert (report.patched, report.unpatched, report.complete) == ([after.id], [before.id], True)
            for handle in (before, after):
                await handle.signal("go", "go")
            assert await before.result(timeout_s=30) == ["a", "b_old", "go", "c"], "the old path, forever"
            assert await after.result(timeout_s=30) == ["a", "b_new", "go", "c"]
            names = [r.name for r in await new.store.step_list(after.id)]
            assert names[:3] == ["a", "patch:lookup-v2", "b_new"], names
        # Every old run ended: the old branch goes, and the marked runs still replay.
        async with running_worker(deprecated):
            marked = await new.submit("flow")
            await _parked(new, marked)  # started under the deprecated code
            fresh_names = [r.name for r in await new.store.step_list(marked.id)]
            assert "patch:lookup-v2" not in fresh_names, "a deprecated patch journals no marker"
            await marked.signal("go", "go")
            assert await marked.result(timeout_s=30) == ["a", "b_new", "go", "c"]
        assert (await new.patch_runs("lookup-v2")).patched == []
        with pytest.raises(ValueError, match="patch id"):
            await new.patch_runs("no spaces")
    finally:
        for app in (old, new, deprecated):
            await app.close()


async def test_a_marked_run_replays_under_deprecated_code(store_url: str) -> None:
    new, deprecated = _version(store_url, "new"), _version(store_url, "deprecated")
    try:
        async with running_worker(new):
            handle = await new.submit("flow")
            await _parked(new, handle)  # journaled a, patch:lookup-v2, b_new
        async with running_worker(deprecated):
            await handle.signal("go", "go")
            assert await handle.result(timeout_s=30) == ["a", "b_new", "go", "c"]
    finally:
        for app in (new, deprecated):
            await app.close()


async def test_replay_names_exactly_the_runs_an_unpatched_change_would_break(store_url: str,
                                                                             tmp_path) -> None:
    old = rw.App(store_url)
    old.tasks.update(patch_apps.old.tasks)
    try:
        async with running_worker(old):
            before = [await old.submit("flow") for _ in range(2)]
            for handle in before:
                await _parked(old, handle)
        fresh = await old.submit("flow", delay_s=3600)  # not started: any code replays it
        # The checks run on the new code, before it is deployed: the store's runs, and a file of them.
        for code, broken in ((patch_apps.unpatched, {h.id for h in before}), (patch_apps.patched, set())):
            app = rw.App(store_url)
            app.tasks.update(code.tasks)
            try:
                outcomes = await replay(app, task="flow")
                assert {o.run_id for o in outcomes} == {fresh.id, *(h.id for h in before)}
                assert {o.run_id for o in outcomes if not o.ok} == broken, outcomes
                for outcome in outcomes:
                    if outcome.status == "diverged":
                        assert "'b_new'" in outcome.detail and "'b_old'" in outcome.detail
                exported = tmp_path / "runs.jsonl"
                assert await export_runs(old, exported, task="flow") == 3
                from_file = await replay(app, source=exported)
                assert [(o.run_id, o.status) for o in from_file] == [(o.run_id, o.status) for o in outcomes]
            finally:
                await app.close()
        # Nothing was written by any replay: the runs are as they were.
        for handle in before:
            assert [r.name for r in await old.store.step_list(handle.id)] == ["a", "b_old"]
        for version, code in (("unpatched", 1), ("patched", 0)):
            shown = subprocess.run([sys.executable, "-m", "runwright", "replay",
                                    f"tests.process.patch_apps:{version}", "--task", "flow", "--json",
                                    "--url", store_url],
                                   cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert shown.returncode == code, shown.stderr
            lines = [json.loads(line) for line in shown.stdout.splitlines()]
            assert len(lines) == 3 and sum(line["status"] == "diverged" for line in lines) == 2 * code
    finally:
        await old.close()


def _waiting(url: str, change: str) -> rw.App:
    """A task that waits (on a person's answer, or for an event) after its first step; the
    next version adds a step before the wait: behind a patch ("patched"), or not
    ("unpatched"). A question and an event wait are registered at their position and
    journaled only once answered or taken."""
    app = rw.App(url)

    @app.task(name="approve", retries=0)
    async def approve(ctx: rw.Context, wait: str) -> list[object]:
        path: list[object] = [await ctx.step("a", lambda: "a")]
        if change == "unpatched" or (change == "patched" and await ctx.patched("audit")):
            path.append(await ctx.step("audit", lambda: "audit"))
        if wait == "question":
            path.append(await ctx.ask("ship it?", schema=bool))
        else:
            path.append(await ctx.wait_event("shipped", match={"run": ctx.run_id}))
        path.append(await ctx.step("c", lambda: "c"))
        return path

    return app


@pytest.mark.parametrize("wait", ["question", "event"])
async def test_a_run_waiting_where_a_patch_goes_keeps_its_wait(store_url: str, tmp_path, wait: str) -> None:
    """What the run waits on is its step at that point, although its journal holds it only
    once answered or taken: the patch sends the run down the old path, to the question it
    asked (not a second one) or the event wait it registered (not one that began after
    the event came), and replay names the run that the unpatched change would break."""
    old, unpatched, patched = (_waiting(store_url, c) for c in ("old", "unpatched", "patched"))
    step = "ask" if wait == "question" else "event:shipped"

    def answer(handle: rw.RunHandle) -> object:
        return True if wait == "question" else {"run": handle.id}

    async def end_wait(handle: rw.RunHandle) -> None:
        if wait == "question":
            (question,) = await old.questions(handle.id)
            await old.answer(handle.id, question.id, True)
        else:
            await old.publish_event("shipped", {"run": handle.id})

    try:
        async with running_worker(old):
            waiting, woken = await old.submit("approve", wait), await old.submit("approve", wait)
            for handle in (waiting, woken):
                await _waits(handle)
        exported = tmp_path / "runs.jsonl"
        assert await export_runs(old, exported, task="approve") == 2
        await end_wait(woken)  # woken: its answer or event is not journaled yet
        for code, expected in ((unpatched, "diverged"), (patched, "clean")):
            for outcomes in (await replay(code, task="approve"), await replay(code, source=exported)):
                assert sorted((o.run_id, o.status) for o in outcomes) == [
                    (waiting.id, expected), (woken.id, expected)], outcomes
                if expected == "diverged":
                    assert all(o.position == 1 and "'audit'" in o.detail for o in outcomes), outcomes
        async with running_worker(patched):
            assert await _result(woken) == ["a", answer(woken), "c"], "the old path, to its own wait"
            await end_wait(waiting)
            assert await _result(waiting) == ["a", answer(waiting), "c"]
            fresh = await patched.submit("approve", wait)
            await _waits(fresh)
            await end_wait(fresh)
            assert await _result(fresh) == ["a", "audit", answer(fresh), "c"], "a new run: the new path"
        for handle in (waiting, woken):
            assert [r.name for r in await old.store.step_list(handle.id)] == ["a", step, "c"]
        if wait == "question":
            assert [len(await old.questions(h.id, pending=False)) for h in (waiting, woken)] == [1, 1]
        assert (await patched.patch_runs("audit")).patched == []
    finally:
        for app in (old, unpatched, patched):
            await app.close()


async def _waits(handle: rw.RunHandle) -> None:
    for _ in range(600):
        if (await handle.refresh()).waiting in (rw.WaitReason.ANSWER, rw.WaitReason.SIGNAL):
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"run {handle.id} never parked on its wait")


async def _result(handle: rw.RunHandle) -> object:
    return await handle.result(timeout_s=30)
