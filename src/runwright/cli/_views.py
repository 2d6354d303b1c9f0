"""Rich renderings of runs for the terminal.

What a person reads: every instant as ISO 8601 in UTC (`2026-12-06T20:31:05Z`, as every
face writes one: `client._why.utc`), a yes/no for a flag and `-` for nothing, never an
epoch number or Python's True, False or None. `--json` keeps the records' own values
(epoch seconds, true/false/null) for scripts.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import TYPE_CHECKING, Any, Sequence

from ..client._attempts import Attempt
from ..client._threads import ThreadInfo
from ..client._why import Waiting, utc
from ..core._journal import Event
from ..core._payloads import is_envelope, load
from ..core._schedules import Schedule, parse_zone
from ..runs import Run
from ._output import escape

if TYPE_CHECKING:
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

__all__ = ["attempts_table", "cell", "event_line", "instant", "messages_lines", "run_panel", "runs_table",
           "schedules_table", "summary_table", "threads_table", "traceback_text", "waiting_cell",
           "workers_table"]

STATE_STYLE = {"queued": "cyan", "running": "yellow", "succeeded": "green", "failed": "red",
               "dead": "bold red", "cancelled": "magenta", "interrupted": "magenta"}


def instant(epoch: float | None) -> str:
    """An instant as a person reads it: ISO 8601 in UTC, to the second; `-` for none."""
    return "-" if epoch is None else utc(epoch)


def _instant_ms(epoch: float) -> str:
    """An event's instant, to the millisecond (events of one second are told apart)."""
    when = dt.datetime.fromtimestamp(epoch, dt.UTC)
    return f"{when:%Y-%m-%dT%H:%M:%S}.{when.microsecond // 1000:03d}Z"


def cell(value: Any) -> str:
    """A value as a table shows it: yes/no for a flag, `-` for nothing (None, empty), lists
    and mappings item by item; never Python's True, False or None."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {cell(v)}" for k, v in value.items()) or "-"
    if isinstance(value, (list, tuple)):
        return ", ".join(cell(v) for v in value) or "-"
    return str(value)


def waiting_cell(waiting: Waiting | None) -> str:
    """`sleep until 2026-12-06T10:00:00Z`, `answer`, `worker`: why a queued run waits."""
    if waiting is None:
        return ""
    return waiting.reason.value + ("" if waiting.until is None else f" until {utc(waiting.until)}")


def runs_table(runs: Sequence[Run], title: str = "runs", full: bool = False,
               waiting: dict[int, Waiting] | None = None) -> Table:
    """A row per run; `full` keeps whole error messages (a pipe), else they are cut to fit.
    With `waiting`, a column says why each queued run waits."""
    from rich.table import Table

    cut = None if full else 60
    why = waiting or {}
    table = Table(title=f"{title} ({len(runs)})")
    for column in ("id", "task", "queue", "state", "prio", "attempt", "created",
                   *(("waiting",) if why else ()), "error"):
        table.add_column(column)
    for run in runs:
        error = run.error_info()
        reason = f"{error.get('type', '')}: {error.get('message', '')}"[:cut] if error else ""
        table.add_row(str(run.id), escape(run.task), escape(run.queue),
                      f"[{STATE_STYLE[run.state.value]}]{run.state.value}[/]", str(run.priority),
                      f"{run.attempt}/{run.max_attempts}", instant(run.created_at),
                      *((waiting_cell(why.get(run.id)),) if why else ()), escape(reason))
    return table


def threads_table(threads: Sequence[ThreadInfo], full: bool = False) -> Table:
    """A row per thread, newest first; `full` keeps whole names (a pipe), else long ones are cut."""
    from rich.table import Table

    cut = None if full else 40
    table = Table(title=f"threads ({len(threads)})")
    # "state" is the last run's; "now" the thread's: deleted, busy (a run open) or idle.
    for column in ("thread", "tenant", "created", "runs", "open", "last run", "state", "now"):
        table.add_column(column)
    for t in threads:
        state = t.last_run_state.value if t.last_run_state is not None else ""
        table.add_row(escape(t.thread[:cut]), escape(t.tenant or "-"), instant(t.created_at), str(t.runs),
                      str(t.open_runs), str(t.last_run_id or "-"),
                      f"[{STATE_STYLE[state]}]{state}[/]" if state else "-",
                      "deleted" if t.deleted else ("busy" if t.busy else "idle"))
    return table


def run_panel(run: Run, waiting: Waiting | None = None) -> Panel:
    from rich.panel import Panel

    lines = [
        f"[bold]run {run.id}[/]  task {run.task}  queue {run.queue}  priority {run.priority}",
        f"state [{STATE_STYLE[run.state.value]}]{run.state.value}[/]"
        + ("  (cancel requested)" if run.cancel_requested else "")
        + ("  (pause requested)" if run.pause_requested else "")
        + (f"  waiting: {escape(waiting.detail)}" if waiting is not None else ""),
        f"key {escape(run.key)}" + (f"  thread {escape(run.thread)}" if run.thread else "")
        + (f"  parent {run.parent_id}" if run.parent_id else "")
        + (f"  forked from {run.forked_from}" if run.forked_from else ""),
        f"attempt {run.attempt}/{run.max_attempts}  fence {run.fence}  recoveries {run.recoveries}",
        f"created {instant(run.created_at)}  due {instant(run.run_at)}  started {instant(run.started_at)}"
        f"  finished {instant(run.finished_at)}",
        f"args {escape(_plain(run.args))}",
    ]
    if run.result is not None:
        lines.append(f"result {escape(_plain(run.result))}")
    error = run.error_info()
    if error is not None:
        lines.append(f"[red]error {escape(str(error.get('type')))}: {escape(str(error.get('message')))}[/]")
    return Panel("\n".join(lines), expand=False)


def event_line(event: Event) -> str:
    """`   7 2026-12-06T12:00:01.250Z progress {"pct":50}`: one line per event, as `follow`
    prints it; the data as logged, but a park's wake-up time as an instant, not epoch seconds."""
    data = event.data
    if event.kind == "parked" and isinstance(data, dict) and isinstance(data.get("until"), (int, float)):
        data = {**data, "until": utc(data["until"])}
    text = json.dumps(data, separators=(",", ":")) if data else ""
    return f"{event.seq:>4} {_instant_ms(event.at)} {event.kind:<16} {text}".rstrip()


def schedules_table(schedules: Sequence[Schedule]) -> Table:
    from rich.table import Table

    table = Table(title=f"schedules ({len(schedules)})")
    for column in ("name", "cron", "tz", "task", "misfire", "state", "next fire (in tz)", "next fire (UTC)"):
        table.add_column(column)
    for s in schedules:
        local = dt.datetime.fromtimestamp(s.next_fire_at, parse_zone(s.tz))
        table.add_row(s.name, s.cron, s.tz, s.task, s.misfire, "paused" if s.paused else "active",
                      local.isoformat(timespec="seconds"), utc(s.next_fire_at))
    return table


def traceback_text(run: Run) -> Text | None:
    """The traceback of the run's last error, as its worker recorded it (trimmed to the
    store's limit, the innermost frames kept)."""
    from rich.text import Text

    trace = (run.error_info() or {}).get("traceback")
    return Text(trace.rstrip("\n"), style="red") if trace else None


def workers_table(workers: Sequence[Any], now: float) -> Table:
    from rich.table import Table

    table = Table(title=f"workers ({len(workers)})")
    for column in ("id", "host", "pid", "version", "queues", "tasks", "started", "heartbeat"):
        table.add_column(column)
    for w in workers:
        table.add_row(str(w.id), w.host, str(w.pid), w.version, ",".join(w.queues), ",".join(w.tasks),
                      instant(w.started_at), f"{max(0.0, now - w.heartbeat_at):.1f} s ago")
    return table


def messages_lines(messages: Sequence[dict[str, Any]]) -> list[str]:
    """A thread's history, one line per message: `role: content` (tool calls as JSON)."""
    lines = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, str):
            content = json.dumps(content)
        extra = {k: v for k, v in message.items() if k not in ("role", "content")}
        lines.append(f"{message.get('role', '?')}: {content}"
                     + (f"  {json.dumps(extra)}" if extra else ""))
    return lines


def attempts_table(attempts: Sequence[Attempt], full: bool = False) -> Table:
    from rich.table import Table

    cut = None if full else 80
    table = Table(title="attempts")
    for column in ("attempt", "fence", "worker", "started", "ended", "outcome", "error"):
        table.add_column(column)
    for a in attempts:
        table.add_row(str(a.attempt), str(a.fence), str(a.worker or "-"), instant(a.started_at),
                      instant(a.ended_at), a.outcome or "running", escape((a.error or "")[:cut]))
    return table


def summary_table(summary: dict[str, object]) -> Table:
    from rich.table import Table

    table = Table(title="runwright status", show_header=False)
    for name, value in summary.items():
        if name == "limits" and isinstance(value, list):  # each key in use, one line
            value = "\n".join(f"{use['limit']}:{use['key']} {_use_of(use)}, {use['queued']} queued"
                               for use in value) or None
        table.add_row(name.replace("_", " "), cell(value))
    return table


def _use_of(use: dict[str, Any]) -> str:
    """A key's use: a rate's, the cost started in its window; a concurrency limit's, its runs running."""
    if "per_s" in use:
        return f"{use['spent']:g} of {use['max']} started in {use['per_s']:g} s"
    return f"{use['running']} of {use['max']} running"


def _plain(text: str) -> str:
    """A stored payload as its JSON: an envelope (payload codecs) opened; plain text as stored."""
    return json.dumps(load(text), ensure_ascii=False) if is_envelope(text) else text
