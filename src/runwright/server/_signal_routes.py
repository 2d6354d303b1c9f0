"""Talking to a live run over HTTP: signals (send one, list a run's, signal-with-start by
key), its published state and its task's queries.

Who sent a signal is the caller's token (the operator, or the tenant), so it cannot be
made up; a body's `by` only adds a name to it ("acme:ana"), as for answers."""

from __future__ import annotations

from typing import Annotated, Any, Awaitable, Callable, Literal

from fastapi import FastAPI, Query, Request, Response
from fastapi import Path as FastAPIPath
from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from ..client._bulk import BulkReport
from ..client._scope import RunScope
from ..core import _inputs as inputs
from ..core._inputs import MAX_KEY_CHARS, MAX_TENANT_CHARS
from ..core._signals import Signal
from ..runs import RunState
from ..tasks._submission import MAX_PRIORITY, PRIORITY_HELP
from ._bulk_stream import PROGRESS_MEDIA, progress_stream, wants_progress
from ._decode import seal_run
from ._deps import After, RunId, Scopes, Tenant
from ._models import BudgetIn, RunOut
from ._problems import SealedToOperator

__all__ = ["SignalIn", "SignalOut", "SignalStartIn", "add_signal_routes"]

PatchId = Annotated[str, FastAPIPath(min_length=1, max_length=100, pattern=r"^[A-Za-z0-9_.\-]+$")]
QueryName = Annotated[str, FastAPIPath(min_length=1, max_length=200, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
NAME = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:\-/]+$",
             description="The signal's name: what `ctx.wait_signal(name)` waits for.")


class SignalOut(BaseModel):
    run_id: int
    seq: int = Field(description="The signal's number within its run, in the order sent.")
    name: str
    payload: Any = None
    sent_at: float
    key: str | None = None
    sent_by: str | None = None
    position: int | None = Field(None, description="The journal position of the wait that took it; "
                                                   "null while pending.")
    taken_at: float | None = None

    @classmethod
    def of(cls, s: Signal) -> SignalOut:
        return cls(**s.as_json())


class SignalIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = NAME
    payload: Any = Field(None, description="Any JSON value, up to the payload limit.")
    key: str | None = Field(None, min_length=1, max_length=MAX_KEY_CHARS,
                            description="Idempotency key: the same key sent again keeps one signal.")
    by: str | None = Field(None, min_length=1, max_length=100,
                           description="A name added to the caller's identity, e.g. a person's.")


class SignalStartIn(BaseModel):
    """Signal-with-start: the run of `key`, started with these arguments if there is none."""

    model_config = ConfigDict(extra="forbid")

    task: str = Field(description="A registered task.")
    args: dict[str, Any] = Field(default_factory=dict, description="The task's keyword arguments.")
    key: str = Field(min_length=1, max_length=MAX_KEY_CHARS, description="The run's key.")
    priority: int | None = Field(None, ge=0, le=MAX_PRIORITY, description=PRIORITY_HELP)
    queue: str | None = Field(None, max_length=200)
    budget: BudgetIn | None = None
    on_conflict: str = Field("reject", pattern="^(reject|return)$")
    signal: SignalIn


class UpdateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:\-/]+$",
                      description="The update's name: what `ctx.handle_update(name, ...)` applies.")
    payload: Any = Field(None, description="Any JSON value, up to the payload limit.")
    key: str | None = Field(None, min_length=1, max_length=MAX_KEY_CHARS,
                            description="Idempotency key: the same key sent again is the same update.")
    timeout_s: float = Field(30.0, gt=0, le=300, description="How long to wait for the run's reply.")
    by: str | None = Field(None, min_length=1, max_length=100)


class BulkIn(BaseModel):
    """A bulk action and the filter of the runs it acts on (the caller's runs)."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["retry", "cancel", "resume", "fork"] = Field(description=(
        "fork: each run forked from its failing step (its first failed journal entry, else "
        "the journal's end), once per run and step however often asked; resume: the paused "
        "runs of the filter."))
    states: list[RunState] = Field(default_factory=list, description="Default: dead and failed runs for "
                                                                      "retry and fork; queued and running "
                                                                      "for cancel; resume takes paused "
                                                                      "runs only.")
    task: str | None = Field(None, max_length=200)
    queue: str | None = Field(None, max_length=200)
    error: str | None = Field(None, min_length=1, max_length=200, description="Text of the runs' error.")
    created_after: float | None = Field(None, ge=0, le=1e11)
    created_before: float | None = Field(None, ge=0, le=1e11)
    # As GET /runs's `tenant`: the operator's narrowing to one tenant's runs (the dashboard
    # acts over the list it shows); a tenant may name only itself (403 otherwise).
    tenant: Annotated[str | None, AfterValidator(lambda v: v if v is None else inputs.tenant(v))] = Field(
        None, min_length=1, max_length=MAX_TENANT_CHARS,
        description="Only this tenant's runs (the operator's).")
    limit: int = Field(1000, ge=1, le=100_000)
    dry_run: bool = Field(False, description="Count and sample what matches; change nothing.")


class QueryIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    args: dict[str, Any] = Field(default_factory=dict, description="The query's keyword arguments.")


class SignalStartOut(BaseModel):
    run: RunOut
    signal: SignalOut


def add_signal_routes(api: FastAPI, scopes: Scopes) -> None:
    scope_of: Callable[[str | None], RunScope] = scopes.of

    def sender(who: str | None, by: str | None) -> str:
        identity = who or "operator"
        return identity if by is None else f"{identity}:{by}"

    @api.post("/runs/{run_id}/signals", response_model=SignalOut)
    async def send_signal(run_id: RunId, body: SignalIn, who: Tenant) -> SignalOut:
        """Send the run a signal, kept until its `ctx.wait_signal(name)` takes it (once, in
        the order sent); a run parked on that wait is woken. 409 for an ended run or a key
        sent before with another name or payload; 429 when the run has as many pending
        signals as it may keep."""
        return SignalOut.of(await scope_of(who).signal(run_id, body.name, body.payload, key=body.key,
                                                       by=sender(who, body.by)))

    @api.get("/runs/{run_id}/signals", response_model=list[SignalOut])
    async def run_signals(run_id: RunId, who: Tenant, after: After = 0, pending: bool = False,
                          limit: int = Query(1000, ge=1, le=1000)) -> list[SignalOut]:
        """The run's signals in the order sent, after `after`; only the pending ones with
        `pending=true`."""
        found = await scope_of(who).signals(run_id, pending=pending, after=after, limit=limit)
        return [SignalOut.of(s) for s in found]

    @api.post("/signal-with-start", status_code=201, response_model=SignalStartOut,
              responses={200: {"model": SignalStartOut, "description": "The key already named a run"}})
    async def signal_with_start(body: SignalStartIn, response: Response, who: Tenant) -> SignalStartOut:
        """Signal the run of `key`, starting it first if there is none (one write: the new
        run is never seen without its signal). 201 when the run was started, 200 when it
        existed; an existing run submitted otherwise is a 409 unless `on_conflict` is
        return, and an ended one refuses the signal (409)."""
        sig = body.signal
        handle, sent = await scope_of(who).signal_with_start(
            body.task, sig.name, sig.payload, key=body.key, args=body.args, signal_key=sig.key,
            by=sender(who, sig.by), priority=body.priority, queue=body.queue,
            budget=body.budget.budget() if body.budget else None, on_conflict=body.on_conflict)
        if handle.existed:
            response.status_code = 200
        return SignalStartOut(run=RunOut.of(handle.run), signal=SignalOut.of(sent))

    @api.get("/runs/{run_id}/state", response_model=dict[str, Any])
    async def run_state(run_id: RunId, who: Tenant) -> dict[str, Any]:
        """The state the run published (`ctx.set_state`): each key's latest value."""
        await seal_run(scope_of(who), run_id)
        return {"state": await scope_of(who).state(run_id)}

    @api.post("/runs/{run_id}/queries/{name}", response_model=dict[str, Any])
    async def run_query(run_id: RunId, name: QueryName, body: QueryIn, who: Tenant) -> dict[str, Any]:
        """Answer the run's task's query `name` (`@task.query`) over its published state,
        in this server (which loads the app): `{"result": ...}`. 422 for a query the task
        does not have, or arguments it does not take; 403 for the operator on a tenant's run
        whose payloads are sealed to it (a query computes over them)."""
        if await seal_run(scope_of(who), run_id):
            raise SealedToOperator(f"run {run_id} is a tenant's: a query computes over its payloads, "
                                   f"which are sealed to the operator (decode=1, on a server started "
                                   f"with --operator-decode)")
        return {"result": await scope_of(who).query(run_id, name, **body.args)}

    @api.post("/runs/{run_id}/updates", response_model=dict[str, Any],
              responses={504: {"description": "No reply in time: `detail` says whether it was "
                                              "withdrawn (never applied) or is being applied"}})
    async def run_update(run_id: RunId, body: UpdateIn, who: Tenant) -> dict[str, Any]:
        """Send the run an update and answer with its result once the run applied it:
        `{"result": ...}`. 422 when the task's validator refuses it (nothing written); 504
        past `timeout_s`; 409 when the run ended (or ends) before applying it."""
        result = await scope_of(who).update(run_id, body.name, body.payload, timeout_s=body.timeout_s,
                                            key=body.key, by=sender(who, body.by))
        return {"result": result}


    @api.get("/patches/{patch_id}", response_model=dict[str, Any])
    async def patch_report(patch_id: PatchId, who: Tenant, task: str | None = Query(None, max_length=200)
                           ) -> dict[str, Any]:
        """Which live runs (of the caller's) took the new path of patch `patch_id`
        (`ctx.patched`) and which still depend on its old branch."""
        report = await scope_of(who).patch_runs(patch_id, task=task)
        return {"patch_id": report.patch_id, "patched": report.patched, "unpatched": report.unpatched,
                "complete": report.complete}

    @api.post("/bulk", response_model=dict[str, Any],
              responses={200: {"content": {PROGRESS_MEDIA: {"schema": {"type": "string"}}},
                               "description": "The report; asked with `Accept: application/x-ndjson`, "
                                              "progress lines then the report's"},
                         403: {"description": "A tenant's token named another tenant"}})
    async def bulk_action(body: BulkIn, who: Tenant, request: Request) -> Any:
        """Retry, cancel, resume or fork every run (of the caller's; with `tenant`, the
        operator's narrowing to one tenant's) that matches the filter, newest first, at most
        `limit`: what matched, what was done, and each refusal with why
        (a run another action changed first is refused, never changed twice). With `Accept:
        application/x-ndjson`, a line `{"acted": n, "matched": m}` after each page of runs,
        then `{"report": {...}}` (or `{"problem": {...}}` should it fail part-way)."""
        scope = scopes.narrowed(who, body.tenant)  # a tenant naming another: 403 before any line

        def act(progress: Callable[[int, int], None] | None = None) -> Awaitable[BulkReport]:
            return scope.bulk(body.action, states=body.states, task=body.task, queue=body.queue,
                              error=body.error, created_after=body.created_after,
                              created_before=body.created_before, limit=body.limit, dry_run=body.dry_run,
                              progress=progress)

        if wants_progress(request.headers.get("accept")):
            return progress_stream(act)
        return (await act()).as_json()
