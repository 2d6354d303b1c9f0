"""`runwright verify`: the chaos proof a user runs against their own deployment.

Its own worker processes run a ledgered workload (`workload`, its tasks in `tasks`) in
verify's own place of the store (`place`), while a seeded schedule of faults hits them
(`faults`); then the ledger and the store are checked (`checks`) and the result printed
(`report`). The runner (`runner`) puts it together and cleans up after itself, even
when interrupted. With `--fleet` (`fleet`), the user's workers run the workload, serving
the session's queue and taking its faults over the fleet bus (`serving`); every App
registers both (`hooks`).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._checks import Findings, Ledger, RunData, check
    from ._faults import Fault, schedule
    from ._runner import Options, Outcome, VerifyAborted, run_verify

__all__ = ["Fault", "Findings", "Ledger", "Options", "Outcome", "RunData", "VerifyAborted", "check",
           "run_verify", "schedule"]

_MODULE_OF = {"Fault": "_faults", "Findings": "_checks", "Ledger": "_checks", "Options": "_runner",
              "Outcome": "_runner", "RunData": "_checks", "VerifyAborted": "_runner", "check": "_checks",
              "run_verify": "_runner", "schedule": "_faults"}


def __getattr__(name: str) -> Any:
    """The names above, imported on first use: every App imports `hooks` (and so this
    package), and must not import the runner with it, which imports the App itself."""
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
