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
    bucket:<name>                        a rate limit's token bucket {tokens, updated_at}
    schema_version
Channels: queued, done, cancel, events (payload: comma-separated run ids).
"""

from __future__ import annotations

import asyncio
import enum
import json
import logging
import os
import time
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, Sequence, TypeVar

import redis.asyncio as aioredis

from ...clock import Clock, StoreClock
from ...errors import RunNotFound, StoreError, StoreUnreachable, ThreadDeleted
from ...journal import Event, StepRecord, ThreadEvent
from ...questions import Question
from ...runs import Run, RunState
from ...schedules import Schedule
from ...waiting import halt
from .. import rules
from ..bus import Bus
from ..hub import QUEUED, Hub, events_topic
from ..liveness import Unmarked
from ..params import (
    BucketTakeParams,
    EndedTimes,
    EventAppendParams,
    EventListParams,
    EventsTrimmed,
    EventTrimParams,
    LeaseTakeParams,
    QuestionAnswerParams,
    QuestionListParams,
    QuestionOpenParams,
    QueuePauseParams,
    QueueStat,
    RunCancelParams,
    RunClaimParams,
    RunCountDueParams,
    RunCountParams,
    RunEndedParams,
    RunExpireParams,
    RunExtendParams,
    RunExtendResult,
    RunFinishParams,
    RunInsertParams,
    RunListParams,
    RunNextDueParams,
    RunQueueStatsParams,
    RunReclaimed,
    RunReclaimParams,
    RunRescueParams,
    RunRetryParams,
    RunUnrunnableParams,
    ScheduleAdvanceParams,
    ScheduleDueParams,
    SchedulePauseParams,
    StepRecordParams,
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadEventListParams,
    ThreadForgetParams,
    ThreadGetParams,
    ThreadInfo,
    ThreadListParams,
    ThreadMessagesParams,
    ThreadMessagesTrimmed,
    ThreadMessageTrimParams,
    ThreadRunReclaimParams,
    ThreadTombstoneReclaimParams,
    TombstonesReclaimed,
    UnrunnableKind,
    WorkerHeartbeatParams,
    WorkerInfo,
    WorkerRegisterParams,
    WorkerWatchParams,
)
from .codec import (
    NIL,
    arg,
    as_dict,
    event_from_entry,
    identity,
    question_from_hash,
    run_from_claim,
    run_from_hash,
    step_from_entry,
    step_identity,
)
from .errors import FAILURES, store_error
from .listener import Listener
from .scripts import Scripts

__all__ = ["DEFAULT_LIVENESS_S", "DEFAULT_NAMESPACE", "RedisStore"]

log = logging.getLogger("runwright.store.redis")
# How long a worker's liveness key outlives its last refresh: a SIGKILLed worker's runs
# are taken over this long after it died (plus one rescue tick). Refreshed 4 times per
# TTL, so a loaded event loop has slack before it is taken for dead, and a lapsed key is
# a death only once it stays lapsed MISSING_GRACE_S (liveness.py). Defaults to 1 s.
DEFAULT_LIVENESS_S = 1.0
DEFAULT_NAMESPACE = "runwright"  # the namespace a URL without ?namespace= uses
# Redis keeps no tables: the version names the key layout above. 2: due sets per major,
# workers' versions and majors (layout 1 is read as it was, so moving to 2 rewrites nothing).
# 3: threads listed (tlist*, truns:<n>, a thread's ident); migrating to it indexes the
# threads and runs layout 2 wrote, a chunk a script (see `_backfill_thread_lists`).
SCHEMA_VERSION = 3
LISTED_THREADS = 3  # the layout that lists threads
LIST_CHUNK = 200
POOL_CONNECTIONS = 64  # per store; Redis answers one command at a time anyway
POOL_WAIT_S = 30.0  # for a free connection, before the call counts as an outage
STALE_RETRIES = 50  # re-plans of a decision whose state changed under it, before giving up
T = TypeVar("T")


class Stale(enum.Enum):
    """What a decision's apply answers when the state it was read on changed (_decided)."""

    STALE = "stale"


STALE = Stale.STALE
# The newest ends kept for the latency sample (`ended`): five times what its largest
# reader asks for (the dashboard's series, 20,000), so a tenant's share of it stays whole.
ENDED_KEEP = 100_000
SCAN_PAGES = 10  # pages of `threads` one retention call of a kind looks through, at most


def _claimed(params: RunClaimParams, rows: list[Any]) -> list[Run]:
    """The runs of the claim script's answer, in claim order."""
    if not rows:
        return []
    started_at, lease = (float(value) for value in rows[0])
    return [run_from_claim(values, params.worker_id, started_at, lease) for values in rows[1:]]


class RedisStore:
    """Store on one Redis namespace. See `runwright.store.interface.Store`."""

    schema_version_known = SCHEMA_VERSION
    ended_keep = ENDED_KEEP  # read when the scripts are loaded, at open()
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
        self.clock = clock or StoreClock()  # Redis's TIME judges (see runwright.clock)
        self.prefix = f"rw:{{{namespace}}}:"
        self.liveness_s = liveness_s
        self._client_url = client_url
        self._redis: aioredis.Redis | None = None
        self._scripts: Scripts | None = None
        self._listener: Listener | None = None
        self._alive_ids: set[int] = set()
        self._refresher: asyncio.Task[None] | None = None
        self._closing = False
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
        self._closing = False
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
        except BaseException:
            await self.close()
            raise

    def bus(self, root: str) -> Bus:
        """The fleet's bus in this namespace: pub/sub and a hash per life, on a client of
        its own."""
        from .bus import RedisBus

        return RedisBus(self._client_url, self.prefix, root)

    async def close(self) -> None:
        self._closing = True
        if self._refresher is not None:
            await halt(self._refresher)
            self._refresher = None
        if self._listener is not None:
            await self._listener.stop()
            self._listener = None
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        """A Redis call whose failures read as the store's errors: a connection that is
        gone is StoreUnreachable (the engine retries it), anything else StoreError.

        A cancellation of the caller that the call swallowed is raised once it returns:
        redis-py sends each command under asyncio.wait_for (socket_timeout), which on
        Python 3.11 returns the send's result when the send ends as the task is cancelled
        and drops the cancel (CPython gh-86296). A worker cancels a run once; a run whose
        cancel was lost so ran on to its end (found by tests/process/
        test_cancel_family_race.py: a spawner, cancel requested, submitting for 28 s)."""
        task = asyncio.current_task()
        cancels = task.cancelling() if task is not None else 0
        try:
            value = await fn(*args)
        except FAILURES as exc:
            raise store_error(exc) from exc
        if task is not None and task.cancelling() > cancels:
            raise asyncio.CancelledError()  # what the call did stands, as after any return
        return value

    async def _decided(self, attempt: Callable[[], Awaitable[T | Stale]], changing: str) -> T:
        """Read, decide (the rulebook, in Python), apply in a script that re-checks what the
        decision was made on: `attempt` does one round and answers STALE when the script
        refused. Rounds go on until one applies; `changing` says what kept changing when
        none does."""
        for _ in range(STALE_RETRIES):
            outcome = await attempt()
            if outcome is not STALE:
                return outcome
        raise StoreError(f"{changing} kept changing; try again")

    async def _script(self, name: str, *args: Any) -> Any:
        assert self._scripts is not None, "store is not open"
        return await self._call(self._scripts.call, name, [arg(a) for a in args])

    async def _now(self, given: float | None) -> float:
        """The injected time, else the server's clock (for values written from Python)."""
        judged = self.clock.judged(given)
        if judged is not None:
            return judged
        sent_s = time.time()
        seconds, micros = await self._call(self.redis.time)
        server_s = float(seconds + micros / 1_000_000)
        if isinstance(self.clock, StoreClock):
            self.clock.observe(server_s, sent_s, time.time())
        return server_s

    def _now_arg(self, given: float | None) -> str:
        """A script's `now`: the judged time, or '' for "the server's clock" (TIME there)."""
        judged = self.clock.judged(given)
        return "" if judged is None else repr(float(judged))

    # -- schema -----------------------------------------------------------------------

    async def schema_version(self) -> int:
        return int(await self._call(self.redis.get, self.key("schema_version")) or 0)

    async def _check_schema_known(self) -> None:
        rules.check_schema_known(await self.schema_version(), self.schema_version_known, self.where)

    async def require_schema(self) -> None:
        rules.check_schema_current(await self.schema_version(), self.schema_version_known, self.where)

    async def migrate(self) -> list[int]:
        await self._check_schema_known()
        if await self.schema_version() < LISTED_THREADS:
            await self._backfill_thread_lists()  # before the version says it is done
        found = int(await self._script("migrate", self.schema_version_known))
        rules.check_schema_known(found, self.schema_version_known, self.where)
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

    # -- notifications ------------------------------------------------------------------

    async def listen(self, runs: bool = True) -> None:
        if self._listener is None:
            self._listener = Listener(self._client, self.hub, self.prefix)
            await self._listener.start(runs)
        elif runs:
            await self._listener.follow_runs()

    # -- submitting -----------------------------------------------------------------------

    async def run_insert_many(self, items: Iterable[RunInsertParams]) -> list[Run]:
        params = list(items)
        if not params:
            return []
        args: list[Any] = [self._now_arg(params[0].now), len(params)]
        for p in params:
            args += _insert_fields(p)
        rows = await self._script("insert", *args)
        self.hub.fire(QUEUED)
        return [_existed(run_from_hash(flat), bool(existed)) for existed, flat in rows]

    async def run_insert_threaded(self, params: RunInsertParams) -> Run:
        name = params.thread
        assert name is not None, "a threaded submission names its thread"
        thread = identity(params.tenant, name)

        async def attempt() -> Run | Stale:
            deleted, existing, *open_flat = await self._script(
                "thread_probe", thread, identity(params.tenant, params.key))
            if deleted:
                raise ThreadDeleted(f"thread {name!r} was deleted")
            if existing:
                return _existed(run_from_hash(existing), True)
            hashes = [as_dict(flat) for flat in open_flat]
            open_runs = [run_from_hash(h) for h in hashes]
            asking = {run.id for run, h in zip(open_runs, hashes) if h.get("asking", "0") != "0"}
            turns = {run.id: float(h["turn"]) for run, h in zip(open_runs, hashes) if "turn" in h}
            plan = rules.plan_busy(name, open_runs, params.on_busy, asking, turns)
            seen = ",".join(f"{run.id}:{run.state.value}:{h.get('asking', '0')}"
                            for run, h in zip(open_runs, hashes))
            reply = await self._script(
                "insert_threaded", self._now_arg(params.now), seen, plan.mode,
                json.dumps({"mode": plan.mode}), rules.interrupted_error(),
                None if plan.turn is None else repr(plan.turn),
                len(plan.ask_to_stop), *plan.ask_to_stop, len(plan.end_now), *plan.end_now,
                *_insert_fields(params))
            if reply[0] == "deleted":
                raise ThreadDeleted(f"thread {name!r} was deleted")
            if reply[0] == "stale":
                return STALE
            self.hub.fire_all()  # queued, and the cancel watchers of interrupted runs
            return _existed(run_from_hash(reply[1]), bool(reply[0]))

        return await self._decided(attempt, f"thread {name!r}: its open runs")

    # -- reading runs -------------------------------------------------------------------

    async def run_get(self, run_id: int) -> Run | None:
        fields = await self._call(self.redis.hgetall, self.key(f"run:{run_id}"))
        return run_from_hash(fields) if fields else None

    async def run_get_many(self, run_ids: Sequence[int]) -> list[Run]:
        runs = await self._hashes(sorted(set(run_ids)))
        return [run_from_hash(h) for h in runs if h]

    async def _hashes(self, run_ids: Sequence[int | str]) -> list[dict[str, str]]:
        if not run_ids:
            return []
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hgetall(self.key(f"run:{run_id}"))
        return list(await self._call(pipe.execute))

    async def run_list(self, params: RunListParams) -> list[Run]:
        conditions = rules.list_conditions(params)
        number = await self._listed_thread(params)
        top = f"({params.before_id}" if params.before_id is not None else "+inf"
        out: list[Run] = []
        while len(out) < params.limit:
            ids = await self._call(self.redis.zrevrangebyscore, self.key("runs"), top, "-inf", 0, LIST_CHUNK)
            if not ids:
                break
            for fields in await self._hashes(ids):
                run = run_from_hash(fields) if fields else None
                if run is not None and all(_holds(run, c) for c in conditions) and (
                        number is None or fields.get("thread_no") == number):
                    out.append(run)
            top = f"({ids[-1]}"
        return out[:params.limit]

    async def _listed_thread(self, params: RunListParams) -> str | None:
        """The number of the thread whose runs a listing by thread lists (each run keeps
        its thread's number, never given twice: a run of an earlier thread of the name
        is not of this one), None for a name no thread bears (its runs by name), after
        the check of the reader's incarnation, if given."""
        if params.thread is None:
            return None
        found = await self.thread_get(ThreadGetParams(params.thread, params.tenant))
        if params.incarnation is not None:
            rules.check_thread_readable(params.thread, found, params.incarnation, missing_ok=False)
        return None if found is None else str(found.incarnation)

    async def _counts(self, tenant: str | None) -> list[tuple[str, str, int]]:
        """(queue, state, count) of the counters, of one tenant's runs when given."""
        raw = await self._call(self.redis.hgetall, self.key("counts"))
        out = []
        for name, value in raw.items():
            run_tenant, queue, state = json.loads(name)
            if int(value) and (tenant is None or run_tenant == tenant):
                out.append((queue, state, int(value)))
        return out

    async def run_count_by_state(self, params: RunCountParams) -> dict[str, int]:
        totals: dict[str, int] = {}
        for _, state, count in await self._counts(params.tenant):
            totals[state] = totals.get(state, 0) + count
        return totals

    async def run_queue_stats(self, params: RunQueueStatsParams) -> list[QueueStat]:
        totals: dict[tuple[str, str], int] = {}
        for queue, state, count in await self._counts(params.tenant):
            totals[queue, state] = totals.get((queue, state), 0) + count
        now = await self._now(params.now)
        out: list[QueueStat] = []
        for (queue, state), count in sorted(totals.items()):
            oldest = await self._oldest_due(queue, params.tenant, now) if state == "queued" else None
            out.append((queue, state, count, oldest))
        return out

    async def _oldest_due(self, queue: str, tenant: str | None, now: float) -> float | None:
        best: float | None = None
        for member in await self._call(self.redis.smembers, self.key(f"dues:{queue}")):
            priority, task = member.split(":", 1)
            key = self.key(due_key(priority, queue, task))
            offset = 0
            while True:
                page = await self._call(self.redis.zrangebyscore, key, "-inf", now, offset,
                                        LIST_CHUNK, True)
                if not page:
                    break
                if tenant is None:
                    found = [score for _, score in page[:1]]
                else:
                    tenants = await self._tenants([int(m) for m, _ in page])
                    found = [score for (_, score), t in zip(page, tenants) if t == tenant][:1]
                if found:
                    best = found[0] if best is None else min(best, found[0])
                    break
                offset += LIST_CHUNK
        return best

    async def _tenants(self, run_ids: Sequence[int]) -> list[str | None]:
        pipe = self.redis.pipeline(transaction=False)
        for run_id in run_ids:
            pipe.hget(self.key(f"run:{run_id}"), "tenant")
        return list(await self._call(pipe.execute))

    async def run_ended_times(self, params: RunEndedParams) -> list[EndedTimes]:
        ids = await self._call(lambda: self.redis.zrevrangebyscore(
            self.key("ended"), "+inf", repr(float(params.since)), start=0, num=params.limit))
        pipe = self.redis.pipeline(transaction=False)
        for run_id in ids:
            pipe.hmget(self.key(f"run:{run_id}"), "run_at", "started_at", "finished_at", "tenant")
        out: list[EndedTimes] = []
        for run_at, started_at, finished_at, tenant in await self._call(pipe.execute) if ids else ():
            # A run retried since it ended has no finish any more; another tenant's is not ours.
            if finished_at is not None and (params.tenant is None or tenant == params.tenant):
                out.append((float(run_at), None if started_at is None else float(started_at),
                            float(finished_at)))
        return out

    async def run_next_due_at(self, params: RunNextDueParams) -> float | None:
        keys = ["*"] if params.majors is None else rules.claim_keys(params.majors)
        value = await self._script("next_due", params.fleet or "", len(params.queues), *params.queues,
                                   len(params.tasks), *params.tasks, *keys)
        return None if value is None else float(value)

    async def run_count_due_by_task(self, params: RunCountDueParams) -> dict[str, int]:
        flat = await self._script("count_due", float(params.due_before), *params.queues)
        return {task: int(count) for task, count in zip(flat[::2], flat[1::2])}

    async def run_count_unrunnable(self, params: RunUnrunnableParams) -> list[UnrunnableKind]:
        unrunnable = [kind for kind, _ in await self._unrunnable_aged(params)]
        if params.tenant is None or not unrunnable:
            return unrunnable
        return await self._of_tenant(unrunnable, params)

    async def run_age_unrunnable(self, params: RunUnrunnableParams) -> float | None:
        return max((age_s for _, age_s in await self._unrunnable_aged(params)), default=None)

    async def _unrunnable_aged(self, params: RunUnrunnableParams, workers: Sequence[WorkerInfo] | None = None,
                               ) -> list[tuple[UnrunnableKind, float]]:
        """The unrunnable kinds of every tenant, each with how long its longest-due run has
        been due (a kind of several priorities comes once per priority), judged over
        `workers` (None: the registrations as they are now)."""
        flat = await self._script("due_kinds", self._now_arg(params.now), float(params.due_for_s))
        if not flat:
            return []
        rows = [flat[i:i + 5] for i in range(0, len(flat), 5)]
        kinds = [(queue, task, int(major) if major else None, int(count))
                 for queue, task, major, count, _ in rows]
        unrunnable = rules.unrunnable_kinds(kinds, await self.worker_list() if workers is None else workers)
        return [(kind, float(row[4])) for kind, row in zip(kinds, rows) if kind in unrunnable]

    async def _of_tenant(self, kinds: list[UnrunnableKind],
                         params: RunUnrunnableParams) -> list[UnrunnableKind]:
        """The unrunnable kinds counted over one tenant's runs: the due sets are not per
        tenant, so the runs of these kinds only (about to be closed anyway) are read."""
        cutoff = await self._now(params.now) - params.due_for_s
        out: list[UnrunnableKind] = []
        for queue, task, major, _count in kinds:
            ids: list[str] = []
            for member in await self._call(self.redis.smembers, self.key(f"dues:{queue}")):
                head, member_task = member.split(":", 1)  # "<priority>[.<major>]", as lib.lua
                member_major = head.partition(".")[2]
                if member_task == task and (int(member_major) if member_major else None) == major:
                    ids += await self._call(self.redis.zrangebyscore,
                                            self.key(due_key(head, queue, task)), "-inf", cutoff)
            pipe = self.redis.pipeline(transaction=False)
            for member in ids:
                pipe.hget(self.key(f"run:{int(member)}"), "tenant")
            tenants = await self._call(pipe.execute) if ids else []
            count = sum(1 for tenant in tenants if tenant == params.tenant)
            if count:
                out.append((queue, task, major, count))
        return out

    async def run_fail_unrunnable_many(self, params: RunUnrunnableParams) -> list[Run]:
        """Decided here over the registrations read first, applied by the script only if
        they are still the same ones (a worker that registered meanwhile may serve the
        runs): else it answers "stale" and the decision is made again."""
        params = RunUnrunnableParams(params.due_for_s, params.now)  # every tenant's

        async def attempt() -> list[Run] | Stale:
            workers = await self.worker_list()
            kinds = [kind for kind, _ in await self._unrunnable_aged(params, workers)]
            if not kinds:
                return []
            args: list[Any] = []
            for queue, task, major, _count in kinds:
                args += [queue, task, "" if major is None else major,
                         rules.unrunnable_error(task, major, params.due_for_s)]
            seen = ",".join(str(worker.id) for worker in workers)  # in id order
            rows = await self._script("fail_unrunnable", self._now_arg(params.now), float(params.due_for_s),
                                      json.dumps({"error": "Unrunnable"}), seen, *args)
            if rows == "stale":
                return STALE
            closed = [run_from_hash(row) for row in rows]
            self.hub.fire_changed(closed)
            return closed

        return await self._decided(attempt, "unrunnable runs: the workers' registrations")

    # -- the hot path ---------------------------------------------------------------

    async def run_claim(self, params: RunClaimParams) -> list[Run]:
        return _claimed(params, await self._script("claim", *self._claim_args(params)))

    def _claim_args(self, params: RunClaimParams) -> list[Any]:
        keys = ["*"] if params.majors is None else rules.claim_keys(params.majors)
        return [self._now_arg(params.now), params.limit, params.worker_id, float(params.lease_s),
                params.fleet or "", len(params.queues), *params.queues, len(params.tasks), *params.tasks,
                *keys]

    async def run_extend(self, params: RunExtendParams) -> RunExtendResult:
        if not params.runs:
            return RunExtendResult()
        pairs = [value for run_id, fence in params.runs for value in (run_id, fence)]
        flat = await self._script("extend", self._now_arg(params.now), float(params.lease_s),
                                  params.worker_id, *pairs)
        kept = {int(run_id): int(flag) for run_id, flag in zip(flat[::2], flat[1::2])}
        return RunExtendResult(lost=[run_id for run_id, _ in params.runs if run_id not in kept],
                               cancel_requested=[run_id for run_id, flag in kept.items() if flag])

    async def run_finish_many(self, params: Sequence[RunFinishParams]) -> list[int]:
        if not params:
            return []
        refused = [int(i) for i in await self._script("finish", *self._finish_args(params))]
        self.hub.fire_finished(params)
        return refused

    def _finish_args(self, params: Sequence[RunFinishParams]) -> list[Any]:
        args: list[Any] = [self._now_arg(params[0].now), len(rules.REQUEUE_STOPS)]
        for stop in rules.REQUEUE_STOPS:
            args += [stop.flag, stop.ends_as.value, stop.error]
        args.append(json.dumps([
            [str(p.run_id), str(p.fence), p.state, p.result, p.error,
             None if p.run_at is None else repr(float(p.run_at)), p.release, p.kind, p.event_data]
            for p in params]))
        return args

    async def run_finish_claim(self, params: Sequence[RunFinishParams],
                               claim: RunClaimParams) -> tuple[list[int], list[Run]]:
        # The two scripts in one round trip; the claim runs after the finishes, so it sees
        # the queue as they leave it.
        if not params:
            return [], await self.run_claim(claim)
        assert self._scripts is not None, "store is not open"
        calls = [("finish", [arg(a) for a in self._finish_args(params)]),
                 ("claim", [arg(a) for a in self._claim_args(claim)])]
        refused, rows = await self._call(self._scripts.call_many, self.redis, calls)
        self.hub.fire_finished(params)
        return [int(i) for i in refused], _claimed(claim, rows)

    async def step_record_many(self, params: Sequence[StepRecordParams]) -> list[bool]:
        if not params:
            return []
        rules.check_one_step_per_run(params)
        args: list[Any] = [self._now_arg(params[0].now)]
        for p in params:
            args += [p.run_id, p.fence, p.position, p.name, p.status,
                     step_identity(p.fence, p.name, p.status, p.result, p.error),
                     rules.step_event(p.position, p.name, p.status, p.error)]
        recorded = await self._script("step", *args)
        for p in params:
            self.hub.fire(events_topic(p.run_id))
        return [bool(int(flag)) for flag in recorded]

    async def event_append(self, params: EventAppendParams) -> list[int] | None:
        pairs = [value for kind, data in params.events for value in (kind, data)]
        seqs = await self._script("event_append", self._now_arg(params.now), params.run_id,
                                  params.fence, params.mark, "1" if params.replayed else "0", *pairs)
        if not seqs:
            return None
        if seqs == ["none"]:  # a replayed emit whose mark is unknown: nothing appended
            return []
        self.hub.fire(events_topic(params.run_id))
        return [int(s) for s in seqs]

    # -- the journal and the log --------------------------------------------------------

    async def step_list(self, run_id: int) -> list[StepRecord]:
        pipe = self.redis.pipeline(transaction=True)  # both halves as of one moment
        pipe.hgetall(self.key(f"steps_old:{run_id}"))
        pipe.hgetall(self.key(f"steps:{run_id}"))
        archived, recent = await self._call(pipe.execute)
        return _journal(run_id, {**archived, **recent})

    async def step_list_resumable(self, run_id: int) -> list[StepRecord]:
        # A done snapshot moved what precedes it to steps_old (lib.lua's archive_before).
        return _journal(run_id, await self._call(self.redis.hgetall, self.key(f"steps:{run_id}")))

    async def event_list(self, params: EventListParams) -> list[Event]:
        if params.limit <= 0:
            return []
        first, *entries = await self._script("event_page", params.run_id, params.after, params.limit)
        return [event_from_entry(params.run_id, int(first) + i, entry) for i, entry in enumerate(entries)]

    # -- cancel, retry --------------------------------------------------------------------

    async def _locked_run(self, run_id: int) -> Run:
        run = await self.run_get(run_id)
        if run is None:
            raise RunNotFound(f"run {run_id} not found")
        return run

    async def run_cancel(self, params: RunCancelParams) -> Run:
        # The script reads the family and applies rules.plan_cancel to it in one step.
        reply = await self._script("cancel", self._now_arg(params.now), params.run_id,
                                   rules.cancelled_error(), json.dumps({"reason": "cancelled on request"}))
        if reply[0] == "missing":
            raise RunNotFound(f"run {params.run_id} not found")
        run = run_from_hash(reply[1])
        if reply[0] == "refused":
            rules.plan_cancel(run, [])  # raises its error
            raise StoreError(f"run {run.id}: cancel refused in state {run.state.value}")
        self.hub.fire_all()  # cancel, done and events topics of a whole family
        return run

    async def run_retry(self, params: RunRetryParams) -> Run:
        async def attempt() -> Run | Stale:
            fields = await self._call(self.redis.hgetall, self.key(f"run:{params.run_id}"))
            if not fields:
                raise RunNotFound(f"run {params.run_id} not found")
            run = run_from_hash(fields)
            forget = rules.retry_drops(run, await self.step_list(run.id))
            ident = "" if run.thread is None else identity(run.tenant, run.thread)
            if run.thread is not None:
                # The run is its thread's when it keeps the number the name has now.
                found = await self.thread_get(ThreadGetParams(run.thread, run.tenant))
                rules.check_retry_on_thread(run, found, found is not None and
                                            fields.get("thread_no") == str(found.incarnation))
            reply = await self._script("retry", self._now_arg(params.now), run.id, run.state.value,
                                       json.dumps(rules.retried_event(run, params.by)), ident,
                                       run.fence, ",".join(rules.RETRYABLE), *forget)
            if reply[0] != "ok":
                return STALE
            self.hub.fire(QUEUED)
            self.hub.fire(events_topic(run.id))
            return run_from_hash(reply[1])

        return await self._decided(attempt, f"run {params.run_id}: its state during the retry")

    # -- questions ------------------------------------------------------------------------

    async def question_open(self, params: QuestionOpenParams) -> Question | None:
        flat = await self._script("question_open", self._now_arg(params.now), params.run_id, params.fence,
                                  params.position, params.kind, params.body,
                                  json.dumps(rules.asked_event(params)))
        self.hub.fire(events_topic(params.run_id))
        return question_from_hash(params.run_id, params.position, flat) if flat else None

    async def question_answer(self, params: QuestionAnswerParams) -> Question:
        async def attempt() -> Question | Stale:
            run = await self.run_get(params.run_id)
            question = await self._question(params.run_id, params.position)
            if not rules.plan_answer(run, question, params):
                assert question is not None
                return question
            assert run is not None
            reply = await self._script("question_answer", self._now_arg(params.now), run.id, params.position,
                                       run.state.value, params.answer, params.by,
                                       json.dumps(rules.answered_event(params)))
            if reply[0] != "ok":
                return STALE
            self.hub.fire(QUEUED)
            self.hub.fire(events_topic(run.id))
            return question_from_hash(run.id, params.position, reply[1])

        return await self._decided(attempt, f"run {params.run_id}: its state during the answer")

    async def _question(self, run_id: int, position: int) -> Question | None:
        fields = await self._call(self.redis.hgetall, self.key(f"q:{run_id}:{position}"))
        return question_from_hash(run_id, position, fields) if fields else None

    async def question_list(self, params: QuestionListParams) -> list[Question]:
        if params.run_id is not None:
            positions = await self._call(self.redis.zrange, self.key(f"qs:{params.run_id}"), 0, -1)
            places = [(params.run_id, int(p)) for p in positions]
        else:
            # Every pending question, oldest first; those of ended runs are skipped below.
            members = await self._call(self.redis.zrange, self.key("qpending"), 0, -1)
            places = [(int(r), int(p)) for r, p in (m.split(":") for m in members)]
        runs = {run.id: run for run in await self.run_get_many([r for r, _ in places])}
        out = []
        for run_id, position in places:
            run = runs.get(run_id)
            if run is None or (params.tenant is not None and run.tenant != params.tenant):
                continue
            if params.pending and run.done:
                continue
            question = await self._question(run_id, position)
            if question is None or (params.pending and question.answered):
                continue
            out.append(question)
            if len(out) >= params.limit:
                break
        return out

    # -- retention ------------------------------------------------------------------------

    async def lease_take(self, params: LeaseTakeParams) -> bool:
        return bool(await self._script("lease_take", self._now_arg(params.now), params.name,
                                       params.holder, float(params.lease_s)))

    async def run_reclaim(self, params: RunReclaimParams) -> RunReclaimed:
        # The plan reads the server's clock; the script judges the age again by its own.
        ended_before = params.ended_before
        if ended_before is None and params.max_age_s is not None:
            ended_before = await self._now(params.now) - params.max_age_s
        plan = await self._reclaim_plan(params, ended_before)
        if plan is None:
            return RunReclaimed()
        start, cursor, hashes, reclaimed = plan
        if params.dry_run or not hashes:
            return reclaimed
        age_s = params.max_age_s if params.ended_before is None and params.max_age_s is not None else ""
        keep_cursor = "" if params.run_ids is not None else cursor
        return await self._reclaim(hashes, keep_cursor, start, self._now_arg(params.now),
                                   "" if params.ended_before is None else params.ended_before,
                                   age_s, "")

    async def thread_run_reclaim(self, params: ThreadRunReclaimParams) -> RunReclaimed:
        hashes = await self._thread_cap_plan(params)
        if params.dry_run or not hashes:
            return await self._reclaim_sizes(hashes)
        return await self._reclaim(hashes, "", 0, self._now_arg(params.now), "", "", params.keep)

    async def _thread_cap_plan(self, params: ThreadRunReclaimParams) -> list[dict[str, str]]:
        """Every run's thread, a window of `runs` at a time (a thread's runs are spread
        over all of it), then rules.runs_beyond_thread_cap: the hashes of what goes."""
        threaded: list[tuple[dict[str, str], Run]] = []
        start = 0
        while ids := await self._call(self.redis.zrangebyscore, self.key("runs"), start, "+inf", 0, 5000):
            threaded += [(h, run_from_hash(h)) for h in await self._hashes(ids) if h and h.get("thread")]
            start = int(ids[-1]) + 1
        chosen = set(rules.runs_beyond_thread_cap([run for _, run in threaded], params.keep)[:params.limit])
        return sorted((h for h, run in threaded if run.id in chosen), key=lambda h: int(h["id"]))

    async def _reclaim(self, hashes: list[dict[str, str]], cursor: int | str, start: int, now: str,
                       ended_before: float | str, age_s: float | str, keep: int | str) -> RunReclaimed:
        """The script's removal of the runs planned: it judges each again (still ended as
        the plan read it, old enough by the server's clock, beyond its thread's cap) and
        removes those that are; what it removed is returned."""
        args: list[Any] = [cursor, start, now, ended_before, age_s, keep]
        for h in hashes:  # what the decision read, as stored, for the script to compare
            args += [h["id"], f"{h['state']}:{h.get('finished_at', '')}",
                     identity(h.get("tenant"), h["key"])]
        steps, events, *removed = await self._script("run_reclaim", *args)
        return RunReclaimed([int(run_id) for run_id in removed], int(steps), int(events))

    async def _reclaim_plan(self, params: RunReclaimParams, ended_before: float | None,
                            ) -> tuple[int, int, list[dict[str, str]], RunReclaimed] | None:
        """Scan `runs` from the cursor (a window a few times the limit): the ended runs
        older than the cut-off, and the cursor to keep, the lowest id left behind."""
        start = int(await self._call(self.redis.get, self.key("reclaim_cursor")) or 0)
        if params.run_ids is not None:  # only these: the cursor stays where retention left it
            ids = sorted({int(i) for i in params.run_ids})
        else:
            ids = await self._call(self.redis.zrangebyscore, self.key("runs"), start, "+inf", 0,
                                   4 * params.limit)
        if not ids:
            return None
        found = [(h, run_from_hash(h)) for h in await self._hashes(ids) if h]
        picked = [(h, r) for h, r in found if r.done and r.finished_at is not None
                  and ended_before is not None and r.finished_at < ended_before][:params.limit]
        if params.run_ids is not None:
            hashes = [h for h, _ in picked]
            return start, start, hashes, await self._reclaim_sizes(hashes)
        chosen = [r for _, r in picked]
        taken = {r.id for r in chosen}
        left = [r.id for _, r in found if r.id not in taken]
        cursor = min(left) if left else int(ids[-1]) + 1
        hashes = [h for h, _ in picked]
        return start, cursor, hashes, await self._reclaim_sizes(hashes)

    async def _reclaim_sizes(self, hashes: list[dict[str, str]]) -> RunReclaimed:
        """The runs' ids, and the sizes of their journals and logs."""
        pipe = self.redis.pipeline(transaction=False)
        for h in hashes:
            pipe.hlen(self.key(f"steps:{h['id']}"))
            pipe.hlen(self.key(f"steps_old:{h['id']}"))
            pipe.llen(self.key(f"ev:{h['id']}"))
        sizes = await self._call(pipe.execute) if hashes else []
        steps = sum(sizes[i] + sizes[i + 1] for i in range(0, len(sizes), 3))
        events = sum(sizes[i + 2] for i in range(0, len(sizes), 3))
        return RunReclaimed([int(h["id"]) for h in hashes], steps, events)

    async def event_trim(self, params: EventTrimParams) -> EventsTrimmed:
        cuts = await self._trim_plan(params)
        found = EventsTrimmed()
        if not cuts:
            return found
        done = [1] * len(cuts)
        if not params.dry_run:
            args: list[Any] = [self._now_arg(params.now), rules.TRIMMED]
            for run_id, marker, data, _ in cuts:
                args += [run_id, marker, json.dumps(data)]
            done = await self._script("event_trim", *args)
        for (run_id, marker, _, trimmed_seq), cut in zip(cuts, done):
            if int(cut):
                found.run_ids.append(run_id)
                found.events += marker - trimmed_seq
        return found

    async def _trim_plan(self, params: EventTrimParams) -> list[tuple[int, int, dict[str, int], int]]:
        """The runs whose log outgrew the bound, up to `limit`, from where the last trim
        stopped (trim_cursor): windows of `runs` until enough are found or the end is
        reached, where the next trim starts over from the first run."""
        cursor = int(await self._call(self.redis.get, self.key("trim_cursor")) or 0)
        cuts: list[tuple[int, int, dict[str, int], int]] = []
        while len(cuts) < params.limit:
            ids = await self._call(self.redis.zrangebyscore, self.key("runs"), cursor, "+inf", 0,
                                   4 * params.limit)
            pipe = self.redis.pipeline(transaction=False)
            for run_id in ids:
                pipe.hmget(self.key(f"run:{run_id}"), "last_seq", "trimmed_seq")
            for run_id, (last_seq, trimmed_seq) in zip(ids, await self._call(pipe.execute) if ids else []):
                cursor = int(run_id) + 1
                cut = rules.trim_marker(int(last_seq or 0), int(trimmed_seq or 0), params.keep)
                if cut is not None:
                    cuts.append((int(run_id), cut[0], cut[1], int(trimmed_seq or 0)))
                    if len(cuts) == params.limit:
                        break
            if len(ids) < 4 * params.limit and len(cuts) < params.limit:
                cursor = 0  # the end of the runs: the next trim starts over
                break
        if not params.dry_run:
            await self._call(self.redis.set, self.key("trim_cursor"), cursor)
        return cuts

    async def _reclaimed_ranges(self) -> list[tuple[int, int]]:
        found = await self._call(self.redis.hgetall, self.key("reclaimed"))
        return sorted((int(lo), int(hi)) for lo, hi in found.items())

    async def run_was_reclaimed(self, run_id: int) -> bool:
        return any(lo <= run_id <= hi for lo, hi in await self._reclaimed_ranges())

    async def _thread_pages(self, cursor_key: str, count: int, dry_run: bool,
                            ) -> AsyncIterator[list[tuple[str, str]]]:
        """Pages of `threads` (identity, number) from where the last scan of this kind
        stopped, at most SCAN_PAGES of them, until the scan wraps to the start (a dry run
        leaves the cursor where it was)."""
        cursor = int(await self._call(self.redis.get, self.key(cursor_key)) or 0)
        for _ in range(SCAN_PAGES):
            cursor, page = await self._call(self.redis.hscan, self.key("threads"), cursor, None, count)
            if not dry_run:
                await self._call(self.redis.set, self.key(cursor_key), cursor)
            yield list(page.items())
            if int(cursor) == 0:
                return

    async def thread_tombstone_reclaim(self, params: ThreadTombstoneReclaimParams) -> TombstonesReclaimed:
        cut_off = await self._now(params.now) - params.max_age_s  # the plan's; the script judges
        old: list[tuple[str, str]] = []
        async for page in self._thread_pages("tomb_cursor", params.limit, params.dry_run):
            pipe = self.redis.pipeline(transaction=False)
            for _, number in page:
                pipe.hget(self.key(f"thread:{number}"), "deleted_at")
                pipe.zcard(self.key(f"topen:{number}"))
            found = await self._call(pipe.execute) if page else []
            old += [pair for pair, at, open_runs in zip(page, found[::2], found[1::2])
                    if at is not None and float(at) < cut_off and not open_runs]
            if len(old) >= params.limit:
                break
        old = old[:params.limit]
        if params.dry_run or not old:
            idents = [ident for ident, _ in old]
        else:
            idents = await self._script("thread_reclaim", self._now_arg(params.now), float(params.max_age_s),
                                        *[part for pair in old for part in pair])
        return TombstonesReclaimed([_thread_of(ident) for ident in idents])

    async def thread_message_trim(self, params: ThreadMessageTrimParams) -> ThreadMessagesTrimmed:
        found = ThreadMessagesTrimmed()
        async for page in self._thread_pages("tmsg_cursor", params.limit, params.dry_run):
            pipe = self.redis.pipeline(transaction=False)
            for _, number in page:
                pipe.hlen(self.key(f"tmsg:{number}"))
            lengths = await self._call(pipe.execute) if page else []
            long = [pair for pair, length in zip(page, lengths) if int(length) > params.keep]
            removed = await self._script("thread_trim_messages", params.keep, params.dry_run,
                                         params.limit - found.messages, *[number for _, number in long]) \
                if long else []
            for (ident, _), count in zip(long, removed):
                if int(count):
                    found.threads.append(_thread_of(ident))
                    found.messages += int(count)
            if found.messages >= params.limit:
                break
        return found

    # -- rescue and deadlines -----------------------------------------------------------

    async def run_rescue_many(self, params: RunRescueParams) -> list[Run]:
        now_text, gone, lapsed, *stuck_flat = await self._script(
            "rescue_scan", self._now_arg(params.now), float(params.worker_stale_s))
        now = float(now_text)
        # A lapsed key is a death only once it has stayed lapsed a moment (liveness.py):
        # after a Redis outage, the living workers' keys come back within that moment.
        # A registration that is gone is a death at once.
        dead = sorted({*gone, *self._unmarked.dead(lapsed, now)})
        if not dead and not stuck_flat:
            return []  # most ticks of most workers find nothing
        stuck = [run_from_hash(flat) for flat in stuck_flat if flat]
        fates = [rules.rescue_fate(run, params.max_recoveries, now)
                 for run in stuck if run.state is RunState.RUNNING and (
                     run.owner in dead or (run.lease_expires_at or 0.0) < now)]
        if not dead and not fates:
            return []
        args: list[Any] = [now_text, float(params.worker_stale_s), len(dead), *dead]
        for fate in fates:
            args += [fate.run_id, fate.fence, fate.state.value, fate.recoveries, fate.run_at,
                     fate.finished_at, fate.error, fate.event_kind]
        rescued = [run_from_hash(flat) for flat in await self._script("rescue", *args)]
        self.hub.fire_changed(rescued)
        return rescued

    async def run_expire_many(self, params: RunExpireParams) -> list[Run]:
        rows = await self._script("expire", self._now_arg(params.now), rules.deadline_error(),
                                  json.dumps({"error": "DeadlineExceeded"}))
        expired = [run_from_hash(flat) for flat in rows]
        self.hub.fire_changed(expired)
        return expired

    # -- threads ------------------------------------------------------------------------

    async def thread_get(self, params: ThreadGetParams) -> ThreadInfo | None:
        number = await self._call(self.redis.hget, self.key("threads"),
                                  identity(params.tenant, params.thread))
        if number is None:
            return None
        # A thread's number is its incarnation: thread_ids gives a new thread of the name
        # a larger one, and a number is never given twice.
        created_at, deleted_at = await self._call(self.redis.hmget, self.key(f"thread:{number}"),
                                                  "created_at", "deleted_at")
        return ThreadInfo(params.thread, params.tenant or None, int(number), float(created_at or 0.0),
                          _float_or_none(deleted_at))

    async def _thread_number(self, thread: str, tenant: str | None, incarnation: int | None,
                             missing_ok: bool) -> int | None:
        """The number of the thread a reader may read (rules.check_thread_readable)."""
        found = await self.thread_get(ThreadGetParams(thread, tenant))
        rules.check_thread_readable(thread, found, incarnation, missing_ok)
        return None if found is None else found.incarnation

    async def thread_messages(self, params: ThreadMessagesParams) -> list[tuple[int, int, str]]:
        number = await self._thread_number(params.thread, params.tenant, params.incarnation, True)
        if number is None:
            return []
        pipe = self.redis.pipeline(transaction=True)
        pipe.hgetall(self.key(f"tmsg:{number}"))
        pipe.hgetall(self.key(f"tturn:{number}"))
        entries, turn_of = await self._call(pipe.execute)
        return _in_thread_order(entries, turn_of, params.before_run)

    async def thread_list(self, params: ThreadListParams) -> list[ThreadInfo]:
        # A range of tlist (or the tenant's) by created_at, newest first: members of one
        # score come in reverse order of their identity, so the cursor (its time and its
        # identity) says exactly where the last page ended, even amid equal times.
        key = self.key("tlist" if params.tenant is None else f"tlist:{params.tenant}")
        after = params.after
        mark = None if after is None else (after.created_at, identity(after.tenant, after.thread))
        top, offset, out = "+inf" if mark is None else repr(mark[0]), 0, list[ThreadInfo]()
        while len(out) < params.limit:
            entries = await self._call(self.redis.zrevrangebyscore, key, top, "-inf", offset,
                                       LIST_CHUNK, True)
            if not entries:
                break
            offset += len(entries)
            idents = [ident for ident, at in entries if mark is None or (at, ident) < mark]
            listed = await self._thread_facts(idents)
            out += [t for t in listed if params.include_deleted or not t.deleted]
        return out[:params.limit]

    async def _thread_facts(self, idents: list[str]) -> list[ThreadInfo]:
        """The threads of these identities, as a list shows them (one gone meanwhile is left out)."""
        facts = await self._script("thread_facts", *idents) if idents else []
        out = []
        for ident, fact in zip(idents, facts):
            if not fact:
                continue
            tenant, thread = json.loads(ident)
            created_at, deleted_at, runs, open_runs, newest, state, number = fact
            out.append(ThreadInfo(thread=thread, tenant=tenant or None, incarnation=int(number),
                                  created_at=float(created_at),
                                  deleted_at=float(deleted_at) if deleted_at else None, runs=int(runs),
                                  open_runs=int(open_runs), last_run_id=int(newest) if newest else None,
                                  last_run_state=RunState(state) if state else None))
        return out

    async def thread_event_list(self, params: ThreadEventListParams) -> list[ThreadEvent]:
        # The log is the number's (tev:<n>): a page is of the incarnation checked here.
        number = await self._thread_number(params.thread, params.tenant, params.incarnation, False)
        if params.limit <= 0:
            return []
        out: list[ThreadEvent] = []
        after = params.after
        while len(out) < params.limit:  # a window of trimmed events gives nothing: read on
            window = params.limit - len(out)
            names = await self._call(self.redis.lrange, self.key(f"tev:{number}"), after, after + window - 1)
            out += await self._thread_window(names, after)
            after += len(names)
            if len(names) < window:
                break
        return out

    async def _thread_window(self, names: list[str], after: int) -> list[ThreadEvent]:
        places = [tuple(int(part) for part in name.split(":")) for name in names]
        entries = await self._script("event_read", *[part for place in places for part in place]) \
            if places else []
        out = []
        for tseq, ((run_id, seq), entry) in enumerate(zip(places, entries), start=after + 1):
            if entry is None:
                continue  # retention trimmed it from its run's log; the run's marker stays
            event = event_from_entry(run_id, seq, entry)
            out.append(ThreadEvent(run_id, seq, event.kind, event.data, event.at, tseq=tseq))
        return out

    async def thread_append(self, params: ThreadAppendParams) -> bool:
        return bool(await self._script("thread_append", params.run_id, params.fence, params.idx,
                                       params.message))

    async def thread_forget_run(self, params: ThreadForgetParams) -> bool:
        return bool(await self._script("thread_forget", params.run_id, params.fence))

    async def thread_delete(self, params: ThreadDeleteParams) -> bool:
        now = await self._now(params.now)
        return bool(await self._script("thread_delete", identity(params.tenant, params.thread),
                                       now, params.purge))

    # -- rate limits --------------------------------------------------------------------

    async def bucket_take(self, params: BucketTakeParams) -> float:
        key = self.key(f"bucket:{params.name}")

        async def attempt() -> float | Stale:
            now = await self._now(params.now)
            tokens, updated_at = await self._call(self.redis.hmget, key, "tokens", "updated_at")
            take = rules.take_from_bucket(params, _float_or_none(tokens), _float_or_none(updated_at), now)
            if take.granted and not await self._script("bucket_take", params.name, tokens, updated_at,
                                                       take.tokens, take.at):
                return STALE
            return take.wait_s

        return await self._decided(attempt, f"rate bucket {params.name!r}")

    # -- schedules ----------------------------------------------------------------------

    async def schedule_save(self, schedule: Schedule) -> Schedule:
        await self._script("schedule_save", schedule.name, json.dumps(list(schedule.definition())),
                           json.dumps([schedule.cron, schedule.tz]), schedule.paused,
                           float(schedule.next_fire_at), float(schedule.created_at),
                           float(schedule.updated_at))
        return {s.name: s for s in await self.schedule_list()}[schedule.name]

    async def schedule_list(self) -> list[Schedule]:
        pipe = self.redis.pipeline(transaction=False)
        for part in ("def", "paused", "next", "created", "updated"):
            pipe.hgetall(self.key(f"sched:{part}"))
        definitions, paused, upcoming, created, updated = await self._call(pipe.execute)
        return [Schedule(name, *json.loads(definitions[name]), paused.get(name) == "1",  # type: ignore[call-arg]
                         float(upcoming[name]), float(created[name]), float(updated[name]))
                for name in sorted(definitions)]

    async def schedule_due(self, params: ScheduleDueParams) -> list[Schedule]:
        now = await self._now(params.now)
        due = [s for s in await self.schedule_list() if not s.paused and s.next_fire_at <= now]
        return sorted(due, key=lambda s: s.next_fire_at)

    async def schedule_advance(self, params: ScheduleAdvanceParams) -> bool:
        return bool(await self._script("schedule_advance", params.name, float(params.expected_next),
                                       float(params.next_fire_at)))

    async def schedule_set_paused(self, params: SchedulePauseParams) -> bool:
        now = await self._now(params.now)
        upcoming = None if params.next_fire_at is None else float(params.next_fire_at)
        return bool(await self._script("schedule_pause", params.name, params.paused, upcoming, now))

    async def schedule_delete(self, name: str) -> bool:
        return bool(await self._script("schedule_delete", name))

    # -- paused queues: one set per fleet root ------------------------------------------

    def _paused_key(self, fleet: str) -> str:
        # Under the fleet's keys (`fleet:<root>:`), read by the claim and next_due scripts.
        return self.key(f"fleet:{fleet}:paused")

    async def queue_set_paused(self, params: QueuePauseParams) -> bool:
        change = self.redis.sadd if params.paused else self.redis.srem
        return bool(await self._call(change, self._paused_key(params.fleet), params.queue))

    async def queue_list_paused(self, fleet: str) -> set[str]:
        return {str(queue) for queue in await self._call(self.redis.smembers, self._paused_key(fleet))}

    # -- workers: a liveness key with a TTL ---------------------------------------------

    async def worker_register(self, params: WorkerRegisterParams) -> int:
        now = await self._now(params.now)
        registration = json.dumps({"host": params.host, "pid": params.pid,
                                   "queues": list(params.queues), "tasks": list(params.tasks),
                                   "started_at": now, "version": params.version,
                                   "majors": None if params.majors is None else {
                                       task: list(majors) for task, majors in params.majors.items()}})
        worker_id = int(await self._script("worker_register", registration, now, self._ttl_ms()))
        self._alive_ids.add(worker_id)
        if self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_liveness())
        return worker_id

    def _ttl_ms(self) -> int:
        return max(1, int(self.liveness_s * 1000))

    async def _refresh_liveness(self) -> None:
        """Keep the liveness keys of this process's workers: they lapse when the process
        dies or stalls, which is how others learn that its runs need a new owner."""
        while not self._closing:
            await asyncio.sleep(self.liveness_s / 4)
            for worker_id in list(self._alive_ids):
                try:
                    if not await self._script("worker_heartbeat", worker_id, "keep", self._ttl_ms()):
                        self._alive_ids.discard(worker_id)  # declared dead: it registers again
                except StoreError as exc:
                    log.warning("liveness refresh failed (%s); retrying", exc)

    async def worker_heartbeat(self, params: WorkerHeartbeatParams) -> bool:
        await self._now(None)  # keeps the clock's offset fresh (see runwright.clock)
        alive = bool(await self._script("worker_heartbeat", params.worker_id,
                                        self._now_arg(params.now), self._ttl_ms()))
        if not alive:
            self._alive_ids.discard(params.worker_id)
        return alive

    async def worker_deregister(self, worker_id: int) -> None:
        self._alive_ids.discard(worker_id)
        await self._script("worker_deregister", worker_id)

    async def worker_watch(self, params: WorkerWatchParams) -> bool:
        """A worker's key lapses by its TTL: nothing wakes a rescuer at a death, it sleeps."""
        await asyncio.sleep(params.timeout_s)
        return False

    async def worker_list(self) -> list[WorkerInfo]:
        pipe = self.redis.pipeline(transaction=False)
        pipe.hgetall(self.key("workers"))
        pipe.hgetall(self.key("beats"))
        registrations, beats = await self._call(pipe.execute)
        out = []
        for worker_id in sorted(registrations, key=int):
            info = json.loads(registrations[worker_id])
            out.append(WorkerInfo(int(worker_id), info["host"], info["pid"], info["queues"],
                                  info["tasks"], info["started_at"], float(beats.get(worker_id, 0)),
                                  info.get("version", "0.0.0"), info.get("majors")))
        return out


# -- helpers --------------------------------------------------------------------------


def due_key(priority: str, queue: str, task: str) -> str:
    """The due set of (priority, queue, task), after the prefix: as lib.lua's due_key."""
    return f"due:{priority}:{len(queue.encode())}:{queue}:{task}"


def _insert_fields(p: RunInsertParams) -> list[Any]:
    """A run's INSERT_FIELDS script arguments (see scripts/lib.lua)."""
    stub = Run(0, p.key, p.task, p.queue, p.priority, RunState.QUEUED, p.args, 0, p.max_attempts,
               0, 0.0, 0.0, parent_id=p.parent_id, thread=p.thread)
    thread = NIL if p.thread is None else identity(p.tenant, p.thread)
    return [identity(p.tenant, p.key), p.key, p.task, p.queue, int(p.priority), p.args,
            int(p.max_attempts), _float_or_none(p.timeout_s), _float_or_none(p.run_at),
            p.parent_id, p.budget, _float_or_none(p.deadline_at), p.thread, p.tenant,
            rules.submitted_event(stub), thread, p.traceparent, p.version, p.major]


def _float_or_none(value: float | None) -> float | None:
    return None if value is None else float(value)


def _existed(run: Run, existed: bool) -> Run:
    run.existed = existed
    return run


# The columns of `rules.list_conditions` that are expressions, not plain fields.
_COLUMN_READERS: dict[str, Callable[[Run], Any]] = {
    "state": lambda run: run.state.value,
    "coalesce(tenant, '')": lambda run: run.tenant or "",
}


def _holds(run: Run, condition: tuple[str, str, object]) -> bool:
    """One condition of `rules.list_conditions`, tested on a run."""
    column, op, value = condition
    reader = _COLUMN_READERS.get(column)
    held: Any = reader(run) if reader is not None else getattr(run, column)
    if op == "in":
        return held in value  # type: ignore[operator]
    if held is None:
        return False
    if op == "=":
        return bool(held == value)
    if op == "<":
        return bool(held < value)
    if op == ">=":
        return bool(held >= value)
    raise ValueError(f"unknown list condition {condition!r}")


def _safe(url: str) -> str:
    """The URL without its password, for error messages."""
    if "@" not in url:
        return url
    scheme, rest = url.split("//", 1)
    credentials, host = rest.split("@", 1)
    user = credentials.split(":", 1)[0]
    return f"{scheme}//{user}:***@{host}"


def _journal(run_id: int, entries: dict[str, str]) -> list[StepRecord]:
    steps = [step_from_entry(run_id, position, entry) for position, entry in entries.items()]
    return sorted(steps, key=lambda s: s.position)


def _thread_of(ident: str) -> tuple[str | None, str]:
    """(tenant or None, name) of a thread identity (codec.identity)."""
    tenant, name = json.loads(ident)
    return tenant or None, name


def _in_thread_order(entries: dict[str, str], turn_of: dict[str, str],
                     before_run: int | None) -> list[tuple[int, int, str]]:
    """A thread's messages (tmsg:<n>: "<run id, 20 digits><index, 10 digits>" -> message)
    in the thread's order, (turn, run, index), those before run `before_run` if given: a
    run's turn is its id but for one that went ahead of waiting runs (tturn:<n>, see
    rules.thread_turn)."""
    def place(run_id: int) -> tuple[float, int]:
        return float(turn_of.get(str(run_id), run_id)), run_id

    bound = None if before_run is None else place(before_run)
    out = []
    for field, message in entries.items():
        run_id, idx = int(field[:20]), int(field[20:])
        if bound is None or place(run_id) < bound:
            out.append((place(run_id), idx, message))
    return [(run_id, idx, message) for (_, run_id), idx, message in sorted(out)]
