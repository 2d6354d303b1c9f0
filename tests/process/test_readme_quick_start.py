"""The README's Quick start, run as written, in order, in an empty folder: its Python
blocks are the files they name, its shell blocks the commands a newcomer types."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.process

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCK = re.compile(r"```(python|sh)\n(.*?)```", re.S)


def quick_start_script() -> str:
    """The section as one bash script: a Python block is written to the file its first
    line names (`# jobs.py`), a shell block is run as it stands."""
    text = README.read_text()
    section = text[text.index("## Quick start\n"):]
    section = section[:section.index("\n## ", 1)]
    section = section[:section.index("Every command ends a bad input")]
    lines = ["set -euo pipefail"]
    for kind, body in BLOCK.findall(section):
        if kind == "sh":
            lines.append(body)
            continue
        name = re.match(r"# (\w+\.py)\n", body)
        assert name, f"a Python block of the Quick start names no file: {body[:60]!r}"
        lines.append(f"cat > {name[1]} <<'PYTHON'\n{body}PYTHON")
    return "\n".join(lines) + "\nwait\n"


def test_the_quick_start_runs_as_written_in_order(tmp_path: Path) -> None:
    script = quick_start_script()
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
