"""What the benchmarks share: the event loop, worker processes and their logs, percentiles,
the store URL of a backend, and leaving nothing behind (schemas, files) even on SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import re
import signal
import statistics
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Coroutine

import asyncpg

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
    """The URL of a fresh store: a file in `tmp`, or `schema` of the PostgreSQL database."""
    if backend == "sqlite":
        return f"sqlite:///{tmp / 'bench.db'}"  # tmp is absolute: sqlite:////tmp/...
    return f"{pg_url}{'&' if '?' in pg_url else '?'}schema={schema}"


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

    def start(self, count: int) -> None:
        for _ in range(count):
            self._started += 1
            with open(self.log_dir / f"worker-{self._started}.log", "wb") as log:
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", "runwright", "worker", self.app_spec,
                     "--concurrency", str(self.concurrency), "--url", self.url],
                    cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))

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


# -- the program ------------------------------------------------------------------------


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
