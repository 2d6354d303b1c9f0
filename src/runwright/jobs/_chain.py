"""The `chain` job: a DAG of steps, each a registered task or a job type, run as durable
child runs. A step starts as soon as every step it needs has succeeded (not when a whole
"level" has: an unrelated slow step holds nothing up), so independent steps run together
(fan-out) and a step waits for all it needs (fan-in). A step's arguments are templated:
`{{input}}` is the chain's input and `{{steps.<id>.output}}` (optionally `.field.field`)
another step's output. A string that is exactly one placeholder takes the value itself
(a dict stays a dict); otherwise the value is written into the text.

Branches: a step's `when` is a JSON condition over earlier outputs (`conditions`); a step
whose condition does not hold is skipped, and so is every step that needs a skipped one,
unless it says `"if_needs_skipped": "run"` (a skipped step's output is then null). Each
step's start, end or skip is a `chain_step` event of the chain's run. A failed step
starts nothing new; once the running ones have ended the chain fails, naming it. An
optional `callback` (as the llm job's: a signed webhook to an allowed target) receives
`{run_id, state, outputs, skipped, error}` when the chain ends, succeeded or failed.

Replay stays deterministic although steps end in any order: which children had ended is
itself journaled (the `chain:wait` step), so every replay makes the same decisions and
submits the same children at the same positions. Each step runs once across crashes (a
child run, the same one on every replay).

Every mistake in the DAG is refused at submission, before anything is stored: unknown
task, duplicate id, unknown dependency or reference, a cycle, a malformed condition.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core._resilience import through_blinks
from ..engine._parking import Park
from ..errors import BadArguments, FinalError, InvalidInput, UnknownTask
from ..runs import Run, RunState, WaitReason
from ..tasks._retry import Backoff, RetryPolicy
from ._conditions import check_condition, holds
from ._webhook import WebhookRefused, call_back, check_callback

if TYPE_CHECKING:
    from ..engine._context import Context
    from ..tasks._registry import Registry
    from ..tasks._specs import TaskSpec

__all__ = ["CHAIN", "check_chain", "register_chain", "render"]

CHAIN = "chain"
# `type` is read as an older spelling of `task`.
STEP_FIELDS = frozenset({"id", "task", "type", "args", "needs", "when", "if_needs_skipped"})
_PLACEHOLDER = re.compile(r"\{\{\s*([\w.\-]+)\s*\}\}")
# A chain waiting on its steps is woken by the first one that ends; this re-check only
# bounds the wait if that wake-up were ever lost.
STEP_RECHECK_S = 60.0
SKIP_POLICIES = ("skip", "run")
CALLBACK_RETRY = RetryPolicy(retries=5, backoff=Backoff(base_s=1, factor=2, cap_s=30),
                             give_up_on=(WebhookRefused,))


def register_chain(registry: Registry) -> TaskSpec:
    def check(arguments: dict[str, Any]) -> None:
        check_chain(registry, arguments.get("steps"))
        check_callback("chain", arguments.get("callback"))

    @registry.task(name=CHAIN, retries=0, check=check)
    async def chain(ctx: Context, steps: list[dict[str, Any]], input: Any = None,
                    callback: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run the DAG; the result maps each step id to its output (null when skipped)."""
        flow = Flow(check_chain(registry, steps))
        try:
            await _run(ctx, flow, input)
        except FinalError as exc:
            if callback:
                await _report(ctx, callback, flow, str(exc))
            raise
        if callback:
            await _report(ctx, callback, flow, None)
        return flow.outputs

    return chain


@dataclass
class Flow:
    """Where a chain stands: what is pending, running, done, skipped, failed."""

    steps: dict[str, dict[str, Any]]
    outputs: dict[str, Any] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)
    running: dict[int, str] = field(default_factory=dict)  # child run id -> step id
    failure: str | None = None

    def __post_init__(self) -> None:
        self.pending = list(self.steps)

    def startable(self) -> tuple[list[dict[str, Any]], list[str]]:
        """The steps to start now, and the ones newly skipped (a skip can settle a
        dependent's fate, so this goes on until nothing changes). Nothing new starts
        once a step has failed."""
        start: list[dict[str, Any]] = []
        skipped: list[str] = []
        changed = self.failure is None
        while changed:
            changed = False
            for step_id in list(self.pending):
                step = self.steps[step_id]
                if not all(need in self.outputs for need in step["needs"]):
                    continue
                self.pending.remove(step_id)
                if self._skips(step):
                    self.outputs[step_id] = None
                    self.skipped.append(step_id)
                    skipped.append(step_id)
                    changed = True
                else:
                    start.append(step)
        return start, skipped

    def _skips(self, step: dict[str, Any]) -> bool:
        if step["if_needs_skipped"] == "skip" and any(need in self.skipped for need in step["needs"]):
            return True
        succeeded = {k: v for k, v in self.outputs.items() if k not in self.skipped}
        return step["when"] is not None and not holds(step["when"], succeeded)

    def ended(self, outcome: dict[str, Any]) -> str:
        """Take in a step's end (as `_ended` journaled it); its step id."""
        step_id = self.running.pop(outcome["run_id"])
        if outcome["state"] == RunState.SUCCEEDED.value:
            self.outputs[step_id] = outcome["output"]
        elif self.failure is None:
            error = outcome.get("error") or {}
            self.failure = (f"chain step {step_id!r} ({self.steps[step_id]['task']}) ended "
                            f"{outcome['state']}: {error.get('type')}: {error.get('message')}")
        return step_id


async def _run(ctx: Context, flow: Flow, chain_input: Any) -> None:
    while True:
        fresh = not ctx.replaying  # events only for what happens now, not on a replay
        start, skipped = flow.startable()
        for step_id in skipped if fresh else ():
            await ctx.emit("chain_step", {"step": step_id, "status": "skipped"})
        for step in start:
            fresh = not ctx.replaying
            child = await ctx.submit(step["task"], **render(step["args"], chain_input, flow.outputs))
            flow.running[child.id] = step["id"]
            if fresh:
                await ctx.emit("chain_step", {"step": step["id"], "status": "started", "run_id": child.id})
        if not flow.running:
            break
        fresh = not ctx.replaying
        for outcome in await ctx.step("chain:wait", _ended, ctx, sorted(flow.running)):
            step_id = flow.ended(outcome)
            if fresh:
                await ctx.emit("chain_step", {"step": step_id, "status": outcome["state"],
                                              "run_id": outcome["run_id"]})
    if flow.failure is not None:
        raise FinalError(flow.failure)


async def _ended(ctx: Context, run_ids: list[int]) -> list[dict[str, Any]]:
    """The steps among `run_ids` that have ended, with their outcomes; parks the chain
    (no slot held) while none has. Journaled, so a replay sees the same ends."""
    found = await through_blinks(ctx.runtime.store.run_get_many, run_ids)
    done = [run for run in found if run.done]
    if not done:
        raise Park(ctx.runtime.clock() + STEP_RECHECK_S, "chain steps", WaitReason.CHILDREN)
    return [_outcome(run) for run in sorted(done, key=lambda run: run.id)]


def _outcome(run: Run) -> dict[str, Any]:
    if run.state is RunState.SUCCEEDED:
        return {"run_id": run.id, "state": run.state.value, "output": run.value()}
    return {"run_id": run.id, "state": run.state.value, "error": run.error_info()}


async def _report(ctx: Context, callback: dict[str, Any], flow: Flow, error: str | None) -> None:
    body = {"run_id": ctx.run_id, "state": "failed" if error else "succeeded",
            "outputs": flow.outputs, "skipped": flow.skipped, "error": error}
    await ctx.step("callback", call_back, callback, body, retry=CALLBACK_RETRY)


def check_chain(registry: Registry, steps: Any) -> dict[str, dict[str, Any]]:
    """Validate the DAG; return its steps by id, in the order given."""
    if not isinstance(steps, list) or not steps:
        raise InvalidInput("a chain needs `steps`: a non-empty list of {id, task, args, needs}")
    by_id: dict[str, dict[str, Any]] = {}
    for index, step in enumerate(steps):
        step = _normalised(step, index)
        if step["id"] in by_id:
            raise InvalidInput(f"chain step id {step['id']!r} is used twice")
        try:
            registry.task_spec(step["task"]).bind((), {k: None for k in step.get("args", {})})
        except (UnknownTask, BadArguments) as exc:
            raise type(exc)(f"chain step {step['id']!r}: {exc}") from None
        by_id[step["id"]] = step
    for step in by_id.values():
        for need in step["needs"]:
            if need not in by_id:
                raise InvalidInput(f"chain step {step['id']!r} needs {need!r}, which is not a step")
    _refuse_cycles(by_id)
    return by_id


def _normalised(step: Any, index: int) -> dict[str, Any]:
    if not isinstance(step, dict) or not isinstance(step.get("id"), str) or not step["id"]:
        raise InvalidInput(f"chain step #{index} needs an `id` (a non-empty string)")
    where = f"chain step {step['id']!r}"
    unknown = sorted(set(step) - STEP_FIELDS)
    if unknown:  # a typo (`neds`) would otherwise be dropped without a word
        raise InvalidInput(f"{where} has unknown fields {unknown}; a step takes "
                           f"{', '.join(sorted(STEP_FIELDS - {'type'}))}")
    task = step.get("task") or step.get("type")
    if not isinstance(task, str):
        raise InvalidInput(f"{where} needs a `task` (or `type`): a task name")
    args = step.get("args", {})
    if not isinstance(args, dict):
        raise InvalidInput(f"{where}: `args` must be an object")
    when = step.get("when")
    read = check_condition(when, where) if when is not None else set()
    policy = step.get("if_needs_skipped", "skip")
    if policy not in SKIP_POLICIES:
        raise InvalidInput(f"{where}: `if_needs_skipped` is \"skip\" (the default) or \"run\"")
    needs = set(step.get("needs", [])) | _references(args) | read
    return {"id": step["id"], "task": task, "args": args, "needs": sorted(needs), "when": when,
            "if_needs_skipped": policy}


def _references(value: Any) -> set[str]:
    """Step ids named by `{{steps.<id>...}}` placeholders anywhere in `value`."""
    text = json.dumps(value)
    return {name.split(".")[1] for name in _PLACEHOLDER.findall(text)
            if name.startswith("steps.") and len(name.split(".")) >= 3}


def _refuse_cycles(by_id: dict[str, dict[str, Any]]) -> None:
    """Kahn's algorithm: what can never become ready is a cycle."""
    done: set[str] = set()
    while len(done) < len(by_id):
        ready = {s["id"] for s in by_id.values() if s["id"] not in done and set(s["needs"]) <= done}
        if not ready:
            cycle = sorted(set(by_id) - done)
            raise InvalidInput(f"chain steps {cycle} depend on each other in a cycle")
        done |= ready


def render(value: Any, chain_input: Any, outputs: dict[str, Any]) -> Any:
    """Fill the placeholders of `value` (strings, in lists and dicts, recursively)."""
    if isinstance(value, dict):
        return {k: render(v, chain_input, outputs) for k, v in value.items()}
    if isinstance(value, list):
        return [render(v, chain_input, outputs) for v in value]
    if not isinstance(value, str):
        return value
    whole = _PLACEHOLDER.fullmatch(value.strip())
    if whole:
        return _lookup(whole[1], chain_input, outputs)
    return _PLACEHOLDER.sub(lambda m: _as_text(_lookup(m[1], chain_input, outputs)), value)


def _lookup(name: str, chain_input: Any, outputs: dict[str, Any]) -> Any:
    parts = name.split(".")
    if parts[0] == "input":
        value, path = chain_input, parts[1:]
    elif parts[0] == "steps" and len(parts) >= 3 and parts[2] == "output":
        value, path = outputs[parts[1]], parts[3:]
    else:
        raise FinalError(f"unknown placeholder {{{{{name}}}}}: use {{{{input}}}} or "
                         f"{{{{steps.<id>.output}}}}")
    for key in path:
        try:
            value = value[key] if isinstance(value, dict) else value[int(key)]
        except (KeyError, IndexError, ValueError, TypeError):
            shown = _as_text(value)[:200]
            raise FinalError(f"placeholder {{{{{name}}}}}: {key!r} is not in {shown}") from None
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)
