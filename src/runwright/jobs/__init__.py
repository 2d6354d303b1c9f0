"""Built-in job types for users who submit JSON rather than code: webhook (and, later,
llm and chain). `register_builtin_jobs(app)` adds them to an App as ordinary tasks."""

from .webhook import WEBHOOK, register_webhook, signature_header

__all__ = ["WEBHOOK", "register_webhook", "signature_header"]
