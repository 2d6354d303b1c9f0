"""Agents: models over OpenAI-compatible endpoints, tools with delivery guarantees, the
durable tool loop."""

from ._loop import AgentSpec
from ._models import Model, ModelClient, ModelError, ModelUnavailable, Price
from ._tools import ToolSpec

__all__ = ["AgentSpec", "Model", "ModelClient", "ModelError", "ModelUnavailable", "Price", "ToolSpec"]
