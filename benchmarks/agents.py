"""Agent benchmark: what runwright adds to each turn of an agent's tool loop, and how many
agent runs per second two worker processes finish, against a model that answers at once.

    cd /work/main && .venv/bin/python -m benchmarks.agents [--backends sqlite,postgres]

It prints figures; it asserts nothing. The worker processes it starts import this module
(`benchmarks.agents:app`), so the module-level `app` must stay importable without side
effects.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import multiprocessing
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable

import openai

import runwright as rw
from runwright.store._params import RunCountParams
from tests.agents.scripted_openai import Reply, ScriptedOpenAI, call

from . import common
from .common import BenchError, ProblemLog, Workers, event_loop_runner, num, pair, say

NAME = "agents"  # the workers load benchmarks.agents:app; PostgreSQL's schema is bench_agents_<pid>
AGENT = "bench_agent"
MODEL_NAME = "bench-instant"  # priced at nothing: no price entry, so no cost is computed
ROUNDS = 7  # timed rounds (runs and model-alone conversations) whose median is taken
MAX_TURNS = 10_000  # the agent's own bound: never what ends a benchmark run
RUN_TIMEOUT_S = 60.0
WORKERS = 2

# The command line: --backends and --pg-url, and these, in the order --help lists them.
COUNTS = [
    common.Count("--turns", 20, "tool turns per timed run", at_least=1),
    common.Count("--runs", 500, "agent runs for the throughput phase", at_least=1),
    common.Count("--concurrency", 50, "runs at once per worker process in the throughput phase", at_least=1),
    common.Count("--interrupts", 20, "runs cut mid-model-call by a newer message", at_least=1),
]
SLOW_INPUT = "slow"  # a run with this input meets a model that answers only after SLOW_S
SLOW_S = 600.0
INTERRUPT_TIMEOUT_S = 30.0


def noop() -> str:
    """Do nothing: the tool costs only its journaling."""
    return "ok"


def with_agent(target: rw.App) -> rw.App:
    """Register the trivial tool and the agent. The model's endpoint is read from
    OPENAI_BASE_URL now: set it first for an app that will run the agent."""
    tool = target.tool(noop)
    target.agent(AGENT, model=f"openai:{MODEL_NAME}", tools=[tool], max_turns=MAX_TURNS, retries=0)
    return target


# The app the worker processes load: `--url` sets their RUNWRIGHT_URL before they import
# us, and they inherit OPENAI_BASE_URL from the benchmark.
app = with_agent(rw.App())


@dataclass
class Figures:
    backend: str
    turns: int
    run_ms: tuple[float, float] | None = None  # median run of (0, --turns turns)
    model_ms: tuple[float, float] | None = None  # the same model calls alone
    overhead_us: float | None = None  # per turn
    runs_per_s: float | None = None
    bare_runs_per_s: float | None = None  # the same model calls, without runwright
    interrupt_ms: tuple[float, float] | None = None  # interrupt to the newer run's start, p50/p99
    interrupted_answer_ms: tuple[float, float] | None = None  # ... to its answer
    notes: list[str] = field(default_factory=list)


# -- the model: a scripted server in a process of its own -------------------------------

def instant_model(body: dict[str, Any], index: int) -> Reply:
    """Ask for `noop` until the conversation holds as many tool results as the user's
    message says (the run's input is its number of turns), then answer. It depends on
    the request only, so any worker gets the reply that fits its run."""
    last = body["messages"][-1]["content"]
    if last == SLOW_INPUT:
        return Reply(content="too late", delay_s=SLOW_S)
    if last == "hi":
        return Reply(content="hello")
    wanted = int(next(m["content"] for m in body["messages"] if m["role"] == "user"))
    done = sum(1 for m in body["messages"] if m["role"] == "tool")
    if done < wanted:
        return Reply(tool_calls=[call("noop", {}, f"c{done}")])
    return Reply(content="done")


def model_process(urls: Any, stop: Any) -> None:
    """Serve `instant_model` until `stop` is set: in a process of its own, so that the
    server's threads do not compete with the engine for this process's GIL."""
    with ScriptedOpenAI(instant_model) as server:
        urls.put(server.base_url)
        stop.wait()


@contextlib.asynccontextmanager
async def model_server() -> AsyncIterator[str]:
    """The base URL of `model_process`, stopped on leaving. Spawned, not forked: this
    process holds an event loop."""
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


# -- 1. engine overhead per turn ---------------------------------------------------------

async def model_alone(client: openai.AsyncOpenAI, schemas: list[dict[str, Any]], turns: int) -> float:
    """Seconds for the model calls an agent run of `turns` turns makes, made directly with
    the SDK, as a hand-written loop would: the same conversation, nothing journaled."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": str(turns)}]
    t0 = time.perf_counter()
    while True:
        response = await client.chat.completions.create(model=MODEL_NAME, messages=messages,
                                                        tools=schemas)
        reply = response.choices[0].message
        if not reply.tool_calls:
            return time.perf_counter() - t0
        messages.append(assistant_message(reply))
        for tool_call in reply.tool_calls:
            messages.append({"role": "tool", "tool_call_id": tool_call.id, "content": noop()})


def assistant_message(reply: Any) -> dict[str, Any]:
    """The reply as the agent puts it in the history: `content` always present (None with
    tool calls). The same shape matters: the SDK's cost of building a request depends on
    it (an explicit None costs it more), and that cost is the model's, to subtract."""
    return {"role": "assistant", "content": reply.content,
            "tool_calls": [{"id": c.id, "type": "function",
                            "function": {"name": c.function.name, "arguments": c.function.arguments}}
                           for c in reply.tool_calls]}


async def agent_run_ms(bench: rw.App, turns: int) -> float:
    """Claim to durable finish of one run, as the store recorded them: no wake-up latency."""
    handle = await bench.submit(AGENT, input=str(turns))
    await handle.result(timeout_s=RUN_TIMEOUT_S)  # raises if the run failed
    return (handle.run.finished_at - handle.run.started_at) * 1000


async def measure_turns(bench: rw.App, base_url: str, figures: Figures) -> None:
    """Runs of 0 and of N turns, each followed by the same conversation with the SDK alone.
    A round gives (run N - model N) - (run 0 - model 0): the engine's time for N turns,
    without the model's and without what every run costs once (claim, finish, the final
    answer). The overhead of a turn is the median over ROUNDS rounds, divided by N;
    pairing within a round keeps a drift of the machine's load out of the difference.
    The first round warms connections and caches up and is not counted."""
    turns = figures.turns
    sdk = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
    schemas = [bench.tools["noop"].schema()]
    rounds: list[dict[str, float]] = []
    try:
        for i in range(ROUNDS + 1):
            timed = {}
            for n in (0, turns):
                timed[f"run{n}"] = await agent_run_ms(bench, n)
                timed[f"model{n}"] = await model_alone(sdk, schemas, n) * 1000
            if i > 0:
                rounds.append(timed)
    finally:
        await sdk.close()

    def median(key: str) -> float:
        return statistics.median(r[key] for r in rounds)

    figures.run_ms = (median("run0"), median(f"run{turns}"))
    figures.model_ms = (median("model0"), median(f"model{turns}"))
    engine_ms = [(r[f"run{turns}"] - r[f"model{turns}"]) - (r["run0"] - r["model0"]) for r in rounds]
    figures.overhead_us = statistics.median(engine_ms) / turns * 1000
    say(figures.backend, "run of 0 / {} turns {:.2f} / {:.2f} ms; the model alone {:.2f} / {:.2f} ms"
        .format(turns, *figures.run_ms, *figures.model_ms))
    say(figures.backend, f"engine overhead: {figures.overhead_us:,.0f} µs per turn "
                         f"(2 journaled steps and a model event; median of {ROUNDS} rounds)")


async def with_worker(bench: rw.App, base_url: str, figures: Figures) -> None:
    """The turn phase, on a worker in this process; what it logs at WARNING or above
    becomes notes."""
    worker = bench.worker(concurrency=4)
    with ProblemLog("the in-process worker") as problems:
        running = asyncio.create_task(worker.run())
        try:
            await measure_turns(bench, base_url, figures)
        finally:
            worker.stop()
            await running
    figures.notes.extend(problems.problems())


# -- 2. agent runs per second, worker processes -----------------------------------------

async def measure_throughput(bench: rw.App, workers: Workers, runs: int, figures: Figures) -> None:
    """Start the workers, wait until they are up, then submit `runs` one-tool runs in one
    batch; the rate is runs over first claim to last finish, as the store recorded them."""
    workers.start(WORKERS)
    await wait_for(lambda: workers_up(workers) == WORKERS, f"{WORKERS} workers up")
    ended_before = await ended_count(bench)  # the turn phase's runs
    handles = await bench.submit_many(AGENT, [{"input": "1"}] * runs)

    async def all_ended() -> bool:
        return await ended_count(bench) >= ended_before + runs

    await wait_for(all_ended, f"{runs} agent runs end")
    ended = await bench.store.run_get_many([h.id for h in handles])
    failed = [r for r in ended if r.state is not rw.RunState.SUCCEEDED]
    if failed:
        figures.notes.append(f"{len(failed)} runs did not succeed, e.g. {failed[0].error}")
    span_s = max(r.finished_at for r in ended) - min(r.started_at for r in ended)
    figures.runs_per_s = len(ended) / span_s
    say(figures.backend, f"{len(ended)} agent runs (model, tool, model) by {WORKERS} worker "
                         f"processes of concurrency {workers.concurrency}: "
                         f"{figures.runs_per_s:,.0f} runs/s ({2 * figures.runs_per_s:,.0f} model calls/s)")


# -- 3. an interrupt cutting a slow model call ------------------------------------------

async def measure_interrupts(bench: rw.App, count: int, figures: Figures) -> None:
    """A run on a thread waits on a model that answers after SLOW_S; a newer message
    with on_busy="interrupt" must not wait for it. Timed from the newer submission to its
    run's start (the cut run has ended and freed the thread) and to its answer."""
    starts, answers = [], []
    for i in range(count):
        thread = f"interrupt-{i}"
        slow = await bench.submit(AGENT, input=SLOW_INPUT, thread=thread)
        await wait_for(lambda: _history_loaded(bench, slow.id), "the slow run calls its model")
        t0 = bench.now()
        newer = await bench.submit(AGENT, input="hi", thread=thread, on_busy="interrupt")
        await asyncio.wait_for(newer.result(), INTERRUPT_TIMEOUT_S)
        answered = bench.now()
        run = await newer.refresh()
        assert run.started_at is not None
        starts.append((run.started_at - t0) * 1000)
        answers.append((answered - t0) * 1000)
    figures.interrupt_ms = (statistics.median(starts), common.p99(starts))
    figures.interrupted_answer_ms = (statistics.median(answers), common.p99(answers))
    say(figures.backend, "interrupt of a model call in flight -> newer run started p50 {:.0f} ms "
                         "p99 {:.0f} ms, answered p50 {:.0f} ms p99 {:.0f} ms".format(
                             *figures.interrupt_ms, *figures.interrupted_answer_ms))


async def _history_loaded(bench: rw.App, run_id: int) -> bool:
    """The run journaled its thread history: its model call is the next thing it does."""
    return any(s.name == "thread:history" for s in await bench.store.step_list(run_id))


def bare_client_process(base_url: str, runs: int, concurrency: int, ready: Any, go: Any,
                        out: Any) -> None:
    """Child: the model calls of `runs` agent runs made with the SDK alone, `concurrency`
    at once, as a worker process would make them without runwright. Puts the seconds from
    `go` to the last reply (or the error that stopped it)."""

    async def conversations() -> float:
        sdk = openai.AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0)
        schemas = [app.tools["noop"].schema()]
        slots = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with slots:
                await model_alone(sdk, schemas, 1)

        try:
            await asyncio.gather(*[one() for _ in range(concurrency)])  # open the connections
            ready.release()
            await asyncio.to_thread(go.wait)
            t0 = time.perf_counter()
            await asyncio.gather(*[one() for _ in range(runs)])
            return time.perf_counter() - t0
        finally:
            await sdk.close()

    try:
        with event_loop_runner() as runner:
            out.put(runner.run(conversations()))
    except Exception as exc:  # reported by the parent, not lost in a child's stderr
        out.put(f"{type(exc).__name__}: {exc}")


async def measure_bare(base_url: str, runs: int, concurrency: int, figures: Figures) -> None:
    """The ceiling the model server and the SDK set: WORKERS processes make the model calls
    of `runs` runs between them, with nothing journaled; started together."""
    ctx = multiprocessing.get_context("spawn")  # not forked: this process holds an event loop
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    share = runs // WORKERS
    clients = [ctx.Process(target=bare_client_process, daemon=True,
                           args=(base_url, share, concurrency, ready, go, out))
               for _ in range(WORKERS)]
    for client in clients:
        client.start()
    try:
        for _ in clients:
            if not await asyncio.to_thread(ready.acquire, True, RUN_TIMEOUT_S):
                raise BenchError("bare clients: not ready in time")
        go.set()
        elapsed = [await asyncio.to_thread(out.get, True, RUN_TIMEOUT_S) for _ in clients]
    finally:
        for client in clients:
            client.join(5)
            if client.is_alive():
                client.kill()
    errors = [e for e in elapsed if isinstance(e, str)]
    if errors:
        raise BenchError(f"bare clients: {errors[0]}")
    figures.bare_runs_per_s = share * WORKERS / max(elapsed)
    say(figures.backend, f"the same model calls without runwright ({WORKERS} processes of the SDK "
                         f"alone): {figures.bare_runs_per_s:,.0f} runs/s")


async def ended_count(bench: rw.App) -> int:
    counts = await bench.store.run_count_by_state(RunCountParams())
    return sum(counts.get(state.value, 0) for state in rw.TERMINAL_STATES)


def workers_up(workers: Workers) -> int:
    """How many of the started workers logged that they are up (registered, listening)."""
    return sum("worker started" in log.read_text(errors="replace")
               for log in workers.log_dir.glob("worker-*.log"))


async def wait_for(check: Callable[[], Any | Awaitable[Any]], what: str,
                   timeout_s: float = RUN_TIMEOUT_S) -> None:
    deadline = time.perf_counter() + timeout_s
    while True:
        value = check()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return
        if time.perf_counter() > deadline:
            raise BenchError(f"{what}: not after {timeout_s:.0f} s")
        await asyncio.sleep(0.02)


# -- one backend, start to end ----------------------------------------------------------

async def bench_backend(backend: str, args: argparse.Namespace, tmp: Path, base_url: str) -> Figures:
    figures = Figures(backend, args.turns)
    async with common.backend_session(figures, NAME, with_agent, args.concurrency, tmp,
                                      args.pg_url) as session:
        await session.bench.open()
        await with_worker(session.bench, base_url, figures)
        await measure_bare(base_url, args.runs, args.concurrency, figures)
        await measure_throughput(session.bench, session.workers, args.runs, figures)
        await measure_interrupts(session.bench, args.interrupts, figures)
    return figures


# -- report -----------------------------------------------------------------------------

def per_call(f: Figures) -> str:
    """The model's round trip: the N-turn conversation alone over its N + 1 calls."""
    return "-" if f.model_ms is None else f"{f.model_ms[1] / (f.turns + 1) * 1000:,.0f} µs"


def summary(all_figures: list[Figures], args: argparse.Namespace) -> str:
    rows = [
        (f"run of 0 / {args.turns} turns", lambda f: pair(f.run_ms, "ms")),
        ("  the model alone", lambda f: pair(f.model_ms, "ms")),
        ("  model round trip", per_call),
        ("engine overhead per turn", lambda f: num(f.overhead_us, "µs")),
        (f"agent runs/s, {WORKERS} workers", lambda f: num(f.runs_per_s, "/s")),
        ("  model calls alone", lambda f: num(f.bare_runs_per_s, "runs/s")),
        ("interrupt -> newer run starts", lambda f: pair(f.interrupt_ms, "ms")),
        ("interrupt -> newer run answers", lambda f: pair(f.interrupted_answer_ms, "ms")),
    ]
    header = f"turns {args.turns}, runs {args.runs}, worker concurrency {args.concurrency}"
    return common.render_table(header, rows, all_figures)


async def main(args: argparse.Namespace) -> None:
    """The benchmark, with the model server up for all the backends (it is the same
    server for each, so their figures compare)."""
    async with model_server() as base_url:
        # The agent in this process and the workers it starts find the model through these.
        os.environ["OPENAI_BASE_URL"] = base_url
        os.environ["OPENAI_API_KEY"] = "bench"
        await common.bench_all(args, functools.partial(bench_backend, base_url=base_url), summary)


if __name__ == "__main__":
    common.run_main(main(common.parse_benchmark_args(__doc__, COUNTS)))
