"""Rich renderings of runs for the terminal."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import TYPE_CHECKING, Any, Sequence

from ..client._attempts import Attempt
from ..client._threads import ThreadInfo
from ..core._journal import Event
from ..core._schedules import Schedule, parse_zone
from ..runs import Run
from ._output import escape

if TYPE_CHECKING:
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

__all__ = ["attempts_table", "event_line", "messages_lines", "run_panel", "runs_table", "schedules_table",
           "summary_table", "threads_table", "traceback_text", "workers_table"]

STATE_STYLE = {"queued": "cyan", "running": "yellow", "succeeded": "green", "failed": "red",
               "dead": "bold red", "cancelled": "magenta", "interrupted": "magenta"}


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def runs_table(runs: Sequence[Run], title: str = "runs", full: bool = False) -> Table:
    """A row per run; `full` keeps whole error messages (a pipe), else they are cut to fit."""
    from rich.table import Table

    cut = None if full else 60
    table = Table(title=f"{title} ({len(runs)})")
    for column in ("id", "task", "queue", "state", "prio", "attempt", "created", "error"):
        table.add_column(column)
    for run in runs:
        error = run.error_info()
        reason = f"{error.get('type', '')}: {error.get('message', '')}"[:cut] if error else ""
        table.add_row(str(run.id), escape(run.task), escape(run.queue),
                      f"[{STATE_STYLE[run.state.value]}]{run.state.value}[/]", str(run.priority),
                      f"{run.attempt}/{run.max_attempts}", _when(run.created_at), escape(reason))
    return table


def threads_table(threads: Sequence[ThreadInfo], full: bool = False) -> Table:
    """A row per thread, newest first; `full` keeps whole names (a pipe), else long ones are cut."""
    from rich.table import Table

    cut = None if full else 40
    table = Table(title=f"threads ({len(threads)})")
    for column in ("thread", "tenant", "created", "runs", "open", "last run", "state", ""):
        table.add_column(column)
    for t in threads:
        state = t.last_run_state.value if t.last_run_state is not None else ""
        table.add_row(escape(t.thread[:cut]), escape(t.tenant or "-"), _when(t.created_at), str(t.runs),
                      str(t.open_runs), str(t.last_run_id or "-"),
                      f"[{STATE_STYLE[state]}]{state}[/]" if state else "-",
                      "deleted" if t.deleted else ("busy" if t.busy else ""))
    return table


def run_panel(run: Run) -> Panel:
    from rich.panel import Panel

    lines = [
        f"[bold]run {run.id}[/]  task {run.task}  queue {run.queue}  priority {run.priority}",
        f"state [{STATE_STYLE[run.state.value]}]{run.state.value}[/]"
        + ("  (cancel requested)" if run.cancel_requested else ""),
        f"key {escape(run.key)}" + (f"  thread {escape(run.thread)}" if run.thread else "")
        + (f"  parent {run.parent_id}" if run.parent_id else ""),
        f"attempt {run.attempt}/{run.max_attempts}  fence {run.fence}  recoveries {run.recoveries}",
        f"created {_when(run.created_at)}  due {_when(run.run_at)}  started {_when(run.started_at)}"
        f"  finished {_when(run.finished_at)}",
        f"args {escape(run.args)}",
    ]
    if run.result is not None:
        lines.append(f"result {escape(run.result)}")
    error = run.error_info()
    if error is not None:
        lines.append(f"[red]error {escape(str(error.get('type')))}: {escape(str(error.get('message')))}[/]")
    return Panel("\n".join(lines), expand=False)


def event_line(event: Event) -> str:
    """`  7 12:00:01.250 progress {"pct": 50}`: one line per event, as `follow` prints it."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event.at)) + f".{int(event.at % 1 * 1000):03d}"
    data = json.dumps(event.data, separators=(",", ":")) if event.data else ""
    return f"{event.seq:>4} {stamp} {event.kind:<16} {data}".rstrip()


def schedules_table(schedules: Sequence[Schedule]) -> Table:
    from rich.table import Table

    table = Table(title=f"schedules ({len(schedules)})")
    for column in ("name", "cron", "tz", "task", "misfire", "state", "next fire (local)", "next fire (UTC)"):
        table.add_column(column)
    for s in schedules:
        local = dt.datetime.fromtimestamp(s.next_fire_at, parse_zone(s.tz))
        utc = dt.datetime.fromtimestamp(s.next_fire_at, dt.UTC)
        table.add_row(s.name, s.cron, s.tz, s.task, s.misfire, "paused" if s.paused else "active",
                      local.strftime("%Y-%m-%d %H:%M:%S %Z"), utc.strftime("%Y-%m-%d %H:%M:%S"))
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
                      _when(w.started_at), f"{max(0.0, now - w.heartbeat_at):.1f} s ago")
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
        table.add_row(str(a.attempt), str(a.fence), str(a.worker or "-"), _when(a.started_at),
                      _when(a.ended_at), a.outcome or "running", escape((a.error or "")[:cut]))
    return table


def summary_table(summary: dict[str, object]) -> Table:
    from rich.table import Table

    table = Table(title="runwright status", show_header=False)
    for name, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(value)
        table.add_row(name.replace("_", " "), str(value))
    return table
