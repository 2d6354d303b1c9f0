"""Actors of the retention races, each a process of its own on the store (run as
`python -m tests.process.race_actors ROLE URL GO STOP ARG`): each says it is ready (a
file GO.ready.<pid>), then waits until the file GO exists, so that all of them start
together, then acts until the file STOP exists (a retrier: until it retried its runs).

    retry URL GO STOP IDS   retry each run of IDS (comma-separated) once, in that order;
                            print one JSON line per run: {"id", "answer"}, where the answer
                            is "requeued" or the name of the error that refused it
    cancel URL GO STOP IDS  cancel each run of IDS (comma-separated) once, in that order;
                            print one JSON line per run: {"id", "answer"}, where the answer
                            is the run's state after the cancel or the name of the error
                            that refused it (a store error ends the process: exit 1)
    pause URL GO STOP IDS   pause each run of IDS once, in that order, a random moment of up
                            to 20 ms apart; print one JSON line
                            per run: {"id", "answer"}: "held" (paused now), "requested"
                            (running, asked to stop at its next step) or the name of the
                            error that refused it
    resume URL GO STOP IDS  resume each run of IDS once; the answer is the run's state
                            after it, or the name of the error that refused it
    fork URL GO STOP SPEC   fork run RUN from STEP under each key of KEYS (SPEC is
                            RUN:STEP:KEYS, the keys comma-separated), in that order; print
                            one JSON line per key: {"key", "id", "existed"}
    sweep URL GO STOP MODE  retention passes, one after another: MODE "cap" (each thread
                            keeps its newest run) or "age" (runs ended a millisecond ago);
                            print the number of passes and of runs removed as JSON; a
                            pass that raises ends the process with its traceback (exit 1)
    flowdue URL GO STOP N   submit N runs of a debounced task (a window of 5 ms) and of a
                            replacing singleton, on key "o-1", while claimers take them;
                            print one JSON line per submission, as `flow` does
    flowbatch URL GO STOP N  submit N items to a batched task through the App (key "o-1",
                            at most 4 items, 20 ms), while claimers take its runs; print
                            one JSON line per submission: {"item", "id", "outcome"}
    flowclaim URL GO STOP -  claim the runs of flowdue, flowmerge and flowbatch one at a
                            time, hold each a moment and finish it, until STOP exists;
                            print one JSON line per claim: {"id", "args"} (the
                            arguments the claim read)
    limited URL GO STOP TASK  a worker of limited task TASK: claims (its runs carry
                            concurrency limits), holds each claimed run a moment, finishes
                            it, alternately alone and along with its next claim, until STOP
                            exists; prints {"claimed": n} as JSON
    flow URL GO STOP N      submit N runs with flow control of each kind (singleton, debounce,
                            throttle: task "flowed-<kind>", all on key "o-1"), the kinds in
                            turn, each with arguments {"order": "o-1", "by": <pid>, "i": <i>};
                            print one JSON line per submission: {"kind", "i", "id",
                            "outcome"} or {"kind", "i", "refused": <the run holding the key>}
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sys
import time

from runwright.errors import InvalidTransition, RunEnded, RunwrightError
from runwright.runs import RunState
from runwright.store import store_from_url
from runwright.store._params import (
    RunCancelParams,
    RunClaimParams,
    RunFinishParams,
    RunForkParams,
    RunInsertParams,
    RunPauseParams,
    RunReclaimParams,
    RunResumeParams,
    RunRetryParams,
    ThreadRunReclaimParams,
    WorkerRegisterParams,
)

START_DEADLINE_S = 120.0  # only so that a lost start signal ends the actor


async def _until_exists(path: str) -> None:
    """Say this actor is ready (a file beside GO), then wait for GO."""
    with open(f"{path}.ready.{os.getpid()}", "w"):
        pass
    deadline = time.monotonic() + START_DEADLINE_S
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise SystemExit(f"no start signal at {path}")
        await asyncio.sleep(0.005)


async def retry(url: str, go: str, ids: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    try:
        await _until_exists(go)
        for run_id in (int(i) for i in ids.split(",")):
            try:
                run = await store.run_retry(RunRetryParams(run_id))
                answer = "requeued" if run.state.value == "queued" else f"state {run.state.value}"
            except RunwrightError as exc:  # reclaimed before the retry came: refused, fine
                answer = type(exc).__name__
            print(json.dumps({"id": run_id, "answer": answer}), flush=True)
    finally:
        await store.close()


async def cancel(url: str, go: str, ids: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    try:
        await _until_exists(go)
        for run_id in (int(i) for i in ids.split(",")):
            try:
                run = await store.run_cancel(RunCancelParams(run_id))
                answer = run.state.value
            except RunEnded as exc:  # another canceller's cancel ended it first: fine
                answer = type(exc).__name__
            print(json.dumps({"id": run_id, "answer": answer}), flush=True)
    finally:
        await store.close()


async def pause(url: str, go: str, ids: str, resume: bool = False) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    try:
        await _until_exists(go)
        for run_id in (int(i) for i in ids.split(",")):
            try:
                if resume:
                    resumed = await store.run_resume(RunResumeParams(run_id, by=str(os.getpid())))
                    answer = resumed.state.value
                else:
                    # Spread over the runs' lives: some meet a queued run, some a claim, a
                    # step boundary or the end of an attempt.
                    await asyncio.sleep(random.uniform(0, 0.02))
                    run = await store.run_pause(RunPauseParams(run_id, by=str(os.getpid())))
                    answer = "held" if run.paused else "requested" if run.pause_requested else run.state.value
            except (RunEnded, InvalidTransition) as exc:  # ended, or not paused: refused, fine
                answer = type(exc).__name__
            print(json.dumps({"id": run_id, "answer": answer}), flush=True)
    finally:
        await store.close()


async def fork(url: str, go: str, spec: str) -> None:
    run_id, step, keys = spec.split(":")
    store = store_from_url(url)
    await store.open(create=False)
    try:
        original = await store.run_get(int(run_id))
        assert original is not None
        await _until_exists(go)
        for key in keys.split(","):
            made = RunInsertParams(key=key, task=original.task, args=original.args)
            run = await store.run_fork(RunForkParams(original.id, int(step), made))
            print(json.dumps({"key": key, "id": run.id, "existed": run.existed}), flush=True)
    finally:
        await store.close()


async def sweep(url: str, go: str, stop: str, mode: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    passes = removed = 0
    try:
        await _until_exists(go)
        while not os.path.exists(stop):
            if mode == "cap":
                got = await store.thread_run_reclaim(ThreadRunReclaimParams(keep=1, limit=10))
            else:
                got = await store.run_reclaim(RunReclaimParams(limit=2, max_age_s=0.001))
            passes, removed = passes + 1, removed + len(got.run_ids)
    finally:
        await store.close()
    print(json.dumps({"passes": passes, "removed": removed}), flush=True)


async def limited(url: str, go: str, stop: str, task: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    claimed = 0
    try:
        wid = await store.worker_register(WorkerRegisterParams("race", os.getpid(), ["default"], [task]))
        claim = RunClaimParams(wid, ["default"], [task], 3, 60.0, limited=[task])
        await _until_exists(go)
        runs = await store.run_claim(claim)
        along = False
        while not os.path.exists(stop):
            claimed += len(runs)
            if not runs:
                await asyncio.sleep(0.002)
                runs = await store.run_claim(claim)
                continue
            await asyncio.sleep(0.003)  # held a moment: the others claim meanwhile
            ends = [RunFinishParams(r.id, r.fence, RunState.SUCCEEDED, result="null", limited=True)
                    for r in runs]
            for end in ends:
                end.alone = True
            if along:  # the finish and the next claim in one write where a store has one
                refused, runs = await store.run_finish_claim(ends, claim)
            else:
                refused = await store.run_finish_many(ends)
                runs = await store.run_claim(claim)
            assert refused == [], refused
            along = not along
        if runs:  # claimed as STOP came: given back, not left running
            await store.run_finish_many([RunFinishParams(r.id, r.fence, RunState.SUCCEEDED, result="null",
                                                         limited=True) for r in runs])
            claimed += len(runs)
    finally:
        await store.close()
    print(json.dumps({"claimed": claimed}), flush=True)


# What each kind of the flow role declares, on the key "{args.order}": a window and a
# period long enough that nothing comes due while the actors race.
def _flows():  # type: ignore[no-untyped-def]
    from runwright.tasks._flow import Debounce, FlowOf, Singleton, Throttle

    return {kind: FlowOf(f"flowed-{kind}", declared) for kind, declared in (
        ("singleton", Singleton(key="{args.order}")),
        ("debounce", Debounce(key="{args.order}", window_s=3600)),
        ("throttle", Throttle(key="{args.order}", per_s=3600)))}


async def flow(url: str, go: str, n: str) -> None:
    from runwright.errors import SingletonTaken
    from runwright.tasks._submission import fresh_key

    flows = _flows()
    store = store_from_url(url)
    await store.open(create=False)
    try:
        await _until_exists(go)
        for i in range(int(n)):
            for kind, declared in flows.items():
                args = {"order": "o-1", "by": os.getpid(), "i": i}
                params = RunInsertParams(key=fresh_key(), task=f"flowed-{kind}", args=json.dumps(args),
                                         key_is_fresh=True, flow=declared.of(args, None))
                try:
                    (run,) = await store.run_insert_many([params])
                    answer = {"kind": kind, "i": i, "id": run.id, "outcome": run.outcome}
                    print(json.dumps(answer), flush=True)
                except SingletonTaken as exc:
                    print(json.dumps({"kind": kind, "i": i, "refused": exc.run_id}), flush=True)
    finally:
        await store.close()


def _due_flows():  # type: ignore[no-untyped-def]
    from runwright.tasks._flow import Debounce, FlowOf, Singleton

    return {kind: FlowOf(f"flowed-{kind}", declared) for kind, declared in (
        ("debounce", Debounce(key="{args.order}", window_s=0.005)),
        ("replace", Singleton(key="{args.order}", on_conflict="replace")))}


async def flowdue(url: str, go: str, n: str) -> None:
    from runwright.errors import SingletonTaken
    from runwright.tasks._submission import fresh_key

    flows = _due_flows()
    store = store_from_url(url)
    await store.open(create=False)
    try:
        await _until_exists(go)
        for i in range(int(n)):
            for kind, declared in flows.items():
                args = {"order": "o-1", "by": os.getpid(), "i": i}
                params = RunInsertParams(key=fresh_key(), task=f"flowed-{kind}", args=json.dumps(args),
                                         key_is_fresh=True, flow=declared.of(args, None))
                try:
                    (run,) = await store.run_insert_many([params])
                    print(json.dumps({"kind": kind, "by": os.getpid(), "i": i, "id": run.id,
                                      "outcome": run.outcome, "replaced": run.replaced}), flush=True)
                except SingletonTaken as exc:
                    print(json.dumps({"kind": kind, "by": os.getpid(), "i": i, "refused": exc.run_id}),
                          flush=True)
                await asyncio.sleep(random.uniform(0, 0.004))
    finally:
        await store.close()


def _union(standing: dict, new: dict) -> dict:
    return {**new, "items": standing["items"] + new["items"]}


async def flowmerge(url: str, go: str, n: str) -> None:
    """Debounce through the App (its merge over the codecs' texts), a 5 ms window: each
    submission's one item, answered with the run that holds it."""
    import runwright as rw

    app = rw.App(url)

    @app.task(name="flowed-merge", debounce=rw.Debounce(key="{args.order}", window_s=0.005, merge=_union))
    async def merged(order: str, items: list[str]) -> None:
        return None

    await app.open()
    try:
        await _until_exists(go)
        for i in range(int(n)):
            item = f"{os.getpid()}-{i}"
            handle = await app.submit(merged, order="o-1", items=[item])
            print(json.dumps({"item": item, "id": handle.id}), flush=True)
            await asyncio.sleep(random.uniform(0, 0.004))
    finally:
        await app.close()


BATCH_MOST = 4  # the most items of a batch of the flowbatch role


async def flowbatch(url: str, go: str, n: str) -> None:
    """Batch through the App (max BATCH_MOST items, 20 ms at most: most batches fill, some
    come due unfilled): each submission's one item, answered with the run that holds it."""
    import runwright as rw

    app = rw.App(url)

    @app.task(name="flowed-batch", batch=rw.Batch(key="{args.order}", max_items=BATCH_MOST, max_wait_s=0.02))
    async def batched(items: list[dict]) -> None:
        return None

    await app.open()
    try:
        await _until_exists(go)
        for i in range(int(n)):
            item = f"{os.getpid()}-{i}"
            handle = await app.submit(batched, order="o-1", item=item)
            print(json.dumps({"item": item, "id": handle.id, "outcome": handle.outcome}), flush=True)
            await asyncio.sleep(random.uniform(0, 0.002))
    finally:
        await app.close()


async def flowclaim(url: str, go: str, stop: str) -> None:
    store = store_from_url(url)
    await store.open(create=False)
    tasks = ["flowed-debounce", "flowed-replace", "flowed-merge", "flowed-batch"]
    try:
        wid = await store.worker_register(WorkerRegisterParams("race", os.getpid(), ["default"], tasks))
        claim = RunClaimParams(wid, ["default"], tasks, 1, 60.0)
        await _until_exists(go)
        while not os.path.exists(stop):
            runs = await store.run_claim(claim)
            if not runs:
                await asyncio.sleep(0.001)
                continue
            for run in runs:
                print(json.dumps({"id": run.id, "args": run.args}), flush=True)
            await asyncio.sleep(0.002)  # held a moment: the submitters come meanwhile
            refused = await store.run_finish_many([RunFinishParams(r.id, r.fence, RunState.SUCCEEDED,
                                                                   result="null") for r in runs])
            assert refused == [], refused
    finally:
        await store.close()


def main(argv: list[str]) -> None:
    role, url, go, stop, arg = argv
    if role == "flow":
        asyncio.run(flow(url, go, arg))
        return
    if role == "flowdue":
        asyncio.run(flowdue(url, go, arg))
        return
    if role == "flowmerge":
        asyncio.run(flowmerge(url, go, arg))
        return
    if role == "flowbatch":
        asyncio.run(flowbatch(url, go, arg))
        return
    if role == "flowclaim":
        asyncio.run(flowclaim(url, go, stop))
        return
    if role == "retry":
        asyncio.run(retry(url, go, arg))
    elif role == "cancel":
        asyncio.run(cancel(url, go, arg))
    elif role == "limited":
        asyncio.run(limited(url, go, stop, arg))
    elif role in ("pause", "resume"):
        asyncio.run(pause(url, go, arg, resume=role == "resume"))
    elif role == "fork":
        asyncio.run(fork(url, go, arg))
    else:
        asyncio.run(sweep(url, go, stop, arg))


if __name__ == "__main__":
    main(sys.argv[1:])
