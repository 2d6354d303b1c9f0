"""Retention's removal of flow control keys' records against submitters of the same key,
in real processes, on every backend: 4 processes submit a refusing singleton on one key
while one process cancels the key's queued runs as they come (the key free again, its
record unneeded) and another removes unneeded records without pause. A record removed
under a submitter never breaks its decision: the key never has two queued runs (the
canceller, the only actor that ends them, would see both), and every submission made
the key's run or was refused naming a run that submission could see."""

from __future__ import annotations

import glob
import json
import subprocess
import sys
from pathlib import Path

import pytest

import runwright as rw

from .harness import DEADLINE_S, ROOT, outputs, wait_until

pytestmark = pytest.mark.process
SUBMITTERS, EACH = 4, 60


def _actor(role: str, url: str, go: Path, arg: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.process.flow_retention_actors", role, url, str(go),
                             str(go.with_suffix(".stop")), arg], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _lines(actor: subprocess.Popen[bytes]) -> list[dict]:
    out, err = outputs(actor, 2 * DEADLINE_S)
    assert actor.returncode == 0, err[-3000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


async def test_records_removed_under_submitters_never_let_a_second_run_in(
        app: rw.App, store_url: str, tmp_path: Path) -> None:
    go = tmp_path / "go"
    submitters = [_actor("submit", store_url, go, str(EACH)) for _ in range(SUBMITTERS)]
    ender, sweeper = _actor("end", store_url, go, "-"), _actor("sweep", store_url, go, "-")
    actors = [*submitters, ender, sweeper]
    try:
        await wait_until(lambda: len(glob.glob(f"{go}.ready.*")) == len(actors) or any(
            a.poll() is not None for a in actors), "every actor is ready", timeout_s=2 * DEADLINE_S)
        assert all(a.poll() is None for a in actors), "an actor died before the start"
    finally:
        go.touch()
    answers = [line for submitter in submitters for line in _lines(submitter)]
    go.with_suffix(".stop").touch()
    (ended,), (swept,) = _lines(ender), _lines(sweeper)

    assert len(answers) == SUBMITTERS * EACH, "a submission went unanswered"
    assert ended["most"] <= 1, f"the key had {ended['most']} queued runs at once: {ended}"
    made = {a["id"] for a in answers if "id" in a}
    assert {a["refused"] for a in answers if "refused" in a} <= made, "refused naming a run none made"
    assert len(made) >= 2 and swept["removed"] >= 1, f"no record went under the submitters: {swept}, {made}"
