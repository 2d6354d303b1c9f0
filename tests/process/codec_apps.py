"""The app that worker and server subprocesses load as `tests.process.codec_apps:app`
(test_payload_codecs.py): its payload codecs come from RUNWRIGHT_PAYLOAD_* alone, as a
deployment's processes get them."""

from __future__ import annotations

from typing import Any

import runwright as rw

# RUNWRIGHT_URL is set by `runwright worker --url` before this module is imported.
app = rw.App()


@app.task(retries=0)
async def agent_turns(ctx: rw.Context, history: list[dict[str, Any]]) -> dict[str, Any]:
    """An agent-like run: its history in the arguments, a journaled step over it, an event
    for followers, and the history grown by one turn as its result."""
    answer = await ctx.step("model", lambda: {"role": "assistant", "content": f"{len(history)} turns read"})
    await ctx.emit("progress", {"turns": len(history), "last": history[-1]["content"]})
    return {"history": [*history, answer], "answer": answer["content"]}


@app.task(retries=2)
async def big_step(ctx: rw.Context, history: list[dict[str, Any]]) -> dict[str, Any]:
    """A tool step whose output is the whole history (large: offloaded when the codecs say)."""
    kept = await ctx.step("tool", lambda: {"output": history})
    return {"turns": len(kept["output"])}
