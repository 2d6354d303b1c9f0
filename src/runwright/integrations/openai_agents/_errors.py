"""The errors a durable SDK run ends with, of the SDK's making (drawn in runwright.errors)."""

from __future__ import annotations

from ...errors import FinalError

__all__ = ["AgentRunError", "GuardrailTripped"]


class AgentRunError(FinalError):
    """The SDK ended the run with an error of its own (a model reply it cannot use, a
    misconfigured agent, a request the provider refused): final, since running it again
    would end the same way."""


class GuardrailTripped(AgentRunError):
    """An input or output guardrail tripped, as in plain SDK use: the run ends `failed`."""
