"""The Redis store (redis-py's asyncio client): store and bus for a cluster that prefers it.

Every key of a deployment lives under one prefix with a hash tag, `rw:{<namespace>}:`,
so every script touches one Redis Cluster slot. Each operation that changes runs is one
Lua script (see `scripts/`, each with a header of its KEYS, ARGV and return codes) that
compares the fence of every write after a claim. Where a decision is in `rules` (busy
policy, cancel, manual retry, rescue), the store reads what the rule needs, asks it in
Python, and applies the answer in a script that re-checks what the decision was made on
and refuses if it changed ("stale"): the store then reads and decides again, so nothing
is applied on a stale read.

Time: scripts judge leases, deadlines and due times by Redis's own clock (`TIME`) unless
the caller injected a `now` or the store was given a clock of its own (`Clock.judged`).
Liveness: Redis has no session to bind a worker to, so each registered worker has a key
`alive:<id>` with a short TTL that this store refreshes while the process lives; a
SIGKILLed or stalled worker's key lapses and its runs are taken over at the next rescue
tick.

Keys (after the prefix):
    ids, worker_ids, thread_ids          counters (run ids order submissions)
    run:<id>                             a run, one field per column
    keys                                 (tenant, key) -> run id
    runs                                 every run id (for listing, newest first)
    due:<priority>.<major>:<n>:<queue>:<task>  queued run ids (zero-padded) by run_at, per
                                         task and major (n: the queue's length in bytes);
                                         due:<priority>:<n>:... for runs that recorded no
                                         version (any major's, as in layout 1)
    dues:<queue>                         a queue's due sets, as "<priority>.<major>:<task>"
                                         (or "<priority>:<task>")
    running                              running run ids by lease expiry
    owned:<worker>, owners               running runs of each worker; workers owning some
    deadlines                            open runs with a deadline, by deadline_at
    ended                                runs ended in the last hour, by finished_at; the
                                         newest ENDED_KEEP of them
    children:<id>                        a run's child runs
    forks:<id>                           a run's forks (fork.lua), which a list of them reads
    emarks:<id>                          a run's emits: [mark, kind] -> the seq of its first
                                         append (see event_append.lua)
    ev:<id>                              a run's log: seq n is index n-1, or n-trimmed_seq
                                         once trimmed (run:<id>'s trimmed_seq: the marker)
    steps:<id>, steps_old:<id>           a run's journal: position -> entry; the entries
                                         before its last snapshot are in steps_old
    q:<id>:<position>, qs:<id>, qpending a run's questions, its positions, the unanswered
                                         (run:<id>'s `asking` counts its unanswered ones)
    counts                               (tenant, queue, state) -> number of runs
    threads, thread:<n>, topen:<n>, tmsg:<n>   threads (identity -> n), each one's hash
                                         {created_at, deleted_at, ident}, open runs, history
    truns:<n>                            a thread's runs (those kept), by id
    tturn:<n>                            run id -> its turn, of a thread's runs that went
                                         ahead of waiting ones (topen:<n> scores them so)
    tlist, tlist:<tenant>                every thread's identity by created_at, and each
                                         tenant's ('' for none): listing threads
    tev:<n>                              a thread's log: "<run id>:<seq>", tseq n at index n-1
                                         (events appended since this key came to be)
    sched:<attribute>                    schedules, one hash per attribute
    workers, beats, alive:<id>           registrations, heartbeat times, liveness
    lease:<name>                         named leases (the retention sweep's)
    reclaimed, reclaim_cursor            reclaimed id ranges (lo -> hi); where retention's
                                         scan of `runs` starts
    trim_cursor                          where the next trim of long logs scans `runs` from
    tomb_cursor, tmsg_cursor             where retention's scans of `threads` resume (HSCAN
                                         cursors: tombstones, long histories)
    flow                                 flow control keys: "<kind>:<name>:<key>" ->
                                         "<run id>|<due time>", the key's latest run
                                         (store._flow_rules); retention removes those no
                                         decision needs (flow_reclaim.lua)
    flow_cursor                          where retention's scan of `flow` resumes
    bucket:<name>                        a rate limit's token bucket {tokens, updated_at}
    ldue:<n>:<limits>:<due set>          the queued runs of a due set (the key after "due:")
                                         that carry one limits text (n: its length in
                                         bytes), by run_at: also in the due set itself
    lheads:<due set>                     the texts with runs in a due set, by their first
                                         run's run_at (what the limited claim walks)
    lqueued                              due set key -> how many of its runs carry limits
    lheld                                run id -> limits, of each running run that carries
                                         concurrency limits (what the limited claim counts;
                                         a run leaves it in the script that ends its running)
    limit_overrides                      "<name>" or "<name>:<key>" -> the operator's max;
                                         "fair/<name>[:<key>]" -> a fair key's weight
    fair                                 "fair/<name>:<key>" -> the key's pass, "fair/" -> V
                                         (store._fair_rules; written by the fair claim)
    schema_version
Channels: queued, done, cancel, events (payload: comma-separated run ids).
"""

from __future__ import annotations

import asyncio
import json
import os

import redis.asyncio as aioredis

from ...core._clock import Clock, StoreClock
from ...errors import StoreUnreachable
from .. import _rules as rules
from .._bus import Bus
from .._hub import Hub
from .._liveness import Unmarked
from .._moved import MARK, refusal_of_mark
from ._base import LIST_CHUNK
from ._errors import FAILURES
from ._events import RedisEvents
from ._forks import RedisForks
from ._journal import RedisJournal
from ._keeper import LivenessKeeper
from ._lifecycle import RedisLifecycle
from ._limits import RedisLimits
from ._listener import Listener
from ._questions import RedisQuestions
from ._queues import RedisQueues
from ._retention import RedisRetention
from ._runs import RedisRuns
from ._schedules import RedisSchedules
from ._scripts import Scripts
from ._signals import RedisSignals
from ._threads import RedisThreads
from ._workers import RedisWorkers

__all__ = ["DEFAULT_LIVENESS_S", "DEFAULT_NAMESPACE", "RedisStore"]

# How long a worker's liveness key outlives its last refresh: a SIGKILLed worker's runs
# are taken over this long after it died, plus MISSING_GRACE_S (a lapsed key is a death
# only once it stays lapsed that long: _liveness.py) and a rescue tick. Refreshed 4 times
# per TTL by a thread of the process (_keeper.py). Defaults to 1 s.
DEFAULT_LIVENESS_S = 1.0
DEFAULT_NAMESPACE = "runwright"  # the namespace a URL without ?namespace= uses
# Redis keeps no tables: the version names the key layout above. 2: due sets per major,
# workers' versions and majors (layout 1 is read as it was, so moving to 2 rewrites nothing).
# 3: threads listed (tlist*, truns:<n>, a thread's ident); migrating to it indexes the
# threads and runs layout 2 wrote, a chunk a script (see `_backfill_thread_lists`).
# 4: concurrency limits (a run's `limits`, lheld, limit_overrides); moving to it rewrites
# nothing, and an older process, which would claim a limited run as any other, refuses it.
# 5: the due sets of limits texts (ldue, lheads, lqueued), so a full key's backlog costs the
# limited claim one look; migrating to it indexes the queued runs layout 4 wrote, a chunk
# a script (see `_backfill_limit_texts`).
# 6: rates per key (a rate's entry in a run's `limits`, rate:<slot>); moving to it rewrites
# nothing, and an older process, which would take a rate for a concurrency limit, refuses it.
SCHEMA_VERSION = 6
VERSIONED_RUNS = 2  # the layout that records the version of the app that submitted a run
LISTED_THREADS = 3  # the layout that lists threads
LIMIT_TEXTS = 5  # the layout that keeps the due sets of limits texts
POOL_CONNECTIONS = 64  # per store; Redis answers one command at a time anyway
POOL_WAIT_S = 30.0  # for a free connection, before the call counts as an outage
# The newest ends kept for the latency sample (`ended`): five times what its largest
# reader asks for (the dashboard's series, 20,000), so a tenant's share of it stays whole.
ENDED_KEEP = 100_000


class RedisStore(RedisRuns, RedisForks, RedisLifecycle, RedisJournal, RedisThreads, RedisQuestions,
                 RedisSignals, RedisEvents, RedisRetention, RedisSchedules, RedisQueues, RedisWorkers,
                 RedisLimits):
    """Store on one Redis namespace. See `runwright.store._interface.Store`."""

    schema_version_known = SCHEMA_VERSION
    schema_noun = "key layout"  # Redis has no schema: its versions number how keys are laid out
    ended_keep = ENDED_KEEP  # read when the scripts are loaded, at open()
    heed_moves = True  # a move writing into this namespace sets it False on its own store
    has_sessions = True  # clients named `runwright:<namespace>:<pid>` (see sessions_cut)
    # Redis runs one script at a time, and a claim's script costs about 17 µs a run: a
    # claim of 500 held the server 8 ms, while the other workers' finishes and claims
    # waited. Two workers of 500 slots drained 28.9k runs/s, against 34.4k at 64 slots;
    # claims of at most 200 gave 33.7k at 500 slots (and 100, 33.2k).
    claim_most: int | None = 200

    def __init__(self, url: str, client_url: str, namespace: str, *,
                 liveness_s: float = DEFAULT_LIVENESS_S, clock: Clock | None = None) -> None:
        self.url = url
        self.namespace = namespace
        self.where = f"redis namespace {namespace!r}"
        self.hub = Hub()
        self.clock = clock or StoreClock()  # Redis's TIME judges (see runwright.core._clock)
        self.prefix = f"rw:{{{namespace}}}:"
        self.liveness_s = liveness_s
        self._client_url = client_url
        self._redis: aioredis.Redis | None = None
        self._scripts: Scripts | None = None
        self._listener: Listener | None = None
        self._keeper: LivenessKeeper | None = None  # from the first worker registered
        self._unmarked = Unmarked()

    # -- connections ----------------------------------------------------------------

    def _client(self) -> aioredis.Redis:
        # A blocking pool: more calls at once than connections wait for one, where
        # redis-py's default pool raises MaxConnectionsError past 100 (a worker with 200
        # runs journaling steps at once would have read that as an outage).
        pool = aioredis.BlockingConnectionPool.from_url(
            self._client_url, max_connections=POOL_CONNECTIONS, timeout=POOL_WAIT_S,
            decode_responses=True, socket_connect_timeout=5, socket_timeout=30,
            socket_keepalive=True, health_check_interval=10,
            # As PostgreSQL's application_name: an operator (or `runwright verify`) can
            # find this deployment's connections in CLIENT LIST, or one process's, and
            # cut only those.
            client_name=self.session_name)
        return aioredis.Redis.from_pool(pool)

    @property
    def session_name(self) -> str:
        """The name of this process's connections: `runwright:<namespace>:<pid>`."""
        return f"runwright:{self.namespace}:{os.getpid()}"

    async def sessions_cut(self) -> int:
        """CLIENT KILL this process's connections, its fleet bus's too, as a cut network
        would (the blip `runwright verify --fleet` asks a member for): how many."""
        admin = aioredis.Redis.from_url(self._client_url, decode_responses=True,
                                        socket_connect_timeout=5)
        try:
            names = {self.session_name, f"runwright-fleet:{os.getpid()}"}
            cut = 0
            for entry in await admin.client_list():
                if entry.get("name") in names:
                    cut += int(await admin.client_kill_filter(_id=entry["id"]) or 0)
            return cut
        finally:
            await admin.aclose()

    @property
    def redis(self) -> aioredis.Redis:
        assert self._redis is not None, "store is not open"
        return self._redis

    def key(self, name: str) -> str:
        return self.prefix + name

    async def open(self, create: bool = True) -> None:
        self._redis = self._client()
        self._scripts = Scripts(self._redis, self.key("ids"), self.ended_keep)
        try:
            await self._redis.ping()
            await self._now(None)  # measures this machine's clock against Redis's
            await self._scripts.load_all(self._redis)
        except FAILURES as exc:
            await self.close()
            raise StoreUnreachable(f"redis: cannot connect to {_safe(self._client_url)}: {exc}") from exc
        try:
            await self._check_schema_known()
            if self.heed_moves:
                await self._refuse_if_moving()
        except BaseException:
            await self.close()
            raise

    async def _refuse_if_moving(self) -> None:
        """A namespace `runwright move` is writing into refuses its processes until it is
        done, as a SQL target does (the move's mark: store._moved; one read, at open)."""
        moved = refusal_of_mark(await self._call(self.redis.hget, self.key(f"lease:{MARK}"), "holder"))
        if moved is not None:
            raise moved

    def bus(self, root: str) -> Bus:
        """The fleet's bus in this namespace: pub/sub and a hash per life, on a client of
        its own."""
        from ._bus import RedisBus

        return RedisBus(self._client_url, self.prefix, root)

    async def close(self) -> None:
        if self._keeper is not None:
            await asyncio.to_thread(self._keeper.stop)
            self._keeper = None
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    # -- schema -----------------------------------------------------------------------

    async def schema_version(self) -> int:
        return int(await self._call(self.redis.get, self.key("schema_version")) or 0)

    async def _check_schema_known(self) -> None:
        rules.check_schema_known(await self.schema_version(), self.schema_version_known, self.where,
                                 self.schema_noun)

    async def require_schema(self) -> None:
        rules.check_schema_current(await self.schema_version(), self.schema_version_known, self.where,
                                   self.schema_noun)

    async def migrate(self) -> list[int]:
        await self._check_schema_known()
        if await self.schema_version() < LISTED_THREADS:
            await self._backfill_thread_lists()  # before the version says it is done
        if await self.schema_version() < LIMIT_TEXTS:
            await self._backfill_limit_texts()
        found = int(await self._script("migrate", self.schema_version_known))
        rules.check_schema_known(found, self.schema_version_known, self.where, self.schema_noun)
        return list(range(found + 1, self.schema_version_known + 1))

    async def _backfill_thread_lists(self) -> None:
        """Index what an older layout wrote: every thread in the lists by creation time,
        every threaded run in its thread's runs. A chunk a script, so Redis is never held
        long; idempotent, so a migration cut short is simply run again."""
        cursor = 0
        while True:
            cursor, found = await self._call(self.redis.hscan, self.key("threads"), cursor, None, LIST_CHUNK)
            if found:
                await self._script("thread_backfill", "threads", *found)
            if cursor == 0:
                break
        top = "+inf"
        while ids := await self._call(self.redis.zrevrangebyscore, self.key("runs"), top, "-inf", 0,
                                      LIST_CHUNK):
            await self._script("thread_backfill", "runs", *ids)
            top = f"({ids[-1]}"

    async def _backfill_limit_texts(self) -> None:
        """Index the queued runs an older layout wrote that carry concurrency limits in
        their texts' due sets: every due set of every queue, a chunk a script, so Redis is
        never held long; idempotent, so a migration cut short is simply run again. The
        queues: those the counters say hold queued runs."""
        counts = await self._call(self.redis.hgetall, self.key("counts"))
        queues = {json.loads(field)[1] for field, n in counts.items()
                  if json.loads(field)[2] == "queued" and int(n) > 0}
        for queue in sorted(queues):
            for member in await self._call(self.redis.smembers, self.key(f"dues:{queue}")):
                start = 0
                while int(await self._script("limits_backfill", queue, member, start,
                                             LIST_CHUNK)) == LIST_CHUNK:
                    start += LIST_CHUNK

    # -- notifications ------------------------------------------------------------------

    async def listen(self, runs: bool = True) -> None:
        if self._listener is None:
            self._listener = Listener(self._client, self.hub, self.prefix)
            await self._listener.start(runs)
        elif runs:
            await self._listener.follow_runs()


# -- helpers --------------------------------------------------------------------------


def _safe(url: str) -> str:
    """The URL without its password, for error messages."""
    if "@" not in url:
        return url
    scheme, rest = url.split("//", 1)
    credentials, host = rest.split("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}//{user}:***@{host}"
