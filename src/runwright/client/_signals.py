"""Talking to a live run: signals (send one, start-and-signal by key, list), its published
state and its task's queries.

A signal is checked here, once, at the edge (its name, its payload's size), and kept by
the store with its run; the run reads it with `ctx.wait_signal` (see core._signals). A
query runs here, over the state the run published in its journal (`ctx.set_state`), not in
the run's process: it answers for a parked run, or one whose worker died.
"""

from __future__ import annotations

import asyncio
import inspect
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Mapping, Sequence

from ..core import _inputs as inputs
from ..core._journal import PATCH_PREFIX, check_patch_id, published_state
from ..core._signals import UPDATE_PREFIX, Signal, check_signal_name
from ..errors import InvalidInput, RunEnded, RunNotFound, UpdateTimeout
from ..runs import Run, RunState
from ..store._connections import driver_connection
from ..store._params import SignalListParams, SignalSendParams, SignalStartParams
from ..tasks._budget import Budget
from ..tasks._serde import encode
from ..tasks._specs import TaskSpec
from ..tasks._submission import Submission, check_key_reuse, check_on_conflict, insert_params
from ._handles import RunHandle

if TYPE_CHECKING:
    from ..engine._runtime import Runtime
    from ._following import Follower

__all__ = ["PatchReport", "RunView", "TalkingToRuns"]


# The live runs a patch report reads at most (each one's journal: one read a run).
PATCH_SCAN_LIMIT = 10_000


@dataclass(frozen=True)
class PatchReport:
    """Live runs by the path they take at a patch: `patched` journaled its marker (the new
    path), `unpatched` did not (the old path, or not yet at the patch's point)."""

    patch_id: str
    patched: list[int]
    unpatched: list[int]
    complete: bool = True


@dataclass(frozen=True)
class RunView:
    """What a query sees of a run: its record as read, and its published state."""

    run: Run
    state: dict[str, Any]


class TalkingToRuns(ABC):
    """Signals, state and queries of a scope (`RunScope` mixes this in, and gives the rest)."""

    _runtime: Runtime
    _follower: Follower
    _ready: Callable[[], Awaitable[object]]
    tenant_name: str | None

    @abstractmethod
    async def _own(self, run_id: Any) -> int: ...

    @abstractmethod
    def _run_id(self, run_id: Any) -> int:
        """A run id as given, checked (RunNotFound when it cannot be one), nothing read."""

    @abstractmethod
    async def read_run(self, run_id: int) -> Run: ...

    @abstractmethod
    async def _missing(self, run_id: int) -> RunNotFound: ...

    @abstractmethod
    def _tenant_for(self, given: str | None) -> str | None: ...

    @abstractmethod
    def _handle(self, run: Run) -> RunHandle: ...

    async def signal(self, run_id: int, name: str, payload: Any = None, *, key: str | None = None,
                     by: str | None = None, connection: Any = None) -> Signal:
        """Send signal `name` with `payload` (any JSON value) to a run, from any process.
        It is kept until the run takes it with `ctx.wait_signal(name)`, in the order
        sent, each by one wait, once; a run parked on that wait is woken. With `key`, a
        send repeated (a retried request) keeps one signal and returns it; the key with
        another name or payload is KeyConflict. Refused: an ended run (RunEnded), a run
        with `limits.max_pending_signals` signals not yet taken (SignalsFull).

        `connection`: the caller's open transaction on the store's database, as
        `submit`'s: the signal is kept, and the run woken, if and only if it commits
        (the run's row stays locked to that commit). Redis refuses it."""
        params = _send_params(self, 0, name, payload, key, by)
        await self._ready()
        store = self._runtime.store
        if connection is not None:
            # The tenant is judged by the store inside the transaction (a run submitted in
            # it is seen there, and nowhere else before the commit).
            params.run_id = self._run_id(run_id)
            return await store.signal_send_in(await driver_connection(connection), params)
        params.run_id = await self._own(run_id)
        try:
            return await store.signal_send(params)
        except RunNotFound:
            raise await self._missing(params.run_id) from None

    async def signal_with_start(self, task: TaskSpec | str, signal: str, payload: Any = None, /, *,
                                key: str, args: Mapping[str, Any] | None = None,
                                signal_key: str | None = None, by: str | None = None,
                                priority: int | None = None, queue: str | None = None,
                                budget: Budget | None = None, tenant: str | None = None,
                                traceparent: str | None = None,
                                on_conflict: str = "reject") -> tuple[RunHandle, Signal]:
        """Signal the run of `key`, starting it first if there is none: one write when the
        run is new (it is never seen without its first signal), so any number of senders
        racing on one key make one run and deliver every signal once: the pattern for
        "one agent per conversation, order or user". An existing run of the key is
        compared with this submission as `submit` does (KeyConflict unless the same, or
        `on_conflict="return"`), then signalled; an ended one refuses the signal
        (RunEnded: a key names one run, whatever its state). `args` are the task's
        keyword arguments (a mapping, so that no task parameter can collide with these
        names); the options are `submit`'s (not `thread` nor `connection`)."""
        inputs.key(key)
        check_on_conflict(on_conflict)
        spec = self._runtime.registry.task_spec(task)
        sending = _send_params(self, 0, signal, payload, signal_key, by)
        submission = Submission(key=key, priority=priority, queue=queue, budget=budget,
                                tenant=self._tenant_for(tenant), traceparent=traceparent,
                                on_conflict=on_conflict)
        await self._ready()
        params = insert_params(spec, spec.bind((), dict(args or {})), submission, now_s=self._runtime.clock(),
                               limits=self._runtime.limits, version=self._runtime.registry.version)
        sending.tenant = params.tenant
        store = self._runtime.store
        run, sent = await store.signal_start(SignalStartParams(params, sending))
        if sent is None:  # the key named a run already: compared, then signalled
            check_key_reuse(run, params, on_conflict)
            sending.run_id = run.id
            sent = await store.signal_send(sending)
        return self._handle(run), sent

    async def signals(self, run_id: int, *, pending: bool = False, after: int = 0,
                      limit: int = 1000) -> list[Signal]:
        """A run's signals in the order sent (`seq`), each with the journal position of the
        wait that took it (None while pending); only the pending ones with `pending`."""
        limit = inputs.integer(limit, "limit", 1, 1000)
        after = inputs.integer(after, "after", 0, inputs.MAX_SEQ)
        await self._ready()
        value = await self._own(run_id)
        try:
            return await self._runtime.store.signal_list(SignalListParams(
                value, pending=pending, after=after, limit=limit, tenant=self.tenant_name))
        except RunNotFound:
            raise await self._missing(value) from None

    # -- state and queries --------------------------------------------------------------

    async def state(self, run_id: int) -> dict[str, Any]:
        """The state the run published (`ctx.set_state`): each key's latest value."""
        return (await self._view(run_id)).state

    async def query(self, run_id: int, name: str, /, **args: Any) -> Any:
        """Answer the run's task's query `name` (`@task.query`) with `args`, here, over the
        run's published state: InvalidInput when this process does not know the task or
        the task has no such query (it must load the app that defines them)."""
        view = await self._view(run_id)
        spec = self._runtime.registry.tasks.get(view.run.task)
        if spec is None:
            raise InvalidInput(f"run {view.run.id} is of task {view.run.task!r}, which this process does "
                               f"not define: ask a process that loads its app")
        handler = spec.queries.get(name)
        if handler is None:
            known = ", ".join(sorted(spec.queries)) or "none"
            raise InvalidInput(f"task {spec.name!r} has no query {name!r} (its queries: {known})")
        try:
            value = handler(view, **args)
        except TypeError as exc:
            raise InvalidInput(f"query {name!r} of task {spec.name!r}: {exc}") from None
        if inspect.isawaitable(value):
            value = await value
        encode(value, f"the answer of query {name!r}", self._runtime.limits.max_payload_bytes)
        return value

    async def _view(self, run_id: int) -> RunView:
        run = await self.read_run(run_id)
        journal = await self._runtime.store.step_list(run.id)
        return RunView(run, published_state(journal))

    # -- updates ------------------------------------------------------------------------

    async def update(self, run_id: int, name: str, payload: Any = None, *, timeout_s: float = 30.0,
                     key: str | None = None, by: str | None = None) -> Any:
        """Send the run update `name` and return its result, once the run's
        `ctx.handle_update(name, handler)` has applied it. Checked first, here, by the
        task's validator when this process knows the task (`@task.validate_update`): a
        refusal is InvalidInput and nothing is written. Never half applied: past
        `timeout_s` an update no wait took yet is withdrawn (UpdateTimeout, `applying`
        False); one taken is being applied by a journaled step and completes
        (`applying` True). A run that ends without applying it: RunEnded (withdrawn)."""
        if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or not 0 < timeout_s < 1e9:
            raise InvalidInput(f"timeout_s must be > 0, got {timeout_s!r}")
        check_signal_name(name)
        view = await self._view(run_id)
        run = view.run
        spec = self._runtime.registry.tasks.get(run.task)
        validator = None if spec is None else spec.update_validators.get(name)
        if validator is not None:
            try:
                checked = validator(view, payload)
                if inspect.isawaitable(checked):
                    await checked
            except (ValueError, TypeError, LookupError) as exc:
                raise InvalidInput(f"update {name!r} of run {run.id} refused: {exc}") from None
        sent = await self.signal(run.id, f"{UPDATE_PREFIX}{name}", payload,
                                 key=key or f"update-{uuid.uuid4().hex}", by=by)
        after = 0 if sent.position is not None else run.last_seq  # a key sent before: its reply may be logged
        try:
            async with asyncio.timeout(timeout_s):
                async for event in self._follower.events(run.id, after=after):
                    if event.kind == "updated" and event.data.get("update") == sent.seq:
                        return event.data.get("result")
        except TimeoutError:
            withdrawn = await self._runtime.store.signal_withdraw(run.id, sent.seq)
            raise UpdateTimeout(run.id, name, sent.seq, timeout_s, applying=not withdrawn) from None
        # The run ended without a reply: withdrawn if no wait took it; else its handler's
        # journal entry (the step right after the wait that took it) says whether it was
        # applied (the run ended between the step and its reply) or not (it ended first).
        ended = await self.read_run(run.id)
        if await self._runtime.store.signal_withdraw(run.id, sent.seq):
            raise RunEnded(f"run {run.id} ended {ended.state.value} before it took update {name!r} "
                           f"(#{sent.seq}): withdrawn, not applied")
        taken = next(s for s in await self.signals(run.id, after=sent.seq - 1, limit=1))
        journal = {r.position: r for r in await self._runtime.store.step_list(run.id)}
        applied = None if taken.position is None else journal.get(taken.position + 1)
        if applied is not None and applied.status == "done" and applied.name == f"{UPDATE_PREFIX}{name}":
            return applied.value()
        raise RunEnded(f"run {run.id} ended {ended.state.value} while it applied update {name!r} "
                       f"(#{sent.seq}): its handler did not complete, so it was not applied")

    # -- patches ------------------------------------------------------------------------

    async def patch_runs(self, patch_id: str, *, task: str | None = None,
                         limit: int = PATCH_SCAN_LIMIT) -> PatchReport:
        """Which live runs (queued or running, parked ones too) took the new path of patch
        `patch_id` (`ctx.patched`: its marker is in their journal) and which have not:
        while a run of the task that reached the patch's point before it was deployed is
        live, the old branch must stay. With `task`, only that task's runs; at most
        `limit` runs are read, newest first (`complete` says whether that was all)."""
        marker = f"{PATCH_PREFIX}{check_patch_id(patch_id)}"
        limit = inputs.integer(limit, "limit", 1, PATCH_SCAN_LIMIT)
        patched: list[int] = []
        unpatched: list[int] = []
        before = None
        while True:
            want = min(100, limit - len(patched) - len(unpatched))
            page = await self.list_runs(states=(RunState.QUEUED, RunState.RUNNING), task=task,
                                        limit=want, before_id=before)
            for run in page:
                journal = await self._runtime.store.step_list(run.id)
                (patched if any(r.name == marker for r in journal) else unpatched).append(run.id)
            if len(page) < want:
                return PatchReport(patch_id, patched, unpatched, complete=True)
            if len(patched) + len(unpatched) >= limit:
                return PatchReport(patch_id, patched, unpatched, complete=False)
            before = page[-1].id

    @abstractmethod
    async def list_runs(self, *, states: Sequence[RunState] = (), task: str | None = None,
                        limit: int = 100, before_id: int | None = None) -> list[Run]: ...


def _send_params(scope: TalkingToRuns, run_id: int, name: str, payload: Any, key: str | None,
                 by: str | None) -> SignalSendParams:
    """A send checked at the edge: the name, the payload's size, the key, the sender."""
    check_signal_name(name)
    limits = scope._runtime.limits
    body = encode(payload, f"signal {name!r}'s payload", limits.max_payload_bytes)
    if key is not None:
        inputs.key(key, "signal key")
    who = inputs.answerer(by if by is not None else (scope.tenant_name or "operator"))
    return SignalSendParams(run_id, name, body, key=key, by=who, tenant=scope.tenant_name,
                            max_pending=limits.max_pending_signals)
