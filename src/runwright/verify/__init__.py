"""`runwright verify`: the chaos proof a user runs against their own deployment.

Its own worker processes run a ledgered workload (`workload`) in verify's own place of
the store (`place`), while a seeded schedule of faults hits them (`faults`); then the
ledger and the store are checked (`checks`) and the result printed (`report`). The
runner (`runner`) puts it together and cleans up after itself, even when interrupted.
"""

from __future__ import annotations

from .checks import Findings, Ledger, RunData, check
from .faults import Fault, schedule
from .runner import Options, Outcome, VerifyAborted, run_verify

__all__ = ["Fault", "Findings", "Ledger", "Options", "Outcome", "RunData", "VerifyAborted", "check",
           "run_verify", "schedule"]
