"""Steering's cost to an agent that is never steered: the take before each model call.

    cd /work/main && .venv/bin/python -m benchmarks.steer_take [--backends sqlite,postgres]

An agent on a thread makes --turns model calls, a tool call each but the last, against a
scripted in-process model (so what is timed is runwright's own work per turn); once as
shipped (a take of pending steers, a store round trip finding none, before each call),
once with that take left out. Each variant runs --rounds times, alternating; the best of
each is printed, per turn. It asserts nothing. The worker it runs is in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import runwright as rw
from runwright.agents import _loop
from runwright.testing import ScriptedModel, call

from . import common
from .common import say

NAME = "steer_take"
RUN_TIMEOUT_S = 600.0

COUNTS = [
    common.Count("--turns", 60, "model calls of the agent's run", at_least=2),
    common.Count("--rounds", 5, "runs of each variant (the best is printed)", at_least=1),
]


def noop(i: int) -> str:
    """Do nothing."""
    return "ok"


def with_tasks(target: rw.App) -> rw.App:
    target.tool(noop)
    return target


app = with_tasks(rw.App())


@dataclass
class Figures:
    backend: str
    with_take_ms: float | None = None  # per turn, as shipped
    without_ms: float | None = None  # per turn, the take left out
    notes: list[str] = field(default_factory=list)


async def no_steers(ctx: Any) -> list[Any]:
    return []


async def run_ms(bench: rw.App, agent: Any, take: bool) -> float:
    shipped = _loop.take_steers
    _loop.take_steers = shipped if take else no_steers  # type: ignore[assignment]
    try:
        began = time.perf_counter()
        handle = await bench.submit(agent, input="go", thread=agent.name)
        await asyncio.wait_for(handle.result(timeout_s=RUN_TIMEOUT_S), RUN_TIMEOUT_S)
        return (time.perf_counter() - began) * 1000
    finally:
        _loop.take_steers = shipped


async def measure(bench: rw.App, args: argparse.Namespace, figures: Figures) -> None:
    # Every run's agent (its script is used up by one run) is declared before the worker
    # starts: a worker runs the tasks its app had when it started.
    agents = {(round_, take): bench.agent(
        f"a{round_}{int(take)}", tools=["noop"], max_turns=args.turns + 1,
        model=ScriptedModel(*[call("noop", i=i) for i in range(args.turns - 1)], "done"))
        for round_ in range(args.rounds) for take in (True, False)}
    worker = bench.worker(concurrency=1)
    running = asyncio.create_task(worker.run())
    try:
        times: dict[bool, list[float]] = {True: [], False: []}
        for (_, take), agent in agents.items():
            times[take].append(await run_ms(bench, agent, take) / args.turns)
        figures.with_take_ms, figures.without_ms = min(times[True]), min(times[False])
        say(figures.backend, f"per turn, best of {args.rounds}: {figures.with_take_ms:.2f} ms with the "
                             f"take, {figures.without_ms:.2f} ms without")
    finally:
        worker.stop()
        await running


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend)
    async with common.backend_session(figures, NAME, with_tasks, 1, tmp, args.pg_url) as session:
        await session.bench.open()
        await measure(session.bench, args, figures)
    return figures


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} ms"


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        ("per turn, with the take", lambda f: ms(f.with_take_ms)),
        ("per turn, without", lambda f: ms(f.without_ms)),
    ]
    return common.render_table(f"turns {args.turns}, best of {args.rounds}", rows, all_figures)


if __name__ == "__main__":
    args = common.parse_benchmark_args(__doc__, COUNTS)
    common.run_main(common.bench_all(args, bench_backend, summary))
