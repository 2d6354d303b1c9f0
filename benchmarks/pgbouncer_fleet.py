"""Fifty worker processes behind PgBouncer in transaction mode (20 server connections):
they drain a queue, cancel runs, take a SIGKILLed worker's runs over and stop on SIGTERM,
with no error in any log; and the server sessions they hold are counted.

A worker holds two sessions of the server itself behind a pooler (its own and its
rescuer's waiter, at the `direct=` URL; README, "Sessions"), so fifty need a hundred,
which the shared test server (max_connections 100) cannot give: the run starts a
PostgreSQL server of its own (initdb, on a free port, max_connections 250) and a
PgBouncer in front of it, and removes both after.

    python -m benchmarks.pgbouncer_fleet [--workers 50] [--runs 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import asyncpg

from runwright.runs import RunState
from tests.ports import free_port
from tests.process import apps
from tests.process.harness import client

from .common import ROOT, BenchError, Workers, event_loop_runner, say

APP_SPEC = "tests.process.apps:app"
SERVER_POOL = 20  # PgBouncer's default_pool_size: the server connections the pools share
USER = "postgres"


def _as_server_user() -> dict[str, str]:
    """PostgreSQL and PgBouncer refuse to run as root: then they run as `postgres`."""
    return {"user": USER} if os.geteuid() == 0 else {}


def start_server(directory: Path, port: int, max_connections: int) -> None:
    (pg_bin,) = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1:]
    data = directory / "data"
    subprocess.run([f"{pg_bin}/initdb", "-D", str(data), "-U", USER, "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True, **_as_server_user())  # type: ignore[call-overload]
    subprocess.run([f"{pg_bin}/pg_ctl", "-D", str(data), "-l", str(directory / "server.log"), "-w", "-o",
                    f"-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={directory}"
                    f" -c max_connections={max_connections} -c fsync=off", "start"],
                   check=True, capture_output=True, **_as_server_user())  # type: ignore[call-overload]


def stop_server(directory: Path) -> None:
    (pg_bin,) = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1:]
    subprocess.run([f"{pg_bin}/pg_ctl", "-D", str(directory / "data"), "-m", "immediate", "stop"],
                   capture_output=True, **_as_server_user())  # type: ignore[call-overload]


def start_pgbouncer(directory: Path, server_port: int, port: int) -> subprocess.Popen[bytes]:
    (directory / "users.txt").write_text(f'"{USER}" ""\n')
    (directory / "pgbouncer.ini").write_text(f"""
[databases]
postgres = host=127.0.0.1 port={server_port} dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {port}
unix_socket_dir =
auth_type = trust
auth_file = {directory / "users.txt"}
pool_mode = transaction
default_pool_size = {SERVER_POOL}
max_client_conn = 2000
logfile = {directory / "pgbouncer.log"}
admin_users = {USER}
""")
    if os.geteuid() == 0:
        for path in (directory / "users.txt", directory / "pgbouncer.ini"):
            shutil.chown(path, USER)
    binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
    return subprocess.Popen([binary, str(directory / "pgbouncer.ini")], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT, **_as_server_user())  # type: ignore[call-overload]


async def until(predicate, what: str, timeout_s: float = 120.0, interval_s: float = 0.2):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        value = await value if asyncio.iscoroutine(value) else value
        if value:
            return value
        await asyncio.sleep(interval_s)
    raise BenchError(f"gave up after {timeout_s:g} s waiting until {what}")


async def sessions(direct: str, pooler_port: int) -> tuple[int, int]:
    """(the workers' own sessions on the server, PgBouncer's). A server session of
    PgBouncer's carries the application_name of the client it served last: told apart by
    its port, which PgBouncer's SHOW SERVERS lists (its console speaks psql's protocol)."""
    shown = subprocess.run(["psql", "-h", "127.0.0.1", "-p", str(pooler_port), "-U", USER, "-At", "-F", " ",
                            "-c", "SHOW SERVERS", "pgbouncer"], capture_output=True, text=True, check=True)
    bouncer = {int(line.split()[7]) for line in shown.stdout.splitlines() if line.strip()}
    conn = await asyncpg.connect(direct)
    try:
        # runwright-fleet:<pid>:<schema> too: the fleet's own sessions, before it had none.
        ports = await conn.fetch("SELECT client_port FROM pg_stat_activity WHERE application_name LIKE"
                                 " 'runwright:%' OR application_name LIKE 'runwright-fleet:%'")
    finally:
        await conn.close()
    own = [row[0] for row in ports if row[0] not in bouncer]
    return len(own), len(bouncer)


async def run(count: int, runs: int, max_connections: int) -> None:
    directory = Path(tempfile.mkdtemp(prefix="rw-pgb-fleet-"))
    if os.geteuid() == 0:
        shutil.chown(directory, USER)
    server_port, pooler_port = free_port(), free_port()
    ledger = directory / "ledger"
    logs = directory / "logs"
    for path in (ledger, logs):
        path.mkdir()
        os.chmod(path, 0o777)
    os.environ[apps.LEDGER_ENV] = str(ledger)
    started = time.monotonic()
    start_server(directory, server_port, max_connections)
    pooler = start_pgbouncer(directory, server_port, pooler_port)
    direct = f"postgresql://{USER}@127.0.0.1:{server_port}/postgres"
    url = (f"postgresql://{USER}@127.0.0.1:{pooler_port}/postgres"
           f"?schema=fleet50&direct={quote(direct, safe='')}")
    workers = Workers(APP_SPEC, url, 10, logs)
    app = client(url)
    try:
        await until(lambda: _answers(url.split("?")[0]), "pgbouncer answers", 30)
        await app.open()
        workers.start(count)
        await until(lambda: all("worker started" in (logs / f"worker-{i}.log").read_text(errors="replace")
                                for i in range(1, count + 1)), f"{count} workers have started")
        say("postgres", f"{count} workers up in {time.monotonic() - started:.1f} s (server, pooler, boot)")
        by = time.monotonic() + 30
        at_rest = await until(lambda: _settled(direct, pooler_port, count, by), "the workers are at rest")
        say("postgres", f"at rest: the workers hold {at_rest[0]} sessions of the server itself"
                        f" ({at_rest[0] / count:.1f} a worker), PgBouncer {at_rest[1]}")

        began = time.monotonic()
        handles = await app.submit_many(apps.record, [{"n": n} for n in range(runs)])
        done = await until(lambda: _all_in(app, handles, {RunState.SUCCEEDED}), f"{runs} runs succeed")
        say("postgres", f"drain of {runs}: {len(done) / (time.monotonic() - began):,.0f} runs/s")
        after = await sessions(direct, pooler_port)
        say("postgres", f"after the drain: the workers hold {after[0]} sessions of the server itself,"
                        f" PgBouncer {after[1]} (of {SERVER_POOL} at most)")

        some = min(100, count * 10 // 2)  # half the slots
        held = await app.submit_many(apps.hold, [{"tag": "cancelled"}] * some)
        await until(lambda: _all_in(app, held, {RunState.RUNNING}), f"{some} held runs run")
        for handle in held:
            await app.cancel(handle.id)
        await until(lambda: _all_in(app, held, {RunState.CANCELLED}), f"{some} runs cancelled")
        say("postgres", f"{some} running runs cancelled")

        taken = await app.submit_many(apps.hold, [{"tag": "taken"}] * some)
        running = await until(lambda: _all_in(app, taken, {RunState.RUNNING}), f"{some} held runs run")
        owners = {run.owner for run in running}
        pid_of = {w.id: w.pid for w in await app.store.worker_list()}
        holding = {pid_of[o] for o in owners if o in pid_of}
        victims = [p for p in workers.procs if p.pid in holding][:max(1, count // 10)]
        for victim in victims:
            workers.kill(victim)
        apps.release_file(ledger, "taken").touch()
        finished = await until(lambda: _all_in(app, taken, {RunState.SUCCEEDED}), "the held runs succeed")
        recovered = sum(1 for r in finished if r.recoveries > 0)
        say("postgres", f"{len(victims)} workers SIGKILLed holding runs; {recovered} runs taken over, all"
                        f" {len(finished)} succeeded ({len(owners)} workers held them)")

        codes = []
        for proc in list(workers.procs):
            proc.send_signal(signal.SIGTERM)
        for proc in list(workers.procs):
            codes.append(proc.wait(60))
            workers.procs.remove(proc)
        say("postgres", f"SIGTERM: {codes.count(0)} of {len(codes)} workers exited 0")
        seen = workers.log_problems()
        problems = [p for p in seen if "WARNING" not in p]
        warnings = [p for p in seen if "WARNING" in p]
        for kind, lines in (("errors", problems), ("warnings", warnings)):
            say("postgres", f"{kind} in the worker logs: {len(lines)}" + "".join(f"\n  {p}" for p in lines))
        say("postgres", f"whole run {time.monotonic() - started:.1f} s")
        if problems or any(codes):
            raise BenchError("errors in the worker logs or a worker that did not exit 0")
    finally:
        workers.stop_all()
        await app.close()
        pooler.send_signal(signal.SIGTERM)
        pooler.wait(30)
        stop_server(directory)
        shutil.rmtree(directory, ignore_errors=True)


async def _answers(url: str) -> bool:
    try:
        conn = await asyncpg.connect(url, statement_cache_size=0)
    except (OSError, asyncpg.PostgresError):
        return False
    await conn.close()
    return True


async def _settled(direct: str, pooler_port: int, count: int, by: float) -> tuple[int, int] | None:
    held = await sessions(direct, pooler_port)
    # Past `by`, taken as they are: a runwright of before held more at rest.
    return held if held[0] <= 2 * count or time.monotonic() > by else None


async def _all_in(app, handles, states):  # type: ignore[no-untyped-def]
    """The runs, once every one is in `states` (counted in one statement first)."""
    rows = await app.store._fetch_raw("SELECT count(*) FROM runs WHERE id = ANY($1) AND state = ANY($2)",
                                      [h.id for h in handles], [s.value for s in states])
    if rows[0][0] < len(handles):
        return None
    return [await app.store.run_get(h.id) for h in handles]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--max-connections", type=int, default=250,
                        help="the server's (raise it to run a runwright that holds more sessions)")
    args = parser.parse_args()
    with event_loop_runner() as runner:
        try:
            runner.run(run(args.workers, args.runs, args.max_connections))
        except BenchError as exc:
            say("postgres", f"FAILED: {exc}")
            sys.exit(1)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
