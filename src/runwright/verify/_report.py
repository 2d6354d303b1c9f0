"""What `runwright verify` prints: a table for people, or the same report as JSON. With
--fleet, the report also says how many of the fleet's workers served the session and
obeyed faults, the faults skipped (and why), and kills no supervisor restarted."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console
from rich.table import Table

__all__ = ["obeying", "print_report", "processes"]

VIOLATIONS = [
    ("lost", "runs lost (submitted, never ended)"),
    ("failed", "runs failed or dead (the workload cannot fail)"),
    ("steps_reexecuted", "journaled steps re-executed after completion"),
    ("at_most_once_violations", "at-most-once steps run twice"),
    ("zombie_writes_durable", "zombie writes made durable"),
    ("stream_gaps_or_repeats", "event streams with gaps or repeats"),
]


def processes(count: int) -> str:
    """'2 worker processes', '1 worker process': what served a --fleet session, counted
    the same at its start and in its report."""
    return f"{count} worker process{'' if count == 1 else 'es'}"


def obeying(count: int) -> str:
    return f"{count} obey{'s' if count == 1 else ''} faults"


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} runs/s"


def print_report(report: dict[str, Any], console: Console, as_json: bool) -> None:
    if as_json:
        console.print_json(json.dumps(report))
        return
    runs, faults, takeover = report["runs"], report["faults"], report["takeover_s"]
    rate = report["throughput_runs_per_s"]
    table = Table(title=f"runwright verify on {report['backend']} (seed {report['seed']})",
                  show_header=False)
    table.add_column(justify="left")
    table.add_column(justify="right")
    fleet = report.get("fleet")
    if fleet:
        table.add_row("worker processes that served the session (a restarted one counts again)",
                      f"{fleet['workers_serving']} ({obeying(fleet['workers_obeying_faults'])})")
    table.add_row("runs submitted", str(runs["submitted"]))
    table.add_row("runs checked (with child runs)", str(runs["checked"]))
    table.add_row("finished", f"{runs['finished']} ({runs['succeeded']} succeeded, "
                              f"{runs['cancelled']} cancelled)")
    for name, label in VIOLATIONS:
        count = report["violations"][name]
        table.add_row(label, f"[bold red]{count}[/]" if count else "[green]0[/]")
    table.add_row("faults injected", f"{faults['kills']} kills, {faults['stalls']} stalls, "
                                     f"{faults['blips']} blips")
    if faults.get("not_restarted"):  # a kill whose worker no supervisor started again
        table.add_row("killed workers not restarted (no supervisor?)",
                      f"[bold yellow]{faults['not_restarted']}[/]")
    if faults.get("skipped"):
        why = "; ".join(f"{n}: {reason}" for reason, n in faults["skipped_why"].items())
        table.add_row("faults skipped", f"[yellow]{faults['skipped']}[/] ({why})")
    if faults["connections_cut"]:
        table.add_row("connections cut", str(faults["connections_cut"]))
    if faults["writers_killed"]:
        table.add_row("writers killed mid-transaction", str(faults["writers_killed"]))
    if faults["worker_exits"]:  # not a violation of the guarantees, but a fault of the fleet
        table.add_row("workers that exited on their own (restarted)",
                      f"[bold yellow]{faults['worker_exits']}[/]")
    table.add_row("takeovers", str(takeover["count"]))
    table.add_row("takeover time p50 / p99", f"{_s(takeover['p50'])} / {_s(takeover['p99'])}")
    ratio = rate["ratio"]
    table.add_row("throughput: baseline / during faults",
                  f"{_rate(rate['baseline'])} / {_rate(rate['during_faults'])}"
                  + (f" ({ratio:.0%})" if ratio else ""))
    console.print(table)
    for name, items in report["examples"].items():
        for item in items:
            console.print(f"[red]{name}:[/] {item}", highlight=False)
    console.print("[bold green]OK: no violation[/]" if report["ok"] else "[bold red]FAILED[/]")
