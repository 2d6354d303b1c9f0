"""A command's --url and an App that names its own store: the same store, or a clear refusal."""

from __future__ import annotations

import sys

import pytest

import runwright as rw
from runwright.cli._loader import load_app


@pytest.fixture
def own_store_module(tmp_path, monkeypatch):
    (tmp_path / "own_store_jobs.py").write_text(
        f"import runwright as rw\napp = rw.App('sqlite:///{tmp_path}/own.db')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("own_store_jobs", None)


def test_a_url_the_app_does_not_take_is_refused_in_one_line(own_store_module, monkeypatch):
    monkeypatch.setenv("RUNWRIGHT_URL", f"sqlite:///{own_store_module}/other.db")
    with pytest.raises(rw.ConfigError, match=r"builds its App on its own store .* rw\.App\(\) \(no URL\)"):
        load_app("own_store_jobs:app")


def test_the_same_store_or_no_url_loads(own_store_module, monkeypatch):
    monkeypatch.delenv("RUNWRIGHT_URL", raising=False)
    assert load_app("own_store_jobs:app").url.endswith("own.db")
    sys.modules.pop("own_store_jobs", None)
    monkeypatch.setenv("RUNWRIGHT_URL", f"sqlite:///{own_store_module}/own.db")
    assert load_app("own_store_jobs:app").url.endswith("own.db")
