"""The `llm` job: a prompt template -> a model -> the answer, with an optional callback.
The model's rate limit, when the deployment set one (`app.rate_limit`), is kept.

`prompt` is templated like a chain step (`{{input}}`, `{{input.field}}`). The model call
and the callback are journaled steps: a takeover neither pays for the answer twice nor
calls back twice (the callback is a signed webhook, made at least once). A callback
carries `url` and optionally `headers`, `timeout_s` and `secret` (the name of one of the
operator's signing secrets, as for the webhook job); anything else is refused at
submission, so that a setting the operator owns cannot be smuggled in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..agents._models import ModelClient
from ..agents._rate_limits import within_quota
from ._chain import render
from ._webhook import CALLBACK_FIELDS, call_back, check_callback

if TYPE_CHECKING:
    from ..engine._context import Context
    from ..tasks._registry import Registry
    from ..tasks._specs import TaskSpec

__all__ = ["CALLBACK_FIELDS", "LLM", "check_llm", "register_llm"]

LLM = "llm"


def check_llm(arguments: dict[str, Any]) -> None:
    """Refuse a callback that is not a dict of the known fields, with a url."""
    check_callback("llm", arguments.get("callback"))


def register_llm(registry: Registry) -> TaskSpec:
    clients: dict[str, ModelClient] = {}

    def client_for(model: str) -> ModelClient:
        if model not in clients:
            clients[model] = ModelClient(model)
            registry.on_close(clients[model].aclose)
        return clients[model]

    @registry.task(name=LLM, retries=3, check=check_llm)
    async def llm(ctx: Context, prompt: str, model: str, input: Any = None, system: str | None = None,
                  callback: dict[str, Any] | None = None) -> dict[str, Any]:
        """Answer the templated prompt; POST {run_id, output} to `callback` if given."""
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": str(render(prompt, input, {}))})

        async def ask() -> dict[str, Any]:
            runtime = ctx.runtime
            client_for(model).prepare()
            reply = await within_quota(runtime.store, runtime.clock, model, registry.rate_limits.get(model),
                                       messages, [], lambda: client_for(model).complete(messages, []))
            await ctx.emit("model", {"model": reply["model"], "usage": reply["usage"],
                                     "cost_usd": reply["cost_usd"], "priced": reply["priced"]})
            return reply

        reply = await ctx.step("model", ask)
        answer = {"output": reply["message"].get("content") or "", "usage": reply["usage"],
                  "cost_usd": reply["cost_usd"]}
        if callback:
            await ctx.step("callback", call_back, callback, {"run_id": ctx.run_id, **answer})
        return answer

    return llm

