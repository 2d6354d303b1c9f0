"""The shared harness's job with no queue around it: the ceiling any queue measured there
can reach on this machine.

Each of `--workers` processes knows its share of the ids and runs the harness's job for
each (`HINCRBY bench:exec <id> 1` through redis-py's asyncio client, as the peers and
runwright's adapter do), `--concurrency` at a time. Nothing is claimed or recorded, so
its CPU per run is what the job costs; a queue's figure beside it is the job plus the
queue. It is a system of the harness (`../shared/bench/peers/common.py` times and counts
it as it does the others), run by `benchmarks.harness_cpu` with the peers' Python:

    $BENCH_HOME/.venv/bin/python benchmarks/harness_ceiling.py --single-n 0
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

PEERS = Path(os.environ.get("BENCH_PEERS", Path(__file__).resolve().parents[2] / "shared/bench/peers"))
sys.path.insert(0, str(PEERS))

import common  # noqa: E402  (the harness's module, found on the path set above)

SYSTEM = "ceiling"  # its counter lives in the harness's db for systems it does not list


async def work(index: int, workers: int, runs: int, concurrency: int) -> None:
    """Run the job for ids index, index + workers, ... below `runs`, then idle until stopped."""
    client = common.async_redis_client(SYSTEM)
    ids = iter(range(index, runs, workers))

    async def lane() -> None:
        for i in ids:
            await client.hincrby(common.COUNTER_KEY, str(i), 1)

    await asyncio.gather(*(lane() for _ in range(concurrency)))
    await asyncio.Event().wait()  # the harness stops its workers itself


def main() -> None:
    if sys.argv[1:2] == ["--worker"]:
        index, workers, runs, concurrency = (int(a) for a in sys.argv[2:6])
        import uvloop  # as the peers' workers run

        uvloop.run(work(index, workers, runs, concurrency))
        return
    args = common.parse_args(__doc__, default_concurrency=64)

    def start_workers(procs: Any) -> None:
        for index in range(args.workers):
            procs.spawn([sys.executable, __file__, "--worker", str(index), str(args.workers),
                         str(args.n), str(args.concurrency)])

    common.emit(common.run_benchmark(
        system=SYSTEM, version="-", args=args, clean=lambda: None, enqueue_single=lambda ids: None,
        enqueue_bulk=lambda ids: None, start_workers=start_workers, enqueue_mode="none (no queue)"))


if __name__ == "__main__":
    main()
