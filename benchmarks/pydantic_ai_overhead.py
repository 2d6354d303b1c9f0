"""Pydantic AI overhead: what RunwrightAgent adds to each model request and each tool call
of a Pydantic AI agent, against the same agent run plainly, with a model that answers at once.

    cd /work/main && .venv/bin/python -m benchmarks.pydantic_ai_overhead [--backends sqlite,postgres]

It prints figures; it asserts nothing. Each round times, one after the other, the same
agent (Pydantic AI's OpenAI chat model on the scripted server, a tool that does nothing)
run plainly in this process and run durably by a worker in this process, for conversations
of 0 and N turns of one tool call each, and of N turns of two tool calls each. Per model
request: ((durable - plain) at N turns of one call - the same at 0 turns) / N, less the
tool call's share; per tool call: the difference between the two- and the one-call runs,
per turn. Pairing within a round keeps a drift of the machine's load out of the
differences; the medians over the rounds are reported.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator

import runwright as rw
from tests.agents.scripted_openai import Reply, ScriptedOpenAI, call

from . import common
from .common import ProblemLog, say

NAME = "pyd"  # PostgreSQL's schema is bench_pyd_<pid>
MODEL_NAME = "bench-instant"  # unpriced: no cost computed
RUN_TIMEOUT_S = 60.0
COUNTS = [
    common.Count("--turns", 20, "tool turns per timed run", at_least=1),
    common.Count("--rounds", 15, "timed rounds whose median is taken", at_least=1),
]
SHAPES = ("0:1", "N:1", "N:2")  # turns:tool calls per turn


def instant_model(body: dict[str, Any], index: int) -> Reply:
    """The user's message is `turns:calls`: ask for `calls` noops a turn, `turns` times, then
    answer. It depends on the request only."""
    turns, calls = (int(part) for part in body["messages"][0]["content"].split(":"))
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done < turns * calls:
        return Reply(tool_calls=[call("noop", {}, f"c{done + i}") for i in range(calls)])
    return Reply(content="done")


def model_process(urls: Any, stop: Any) -> None:
    """The model server, in a process of its own: its threads do not compete with the
    engine for this process's GIL."""
    with ScriptedOpenAI(instant_model) as server:
        urls.put(server.base_url)
        stop.wait()


@contextlib.asynccontextmanager
async def model_server() -> AsyncIterator[str]:
    ctx = multiprocessing.get_context("spawn")
    urls, stop = ctx.Queue(), ctx.Event()
    model = ctx.Process(target=model_process, args=(urls, stop), daemon=True)
    model.start()
    try:
        yield await asyncio.to_thread(urls.get, True, 30)
    finally:
        stop.set()
        model.join(5)
        if model.is_alive():
            model.kill()


def bench_agent(base_url: str) -> Any:
    import openai
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    client = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    model = OpenAIChatModel(MODEL_NAME, provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, name="bench_pyd")

    @agent.tool_plain
    def noop() -> str:
        """Do nothing: the call costs only its journaling."""
        return "ok"

    return agent


@dataclass
class Figures:
    backend: str
    turns: int
    plain_ms: dict[str, float] = field(default_factory=dict)
    durable_ms: dict[str, float] = field(default_factory=dict)
    turn_us: float | None = None  # a turn: one model request and one tool call
    model_us: float | None = None
    tool_us: float | None = None
    notes: list[str] = field(default_factory=list)


async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path, base_url: str) -> Figures:
    from runwright.integrations.pydantic_ai import RunwrightAgent

    figures = Figures(backend, args.turns)
    schema = f"bench_{NAME}_{os.getpid()}"
    url = common.store_url(backend, tmp, args.pg_url, schema)
    agent = bench_agent(base_url)
    app = rw.App(url)
    task = RunwrightAgent(agent, max_turns=10_000).register(app, retries=0)
    shapes = {shape: shape.replace("N", str(args.turns)) for shape in SHAPES}
    rounds: list[dict[str, float]] = []
    try:
        await app.open()
        with ProblemLog(backend) as problems:
            worker = app.worker(concurrency=1, poll_s=0.05)
            ready = asyncio.Event()
            running = asyncio.create_task(worker.run(ready=lambda _w: ready.set()))
            await ready.wait()
            try:
                for i in range(args.rounds + 1):  # the first round warms up and is not counted
                    timed: dict[str, float] = {}
                    for shape, prompt in shapes.items():
                        t0 = time.perf_counter()
                        await agent.run(prompt)
                        timed[f"plain {shape}"] = (time.perf_counter() - t0) * 1000
                        handle = await app.submit(task, prompt=prompt)
                        await handle.result(timeout_s=RUN_TIMEOUT_S)
                        timed[f"durable {shape}"] = (handle.run.finished_at - handle.run.started_at) * 1000
                    if i > 0:
                        rounds.append(timed)
            finally:
                worker.stop()
                await running
            figures.notes += problems.problems()
    finally:
        await app.close()
        await agent.model.client.close()
        if backend == "postgres":
            await common.drop_schema(args.pg_url, schema, figures.notes)
        elif backend == "redis":
            await common.drop_namespace(schema, figures.notes)

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    def added(r: dict[str, float], shape: str) -> float:
        return r[f"durable {shape}"] - r[f"plain {shape}"]

    turns = args.turns
    for shape in SHAPES:
        figures.plain_ms[shape] = median(f"plain {shape}")
        figures.durable_ms[shape] = median(f"durable {shape}")
    # Per turn of one call: a model request and a tool call; of two calls: one more tool call.
    per_turn = statistics.median((added(r, "N:1") - added(r, "0:1")) / turns * 1000 for r in rounds)
    figures.tool_us = statistics.median((added(r, "N:2") - added(r, "N:1")) / turns * 1000 for r in rounds)
    figures.turn_us = per_turn
    figures.model_us = per_turn - figures.tool_us
    for shape in SHAPES:
        say(backend, f"{shape.replace('N', str(turns)):>6} (turns:calls)  plain "
                     f"{figures.plain_ms[shape]:8.2f} ms   durable {figures.durable_ms[shape]:8.2f} ms")
    say(backend, f"overhead: {figures.turn_us:,.0f} µs per turn (a model request and a tool call): "
                 f"{figures.model_us:,.0f} µs per model request, {figures.tool_us:,.0f} µs per tool call "
                 f"(medians of {args.rounds} rounds)")
    return figures


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    lines = [f"RunwrightAgent over plain Pydantic AI, model answering at once, {args.turns} turns:",
             f"{'backend':<10} {'µs/turn':>9} {'µs/model request':>18} {'µs/tool call':>14}"]
    for f in all_figures:
        lines.append(f"{f.backend:<10} {f.turn_us or 0:>9,.0f} {f.model_us or 0:>18,.0f} "
                     f"{f.tool_us or 0:>14,.0f}")
        lines += [f"  note: {note}" for note in f.notes]
    return "\n".join(lines)


async def main(args: argparse.Namespace) -> None:
    async with model_server() as base_url:
        async def one(backend: str, args: argparse.Namespace, tmp: Path) -> Figures:
            return await bench_backend(backend, args, tmp, base_url)

        await common.bench_all(args, one, summary)


if __name__ == "__main__":
    common.run_main(main(common.parse_benchmark_args(__doc__, COUNTS,
                                                     default_backends=["sqlite", "postgres"])))
