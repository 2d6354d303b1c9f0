"""A long agent run resumes from its last snapshot, on every backend: the resume reads
the journal from the snapshot on (never all of it), and the conversation it goes on with
is the one it had; no model call or tool call is made twice."""

from __future__ import annotations

import json

from runwright.engine import _crashpoints as crashpoints

from ..integration.conftest import running_worker
from .scripted_openai import Reply, ScriptedOpenAI, call, tool_results
from .test_agents import FAST, model_at

TURNS = 7


async def test_a_crash_after_a_snapshot_resumes_from_it(app):
    made: list[int] = []

    @app.tool
    def count(n: int) -> int:
        """Count."""
        made.append(n)
        if n == 5:  # the attempt dies once, right after this call is journaled
            crashpoints.arm("step.after_journal:tool:count", times=1)
        return n

    def script(body, index) -> Reply:
        done = len(tool_results(body))
        if done < TURNS:
            return Reply(tool_calls=[call("count", {"n": done + 1}, f"c{done + 1}")])
        return Reply(content=json.dumps([m["content"] for m in body["messages"] if m["role"] == "tool"]))

    reads = {"whole": 0, "resumable": 0}
    whole, resumable = app.store.step_list, app.store.step_list_resumable

    async def counted_whole(run_id):
        reads["whole"] += 1
        return await whole(run_id)

    async def counted_resumable(run_id):
        reads["resumable"] += 1
        return await resumable(run_id)

    app.store.step_list, app.store.step_list_resumable = counted_whole, counted_resumable
    with ScriptedOpenAI(script) as server:
        app.agent("counter", model=model_at(server), tools=[count], snapshot_every=2, retries=2,
                  backoff=FAST)
        try:
            async with running_worker(app):
                handle = await app.submit("counter", input="go")
                answer = json.loads(await handle.result(timeout_s=30))
        finally:
            crashpoints.disarm()
            app.store.step_list, app.store.step_list_resumable = whole, resumable
    assert answer == [str(n) for n in range(1, TURNS + 1)], "the conversation went on whole"
    assert made == list(range(1, TURNS + 1)), "each tool call made once"
    assert len(server.requests) == TURNS + 1, "no model call made twice"
    assert reads == {"whole": 0, "resumable": 1}, "the resume read the journal from the snapshot only"
    tail = await app.store.step_list_resumable(handle.id)
    names = [s.name for s in tail]
    assert names[0] == "snapshot" and names.count("snapshot") == 1
    journal = await app.store.step_list(handle.id)
    assert [s.name for s in journal].count("snapshot") == TURNS // 2
    assert (await handle.refresh()).attempt == 2
    assert tail[0].value()["state"]["turn"] == 6, "the last snapshot: after turn 6"
