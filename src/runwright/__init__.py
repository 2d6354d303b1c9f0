"""runwright: durable, distributed execution for AI agent runs and background jobs."""

from .app import App, Call
from .context import Context
from .engine.worker import Worker, WorkerConfig, WorkerCrashed
from .errors import (
    BadArguments,
    ConfigError,
    FinalError,
    InvalidInput,
    InvalidTime,
    InvalidTransition,
    LeaseLost,
    PayloadTooLarge,
    RunCancelled,
    RunEnded,
    RunFailed,
    RunNotFound,
    RunwrightError,
    SchemaError,
    SerializationError,
    StoreError,
    StoreUnreachable,
    TaskTimeout,
    UnknownTask,
)
from .retry import Backoff, RetryPolicy
from .runs import CRITICAL, HIGH, LOW, NORMAL, TERMINAL_STATES, TRANSITIONS, Run, RunHandle, RunState
from .tasks import TaskSpec

__version__ = "0.1.0"

__all__ = [
    "CRITICAL",
    "HIGH",
    "LOW",
    "NORMAL",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "App",
    "Backoff",
    "BadArguments",
    "Call",
    "ConfigError",
    "Context",
    "FinalError",
    "InvalidInput",
    "InvalidTime",
    "InvalidTransition",
    "LeaseLost",
    "PayloadTooLarge",
    "RetryPolicy",
    "Run",
    "RunCancelled",
    "RunEnded",
    "RunFailed",
    "RunHandle",
    "RunNotFound",
    "RunState",
    "RunwrightError",
    "SchemaError",
    "SerializationError",
    "StoreError",
    "StoreUnreachable",
    "TaskSpec",
    "TaskTimeout",
    "UnknownTask",
    "Worker",
    "WorkerConfig",
    "WorkerCrashed",
]
