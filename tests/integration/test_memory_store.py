"""`memory://`: one process's own store. What sets it apart from the other backends (the
store scenarios it shares with them are in tests/conformance): who sees its database, how
long that lives, and that a command line, whose process ends, refuses it."""

from __future__ import annotations

import asyncio
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
