"""Tools an agent may call: a JSON schema built from type hints and the docstring, argument
validation (the check a task's arguments get at submission, `core._arguments`: a bad call
becomes an error result the model sees, not a crash), and each tool's delivery guarantee.

    at_least_once  (default) a call interrupted by a crash runs again
    at_most_once   a fenced "started" mark is journaled before the call: after a crash a
                   started call with no recorded result never runs again; the model gets
                   a ToolOutcomeUnknown result instead
    idempotent     at-least-once, and the tool receives a stable key `run_id:position`
                   (its `idempotency_key` parameter) so that the far side can deduplicate

A tool may need a person's approval before each call (`approval=True`), or before the
calls its arguments make risky (`approval=` a predicate over the validated arguments).

A tool whose schema is given rather than built from hints (an MCP server's) carries
SchemaArguments: the model sees that JSON schema, and its calls are checked against it.
A Toolset hands out such tools at run time (see agents/_loop.py).
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass
from typing import Any, Callable, Literal, Protocol, cast, runtime_checkable

from ..core._arguments import TypedArguments
from ..errors import BadArguments, ConfigError
from ..tasks._blocking import in_thread

__all__ = ["DELIVERIES", "IDEMPOTENCY_KEY", "SchemaArguments", "ToolSpec", "Toolset",
           "outcome_unknown_result", "tool_spec"]

Delivery = Literal["at_least_once", "at_most_once", "idempotent"]
DELIVERIES = ("at_least_once", "at_most_once", "idempotent")
IDEMPOTENCY_KEY = "idempotency_key"  # the parameter through which an idempotent tool gets its key
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$")


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A registered tool. Calling it calls the function directly."""

    name: str
    fn: Callable[..., Any]
    description: str
    delivery: Delivery
    # The schema the model sees, and its calls' check: the parameters' hints, or a given schema.
    arguments: TypedArguments | SchemaArguments
    approval: bool | Callable[[dict[str, Any]], bool] = False

    def needs_approval(self, arguments: dict[str, Any]) -> bool:
        """Whether this call waits for a person's yes (the predicate sees validated arguments)."""
        return bool(self.approval(arguments)) if callable(self.approval) else self.approval

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(*args, **kwargs)

    def schema(self) -> dict[str, Any]:
        """The tool as the OpenAI chat-completions API describes tools."""
        parameters = self.arguments.json_schema()
        parameters.pop("title", None)
        return {"type": "function",
                "function": {"name": self.name, "description": self.description,
                             "parameters": parameters}}

    def validate(self, raw: str | dict[str, Any]) -> dict[str, Any]:
        """The model's arguments (JSON text, or its object), checked and coerced to the
        tool's type hints, its defaults filled in; raises BadArguments (a ValueError) with
        what the model got wrong, naming each argument (see TypedArguments)."""
        if isinstance(raw, str):
            try:
                raw = json.loads(raw or "{}")
            except (ValueError, RecursionError) as exc:
                raise BadArguments(f"tool {self.name!r}: the arguments are not JSON: {exc}") from None
        if not isinstance(raw, dict):
            raise BadArguments(f"tool {self.name!r}: the arguments must be a JSON object, got "
                               f"{type(raw).__name__}")
        return self.arguments.validate(raw)

    async def invoke(self, arguments: dict[str, Any], idempotency_key: str | None) -> Any:
        """Coroutine functions run on the loop; plain ones in a thread, so that a blocking
        tool cannot stall the worker's lease renewals and its other runs."""
        if self.delivery == "idempotent":
            arguments = {**arguments, IDEMPOTENCY_KEY: idempotency_key}
        if inspect.iscoroutinefunction(self.fn):
            return await self.fn(**arguments)
        value = await in_thread(self.fn, **arguments)
        return await value if inspect.isawaitable(value) else value


class SchemaArguments:
    """A tool's arguments as a given JSON schema describes them (an MCP tool's inputSchema):
    shown to the model as given, and checked with jsonschema (imported at the first check).
    Nothing is coerced or filled in: the tool's own side does that."""

    def __init__(self, owner: str, schema: dict[str, Any]) -> None:
        self.owner = owner
        self.schema = schema
        self._validator: Any = None

    def json_schema(self) -> dict[str, Any]:
        copy: dict[str, Any] = json.loads(json.dumps(self.schema))  # the caller may change it
        return copy

    def validate(self, arguments: dict[str, Any]) -> dict[str, Any]:
        if self._validator is None:
            from jsonschema.validators import validator_for

            cls = validator_for(self.schema)
            try:
                cls.check_schema(self.schema)
            except Exception as exc:  # a server's bad schema: the model cannot call it
                raise BadArguments(f"{self.owner}: its input schema is not valid: "
                                   f"{str(exc).splitlines()[0]}") from None
            self._validator = cls(self.schema)
        errors = sorted(self._validator.iter_errors(arguments), key=lambda e: list(e.absolute_path))
        if errors:
            shown = "; ".join(_schema_error(error) for error in errors[:5])
            more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
            raise BadArguments(f"{self.owner}: {shown}{more}")
        return dict(arguments)


def _schema_error(error: Any) -> str:
    where = ".".join(str(part) for part in error.absolute_path)
    return f"argument {where!r}: {error.message}" if where else error.message


@runtime_checkable
class Toolset(Protocol):
    """Tools found at run time rather than declared (an MCP server's), given to an agent
    among its tools. Each model call offers what `definitions` returns at that moment; the
    definitions are journaled with the call, so the tools a replayed turn calls are the
    ones its model saw, rebuilt by `tool`."""

    @property
    def name(self) -> str:
        """Unique among an agent's toolsets: a journaled definition names its toolset."""
        ...

    async def definitions(self) -> list[dict[str, Any]]:
        """The tools' definitions (JSON: journaled), each with a "name"."""
        ...

    def tool(self, definition: dict[str, Any]) -> ToolSpec:
        """The tool a definition describes."""
        ...

    async def aclose(self) -> None:
        """Release what the toolset holds (its connections), when the app closes."""
        ...


def outcome_unknown_result(name: str, why: str = "the worker stopped mid-call") -> str:
    """What the model gets for an at-most-once call whose outcome is unknown."""
    return json.dumps({"error": "ToolOutcomeUnknown",
                       "message": f"the call to {name!r} was started but its outcome is unknown "
                                  f"({why}); it was not repeated because "
                                  f"the tool is at-most-once. Check before calling it again."})


def tool_spec(fn: Callable[..., Any], name: str | None, delivery: str,
              approval: bool | Callable[[dict[str, Any]], bool] = False) -> ToolSpec:
    """Build a ToolSpec from a function's signature, type hints and docstring."""
    if delivery not in DELIVERIES:
        raise ConfigError(f"tool delivery must be one of {', '.join(DELIVERIES)}, got {delivery!r}")
    name = name or fn.__name__
    summary, arg_docs = _parse_docstring(inspect.getdoc(fn) or "")
    signature = inspect.signature(fn)
    if delivery == "idempotent" and IDEMPOTENCY_KEY not in signature.parameters:
        raise ConfigError(f"tool {name!r} is idempotent: give it an `{IDEMPOTENCY_KEY}: str` "
                          f"parameter, through which it receives its stable key")
    parameters = [param for param in signature.parameters.values() if param.name != IDEMPOTENCY_KEY]
    for param in parameters:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise ConfigError(f"tool {name!r}: parameter {param.name!r} must be a plain "
                              f"keyword parameter (models call tools by name)")
    # The same check as a task's arguments get, of the whole call: every parameter is
    # required unless it has a default, and no other name is taken.
    arguments = TypedArguments(f"tool {name!r}", fn, parameters, complete=True, descriptions=arg_docs)
    arguments.prepare()  # pydantic is imported when a tool is defined: a worker without tools skips it
    # `delivery` was checked against DELIVERIES above.
    if not isinstance(approval, bool) and not callable(approval):
        raise ConfigError(f"tool {name!r}: approval is True, False or a predicate over the "
                          f"arguments, got {approval!r}")
    return ToolSpec(name, fn, summary or name, cast(Delivery, delivery), arguments, approval)


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """The summary (text before an Args/Parameters section) and per-argument descriptions
    (Google style `name: text` or `name (type): text` lines under `Args:`)."""
    summary_lines, args, current, in_args = [], {}, None, False
    for line in doc.splitlines():
        stripped = line.strip()
        if stripped.lower() in ("args:", "arguments:", "parameters:", "params:"):
            in_args = True
            continue
        if in_args and stripped.endswith(":") and stripped[:-1].lower() in ("returns", "raises", "yields"):
            in_args = False
            continue
        if in_args:
            match = _ARG_LINE.match(line)
            if match:
                current = match[1].lstrip("*")
                args[current] = match[2].strip()
            elif current and stripped:
                args[current] += " " + stripped
        elif not args:
            summary_lines.append(stripped)
    return " ".join(s for s in summary_lines if s).strip(), args
