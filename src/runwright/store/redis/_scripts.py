"""The Lua scripts, one per operation, loaded once and called by SHA.

Each `scripts/<name>.lua` is prefixed with `scripts/lib.lua` (the helpers every script
shares) when it is loaded. redis-py's Script calls EVALSHA and, on NOSCRIPT (after a
SCRIPT FLUSH, a restart or a failover to a replica that never saw the script), loads it
again and retries, so a flushed script cache costs one round trip, never an error.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any, Sequence

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError

from .. import _rules as rules
from ._codec import CLAIM_READS

__all__ = ["SCRIPT_NAMES", "Scripts"]

SCRIPT_NAMES = (
    "bucket_take", "cancel", "claim", "count_due", "due_kinds", "event_append", "event_close", "event_page",
    "event_publish", "event_read", "event_reclaim", "event_trim", "event_wait", "expire", "extend",
    "fail_unrunnable", "finish", "flow_probe", "flow_reclaim", "fork",
    "insert", "insert_flow", "insert_threaded",
    "lease_take", "limited_tasks", "limits_backfill", "migrate", "move_events", "move_questions",
    "move_runs", "move_steps", "next_due", "pause", "question_answer",
    "question_open", "rescue", "rescue_scan", "retry", "run_reclaim",
    "schedule_advance", "schedule_delete", "schedule_pause", "schedule_save", "signal_send",
    "signal_start", "signal_take", "signal_withdraw", "step",
    "thread_append", "thread_backfill", "thread_delete", "thread_facts", "thread_forget",
    "thread_probe", "thread_reclaim", "thread_trim_messages", "worker_deregister",
    "worker_heartbeat", "worker_register",
)


def _prelude(name: str) -> str:
    """What a script is given before its text: claim.lua is the limited claim or not."""
    return "local LIMITED = false\nlocal FAIR = false\n" if name == "claim" else ""


def _source(name: str) -> str:
    return resources.files(__package__).joinpath("scripts", f"{name}.lua").read_text()


def _lua_string(text: str) -> str:
    assert "]==]" not in text
    return f"[==[{text}]==]"


def _born_cancelled() -> str:
    """rules.born_cancelled's constants, for lib.lua's insert_one."""
    states = ", ".join(f"[ {_lua_string(state)} ] = true" for state in rules.CANCELS_CHILDREN)
    return (f"local CANCELS_CHILDREN = {{{states}}}\n"
            f"local BORN_CANCELLED_ERROR = {_lua_string(rules.born_cancelled_error())}\n"
            f"local BORN_CANCELLED_DATA = {_lua_string(json.dumps(rules.BORN_CANCELLED_EVENT))}\n"
            f"local PAUSED = {_lua_string(rules.PAUSED)}\nlocal PAUSED_AT = {_lua_string(rules.PAUSED_AT)}\n")


class Scripts:
    """The scripts of one store, bound to its client and its key prefix."""

    def __init__(self, client: Redis, first_key: str, ended_keep: int) -> None:
        fields = ", ".join(f"'{name}'" for name in CLAIM_READS)
        lib = (f"local CLAIM_READS = {{{fields}}}\nlocal ENDED_KEEP = {int(ended_keep)}\n"
               f"{_born_cancelled()}{_source('lib')}")
        self._keys = [first_key]
        self._scripts: dict[str, AsyncScript] = {
            name: client.register_script(f"{lib}\n{_prelude(name)}{_source(name)}") for name in SCRIPT_NAMES}
        # The limited claim: claim.lua for the runs that carry concurrency limits (see there).
        self._scripts["claim_limited"] = client.register_script(
            f"{lib}\nlocal LIMITED = true\nlocal FAIR = false\n{_source('claim')}")
        # The fair claim: the limited claim that takes fair runs key by key (store._fair_rules).
        self._scripts["claim_fair"] = client.register_script(
            f"{lib}\nlocal LIMITED = true\nlocal FAIR = true\n{_source('claim')}")

    def source(self, name: str) -> str:
        """A script's whole text, its helpers included (for a client of another kind)."""
        return str(self._scripts[name].script)

    async def load_all(self, client: Redis) -> None:
        """Load every script up front, so the hot path only ever sends SHAs."""
        for script in self._scripts.values():
            script.sha = await client.script_load(script.script)

    async def call(self, name: str, args: Sequence[Any]) -> Any:
        return await self._scripts[name](keys=self._keys, args=list(args))

    async def call_many(self, client: Redis, calls: Sequence[tuple[str, Sequence[Any]]]) -> list[Any]:
        """Several scripts in one round trip, in turn (a pipeline, not a transaction:
        each script is atomic by itself). By SHA, as `call`: a pipeline of Scripts would
        ask SCRIPT EXISTS first, a round trip more each time. A script the server lost
        is called again alone (loaded again), the others' answers kept: none runs twice."""
        async with client.pipeline(transaction=False) as pipe:
            for name, args in calls:
                pipe.evalsha(self._scripts[name].sha, len(self._keys), *self._keys, *args)
            answers = list(await pipe.execute(raise_on_error=False))
        for i, ((name, args), answer) in enumerate(zip(calls, answers)):
            if isinstance(answer, NoScriptError):
                answers[i] = await self.call(name, args)
            elif isinstance(answer, Exception):
                raise answer
        return answers
