"""The `chain` job: a DAG of steps, each a registered task or a job type, run as durable
child runs. Steps whose dependencies are done run together (fan-out); a step waits for
all it needs (fan-in). A step's arguments are templated: `{{input}}` is the chain's
input and `{{steps.<id>.output}}` (optionally `.field.field`) another step's output.
A string that is exactly one placeholder takes the value itself (a dict stays a dict);
otherwise the value is written into the text. Each step runs once across crashes (it
is a child run, the same one on every replay); a failed step fails the chain, named.

Every mistake in the DAG is refused at submission, before anything is stored: unknown
task, duplicate id, unknown dependency or reference, a cycle.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ..errors import BadArguments, ChildFailed, FinalError, InvalidInput, UnknownTask

if TYPE_CHECKING:
    from ..context import Context
    from ..registry import Registry
    from ..tasks import TaskSpec

__all__ = ["CHAIN", "check_chain", "register_chain", "render"]

CHAIN = "chain"
# `type` is read as an older spelling of `task`.
STEP_FIELDS = frozenset({"id", "task", "type", "args", "needs"})
_PLACEHOLDER = re.compile(r"\{\{\s*([\w.\-]+)\s*\}\}")


def register_chain(registry: Registry) -> TaskSpec:
    def check(arguments: dict[str, Any]) -> None:
        check_chain(registry, arguments.get("steps"))

    @registry.task(name=CHAIN, retries=0, check=check)
    async def chain(ctx: Context, steps: list[dict[str, Any]], input: Any = None) -> dict[str, Any]:
        """Run the DAG; the result maps each step id to its output."""
        order = check_chain(registry, steps)
        outputs: dict[str, Any] = {}
        for level in order:
            children = [await ctx.submit(step["task"], **render(step.get("args", {}), input, outputs))
                        for step in level]
            for step, result in zip(level, await ctx.gather(*children, return_exceptions=True)):
                if isinstance(result, ChildFailed):
                    raise FinalError(f"chain step {step['id']!r} ({step['task']}) ended {result.state}: "
                                     f"{result.error.get('type')}: {result.error.get('message')}")
                outputs[step["id"]] = result
        return outputs

    return chain


def check_chain(registry: Registry, steps: Any) -> list[list[dict[str, Any]]]:
    """Validate the DAG; return its steps in levels (each level needs only earlier ones)."""
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
    return _levels(by_id)


def _normalised(step: Any, index: int) -> dict[str, Any]:
    if not isinstance(step, dict) or not isinstance(step.get("id"), str) or not step["id"]:
        raise InvalidInput(f"chain step #{index} needs an `id` (a non-empty string)")
    unknown = sorted(set(step) - STEP_FIELDS)
    if unknown:  # a typo (`neds`) would otherwise be dropped without a word
        raise InvalidInput(f"chain step {step['id']!r} has unknown fields {unknown}; a step takes "
                           f"id, task, args and needs")
    task = step.get("task") or step.get("type")
    if not isinstance(task, str):
        raise InvalidInput(f"chain step {step['id']!r} needs a `task` (or `type`): a task name")
    args = step.get("args", {})
    if not isinstance(args, dict):
        raise InvalidInput(f"chain step {step['id']!r}: `args` must be an object")
    needs = set(step.get("needs", [])) | _references(args)
    return {"id": step["id"], "task": task, "args": args, "needs": sorted(needs)}


def _references(value: Any) -> set[str]:
    """Step ids named by `{{steps.<id>...}}` placeholders anywhere in `value`."""
    text = json.dumps(value)
    return {name.split(".")[1] for name in _PLACEHOLDER.findall(text)
            if name.startswith("steps.") and len(name.split(".")) >= 3}


def _levels(by_id: dict[str, dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Kahn's algorithm, a level at a time; what is left over is a cycle."""
    done: set[str] = set()
    levels = []
    while len(done) < len(by_id):
        ready = [s for s in by_id.values() if s["id"] not in done and set(s["needs"]) <= done]
        if not ready:
            cycle = sorted(set(by_id) - done)
            raise InvalidInput(f"chain steps {cycle} depend on each other in a cycle")
        levels.append(ready)
        done |= {s["id"] for s in ready}
    return levels


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
