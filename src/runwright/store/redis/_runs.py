"""The Redis store's runs: submitting and reading them, and the unrunnable ones."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable, Iterable, Sequence

from ...errors import LeaseLost, ThreadDeleted
from ...runs import Run, RunState
from .. import _flow_rules as flow_rules
from .. import _rules as rules
from .._hub import QUEUED
from .._params import (
    EndedTimes,
    QueueStat,
    RunCountDueParams,
    RunCountParams,
    RunEndedParams,
    RunInsertParams,
    RunLimitedTasksParams,
    RunListParams,
    RunNextDueParams,
    RunQueueStatsParams,
    RunUnrunnableParams,
    ThreadGetParams,
    UnrunnableKind,
    WorkerInfo,
)
from ._base import LIST_CHUNK, STALE, RedisBase, Stale, _float_or_none, due_key
from ._codec import NIL, as_dict, identity, run_from_hash

__all__ = ["RedisRuns"]


class RedisRuns(RedisBase):
    """Submitting and reading runs (`RunStore`)."""

    # -- submitting -----------------------------------------------------------------------

    async def run_insert_many(self, items: Iterable[RunInsertParams]) -> list[Run]:
        params = list(items)
        if not params:
            return []
        if flow_rules.has_flow(params):  # opt-in: decided per run, applied by a script (see _insert_flow)
            return [await self._insert_flow(p) if p.flow is not None else (await self._insert_plain(p))
                    for p in params]
        args: list[Any] = [self._now_arg(params[0].now), len(params)]
        for p in params:
            args += _insert_fields(p)
        fenced = rules.fenced_parents(params)
        args += [len(fenced), *(value for pair in fenced for value in pair)]
        rows = await self._script("insert", *args)
        if rows and rows[0] == "lost":  # rules.check_parents_fenced, in the script: nothing written
            raise LeaseLost(int(rows[1]), int(rows[2]))
        self.hub.fire(QUEUED)
        return [_existed(run_from_hash(flat), bool(existed)) for existed, flat in rows]

    async def _insert_plain(self, p: RunInsertParams) -> Run:
        (run,) = await self.run_insert_many([p])
        return run

    async def _insert_flow(self, p: RunInsertParams) -> Run:
        """A run with flow control: its key's pointer and standing run read (flow_probe),
        the decision made (store._flow_rules), and applied by insert_flow, which re-checks
        what it was made on; a batch of such runs is written run by run."""
        assert p.flow is not None
        flow = flow_rules.parsed(p.flow)
        ident = identity(p.tenant, p.key)
        fenced = rules.fenced_parents([p])

        async def attempt() -> Run | Stale:
            named, pointer, flat = await self._script("flow_probe", flow.slot, ident)
            if named and not p.key_is_fresh:
                return _existed(run_from_hash(named), True)
            found = as_dict(flat) if flat else {}
            # Its arguments too: a debounce's merge, a batch's count are made on them (none lost to a race).
            seen = "|".join([pointer, found.get("state", ""), found.get("started_at", ""),
                             found.get("waiting", ""), found.get("args", "")]) if pointer else ""
            standing = (flow_rules.Standing(run_from_hash(found), float(pointer.split("|")[1]))
                        if found else None)
            now = await self._now(p.now)
            plan = flow_rules.plan(flow, standing, now if p.run_at is None else p.run_at, now, p.task,
                                   flow_rules.items_of(p, standing))
            if plan.action == "drop":
                assert standing is not None
                standing.run.outcome = plan.outcome
                return standing.run
            update = plan.action == "update"
            args = p.args
            if update and p.merge is not None:
                assert standing is not None
                args = p.merge(standing.run.args, p.args)
            reason = flow_rules.replaced_reason("@ID@")  # the new run's id, filled in by the script
            reply = await self._script(
                "insert_flow", self._now_arg(p.now), flow.slot, seen, plan.action, plan.run_at,
                plan.cancel, plan.waiting, json.dumps({"reason": reason}), rules.cancelled_error(reason),
                standing.run.id if update and standing else NIL, args if update else NIL,
                json.dumps({"run_at": plan.run_at}), plan.outcome,
                *_insert_fields(dataclasses.replace(p, run_at=plan.run_at)),
                len(fenced), *(value for pair in fenced for value in pair))
            if reply[0] == "stale":
                return STALE
            if reply[0] == "lost":
                raise LeaseLost(int(reply[1]), int(reply[2]))
            run = run_from_hash(reply[1])
            if reply[0] == "existed":
                return _existed(run, True)
            run.outcome, run.replaced = plan.outcome, plan.cancel
            self.hub.fire_all()  # queued, and the done topic of a replaced run
            return run

        return await self._decided(attempt, f"the flow control key {flow.key!r}")

    async def run_insert_threaded(self, params: RunInsertParams) -> Run:
        name = params.thread
        assert name is not None, "a threaded submission names its thread"
        thread = identity(params.tenant, name)
        fenced = rules.fenced_parents([params])

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
                *_insert_fields(params), len(fenced), *(value for pair in fenced for value in pair))
            if reply[0] == "lost":  # rules.check_parents_fenced, in the script: nothing written
                raise LeaseLost(int(reply[1]), int(reply[2]))
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

    async def run_list(self, params: RunListParams) -> list[Run]:
        timed = params.waiting is not None or params.due  # else no clock read (a round trip)
        conditions = rules.list_conditions(params, await self._now(params.now) if timed else 0.0)
        number = await self._listed_thread(params)
        if params.forked_from is not None:  # a run's forks: its set, not a scan of every run
            return await self._listed_forks(params, conditions)
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

    async def _listed_forks(self, params: RunListParams,
                            conditions: list[tuple[str, str, object]]) -> list[Run]:
        """The forks of `params.forked_from` that hold `conditions`, newest first: read from
        the set fork.lua keeps (a fork removed by retention leaves it with its run)."""
        members = await self._call(self.redis.smembers, self.key(f"forks:{params.forked_from}"))
        ids = sorted((int(m) for m in members), reverse=True)
        if params.before_id is not None:
            ids = [i for i in ids if i < params.before_id]
        out: list[Run] = []
        for start in range(0, len(ids), LIST_CHUNK):
            for fields in await self._hashes(ids[start:start + LIST_CHUNK]):
                run = run_from_hash(fields) if fields else None
                if run is not None and all(_holds(run, c) for c in conditions):
                    out.append(run)
            if len(out) >= params.limit:
                break
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
        if params.runs == "rate_end":  # the claim script keeps every window's end in rate_ends
            now = await self._now(params.now)
            ends = await self._call(lambda: self.redis.zrangebyscore(
                self.key("rate_ends"), f"({now!r}", "+inf", start=0, num=1, withscores=True))
            return float(ends[0][1]) if ends else None
        keys = ["*"] if params.majors is None else rules.claim_keys(params.majors)
        # "unlimited" needs nothing apart: a limited task's runs are in its own due sets.
        later = "" if params.runs != "limited_later" else ("*" if params.now is None else repr(params.now))
        value = await self._script("next_due", params.fleet or "", later, len(params.queues), *params.queues,
                                   len(params.tasks), *params.tasks, *keys)
        return None if value is None else float(value)

    async def run_limited_tasks(self, params: RunLimitedTasksParams) -> set[str]:
        found = await self._script("limited_tasks", len(params.queues), *params.queues, *params.tasks)
        return {str(task) for task in found}

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


# -- helpers --------------------------------------------------------------------------


def _insert_fields(p: RunInsertParams) -> list[Any]:
    """A run's INSERT_FIELDS script arguments (see scripts/lib.lua)."""
    stub = Run(0, p.key, p.task, p.queue, p.priority, RunState.QUEUED, p.args, 0, p.max_attempts,
               0, 0.0, 0.0, parent_id=p.parent_id, thread=p.thread)
    thread = NIL if p.thread is None else identity(p.tenant, p.thread)
    return [identity(p.tenant, p.key), p.key, p.task, p.queue, int(p.priority), p.args,
            int(p.max_attempts), _float_or_none(p.timeout_s), _float_or_none(p.run_at),
            p.parent_id, p.budget, _float_or_none(p.deadline_at), p.thread, p.tenant,
            rules.submitted_event(stub), thread, p.traceparent, p.version, p.major, p.limits]


def _existed(run: Run, existed: bool) -> Run:
    run.existed = existed
    return run


def _ascii_lower(text: str) -> str:
    """`text` with A-Z lowered and nothing else, as SQLite's lower() does."""
    return text.translate(_ASCII_LOWER)


_ASCII_LOWER = {ord(c): ord(c) + 32 for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"}

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
    if op == "null":
        return held is None
    if held is None:
        return False
    if op == "contains":  # a search, as SQL's lower(column) LIKE: ASCII letters in any case
        return str(value) in _ascii_lower(str(held))
    if op == "=":
        return bool(held == value)
    if op == "<":
        return bool(held < value)
    if op == "<=":
        return bool(held <= value)
    if op == ">":
        return bool(held > value)
    if op == ">=":
        return bool(held >= value)
    raise ValueError(f"unknown list condition {condition!r}")
