"""Agents: models over OpenAI-compatible endpoints, tools with delivery guarantees, the
durable tool loop."""

from .loop import AgentSpec
from .models import Model, ModelClient, ModelError, ModelUnavailable, Price
from .tools import ToolSpec

__all__ = ["AgentSpec", "Model", "ModelClient", "ModelError", "ModelUnavailable", "Price", "ToolSpec"]
