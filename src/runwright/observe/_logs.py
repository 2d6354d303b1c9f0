"""Structured logs: one line per engine event, with run id, attempt and worker.
JSON when RUNWRIGHT_LOG_FORMAT=json."""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

__all__ = ["configure_logging", "event"]

log = logging.getLogger("runwright")
_FIELDS = ("run_id", "attempt", "worker", "task", "fence")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(getattr(record, "rw", {}))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = " ".join(f"{k}={v}" for k, v in getattr(record, "rw", {}).items())
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        text = f"{stamp} {record.levelname:<7} {record.getMessage()} {fields}".rstrip()
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


def configure_logging(level: str | None = None) -> None:
    """Install one handler on the `runwright` logger (idempotent)."""
    fmt = os.environ.get("RUNWRIGHT_LOG_FORMAT", "text").lower()
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    log.handlers[:] = [handler]
    log.setLevel((level or os.environ.get("RUNWRIGHT_LOG_LEVEL", "INFO")).upper())
    log.propagate = False


def event(level: int, message: str, exc_info: Any = None, **fields: Any) -> None:
    """Log one engine event with its fields (run_id, attempt, worker, ...)."""
    if log.isEnabledFor(level):
        log.log(level, message, extra={"rw": fields}, exc_info=exc_info)
