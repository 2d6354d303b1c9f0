"""`runwright submit`: a submission from options or a --json document, and waiting for it.

A --json document takes exactly the keys below. Anything else is refused by name: a typo
(`delya_s`) silently dropped would queue a run due now, which is worse than an error.
"""

from __future__ import annotations

import difflib
from typing import Any

from ..app import App
from ..client._handles import RunHandle
from ..client._why import live_workers_serving
from ..errors import InvalidInput
from ..tasks._budget import Budget
from ..tasks._serde import decode
from ..tasks._submission import parse_run_at

__all__ = ["DOCUMENT_KEYS", "document_submission", "gather_submission", "json_object", "parse_json",
           "read_document", "warn_if_unserved"]

# The keys of a --json document: the task, its arguments, and the submission's options.
DOCUMENT_KEYS = ("task", "args", "key", "priority", "delay_s", "run_at", "queue", "thread",
                 "on_busy", "on_conflict", "budget", "traceparent")


def gather_submission(task: str | None, args: str | None, spec: str | None,
                      given: dict[str, Any]) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """(task, its arguments, the submission's options) from `submit`'s TASK, --args or
    --json, and the options given on the command line (None: not given), which win: --args
    beside --json is the arguments, in place of the document's (it used to be dropped)."""
    if spec is not None:
        named, arguments, options = document_submission(read_document(spec))
        task = task or named
    else:
        arguments, options = {}, {}
    if args is not None:
        arguments = json_object(parse_json(args, "--args"), "--args")
    options.update({name: value for name, value in given.items() if value is not None})
    if options.get("run_at") is not None:
        options["run_at"] = parse_run_at(options["run_at"])
    if not task:
        raise InvalidInput("name the task (runwright submit MODULE:APP TASK) or give "
                           '--json \'{"task": "webhook", "args": {...}}\'')
    return task, arguments, options


def read_document(spec: str) -> dict[str, Any]:
    """The --json document: inline JSON, or @path to read it from a file."""
    if spec.startswith("@"):
        try:
            with open(spec[1:]) as source:
                spec = source.read()
        except OSError as exc:
            raise InvalidInput(f"--json {spec}: {exc}") from None
    return json_object(parse_json(spec, "--json"), "--json")


def document_submission(document: dict[str, Any]) -> tuple[str | None, dict[str, Any], dict[str, Any]]:
    """(task, the task's arguments, the submission's options) from a --json document."""
    for name in document:
        if name not in DOCUMENT_KEYS:
            raise InvalidInput(f"--json: unknown key {name!r}{_did_you_mean(name)}; "
                               f"the keys are {', '.join(DOCUMENT_KEYS)}")
    task = document.get("task")
    if task is not None and not isinstance(task, str):
        raise InvalidInput(f"--json: task must be a string, got {task!r}")
    arguments = json_object(document.get("args", {}), "args in --json")
    options = {name: document[name] for name in DOCUMENT_KEYS[2:] if name in document}
    if "budget" in options:
        options["budget"] = _budget(options["budget"])
    return task, arguments, options


def parse_json(text: str, what: str) -> Any:
    return decode(text, what)  # not JSON, or nested too deep: a clear InvalidInput


def json_object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{what} must be a JSON object")
    return value


async def warn_if_unserved(app: App, handle: RunHandle, warn: Any) -> None:
    """Say so, once, when no live worker registers the run's task on its queue: else a
    `--wait` would wait in silence for a worker that may never come."""
    run = handle.run
    if not live_workers_serving(await app.list_workers(), run.task, run.queue, app.now()):
        warn(f"no live worker registers task {run.task!r} on queue {run.queue!r}: run {run.id} "
             f"waits until one starts (runwright worker MODULE:APP --queues {run.queue})")


def _did_you_mean(name: str) -> str:
    if name == "type":
        return " (the job type is given as 'task')"
    close = difflib.get_close_matches(name, DOCUMENT_KEYS, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _budget(value: Any) -> Budget:
    if not isinstance(value, dict):
        raise InvalidInput(f"--json: budget must be an object such as {{\"max_cost_usd\": 0.5}}, "
                           f"got {value!r}")
    try:
        return Budget(**value)
    except TypeError as exc:
        raise InvalidInput(f"--json: budget: {exc}") from None
