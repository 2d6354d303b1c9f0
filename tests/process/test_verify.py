"""`runwright verify`, a short version on every backend: its own workers, real faults,
exit 0 with no violation, faults really injected, counts consistent, nothing left
behind; and interrupted (SIGINT), it still removes its schema/namespace/file and ends
its workers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
import redis.asyncio

from ..conftest import PG_BASE, REDIS_BASE
from .harness import ROOT, outputs, wait_until

SHORT = ["--runs", "200", "--workers", "3", "--kill-every", "1s", "--stall-every", "3s",
         "--blip-every", "2s", "--seed", "7"]


def verify(store_url: str, *args: str, cwd: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "runwright", "verify", "--url", store_url, *args],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONPATH": str(ROOT / "src")})


async def place_exists(backend: str, name: str) -> bool:
    if backend == "sqlite":
        return Path(name).exists()
    if backend == "postgres":
        conn = await asyncpg.connect(PG_BASE)
        try:
            return bool(await conn.fetchval("SELECT count(*) FROM information_schema.schemata "
                                            "WHERE schema_name = $1", name))
        finally:
            await conn.close()
    client = redis.asyncio.Redis.from_url(REDIS_BASE)
    try:
        return bool([key async for key in client.scan_iter(match=f"rw:{{{name}}}:*", count=1000)])
    finally:
        await client.aclose()


def children_of(pid: int) -> set[int]:
    """Processes whose parent is `pid` (verify's workers are in sessions of their own,
    but still its children)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


# Kills, stalls and blips timed in seconds against a lease of seconds: a machine that other
# tests load at the same time upset it (an exit 1 seen only in a parallel run).
@pytest.mark.alone
async def test_verify_passes_under_real_faults(backend, store_url, tmp_path):
    proc = verify(store_url, *SHORT, "--json", cwd=tmp_path)
    out, err = outputs(proc, 540)
    assert proc.returncode == 0, (out + err)[-3000:]  # the report (--json) says what failed
    report = json.loads(out)
    assert report["ok"] and report["backend"] == backend
    assert not any(report["violations"].values()), report["violations"]
    runs, faults = report["runs"], report["faults"]
    assert runs["submitted"] == 200 and runs["checked"] > 200  # with the child runs
    assert runs["finished"] == runs["checked"] == runs["succeeded"] + runs["cancelled"]
    assert runs["cancels_requested"] > 0
    assert faults["kills"] > 0 and faults["stalls"] > 0 and faults["blips"] > 0, faults
    if backend != "sqlite":
        assert faults["connections_cut"] > 0, faults
    # Each fault applied is listed (a stall of a worker already stopped is listed, not counted).
    assert len(report["applied"]) >= faults["kills"] + faults["stalls"] + faults["blips"]
    assert report["takeover_s"]["count"] > 0 and report["takeover_s"]["p99"] >= report["takeover_s"]["p50"]
    rates = report["throughput_runs_per_s"]
    assert rates["baseline"] > 0 and rates["during_faults"] > 0
    assert report["steps"]["executed"] >= report["steps"]["journaled"] > 0
    assert not await place_exists(backend, report["place"]), "verify left its place behind"
    if backend == "sqlite":  # nor its -wal and -shm files
        assert not list(Path(report["place"]).parent.glob("rw_verify_*"))


async def test_an_interrupted_verify_removes_its_place_and_its_workers(backend, store_url, tmp_path):
    proc = verify(store_url, "--runs", "100000", "--workers", "2", "--seed", "1", cwd=tmp_path)
    try:
        # Its first lines name its place; then wait until it is made and the workers run.
        line = await wait_until(lambda: next((text for text in _read_err(proc, tmp_path).splitlines()
                                              if "verify's own" in text), None),
                                "verify names its place", timeout_s=120)
        name = line.rsplit(": ", 1)[1].strip()
        await wait_until(lambda: place_exists(backend, name), "its place exists", timeout_s=120)
        workers = await wait_until(lambda: len(children_of(proc.pid)) >= 2 and children_of(proc.pid),
                                   "its workers run", timeout_s=120)
        proc.send_signal(signal.SIGINT)
        await wait_until(lambda: proc.poll() is not None, "verify exits after SIGINT", timeout_s=120)
    finally:
        proc.kill()
        proc.wait()
        err = _read_err(proc, tmp_path)
        for pipe in (proc.stdout, proc.stderr):
            assert pipe is not None
            pipe.close()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert not [pid for pid in workers if alive(pid)], "a worker outlived verify"
    assert not await place_exists(backend, name), "verify left its place behind"


_ERR: dict[int, bytearray] = {}


def _read_err(proc: subprocess.Popen[bytes], tmp_path: Path) -> str:
    """What verify wrote on stderr so far (read without blocking)."""
    assert proc.stderr is not None
    buffer = _ERR.setdefault(proc.pid, bytearray())
    os.set_blocking(proc.stderr.fileno(), False)
    while True:
        try:
            chunk = proc.stderr.read(65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        buffer += chunk
    return buffer.decode(errors="replace")


@pytest.mark.parametrize("backend", ["sqlite"])
def test_bad_input_is_one_line_and_exit_2(backend, store_url, tmp_path):
    proc = verify(store_url, "--kill-every", "soon", cwd=tmp_path)
    out, err = outputs(proc, 120)
    assert proc.returncode == 2 and err.strip().startswith("error: --kill-every 'soon'")
    assert "\n" not in err.strip() and out == ""  # one line, nothing else
