"""A first `runwright serve` with no token configured: on a loopback address it makes a
one-off operator token and prints a sign-in link carrying it in the URL's fragment; on any
other address it refuses, in one line. Configured tokens and RUNWRIGHT_AUTH=off are as
they were. Run on SQLite alone: what is checked here is the server's face, not a store."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from runwright.cli._serving import ONE_OFF_NOTE
from runwright.server._auth import Auth, is_loopback

pytestmark = pytest.mark.process

JOBS = """import runwright as rw

app = rw.App()

@app.task
async def summarize(ctx: rw.Context, url: str) -> str:
    return "summary"
"""
TOKEN_SETTINGS = ("RUNWRIGHT_TOKENS", "RUNWRIGHT_OPERATOR_TOKENS", "RUNWRIGHT_AUTH", "RUNWRIGHT_URL")


def plain_env(**settings: str) -> dict[str, str]:
    """This environment without any token setting nor store URL, plus `settings`."""
    env = {k: v for k, v in os.environ.items() if k not in TOKEN_SETTINGS and k != "COLUMNS"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    return {**env, **settings}


def read_lines(stream: IO[str], count: int, timeout_s: float = 120) -> list[str]:
    """The first `count` lines of `stream` (a server that never prints fails the test)."""
    reader = ThreadPoolExecutor(1)
    try:
        return reader.submit(lambda: [stream.readline() for _ in range(count)]).result(timeout_s)
    finally:
        reader.shutdown(wait=False)


@contextmanager
def served(command: list[str], cwd: Path, env: dict[str, str], count: int) -> Iterator[list[str]]:
    """`command` (a `runwright serve`) running, and the first `count` lines it printed."""
    server = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    try:
        assert server.stdout is not None
        yield read_lines(server.stdout, count)
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(60)
        finally:
            for pipe in (server.stdout, server.stderr):
                if pipe is not None:
                    pipe.close()


def sign_in_link(lines: list[str]) -> tuple[str, str]:
    """The base URL and the token of the sign-in link `runwright serve` printed."""
    (link,) = [line.split()[1] for line in lines if line.startswith("dashboard ")]
    parts = urlsplit(link)
    assert parts.path == "/" and parts.fragment.startswith("token="), link
    return f"{parts.scheme}://{parts.netloc}", parts.fragment.removeprefix("token=")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "jobs.py").write_text(JOBS)
    made = subprocess.run([sys.executable, "-m", "runwright", "submit", "jobs:app", "summarize", "--args",
                           '{"url": "x"}'], cwd=tmp_path, env=plain_env(), capture_output=True, text=True,
                          timeout=120)
    assert made.returncode == 0, made.stderr  # a run of no tenant, as the CLI makes
    return tmp_path


SERVE = [sys.executable, "-m", "runwright", "serve", "jobs:app", "--port", "0"]


def test_no_token_configured_makes_a_one_off_operator_token_and_prints_a_sign_in_link(folder: Path) -> None:
    with served(SERVE, folder, plain_env(), 5) as lines:
        base, token = sign_in_link(lines)
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+", base), lines
        assert len(token) >= 40, token  # secrets.token_urlsafe(32)
        assert lines[0] == f"listening on  {base}\n"
        assert lines[1] == f"dashboard     {base}/#token={token}\n"
        assert lines[2] == f"{'':<13} {ONE_OFF_NOTE}\n"
        assert lines[3:] == [f"API docs      {base}/docs\n", f"OpenAPI       {base}/openapi.json\n"]
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/session").status_code == 401
            assert http.post("/session", json={"token": "not-" + token}).status_code == 401
            assert http.get("/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
            signed = http.post("/session", json={"token": token})
            assert signed.status_code == 200, signed.text
            assert signed.json() == {"tenant": None, "operator": True, "auth": True, "operator_decode": False}
            # The operator sees the run the CLI made (it belongs to no tenant), and /metrics.
            runs = http.get("/runs").json()["items"]
            assert [(r["task"], r["tenant"]) for r in runs] == [("summarize", None)]
            assert http.get(f"/runs/{runs[0]['id']}").status_code == 200
            assert http.get("/metrics").status_code == 200
            assert http.get("/schedules").status_code == 200
        bearer = {"Authorization": f"Bearer {token}"}
        assert httpx.get(f"{base}/runs", headers=bearer, timeout=30).json()["items"] == runs


def test_each_server_makes_a_token_of_its_own(folder: Path) -> None:
    with served(SERVE, folder, plain_env(), 2) as first, served(SERVE, folder, plain_env(), 2) as second:
        (base, token), (_, other) = sign_in_link(first), sign_in_link(second)
        assert token != other
        assert httpx.post(f"{base}/session", json={"token": other}, timeout=30).status_code == 401


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_a_server_others_can_reach_is_refused_without_tokens(folder: Path, host: str) -> None:
    refused = subprocess.run([*SERVE, "--host", host], cwd=folder, env=plain_env(), capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2, refused.stderr
    assert refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"error: ConfigError: no API tokens for a server on {host}, which is not a loopback address: set "
        f"RUNWRIGHT_OPERATOR_TOKENS=token[,...] and/or RUNWRIGHT_TOKENS=token=tenant[,...] for fixed tokens, "
        f"or RUNWRIGHT_AUTH=off for local use without auth (on 127.0.0.1 a one-off token is made and "
        f"printed)"]


def test_configured_tokens_are_as_before(folder: Path) -> None:
    env = plain_env(RUNWRIGHT_TOKENS="tok-a=team-a", RUNWRIGHT_OPERATOR_TOKENS="tok-op")
    with served(SERVE, folder, env, 4) as lines:
        (base,) = re.findall(r"^listening on +(http://127\.0\.0\.1:\d+)\n$", lines[0])
        assert lines[1:] == [f"dashboard     {base}/\n", f"API docs      {base}/docs\n",
                             f"OpenAPI       {base}/openapi.json\n"]  # no link, no note
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/runs", headers={"Authorization": "Bearer tok-x"}).status_code == 401
            tenant = http.post("/session", json={"token": "tok-a"}).json()
            assert tenant == {"tenant": "team-a", "operator": False, "auth": True, "operator_decode": False}
            assert http.get("/runs").json()["items"] == []  # the CLI's run is no tenant's
            assert http.get("/metrics").status_code == 403
            operator = http.post("/session", json={"token": "tok-op"}).json()
            assert operator == {"tenant": None, "operator": True, "auth": True, "operator_decode": False}
            assert len(http.get("/runs").json()["items"]) == 1


def test_auth_off_is_as_before(folder: Path) -> None:
    with served(SERVE, folder, plain_env(RUNWRIGHT_AUTH="off"), 4) as lines:
        (base,) = re.findall(r"^listening on +(http://127\.0\.0\.1:\d+)\n$", lines[0])
        assert lines[1] == f"dashboard     {base}/\n"
        with httpx.Client(base_url=base, timeout=30) as http:
            assert http.get("/session").json() == {"tenant": None, "operator": True, "auth": False,
                                                        "operator_decode": False}
            assert len(http.get("/runs").json()["items"]) == 1


def test_the_one_off_token_is_for_loopback_addresses_only(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in TOKEN_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    assert all(map(is_loopback, ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "192.168.1.10", "no-such-host.invalid"]))
    made, again = Auth.from_env(host="localhost"), Auth.from_env(host="127.0.0.1")
    assert made.one_off is not None and made.operators == {made.one_off} and not made.tokens
    assert again.one_off != made.one_off
    assert made.tenant_of(f"Bearer {made.one_off}") is None  # the operator
    assert made.tenant_of(f"Bearer {again.one_off}") is False
    with pytest.raises(Exception, match="no API tokens: set RUNWRIGHT_OPERATOR_TOKENS"):
        Auth.from_env()  # no host: the library's own call keeps refusing
    monkeypatch.setenv("RUNWRIGHT_OPERATOR_TOKENS", "tok-op")
    assert Auth.from_env(host="127.0.0.1") == Auth(operators=frozenset({"tok-op"}))
    monkeypatch.setenv("RUNWRIGHT_AUTH", "off")
    assert Auth.from_env(host="127.0.0.1") == Auth(enabled=False)


def test_serve_s_start_and_stop_are_its_own_lines_alone(folder: Path) -> None:
    """What `runwright serve` prints at start is the README's block: its fleet slot's
    "joined the fleet" (and "left the fleet" at the end) is DEBUG, not on stderr beside it."""
    server = subprocess.Popen(SERVE, cwd=folder, env=plain_env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert read_lines(server.stdout, 5)[0].startswith("listening on  http://127.0.0.1:")
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=60)
    assert "the fleet" not in stderr, stderr
