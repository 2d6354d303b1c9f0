"""`runwright sweep`: one retention pass on request, and what it removed."""

from __future__ import annotations

import json

import typer

from ..app import App
from ..engine._sweeper import Retention, Sweeper, SweepReport
from ..errors import InvalidInput
from ._exits import clear_errors
from ._main import URL, cli, with_app
from ._output import out
from ._params import LIMIT, SECONDS, Integer

__all__ = ["sweep"]


@cli.command()
def sweep(
    max_age_s: float | None = typer.Option(None, click_type=SECONDS,
                                           help="Remove ended runs older than this many seconds."),
    max_events: int | None = typer.Option(
        None, click_type=LIMIT,
        help="Trim each run's log to its last this many events (behind a 'trimmed' event)."),
    thread_max_runs: int | None = typer.Option(
        None, click_type=LIMIT, help="Each thread keeps its newest this many runs; its older ended runs go."),
    tombstone_age_s: float | None = typer.Option(
        None, click_type=SECONDS,
        help="Remove the tombstones of threads deleted longer ago than this many seconds "
             "(their names are free again)."),
    thread_max_messages: int | None = typer.Option(
        None, click_type=LIMIT,
        help="Each thread's history keeps its newest this many messages (an open run's stay)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go; remove nothing."),
    batch: int = typer.Option(1000, click_type=Integer(1, 100_000),
                              help="Runs per batch (a pass works up to 10 batches of each kind)."),
    as_json: bool = typer.Option(False, "--json", help="The report as one JSON object."),
    url: str | None = URL,
) -> None:
    """Run one retention pass now: ended runs older than --max-age-s go, with their
    journal, log and questions (a reader of one is then told it expired), and so do a
    thread's ended runs beyond its newest --thread-max-runs; logs longer than
    --max-events lose their oldest events, thread histories longer than
    --thread-max-messages their oldest messages, and the tombstones of threads deleted
    more than --tombstone-age-s ago go (ages by the store's clock). Give at least one bound."""
    with clear_errors():
        bounds = (max_age_s, max_events, thread_max_runs, tombstone_age_s, thread_max_messages)
        if all(bound is None for bound in bounds):
            raise InvalidInput("give at least one of --max-age-s, --max-events, --thread-max-runs, "
                               "--tombstone-age-s, --thread-max-messages")
        # Each bound's kind and range: its option's type (`params`).
        retention = Retention(max_age_s=max_age_s, max_events=max_events, thread_max_runs=thread_max_runs,
                              tombstone_age_s=tombstone_age_s, thread_max_messages=thread_max_messages)

    async def go(app: App) -> SweepReport:
        sweeper = Sweeper(app.store, app.runtime.clock, retention, holder="cli", lease_s=60, batch=batch,
                          codecs=app.codecs)
        return await sweeper.sweep(dry_run=dry_run)

    report = with_app(url, go)
    if as_json:
        print(json.dumps({"dry_run": dry_run, **report.as_dict()}))
        return
    verb = "would remove" if dry_run else "removed"
    lines = []
    if max_age_s is not None or thread_max_runs is not None:
        lines.append(f"{verb} {len(report.runs)} runs ({report.steps} journaled steps, {report.events} "
                     f"events)" + (f", ids {report.runs[0]}..{report.runs[-1]}" if report.runs else ""))
    if thread_max_runs is not None:
        lines.append(f"  of them {len(report.capped_runs)} beyond their thread's newest {thread_max_runs}")
    if max_events is not None:
        lines.append(f"{verb} {report.trimmed_events} events from the logs of "
                     f"{len(report.trimmed_runs)} runs (each keeps its last {max_events})")
    if thread_max_messages is not None:
        lines.append(f"{verb} {report.messages} messages from the histories of {report.message_threads} "
                     f"threads (each keeps its newest {thread_max_messages})")
    if tombstone_age_s is not None:
        lines.append(f"{verb} {len(report.tombstones)} tombstones of deleted threads "
                     f"(deleted more than {tombstone_age_s:g} s ago)")
    if report.blobs:
        lines.append(f"{verb} {report.blobs} blobs of offloaded payloads that no row names any more")
    if report.flow_keys:
        lines.append(f"{verb} {report.flow_keys} records of flow control keys that no decision needs "
                     f"any more")
    out.print("\n".join(lines), highlight=False)
