"""The fleet bus in one process, on every backend: several Apps on one store are several
processes' fleets (each with its own bus and subscription). What each backend's bus
promises on its own (claims, generations, TTLs, delivery) is in tests/conformance/test_bus.py."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import AsyncIterator, Callable

import pytest

import runwright as rw
from runwright.fleet import Outcome, State
from runwright.fleet._presence import departed
from runwright.store._liveness import hostname_of, pid_alive, this_machine

from ..pid_namespace import absent_pid, in_own_pid_namespace, require_pid_namespaces
from ..process.harness import wait_until

FAST = {"RUNWRIGHT_FLEET_HEARTBEAT_S": "0.2", "RUNWRIGHT_FLEET_STALE_S": "0.8",
        "RUNWRIGHT_FLEET_TTL_S": "2"}


@pytest.fixture
async def make_app(store_url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[..., rw.App]]:
    for name, value in FAST.items():
        monkeypatch.setenv(name, value)
    made: list[rw.App] = []

    def make(version: str = "1.0.0") -> rw.App:
        app = rw.App(store_url, version=version)
        made.append(app)
        return app

    yield make
    for app in made:
        if app.fleet.member is not None:
            await app.fleet.member.leave()
        await app.close()


async def joined(app: rw.App, kind: str = "worker", state: State = State.READY) -> rw.App:
    member = await app.fleet.member_for(kind)
    await member.join()
    await member.resync()
    if state is State.READY:
        await member.ready()
    return app


async def test_each_life_takes_the_lowest_free_slot_and_a_new_generation(make_app):
    apps = [await joined(make_app()) for _ in range(3)]
    assert [a.fleet.member.name for a in apps] == ["worker-1", "worker-2", "worker-3"]
    first = {a.fleet.member.name: a.fleet.member.life.generation for a in apps}
    await apps[1].fleet.member.leave()
    again = await joined(make_app())
    assert again.fleet.member.name == "worker-2"
    assert again.fleet.member.life.generation == first["worker-2"] + 1
    server = await joined(make_app(), kind="server")
    assert server.fleet.member.name == "server-1"
    names = [row["name"] for row in await apps[0].fleet.workers()]
    assert names == ["server-1", "worker-1", "worker-2", "worker-3"]


async def test_a_broadcast_reports_every_process_with_what_it_did(make_app):
    apps = [await joined(make_app()) for _ in range(3)]
    for app in apps:
        app.cache.set("prices:eu", 1)
        app.cache.set("other", 2)

    @apps[2].on_fleet("reload-config")
    def reload(payload):
        raise RuntimeError("config file unreadable")

    for app in apps[:2]:
        app.on_fleet("reload-config")(lambda payload: {"loaded": payload["file"]})

    report = await apps[0].fleet.broadcast("reload-config", {"file": "a.toml"}, timeout_s=10)
    assert [(r.name, r.outcome) for r in report] == [
        ("worker-1", Outcome.APPLIED), ("worker-2", Outcome.APPLIED), ("worker-3", Outcome.FAILED)]
    assert report[0].detail == {"loaded": "a.toml"}
    assert "config file unreadable" in report[2].error
    evicted = await apps[0].fleet.broadcast("evict-cache", {"prefix": "prices:"}, timeout_s=10)
    assert [r.detail for r in evicted] == [{"evicted": 1}] * 3
    assert all("prices:eu" not in a.cache and "other" in a.cache for a in apps)
    again = await apps[0].fleet.broadcast("evict-cache", {"prefix": "prices:"}, timeout_s=10)
    assert [(r.outcome, r.detail) for r in again] == [(Outcome.APPLIED, {"evicted": 0})] * 3
    unknown = await apps[0].fleet.broadcast("no-such-op", timeout_s=10)
    assert {r.outcome for r in unknown} == {Outcome.FAILED}


async def test_processes_not_ready_are_reported_in_their_state(make_app):
    ready = await joined(make_app())
    await joined(make_app(), state=State.RESYNCING)
    leaving = await joined(make_app())
    await leaving.fleet.member.recycling(7.0)
    report = await ready.fleet.broadcast("ping", timeout_s=10)
    assert [(r.name, r.outcome) for r in report] == [
        ("worker-1", Outcome.APPLIED), ("worker-2", Outcome.RESYNCING), ("worker-3", Outcome.RECYCLING)]
    rows = {row["name"]: row for row in await ready.fleet.workers()}
    assert rows["worker-3"]["state"] == "recycling" and rows["worker-3"]["drain_s"] == 7.0


async def test_two_majors_on_one_namespace_never_see_each_other(make_app):
    v1 = await joined(make_app("1.4.0"))
    v2 = await joined(make_app("2.0.0"))
    assert v1.fleet.member.name == v2.fleet.member.name == "worker-1"
    seen: list[str] = []
    v2.on_fleet("mark")(lambda payload: seen.append("v2"))
    v1.on_fleet("mark")(lambda payload: seen.append("v1"))
    report = await v1.fleet.broadcast("mark", timeout_s=10)
    assert [(r.name, r.outcome) for r in report] == [("worker-1", Outcome.APPLIED)]
    assert report[0].generation == v1.fleet.member.life.generation
    await asyncio.sleep(0)  # nothing of v1's op can still be on its way to v2's handler
    assert seen == ["v1"]
    assert [row["name"] for row in await v2.fleet.workers()] == ["worker-1"]


async def test_a_paused_queue_is_durable_and_read_at_boot(make_app):
    first = await joined(make_app())
    report = await first.fleet.broadcast("pause-queue", {"queue": "emails"}, timeout_s=10)
    assert [r.detail for r in report] == [{"paused": ["emails"]}]
    assert first.fleet.member.paused == {"emails"}
    later = await joined(make_app())  # started after the op: reads it in its resync
    assert later.fleet.member.paused == {"emails"}
    await first.fleet.broadcast("resume-queue", {"queue": "emails"}, timeout_s=10)
    assert later.fleet.member.paused == set() == await later.fleet.paused_queues()


async def test_a_life_that_stops_heartbeating_reads_stale_then_ends(make_app):
    watcher = await joined(make_app())
    quiet = await joined(make_app())
    member = quiet.fleet.member
    old = member.life
    member._heartbeat.cancel()  # noqa: SLF001 - its process stalled: no more heartbeats
    rows = await wait_until(lambda: _row(watcher, "worker-2", "stale"), "worker-2 reads stale")
    assert rows["generation"] == old.generation
    report = await watcher.fleet.broadcast("ping", timeout_s=10)
    assert [(r.name, r.outcome) for r in report] == [("worker-1", Outcome.APPLIED),
                                                     ("worker-2", Outcome.STALE)]
    await wait_until(lambda: _absent(watcher, "worker-2"), "worker-2's TTL passes")
    # Away longer than the TTL: the life ended (the bus refuses its refresh, see
    # tests/conformance/test_bus.py); the next heartbeat begins a new one.
    await member._beat_once()  # noqa: SLF001
    assert (member.life.name, member.life.generation) == ("worker-2", old.generation + 1)
    assert await _row(watcher, "worker-2", "ready")


async def test_replies_of_another_generation_are_discarded(make_app):
    app = await joined(make_app())
    census = await app.fleet.census()
    from runwright.fleet._broadcast import Tally

    tally = Tally(census, app.fleet.settings.stale_s)
    life = app.fleet.member.life
    tally.reply(life.name, life.generation - 1, "applied")
    tally.reply(life.name, life.generation + 1, "applied")
    assert not tally.settled
    tally.reply(life.name, life.generation, "ack")
    assert [r.outcome for r in tally.close()] == [Outcome.TIMED_OUT]


async def _row(app: rw.App, name: str, state: str) -> dict | None:
    row = next((r for r in await app.fleet.workers() if r["name"] == name), None)
    return row if row is not None and row["state"] == state else None


async def _absent(app: rw.App, name: str) -> bool:
    return all(r["name"] != name for r in await app.fleet.workers())


async def test_a_sqlite_store_with_live_workers_on_another_host_refuses_to_join(make_app, backend):
    from runwright.errors import ConfigError
    from runwright.store._params import WorkerRegisterParams

    app = make_app()
    await app.open()
    await app.store.worker_register(WorkerRegisterParams(host="another-machine", pid=4242,
                                                         queues=["default"], tasks=["t"]))
    if backend != "sqlite":  # a cluster store: other hosts are the point
        assert (await app.fleet.member_for("worker")).kind == "worker"
        return
    with pytest.raises(ConfigError, match="another host .*another-machine.*RUNWRIGHT_URL"):
        await app.fleet.member_for("worker")


async def test_a_sqlite_store_with_live_workers_of_another_pid_namespace_of_this_host_joins(make_app):
    """A container of this machine (its own pid namespace, the same hostname) shares the
    file, its locks and its clock: it is not another host."""
    import socket

    from runwright.store._params import WorkerRegisterParams

    app = make_app()
    await app.open()
    await app.store.worker_register(WorkerRegisterParams(
        host=f"{socket.gethostname()}~pid:[4026532175]", pid=4242, queues=["default"], tasks=["t"]))
    assert (await app.fleet.member_for("worker")).kind == "worker"


async def test_a_namespace_changed_at_run_time_refuses_to_join(make_app, monkeypatch):
    from runwright.errors import ConfigError

    app = make_app()
    monkeypatch.setenv("RUNWRIGHT_NAMESPACE", "elsewhere")
    with pytest.raises(ConfigError, match="RUNWRIGHT_NAMESPACE changed at run time"):
        await app.fleet.member_for("worker")


def test_a_version_is_a_semantic_version():
    from runwright.errors import ConfigError

    assert rw.App("sqlite:///x.db", version="2.4.0-rc.1+b7").version == "2.4.0-rc.1+b7"
    assert rw.App("sqlite:///x.db").fleet.root == "runwright:v0"
    with pytest.raises(ConfigError, match="semantic version"):
        rw.App("sqlite:///x.db", version="2.4")


# A member in a process of its own: joins as a ready worker, says which life it is, and
# stays (answering the bus) until it is killed.
CONTAINED_MEMBER = """
import asyncio, sys
import runwright as rw

async def main(url):
    app = rw.App(url, version="1.0.0")
    member = await app.fleet.member_for("worker")
    await member.join()
    await member.resync()
    await member.ready()
    print(member.life.name, member.life.generation, flush=True)
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1]))
"""


async def test_a_member_of_another_pid_namespace_is_not_departed_while_alive(make_app, store_url, tmp_path):
    """Its pid, read here, is absent: a process of this namespace must not take that
    for its death (its host tells it is of another pid namespace)."""
    require_pid_namespaces()
    watcher = await joined(make_app())
    pid = absent_pid()
    out = tmp_path / "contained.out"
    with open(out, "wb") as sink:
        contained = subprocess.Popen([*in_own_pid_namespace(pid), sys.executable, "-c", CONTAINED_MEMBER,
                                      store_url], cwd=Path(__file__).resolve().parents[2], stdout=sink,
                                     stderr=subprocess.STDOUT)
    try:
        said = await wait_until(lambda: out.read_text().split() if out.read_text().endswith("\n") else None,
                                "the contained member is ready", timeout_s=60)
        assert said[0] == "worker-2", out.read_text()
        census = await watcher.fleet.census()
        row = census.holder("worker", 2)
        assert row is not None and row.pid == pid and not pid_alive(pid)
        assert not departed(row.life, census)
        report = await watcher.fleet.broadcast("ping", timeout_s=10)
        assert [(r.name, r.outcome) for r in report] == [("worker-1", Outcome.APPLIED),
                                                         ("worker-2", Outcome.APPLIED)]
        assert hostname_of(row.host) == hostname_of(this_machine()) != row.host
    finally:
        contained.kill()  # unshare's --kill-child ends the namespace
        contained.wait()
    # Dead, it is another machine's member to this one: its slot ends with its TTL.
    await wait_until(lambda: _absent(watcher, "worker-2"), "the contained member's TTL passes")
