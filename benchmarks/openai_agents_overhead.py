"""OpenAI Agents SDK benchmark: what running an SDK agent durably on runwright adds to each
model call and to each tool call, against a model that answers at once.

    cd /work/main && .venv/bin/python -m benchmarks.openai_agents_overhead [--backends sqlite,postgres]

It prints figures; it asserts nothing. The same agent runs plain (`Runner.run`) and durable
(`run_durably` inside a task, on an in-process worker of each backend), timed inside the
task so that a run's claim is not counted. Two shapes of run separate the two costs: one
whose every turn hands off (a model call and no tool call: no step but the model's), one
whose every turn calls a tool (a model call and a tool call), each run plain then durable
in turn. Per model call: what durable adds to the handoff run (the median, over the
rounds, of a durable run less the plain run just before it) over its model calls; per tool
call: what it adds to the tool run beyond that, over its tool calls. The SDK's trace
export is off (no network). The model server runs in a process of its own (as in
agents.py). On a loaded machine the figures move from one run to the next:
read them as an order of size.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import multiprocessing
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI

import runwright as rw
from runwright.integrations.openai_agents import run_durably
from tests.agents.scripted_openai import Reply, ScriptedOpenAI, call

from . import common
from .common import num, say

ROUNDS = 15  # timed runs of each kind whose median is taken (after one to warm up)
RUN_TIMEOUT_S = 120.0
COUNTS = [common.Count("--turns", 20, "model calls (and tool calls) per timed run", at_least=1)]


@function_tool
def noop() -> str:
    """Do nothing: the tool costs only what runs around it."""
    return "ok"


def instant_model(turns: int, body: dict[str, Any], index: int) -> Reply:
    """Each request asks for a tool (or a handoff) until `turns` of them, then answers."""
    made = sum(1 for m in body["messages"] if m["role"] == "tool")
    if made >= turns:
        return Reply(content="done")
    hand_off = any(t["function"]["name"].startswith("transfer_to_") for t in body.get("tools") or ())
    return Reply(tool_calls=[call("transfer_to_relay" if hand_off else "noop", {}, f"c{made}")])


def model_process(turns: int, urls: Any, stop: Any) -> None:
    """Serve `instant_model` until `stop` is set: in a process of its own, so that the
    server's threads do not compete with the runs for this process's GIL."""
    with ScriptedOpenAI(functools.partial(instant_model, turns)) as server:
        urls.put(server.base_url)
        stop.wait()


@contextlib.asynccontextmanager
async def model_server(turns: int) -> AsyncIterator[str]:
    """The base URL of `model_process`, stopped on leaving (spawned: this process holds an
    event loop)."""
    ctx = multiprocessing.get_context("spawn")
    urls, stop = ctx.Queue(), ctx.Event()
    model = ctx.Process(target=model_process, args=(turns, urls, stop), daemon=True)
    model.start()
    try:
        yield await asyncio.to_thread(urls.get, True, 30)
    finally:
        stop.set()
        model.join(5)
        if model.is_alive():
            model.kill()


def agents_on(client: AsyncOpenAI) -> tuple[Agent[Any], Agent[Any]]:
    """(an agent that calls `noop`, an agent that hands off to itself)."""
    model = OpenAIChatCompletionsModel(model="bench-instant", openai_client=client)
    relay: Agent[Any] = Agent(name="relay", model=model)
    relay.handoffs = [relay]
    return Agent(name="tooler", model=model, tools=[noop]), relay


@dataclass
class Figures:
    backend: str
    turns: int
    plain_ms: dict[str, float] = field(default_factory=dict)  # median run, by shape
    durable_ms: dict[str, float] = field(default_factory=dict)
    per_model_call_us: float | None = None
    per_tool_call_us: float | None = None
    notes: list[str] = field(default_factory=list)


async def medians_ms(plain: Callable[[], Awaitable[float]],
                     durable: Callable[[], Awaitable[float]]) -> tuple[float, float, float]:
    """Median ms of each, and the median of what durable added to the plain run just
    before it: the two are taken in turn, so a loaded machine's drift hits both alike."""
    await plain()  # warm-up: connections, imports, the SDK's first-call caches
    await durable()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(ROUNDS):
        times[0].append(await plain())
        times[1].append(await durable())
    added = statistics.median(d - p for p, d in zip(*times))
    return statistics.median(times[0]) * 1000, statistics.median(times[1]) * 1000, added * 1000


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
    figures = Figures(backend, args.turns)
    schema = f"bench_oai_{int(time.time())}"
    url = common.store_url(backend, tmp, args.pg_url, schema)
    async with model_server(args.turns) as base_url:
        client = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        tooler, relay = agents_on(client)
        app = rw.App(url)

        @app.task(retries=0)
        async def timed(ctx: rw.Context, shape: str) -> float:
            began = time.perf_counter()
            await run_durably(ctx, tooler if shape == "tool" else relay, "go", max_turns=args.turns + 5)
            return time.perf_counter() - began

        async def plain(agent: Agent[Any]) -> float:
            began = time.perf_counter()
            await Runner.run(agent, "go", max_turns=args.turns + 5)
            return time.perf_counter() - began

        async def durable(shape: str) -> float:
            handle = await app.submit(timed, shape=shape)
            return float(await handle.result(timeout_s=RUN_TIMEOUT_S))

        try:
            await app.open()
            worker = app.worker(poll_s=0.05)
            running = asyncio.create_task(worker.run())
            added: dict[str, float] = {}
            try:
                for shape, agent in (("handoff", relay), ("tool", tooler)):
                    figures.plain_ms[shape], figures.durable_ms[shape], added[shape] = await medians_ms(
                        lambda: plain(agent), lambda: durable(shape))
                    plain_ms, durable_ms = figures.plain_ms[shape], figures.durable_ms[shape]
                    say(backend, f"{shape} run of {args.turns} turns: plain {plain_ms:.1f} ms, "
                                 f"durable {durable_ms:.1f} ms")
            finally:
                worker.stop()
                await running
            model_calls = args.turns + 1
            figures.per_model_call_us = added["handoff"] / model_calls * 1000
            figures.per_tool_call_us = (added["tool"] - added["handoff"]) / args.turns * 1000
        except Exception as exc:  # a figure to report, not a reason to stop
            figures.notes.append(f"stopped early: {type(exc).__name__}: {exc}")
            say(backend, figures.notes[-1])
        finally:
            await client.close()
            await app.close()
            if backend == "postgres":
                await common.drop_schema(args.pg_url, schema, figures.notes)
            elif backend == "redis":
                await common.drop_namespace(schema, figures.notes)
    return figures


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    def ms(shape: str, which: str) -> Callable[[Figures], str]:
        def cell(f: Figures) -> str:
            value = getattr(f, which).get(shape)
            return "-" if value is None else f"{value:.1f} ms"
        return cell

    return common.render_table(f"OpenAI Agents SDK, durable vs plain, {args.turns} turns a run, "
                               f"median of {ROUNDS}", [
        ("handoff run, plain", ms("handoff", "plain_ms")),
        ("handoff run, durable", ms("handoff", "durable_ms")),
        ("tool run, plain", ms("tool", "plain_ms")),
        ("tool run, durable", ms("tool", "durable_ms")),
        ("added per model call", lambda f: num(f.per_model_call_us, "us")),
        ("added per tool call", lambda f: num(f.per_tool_call_us, "us")),
    ], all_figures)


async def main() -> None:
    set_tracing_disabled(True)
    args = common.parse_benchmark_args(__doc__ or "", COUNTS, default_backends=("sqlite", "postgres"))
    await common.bench_all(args, bench_backend, summary)


if __name__ == "__main__":
    common.run_main(main())
