"""What only the Redis backend has to show: it survives its server blinking and
restarting, and with an append-only file it loses no acknowledged submission.

These tests start a Redis server of their own (its own port and directory, with AOF),
never touching the machine's shared one: they kill its clients and the server itself.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest
import redis.asyncio

import runwright as rw
from runwright.store import store_from_url
from runwright.store._liveness import MISSING_GRACE_S
from runwright.store._params import (
    EventListParams,
    RunEndedParams,
    RunFinishParams,
    RunInsertParams,
    RunRescueParams,
    ThreadListParams,
    WorkerHeartbeatParams,
)

from ..conformance.helpers import T0, claim, insert, worker
from ..ports import free_port
from .conftest import assert_cuts_cost_a_long_run_no_takeover, running_worker


class PrivateRedis:
    """A redis-server on a free port, with `appendonly yes` + `appendfsync everysec`."""

    def __init__(self, directory: Path, *options: str) -> None:
        self.directory = directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.options = options  # more of redis-server's, e.g. ("--busy-reply-threshold", "50")

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0?namespace=aof"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "", "--daemonize", "no",
             *self.options],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError("the private redis-server did not start")

    def crash(self) -> None:
        """SIGKILL: whatever AOF had not fsynced yet (at most about a second) is lost."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.crash()


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def _step_app(url: str) -> rw.App:
    app = rw.App(url)

    @app.task
    async def step(ctx: rw.Context, n: int) -> int:
        await asyncio.sleep(0.01)
        return n

    await app.open()
    return app


async def test_a_redis_whose_clients_are_killed_and_scripts_flushed_mid_run_fails_no_run(
        private_redis: PrivateRedis) -> None:
    app = await _step_app(private_redis.url)
    admin = redis.asyncio.Redis(port=private_redis.port)
    try:
        async with running_worker(app, concurrency=20):
            handles = await app.submit_many("step", [{"n": n} for n in range(300)])
            killed = 0
            for _ in range(3):
                await asyncio.sleep(0.15)
                killed += await admin.client_kill_filter(_type="normal", skipme=True)
                await admin.client_kill_filter(_type="pubsub")  # followers fall back to polling
                await admin.script_flush()  # as after a failover: every script is loaded again
            values = [await h.result(timeout_s=60) for h in handles]
            assert killed > 0
    finally:
        await admin.aclose()
        await app.close()
    assert values == list(range(300))


async def test_finishes_and_a_claim_sent_in_one_round_trip_load_flushed_scripts_again(
        private_redis: PrivateRedis) -> None:
    """run_finish_claim sends both scripts by SHA in one pipeline; after a SCRIPT FLUSH
    each is loaded again and run once: the finish is not refused by a second run of itself."""
    store = store_from_url(private_redis.url)
    await store.open()
    admin = redis.asyncio.Redis(port=private_redis.port)
    try:
        wid = await store.worker_register(worker())
        await store.run_insert_many([insert(), insert(), insert()])
        (first,) = await store.run_claim(claim(wid, limit=1))
        await admin.script_flush()
        end = RunFinishParams(first.id, first.fence, rw.RunState.SUCCEEDED, result="1", now=T0 + 1)
        refused, claimed = await store.run_finish_claim([end], claim(wid, limit=5, now=T0 + 1))
        kinds = [event.kind for event in await store.event_list(EventListParams(first.id))]
    finally:
        await admin.aclose()
        await store.close()
    assert refused == [] and len(claimed) == 2
    assert kinds == ["submitted", "started", "succeeded"]


# Spins on the server's clock for ARGV[1] microseconds: past busy-reply-threshold, every
# other client's command is answered BUSY until it ends.
HOG = """
local t0 = redis.call('TIME')
while true do
  local t = redis.call('TIME')
  if (t[1] - t0[1]) * 1000000 + (t[2] - t0[2]) > tonumber(ARGV[1]) then return 1 end
end
"""


async def test_a_script_past_its_time_limit_is_an_outage_waited_out_not_a_failure(
        tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path, "--busy-reply-threshold", "50")
    server.start()
    app = await _step_app(server.url)
    hog_client = redis.asyncio.Redis(port=server.port)
    try:
        async with running_worker(app, concurrency=20):
            before = await app.submit_many("step", [{"n": n} for n in range(100)])
            hog = asyncio.create_task(hog_client.eval(HOG, 0, 1_500_000))
            seen: Exception | None = None
            while not hog.done() and seen is None:  # until a call meets the busy server
                try:
                    await app.store.schema_version()
                except rw.StoreError as exc:
                    seen = exc
                await asyncio.sleep(0.01)
            await hog
            assert isinstance(seen, rw.StoreUnreachable), seen  # retried, not the request's fault
            after = await app.submit_many("step", [{"n": n} for n in range(100, 200)])
            values = [await h.result(timeout_s=60) for h in before + after]
            # The notification listener reconnected rather than ended: not left polling.
            deadline = time.monotonic() + 30
            while app.store.hub.degraded and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert not app.store.hub.degraded
    finally:
        await hog_client.aclose()
        await app.close()
        server.stop()
    assert values == list(range(200))


async def test_clients_cut_every_1_5_s_cost_a_long_run_no_takeover(private_redis: PrivateRedis) -> None:
    app = rw.App(private_redis.url)
    await app.open()
    admin = redis.asyncio.Redis(port=private_redis.port)

    async def cut() -> None:
        await admin.client_kill_filter(_type="normal", skipme=True)
        await admin.client_kill_filter(_type="pubsub")

    try:
        await assert_cuts_cost_a_long_run_no_takeover(app, cut)
    finally:
        await admin.aclose()
        await app.close()


@pytest.mark.parametrize("backend", ["redis"])
async def test_a_lapsed_liveness_key_is_a_death_only_when_it_stays_lapsed(store, store_url) -> None:
    # After an outage longer than the TTL every key has lapsed; a worker that lives takes
    # its key again within moments, so a rescuer counts a death only at a second look.
    owner = store_from_url(store_url)
    await owner.open()
    wid = await owner.worker_register(worker(now=T0))
    (run,) = await owner.run_insert_many([insert()])
    await owner.run_claim(claim(wid, lease_s=300))
    await owner.close()  # its liveness refresh stops: the key lapses within the TTL
    alive = store.key(f"alive:{wid}")

    async def lapsed() -> None:
        async with asyncio.timeout(30):
            while await store.redis.exists(alive):
                await asyncio.sleep(0.05)

    await lapsed()
    assert await store.run_rescue_many(RunRescueParams(now=T0 + 1, worker_stale_s=1e9)) == []
    assert await store.worker_heartbeat(WorkerHeartbeatParams(wid, now=T0 + 1))  # it came back
    assert await store.run_rescue_many(RunRescueParams(now=T0 + 2, worker_stale_s=1e9)) == []
    await lapsed()  # and lapsed for good
    assert await store.run_rescue_many(RunRescueParams(now=T0 + 3, worker_stale_s=1e9)) == []
    # Dead once lapsed a whole grace by this rescuer's looks.
    (rescued,) = await store.run_rescue_many(RunRescueParams(now=T0 + 3 + MISSING_GRACE_S,
                                                             worker_stale_s=1e9))
    assert rescued.id == run.id and rescued.state is rw.RunState.QUEUED and rescued.recoveries == 1


async def test_with_aof_a_restart_mid_drain_loses_no_acknowledged_submission(
        private_redis: PrivateRedis) -> None:
    app = await _step_app(private_redis.url)
    acknowledged: list[tuple[float, list[int]]] = []  # (monotonic time of the reply, ids)
    crashed_at: list[float] = []

    async def submit_forever() -> None:
        # Until a few batches are acknowledged after the restart: a quick machine could reach
        # any fixed count before the crash and leave nothing to check on the other side.
        n = 0
        while not crashed_at or sum(at > crashed_at[0] for at, _ in acknowledged) < 20:
            try:
                handles = await app.submit_many("step", [{"n": n + i} for i in range(5)])
            except rw.StoreError:
                await asyncio.sleep(0.05)  # the server is down: try again
                continue
            acknowledged.append((time.monotonic(), [h.id for h in handles]))
            n += 5
            await asyncio.sleep(0.005)

    try:
        async with running_worker(app, concurrency=20):
            submitter = asyncio.create_task(submit_forever())
            # Crash once there is a good second and a half of submissions behind us: those
            # acknowledged more than a second before the crash are the ones that must stay.
            while len(acknowledged) < 150 or time.monotonic() - acknowledged[0][0] < 2.5:
                await asyncio.sleep(0.02)
            crashed_at.append(time.monotonic())
            private_redis.crash()
            await asyncio.sleep(0.3)
            private_redis.start()
            await asyncio.wait_for(submitter, 120)
            durable = [run_id for at, ids in acknowledged if at < crashed_at[0] - 1.0 for run_id in ids]
            later = [run_id for at, ids in acknowledged if at > crashed_at[0] for run_id in ids]
            assert len(durable) >= 100 and later
            for run_id in durable + later:
                handle = await app.get(run_id)  # RunNotFound if the restart lost it
                await handle.result(timeout_s=120)
    finally:
        await app.close()


@pytest.mark.parametrize("backend", ["redis"])
async def test_the_latency_sample_keeps_the_newest_ends_only(store_url) -> None:
    # `ended` is trimmed by age (an hour) and by count, so it cannot grow with throughput;
    # the count is ENDED_KEEP (100,000), made small here so that it is reached.
    small = store_from_url(store_url)
    small.ended_keep = 30  # type: ignore[attr-defined]
    await small.open()
    try:
        wid = await small.worker_register(worker())
        await small.run_insert_many([insert(run_at=T0 - 5) for _ in range(50)])
        claimed = await small.run_claim(claim(wid, limit=50, now=T0))
        for i, run in enumerate(claimed):  # one end at a time, each later than the last
            assert await small.run_finish_many([RunFinishParams(
                run.id, run.fence, rw.RunState.SUCCEEDED, result="1", now=T0 + 1 + i)]) == []
        assert await small.redis.zcard(small.key("ended")) == 30  # type: ignore[attr-defined]
        sample = await small.run_ended_times(RunEndedParams(since=T0 - 10, limit=1000))
        assert [finished for _, _, finished in sample] == [T0 + 1 + i for i in range(49, 19, -1)]
    finally:
        await small.close()


def test_the_private_server_is_not_the_shared_one(private_redis: PrivateRedis) -> None:
    assert private_redis.port != 6379 and os.path.isdir(private_redis.directory)


@pytest.mark.parametrize("backend", ["redis"])
async def test_threads_written_by_layout_2_are_listed_after_migrating(store) -> None:
    # What layout 2 wrote: threads and their runs, without the lists layout 3 reads.
    runs = [await store.run_insert_threaded(RunInsertParams(
        key=f"k{i}", task="t", args="{}", thread=thread, on_busy="enqueue", tenant=tenant, now=T0 + i))
        for i, (tenant, thread) in enumerate([("alice", "a"), ("alice", "a"), (None, "b")])]
    lists = [key async for key in store.redis.scan_iter(match=store.key("t[lr]*"))]
    assert len(lists) == 5  # tlist, tlist:alice, tlist:, truns of each thread
    await store.redis.delete(*lists)
    for number in await store.redis.hvals(store.key("threads")):
        await store.redis.hdel(store.key(f"thread:{number}"), "ident")
    await store.redis.set(store.key("schema_version"), 2)
    assert await store.thread_list(ThreadListParams()) == []
    assert await store.migrate() == [3, 4, 5, 6]
    listed = await store.thread_list(ThreadListParams())
    assert [(t.tenant, t.thread, t.runs, t.last_run_id) for t in listed] == [
        (None, "b", 1, runs[2].id), ("alice", "a", 2, runs[1].id)]
    assert [t.thread for t in await store.thread_list(ThreadListParams(tenant="alice"))] == ["a"]
    assert await store.migrate() == []  # and the next process finds nothing to do


async def _pings(port: int) -> int:
    client = redis.asyncio.Redis(port=port)
    try:
        stats = await client.info("commandstats")
        return int(stats.get("cmdstat_ping", {}).get("calls", 0))
    finally:
        await client.aclose()


async def test_quiet_subscriptions_are_pinged_every_few_seconds_not_at_every_read(
        private_redis: PrivateRedis) -> None:
    """The store's pub/sub and the fleet's each PING a quiet connection to prove it is
    still there. The fleet's once sent a PING whenever a read came back empty, and a
    PING's own reply makes the next read come back empty: a PING per round trip,
    thousands a second in every process, on a server of its own here so that every
    PING counted is theirs."""
    store = store_from_url(private_redis.url)
    await store.open()
    bus = store.bus("pings")
    await bus.open()
    heard: list[bool] = []
    try:
        await bus.subscribe(lambda message: None, heard.append)
        before = await _pings(private_redis.port)
        await asyncio.sleep(5)
        pinged = await _pings(private_redis.port) - before
    finally:
        await bus.close()
        await store.close()
    assert 1 <= pinged <= 8, f"{pinged} PINGs in 5 s from two quiet subscriptions"
    assert heard == [], "the bus never dropped"
