"""A Redis store as the target of a move: each copied row is written where the Redis
store keeps that state, by the store's own scripts (scripts/move_*.lua, on lib.lua's
helpers: the due sets, counters, journal archive and log numbering are written by the
one piece of code that defines them), and read back as a row for `--check` and resume.

A kind is read back whole and in key order (Redis keeps no index in the SQL key order
of steps, events and questions): fine for a check and for where an interrupted copy
resumes, at the price of reading a kind once more than a SQL end does.

Not a source yet, and only the kinds in `KEPT` (the rest the move refuses before it
seals, if the source holds any: see `_moving._refuse_unkept`).
"""

from __future__ import annotations

import bisect
import json
from typing import Any, Sequence

from ..core._schedules import Schedule
from ..errors import ConfigError, StoreError
from ..store._moved import MARK, NEVER
from ..store._params import LimitSetParams, QueuePauseParams
from ..store.redis._codec import identity, step_from_entry, step_identity
from ..store.redis._store import RedisStore

__all__ = ["KEPT", "RedisEnd"]

# The SQL columns of runs a run's hash keeps, field for field. Not `turn` (a threaded
# run's, which Redis keeps in its thread's keys: threads do not move to Redis yet) nor
# PostgreSQL's `lingering` (nothing once a run is given back).
RUN_COLUMNS = ("id", "key", "task", "queue", "priority", "state", "args", "result", "error", "attempt",
               "max_attempts", "recoveries", "fence", "owner", "lease_expires_at", "timeout_s", "run_at",
               "created_at", "started_at", "finished_at", "cancel_requested", "last_seq", "parent_id",
               "wake_requested", "budget", "deadline_at", "thread", "interrupt", "tenant", "traceparent",
               "version", "major", "trimmed_seq", "waiting", "forked_from", "pause_requested",
               "held_run_at", "limits")
_INTS = {"id", "priority", "attempt", "max_attempts", "recoveries", "fence", "owner", "last_seq",
         "parent_id", "trimmed_seq", "forked_from", "major", "position", "seq", "run_id", "catch_up_limit",
         "lo", "hi", "max"}
_FLOATS = {"lease_expires_at", "timeout_s", "run_at", "created_at", "started_at", "finished_at",
           "deadline_at", "held_run_at", "asked_at", "answered_at", "at", "next_fire_at", "updated_at",
           "tokens"}
# Flags a hash keeps as "0"/"1"; pause_requested only while asked (as pause.lua writes it).
_FLAGS = {"cancel_requested", "wake_requested", "pause_requested", "paused"}
SCHEDULE_COLUMNS = ("name", "cron", "tz", "task", "args", "queue", "priority", "max_attempts", "misfire",
                    "catch_up_limit", "paused", "next_fire_at", "created_at", "updated_at")
# Each kind a Redis target takes, with the columns it keeps.
KEPT: dict[str, tuple[str, ...]] = {
    "runs": RUN_COLUMNS,
    "steps": ("run_id", "position", "name", "status", "result", "error", "fence", "created_at"),
    "events": ("run_id", "seq", "kind", "data", "at", "mark"),
    "questions": ("run_id", "position", "kind", "body", "asked_at", "answer", "answered_by", "answered_at"),
    "schedules": SCHEDULE_COLUMNS,
    "reclaimed": ("lo", "hi"),
    "rate_buckets": ("name", "tokens", "updated_at"),
    # A paused queue is a member of its root's set: Redis keeps no time it was paused at.
    "fleet_paused_queues": ("root", "queue"),
    "limit_overrides": ("target", "max"),
    "run_keys": ("tenant", "key", "run_id"),
}
_KEYS = {"runs": ("id",), "steps": ("run_id", "position"), "events": ("run_id", "seq"),
         "questions": ("run_id", "position"), "schedules": ("name",), "reclaimed": ("lo",),
         "rate_buckets": ("name",), "fleet_paused_queues": ("root", "queue"), "limit_overrides": ("target",),
         "run_keys": ("tenant", "key")}


def _text(value: Any) -> str:
    """A value as a hash keeps it: floats exactly (repr round-trips), flags as 0/1."""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def _typed(column: str, value: str | None) -> Any:
    if value is None:
        return 0 if column in _FLAGS else None
    if column in _INTS or column in _FLAGS:
        return int(value)
    if column in _FLOATS:
        return float(value)
    return value


def _time(value: Any) -> str | None:
    return None if value is None else repr(float(value))


class RedisEnd:
    """A Redis namespace a move writes (see the module's docstring)."""

    def __init__(self, url: str) -> None:
        from ..store._urls import store_from_url

        store = store_from_url(url)
        assert isinstance(store, RedisStore)
        store.heed_moves = False  # the namespace a move is writing into is the move's to write
        self.store = store
        self.url = url
        self.shown = _shown(url)
        self._read: dict[str, list[dict[str, Any]]] = {}  # each kind read back whole, till a write

    @classmethod
    async def connect(cls, url: str) -> RedisEnd:
        end = cls(url)
        await end.store.open(create=True)
        return end

    async def identity(self) -> str:
        info = await self._q(self.store.redis.info, "server")
        return f"redis:{info.get('run_id')}/{self.store.prefix}"

    async def close(self) -> None:
        await self.store.close()

    async def tables(self) -> set[str]:
        return set(KEPT)

    async def columns(self, table: str) -> list[str]:
        return list(KEPT[table])

    async def count(self, table: str) -> int:
        return len(await self._all(table))

    async def rows(self, table: str, columns: Sequence[str], key: Sequence[str],
                   after: Sequence[Any] | None, limit: int) -> list[list[Any]]:
        found = await self._all(table)
        start = 0
        if after is not None:
            keys = [tuple(row[k] for k in key) for row in found]
            start = bisect.bisect_right(keys, tuple(after))
        return [[row[c] for c in columns] for row in found[start:start + limit]]

    async def last_key(self, table: str, key: Sequence[str]) -> list[Any] | None:
        found = await self._all(table)
        return [found[-1][k] for k in key] if found else None

    # -- writing ----------------------------------------------------------------------

    async def insert(self, table: str, columns: Sequence[str], rows: list[list[Any]]) -> None:
        self._read.pop(table, None)
        named = [dict(zip(columns, row)) for row in rows]
        store = self.store
        if table == "runs":
            args: list[Any] = []
            for run in named:
                kept = {name: _text(value) for name, value in run.items()
                        if name in RUN_COLUMNS and value is not None
                        and not (name == "pause_requested" and not value)}
                args += [identity(run["tenant"], run["key"]), json.dumps(kept)]
            await store._script("move_runs", *args)
        elif table == "steps":
            args = []
            for step in named:
                entry = step_identity(int(step["fence"]), step["name"], step["status"], step["result"],
                                      step["error"])
                args += [step["run_id"], step["position"], f"{entry}\n{_time(step['created_at'])}"]
            await store._script("move_steps", *args)
        elif table == "events":
            args = []
            for event in named:
                entry = json.dumps([event["kind"], event["data"], _time(event["at"])])
                args += [event["run_id"], event["seq"], entry, event.get("mark"), event["kind"]]
            reply = await store._script("move_events", *args)
            if isinstance(reply, list):  # the source's log has a gap: a copy out of order
                raise StoreError(f"move: run {reply[1]}'s event {reply[2]} does not follow its log")
        elif table == "questions":
            args = []
            for question in named:
                held = {"kind": question["kind"], "body": question["body"],
                        "asked_at": _time(question["asked_at"]), "answer": question["answer"],
                        "answered_by": question["answered_by"], "answered_at": _time(question["answered_at"])}
                args += [question["run_id"], question["position"],
                         json.dumps({k: v for k, v in held.items() if v is not None})]
            await store._script("move_questions", *args)
        elif table == "schedules":
            for row in named:  # as the store saves one (schedule_save.lua)
                await store.schedule_save(Schedule(**{c: row[c] for c in SCHEDULE_COLUMNS if c != "paused"},
                                                   paused=bool(row["paused"])))
        elif table == "reclaimed":  # retention's marks, as run_reclaim.lua keeps them
            await self._q(store.redis.hset, store.key("reclaimed"),
                                   mapping={str(int(r["lo"])): str(int(r["hi"])) for r in named})
        elif table == "rate_buckets":
            for row in named:  # as a take stores a bucket no one took from yet (bucket_take.lua)
                await store._script("bucket_take", row["name"], None, None, float(row["tokens"]),
                                    float(row["updated_at"]))
        elif table == "fleet_paused_queues":
            for row in named:
                await store.queue_set_paused(QueuePauseParams(row["root"], row["queue"], True))
        elif table == "limit_overrides":
            for row in named:
                await store.limit_set(LimitSetParams(row["target"], int(row["max"])))
        elif table == "run_keys":  # PostgreSQL's index of keys: the runs wrote `keys` already
            for row in named:
                ident = identity(row["tenant"] or None, row["key"])
                await self._q(store.redis.hsetnx, store.key("keys"), ident, str(row["run_id"]))
        else:
            raise ConfigError(f"move: a Redis target does not take {table} yet")

    # -- reading back -----------------------------------------------------------------

    async def _q(self, fn: Any, *args: Any, **options: Any) -> Any:
        """A command, its failures as the store's errors (and its answer untyped: text)."""
        return await self.store._call(lambda: fn(*args, **options))

    async def _all(self, table: str) -> list[dict[str, Any]]:
        if table not in self._read:
            found = await self._read_kind(table)
            found.sort(key=lambda row: tuple(row[k] for k in _KEYS[table]))
            self._read[table] = found
        return self._read[table]

    async def _run_ids(self, *kinds: str) -> list[int]:
        """The ids of the runs listed (no kinds), or of those that have a key of one of
        `kinds` (ev, steps ...): a log or a journal is read back whether or not its run is
        listed, so a check sees each of them."""
        if not kinds:
            return [int(i) for i in await self._q(self.store.redis.zrange, self.store.key("runs"), 0, -1)]
        found: set[int] = set()
        for kind in kinds:
            head = self.store.key(f"{kind}:")
            async for key in self.store.redis.scan_iter(match=f"{head}*", count=1000):
                rest = key[len(head):]
                if rest.isdigit():
                    found.add(int(rest))
        return sorted(found)

    async def _read_kind(self, table: str) -> list[dict[str, Any]]:
        store, redis = self.store, self.store.redis
        if table == "runs":
            found = []
            for run_id in await self._run_ids():
                held = await self._q(redis.hgetall, store.key(f"run:{run_id}"))
                found.append({c: _typed(c, held.get(c)) for c in RUN_COLUMNS})
            return found
        if table == "steps":
            found = []
            for run_id in await self._run_ids("steps", "steps_old"):
                for part in ("steps_old", "steps"):
                    entries = await self._q(redis.hgetall, store.key(f"{part}:{run_id}"))
                    for position, entry in entries.items():
                        step = step_from_entry(run_id, position, entry)
                        found.append({"run_id": run_id, "position": step.position, "name": step.name,
                                      "status": step.status, "result": step.result, "error": step.error,
                                      "fence": step.fence, "created_at": step.created_at})
            return found
        if table == "events":
            found = []
            for run_id in await self._run_ids("ev"):
                trimmed = int(await self._q(redis.hget, store.key(f"run:{run_id}"), "trimmed_seq") or 0)
                base = max(trimmed - 1, 0)
                emarks = await self._q(redis.hgetall, store.key(f"emarks:{run_id}"))
                marks = {int(seq): json.loads(place)[0] for place, seq in emarks.items()}
                for index, entry in enumerate(await self._q(redis.lrange, store.key(f"ev:{run_id}"), 0, -1)):
                    kind, data, at = json.loads(entry)
                    seq = base + index + 1
                    found.append({"run_id": run_id, "seq": seq, "kind": kind, "data": data,
                                  "at": float(at), "mark": marks.get(seq)})
            return found
        if table == "questions":
            found = []
            for run_id in await self._run_ids("qs"):
                for position in await self._q(redis.zrange, store.key(f"qs:{run_id}"), 0, -1):
                    held = await self._q(redis.hgetall, store.key(f"q:{run_id}:{position}"))
                    found.append({"run_id": run_id, "position": int(position),
                                  **{c: _typed(c, held.get(c)) for c in KEPT["questions"][2:]}})
            return found
        if table == "schedules":
            return [{c: getattr(s, c) for c in SCHEDULE_COLUMNS} for s in await store.schedule_list()]
        if table == "reclaimed":
            return [{"lo": int(lo), "hi": int(hi)}
                    for lo, hi in (await self._q(redis.hgetall, store.key("reclaimed"))).items()]
        if table == "rate_buckets":
            found = []
            async for key in redis.scan_iter(match=store.key("bucket:*"), count=1000):
                held = await self._q(redis.hgetall, key)
                found.append({"name": key[len(store.key("bucket:")):], "tokens": float(held["tokens"]),
                              "updated_at": float(held["updated_at"])})
            return found
        if table == "fleet_paused_queues":
            found = []
            head, tail = store.key("fleet:"), ":paused"
            async for key in redis.scan_iter(match=f"{head}*{tail}", count=1000, _type="SET"):
                root = key[len(head):-len(tail)]
                found += [{"root": root, "queue": queue} for queue in await store.queue_list_paused(root)]
            return found
        if table == "limit_overrides":
            return [{"target": target, "max": cap} for target, cap in (await store.limit_overrides()).items()]
        if table == "run_keys":
            found = []
            for ident, run_id in (await self._q(redis.hgetall, store.key("keys"))).items():
                tenant, key = json.loads(ident)
                found.append({"tenant": tenant, "key": key, "run_id": int(run_id)})
            return found
        raise ConfigError(f"move: a Redis target does not keep {table}")

    async def stray(self) -> list[str]:
        """Keys of the namespace besides its key layout's version and the move's mark: a
        namespace is empty without them (it may hold kinds no move writes yet)."""
        mine = {self.store.key("schema_version"), self._mark_key()}
        found = []
        async for key in self.store.redis.scan_iter(match=self.store.key("*"), count=1000):
            if key not in mine:
                found.append(key[len(self.store.prefix):])
                if len(found) >= 3:
                    break
        return sorted(found)

    # -- the move's mark and ids --------------------------------------------------------

    def _mark_key(self) -> str:
        return self.store.key(f"lease:{MARK}")  # a named lease no holder ever takes (see store._moved)

    async def read_mark(self) -> str | None:
        holder: str | None = await self._q(self.store.redis.hget, self._mark_key(), "holder")
        return holder

    async def write_mark(self, holder: str | None) -> None:
        if holder is None:
            await self._q(self.store.redis.delete, self._mark_key())
        else:
            await self._q(self.store.redis.hset, self._mark_key(),
                          mapping={"holder": holder, "expires_at": repr(NEVER)})

    async def seal(self, holder: str, text: str) -> None:
        raise ConfigError("move: a Redis store is not a move's source yet")

    async def unseal(self) -> None:
        raise ConfigError("move: a Redis store is not a move's source yet")

    def _counter(self, table: str) -> str:
        return self.store.key({"runs": "ids", "workers": "worker_ids"}[table])

    async def next_id(self, table: str) -> int:
        return int(await self._q(self.store.redis.get, self._counter(table)) or 0) + 1

    async def ensure_next_id(self, table: str, next_id: int) -> None:
        # The counter gives next_id next (INCR): past every moved id, never moved back.
        if await self.next_id(table) < next_id:
            await self._q(self.store.redis.set, self._counter(table), next_id - 1)

    async def run_keys_from_runs(self) -> None:
        return None  # move_runs.lua wrote each run's key in `keys`


def _shown(url: str) -> str:
    from ..store.redis._store import _safe

    return _safe(url)
