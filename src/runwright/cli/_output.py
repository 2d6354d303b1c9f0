"""Where the CLI's output goes: Rich for people, JSON for scripts, nothing cut in a pipe.

Rich lays a table out to the terminal's width and, without a terminal, to 80 columns,
wrapping and cutting cells: a script reading `runwright runs | grep` would get half an
error message. So stdout is as wide as a row needs when it is not a terminal.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from typing import TYPE_CHECKING, Any, Callable, cast

from ..core._payloads import load

if TYPE_CHECKING:
    from rich.console import Console, RenderableType

__all__ = ["as_json", "escape", "lazy_console", "out", "print_json", "show"]


class _LazyConsole:
    """A Rich console made at its first use. Importing Rich costs every CLI process a
    tenth of its start, and `runwright worker` never prints through it."""

    def __init__(self, make: Callable[[], Console]) -> None:
        self._make = make
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        if self._console is None:
            self._console = self._make()
        return getattr(self._console, name)


def lazy_console(make: Callable[[], Console]) -> Console:
    """`make()`'s console, made when first used (typed as the console itself)."""
    return cast("Console", _LazyConsole(make))


def _stdout() -> Console:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=1_000_000, soft_wrap=True)  # no row is cut or wrapped in a pipe
    return console


out = lazy_console(_stdout)


def escape(text: str) -> str:
    """Rich's markup escape, imported when a message is printed."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)

# Fields that the store keeps as JSON text: a script gets them as JSON values.
JSON_TEXT_FIELDS = ("args", "result", "error", "budget")


def show(renderable: RenderableType) -> None:
    out.print(renderable, highlight=False)


def as_json(value: Any) -> Any:
    """A record (a dataclass: run, worker, schedule, attempt, event), or lists and dicts of
    them, as plain JSON values, with the JSON text fields decoded."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = {field.name: as_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
        for name in JSON_TEXT_FIELDS:
            if isinstance(fields.get(name), str):
                fields[name] = _decoded(fields[name])
        return fields
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {str(key): as_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [as_json(item) for item in value]
    return value


def _decoded(text: str) -> Any:
    try:
        return load(text)  # an envelope (payload codecs) opened
    except ValueError:  # a plain message (an attempt's error), not JSON text
        return text


def print_json(value: Any) -> None:
    """One JSON document on stdout, for scripts (`| jq`)."""
    print(json.dumps(as_json(value), indent=2, ensure_ascii=False))
