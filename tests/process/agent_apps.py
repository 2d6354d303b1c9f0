"""The app that agent worker subprocesses load as `tests.process.agent_apps:app`.

One agent, `assistant`, on `openai:gpt-4o-mini`: the openai provider reads OPENAI_BASE_URL
and OPENAI_API_KEY, which the test sets to its scripted server (see agent_harness.py).
The scripts decide which of the tools the model asks for.

Each tool execution appends a ledger line (RUNWRIGHT_AGENT_LEDGER, one file per process:
`tool pid detail`), so a test sees every execution, including one whose process was
killed before anything about it reached the store. The `pay`, `fetch` and `charge` tools
block on their first execution in the ledger's directory (the test kills the worker in
there); any later execution returns at once.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import runwright as rw

# RUNWRIGHT_URL is set by `runwright worker --url` before this module is imported.
app = rw.App()

LEDGER_ENV = "RUNWRIGHT_AGENT_LEDGER"
MODEL = "openai:gpt-4o-mini"
HOLD_LIMIT_S = 120.0  # a held call gives up eventually, so nothing hangs forever


def ledger_dir() -> Path:
    return Path(os.environ[LEDGER_ENV])


def note(tool: str, detail: str = "-") -> None:
    """Append one ledger line; flushed on close, so a SIGKILL right after cannot lose it."""
    with open(ledger_dir() / f"{os.getpid()}.log", "a") as out:
        out.write(f"{tool} {os.getpid()} {detail}\n")


async def hold_first_call(tool: str) -> None:
    """Block the first execution of `tool` (in any process: O_EXCL makes it race-free),
    asynchronously, as a slow remote call would; later executions pass at once."""
    try:
        os.close(os.open(ledger_dir() / f"first-{tool}", os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    deadline = time.monotonic() + HOLD_LIMIT_S
    while time.monotonic() < deadline:
        await asyncio.sleep(0.01)


@app.tool(delivery="at_most_once")
async def pay(amount: int) -> str:
    """Move money: must never happen twice."""
    note("pay")
    await hold_first_call("pay")
    return f"paid {amount}"


@app.tool  # at_least_once, the default
async def fetch(url: str) -> str:
    """Read a page: harmless to repeat."""
    note("fetch")
    await hold_first_call("fetch")
    return f"fetched {url}"


@app.tool(delivery="idempotent")
async def charge(amount: int, idempotency_key: str) -> str:
    """Charge a card; the far side deduplicates on the key."""
    note("charge", idempotency_key)
    await hold_first_call("charge")
    return f"charged {amount}"


@app.tool  # at_least_once
async def prepare(order: str) -> str:
    """Get an order ready."""
    note("prepare", order)
    return f"prepared {order}"


@app.tool(delivery="at_most_once")
async def transfer(order: str) -> str:
    """Send an order's money: must never happen twice."""
    note("transfer", order)
    return f"transferred {order}"


async def gate_opened(name: str) -> str:
    """Wait until the test opens the gate `name` (a file `gate-<name>` in the ledger's
    directory): the run is mid-turn, its tool call in flight, as long as the test likes."""
    note("wait_gate", name)
    deadline = time.monotonic() + HOLD_LIMIT_S
    while not (ledger_dir() / f"gate-{name}").exists() and time.monotonic() < deadline:
        await asyncio.sleep(0.01)
    return f"gate {name} opened"


@app.tool  # at_least_once
async def wait_gate(name: str) -> str:
    """Wait until the test opens the gate."""
    return await gate_opened(name)


# retries=0: a failed attempt ends the run, so a test sees it instead of a silent retry.
# (A takeover after a lost worker is no attempt: it is not limited by this.)
app.agent("assistant", model=MODEL, tools=[pay, fetch, charge, prepare, transfer], retries=0)
# An agent whose turn waits on a gate: a message steered to it mid-run (test_steering.py).
app.agent("steerable", model=MODEL, tools=[wait_gate], retries=0)

# A model with a quota: a request a second, one at once (see test_rate_limits.py).
LIMITED = "openai:limited"
app.rate_limit(LIMITED, requests_per_min=60, burst_s=1)
