"""`import runwright` loads no web server: a worker or a program that only submits never
pays for FastAPI, uvicorn or sse-starlette (the server package imports them when used)."""

from __future__ import annotations

import json
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
