"""The arguments of the built-in jobs as Pydantic models, so that the HTTP API checks them
field by field and its OpenAPI document publishes them. Each model has exactly the fields
of its job's parameters, with the same defaults (a test holds them to the signatures)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ._chain import CHAIN
from ._llm import LLM
from ._webhook import WEBHOOK

__all__ = ["BODIES", "CallbackArgs", "ChainArgs", "ChainStep", "LlmArgs", "WebhookArgs"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class WebhookArgs(_Strict):
    """One HTTP call, signed, with a timeout and a cap on the answer."""

    url: str = Field(description="The target; private and loopback addresses are refused "
                                 "unless the operator allows them (RUNWRIGHT_WEBHOOK_ALLOW).")
    method: str = Field("POST", description="GET, POST, PUT, PATCH or DELETE.")
    headers: dict[str, str] | None = None
    body: Any = Field(None, description="Sent as JSON.")
    timeout_s: float = Field(10.0, gt=0)
    max_response_bytes: int = Field(1 << 20, gt=0)
    secret: str | None = Field(None, description="The name of one of the operator's signing "
                                                 "secrets (RUNWRIGHT_WEBHOOK_SECRETS); default: "
                                                 "the default one.")


class CallbackArgs(_Strict):
    """Where an `llm` job posts {run_id, output, usage, cost_usd}: a signed webhook."""

    url: str
    headers: dict[str, str] | None = None
    timeout_s: float = Field(10.0, gt=0)
    secret: str | None = None


class LlmArgs(_Strict):
    """A templated prompt to a model, and an optional callback with the answer."""

    prompt: str = Field(description="Templated from `input`: {{input}}, {{input.field}}.")
    model: str = Field(description="e.g. openai:gpt-4o-mini (base URL and key from the "
                                   "worker's environment).")
    input: Any = None
    system: str | None = None
    callback: CallbackArgs | None = None


class ChainStep(_Strict):
    """One step of a chain: a task (or job type) run as a durable child run."""

    id: str = Field(min_length=1)
    task: str = Field(description="A registered task or a built-in job type.")
    args: dict[str, Any] = Field(default_factory=dict, description="Templated: {{input}}, "
                                                                   "{{steps.<id>.output}}.")
    needs: list[str] = Field(default_factory=list, description="Step ids run before this one "
                                                               "(besides those its args name).")
    when: dict[str, Any] | None = Field(None, description="A JSON condition over earlier outputs, "
                                        'e.g. {"step": "check", "path": "ok", "equals": true}; '
                                        "the step is skipped when it does not hold.")
    if_needs_skipped: Literal["skip", "run"] = Field("skip", description="What this step does when "
                                                     "a step it needs was skipped.")


class ChainArgs(_Strict):
    """A DAG of steps; a step starts once the steps it needs have succeeded."""

    steps: list[ChainStep] = Field(min_length=1)
    input: Any = None
    callback: CallbackArgs | None = None


# Each built-in job type and the model of its arguments.
BODIES: dict[str, type[BaseModel]] = {WEBHOOK: WebhookArgs, LLM: LlmArgs, CHAIN: ChainArgs}
