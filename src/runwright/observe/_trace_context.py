"""The trace of a run: its W3C `traceparent`, and span ids every machine derives alike.

One trace per run, whichever worker runs whichever attempt. The trace id is the one of
the `traceparent` given at submission, or, without one, derived from the run's identity
(its id, key and submission time, which every process reads from the store), so that a
worker taking over after a SIGKILL names the same trace without asking anyone. Span ids
are derived the same way from the trace id and the span's place in the run: the run
itself, an attempt (by its claim, the fence: a takeover keeps the attempt number but is
another execution), a step (fence and journal position). A child run's traceparent
names the parent's step that submitted it, so the child's spans sit under that step.

Pure computation, no OpenTelemetry import: submission and the journal use it on every
call, traced or not, and `import runwright` stays fast. `spans` turns these ids
into spans when an OpenTelemetry SDK is set up.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput
from ..runs import Run

__all__ = ["RunTrace", "check_traceparent"]

# version "00", trace id (32 hex), parent span id (16 hex), flags (2 hex). A later
# version may append fields after a dash (the spec asks a parser to accept that).
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")
MAX_TRACEPARENT_CHARS = 256
SAMPLED = 0x01


def check_traceparent(value: Any) -> str | None:
    """The `traceparent` as stored (lowercase, the version-00 fields only), or None;
    InvalidInput says what is wrong with a malformed one (W3C Trace Context, level 1)."""
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > MAX_TRACEPARENT_CHARS:
        raise InvalidInput(f"traceparent must be a W3C traceparent string, got {value!r:.80}")
    text = value.strip().lower()
    match = _TRACEPARENT.match(text)
    if match is None:
        raise InvalidInput("traceparent must read 00-<32 hex trace id>-<16 hex span id>-<2 hex "
                           f"flags> (W3C Trace Context), got {value!r:.80}")
    version, trace_id, span_id, flags, rest = match.groups()
    if version == "ff" or (version == "00" and rest) or set(trace_id) == {"0"} or set(span_id) == {"0"}:
        raise InvalidInput(f"traceparent is not valid W3C Trace Context (version ff, extra fields "
                           f"in version 00, or an all-zero id): {value!r:.80}")
    return f"00-{trace_id}-{span_id}-{flags}"


def _digest(*parts: object) -> bytes:
    return hashlib.sha256(":".join(map(str, parts)).encode()).digest()


def _nonzero(value: int) -> int:
    return value or 1  # an all-zero id is invalid in W3C and OpenTelemetry alike


@dataclass(frozen=True, slots=True)
class RunTrace:
    """The trace a run belongs to, and the ids of its spans."""

    run_id: int
    trace_id: int
    parent_span_id: int | None  # the submitter's span, if a traceparent was given
    sampled: bool

    @classmethod
    def of(cls, run: Run) -> RunTrace:
        if run.traceparent is not None:
            _, trace_hex, span_hex, flags = run.traceparent.split("-")[:4]
            return cls(run.id, int(trace_hex, 16), int(span_hex, 16), bool(int(flags, 16) & SAMPLED))
        # The key and submission time keep two deployments' run 1 apart.
        trace_id = int.from_bytes(_digest("runwright-trace", run.id, run.key, repr(run.created_at))[:16])
        return cls(run.id, _nonzero(trace_id), None, True)

    def span_id(self, *place: object) -> int:
        """The id of the span at `place` within this run (e.g. "attempt", fence)."""
        return _nonzero(int.from_bytes(_digest(f"{self.trace_id:032x}", self.run_id, *place)[:8]))

    @property
    def root_span_id(self) -> int:
        """The run's own span: parent of every attempt's span."""
        return self.span_id("run")

    def attempt_span_id(self, fence: int) -> int:
        return self.span_id("attempt", fence)

    def step_span_id(self, fence: int, position: int) -> int:
        return self.span_id("step", fence, position)

    def traceparent(self, span_id: int) -> str:
        """The W3C traceparent naming `span_id` of this trace (for a child run)."""
        return f"00-{self.trace_id:032x}-{span_id:016x}-{'01' if self.sampled else '00'}"
