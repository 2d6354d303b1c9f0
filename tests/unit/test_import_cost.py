"""`import runwright` loads no web server: a worker or a program that only submits never
pays for FastAPI, uvicorn or sse-starlette (the server package imports them when used)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

SERVER_ONLY = ("fastapi", "fastapi_offline", "sse_starlette", "starlette", "uvicorn")


def test_import_runwright_loads_no_web_server():
    probe = ("import json, sys, runwright; "
             f"print(json.dumps(sorted(m for m in {SERVER_ONLY!r} if m in sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout) == []


def test_the_server_package_loads_them_when_used():
    probe = ("import json, sys, runwright.server; "
             f"print(json.dumps(sorted(m for m in {SERVER_ONLY!r} if m in sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout) == sorted(SERVER_ONLY)  # the probe above can see them


# Loaded when a feature needs them: pydantic when a tool is defined (and by the server's
# models), croniter when a cron schedule is read or written, the model SDK and httpx when a
# model or webhook is called. A worker of plain tasks starts without any of them.
ON_USE = ("croniter", "httpx", "openai", "pydantic")


def test_import_runwright_loads_no_tool_cron_or_model_library():
    probe = ("import json, sys, runwright; "
             f"print(json.dumps(sorted(m for m in {ON_USE!r} if m in sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout) == []


def test_the_worker_command_parses_without_pydantic():
    """Typer 0.29 builds a pydantic adapter per option at every call (0.12 s per CLI process):
    the pin below it holds while this passes."""
    probe = ("import json, sys; sys.argv = ['runwright', 'worker', 'no_such_module_here:app']\n"
             "from runwright.cli._main import main\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             f"print(json.dumps(sorted(m for m in {ON_USE!r} if m in sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout.splitlines()[-1]) == []


def test_a_tool_and_a_cron_load_theirs_when_used():
    probe = ("import json, sys, runwright\n"
             "app = runwright.App('sqlite:///unused-never-opened.db')\n"
             "@app.tool()\ndef add(a: int, b: int) -> int:\n    return a + b\n"
             "from runwright.core._schedules import check_cron\ncheck_cron('0 9 * * 1-5')\n"
             f"print(json.dumps(sorted(m for m in {ON_USE!r} if m in sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(loaded.stdout) == ["croniter", "pydantic"]  # the probes above can see them


# Rich lays out tables and errors: a worker that starts and runs without printing one
# never loads it (nor a time zone, which only a schedule naming one reads).
WORKER_NEVER = (*ON_USE, "rich", "zoneinfo")
PROBE_APP = f"""
import json, os, sys
import runwright as rw

app = rw.App()


@app.task()
async def probe() -> None:
    print(json.dumps(sorted(m for m in {WORKER_NEVER!r} if m in sys.modules)), flush=True)
    os._exit(0)
"""


def test_a_worker_starts_and_runs_without_rich_or_what_features_load(tmp_path):
    (tmp_path / "probe_app.py").write_text(PROBE_APP)
    env = {**os.environ, "RUNWRIGHT_URL": f"sqlite:///{tmp_path / 'probe.db'}", "PYTHONPATH": str(tmp_path)}
    submit = ("import asyncio, probe_app\n"
              "async def go():\n"
              "    async with probe_app.app:\n"
              "        await probe_app.app.submit('probe')\n"
              "asyncio.run(go())")
    subprocess.run([sys.executable, "-c", submit], cwd=tmp_path, env=env, check=True, timeout=60)
    ran = subprocess.run([sys.executable, "-m", "runwright", "worker", "probe_app:app"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout.splitlines()[-1]) == []


# The fleet's bus is the store's (`store.bus(root)`): each backend imports its own when
# asked, so a process on PostgreSQL never loads redis-py, nor one on SQLite either client.
CLIENTS = ("asyncpg", "redis")


def test_a_stores_bus_loads_only_its_own_backends_client(tmp_path):
    for url, loaded in ((f"sqlite:///{tmp_path / 'unused.db'}", []),
                        ("memory://", []),
                        ("postgresql://127.0.0.1:1/unused", ["asyncpg"]),
                        ("redis://127.0.0.1:1/0", ["redis"])):
        probe = ("import json, sys\nfrom runwright.store import store_from_url\n"
                 f"bus = store_from_url({url!r}).bus('probe:v1')\n"
                 f"print(json.dumps(sorted(m for m in {CLIENTS!r} if m in sys.modules)))")
        ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
        assert json.loads(ran.stdout) == loaded, url
