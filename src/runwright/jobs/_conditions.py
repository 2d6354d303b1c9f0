"""A chain step's `when`: a small JSON condition over earlier steps' outputs.

No expression language and no eval of what a submitter wrote: a condition is data,
checked whole at submission and evaluated by the few rules below.

    {"step": "<id>", "path": "a.b.0", "equals": <JSON value>}
    {"step": "<id>", "not_equals": <value>}      {"step": "<id>", "in": [<value>, ...]}
    {"step": "<id>", "exists": true}             {"step": "<id>", "truthy": true}
    {"all": [<condition>, ...]}  {"any": [<condition>, ...]}  {"not": <condition>}

`path` (optional) walks the step's output: dict keys, and list indexes as numbers. An
output or path that is missing (the step was skipped, the key is absent) fails every test
but `exists: false` and `truthy: false`, and is never an error: a branch is a choice.
"""

from __future__ import annotations

from typing import Any, Mapping

from ..errors import InvalidInput

__all__ = ["check_condition", "holds"]

TESTS = ("equals", "not_equals", "in", "exists", "truthy")
_MISSING = object()


def check_condition(condition: Any, where: str) -> set[str]:
    """Refuse a malformed condition; return the step ids it reads (the step needs them)."""
    if not isinstance(condition, dict):
        raise InvalidInput(f"{where}: `when` must be an object, e.g. "
                           f'{{"step": "check", "path": "ok", "equals": true}}')
    for combinator in ("all", "any"):
        if combinator in condition:
            parts = condition[combinator]
            if len(condition) != 1 or not isinstance(parts, list) or not parts:
                raise InvalidInput(f"{where}: `{combinator}` takes a non-empty list of conditions, alone")
            return set().union(*(check_condition(part, where) for part in parts))
    if "not" in condition:
        if len(condition) != 1:
            raise InvalidInput(f"{where}: `not` takes one condition, alone")
        return check_condition(condition["not"], where)
    return _check_test(condition, where)


def _check_test(condition: dict[str, Any], where: str) -> set[str]:
    step = condition.get("step")
    if not isinstance(step, str) or not step:
        raise InvalidInput(f"{where}: a condition names a `step` (an earlier step's id)")
    tests = [name for name in TESTS if name in condition]
    unknown = sorted(set(condition) - {"step", "path", *TESTS})
    if len(tests) != 1 or unknown:
        raise InvalidInput(f"{where}: a condition has `step`, optionally `path`, and exactly one "
                           f"of {', '.join(TESTS)}" + (f" (unknown: {unknown})" if unknown else ""))
    if not isinstance(condition.get("path", ""), str):
        raise InvalidInput(f"{where}: `path` is a dotted string, e.g. \"result.items.0\"")
    if "in" in condition and not isinstance(condition["in"], list):
        raise InvalidInput(f"{where}: `in` takes a list of values")
    if any(name in condition and not isinstance(condition[name], bool) for name in ("exists", "truthy")):
        raise InvalidInput(f"{where}: `exists` and `truthy` take true or false")
    return {step}


def holds(condition: dict[str, Any], outputs: Mapping[str, Any]) -> bool:
    """Evaluate a checked condition against the outputs of the steps that succeeded."""
    if "all" in condition:
        return all(holds(part, outputs) for part in condition["all"])
    if "any" in condition:
        return any(holds(part, outputs) for part in condition["any"])
    if "not" in condition:
        return not holds(condition["not"], outputs)
    value = _at(outputs.get(condition["step"], _MISSING), condition.get("path", ""))
    if "exists" in condition:
        return (value is not _MISSING) is condition["exists"]
    if "truthy" in condition:
        return (value is not _MISSING and bool(value)) is condition["truthy"]
    if value is _MISSING:
        return False
    if "equals" in condition:
        return bool(value == condition["equals"])
    if "not_equals" in condition:
        return bool(value != condition["not_equals"])
    return value in condition["in"]


def _at(value: Any, path: str) -> Any:
    for key in filter(None, path.split(".")):
        if isinstance(value, dict) and key in value:
            value = value[key]
        elif isinstance(value, list) and key.lstrip("-").isdigit() and -len(value) <= int(key) < len(value):
            value = value[int(key)]
        else:
            return _MISSING
    return value
