"""The Redis store's retention: reclaiming runs, tombstones and flow control keys' records,
trimming logs and histories."""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable

from ...core._payloads import blob_names
from ...runs import Run
from .. import _flow_rules as flow_rules
from .. import _rules as rules
from .._params import (
    EventsTrimmed,
    EventTrimParams,
    FlowKeyReclaimParams,
    LeaseTakeParams,
    RunReclaimed,
    RunReclaimParams,
    ThreadMessagesTrimmed,
    ThreadMessageTrimParams,
    ThreadRunReclaimParams,
    ThreadTombstoneReclaimParams,
    TombstonesReclaimed,
)
from ._base import RedisBase
from ._codec import identity, run_from_hash

__all__ = ["RedisRetention"]

SCAN_PAGES = 10  # pages of `threads` (or `flow`) one retention call of a kind looks through, at most


class RedisRetention(RedisBase):
    """Retention (`RetentionStore`)."""

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

    async def blob_references(self) -> set[str]:
        # Every key of the deployment, whatever its type, read whole: no list of the keys
        # that hold payloads to forget one. A page of SCAN at a time, its types in one
        # pipeline and its values in another. SCAN may return a key twice: harmless.
        names: set[str] = set()
        redis, cursor = self.redis, 0
        pattern = _glob_escaped(self.prefix) + "*"
        while True:
            cursor, keys = await self._call(redis.scan, cursor, pattern, 1000)
            if keys:
                for value in await self._values(keys):
                    if value is not None:
                        names |= blob_names(_text(value))
            if not int(cursor):
                return names

    async def _values(self, keys: list[Any]) -> list[Any]:
        """Every value the keys hold, each read as its type is."""
        pipe = self.redis.pipeline(transaction=False)
        for key in keys:
            pipe.type(key)
        kinds = [_text(kind) for kind in await self._call(pipe.execute)]
        pipe = self.redis.pipeline(transaction=False)
        read: dict[str, Callable[[Any], Any]] = {"hash": pipe.hvals, "string": pipe.get, "set": pipe.smembers,
                "list": lambda key: pipe.lrange(key, 0, -1), "zset": lambda key: pipe.zrange(key, 0, -1),
                "stream": pipe.xrange}
        for key, kind in zip(keys, kinds):
            if kind in read:
                read[kind](key)
        values: list[Any] = []
        for kind, got in zip([k for k in kinds if k in read], await self._call(pipe.execute)):
            if kind == "stream":
                values += [value for _, fields in got for value in fields.values()]
            elif kind == "string":
                values.append(got)
            else:
                values += list(got)
        return values

    async def _thread_pages(self, cursor_key: str, count: int, dry_run: bool, hash_key: str = "threads",
                            ) -> AsyncIterator[list[tuple[str, str]]]:
        """Pages of `threads` (identity, number), or of another hash, from where the last
        scan of this kind stopped, at most SCAN_PAGES of them, until the scan wraps to the
        start (a dry run leaves the cursor where it was)."""
        cursor = int(await self._call(self.redis.get, self.key(cursor_key)) or 0)
        for _ in range(SCAN_PAGES):
            cursor, page = await self._call(self.redis.hscan, self.key(hash_key), cursor, None, count)
            if not dry_run:
                await self._call(self.redis.set, self.key(cursor_key), cursor)
            yield list(page.items())
            if int(cursor) == 0:
                return

    async def flow_key_reclaim(self, params: FlowKeyReclaimParams) -> int:
        now = await self._now(params.now)  # the plan's; the script judges again
        found: list[tuple[str, str]] = []
        async for page in self._thread_pages("flow_cursor", params.limit, params.dry_run, "flow"):
            pipe = self.redis.pipeline(transaction=False)
            for _, pointer in page:
                pipe.hget(self.key(f"run:{pointer.split('|')[0]}"), "state")
            states = await self._call(pipe.execute) if page else []
            found += [(slot, pointer) for (slot, pointer), state in zip(page, states)
                      if flow_rules.unneeded(slot, _at_of(pointer), state, now)]
            if len(found) >= params.limit:
                break
        found = found[:params.limit]
        if params.dry_run or not found:
            return len(found)
        gone = await self._script("flow_reclaim", self._now_arg(params.now), flow_rules.MAX_PERIOD_S,
                                  ",".join(flow_rules.KEEPING_STATES),
                                  *[part for pair in found for part in pair])
        return len(gone)

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


# -- helpers --------------------------------------------------------------------------


def _thread_of(ident: str) -> tuple[str | None, str]:
    """(tenant or None, name) of a thread identity (codec.identity)."""
    tenant, name = json.loads(ident)
    return tenant or None, name


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _glob_escaped(text: str) -> str:
    """`text` matched literally by a SCAN pattern (the prefix holds `{` `}`, and a
    namespace may hold `*`, `?`, `[`)."""
    return "".join(f"\\{char}" if char in "*?[]\\" else char for char in text)


def _at_of(pointer: str) -> float | None:
    at = pointer.split("|")[1]
    return float(at) if at else None
