"""`runwright move` mid-flight, between SQLite and PostgreSQL in both directions, and from
either to Redis.

A deployment runs on the source with a worker process: long multi-step runs in flight, a
sleeping run, a run parked on a question, runs queued for later, a dead run, a schedule
firing every second. `runwright move` (a process) seals the source in the middle of it
and copies everything; then a worker on the target finishes all of it. Every step's
execution is counted in a ledger (tests/process/apps.py): a step the source's journal
had as done never runs again. A follower started on the target from the last event the
source logged sees the rest of the log with no gap. The old URL refuses with the line
that names the target; `--check` finds no difference.

A move killed with SIGKILL halfway resumes when it is run again, to the same outcome.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path
from typing import Iterator

import asyncpg
import pytest

import runwright as rw
from runwright.core._schedules import fire_key
from runwright.runs import RunState
from runwright.store._params import BucketTakeParams, LimitSetParams, QueuePauseParams

from ..conftest import PG_BASE, REDIS_BASE, drop_redis_namespace
from . import apps
from .harness import ROOT, WorkerFleet, client, outputs, wait_until

pytestmark = [pytest.mark.process]

ENDED = {RunState.SUCCEEDED, RunState.FAILED, RunState.DEAD, RunState.CANCELLED}
DIRECTIONS = [("sqlite", "postgres"), ("postgres", "sqlite"), ("sqlite", "redis"), ("postgres", "redis")]
DIRECTION_IDS = ["sqlite-to-postgres", "postgres-to-sqlite", "sqlite-to-redis", "postgres-to-redis"]
GATE = 10  # the step the long runs wait at until the target runs them


def _url(kind: str, tmp_path: Path, name: str) -> tuple[str, str | None]:
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / f'{name}.db'}", None
    if kind == "redis":
        namespace = f"rw_test_{uuid.uuid4().hex[:12]}"
        return f"{REDIS_BASE}?namespace={namespace}", f"redis:{namespace}"
    schema = f"rw_test_{uuid.uuid4().hex[:12]}"
    return f"{PG_BASE}?schema={schema}", schema


async def _drop(schema: str) -> None:
    if schema.startswith("redis:"):
        await drop_redis_namespace(REDIS_BASE, schema.removeprefix("redis:"))
        return
    conn = await asyncpg.connect(PG_BASE)
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@pytest.fixture
def ends(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    source_kind, target_kind = request.param
    source, source_schema = _url(source_kind, tmp_path, "source")
    target, target_schema = _url(target_kind, tmp_path, "target")
    yield source, target
    for schema in (source_schema, target_schema):
        if schema is not None:
            asyncio.run(_drop(schema))


def runwright(*args: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    proc = subprocess.Popen([sys.executable, "-m", "runwright", *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    out, err = outputs(proc, timeout_s)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


async def _all_ended(app: rw.App, ids: list[int]) -> bool:
    for run_id in ids:
        run = await app.store.run_get(run_id)
        if run is None or run.state not in ENDED:
            return False
    return True


async def _done_steps(app: rw.App, run_id: int) -> int:
    return sum(1 for step in await app.steps(run_id) if step.status == "done")


async def _seqs(app: rw.App, run_id: int) -> list[tuple[int, str]]:
    return [(event.seq, event.kind) async for event in app.events(run_id, follow=False)]


@pytest.mark.parametrize("ends", DIRECTIONS, indirect=True, ids=DIRECTION_IDS)
async def test_a_deployment_moves_mid_flight_and_the_target_finishes_everything(
        ends: tuple[str, str], tmp_path: Path) -> None:
    source_url, target_url = ends
    source = client(source_url)
    await source.open()
    fleet = WorkerFleet(source_url, tmp_path)
    try:
        await source.save_schedule(source.schedule_spec(
            "tick", cron="* * * * * *", task="record", args={"n": 7}, tz="UTC", misfire="catch_up",
            catch_up_limit=100, queue=None, priority=None))
        # State beside the runs: a queue paused fleet-wide (one no run uses), an operator's
        # limit override, a rate bucket taken from once.
        await source.store.queue_set_paused(QueuePauseParams("elsewhere", "parked", True))
        await source.store.limit_set(LimitSetParams("gpu:big", 3))
        await source.store.bucket_take(BucketTakeParams("calls", 10.0, 0.001, 4.0))
        old = fleet.start(concurrency=10)
        await old.wait_started()
        # Held at a gate mid-way until the target runs them: running at the seal however
        # slow the machine (ungated, a loaded one saw a long run end before the seal).
        long = [await source.submit(apps.steps_with_ledger, steps=30, min_s=0.1, max_s=0.2, gate=GATE)
                for _ in range(3)]
        napping = await source.submit(apps.nap, seconds=4.0)
        asking = await source.submit(apps.ask_deploy, target="prod")
        doomed = await source.submit(apps.doomed)
        later = [await source.submit(apps.record, n=i, delay_s=3.0) for i in range(5)]
        ids = [h.id for h in [*long, napping, asking, doomed, *later]]

        # Mid-flight: each long run has journaled some steps, the nap sleeps, the question waits.
        async def in_flight() -> bool:
            steps = [await _done_steps(source, h.id) for h in long]
            asked = await source.questions(asking.id)
            doomed_run = await source.store.run_get(doomed.id)
            napped = await source.store.run_get(napping.id)
            return (all(n >= 3 for n in steps) and bool(asked) and doomed_run is not None
                    and doomed_run.state is RunState.DEAD and napped is not None
                    and napped.waiting is not None)

        await wait_until(in_flight, "the long runs are under way, the nap sleeps, the question waits")
        moved = runwright("move", "--url", source_url, "--to", target_url, "--json")
        assert moved.returncode == 0, moved.stderr
        report = json.loads(moved.stdout)
        assert report["moved"] and not report["resumed"] and report["kinds"]["runs"] >= len(ids)

        # The long runs were running at the seal (the source keeps them as they were) ...
        at_seal = [await source.store.run_get(h.id) for h in long]
        assert all(run is not None and run.state is RunState.RUNNING for run in at_seal), at_seal
        # The source holds what the copy carried: it refuses every write since the seal.
        with pytest.raises(rw.DeploymentMoved) as refused:
            await source.submit(apps.record, n=99)
        assert refused.value.state == "moved" and refused.value.target in target_url
        journaled = {(h.id, s.position) for h in long for s in await source.steps(h.id) if s.status == "done"}
        source_events = {h.id: [seq for seq, _ in await _seqs(source, h.id)] for h in long}
        source_schedule = {s.name: s.next_fire_at for s in await source.list_schedules()}
        # The old worker leaves its runs to the target, and stops with the line and exit 9.
        assert await old.wait_exit("the old worker stops") == 9
        assert "the worker stops" in old.log() and "error: DeploymentMoved: this deployment" in old.log()
        lines = old.log().splitlines()
        assert not [line for line in lines if "run dead" in line and "DeploymentMoved" in line]

        # Nothing differs before the target runs anything.
        checked = runwright("move", "--check", "--url", source_url, "--to", target_url)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "no difference" in checked.stdout

        # The old URL refuses, in one line naming the target, with its own exit code.
        status = runwright("status", "--url", source_url)
        assert status.returncode == 9, status.stderr
        assert "moved to" in status.stderr and "Traceback" not in status.stderr

        target = client(target_url)
        await target.open()
        try:
            assert {s.name: s.next_fire_at for s in await target.list_schedules()} == source_schedule
            assert await target.store.queue_list_paused("elsewhere") == {"parked"}
            assert await target.store.limit_overrides() == {"gpu:big": 3}
            # 6 of 10 tokens left: a take of 7 waits, one of 6 does not.
            assert await target.store.bucket_take(BucketTakeParams("calls", 10.0, 0.001, 7.0)) > 0
            assert await target.store.bucket_take(BucketTakeParams("calls", 10.0, 0.001, 6.0)) == 0
            fleet.url = target_url
            followers = {h.id: fleet.follow(h.id, after=source_events[h.id][-1]) for h in long}
            new = fleet.start(concurrency=10)
            await new.wait_started()
            for handle in long:
                fleet.open_gate(handle.id, GATE)
            question = (await target.questions(asking.id))[0]
            await target.answer(asking.id, question.id, True)
            await wait_until(lambda: _all_ended(target, ids), "every run ends on the target")
            for handle in [*long, napping, asking, *later]:
                run = await target.store.run_get(handle.id)
                assert run is not None and run.state is RunState.SUCCEEDED, (handle.id, run)
            assert (await target.store.run_get(doomed.id)).state is RunState.DEAD  # type: ignore[union-attr]

            # No step the source had journaled as done ran again; every step ran.
            executions = Counter((run_id, int(event.removeprefix("step-")))
                                 for event, run_id, _fence, _pid in fleet.ledger_lines()
                                 if event.startswith("step-") and run_id in {h.id for h in long})
            rerun = [key for key in journaled if executions[key] != 1]
            assert rerun == []
            assert {key for key in executions} == {(h.id, i) for h in long for i in range(30)}
            # Each run ended once, and its log goes on from the source's numbers with no gap.
            for handle in long:
                logged = await _seqs(target, handle.id)
                seqs = [seq for seq, _ in logged]
                before = source_events[handle.id]
                assert seqs == list(range(1, len(seqs) + 1)) and seqs[:len(before)] == before
                assert [kind for _, kind in logged].count("succeeded") == 1, logged
                # ... given back on the target: taken over, as after a worker's death.
                assert "recovered" in [kind for seq, kind in logged if seq > len(before)], logged
                follower = followers[handle.id]
                assert await follower.wait_exit() == 0
                assert [seq for seq, _ in follower.seen()] == seqs[len(source_events[handle.id]):]
            # The schedule fires on the target from where the source stopped: the fire the
            # source was to make next, and the ones after it (missed while no worker ran:
            # caught up, as its misfire policy says; "skip" would skip them, as after any pause).
            next_fire = source_schedule["tick"]
            for fire in (next_fire, next_fire + 1, next_fire + 2):
                await wait_until(lambda fire=fire: _fired(target, fire), f"the fire at {fire} on the target")
            # The source made no fire of its own past what it copied. It may have inserted the
            # fire at `next_fire` just before the seal, whose refusal of its second write left
            # the schedule naming that fire still: the copy carried the run, and the target's
            # fire found it under its key. One run for the fire, either way.
            key = fire_key("tick", "UTC", next_fire)
            made = [run.id for run in await source.list_runs(key=key)]
            assert made in ([], [run.id for run in await target.list_runs(key=key)]), made
            # A new run takes an id past every id the source gave.
            fresh = await target.submit(apps.record, n=1)
            assert fresh.id > max(ids)
        finally:
            await target.close()
    finally:
        fleet.kill_all()
        print(fleet.dump_logs())
        await source.close()


async def _fired(app: rw.App, fire: float) -> bool:
    return bool(await app.list_runs(key=fire_key("tick", "UTC", fire)))


async def _target_rows(target_url: str, table: str = "runs") -> int:
    if target_url.startswith("sqlite"):
        path = target_url[len("sqlite:///"):]
        if not os.path.exists(path):
            return 0
        try:
            with sqlite3.connect(path) as conn:
                return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])
        except sqlite3.OperationalError:
            return 0
    if target_url.startswith("redis"):
        return await _redis_rows(target_url, table)

    schema = target_url.rsplit("schema=", 1)[1]
    conn = await asyncpg.connect(PG_BASE)
    try:
        if not await conn.fetchval("SELECT to_regclass($1)", f'"{schema}".{table}'):
            return 0
        return int(await conn.fetchval(f'SELECT count(*) FROM "{schema}".{table}'))
    finally:
        await conn.close()


def _redis_prefix(url: str) -> str:
    return f"rw:{{{url.rsplit('namespace=', 1)[1]}}}:"


async def _redis_rows(url: str, table: str) -> int:
    """Runs, or events, a Redis namespace holds (its key layout: store/redis/_store.py)."""
    import redis.asyncio as aioredis

    client_ = aioredis.Redis.from_url(REDIS_BASE, decode_responses=True)
    prefix = _redis_prefix(url)
    try:
        if table == "runs":
            return int(await client_.zcard(f"{prefix}runs"))
        assert table == "events"
        logs = [key async for key in client_.scan_iter(f"{prefix}ev:*", count=1000)]
        pipe = client_.pipeline(transaction=False)  # one round trip: polled while the copy races on
        for key in logs:
            pipe.llen(key)
        return sum(int(n) for n in await pipe.execute())
    finally:
        await client_.aclose()


async def _spoil(target_url: str) -> None:
    """One event's data changed (run 7's first), one run gone (3000), on the target."""
    if target_url.startswith("redis"):
        import redis.asyncio as aioredis

        client_ = aioredis.Redis.from_url(REDIS_BASE, decode_responses=True)
        prefix = _redis_prefix(target_url)
        try:
            kind, _data, at = json.loads(await client_.lindex(f"{prefix}ev:7", 0))
            await client_.lset(f"{prefix}ev:7", 0, json.dumps([kind, '{"n": -1}', at]))
            await client_.delete(f"{prefix}run:3000")
            await client_.zrem(f"{prefix}runs", "3000")
        finally:
            await client_.aclose()
        return
    schema = target_url.rsplit("schema=", 1)[1]
    conn = await asyncpg.connect(PG_BASE)
    try:
        await conn.execute(f'UPDATE "{schema}".events SET data = $1 WHERE run_id = 7 AND seq = 1',
                           '{"n": -1}')
        await conn.execute(f'DELETE FROM "{schema}".runs WHERE id = 3000')
    finally:
        await conn.close()


async def _killed_halfway(source_url: str, target_url: str, table: str = "runs") -> None:
    """3,000 runs on the source, and a move of them SIGKILLed partway through the copy of
    `table`."""
    source = client(source_url)
    await source.open()
    try:
        for _ in range(6):
            await source.submit_many(apps.record, [{"n": i} for i in range(500)])
    finally:
        await source.close()
    planned = runwright("move", "--dry-run", "--json", "--url", source_url, "--to", target_url)
    assert planned.returncode == 0, planned.stderr
    plan = json.loads(planned.stdout)
    assert plan["kinds"]["runs"] == 3000 and plan["rows_per_s"] > 0 and plan["seal_s"] > 0
    argv = [sys.executable, "-m", "runwright", "move", "--url", source_url, "--to", target_url,
            "--batch", "20", "--json"]
    killed = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        async def under_way() -> bool:
            return await _target_rows(target_url, table) >= 200

        await wait_until(under_way, f"the copy of {table} is under way", interval_s=0.01)
        killed.send_signal(signal.SIGKILL)
    finally:
        killed.wait()
    halfway = await _target_rows(target_url, table)
    assert 0 < halfway < plan["kinds"][table], f"killed halfway through {table}"
    # The source stays sealed, saying where it is moving; the target refuses to be used.
    status = runwright("status", "--url", source_url)
    assert status.returncode == 9 and "is moving to" in status.stderr, status.stderr
    status = runwright("status", "--url", target_url)
    assert status.returncode == 9 and "a move into this store" in status.stderr, status.stderr


@pytest.mark.parametrize("table", ["runs", "events"])
@pytest.mark.parametrize("ends", [DIRECTIONS[0], DIRECTIONS[2]], indirect=True,
                         ids=["sqlite-to-postgres", "sqlite-to-redis"])
async def test_a_move_killed_halfway_resumes_to_the_same_outcome(ends: tuple[str, str], table: str) -> None:
    source_url, target_url = ends
    await _killed_halfway(source_url, target_url, table)
    resumed = runwright("move", "--url", source_url, "--to", target_url, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["resumed"] is True
    checked = runwright("move", "--check", "--url", source_url, "--to", target_url)
    assert checked.returncode == 0 and "no difference" in checked.stdout, checked.stdout + checked.stderr
    assert await _target_rows(target_url) == 3000
    assert runwright("status", "--url", target_url).returncode == 0

    # --check sees one changed value, and one row gone, naming their kinds.
    await _spoil(target_url)
    differs = runwright("move", "--check", "--url", source_url, "--to", target_url)
    assert differs.returncode == 1, differs.stdout + differs.stderr
    assert "runs: 3000 rows" in differs.stdout and "2999 (" in differs.stdout, differs.stdout
    (events,) = [line for line in differs.stdout.splitlines() if line.startswith("events: ")]
    rows = re.findall(r"(\d+) rows? \((\w+)\) on the source, (\d+) \((\w+)\)", events)
    assert rows and rows[0][0] == rows[0][2] and rows[0][1] != rows[0][3], events  # as many, not the same


@pytest.mark.parametrize("ends", DIRECTIONS[:1], indirect=True, ids=["sqlite-to-postgres"])
async def test_an_abandoned_move_unseals_the_source_and_leaves_the_partial_copy_unused(
        ends: tuple[str, str], tmp_path: Path) -> None:
    source_url, target_url = ends
    await _killed_halfway(source_url, target_url)
    abandoned = runwright("move", "--abandon", "--url", source_url)
    assert abandoned.returncode == 0, abandoned.stderr
    source = client(source_url)
    await source.open()  # not refused: unsealed
    try:
        await source.submit(apps.record, n=1)
    finally:
        await source.close()
    # The partial copy is no target for a new move (its rows may be stale now) ...
    again = runwright("move", "--url", source_url, "--to", target_url)
    assert again.returncode == 2 and "abandoned move" in again.stderr, again.stderr
    # ... an empty store is; a moved source cannot be abandoned any more.
    fresh = f"sqlite:///{tmp_path / 'fresh.db'}"
    assert runwright("move", "--url", source_url, "--to", fresh).returncode == 0
    late = runwright("move", "--abandon", "--url", source_url)
    assert late.returncode == 2 and "stays its tombstone" in late.stderr, late.stderr


# Submits in a loop until refused: each acknowledged id on a line of stdout, then the
# refusal's exit (9 for DeploymentMoved, through the CLI's own mapping of errors).
SUBMITTER = """
import asyncio, sys
import runwright as rw
from runwright.cli._exits import code_for

async def main(url):
    app = rw.App(url, auto_migrate=False)
    app.tasks.update(__import__("tests.process.apps", fromlist=["app"]).app.tasks)
    await app.open()
    n = 0
    try:
        while True:
            handle = await app.submit("record", n=n)
            print(handle.id, flush=True)
            n += 1
    except rw.RunwrightError as exc:
        print(f"refused {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return code_for(exc)
    finally:
        await app.close()

sys.exit(asyncio.run(main(sys.argv[1])))
"""


@pytest.mark.parametrize("ends", DIRECTIONS, indirect=True, ids=DIRECTION_IDS)
async def test_submissions_racing_the_seal_are_each_moved_or_refused(ends: tuple[str, str],
                                                                     tmp_path: Path) -> None:
    """Three processes submit as fast as they can while the move seals the source: every
    submission acknowledged is on the target, and each process is refused, with the line,
    once the seal is in (none is acknowledged and then lost, none written after the seal)."""
    source_url, target_url = ends
    async with client(source_url):
        pass  # the schema
    outs = [tmp_path / f"submitter-{i}.out" for i in range(3)]
    submitters = []
    for out in outs:
        with open(out, "wb") as stdout:
            submitters.append(subprocess.Popen([sys.executable, "-c", SUBMITTER, source_url], cwd=ROOT,
                                               stdout=stdout, stderr=subprocess.PIPE))
    try:
        await wait_until(lambda: all(len(out.read_text().splitlines()) >= 20 for out in outs),
                         "every submitter is under way")
        moved = runwright("move", "--url", source_url, "--to", target_url)
        assert moved.returncode == 0, moved.stderr
        codes = []
        for proc in submitters:
            err = proc.communicate(timeout=60)[1].decode(errors="replace")
            codes.append(proc.returncode)
            refusal = r"refused DeploymentMoved: this deployment (is moving to .*, retry in \d+ s|moved to)"
            assert re.search(refusal, err), err
        assert codes == [9, 9, 9]
    finally:
        for proc in submitters:
            if proc.poll() is None:
                proc.kill()
    acknowledged = [int(line) for out in outs for line in out.read_text().splitlines()]
    assert len(acknowledged) == len(set(acknowledged))
    target = client(target_url)
    await target.open()
    try:
        found = {run.id for run in await target.store.run_get_many(acknowledged)}
        assert found == set(acknowledged)
        assert await _target_rows(target_url) == len(acknowledged)  # and nothing else
    finally:
        await target.close()


async def test_a_move_into_the_store_itself_is_refused_and_seals_nothing(tmp_path: Path) -> None:
    """The same file under another spelling is no target: the move would seal the store and
    leave it its own tombstone."""
    url = f"sqlite:///{tmp_path / 'a.db'}"
    async with client(url):
        pass
    done = runwright("move", "--url", url, "--to", f"sqlite:///{tmp_path}/./a.db")
    assert done.returncode == 2 and "is the store this deployment is on already" in done.stderr, done.stderr
    async with client(url) as app:
        assert (await app.submit(apps.record, n=1)).id == 1


@pytest.mark.parametrize("ends", [DIRECTIONS[2]], indirect=True, ids=["sqlite-to-redis"])
async def test_a_move_to_redis_of_kinds_it_does_not_take_yet_is_refused_before_the_seal(
        ends: tuple[str, str]) -> None:
    """A thread's runs (its threads, its history) do not move to Redis yet: the move says
    which kinds and seals nothing, rather than leave them behind."""
    source_url, target_url = ends
    async with client(source_url) as app:
        await app.submit(apps.record, n=1, thread="chat", on_busy="enqueue")
    refused = runwright("move", "--url", source_url, "--to", target_url)
    assert refused.returncode == 2, refused.stderr
    assert "cannot take threads" in refused.stderr and "nothing was moved" in refused.stderr, refused.stderr
    async with client(source_url) as app:  # not sealed: it takes writes
        await app.submit(apps.record, n=2)
    assert await _target_rows(target_url) == 0


@pytest.mark.parametrize("ends", DIRECTIONS[2:], indirect=True, ids=DIRECTION_IDS[2:])
async def test_a_trimmed_log_and_a_journal_with_snapshots_read_the_same_on_redis(
        ends: tuple[str, str]) -> None:
    """The two places where Redis keeps what SQL keeps in one table otherwise: a log cut
    behind its `trimmed` marker (ev:<id> starts at the marker) and a journal archived
    before its last snapshot (steps_old:<id>). On the target they read as on the source,
    and a resume reads from the snapshot."""
    from runwright.store._params import EventAppendParams, EventListParams, EventTrimParams, StepRecordParams

    from ..conformance.helpers import T0, claim, insert, step_record, worker

    source_url, target_url = ends
    async with client(source_url) as app:
        store = app.store
        wid = await store.worker_register(worker())
        await store.run_insert_many([insert()])
        (run,) = await store.run_claim(claim(wid))
        for position, name in enumerate(["a", "snapshot", "b", "snapshot", "c"]):
            result = json.dumps({"state": {"at": position}}) if name == "snapshot" else json.dumps(position)
            assert await step_record(store, StepRecordParams(run.id, run.fence, position, name, "done",
                                                             result, None, now=T0))
        assert await store.event_append(EventAppendParams(
            run.id, run.fence, [("progress", json.dumps({"n": i})) for i in range(20)], now=T0))
        assert await store.event_append(EventAppendParams(run.id, run.fence, [("note", "{}")], mark="m1",
                                                          now=T0))
        assert (await store.event_trim(EventTrimParams(keep=5, now=T0 + 1))).run_ids == [run.id]
        events = [(e.seq, e.kind, e.data) for e in await store.event_list(EventListParams(run.id, limit=100))]
        steps = await store.step_list(run.id)
        resumable = await store.step_list_resumable(run.id)
    assert events[0][1] == "trimmed" and events[0][0] > 1 and [p.position for p in resumable] == [3, 4]

    moved = runwright("move", "--url", source_url, "--to", target_url)
    assert moved.returncode == 0, moved.stderr
    checked = runwright("move", "--check", "--url", source_url, "--to", target_url)
    assert checked.returncode == 0 and "no difference" in checked.stdout, checked.stdout + checked.stderr
    async with client(target_url) as app:
        store = app.store
        found = [(e.seq, e.kind, e.data) for e in await store.event_list(EventListParams(run.id, limit=100))]
        assert found == events
        assert await store.step_list(run.id) == steps
        assert await store.step_list_resumable(run.id) == resumable


@pytest.mark.parametrize("ends", [DIRECTIONS[2]], indirect=True, ids=["sqlite-to-redis"])
async def test_a_redis_namespace_holding_anything_is_no_target(ends: tuple[str, str]) -> None:
    """Even what no move writes yet (here a thread's listing) makes a namespace non-empty."""
    import redis.asyncio as aioredis

    source_url, target_url = ends
    async with client(source_url) as app:
        await app.submit(apps.record, n=1)
    client_ = aioredis.Redis.from_url(REDIS_BASE, decode_responses=True)
    try:
        await client_.zadd(f"{_redis_prefix(target_url)}tlist", {'["", "chat"]': 1.0})
    finally:
        await client_.aclose()
    refused = runwright("move", "--url", source_url, "--to", target_url)
    assert refused.returncode == 2 and "is not empty (it holds keys tlist)" in refused.stderr, refused.stderr
    async with client(source_url) as app:  # not sealed
        await app.submit(apps.record, n=2)
