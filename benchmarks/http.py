"""HTTP figures: submissions per second through the API (one client, keep-alive) and SSE
fan-out (100 followers of one run: latency from an event's append to its delivery).

    .venv/bin/python -m benchmarks.http [--backends sqlite,postgres] [--submissions 1000]
        [--followers 100] [--events 100]

A program that prints figures; it asserts nothing. The server runs with auth off
(RUNWRIGHT_AUTH=off) so that the figures measure the service, not token checks.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

import runwright as rw

from .common import drop_schema, p99

app = rw.App()
ROOT = Path(__file__).resolve().parents[1]
PG = "postgresql://postgres@127.0.0.1:5432/test"


@app.task
async def tick(n: int) -> int:
    return n


@app.task
async def emitter(ctx: rw.Context, count: int, gap_s: float) -> int:
    """Emits `count` events, each stamped with its emission time."""
    for i in range(count):
        await ctx.emit("tick", {"i": i, "sent": time.time()})
        await asyncio.sleep(gap_s)
    return count


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn(*argv: str, url: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RUNWRIGHT_URL": url, "RUNWRIGHT_AUTH": "off", "RUNWRIGHT_LOG_LEVEL": "WARNING"}
    return subprocess.Popen([sys.executable, "-m", "runwright", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def wait_healthy(base: str) -> None:
    async with httpx.AsyncClient() as http:
        for _ in range(200):
            try:
                if (await http.get(f"{base}/healthz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError("the server did not come up")


async def submissions(base: str, count: int, parallel: int) -> float:
    """Submissions per second from one client process over keep-alive connections."""
    async with httpx.AsyncClient(base_url=base, limits=httpx.Limits(max_connections=parallel)) as http:
        await http.post("/runs", json={"task": "tick", "args": {"n": -1}})  # warm the connection
        queue = iter(range(count))

        async def lane() -> None:
            for n in queue:
                (await http.post("/runs", json={"task": "tick", "args": {"n": n}})).raise_for_status()

        started = time.perf_counter()
        await asyncio.gather(*(lane() for _ in range(parallel)))
        return count / (time.perf_counter() - started)


async def fan_out(base: str, url: str, followers: int, events: int) -> list[float]:
    """Delivery latency (ms) of every event to every follower of one run."""
    limits = httpx.Limits(max_connections=followers + 5)
    async with httpx.AsyncClient(base_url=base, limits=limits, timeout=120) as http:
        run = (await http.post("/runs", json={"task": "emitter",
                                              "args": {"count": events, "gap_s": 0.02}})).json()
        ready = asyncio.Event()
        connected = [0]

        async def follow() -> list[float]:
            delays = []
            async with http.stream("GET", f"/runs/{run['id']}/events/stream") as stream:
                connected[0] += 1
                if connected[0] == followers:
                    ready.set()
                async for line in stream.aiter_lines():
                    if line.startswith("data: "):
                        item = json.loads(line[6:])
                        if item["kind"] == "tick":
                            delays.append((time.time() - item["data"]["sent"]) * 1000)
            return delays

        tasks = [asyncio.create_task(follow()) for _ in range(followers)]
        await asyncio.wait_for(ready.wait(), 60)
        worker = spawn("worker", "benchmarks.http:app", url=url)
        try:
            results = await asyncio.gather(*tasks)
        finally:
            worker.terminate()
            worker.wait(30)
    return [d for delays in results for d in delays]


async def bench(backend: str, args: argparse.Namespace, tmp: Path) -> dict[str, str]:
    schema = f"bench_http_{os.getpid()}"
    url = f"sqlite:///{tmp / 'http.db'}" if backend == "sqlite" else f"{PG}?schema={schema}"
    async with rw.App(url):
        pass  # the schema, before the server starts
    base = f"http://127.0.0.1:{free_port()}"
    server = spawn("serve", "benchmarks.http:app", "--port", base.rsplit(":", 1)[1], url=url)
    try:
        await wait_healthy(base)
        one = await submissions(base, args.submissions, 1)
        eight = await submissions(base, args.submissions, 8)
        delays = await fan_out(base, url, args.followers, args.events)
    finally:
        server.terminate()
        server.wait(30)
        if backend == "postgres":
            await drop_schema(PG, schema, [])
    return {"submissions/s, 1 in flight": f"{one:,.0f}/s", "submissions/s, 8 in flight": f"{eight:,.0f}/s",
            f"SSE fan-out to {args.followers}, p50 / p99":
                f"{statistics.median(delays):.1f} / {p99(delays):.1f} ms ({len(delays):,} deliveries)"}


async def main(args: argparse.Namespace) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="runwright-bench-http-"))
    figures = {backend: await bench(backend, args, tmp) for backend in args.backends}
    labels = list(next(iter(figures.values())))
    width = max(map(len, labels)) + 2
    column = max(len(v) for f in figures.values() for v in f.values()) + 2
    print(" " * width + "".join(b.ljust(column) for b in figures))
    for label in labels:
        print(label.ljust(width) + "".join(figures[b][label].ljust(column) for b in figures))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--submissions", type=int, default=1000)
    parser.add_argument("--followers", type=int, default=100)
    parser.add_argument("--events", type=int, default=100)
    options = parser.parse_args()
    options.backends = [b for b in options.backends.split(",") if b]
    asyncio.run(main(options))
