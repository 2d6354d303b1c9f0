"""Bring your own agent: agents written with another framework (Pydantic AI, the OpenAI
Agents SDK) run durably on runwright, and MCP servers' tools are called as journaled steps.

Each adapter is its own module, imported by name (`runwright.integrations.pydantic_ai`, ...),
and needs its extra (`pip install runwright[pydantic-ai]`): `import runwright` never loads a
framework.
"""

from ._delivery import delivery_from_annotations

__all__ = ["delivery_from_annotations"]
