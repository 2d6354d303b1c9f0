"""Payload codecs benchmark: what zstd and AES-GCM cost and save, beside plain JSON
measured in the same run.

    cd /work/main && .venv/bin/python -m benchmarks.payload_codecs [--runs 1000] [--rounds 3]
        [--stored-runs 200]

Prints, and asserts nothing:
- one ~100 KB agent history (messages, tool calls, tool results): its stored bytes plain,
  zstd, zstd+AES-GCM, zstd+offload (a file blob store), and the microseconds of CPU to seal
  and open it (median of 50), with the wall time of the offloaded seal (its fsync) too;
- a SQLite database after `--stored-runs` agent runs whose histories are of a few KB to a
  few hundred KB (the history as arguments, the history grown by a turn as the result, a
  journaled model step, an emitted event), per codec setting, extrapolated to 10,000 runs;
  with offloading, the blob store's bytes beside the database's;
- a short drain on SQLite (`--runs` pre-submitted agent-like runs with 2 KB payloads, one
  in-process worker at concurrency 100), plain against zstd+AES-GCM, rounds interleaved:
  median seconds and the codec's cost per run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import runwright as rw
from runwright.core._payloads import install_keys, load
from runwright.tasks._limits import Limits

KEY_ID = "bench"
KEY = os.urandom(32)
SETTINGS: dict[str, rw.Codecs | None] = {
    "plain": None,
    "zstd": rw.Codecs(compress_over=1024),
    "zstd+aes": rw.Codecs(compress_over=1024, keys={KEY_ID: KEY}, encrypt_with=KEY_ID),
}
# Offloading: stored bytes (after zstd) of at least this many go to the blob store. Lower
# than a deployment's likely 256 KB, so that the mix of sizes below shows it at all.
OFFLOAD_OVER = 16 * 1024
# The histories of the stored-size runs, cycled: a few KB to a few hundred KB of JSON.
RUN_SIZES = (3_000, 10_000, 30_000, 100_000, 300_000)


def offloading(blobs: Path, encrypt: bool = False) -> rw.Codecs:
    return rw.Codecs(compress_over=1024, keys={KEY_ID: KEY}, encrypt_with=KEY_ID if encrypt else None,
                     offload_over=OFFLOAD_OVER, blobs=f"file://{blobs}")
WORDS = ("the model called the search tool with a query about quarterly revenue and the tool returned "
         "a list of documents each with a title url snippet and score then the assistant summarised "
         "them for the user who asked a follow up question about margins costs forecasts risks and "
         "the next steps of the plan including dates owners budgets and open issues").split()


def history(target_bytes: int, seed: int = 7) -> list[dict[str, Any]]:
    """An agent's conversation of about `target_bytes` of JSON: user and assistant turns,
    tool calls with JSON arguments, tool results with repeated keys (as real ones have)."""
    rnd = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a careful analyst."}]
    size = 0
    while size < target_bytes:
        turn = len(messages)
        text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(20, 80)))
        call = {"id": f"call_{turn:05d}", "type": "function",
                "function": {"name": "search", "arguments": f'{{"query": "{text[:60]}", "limit": 5}}'}}
        result = [{"title": " ".join(rnd.choice(WORDS) for _ in range(6)),
                   "url": f"https://ex.com/{rnd.random():.8f}", "score": round(rnd.random(), 4),
                   "snippet": " ".join(rnd.choice(WORDS) for _ in range(25))} for _ in range(3)]
        new = [{"role": "user", "content": text},
               {"role": "assistant", "content": None, "tool_calls": [call]},
               {"role": "tool", "tool_call_id": call["id"], "content": str(result)}]
        messages += new
        size += len(str(new))
    return messages


def per_payload(value: Any, tmp: Path) -> None:
    install_keys(SETTINGS["zstd+aes"])
    settings = {**SETTINGS, "zstd+offload": offloading(tmp / "per-payload-blobs")}
    install_keys(settings["zstd+offload"])
    print(f"one agent history ({len(value)} messages, {len(str(value)) // 1024} KB; offloaded when "
          f"{OFFLOAD_OVER // 1024} KB or more after zstd):")
    for name, codecs in settings.items():
        limits = Limits(codecs=codecs)
        text = limits.payload(value, "history")
        seal = _median_us(lambda: limits.payload(value, "history"))
        opened = _median_us(lambda: load(text))
        wall = _median_us(lambda: limits.payload(value, "history"), clock=time.perf_counter)
        print(f"  {name:12s} {len(text.encode()):>8,d} bytes in the row  seal {seal:8.0f} us CPU "
              f"({wall:6.0f} us wall)  open {opened:8.0f} us CPU")


def _median_us(fn: Any, times: int = 50, clock: Any = time.thread_time) -> float:
    """Microseconds of this thread's CPU (steadier than wall time on a loaded machine)."""
    took = []
    for _ in range(times):
        start = clock()
        fn()
        took.append(clock() - start)
    return statistics.median(took) * 1e6


def _app(url: str, codecs: rw.Codecs | None) -> rw.App:
    app = rw.App(url, codecs=codecs, builtin_jobs=False)

    @app.task(retries=0)
    async def agent(ctx: rw.Context, messages: list[dict[str, Any]]) -> dict[str, Any]:
        answer = await ctx.step("model", lambda: {"role": "assistant",
                                                  "content": " ".join(WORDS[:40])})
        await ctx.emit("turn", {"messages": len(messages), "answer": answer["content"]})
        return {"messages": [*messages, answer]}

    return app


async def _drain(app: rw.App, items: list[dict[str, Any]], concurrency: int) -> tuple[float, float]:
    """Seconds of wall and of this process's CPU (the worker, the reader and SQLite are all
    in it) from the worker's start to the last of `items`' runs ended (submitted before)."""
    handles = await app.submit_many("agent", items)
    worker = app.worker(concurrency=concurrency, poll_s=0.01)
    start, cpu = time.perf_counter(), time.process_time()
    task = asyncio.create_task(worker.run())
    try:
        for handle in handles:
            await handle.result(timeout_s=600)
        return time.perf_counter() - start, time.process_time() - cpu
    finally:
        worker.stop()
        await task


def _db_bytes(path: Path) -> int:
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        size = db.execute("PRAGMA page_size").fetchone()[0]
    return int(pages * size)


async def stored_size(runs: int, tmp: Path) -> None:
    values = [history(size, seed=size) for size in RUN_SIZES]
    print(f"SQLite database after {runs} agent runs (histories of "
          f"{', '.join(f'{len(str(v)) // 1024}' for v in values)} KB in turn, as arguments and result):")
    settings = {**SETTINGS, "zstd+offload": offloading(tmp / "size-blobs"),
                "zstd+aes+offload": offloading(tmp / "size-blobs-aes", encrypt=True)}
    base = None
    for name, codecs in settings.items():
        path = tmp / f"size-{name}.db"
        app = _app(f"sqlite:///{path}", codecs)
        async with app:
            empty = _db_bytes(path)
            for start in range(0, runs, 50):
                await _drain(app, [{"messages": values[n % len(values)]}
                                   for n in range(start, min(start + 50, runs))], concurrency=50)
        size = _db_bytes(path) - empty
        blobs = _dir_bytes(Path(codecs.blobs[len("file://"):])) if codecs and codecs.blobs else 0
        base = base or size
        print(f"  {name:16s} database {size / 1e6:8.1f} MB ({size / base:.3f}x plain; "
              f"{size * 10_000 / runs / 1e9:6.2f} GB per 10,000 runs)"
              + (f"  blob store {blobs / 1e6:7.1f} MB ({blobs * 10_000 / runs / 1e9:.2f} GB per 10,000)"
                 if blobs else ""))


def _dir_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in root.rglob("*") if path.is_file())


async def drain_cost(runs: int, rounds: int, tmp: Path) -> None:
    value = history(2_000, seed=3)
    print(f"drain of {runs} runs on SQLite (2 KB arguments, step and result; concurrency 100), "
          f"{rounds} interleaved rounds:")
    took: dict[str, list[float]] = {"plain": [], "zstd+aes": []}
    cpu: dict[str, list[float]] = {"plain": [], "zstd+aes": []}
    for round_no in range(rounds):
        for name in took:
            path = tmp / f"drain-{name}-{round_no}.db"
            app = _app(f"sqlite:///{path}", SETTINGS[name])
            async with app:
                wall, used = await _drain(app, [{"messages": value}] * runs, concurrency=100)
            took[name].append(wall)
            cpu[name].append(used / runs * 1e6)
    for name, values in took.items():
        median = statistics.median(values)
        print(f"  {name:9s} median {median:6.2f} s  ({runs / median:6.0f} runs/s; "
              f"rounds {', '.join(f'{v:.2f}' for v in values)}); "
              f"CPU {statistics.median(cpu[name]):.0f} us/run")
    plain, sealed = statistics.median(cpu["plain"]), statistics.median(cpu["zstd+aes"])
    print(f"  codec cost per run: {sealed - plain:+.0f} us of CPU (median against median; its arguments, "
          f"step, event and result sealed, its arguments, step and result opened)")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stored-runs", type=int, default=200)
    args = parser.parse_args()
    value = history(100_000)
    with tempfile.TemporaryDirectory() as tmp:
        per_payload(value, Path(tmp))
        await stored_size(args.stored_runs, Path(tmp))
        await drain_cost(args.runs, args.rounds, Path(tmp))


if __name__ == "__main__":
    asyncio.run(main())
