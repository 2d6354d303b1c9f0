"""`runwright sweep`: one retention pass on request, and what it removed."""

from __future__ import annotations

import json

import typer

from ..app import App
from ..engine.sweeper import Sweeper, SweepReport
from ..errors import InvalidInput
from .main import URL, clear_errors, cli, out, with_app

__all__ = ["sweep"]


@cli.command()
def sweep(
    max_age_s: float = typer.Option(..., help="Remove ended runs older than this many seconds."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go; remove nothing."),
    batch: int = typer.Option(1000, help="Runs per batch (a pass removes up to 10 batches)."),
    as_json: bool = typer.Option(False, "--json", help="The report as one JSON object."),
    url: str | None = URL,
) -> None:
    """Run one retention pass now: ended runs older than --max-age-s go, with their
    journal, log and questions (a reader of one is then told it expired)."""
    with clear_errors():
        if not max_age_s > 0 or not batch > 0:
            raise InvalidInput("--max-age-s and --batch must be > 0")

    async def go(app: App) -> SweepReport:
        sweeper = Sweeper(app.store, app.runtime.clock, max_age_s=max_age_s, holder="cli",
                          lease_s=60, batch=batch)
        return await sweeper.sweep(dry_run=dry_run)

    report = with_app(url, go)
    if as_json:
        print(json.dumps({"dry_run": dry_run, "runs": len(report.runs), "run_ids": report.runs,
                          "steps": report.steps, "events": report.events}))
        return
    verb = "would remove" if dry_run else "removed"
    out.print(f"{verb} {len(report.runs)} runs ({report.steps} journaled steps, {report.events} "
              f"events)" + (f", ids {report.runs[0]}..{report.runs[-1]}" if report.runs else ""),
              highlight=False)
