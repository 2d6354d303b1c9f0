"""The types of the command line's values: every integer, number and text an option or
an argument takes is read by one of these, which ask `runwright.core._inputs` (the checks the
library and HTTP make) and refuse, in one line with exit 2, what the option cannot mean:
NaN and infinities (a wait that never ends), negatives, a count past what a store
holds, digits of another script ("٣", "²": Python's int() reads the first), an empty
or over-long text, a NUL, bytes that are not UTF-8.
"""

from __future__ import annotations

from typing import Any

import typer

from ..core import _inputs as inputs
from ..core._inputs import MAX_ID, MAX_LIMIT, MAX_SECONDS, MAX_SEQ, MAX_TEXT_CHARS
from ..errors import InvalidInput

try:  # the click that typer parses with: a copy of its own since typer 0.2x
    from typer._click.types import ParamType
except ImportError:  # pragma: no cover (an older typer: click itself)
    from click.types import ParamType  # type: ignore[no-redef,assignment,unused-ignore]

__all__ = ["AFTER", "DOCUMENT", "ID", "LIMIT", "SECONDS", "SECONDS_OR_ZERO", "STORE_URL", "TEXT", "Integer",
           "Number", "StoreUrl", "Text", "UsageError", "refused"]

# Click's UsageError, which typer names only through BadParameter, its subclass.
UsageError: type[Exception] = typer.BadParameter.__mro__[1]


class Integer(ParamType):
    """An integer in low..high, written in ASCII digits."""

    name = "integer"

    def __init__(self, low: int, high: int) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        what = _what(param, ctx)
        try:
            if isinstance(value, int):  # a default
                return inputs.integer(value, what, self.low, self.high)
            return inputs.integer_text(str(value).strip(), what, self.low, self.high)
        except InvalidInput as exc:
            raise refused(exc, ctx) from None


class Number(ParamType):
    """A finite number in low..high (above `low` when `low_open`), written in ASCII."""

    name = "number"

    def __init__(self, low: float, high: float, *, low_open: bool = False) -> None:
        self.low, self.high, self.low_open = low, high, low_open

    def convert(self, value: Any, param: Any, ctx: Any) -> float:
        what = _what(param, ctx)
        try:
            if isinstance(value, (int, float)):  # a default
                return inputs.number(value, what, self.low, self.high, low_open=self.low_open)
            return inputs.number_text(str(value).strip(), what, self.low, self.high, low_open=self.low_open)
        except InvalidInput as exc:
            raise refused(exc, ctx) from None


class Text(ParamType):
    """Text of at most `max_chars` characters, not empty, with no NUL and no lone
    surrogate (a command line's bytes that are not UTF-8 arrive as those): what a name,
    a URL, a time or a JSON document given on the command line may be. What the text
    must say is its command's to check (a thread's name: the library's)."""

    name = "text"

    def __init__(self, max_chars: int = MAX_TEXT_CHARS) -> None:
        self.max_chars = max_chars

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        try:
            return inputs.text(value, _what(param, ctx), self.max_chars)
        except InvalidInput as exc:
            raise refused(exc, ctx) from None


class StoreUrl(Text):
    """A store URL a command can share with other processes, read as any text is, and not
    `memory://`, whose database dies with the command (a run submitted there would be lost
    as it returns). The rest of the URL is checked where the store is made, as the
    library's is."""

    name = "url"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        url = super().convert(value, param, ctx)
        if url.split(":", 1)[0].strip().lower() == "memory":
            raise UsageError(f"{_what(param, ctx)}: memory:// lives inside one Python process (tests,"
                             f" notebooks); a command needs sqlite:///, postgresql:// or redis://", ctx)
        return url


def refused(exc: InvalidInput, ctx: Any) -> Exception:
    """A bad value, as the line every bad input gets (`error: InvalidInput: ...`, exit 2)."""
    return UsageError(f"{type(exc).__name__}: {exc}", ctx)


def _what(param: Any, ctx: Any = None) -> str:
    """How the command line names the parameter: its longest flag, or its metavar; the
    environment variable, when the value came from there (`RUNWRIGHT_URL`, not `--url`,
    for a user who typed no `--url`)."""
    name = getattr(param, "name", None)
    if ctx is not None and name and getattr(param, "envvar", None):
        source = ctx.get_parameter_source(name)
        if source is not None and source.name == "ENVIRONMENT":
            envvar = param.envvar if isinstance(param.envvar, str) else param.envvar[0]
            return str(envvar)
    if getattr(param, "param_type_name", None) == "option" and param.opts:
        return str(max(param.opts, key=len))
    return str(getattr(param, "human_readable_name", "the value"))


# The kinds most options take.
ID = Integer(1, MAX_ID)  # a run's id
AFTER = Integer(0, MAX_SEQ)  # a position in a log: an event's seq, a thread's tseq
LIMIT = Integer(1, MAX_LIMIT)  # how many to list or keep
STORE_URL = StoreUrl()
SECONDS = Number(0, MAX_SECONDS, low_open=True)  # a duration that must pass: > 0
SECONDS_OR_ZERO = Number(0, MAX_SECONDS)  # a duration that may be none: >= 0
TEXT = Text()  # a name, a URL, a time, an app's module path
DOCUMENT = Text(64 << 20)  # JSON given on the command line (the payload limit applies after)


def json_argument(value: str | None, what: str) -> object:
    """JSON given on the command line (`what` names it in the error), None when not given;
    InvalidInput in one line when it is not JSON, saying how to quote text."""
    if value is None:
        return None
    import json

    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{what} is not JSON ({exc.msg} at column {exc.colno}): {value!r}; quote text as "
                           f"JSON, e.g. '\"yes\"'") from None
