"""Keeping a process's workers alive on Redis, from a thread of its own.

A worker's liveness key (alive:<id>, with a TTL of `liveness_s`) says that its process
lives: when it lapses, the rescuers take the worker's runs over. It was refreshed by a
task of the worker's event loop, so a loop that did not turn for one TTL plus the lapse
grace (1.3 s by default) read as a dead process. On a busy machine that happened to
living workers: a worker just started, its loop slowed sevenfold by a loaded CPU, lost
its five runs to a rescuer that ran them a second time (a rolling upgrade under the full
suite). A thread needs the GIL for microseconds a refresh, so it refreshes on time however
busy the loop is, and the key means what PostgreSQL's session lock means: the process
lives and reaches the database. A SIGKILLed or SIGSTOPped process stops its thread too and
is taken over as fast as before; a loop that is blocked (not dead) loses its runs when
their leases expire, and the worker itself once its heartbeat (the loop's) is older than
`worker_stale_s`, as DESIGN asks of a stalled worker.

The thread has its own synchronous connection, named as the store's connections are, so
an operator who cuts this process's sessions cuts it too (`RedisStore.sessions_cut`), and
calls the same `worker_heartbeat` script: it never brings back a worker that a rescuer
declared dead.
"""

from __future__ import annotations

import logging
import threading

import redis

from ._errors import FAILURES

__all__ = ["LivenessKeeper", "REFRESHES_PER_TTL"]

log = logging.getLogger("runwright.store.redis")
# A liveness key is set again this many times per TTL: a refresh delayed by a busy
# machine or a slow round trip still lands before the key lapses.
REFRESHES_PER_TTL = 4


class LivenessKeeper:
    """A daemon thread that sets the liveness keys of this process's workers again,
    REFRESHES_PER_TTL times per TTL, until `stop`."""

    def __init__(self, client_url: str, client_name: str, first_key: str, script: str,
                 liveness_s: float) -> None:
        self._ttl_ms = max(1, int(liveness_s * 1000))
        self._interval_s = liveness_s / REFRESHES_PER_TTL
        # A call never waits longer than a TTL: a refresh that late is useless, the next try.
        self._client = redis.Redis.from_url(
            client_url, decode_responses=True, socket_connect_timeout=max(1.0, liveness_s),
            socket_timeout=max(1.0, liveness_s), client_name=client_name)
        self._keys = [first_key]
        self._script = self._client.register_script(script)
        self._ids: set[int] = set()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="runwright-liveness", daemon=True)
        self._thread.start()

    def add(self, worker_id: int) -> None:
        with self._lock:
            self._ids.add(worker_id)

    def discard(self, worker_id: int) -> None:
        with self._lock:
            self._ids.discard(worker_id)

    def _run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            with self._lock:
                ids = list(self._ids)
            for worker_id in ids:
                try:
                    alive = self._script(keys=self._keys, args=[worker_id, "keep", self._ttl_ms])
                except FAILURES as exc:
                    log.warning("liveness refresh failed (%s); retrying", exc)
                    continue
                if not alive:
                    self.discard(worker_id)  # declared dead: its worker registers again

    def stop(self) -> None:
        """Stop refreshing and close the connection (blocks up to one refresh's call)."""
        self._stopping.set()
        self._thread.join()
        self._client.close()
