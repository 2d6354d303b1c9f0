"""What each input may be: the one place that knows a thread name, a key, a tenant, a
queue, a cursor's parts, a sequence number, a count and a duration.

The library checks its arguments here, the CLI its options (`cli.params`) and HTTP its
path, query, header and body fields (`server.deps`, `server.models`): a bad input is the
same InvalidInput, with the same words, whichever face it came through, and it is
refused before any store sees it. A store would answer it its own way: PostgreSQL
refuses a NUL in text with a driver error, a lone surrogate cannot be encoded as UTF-8
by any of them, a number past a column's range overflows in the driver, and an
infinite or NaN duration never elapses.
"""

from __future__ import annotations

import math
import re
from typing import Any

from ..errors import InvalidInput

__all__ = ["MAX_BY_CHARS", "MAX_EPOCH_S", "MAX_HOST_CHARS", "MAX_ID", "MAX_KEY_CHARS", "MAX_LIMIT",
           "MAX_NAME_CHARS", "MAX_QUEUE_CHARS", "MAX_SECONDS", "MAX_SEQ", "MAX_TENANT_CHARS",
           "MAX_TEXT_CHARS", "MAX_THREAD_CHARS", "answerer", "integer", "integer_text", "key", "name",
           "number", "number_text", "queue", "seconds", "sequence", "sequence_text", "tenant", "text",
           "thread_name"]

MAX_KEY_CHARS = 512
MAX_THREAD_CHARS = 256
MAX_QUEUE_CHARS = 200
MAX_TENANT_CHARS = 200
MAX_NAME_CHARS = 200  # a task's or a schedule's name, a filter on one
MAX_BY_CHARS = 200  # who answered a question
MAX_HOST_CHARS = 253  # a DNS name's limit
MAX_TEXT_CHARS = 4096  # free text of a command line: a URL, an app's module path, a cron line
MAX_ID = 2**63 - 1  # run ids are 64-bit in every store
MAX_SEQ = 2**31 - 1  # an event's seq is an INTEGER in the SQL stores (a tseq is read in the same range)
MAX_LIMIT = 2**31 - 1  # a page's size: an INTEGER in the stores
# About 31 years: the longest duration a setting may name. Past it a deadline or a
# sleep overflows the clocks that hold it (a datetime, asyncio's timer heap).
MAX_SECONDS = 1e9
MAX_EPOCH_S = 1e11  # an instant as epoch seconds: the year 5138 at most

# Unicode's control characters (category Cc): C0, DEL and C1. NUL is one of them.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_ASCII_INTEGER = re.compile(r"[+-]?[0-9]+")
_ASCII_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def text(value: Any, what: str, max_chars: int) -> str:
    """A non-empty string of at most `max_chars` characters that every store can hold and
    every face can print: no NUL (PostgreSQL's text cannot hold one) and no lone
    surrogate (it has no UTF-8: a JSON body's "\\ud800", a command line's undecodable
    byte)."""
    if not isinstance(value, str) or not value or len(value) > max_chars:
        raise InvalidInput(f"{what} must be a non-empty string of at most {max_chars} characters, "
                           f"got {_shown(value)}")
    if "\x00" in value or not (value.isascii() or _encodable(value)):
        raise InvalidInput(f"{what} must be text without NUL or lone surrogates, got {_shown(value)}")
    return value


def name(value: Any, what: str, max_chars: int = MAX_NAME_CHARS) -> str:
    """A name (of a thread, a tenant, a queue, a task, a key): `text` without control
    characters, which no name needs and which would break the one line that shows it."""
    text(value, what, max_chars)
    if _CONTROL.search(value):
        raise InvalidInput(f"{what} must be a name without control characters, got {_shown(value)}")
    return str(value)


def thread_name(value: Any, what: str = "thread") -> str:
    return name(value, what, MAX_THREAD_CHARS)


def key(value: Any, what: str = "key") -> str:
    return name(value, what, MAX_KEY_CHARS)


def tenant(value: Any, what: str = "tenant") -> str:
    return name(value, what, MAX_TENANT_CHARS)


def queue(value: Any, what: str = "queue") -> str:
    return name(value, what, MAX_QUEUE_CHARS)


def answerer(value: Any, what: str = "by") -> str:
    """Who answers a question: a name, and not blank (it is shown as who answered)."""
    name(value, what, MAX_BY_CHARS)
    if not value.strip():
        raise InvalidInput(f"{what} names who answers: it must not be blank, got {value!r}")
    return str(value)


def integer(value: Any, what: str, low: int, high: int) -> int:
    """An int (never a bool, a float or text) in low..high."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidInput(f"{what} must be an integer in {low}..{high}, got {_shown(value)}")
    return value


def integer_text(value: str, what: str, low: int, high: int) -> int:
    """An integer written in ASCII digits (Python's int() also reads "٣" and "1_000"),
    then `integer`."""
    if not _ASCII_INTEGER.fullmatch(value):
        raise InvalidInput(f"{what} must be an integer in {low}..{high} (ASCII digits), "
                           f"got {_shown(value)}")
    return integer(int(value), what, low, high)


def sequence(value: Any, what: str = "after") -> int:
    """A position in a log (an event's seq, a thread's tseq): 0 (the start) or more."""
    return integer(value, what, 0, MAX_SEQ)


def sequence_text(value: str, what: str = "Last-Event-ID") -> int:
    """A sequence number as a client sends it back (an SSE Last-Event-ID)."""
    return integer_text(value, what, 0, MAX_SEQ)


def number(value: Any, what: str, low: float, high: float, *, low_open: bool = False) -> float:
    """A finite number in low..high (above `low` when `low_open`); never NaN or infinite,
    which no comparison refuses by itself (`nan < 1` is False, and so is `nan >= 1`)."""
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
          and (value > low if low_open else value >= low) and value <= high)
    if not ok:
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        raise InvalidInput(f"{what} must be a finite number {bound} and <= {high:g}, got {_shown(value)}")
    return float(value)


def number_text(value: str, what: str, low: float, high: float, *, low_open: bool = False) -> float:
    """A number written in ASCII (no "inf", "nan", "١.٥" or "1_0"), then `number`."""
    if not _ASCII_NUMBER.fullmatch(value):
        bound = f"> {low:g}" if low_open else f">= {low:g}"
        raise InvalidInput(f"{what} must be a finite number {bound} and <= {high:g}, got {_shown(value)}")
    return number(float(value), what, low, high, low_open=low_open)


def seconds(value: Any, what: str, *, low: float = 0.0, low_open: bool = True) -> float:
    """A duration in seconds: finite, > 0 (or >= `low`), at most MAX_SECONDS."""
    return number(value, what, low, MAX_SECONDS, low_open=low_open)


def _encodable(value: str) -> bool:
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


def _shown(value: Any) -> str:
    """The value as an error line shows it: its repr, cut (an over-long value is refused
    in a line, not echoed whole)."""
    shown = repr(value)
    if len(shown) <= 80:
        return shown
    return f"{shown[:60]}... ({len(value) if isinstance(value, str) else '?'} chars)"
