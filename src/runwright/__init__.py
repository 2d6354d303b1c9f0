"""runwright: durable, distributed execution for AI agent runs and background jobs."""

from .agents import ModelError, ModelUnavailable, Price, ToolSpec
from .app import App, Call, TenantView
from .budget import Budget
from .context import ChildRun, Context
from .engine.worker import Worker, WorkerConfig, WorkerCrashed
from .errors import (
    BadArguments,
    BudgetExceeded,
    ChildFailed,
    ConfigError,
    FinalError,
    InvalidInput,
    InvalidTime,
    InvalidTransition,
    LeaseLost,
    NonDeterminismError,
    OutcomeUnknown,
    PayloadTooLarge,
    RunCancelled,
    RunEnded,
    RunFailed,
    RunNotFound,
    RunwrightError,
    SchemaError,
    SerializationError,
    StepFailed,
    StoreError,
    StoreUnreachable,
    TaskTimeout,
    ThreadBusy,
    ThreadDeleted,
    ThreadNotFound,
    UnknownTask,
)
from .following import TokenText
from .handles import RunHandle
from .journal import Event, StepRecord, ThreadEvent
from .retry import Backoff, RetryPolicy
from .runs import CRITICAL, HIGH, LOW, NORMAL, TERMINAL_STATES, TRANSITIONS, Run, RunState
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
    "Budget",
    "BudgetExceeded",
    "Call",
    "ChildFailed",
    "ChildRun",
    "ConfigError",
    "Context",
    "Event",
    "FinalError",
    "InvalidInput",
    "InvalidTime",
    "InvalidTransition",
    "LeaseLost",
    "ModelError",
    "ModelUnavailable",
    "NonDeterminismError",
    "OutcomeUnknown",
    "PayloadTooLarge",
    "Price",
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
    "StepFailed",
    "StepRecord",
    "StoreError",
    "StoreUnreachable",
    "TaskSpec",
    "TaskTimeout",
    "TenantView",
    "ThreadBusy",
    "ThreadDeleted",
    "ThreadEvent",
    "ThreadNotFound",
    "TokenText",
    "ToolSpec",
    "UnknownTask",
    "Worker",
    "WorkerConfig",
    "WorkerCrashed",
]
