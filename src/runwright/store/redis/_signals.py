"""The Redis store's signals: decided in Python by the rulebook, applied by a script that
re-checks what the decision was made on (the run's state and its last signal number), so
sends racing each other or the run's end are ordered as on SQL (see scripts/lib.lua)."""

from __future__ import annotations

import json
from typing import Any

from ...core._signals import Signal
from ...errors import RunNotFound
from ...runs import Run
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import SignalListParams, SignalSendParams, SignalStartParams, SignalTaken, SignalTakeParams
from ._base import STALE, RedisBase, Stale
from ._codec import run_from_hash

__all__ = ["RedisSignals"]


class RedisSignals(RedisBase):
    """Signals (`SignalStore`)."""

    async def signal_send(self, params: SignalSendParams) -> Signal:
        async def attempt() -> Signal | Stale:
            facts = await self._call(self.redis.hmget, self.key(f"run:{params.run_id}"),
                                     "signal_seq", "signals_pending")
            run = await self.run_get(params.run_id)
            same_key = None
            if params.key is not None and run is not None:
                seq = await self._call(self.redis.hget, self.key(f"sigkeys:{params.run_id}"), params.key)
                same_key = None if seq is None else await self._signal(params.run_id, int(seq))
            if not rules.plan_signal(run, same_key, int(facts[1] or 0), params):
                assert same_key is not None
                return same_key
            assert run is not None
            reply = await self._script(
                "signal_send", self._now_arg(params.now), run.id, run.state.value, facts[0] or "0",
                params.name, params.payload, params.key, params.by,
                json.dumps(rules.signalled_event(params, int(facts[0] or 0) + 1)))
            if reply[0] != "ok":
                return STALE
            self.hub.fire(QUEUED)
            self.hub.fire(events_topic(run.id))
            return _signal(run.id, int(reply[1]), reply[2])

        return await self._decided(attempt, f"run {params.run_id}: its state or signals during the send")

    async def signal_start(self, params: SignalStartParams) -> tuple[Run, Signal | None]:
        from ._runs import _insert_fields  # the insert's own argument layout

        signal = params.signal
        existed, flat, text = await self._script(
            "signal_start", self._now_arg(params.start.now), *_insert_fields(params.start),
            signal.name, signal.payload, signal.key, signal.by,
            json.dumps(rules.signalled_event(signal, 1)))
        run = run_from_hash(flat)
        run.existed = bool(existed)
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(run.id))
        return run, None if run.existed else _signal(run.id, 1, text)

    async def signal_take(self, params: SignalTakeParams) -> SignalTaken:
        reply = await self._script("signal_take", self._now_arg(params.now), params.run_id, params.fence,
                                   params.position, params.name)
        if reply[0] == "lost":
            return SignalTaken(False)
        if reply[0] == "none":
            return SignalTaken(True)
        return SignalTaken(True, _signal(params.run_id, int(reply[1]), reply[2]))

    async def signal_list(self, params: SignalListParams) -> list[Signal]:
        run = await self.run_get(params.run_id)
        if run is None or (params.tenant is not None and run.tenant != params.tenant):
            raise RunNotFound(f"run {params.run_id} not found")
        kept = await self._call(self.redis.hgetall, self.key(f"sigs:{params.run_id}"))
        signals = sorted((_signal(run.id, int(seq), text) for seq, text in kept.items()
                          if int(seq) > params.after), key=lambda s: s.seq)
        if params.pending:
            signals = [s for s in signals if s.pending]
        return signals[:params.limit]

    async def signal_withdraw(self, run_id: int, seq: int) -> bool:
        gone = await self._script("signal_withdraw", self._now_arg(None), run_id, seq,
                                  json.dumps({"signal": seq}))
        if gone:
            self.hub.fire(events_topic(run_id))
        return bool(gone)

    async def _signal(self, run_id: int, seq: int) -> Signal | None:
        text = await self._call(self.redis.hget, self.key(f"sigs:{run_id}"), str(seq))
        return None if text is None else _signal(run_id, seq, text)


def _signal(run_id: int, seq: int, text: Any) -> Signal:
    fields = json.loads(text)
    return Signal.of_row(run_id, seq, fields["name"], fields["payload"], fields["sent_at"],
                         fields.get("key"), fields.get("sent_by"), fields.get("position"),
                         fields.get("taken_at"), fields.get("withdrawn_at"))
