"""`memory://`: one process's own store. What sets it apart from the other backends (the
store scenarios it shares with them are in tests/conformance): who sees its database, how
long that lives, and that a command line, whose process ends, refuses it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

import runwright as rw
from runwright.errors import ConfigError
from runwright.store import store_from_url
from runwright.store._params import RunInsertParams


async def _one_run(store: rw.Store) -> int:
    (run,) = await store.run_insert_many([RunInsertParams(key="k", task="t", args="{}")])
    return run.id


async def test_stores_naming_one_database_share_it_and_an_unnamed_one_is_private():
    first, second = store_from_url("memory://shared_db"), store_from_url("memory://shared_db")
    alone = store_from_url("memory://")
    for store in (first, second, alone):
        await store.open()
        await store.migrate()
    try:
        run_id = await _one_run(first)
        assert (await second.run_get(run_id)) is not None
        assert (await alone.run_get(run_id)) is None
    finally:
        for store in (first, second, alone):
            await store.close()


async def test_a_store_closed_and_opened_again_finds_its_runs():
    store = store_from_url("memory://")
    await store.open()
    await store.migrate()
    run_id = await _one_run(store)
    await store.close()
    await store.open()
    try:
        assert (await store.run_get(run_id)) is not None
    finally:
        await store.close()


async def test_a_worker_in_this_process_runs_what_was_submitted():
    app = rw.App("memory://")

    @app.task
    async def double(ctx: rw.Context, n: int) -> int:
        return await ctx.step("double", lambda: n * 2)

    async with app:
        handle = await app.submit(double, 21)
        worker = app.worker(poll_s=0.05)
        running = asyncio.create_task(worker.run())
        try:
            assert await handle.result(timeout_s=30) == 42
        finally:
            worker.stop()
            await running


@pytest.mark.parametrize("cancel_delivered_before_close", [False, True], ids=["at-close", "before-close"])
async def test_a_worker_task_cancelled_before_its_app_closes_ends_quietly(
        cancel_delivered_before_close: bool, caplog: pytest.LogCaptureFixture) -> None:
    """The task running `worker.run()` cancelled, then `async with app` left: the task ends
    cancelled (no "Task exception was never retrieved ... fleet bus is not open"), and no
    task of the worker's goes on against the closed store. Whether the cancel reaches the
    worker before the App closes or only after."""
    app = rw.App("memory://")
    started = asyncio.Event()

    @app.task
    async def hello(ctx: rw.Context, name: str) -> str:
        return f"hi {name}"

    @app.task
    async def slow(ctx: rw.Context) -> None:
        started.set()
        await asyncio.sleep(60)

    before = asyncio.all_tasks()
    async with app:
        worker = app.worker(poll_s=0.05)
        running = asyncio.create_task(worker.run())
        assert await (await app.submit(hello, "x")).result(timeout_s=30) == "hi x"
        await app.submit(slow)  # in flight when the worker is cancelled
        await asyncio.wait_for(started.wait(), 30)
        running.cancel()
        if cancel_delivered_before_close:
            await asyncio.wait([running])
    await asyncio.wait([running], timeout=30)
    assert running.cancelled(), running
    await asyncio.sleep(0.1)
    left = {task for task in asyncio.all_tasks() - before if task is not asyncio.current_task()}
    assert not left, left
    assert "fleet bus is not open" not in caplog.text


async def test_a_worker_cancelled_at_any_step_of_its_start_leaves_no_task_behind() -> None:
    """The cancel of the task running `worker.run()` swept over every step of its start
    (boot, schedules, the fleet's resync and ready, the first claims) and of its work:
    wherever it lands, the worker's tasks all end with it. A cancel that met the wait for
    the fleet's ready, with the claim loop already working, once left every side task
    running against the store the App closed next."""
    for steps in [*range(40), *[None] * 40]:  # None: cancelled as its first run starts
        app = rw.App("memory://")
        begun = asyncio.Event()

        @app.task
        async def hello(ctx: rw.Context) -> None:
            begun.set()
            await asyncio.sleep(60)

        before = asyncio.all_tasks()
        async with app:
            await app.submit(hello)
            running = asyncio.create_task(app.worker(poll_s=0.05).run())
            if steps is None:
                await asyncio.wait_for(begun.wait(), 30)
            for _ in range(steps or 0):
                await asyncio.sleep(0)
            running.cancel()
            await asyncio.wait([running], timeout=30)
        assert running.done(), steps
        left = {task for task in asyncio.all_tasks() - before if task is not asyncio.current_task()}
        assert not left, (steps, left)


@pytest.mark.parametrize("url", ["memory:", "memory:/x", "memory://a/b", "memory://x?y=1", "memory://a b",
                                 "memory://\x00"])
def test_a_malformed_memory_url_is_one_clear_error(url: str):
    with pytest.raises(ConfigError, match="memory"):
        store_from_url(url)


@pytest.mark.parametrize("command", [["status"], ["submit", "mod:task"], ["worker", "mod:app"]])
def test_the_command_line_refuses_a_memory_store(command: list[str]):
    done = subprocess.run([sys.executable, "-m", "runwright", *command, "--url", "memory://"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "memory:// lives inside one Python process" in lines[0]
    assert lines[0].startswith("error: --url: "), lines


def test_a_memory_store_from_the_environment_is_refused_naming_the_variable():
    """The line names what the user set: RUNWRIGHT_URL, not a --url they never typed."""
    env = {**os.environ, "RUNWRIGHT_URL": "memory://"}
    done = subprocess.run([sys.executable, "-m", "runwright", "runs"], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: RUNWRIGHT_URL: memory:// lives inside one Python process"), line
