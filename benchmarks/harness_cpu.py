"""Where a run's CPU goes in the shared harness (`../shared/bench/`), runwright beside the
systems it is compared with there, each measured the harness's way in the same sitting.

    .venv/bin/python -m benchmarks.harness_cpu [--systems runwright,pgqueuer,raw_sql,ceiling]
        [--runs 20000] [--rounds 2]

Each system's own harness script runs (`--n RUNS --single-n 0`, the peers with the harness's
venv, runwright with this project's). While it drains, the harness's execution counter is
polled; when it passes 10% and 90% of the runs, every process's CPU time is read from /proc
and grouped: the system's worker processes (the harness process's descendants), PostgreSQL
(every server process), the Redis server, and the harness process itself. Between the two
readings: CPU microseconds per run of each group, the rate, and the cores kept busy. Start
and tail are outside that window, so these figures are steadier than the harness's own
drain rate (first to last execution), printed beside them.

`ceiling` (harness_ceiling.py) is the harness's job alone, with no queue: what one run
costs any system that runs it. The rest of a system's figure is the system itself. With
all cores busy, the ratio of two systems' rates is about the inverse ratio of their CPU per
run, so this says which process a gain must come from. Rows are medians over `--rounds`
(systems interleaved in each round, as `run.sh` does). It asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from .cpu import CpuSample

ROOT = Path(__file__).resolve().parents[1]
PEERS = Path(os.environ.get("BENCH_PEERS", ROOT.parent / "shared" / "bench" / "peers"))
BENCH_HOME = Path(os.environ.get("BENCH_HOME", Path.home() / ".cache" / "runwright-bench"))
GROUPS = ("workers", "postgres", "redis", "harness")
SCRIPTS = {  # system -> its script, run by the project's Python (runwright) or the peers'
    "runwright": "bench_runwright.py",
    "pgqueuer": "bench_pgqueuer.py",
    "raw_sql": "bench_raw_sql.py",
    "ceiling": str(Path(__file__).with_name("harness_ceiling.py")),
}
TIMEOUT_S = 300.0


@dataclass
class Measure:
    """One system's drain: the harness's own figure and the 10%-90% window's."""

    drain_per_s: float
    window_per_s: float
    us_per_run: dict[str, float]
    cores: float
    doubles: int
    missed: int


def _processes() -> dict[int, tuple[str, int]]:
    """Every process's command name and parent pid."""
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    text = stat.read()
            except OSError:
                continue
            name = text[text.index("(") + 1:text.rindex(")")]
            found[int(entry)] = (name, int(text.rpartition(")")[2].split()[1]))
    return found


def _grouped(harness: int, redis_pid: int) -> dict[str, list[int]]:
    """The pids of each group, the harness's descendants found through their parents."""
    processes = _processes()
    descendants, frontier = set(), {harness}
    while frontier:
        frontier = {pid for pid, (_, parent) in processes.items() if parent in frontier} - descendants
        descendants |= frontier
    return {"workers": sorted(descendants), "harness": [harness], "redis": [redis_pid],
            "postgres": [pid for pid, (name, _) in processes.items() if name.startswith("postgres")]}


def _reading(harness: int, redis_pid: int, counter: redis.Redis,
             key: str) -> tuple[float, float, dict[str, CpuSample]]:
    """(time, executions, CPU per group) at one moment; executions are read on both sides of
    the /proc scan, which takes a while on a busy machine."""
    before, at = counter.hlen(key), time.perf_counter()
    samples = {group: CpuSample.of(pids) for group, pids in _grouped(harness, redis_pid).items()}
    after = counter.hlen(key)
    return (at + time.perf_counter()) / 2, (before + after) / 2, samples


def measure(system: str, runs: int, python: str, harness: Any) -> Measure:
    """Run `system`'s harness script once and read its drain (`harness`: its common.py)."""
    counter = redis.Redis.from_url(harness.redis_url(system))
    key = harness.COUNTER_KEY
    counter.delete(key)  # the harness resets it too, but only once it has cleaned up
    redis_pid = int(counter.info("server")["process_id"])
    proc = subprocess.Popen([python, SCRIPTS[system], "--n", str(runs), "--single-n", "0"], cwd=PEERS,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    readings, marks, deadline = [], [0.1 * runs, 0.9 * runs], time.monotonic() + TIMEOUT_S
    while proc.poll() is None and time.monotonic() < deadline:
        if marks and counter.hlen(key) >= marks[0]:
            readings.append(_reading(proc.pid, redis_pid, counter, key))
            marks.pop(0)
        time.sleep(0.005)
    out, _ = proc.communicate(timeout=TIMEOUT_S)
    result = json.loads(out.strip().splitlines()[-1])
    if len(readings) < 2:
        raise RuntimeError(f"{system}: the drain never passed 90% of {runs} runs")
    (t0, n0, first), (t1, n1, last) = readings
    done = n1 - n0
    us = {group: 1e6 * last[group].since(first[group]) / done for group in GROUPS}
    return Measure(drain_per_s=result["drain_per_s"], window_per_s=done / (t1 - t0), us_per_run=us,
                   cores=sum(us.values()) * done / (t1 - t0) / 1e6,
                   doubles=result["double_executions"], missed=result["missed"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default="runwright,pgqueuer,raw_sql,ceiling")
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    systems = args.systems.split(",")
    unknown = sorted(set(systems) - set(SCRIPTS))
    peers_python = BENCH_HOME / ".venv" / "bin" / "python"
    if unknown or not (PEERS / "common.py").exists() or not peers_python.exists():
        sys.exit(f"error: unknown systems {unknown}" if unknown else
                 f"error: no harness at {PEERS} or no peers' venv at {peers_python} (run its setup.sh)")
    sys.path.insert(0, str(PEERS))
    import common as harness  # the harness's own module: its counter key and Redis dbs

    rw_python = os.environ.get("RW_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
    measures: dict[str, list[Measure]] = {system: [] for system in systems}
    for round_ in range(1, args.rounds + 1):
        for system in systems:
            python = rw_python if system == "runwright" else str(peers_python)
            measures[system].append(m := measure(system, args.runs, python, harness))
            print(f"round {round_} {system}: drain {m.drain_per_s:,.0f}/s, window {m.window_per_s:,.0f}/s, "
                  + ", ".join(f"{g} {m.us_per_run[g]:.0f}" for g in GROUPS)
                  + f" µs/run; doubles {m.doubles}, missed {m.missed}", flush=True)
    print(f"\n{args.runs:,} runs, 2 workers; medians of {args.rounds} rounds;"
          " CPU in µs per run, 10%-90% window")
    print(f"{'system':<10} {'drain/s':>9} {'window/s':>9} " + " ".join(f"{g:>9}" for g in GROUPS)
          + f" {'total':>7} {'cores':>6}")
    for system, ms in measures.items():
        us = {g: statistics.median(m.us_per_run[g] for m in ms) for g in GROUPS}
        print(f"{system:<10} {statistics.median(m.drain_per_s for m in ms):>9,.0f} "
              f"{statistics.median(m.window_per_s for m in ms):>9,.0f} "
              + " ".join(f"{us[g]:>9.0f}" for g in GROUPS)
              + f" {statistics.median(sum(m.us_per_run.values()) for m in ms):>7.0f}"
              + f" {statistics.median(m.cores for m in ms):>6.2f}")


if __name__ == "__main__":
    main()
