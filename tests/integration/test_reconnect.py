"""An App whose database was down when it first opened serves once the database is up;
an App closed and opened again serves too.

Real databases: a Redis server this test starts itself on a port of its own, only after
the App's first opening failed (the shared Redis and PostgreSQL are never stopped), and a
SQLite file whose directory appears after the first opening failed.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest
import redis

import runwright as rw

from ..ports import free_port
from ..process.harness import wait_until


class RedisServer:
    """A redis-server of this test's own, started on demand and always stopped."""

    def __init__(self, port: int, workdir: Path) -> None:
        self.port = port
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [shutil.which("redis-server") or "redis-server", "--port", str(self.port), "--bind",
             "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(self.workdir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def answers(self) -> bool:
        try:
            return bool(redis.Redis(port=self.port, socket_connect_timeout=1).ping())
        except redis.RedisError:
            return False

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def own_redis(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(free_port(), tmp_path)
    try:
        yield server
    finally:
        server.stop()


async def _use(app: rw.App) -> int:
    """Submit and read back a run: the App works."""
    handle = await app.submit("echo", value=7)
    return (await app.get(handle.id)).run.arguments()["value"]


def _app(url: str) -> rw.App:
    app = rw.App(url)

    @app.task(name="echo")
    async def echo(ctx: rw.Context, value: int) -> int:
        return value

    return app


async def test_an_app_opened_while_redis_was_down_serves_once_it_is_up(own_redis: RedisServer) -> None:
    app = _app(f"redis://127.0.0.1:{own_redis.port}/0")
    try:
        with pytest.raises(rw.StoreUnreachable, match=f"127.0.0.1:{own_redis.port}"):
            await app.open()
        with pytest.raises(rw.StoreUnreachable):  # still down: the same clear error
            await app.submit("echo", value=1)
        own_redis.start()
        await wait_until(own_redis.answers, "our redis-server answers")
        assert await _use(app) == 7
    finally:
        await app.close()


async def test_an_app_opened_before_its_sqlite_directory_existed_serves_once_it_does(tmp_path: Path) -> None:
    directory = tmp_path / "later"
    app = _app(f"sqlite:///{directory / 'runwright.db'}")
    try:
        with pytest.raises(rw.StoreUnreachable, match="does not exist"):
            await app.open()
        directory.mkdir()
        assert await _use(app) == 7
    finally:
        await app.close()


async def test_an_app_closed_and_opened_again_serves_on_every_backend(store_url: str) -> None:
    app = _app(store_url)
    try:
        for _ in range(3):
            await app.open()
            assert await _use(app) == 7
            await app.close()
        async with app:  # and as a context manager, after all that
            assert len(await app.list_runs()) == 3
    finally:
        await app.close()
