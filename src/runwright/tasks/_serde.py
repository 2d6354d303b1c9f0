"""Encoding of arguments and results as JSON, with size limits and signature checks."""

from __future__ import annotations

import datetime as dt
import inspect
import json
import math
import traceback
from typing import Any, Callable

from ..core._inputs import MAX_EPOCH_S, MAX_SECONDS
from ..errors import BadArguments, InvalidInput, InvalidTime, PayloadTooLarge, SerializationError

__all__ = [
    "DEFAULT_MAX_PAYLOAD_BYTES", "MAX_DEPTH", "bind_arguments", "decode", "due_at", "encode",
    "encode_error", "finite", "task_signature",
]

DEFAULT_MAX_PAYLOAD_BYTES = 1 << 20  # 1 MiB: a job queue is not a blob store
# Nesting of arrays and objects in a payload. Far above what real arguments need, and
# below what every reader can take back: Pydantic serializes (the HTTP answers) about 250
# levels, SQLite's and Redis's JSON 1000, Python's recursion stops near 1000.
MAX_DEPTH = 128

_encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def encode(value: Any, what: str, max_bytes: int = DEFAULT_MAX_PAYLOAD_BYTES) -> str:
    """JSON text of `value`, or a clear error naming `what` was refused."""
    if value is None:  # most tasks return nothing: no encoder call per run
        return "null"
    try:
        text = _encoder.encode(value)
    except RecursionError:
        raise _too_deep(what) from None
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"{what} does not serialize to JSON: {exc}") from exc
    size = len(text.encode()) if len(text) * 4 > max_bytes else len(text)
    if size > max_bytes:
        raise PayloadTooLarge(f"{what} is {size} bytes encoded, over the limit of {max_bytes}")
    # Fewer brackets than the limit cannot nest deeper than it (counting is C-fast): most
    # payloads are never walked.
    if text.count("[") + text.count("{") > MAX_DEPTH:
        _check_depth(value, what)
    return text


def decode(text: str, what: str) -> Any:
    """The value of JSON text from outside (a command line, a file); a clear error if it is
    not JSON or nests too deep to be read back."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise _too_deep(what) from None
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not JSON: {exc}") from None
    if text.count("[") + text.count("{") > MAX_DEPTH:
        _check_depth(value, what)
    return value


def _check_depth(value: Any, what: str) -> None:
    """Walk the containers without recursion (the value may be deeper than the stack)."""
    pending: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list, tuple)) else []
    while pending:
        item, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise _too_deep(what)
        children = item.values() if isinstance(item, dict) else item
        pending.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))


def _too_deep(what: str) -> SerializationError:
    return SerializationError(f"{what} is nested deeper than the limit of {MAX_DEPTH} levels")


def task_signature(task_name: str, fn: Callable[..., Any], takes_context: bool) -> inspect.Signature:
    """The signature arguments are bound to (without the Context parameter). Computed once
    at registration: inspect.signature costs more than the rest of a submission."""
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())[1 if takes_context else 0:]
    if any(p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL) for p in params):
        raise BadArguments(f"task {task_name!r}: positional-only or *args parameters cannot "
                           f"be stored by name; use keyword parameters")
    return signature.replace(parameters=params)


def bind_arguments(task_name: str, signature: inspect.Signature,
                   args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Check the arguments against the task's signature; return them all by keyword."""
    if not args and _fits_by_name(signature, kwargs):
        # What bind would return (in the signature's order), at a fraction of its cost.
        return {name: kwargs[name] for name in signature.parameters if name in kwargs}
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise BadArguments(f"task {task_name!r}: {exc}; signature is {signature}",
                           fields=_unbound(signature, kwargs)) from None
    out = bound.arguments
    for p in signature.parameters.values():
        if p.kind is p.VAR_KEYWORD and p.name in out:
            out.update(out.pop(p.name))
    return dict(out)


def _unbound(signature: inspect.Signature, kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """The keyword arguments that do not bind, and the required ones missing (fields)."""
    params = signature.parameters
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    unexpected = [] if takes_any else [(f"args.{name}", "not an argument of the task")
                                       for name in kwargs if name not in params]
    missing = [(f"args.{p.name}", "a required argument, missing") for p in params.values()
               if p.default is p.empty and p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD)
               and p.name not in kwargs]
    return unexpected + missing


def _fits_by_name(signature: inspect.Signature, kwargs: dict[str, Any]) -> bool:
    """Whether keyword arguments alone bind as they are: every name a parameter's (none
    taken by **kwargs), every parameter without a default given. Task signatures have no
    positional-only parameters (see task_signature), so nothing else can refuse them."""
    params = signature.parameters
    if len(kwargs) > len(params) or not all(name in params for name in kwargs):
        return False
    for p in params.values():
        if p.kind is p.VAR_KEYWORD or (p.default is p.empty and p.name not in kwargs):
            return False
    return True


def encode_error(error: BaseException, limit_chars: int = 8000) -> str:
    """A JSON object describing an error: type, message, traceback (trimmed)."""
    trace = "".join(traceback.format_exception(error))
    return _encoder.encode({
        "type": type(error).__name__,
        "message": str(error)[:limit_chars],
        "traceback": trace[-limit_chars:],
    })


def finite(value: float, what: str) -> float:
    """Reject NaN and infinities where a time or duration is expected."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise InvalidTime(f"{what} must be a finite number of seconds, got {value!r}")
    return float(value)


def due_at(now: float, delay_s: float | None, run_at: float | dt.datetime | None) -> float:
    """When a run (or a timer) is due: now, now + delay_s, or run_at (epoch or aware datetime)."""
    if delay_s is not None and run_at is not None:
        raise InvalidTime("give delay_s or run_at, not both")
    if delay_s is not None:
        if not 0 <= finite(delay_s, "delay_s") <= MAX_SECONDS:
            raise InvalidTime(f"delay_s must be >= 0 and <= {MAX_SECONDS:g} seconds, got {delay_s}")
        return now + delay_s
    if run_at is None:
        return now
    if isinstance(run_at, dt.datetime):
        if run_at.tzinfo is None:
            raise InvalidTime(f"run_at {run_at} has no time zone; give an aware datetime")
        return run_at.timestamp()
    # An instant before 1970 or past the year 5000 is no time a run is meant for (a
    # negative epoch is "at once" in disguise; a huge one overflows every date type).
    if not 0 <= finite(run_at, "run_at") <= MAX_EPOCH_S:
        raise InvalidTime(f"run_at must be epoch seconds in 0..{MAX_EPOCH_S:g}, got {run_at}")
    return float(run_at)
