"""The Redis store's journal and log."""

from __future__ import annotations

from typing import Any, AsyncContextManager, Sequence

from ...core._events import EventPublished
from ...core._journal import Event, StepRecord
from ...core._signals import Signal
from ...errors import TransactionsUnsupported
from ...runs import Run
from .. import _rules as rules
from .._event_params import EventPublishParams
from .._hub import events_topic
from .._params import (
    EventAppendParams,
    EventListParams,
    RunInsertParams,
    SignalSendParams,
    StepRecordParams,
    StepTransaction,
)
from ._base import RedisBase
from ._codec import event_from_entry, step_from_entry, step_identity

__all__ = ["RedisJournal"]


class RedisJournal(RedisBase):
    """The journal and the log (`JournalStore`)."""

    keeps_transactions = False  # no transaction with the application's tables

    def step_transaction(self) -> AsyncContextManager[StepTransaction]:
        raise TransactionsUnsupported(rules.NO_TRANSACTIONS)

    async def run_insert_in(self, connection: Any, params: Sequence[RunInsertParams]) -> list[Run]:
        raise TransactionsUnsupported(rules.NO_TRANSACTIONS)

    async def step_record_in(self, connection: Any, record: StepRecordParams) -> None:
        raise TransactionsUnsupported(rules.NO_TRANSACTIONS)

    async def signal_send_in(self, connection: Any, params: SignalSendParams) -> Signal:
        raise TransactionsUnsupported(rules.NO_TRANSACTIONS)

    async def event_publish_in(self, connection: Any, params: EventPublishParams) -> EventPublished:
        raise TransactionsUnsupported(rules.NO_TRANSACTIONS)

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


# -- helpers --------------------------------------------------------------------------


def _journal(run_id: int, entries: dict[str, str]) -> list[StepRecord]:
    steps = [step_from_entry(run_id, position, entry) for position, entry in entries.items()]
    return sorted(steps, key=lambda s: s.position)
