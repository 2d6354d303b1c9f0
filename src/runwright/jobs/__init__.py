"""Built-in job types for users who submit JSON rather than code: webhook, llm and
chain. `register_builtin_jobs(registry)` adds them to a registry as ordinary tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._chain import CHAIN
from ._chain import register_chain as _register_chain
from ._llm import LLM
from ._llm import register_llm as _register_llm
from ._webhook import WEBHOOK, signature_header
from ._webhook import register_webhook as _register_webhook

if TYPE_CHECKING:
    from ..tasks._registry import Registry

__all__ = ["CHAIN", "LLM", "WEBHOOK", "register_builtin_jobs", "signature_header"]


def register_builtin_jobs(registry: Registry) -> None:
    _register_webhook(registry)
    _register_chain(registry)
    _register_llm(registry)
