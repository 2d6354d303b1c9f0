"""`runwright verify`: options to Options, the run, the report, the exit code.

Durations are `2s`, `500ms`, `1m` or a number of seconds; `0` turns a kind of fault off.
Exit 0 only when every violation count is 0, 1 otherwise, 2 on bad input, 8 when
`--fleet` finds no running worker to take its session, 130 when interrupted (after
cleaning up).
"""

from __future__ import annotations

import math
import random
import re
import signal

import typer
from rich.console import Console

from ..verify._checks import Findings
from ._exits import BAD_INPUT, FAILED, INTERRUPTED, NO_FLEET, OK, fail

__all__ = ["INTERRUPTED", "exit_code", "parse_duration", "verify"]

UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "": 1.0}


def parse_duration(text: str, option: str) -> float:
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|)\s*", text)
    if match is None:
        raise fail(f"{option} {text!r}: expected a duration such as 2s, 500ms or 1m", BAD_INPUT)
    value = float(match.group(1)) * UNITS[match.group(2)]
    if not math.isfinite(value):
        raise fail(f"{option} {text!r}: expected a finite duration", BAD_INPUT)
    return value


def verify(url: str | None, workers: int, runs: int, steps: int, kill_every: str, stall_every: str,
           blip_every: str, seed: int | None, lease_s: float, timeout_s: float, as_json: bool,
           fleet: bool = False, app_version: str = "0.0.0") -> None:
    from ..core._versions import check_version
    from ..verify import Options, VerifyAborted, run_verify
    from ..verify._fleet import NoFleet, run_fleet_verify
    from ..verify._report import print_report, processes

    for name, value, least in (("--workers", workers, 1), ("--runs", runs, 1), ("--steps", steps, 1)):
        if value < least:
            raise fail(f"{name} {value}: must be at least {least}", BAD_INPUT)
    if lease_s < 1 or timeout_s <= 0:
        raise fail("--lease-s must be at least 1 and --timeout-s positive", BAD_INPUT)
    options = Options(url=url, workers=workers, runs=runs, steps=steps,
                      kill_every_s=parse_duration(kill_every, "--kill-every"),
                      stall_every_s=parse_duration(stall_every, "--stall-every"),
                      blip_every_s=parse_duration(blip_every, "--blip-every"),
                      seed=random.randrange(2**31) if seed is None else seed,
                      lease_s=lease_s, timeout_s=timeout_s, fleet=fleet,
                      app_version=check_version(app_version))
    # Progress and notes on stderr: with --json, stdout holds the report alone.
    console = Console(stderr=True)
    if not as_json:
        who = "the running fleet's workers" if fleet else processes(workers)
        console.print(f"[bold]runwright verify[/]: {who}, {runs} runs, seed "
                      f"{options.seed} (give --seed {options.seed} to repeat this schedule)",
                      soft_wrap=True)
    # SIGINT (even where a shell started us ignoring it) and SIGTERM interrupt: the run
    # stops, and its cleanup removes what it made.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        outcome = (run_fleet_verify if fleet else run_verify)(options, console)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted[/]: the fleet released verify's queue, its runs removed"
                      if fleet else "[yellow]interrupted[/]: verify's workers ended, its data removed")
        raise typer.Exit(INTERRUPTED) from None
    except NoFleet as exc:
        raise fail(str(exc), NO_FLEET) from None
    except VerifyAborted as exc:
        raise fail(str(exc), FAILED) from None
    print_report(outcome.report, Console(), as_json)
    raise typer.Exit(exit_code(outcome.findings))


def exit_code(findings: Findings) -> int:
    """0 only when every violation count is 0."""
    return OK if findings.ok else FAILED
