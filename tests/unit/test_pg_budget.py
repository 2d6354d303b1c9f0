"""The parallel suite's PostgreSQL connection budget (tests/pg_budget.py): shares add up to
at most its size, a share that does not fit waits its turn and then fails saying who holds
the budget, and a process that died gives its shares back."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ..pg_budget import Budget, BudgetExhausted


def test_shares_fit_the_budget_and_are_given_back(tmp_path: Path) -> None:
    budget = Budget(tmp_path / "budget.json", 10)
    first = budget.acquire(6, "first")
    second = budget.acquire(4, "second")
    with pytest.raises(BudgetExhausted, match=r"third waited 0 s for 1 of the suite's 10 PostgreSQL "
                                              r"connections .* 10 are held by: first \(6\), second \(4\)"):
        budget.acquire(1, "third", wait_s=0.2)
    budget.release(first)
    budget.release(budget.acquire(6, "third"))
    budget.release(second)
    assert json.loads((tmp_path / "budget.json").read_text()) == {"held": [], "waiting": []}


def test_a_share_larger_than_the_budget_fails_at_once(tmp_path: Path) -> None:
    with pytest.raises(BudgetExhausted, match="needs 11 PostgreSQL connections, more than the suite's whole"):
        Budget(tmp_path / "budget.json", 10).acquire(11, "greedy", wait_s=60)


def test_a_waiting_share_is_served_before_later_smaller_ones(tmp_path: Path) -> None:
    budget = Budget(tmp_path / "budget.json", 10)
    held = budget.acquire(5, "held")
    order: list[str] = []

    def take(weight: int, who: str) -> None:
        ticket = budget.acquire(weight, who, wait_s=30)
        order.append(who)
        budget.release(ticket)

    large = threading.Thread(target=take, args=(10, "large"))
    large.start()
    while not json.loads((tmp_path / "budget.json").read_text())["waiting"]:
        time.sleep(0.01)
    small = threading.Thread(target=take, args=(1, "small"))  # fits now, but comes later
    small.start()
    time.sleep(0.3)
    assert order == []
    budget.release(held)
    large.join()
    small.join()
    assert order == ["large", "small"]


def test_the_share_of_a_process_that_died_is_given_back(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    (tmp_path / "budget.json").write_text(json.dumps({
        "held": [{"ticket": "t", "pid": int(dead.stdout), "who": "crashed", "weight": 10}], "waiting": []}))
    Budget(tmp_path / "budget.json", 10).acquire(10, "next", wait_s=1)
