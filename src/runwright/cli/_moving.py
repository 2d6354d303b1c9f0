"""`runwright move --to URL`: the deployment moves to another store (see runwright.move)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Callable

import typer

from ..errors import InvalidInput
from ._exits import FAILED, clear_errors
from ._main import URL, cli, run_async
from ._output import escape, out
from ._params import STORE_URL, Integer

__all__ = ["move"]


@cli.command()
def move(
    to: str | None = typer.Option(None, "--to", metavar="URL", click_type=STORE_URL,
                                  help="The store to move to: an empty one (sqlite:///..., postgresql://..."
                                       " or redis://...)."),
    check: bool = typer.Option(False, "--check", help="Compare the two stores (rows and a checksum per kind);"
                                                      " exit 1 when any kind differs."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would move and how long the seal would"
                                                          " last; change nothing."),
    abandon: bool = typer.Option(False, "--abandon", help="Unseal the source of a move that failed or was"
                                                          " given up (refused once it moved)."),
    batch: int = typer.Option(2000, click_type=Integer(1, 100_000), help="Rows per copied batch."),
    as_json: bool = typer.Option(False, "--json", help="The report as one JSON object."),
    url: str | None = URL,
) -> None:
    """Move this deployment (--url) to another store (--to), stopping the world: the source
    is sealed (every write to it is refused, saying where to retry), every kind of state is
    copied with its ids and sequence numbers, and the source is left as a tombstone naming
    the target. A running run is given back: a worker on the target resumes it from its
    journal. Run it again after an interruption: it resumes where it stopped."""
    from ..move import abandon as abandon_move
    from ..move import check as check_move
    from ..move import move as do_move
    from ..move import plan, source_url

    source = source_url(url)
    with clear_errors():
        if sum((check, dry_run, abandon)) > 1:
            raise InvalidInput("give one of --check, --dry-run, --abandon")
        if to is None and not (abandon or dry_run):
            raise InvalidInput("--to URL is required: the store to move to")
    if abandon:
        target = run_async(lambda: abandon_move(source))
        _say(as_json, {"abandoned": True, "target": target},
             f"unsealed {escape(source)}: it takes writes again; {escape(target)} holds a partial copy"
             f" to drop")
        return
    if dry_run:
        counts, per_s = run_async(lambda: plan(source, to))
        rows = sum(kind.rows for kind in counts)
        seal_s = rows / per_s
        if as_json:
            print(json.dumps({"kinds": {k.table: k.rows for k in counts}, "rows": rows,
                              "rows_per_s": round(per_s), "seal_s": round(seal_s, 1)}))
            return
        for kind in counts:
            out.print(f"{kind.rows:>10,}  {kind.table}: {escape(kind.what)}", highlight=False)
        out.print(f"{rows:,} rows; at {per_s:,.0f} rows/s (measured here on a sample), the seal would last"
                  f" about {seal_s:.1f} s", highlight=False)
        return
    assert to is not None
    if check:
        differences = run_async(lambda: check_move(source, to))
        if as_json:
            print(json.dumps({"differences": [dataclasses.asdict(d) for d in differences]}))
        elif not differences:
            out.print("no difference: every kind has the same rows and checksum on both", highlight=False)
        for d in differences if not as_json else []:
            out.print(f"{d.table}: {d.source_rows} rows ({d.source_sum}) on the source, {d.target_rows}"
                      f" ({d.target_sum}) on the target", highlight=False)
        if differences:
            raise typer.Exit(FAILED)
        return
    step, shown = _progress()
    try:
        report = run_async(lambda: do_move(source, to, progress=step, batch=batch))
    finally:
        shown.stop()
    _say(as_json, {"moved": True, "resumed": report.resumed, "rows": report.rows,
                   "kinds": {k.table: k.rows for k in report.kinds}, "sealed_s": round(report.sealed_s, 3)},
         f"moved {report.rows:,} rows to {escape(report.target)} (sealed {report.sealed_s:.1f} s"
         f"{', resumed' if report.resumed else ''}); {escape(report.source)} is its tombstone now")


def _say(as_json: bool, body: dict[str, Any], line: str) -> None:
    if as_json:
        print(json.dumps(body))
    else:
        out.print(line, highlight=False)


def _progress() -> tuple[Callable[[Any, int, int], None], Any]:
    """A bar per kind on stderr, as it is copied; and the Progress to stop at the end."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    bars: dict[str, Any] = {}
    shown = Progress(TextColumn("{task.description:<20}"), BarColumn(), MofNCompleteColumn(),
                     console=Console(stderr=True), transient=False)

    def step(kind: Any, done: int, total: int) -> None:
        if not bars:
            shown.start()
        if kind.table not in bars:
            bars[kind.table] = shown.add_task(kind.table, total=total)
        shown.update(bars[kind.table], completed=done)

    return step, shown

