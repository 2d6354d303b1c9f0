"""runwright: durable, distributed execution for AI agent runs and background jobs."""

from .agents import ModelError, ModelUnavailable, Price, ToolSpec
from .app import App, Call, TenantView
from .budget import Budget
from .context import ChildRun, Context
from .engine.worker import Worker, WorkerConfig, WorkerCrashed
from .errors import (
    AlreadyAnswered,
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
    QuestionNotFound,
    RunCancelled,
    RunEnded,
    RunExpired,
    RunFailed,
    RunNotFound,
    RunwrightError,
    ScheduleNotFound,
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
from .questions import Question
from .retry import Backoff, RetryPolicy
from .runs import CRITICAL, HIGH, LOW, NORMAL, TERMINAL_STATES, TRANSITIONS, Run, RunState
from .store.params import ThreadCursor, ThreadInfo
from .tasks import TaskSpec
from .threads import ThreadHandle

__version__ = "0.1.0"

__all__ = [
    "CRITICAL",
    "HIGH",
    "LOW",
    "NORMAL",
    "TERMINAL_STATES",
    "TRANSITIONS",
    "AlreadyAnswered",
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
    "Question",
    "QuestionNotFound",
    "RetryPolicy",
    "Run",
    "RunCancelled",
    "RunEnded",
    "RunExpired",
    "RunFailed",
    "RunHandle",
    "RunNotFound",
    "RunState",
    "RunwrightError",
    "ScheduleNotFound",
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
    "ThreadCursor",
    "ThreadDeleted",
    "ThreadEvent",
    "ThreadHandle",
    "ThreadInfo",
    "ThreadNotFound",
    "TokenText",
    "ToolSpec",
    "UnknownTask",
    "Worker",
    "WorkerConfig",
    "WorkerCrashed",
]
