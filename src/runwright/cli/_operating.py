"""`runwright migrate | demo | verify`: the store's schema brought up to date, a
demonstration on worker processes, and the proof under faults."""

from __future__ import annotations

import typer

from ..app import App
from ._exits import clear_errors
from ._main import JSON_OUT, URL, cli, run_async
from ._output import out
from ._params import (
    SECONDS,
    STORE_URL,
    Integer,
    Number,
)

__all__ = ["demo", "migrate", "verify"]


@cli.command()
def migrate(url: str | None = URL) -> None:
    """Create or upgrade the schema (Redis: the key layout) by its numbered migrations;
    safe to run concurrently."""

    async def go() -> tuple[list[int], int, str]:
        app = App(url, auto_migrate=False)
        try:
            return (*await app.migrate(), app.store.schema_noun)
        finally:
            await app.close()

    applied, version, noun = run_async(go)
    out.print(f"{noun} at version {version}" + (f"; applied {applied}" if applied else "; nothing to do"))


@cli.command()
def demo(
    runs_count: int = typer.Option(300, "--runs", metavar="N", click_type=Integer(1, 1_000_000),
                                   help="Runs to submit."),
    workers: int = typer.Option(3, "--workers", metavar="N", click_type=Integer(2, 64),
                                help="Worker processes: at least 2 (one is killed, the others take "
                                     "its runs over)."),
    url: str | None = typer.Option(None, "--url", metavar="URL", click_type=STORE_URL,
                                   help="Store URL. Defaults to a fresh SQLite file in a temporary "
                                        "folder, removed at the end."),
) -> None:
    """Show the core guarantee: worker processes, a SIGKILL midway, every run done once."""
    from ._demo import run_demo

    with clear_errors():
        ok = run_demo(runs_count, workers, url)
    raise typer.Exit(0 if ok else 1)


@cli.command()
def verify(
    url: str | None = URL,
    workers: int = typer.Option(5, "--workers", metavar="N", click_type=Integer(1, 1024),
                                help="Worker processes verify starts."),
    runs_count: int = typer.Option(10000, "--runs", metavar="N", click_type=Integer(1, 100_000_000),
                                   help="Runs of its workload."),
    steps: int = typer.Option(3, "--steps", metavar="N", click_type=Integer(1, 10_000),
                              help="Journaled steps per run."),
    kill_every: str = typer.Option("2s", "--kill-every", metavar="DURATION",
                                   help="SIGKILL a random worker (restarted) this often; 0: never."),
    stall_every: str = typer.Option("10s", "--stall-every", metavar="DURATION",
                                    help="SIGSTOP a worker past its lease, then SIGCONT; 0: never."),
    blip_every: str = typer.Option("5s", "--blip-every", metavar="DURATION",
                                   help="Drop the workers' database connections (SQLite: kill a "
                                        "writer mid-transaction); 0: never."),
    seed: int | None = typer.Option(None, "--seed", metavar="N", click_type=Integer(0, 2**63 - 1),
                                    help="The same seed makes the same fault schedule."),
    lease_s: float = typer.Option(2.0, "--lease-s", metavar="SECONDS", click_type=Number(1, 3600),
                                  help="The workers' lease: a stalled one loses its runs after it."),
    timeout_s: float = typer.Option(600.0, "--timeout-s", metavar="SECONDS", click_type=SECONDS,
                                    help="Give up draining after this (runs not ended are lost)."),
    fleet: bool = typer.Option(
        False, "--fleet",
        help="Use the running fleet instead of its own workers: every ready `runwright worker` of "
             "the store serves a queue of this session's (runwright.verify.ID) while verify "
             "runs; faults reach, over the fleet bus, only workers started with "
             "--allow-verify-faults (else they are reported skipped). --workers and --lease-s "
             "are the fleet's. Exit 8 when no worker takes the session."),
    app_version: str = typer.Option(
        "0.0.0", "--app-version", metavar="X.Y.Z",
        help="With --fleet: the fleet's app version (its major names the fleet and the runs "
             "its workers take)."),
    json_out: bool = JSON_OUT,
) -> None:
    """Prove the deployment's guarantees: verify's own workers run a ledgered workload in a
    schema (namespace, file) of its own while faults hit them; exit 0 only if nothing was
    lost, repeated or let through. It removes all it made, even when interrupted. With
    --fleet, the running fleet's workers run it, on a queue of its own."""
    from ._verifying import verify as run

    with clear_errors():
        run(url, workers, runs_count, steps, kill_every, stall_every, blip_every,
            seed, lease_s, timeout_s, json_out, fleet, app_version)
