"""A blip `runwright verify` cannot land (the server refuses the connection it cuts
from: at its connection limit, not there) is a fault skipped, with why, in the report;
not a "Task exception was never retrieved" traceback amid the progress bars, which a
newcomer's verify on a busy PostgreSQL printed (TooManyConnectionsError)."""

from __future__ import annotations

from pathlib import Path

import pytest

from runwright.verify._faults import Fault, Injector
from runwright.verify._place import Place
from runwright.verify._workers import Pool

from ..ports import free_port


async def _nobody() -> set[int]:
    return set()


# The URLs are made in the test, from a template: a free port in a parameter would name the
# test differently in each pytest-xdist worker, which then refuse to run the suite.
@pytest.mark.parametrize("backend, url_template, why", [
    # A server that answers and refuses (as at max_connections): PostgreSQL's own error.
    ("postgres", "postgresql://postgres@127.0.0.1:5432/rw_no_such_database", "InvalidCatalogNameError"),
    # Nothing listening: the network's.
    ("postgres", "postgresql://postgres@127.0.0.1:{port}/test", "ConnectionRefusedError"),
    ("redis", "redis://127.0.0.1:{port}/0", "ConnectionError"),
])
async def test_a_blip_whose_connection_is_refused_is_skipped_with_why(
        backend: str, url_template: str, why: str, tmp_path: Path) -> None:
    admin_url = url_template.format(port=free_port())
    place = Place(backend, admin_url, "rw_verify_x", admin_url)
    injector = Injector(place, Pool(admin_url, 0, 2.0, tmp_path / "ledger", tmp_path),
                        stall_s=1.0, registered=_nobody, busy=_nobody)
    await injector.apply(Fault(0.0, "blip", 0))
    assert injector.counts["blips"] == 0 and injector.applied == []
    ((said, count),) = injector.skipped.items()
    assert count == 1 and said.startswith("a blip's own connection was refused: ") and why in said, said
