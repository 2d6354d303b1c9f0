"""The `llm` job: a prompt template -> a model -> the answer, with an optional callback.

`prompt` is templated like a chain step (`{{input}}`, `{{input.field}}`). The model call
and the callback are journaled steps: a takeover neither pays for the answer twice nor
calls back twice (the callback is a signed webhook, made at least once).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..agents.models import ModelClient
from .chain import render
from .webhook import call_checked

if TYPE_CHECKING:
    from ..context import Context
    from ..registry import Registry
    from ..tasks import TaskSpec

__all__ = ["LLM", "register_llm"]

LLM = "llm"


def register_llm(registry: Registry) -> TaskSpec:
    clients: dict[str, ModelClient] = {}

    def client_for(model: str) -> ModelClient:
        if model not in clients:
            clients[model] = ModelClient(model)
            registry.on_close(clients[model].aclose)
        return clients[model]

    @registry.task(name=LLM, retries=3)
    async def llm(ctx: Context, prompt: str, model: str, input: Any = None, system: str | None = None,
                  callback: dict[str, Any] | None = None) -> dict[str, Any]:
        """Answer the templated prompt; POST {run_id, output} to `callback` if given."""
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": str(render(prompt, input, {}))})

        async def ask() -> dict[str, Any]:
            reply = await client_for(model).complete(messages, [])
            await ctx.emit("model", {"model": reply["model"], "usage": reply["usage"],
                                     "cost_usd": reply["cost_usd"], "priced": reply["priced"]})
            return reply

        reply = await ctx.step("model", ask)
        answer = {"output": reply["message"].get("content") or "", "usage": reply["usage"],
                  "cost_usd": reply["cost_usd"]}
        if callback:
            await ctx.step("callback", call_checked, callback.get("url", ""), "POST",
                           callback.get("headers"), {"run_id": ctx.run_id, **answer},
                           float(callback.get("timeout_s", 10)), 1 << 20,
                           bool(callback.get("allow_private", False)),
                           callback.get("secret_env", "RUNWRIGHT_WEBHOOK_SECRET"))
        return answer

    return llm

