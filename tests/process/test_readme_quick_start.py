"""The README's Quick start, run as written, in order, in an empty folder: its Python
blocks are the files they name, its shell blocks the commands a newcomer types. Its last
step, the first `runwright serve`, is run as written too (on a free port: 8000 may be
another's on a machine that runs tests in parallel), and the sign-in link it prints is
followed: it signs in as the operator, who sees the runs the steps before it made."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from ..api.test_first_serve import served, sign_in_link

pytestmark = pytest.mark.process

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```(python|sh|text)\n(.*?)```", re.S)


def quick_start() -> str:
    """The Quick start section, up to its first subsection."""
    text = README.read_text()
    section = text[text.index("## Quick start\n"):]
    return re.split(r"\n##+ ", section[3:], maxsplit=1)[0]


def quick_start_steps() -> tuple[str, list[str], list[str]]:
    """The steps before the serve as one bash script (a Python block is written to the
    file its first line names, `# jobs.py`; a shell block is run as it stands); the serve
    step's command; and the output the README shows for it."""
    lines = ["set -euo pipefail"]
    serve: list[str] = []
    shown: list[str] = []
    for kind, body in BLOCK.findall(quick_start()):
        if kind == "text":
            assert serve and not shown, "the Quick start's only output shown is the serve's"
            shown = body.splitlines()
        elif serve:
            raise AssertionError(f"a step after the Quick start's serve: {body[:60]!r}")
        elif kind == "sh" and "runwright serve" in body:
            (command,) = body.strip().splitlines()
            serve = shlex.split(command)
        elif kind == "sh":
            lines.append(body)
        else:
            name = re.match(r"# (\w+\.py)\n", body)
            assert name, f"a Python block of the Quick start names no file: {body[:60]!r}"
            lines.append(f"cat > {name[1]} <<'PYTHON'\n{body}PYTHON")
    assert serve == ["runwright", "serve", "jobs:app"], serve  # plain: no token, no option
    return "\n".join(lines) + "\nwait\n", serve, shown


def test_the_quick_start_runs_as_written_in_order(tmp_path: Path) -> None:
    script, serve, shown = quick_start_steps()
    assert "runwright worker" in script and "python submit.py" in script
    env = {name: value for name, value in os.environ.items() if not name.startswith("RUNWRIGHT_")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    out = done.stdout.splitlines()
    assert re.fullmatch(r"\d+ False", out[0]), out  # the run's id, new (not an existing key's)
    assert out[1] == "summary"  # its result, from a worker
    assert re.fullmatch(r"run \d+ submitted \(key \w+, state queued\)", out[2]), out
    assert out[3] == '"summary"', out  # runwright submit --wait prints the result as JSON
    assert out[4] == "runs (4)", out  # the three of submit.py and the CLI's, all succeeded
    assert sum(" succeeded " in line for line in out[5:]) == 4, out
    assert (tmp_path / "runwright.db").exists()  # the embedded default, in this folder
    assert "Traceback" not in done.stderr, done.stderr

    # The first serve, as written (on a free port), prints what the README shows ...
    with served([*serve, "--port", "0"], tmp_path, env, len(shown)) as printed:
        base, token = sign_in_link(printed)
        port = base.rsplit(":", 1)[1]
        assert [line.rstrip("\n") for line in printed] == [
            line.replace(":8000", f":{port}").replace("#token=k3Vq...", f"#token={token}") for line in shown]
        # ... and its link signs in as the operator, who sees the runs the steps made.
        with httpx.Client(base_url=base, timeout=30) as http:
            signed = http.post("/session", json={"token": token})
            assert signed.json() == {"tenant": None, "operator": True, "auth": True,
                                     "operator_decode": False}, signed.text
            runs = http.get("/runs").json()["items"]
            assert [(run["task"], run["state"], run["tenant"]) for run in runs] == [
                ("summarize", "succeeded", None)] * 4
