"""`runwright limits`: concurrency limits and rates per key, their use, and the operator's max."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import typer

from ..app import App
from ..errors import InvalidInput
from ._exits import clear_errors
from ._main import URL, cli, with_app
from ._output import out
from ._params import Integer

__all__ = ["limits"]


@cli.command()
def limits(
    action: str = typer.Argument("list", metavar="ACTION", help="list, set, unset, weight or unweight."),
    target: str | None = typer.Argument(None, metavar="LIMIT",
                                        help="set, unset: a limit's or rate's name, or NAME:KEY for one "
                                             "key; weight, unweight: a Fair's name, or NAME:KEY."),
    maximum: int | None = typer.Argument(
        None, metavar="MAX", click_type=Integer(0, 1_000_000),
        help="set: the most runs of one key running at once (a rate's: started in its window); "
             "weight: the key's weight, 1..10000 (default 1)."),
    as_json: bool = typer.Option(False, "--json", help="list: one JSON object, for scripts: "
                                 '{"limits": [...], "weights": {"NAME[:KEY]": W}}.'),
    url: str | None = URL,
) -> None:
    """List the keys of concurrency limits and rates with their runs running and queued, the
    max a claim applies and a rate's window; set or unset the operator's max of a limit or
    rate (or of one key), or the weight of a fair key (`rw.Fair`; of every key of its name,
    or of one), live: it holds from the next claim, fleet-wide."""
    if action == "list":
        with clear_errors():
            if target is not None:
                raise InvalidInput("`runwright limits list` takes no LIMIT")
        found, weights = with_app(url, lambda app: _listed(app))
        if as_json:  # a rate's spends (one a start in its window) are left out: its `spent` sums them
            print(json.dumps({"limits": [{k: v for k, v in dataclasses.asdict(use).items() if k != "spends"}
                                         for use in found],
                              "weights": weights}))
            return
        from rich.table import Table

        table = Table(title="concurrency limits and rates")
        for column in ("limit", "key", "running", "queued", "max", "rate window"):
            table.add_column(column)
        for use in found:
            window = "-" if use.per_s is None else f"{use.spent:g} started in {use.per_s:g} s"
            table.add_row(use.name, use.key or "(every key)", str(use.running), str(use.queued),
                          f"{use.max} (set)" if use.overridden else str(use.max), window)
        out.print(table)
        if weights:
            shares = Table(title="fair keys' weights (the others: 1)")
            shares.add_column("fair key")
            shares.add_column("weight")
            for target, weight in weights.items():
                shares.add_row(target if ":" in target else f"{target} (every key)", str(weight))
            out.print(shares)
        return
    with clear_errors():
        if action not in ("set", "unset", "weight", "unweight") or not target:
            raise InvalidInput(f"use `runwright limits`, `runwright limits set LIMIT MAX`, "
                               f"`runwright limits unset LIMIT`, `runwright limits weight NAME[:KEY] W` or "
                               f"`runwright limits unweight NAME[:KEY]` (got {action!r})")
        if action in ("set", "weight") and maximum is None:
            raise InvalidInput(f"`runwright limits {action} {'LIMIT MAX' if action == 'set' else 'NAME W'}` "
                               f"needs the {'MAX' if action == 'set' else 'W'}")
        if action in ("unset", "unweight") and maximum is not None:
            raise InvalidInput(f"`runwright limits {action}` takes no number")
    name = target
    if action in ("weight", "unweight"):
        with_app(url, lambda app: app.set_weight(name, maximum if action == "weight" else None))
        out.print(f"fair key {target}: " + (f"weight {maximum}" if action == "weight" else "weight 1"))
        return
    with_app(url, lambda app: app.set_limit(name, maximum if action == "set" else None))
    out.print(f"limit {target}: " + (f"max {maximum}" if action == "set" else "the runs' own max"))


async def _listed(app: App) -> tuple[list[Any], dict[str, int]]:
    return await app.limits(), await app.weights()
