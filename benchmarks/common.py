"""What the benchmarks share: the event loop, worker processes and their logs, percentiles,
the store URL of a backend, leaving nothing behind (schemas, files) even on SIGTERM, the
command line (backends, PostgreSQL URL) and the summary table."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator, Awaitable, Callable, Coroutine, Protocol, Sequence, TypeVar

import asyncpg
import redis
import redis.asyncio

import runwright as rw

ROOT = Path(__file__).resolve().parent.parent
LOG_FIELD = re.compile(r" \w+=")  # where a worker log line's key=value fields begin


def event_loop_runner() -> asyncio.Runner:
    """uvloop when installed, as the real workers use it."""
    try:
        import uvloop
    except ImportError:
        return asyncio.Runner()
    return asyncio.Runner(loop_factory=uvloop.new_event_loop)


class BenchError(RuntimeError):
    """A phase could not finish (timeout, runs left over): reported, not raised further."""


def say(backend: str, text: str) -> None:
    print(f"[{backend}] {text}", flush=True)


def p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def store_url(backend: str, tmp: Path, pg_url: str, schema: str) -> str:
    """The URL of a fresh store: a file in `tmp`, `schema` of the PostgreSQL database, or
    the namespace `schema` of the Redis database."""
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'bench.db'}"  # tmp is absolute: sqlite:////tmp/...
    if backend == "redis":
        return f"{REDIS_URL}?namespace={schema}"
    return f"{pg_url}{'&' if '?' in pg_url else '?'}schema={schema}"


async def drop_namespace(namespace: str, notes: list[str]) -> None:
    """Delete the keys of one Redis namespace (the database is shared: never flushed).
    The raw baseline's keys share the namespace's hash tag, so they go with it."""
    client = redis.asyncio.Redis.from_url(REDIS_URL)
    try:
        keys = [key async for key in client.scan_iter(match=f"*{{{namespace}}}*", count=1000)]
        for start in range(0, len(keys), 1000):
            await client.unlink(*keys[start:start + 1000])
    except redis.RedisError as exc:
        notes.append(f"could not delete namespace {namespace}: {exc}")
    finally:
        await client.aclose()


async def drop_schema(dsn: str, schema: str, notes: list[str]) -> None:
    try:
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()
    except (OSError, asyncpg.PostgresError) as exc:
        notes.append(f"could not drop schema {schema}: {exc}")


# -- worker processes -----------------------------------------------------------------


class Workers:
    """`runwright worker APP_SPEC` processes of one backend; each logs to a file of its own."""

    def __init__(self, app_spec: str, url: str, concurrency: int, log_dir: Path) -> None:
        self.app_spec = app_spec
        self.url = url
        self.concurrency = concurrency
        self.log_dir = log_dir
        self.procs: list[subprocess.Popen[bytes]] = []
        self._started = 0
        self.extra_args: list[str] = []  # more `runwright worker` options (retention's)

    def start(self, count: int) -> None:
        for _ in range(count):
            self._started += 1
            with open(self.log_dir / f"worker-{self._started}.log", "wb") as log:
                self.procs.append(subprocess.Popen(self.command(), cwd=ROOT, stdout=log,
                                                   stderr=subprocess.STDOUT))

    def command(self) -> list[str]:
        """The command line of the next process `start` starts (a subclass may wrap it)."""
        return [sys.executable, "-m", "runwright", "worker", self.app_spec,
                "--concurrency", str(self.concurrency), "--url", self.url, *self.extra_args]

    def by_pid(self, pid: int) -> subprocess.Popen[bytes]:
        for proc in self.procs:
            if proc.pid == pid:
                return proc
        raise BenchError(f"worker pid {pid} is not one this benchmark started")

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        """SIGKILL and reap at once, as a supervisor would: no zombie keeps looking alive."""
        proc.kill()
        proc.wait()
        self.procs.remove(proc)

    def stop(self, proc: subprocess.Popen[bytes], grace_s: float = 10.0) -> None:
        """SIGTERM (the worker drains and deregisters), SIGKILL if it does not exit."""
        if proc.poll() is None:
            proc.terminate()
        self.reap(proc, grace_s)

    def reap(self, proc: subprocess.Popen[bytes], grace_s: float) -> None:
        """Wait `grace_s` for a stopping `proc` to exit, SIGKILL it if it does not; forget it."""
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        self.procs.remove(proc)

    def stop_all(self) -> None:
        for proc in list(self.procs):
            self.stop(proc)

    def rss_mib(self) -> list[tuple[float, float]]:
        """(VmRSS, VmHWM) in MiB of each live worker."""
        out = []
        for proc in self.procs:
            fields = {}
            with open(f"/proc/{proc.pid}/status") as status:
                for line in status:
                    key, _, value = line.partition(":")
                    fields[key] = value
            out.append((_kib(fields["VmRSS"]) / 1024, _kib(fields["VmHWM"]) / 1024))
        return out

    def log_problems(self) -> list[str]:
        """WARNING/ERROR lines and tracebacks of all worker logs, counted by message
        (the text before the first key=value field), each with one example line."""
        seen: Counter[str] = Counter()
        example: dict[str, str] = {}
        for path in sorted(self.log_dir.glob("worker-*.log")):
            for line in path.read_text(errors="replace").splitlines():
                parts = line.split(maxsplit=2)
                if len(parts) == 3 and parts[1] in ("WARNING", "ERROR", "CRITICAL"):
                    message = f"{parts[1]} {LOG_FIELD.split(parts[2], maxsplit=1)[0]}"
                elif line.startswith(("Traceback", "error:", "worker crashed")):
                    message = f"{line.split(':')[0]} in {path.name}"
                else:
                    continue
                seen[message] += 1
                example.setdefault(message, f"{path.name}: {line}")
        return [f"{count}x {message}  e.g. {example[message]}" for message, count in seen.most_common()]


def _kib(value: str) -> int:
    return int(value.split()[0])


class ProblemLog(logging.Handler):
    """Counts the WARNING+ records of the `runwright` logger in this process (an in-process
    worker, a follower), so they are reported like the worker processes' log problems."""

    def __init__(self, where: str) -> None:
        super().__init__(logging.WARNING)
        self.where = where
        self.seen: Counter[str] = Counter()
        self.example: dict[str, str] = {}

    def emit(self, record: logging.LogRecord) -> None:
        message = f"{record.levelname} {record.getMessage()}"
        self.seen[message] += 1
        self.example.setdefault(message, f"{getattr(record, 'rw', {})}")

    def __enter__(self) -> ProblemLog:
        logging.getLogger("runwright").addHandler(self)
        return self

    def __exit__(self, *exc: object) -> None:
        logging.getLogger("runwright").removeHandler(self)

    def problems(self) -> list[str]:
        return [f"{count}x {message} in {self.where}  e.g. {self.example[message]}"
                for message, count in self.seen.most_common()]


# -- one backend, start to end ----------------------------------------------------------


class Report(Protocol):
    """What each benchmark's figures of one backend hold besides the figures themselves."""

    backend: str
    notes: list[str]


FiguresT = TypeVar("FiguresT", bound=Report)


@dataclass
class Backend:
    """A backend as a benchmark phase uses it: the benchmark's app on a fresh store, worker
    processes of the same app on the same store, and the PostgreSQL schema of the store
    (where a raw SQL baseline puts its tables, so that they are dropped with it)."""

    schema: str
    bench: rw.App
    workers: Workers


@contextlib.asynccontextmanager
async def backend_session(figures: Report, name: str, with_tasks: Callable[[rw.App], rw.App],
                          concurrency: int, tmp: Path, pg_url: str) -> AsyncIterator[Backend]:
    """A fresh store for benchmark `name` on `figures.backend`, its workers loading
    `benchmarks.<name>:app`. The body opens the store, as its first phase: a context
    manager cannot skip its body, so a store that does not open must fail inside it.
    A phase that fails is a figure to report, not a reason to stop: its exception becomes
    a note and the next backend still runs. Whatever happened, the workers are stopped,
    the store closed, the schema dropped, and the workers' logged problems become notes."""
    schema = f"bench_{name}_{os.getpid()}"
    url = store_url(figures.backend, tmp, pg_url, schema)
    log_dir = tmp / f"logs-{figures.backend}"
    log_dir.mkdir()
    backend = Backend(schema, with_tasks(rw.App(url)),
                      Workers(f"benchmarks.{name}:app", url, concurrency, log_dir))
    try:
        yield backend
    except Exception as exc:
        figures.notes.append(f"stopped early: {type(exc).__name__}: {exc}")
        say(figures.backend, figures.notes[-1])
    finally:
        backend.workers.stop_all()
        await backend.bench.close()
        if figures.backend == "postgres":
            await drop_schema(pg_url, backend.schema, figures.notes)
        elif figures.backend == "redis":
            await drop_namespace(backend.schema, figures.notes)
    figures.notes.extend(backend.workers.log_problems())


# -- report -----------------------------------------------------------------------------


def num(value: float | None, unit: str) -> str:
    """A table cell: '-' where the phase that measures the figure did not get that far."""
    return "-" if value is None else f"{value:,.0f} {unit}"


def pair(values: tuple[float, float] | None, unit: str) -> str:
    """A table cell of two figures (p50 / p99, a run of 0 / of N), or '-' as `num`."""
    return "-" if values is None else f"{values[0]:.2f} / {values[1]:.2f} {unit}"


def render_table(header_line: str, rows: Sequence[tuple[str, Callable[[FiguresT], str]]],
                 all_figures: Sequence[FiguresT]) -> str:
    """The summary a benchmark ends with: `header_line` (its options), a column a backend,
    a line a row of (label, cell of a backend's figures), then each backend's notes. The
    columns are as wide as their widest cell, so that the backends' figures line up."""
    width = max(len(label) for label, _ in rows) + 2
    cells = [[show(f) for f in all_figures] for _, show in rows]
    texts = [f.backend for f in all_figures] + [cell for row in cells for cell in row]
    col_width = max(len(text) for text in texts) + 2
    lines = [header_line, " " * width + "".join(f.backend.ljust(col_width) for f in all_figures)]
    lines += [label.ljust(width) + "".join(cell.ljust(col_width) for cell in row)
              for (label, _), row in zip(rows, cells)]
    lines += [f"note [{f.backend}]: {note}" for f in all_figures for note in f.notes]
    return "\n".join(line.rstrip() for line in lines)


# -- the program ------------------------------------------------------------------------

BACKENDS = ("sqlite", "postgres", "redis")
PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
REDIS_URL = os.environ.get("RUNWRIGHT_BENCH_REDIS", "redis://127.0.0.1:6379/0")


@dataclass(frozen=True)
class Count:
    """A whole-number option of a benchmark. `at_least` refuses at the start a value its
    figures would mean nothing with (a percentile of one value, a takeover without a
    survivor), rather than failing at the end; `why` says so where it is not plain."""

    flag: str
    default: int
    help: str
    at_least: int | None = None
    why: str = ""

    def check(self, parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
        value = getattr(args, self.flag.removeprefix("--").replace("-", "_"))
        if self.at_least is not None and value < self.at_least:
            why = f": {self.why}" if self.why else ""
            parser.error(f"{self.flag} must be at least {self.at_least}{why}")


def parse_benchmark_args(doc: str, counts: Sequence[Count],
                         extra: Sequence[tuple[str, str, str]] = (),
                         backends: bool = True,
                         default_backends: Sequence[str] = BACKENDS) -> argparse.Namespace:
    """The command line of a benchmark: --backends (unless `backends` is False: a
    benchmark of PostgreSQL alone), its own `counts`, its `extra` text options (flag,
    default, help), --pg-url. Its description is the first paragraph of the benchmark's
    docstring (the rest is for readers of the code). `default_backends`: those --backends
    names when not given."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    if backends:
        named = ",".join(default_backends)
        parser.add_argument("--backends", default=named,
                            help=f"comma-separated: sqlite, postgres, redis (default {named})")
    for count in counts:
        parser.add_argument(count.flag, type=int, default=count.default, help=count.help)
    for flag, default, text in extra:
        parser.add_argument(flag, default=default, help=text)
    parser.add_argument("--pg-url", default=PG_URL,
                        help="PostgreSQL database; each run uses a schema of its own, dropped after")
    args = parser.parse_args()
    args.backends = backends_of(args, parser) if backends else ["postgres"]
    for count in counts:
        count.check(parser, args)
    return args


def backends_of(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """--backends as a list: a misspelt backend is refused at once, not after the first
    backend's figures have taken their time."""
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - set(BACKENDS)
    if unknown:
        parser.error(f"unknown backend(s): {', '.join(sorted(unknown))}")
    if not backends:
        parser.error("--backends names no backend")
    return backends


async def bench_all(args: argparse.Namespace,
                    bench_backend: Callable[[str, argparse.Namespace, Path], Awaitable[FiguresT]],
                    summary: Callable[[list[FiguresT], argparse.Namespace], str]) -> None:
    """`bench_backend(backend, args, tmp)` for each backend, one after the other so that
    they do not compete for the machine, then the table that sums them up. `tmp` is
    removed at the end, on an error or on SIGTERM."""
    tmp = Path(tempfile.mkdtemp(prefix="runwright-bench-"))
    try:
        all_figures = [await bench_backend(backend, args, tmp) for backend in args.backends]
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    print(summary(all_figures, args))


def run_main(main: Coroutine[Any, Any, None]) -> None:
    """Run a benchmark's `main`. SIGTERM cancels it as Ctrl-C does: at the await its main
    task is at, not at whatever line a signal would land on (a worker's run, a cleanup),
    so the `finally` blocks stop workers, remove temporary files and drop schemas."""

    async def cancellable() -> None:
        task = asyncio.current_task()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        await main

    try:
        with event_loop_runner() as runner:
            runner.run(cancellable())
    except (KeyboardInterrupt, asyncio.CancelledError):
        sys.exit("interrupted: workers stopped, temporary files and schemas removed")
