"""What the journaled model and tools ask of the run they belong to (`DurableRun`), as a
protocol, so that they need not import the run's module (which imports them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Protocol

if TYPE_CHECKING:
    from agents.handoffs import Handoff
    from agents.tool_context import ToolContext

    from ...agents._tools import Delivery
    from ...engine._context import Context
    from .._durable import Spending

__all__ = ["RunSeam"]


class RunSeam(Protocol):
    ctx: Context
    spending: Spending
    deliveries: Mapping[str, Delivery]

    async def before_model_call(self, input: str | list[Any]) -> int: ...

    async def steer(self, input: str | list[Any]) -> str | list[Any]: ...

    async def after_model_call(self, agent: str, output: list[Any], cost_usd: float,
                               handoffs: list[Handoff[Any, Any]]) -> None: ...

    async def after_tool_call(self, tool_context: ToolContext[Any], tool: str, output: Any) -> None: ...

    def check_deadline(self) -> None: ...
