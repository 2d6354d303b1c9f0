"""This process's reading of the database server's clock (StoreClock) is never ahead of
the server, however its round trip was slowed: a time written from here (a submission's
due time) is then never in the server's future by mistake.

PostgreSQL only: its inserts write due times computed here, with the offset measured at
open and at each heartbeat. Redis writes them by the server's TIME inside its scripts, and
SQLite is one machine's clock.
"""

from __future__ import annotations

import os

import pytest

from runwright.store import store_from_url
from runwright.store._params import RunClaimParams, RunInsertParams, WorkerRegisterParams

from ..conftest import PG_BASE
from ..tcp_proxy import TcpProxy

SLOWED_S = 0.2  # a request's way out, slowed as a loaded CI machine slowed it


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_run_submitted_for_now_is_claimable_at_once_after_a_slow_clock_read(store_url: str) -> None:
    """The clock is read at open through a forwarder that holds each request SLOWED_S on its
    way out: the server reads its clock SLOWED_S after this process asked. Taken halfway
    through that round trip, the reading put this process SLOWED_S / 2 ahead of the server,
    and a run submitted for now was not yet due for a claim right after (seen on CI: a
    claim of a just-queued run came back empty)."""
    proxy = TcpProxy("127.0.0.1", 5432)
    await proxy.open()
    host_port = PG_BASE.split("@", 1)[1].split("/", 1)[0]
    migrated = store_from_url(store_url)
    await migrated.open()
    await migrated.migrate()
    await migrated.close()
    store = store_from_url(store_url.replace(host_port, f"127.0.0.1:{proxy.port}"))
    proxy.outbound_delay_s = SLOWED_S
    try:
        await store.open()  # reads the server's clock, slowed
        proxy.outbound_delay_s = 0.0
        wid = await store.worker_register(WorkerRegisterParams("test-host", os.getpid(), ["default"], ["t"]))
        for n in range(5):  # each claim comes within SLOWED_S / 2 of its submission
            (run,) = await store.run_insert_many([RunInsertParams(key=f"k{n}", task="t", args="{}")])
            claimed = await store.run_claim(RunClaimParams(wid, ("default",), ("t",), 1, 30.0))
            assert [r.id for r in claimed] == [run.id], (run.run_at, store.clock())
    finally:
        await store.close()
        await proxy.close()
