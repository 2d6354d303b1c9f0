"""Rich renderings of runs for the terminal."""

from __future__ import annotations

import datetime as dt
import json
import time
from typing import Sequence

from rich.panel import Panel
from rich.table import Table

from ..attempts import Attempt
from ..journal import Event
from ..runs import Run
from ..schedules import Schedule, parse_zone

__all__ = ["attempts_table", "event_line", "run_panel", "runs_table", "schedules_table", "summary_table"]

STATE_STYLE = {"queued": "cyan", "running": "yellow", "succeeded": "green", "failed": "red",
               "dead": "bold red", "cancelled": "magenta", "interrupted": "magenta"}


def _when(epoch: float | None) -> str:
    return "-" if epoch is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(epoch))


def runs_table(runs: Sequence[Run], title: str = "runs") -> Table:
    table = Table(title=f"{title} ({len(runs)})")
    for column in ("id", "task", "queue", "state", "prio", "attempt", "created", "error"):
        table.add_column(column)
    for run in runs:
        error = run.error_info() or {}
        table.add_row(str(run.id), run.task, run.queue,
                      f"[{STATE_STYLE[run.state.value]}]{run.state.value}[/]", str(run.priority),
                      f"{run.attempt}/{run.max_attempts}", _when(run.created_at),
                      (error.get("type", "") + ": " + error.get("message", ""))[:60] if error else "")
    return table


def run_panel(run: Run) -> Panel:
    lines = [
        f"[bold]run {run.id}[/]  task {run.task}  queue {run.queue}  priority {run.priority}",
        f"state [{STATE_STYLE[run.state.value]}]{run.state.value}[/]"
        + ("  (cancel requested)" if run.cancel_requested else ""),
        f"key {run.key}",
        f"attempt {run.attempt}/{run.max_attempts}  fence {run.fence}  recoveries {run.recoveries}",
        f"created {_when(run.created_at)}  due {_when(run.run_at)}  started {_when(run.started_at)}"
        f"  finished {_when(run.finished_at)}",
        f"args {run.args}",
    ]
    if run.result is not None:
        lines.append(f"result {run.result}")
    if run.error is not None:
        error = json.loads(run.error)
        lines.append(f"[red]error {error.get('type')}: {error.get('message')}[/]")
    return Panel("\n".join(lines), expand=False)


def event_line(event: Event) -> str:
    """`  7 12:00:01.250 progress {"pct": 50}`: one line per event, as `follow` prints it."""
    stamp = time.strftime("%H:%M:%S", time.localtime(event.at)) + f".{int(event.at % 1 * 1000):03d}"
    data = json.dumps(event.data, separators=(",", ":")) if event.data else ""
    return f"{event.seq:>4} {stamp} {event.kind:<16} {data}".rstrip()


def schedules_table(schedules: Sequence[Schedule]) -> Table:
    table = Table(title=f"schedules ({len(schedules)})")
    for column in ("name", "cron", "tz", "task", "misfire", "state", "next fire (local)", "next fire (UTC)"):
        table.add_column(column)
    for s in schedules:
        local = dt.datetime.fromtimestamp(s.next_fire_at, parse_zone(s.tz))
        utc = dt.datetime.fromtimestamp(s.next_fire_at, dt.UTC)
        table.add_row(s.name, s.cron, s.tz, s.task, s.misfire, "paused" if s.paused else "active",
                      local.strftime("%Y-%m-%d %H:%M:%S %Z"), utc.strftime("%Y-%m-%d %H:%M:%S"))
    return table


def attempts_table(attempts: Sequence[Attempt]) -> Table:
    table = Table(title="attempts")
    for column in ("attempt", "fence", "worker", "started", "ended", "outcome", "error"):
        table.add_column(column)
    for a in attempts:
        table.add_row(str(a.attempt), str(a.fence), str(a.worker or "-"), _when(a.started_at),
                      _when(a.ended_at), a.outcome or "running", (a.error or "")[:80])
    return table


def summary_table(summary: dict[str, object]) -> Table:
    table = Table(title="runwright status", show_header=False)
    for name, value in summary.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(value)
        table.add_row(name.replace("_", " "), str(value))
    return table
