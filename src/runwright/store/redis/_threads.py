"""The Redis store's threads."""

from __future__ import annotations

import json

from ...core._journal import ThreadEvent
from ...runs import RunState
from .. import _rules as rules
from .._params import (
    ThreadAppendParams,
    ThreadDeleteParams,
    ThreadEventListParams,
    ThreadForgetParams,
    ThreadGetParams,
    ThreadInfo,
    ThreadListParams,
    ThreadMessagesParams,
)
from ._base import LIST_CHUNK, RedisBase, _float_or_none
from ._codec import event_from_entry, identity

__all__ = ["RedisThreads"]


class RedisThreads(RedisBase):
    """Threads (`ThreadStore`)."""

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


# -- helpers --------------------------------------------------------------------------


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
