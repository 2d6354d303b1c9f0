"""Built-in job types for users who submit JSON rather than code: webhook, llm and
chain. `register_builtin_jobs(registry)` adds them to a registry as ordinary tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .chain import CHAIN, register_chain
from .llm import LLM, register_llm
from .webhook import WEBHOOK, register_webhook, signature_header

if TYPE_CHECKING:
    from ..tasks.registry import Registry

__all__ = ["CHAIN", "LLM", "WEBHOOK", "register_builtin_jobs", "signature_header"]


def register_builtin_jobs(registry: Registry) -> None:
    register_webhook(registry)
    register_chain(registry)
    register_llm(registry)
