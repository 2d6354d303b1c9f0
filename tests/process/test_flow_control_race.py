"""Flow control per key against submitters racing in real processes, on every backend: 4
processes submit runs of one key at once, of a singleton, a debounced and a throttled
task in turn, and the store's decision under each key's lock holds across them: the
singleton key ends with exactly one queued run (every other submission refused, naming
it), the debounced key with exactly one queued run carrying the arguments of a
submission that came last (some process's final one: each process's earlier submissions
were followed by its later ones), the throttled key with one run (every other submission
dropped, answered with it)."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest

import runwright as rw
from runwright.runs import RunState
from runwright.store._params import RunCountParams, RunListParams

from .harness import DEADLINE_S, ROOT, outputs, wait_until

pytestmark = pytest.mark.process
SUBMITTERS, EACH = 4, 15
ALL = SUBMITTERS * EACH


def _submitter(url: str, go: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.race_actors", "flow", url, str(go),
                             str(go.with_suffix(".stop")), str(EACH)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


async def _race(store_url: str, tmp_path: Path) -> list[dict]:
    """Every submitter's answers, once all raced from one start."""
    go = tmp_path / "go"
    submitters = [_submitter(store_url, go) for _ in range(SUBMITTERS)]
    try:
        await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == SUBMITTERS or any(
            s.poll() is not None for s in submitters), "every submitter is ready", timeout_s=2 * DEADLINE_S)
        assert all(s.poll() is None for s in submitters), "a submitter died before the start"
    finally:
        go.touch()
    answers = []
    for submitter in submitters:
        out, err = outputs(submitter, 2 * DEADLINE_S)
        assert submitter.returncode == 0, err[-3000:]
        mine = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert len(mine) == 3 * EACH, out[-2000:]
        answers += mine
    return answers


async def test_submitters_racing_on_one_key_get_one_decision_each(
        app: rw.App, store_url: str, tmp_path: Path) -> None:
    answers = await _race(store_url, tmp_path)
    counts = await app.store.run_count_by_state(RunCountParams())
    assert counts == {"queued": 3}, f"one queued run of each task's key, and nothing else: {counts}"
    runs = {run.task: run for run in await app.store.run_list(RunListParams(limit=10))}
    of = {kind: [a for a in answers if a["kind"] == kind] for kind in ("singleton", "debounce", "throttle")}

    singleton = runs["flowed-singleton"]
    made = [a for a in of["singleton"] if "id" in a]
    assert [(a["id"], a["outcome"]) for a in made] == [(singleton.id, "new")], made
    assert [a["refused"] for a in of["singleton"] if "refused" in a] == [singleton.id] * (ALL - 1)

    debounced = runs["flowed-debounce"]
    assert {a["id"] for a in of["debounce"]} == {debounced.id}, "every submitter got the one run"
    outcomes = [a["outcome"] for a in of["debounce"]]
    assert outcomes.count("new") == 1 and outcomes.count("debounced") == ALL - 1
    stored = debounced.arguments()
    assert stored["i"] == EACH - 1, f"the run holds a submission that a later one overwrote: {stored}"

    throttled = runs["flowed-throttle"]
    assert {a["id"] for a in of["throttle"]} == {throttled.id}
    assert sorted(a["outcome"] for a in of["throttle"]) == ["dropped"] * (ALL - 1) + ["new"]



def _submit(url: str, task: str, n: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runwright", "submit", "tests.process.flow_apps:app", task,
                           "--args", json.dumps({"order": "o-1", "n": n}), "--url", url],
                          cwd=ROOT, capture_output=True, text=True, timeout=2 * DEADLINE_S)


def test_the_command_line_says_what_each_submission_did(tmp_path: Path) -> None:
    """One backend: the line is the CLI's, the decision the store's (tested above)."""
    url = f"sqlite:///{tmp_path / 'runwright.db'}"
    lines = {}
    for task in ("quote", "reindex", "digest", "charge", "collect"):
        first, second = _submit(url, task, 1), _submit(url, task, 2)
        assert first.returncode == 0, first.stderr
        assert first.stdout.startswith("run ") and " submitted (key " in first.stdout
        lines[task] = (int(first.stdout.split()[1]), second)
    quote, said = lines["quote"]
    assert f"submitted, replacing queued run {quote} (cancelled)" in said.stdout
    reindex, said = lines["reindex"]
    assert said.stdout.startswith(f"run {reindex} debounced (this queued run took the arguments)")
    digest, said = lines["digest"]
    assert said.stdout.startswith(f"run {digest} stands; this submission was dropped by its key's throttle")
    collect, said = lines["collect"]
    assert said.stdout.startswith(f"run {collect} batched (this queued run took the submission as one "
                                  f"more item)")
    held, refused = lines["charge"]
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"error: SingletonTaken: task 'charge': singleton key 'o-1' is held by run {held} (queued); "
        f"nothing was submitted"]
    # Ended, the singleton's and the batch's runs leave records no decision needs: any
    # retention pass removes them, and says so.
    for run_id in (held, collect):
        assert _cli(url, "cancel", str(run_id)).returncode == 0
    dry = _cli(url, "sweep", "--tombstone-age-s", "3600", "--dry-run", "--json")
    assert json.loads(dry.stdout)["flow_keys"] == 2, dry.stdout + dry.stderr
    swept = _cli(url, "sweep", "--tombstone-age-s", "3600")
    assert "removed 2 records of flow control keys that no decision needs any more" in swept.stdout, swept
    again = _submit(url, "charge", 3)
    assert again.returncode == 0 and " submitted (key " in again.stdout, "the key's record went: a new run"


def _cli(url: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runwright", *args, "--url", url], cwd=ROOT,
                          capture_output=True, text=True, timeout=2 * DEADLINE_S)


CLAIMERS, DUE_EACH = 2, 25


def _actor(role: str, url: str, go: Path, arg: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.race_actors", role, url, str(go),
                             str(go.with_suffix(".stop")), arg], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _lines(actor: subprocess.Popen[bytes]) -> list[dict]:
    out, err = outputs(actor, 2 * DEADLINE_S)
    assert actor.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def _submitters_and_claimers(role: str, store_url: str,
                                   tmp_path: Path) -> tuple[list[dict], list[dict]]:
    """SUBMITTERS processes of `role` and CLAIMERS claimer processes, raced from one start:
    the submitters' answers, then (the claimers stopped once those are in) the claims."""
    go = tmp_path / "go"
    submitters = [_actor(role, store_url, go, str(DUE_EACH)) for _ in range(SUBMITTERS)]
    claimers = [_actor("flowclaim", store_url, go, "-") for _ in range(CLAIMERS)]
    actors = submitters + claimers
    try:
        await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == len(actors) or any(
            a.poll() is not None for a in actors), "every actor is ready", timeout_s=2 * DEADLINE_S)
        assert all(a.poll() is None for a in actors), "an actor died before the start"
    finally:
        go.touch()
    answers = [line for submitter in submitters for line in _lines(submitter)]
    go.with_suffix(".stop").touch()
    return answers, [line for claimer in claimers for line in _lines(claimer)]


async def test_debounces_and_replacing_singletons_racing_claimers_never_touch_a_claimed_run(
        app: rw.App, store_url: str, tmp_path: Path) -> None:
    """4 submitter processes debounce (a 5 ms window: runs come due as they race) and
    submit a replacing singleton on one key, while 2 claimer processes take and finish the
    key's runs: the store's check that the key's run is still queued and unclaimed holds
    against the claim. A claimed run keeps the arguments its claim read (no debounce
    rewrote them after), is never cancelled as replaced, and is claimed once; a replaced
    run never runs; every submission is answered with a run or refused naming one."""
    answers, claims = await _submitters_and_claimers("flowdue", store_url, tmp_path)

    assert len(answers) == SUBMITTERS * DUE_EACH * 2, "a submission went unanswered"
    claimed = [c["id"] for c in claims]
    assert len(claimed) == len(set(claimed)), "a run was claimed twice"
    by_id = {run.id: run for run in await app.store.run_get_many(sorted(
        {a.get("id") or a.get("refused") for a in answers} | set(claimed)))}
    for claim in claims:
        run = by_id[claim["id"]]
        assert run.state is RunState.SUCCEEDED, (run.id, run.state, run.error)
        assert run.args == claim["args"], f"run {run.id}'s arguments changed after its claim"
    debounced = [a for a in answers if a["kind"] == "debounce"]
    for run_id in {c["id"] for c in claims} & {a["id"] for a in debounced}:
        sent = [(a["by"], a["i"]) for a in debounced if a["id"] == run_id]
        ran = json.loads(by_id[run_id].args)
        assert (ran["by"], ran["i"]) in sent, f"run {run_id} ran arguments no submission gave it"
    replaced = {a["replaced"] for a in answers if a["kind"] == "replace" and a.get("replaced")}
    # The race happened: a submission met the key's run queued (replaced it) or claimed
    # already (refused). A loaded machine may give only the one or the other.
    refused = [a for a in answers if a["kind"] == "replace" and "refused" in a]
    assert replaced or refused, "no submission met another's run: the race did not happen"
    assert not replaced & set(claimed), "a claimed run was replaced"
    for run_id in replaced:
        assert by_id[run_id].state is RunState.CANCELLED, (run_id, by_id[run_id].state)
    assert len(claimed) >= 2, "the claimers took nothing: the race did not happen"


async def test_merging_debouncers_racing_claimers_lose_and_double_no_item(
        app: rw.App, store_url: str, tmp_path: Path) -> None:
    """4 submitter processes debounce through the App with a merge that appends each
    submission's one item to the key's queued run (a 5 ms window: runs come due and are
    claimed as they race), while 2 claimer processes take the key's runs: every item ends
    in exactly one run, the one its submission was answered with, and a claimed run holds
    the items its claim read (no merge reached it after)."""
    answers, claims = await _submitters_and_claimers("flowmerge", store_url, tmp_path)

    assert len(answers) == SUBMITTERS * DUE_EACH, "a submission went unanswered"
    runs = {run.id: run for run in await app.store.run_get_many(sorted({a["id"] for a in answers}))}
    items = [item for run in runs.values() for item in json.loads(run.args)["items"]]
    assert sorted(items) == sorted(a["item"] for a in answers), "an item was lost or merged twice"
    for answer in answers:
        assert answer["item"] in json.loads(runs[answer["id"]].args)["items"], answer
    for claim in claims:
        assert runs[claim["id"]].args == claim["args"], f"run {claim['id']} was merged into after its claim"
    merged = [run for run in runs.values() if len(json.loads(run.args)["items"]) > 1]
    assert merged, "no submission met another's queued run: the race did not happen"
    assert claims, "the claimers took nothing: the race did not happen"


async def test_batch_submitters_racing_claimers_put_each_item_in_exactly_one_run(
        app: rw.App, store_url: str, tmp_path: Path) -> None:
    """4 submitter processes submit items to a batched task through the App (at most 4
    items, 20 ms: batches fill, come due and are claimed as they race), while 2 claimer
    processes take the key's runs: every item ends in exactly one run, the one its
    submission was answered with; no run holds more than 4; a claimed run holds the
    items its claim read (none joined it after)."""
    from .race_actors import BATCH_MOST

    answers, claims = await _submitters_and_claimers("flowbatch", store_url, tmp_path)

    assert len(answers) == SUBMITTERS * DUE_EACH, "a submission went unanswered"
    runs = {run.id: run for run in await app.store.run_get_many(sorted({a["id"] for a in answers}))}
    held = {run_id: [item["item"] for item in json.loads(run.args)["items"]] for run_id, run in runs.items()}
    items = [item for got in held.values() for item in got]
    assert sorted(items) == sorted(a["item"] for a in answers), "an item was lost or batched twice"
    assert max(len(got) for got in held.values()) <= BATCH_MOST, f"a batch over max_items: {held}"
    for answer in answers:
        assert answer["item"] in held[answer["id"]], answer
    for claim in claims:
        assert runs[claim["id"]].args == claim["args"], f"run {claim['id']} took an item after its claim"
    # The race happened: submissions met another's queued batch (a loaded machine may let
    # none fill: the conformance scenarios fill one).
    assert [got for got in held.values() if len(got) > 1], "no batch took two: the race did not happen"
    assert claims, "the claimers took nothing: the race did not happen"
