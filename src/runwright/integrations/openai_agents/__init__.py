"""OpenAI Agents SDK agents, run durably on runwright (`pip install runwright[openai-agents]`).

    from runwright.integrations.openai_agents import register

    triage = register(app, triage_agent, name="triage", tools={"refund": "at_most_once"})
    run = await app.submit(triage, input="Refund order 42", thread="ann", on_busy="interrupt")

`register` makes a task whose body runs `Runner.run(agent, input)` durably; inside a task of
your own, `await run_durably(ctx, agent, input)` does the same and returns the SDK's result.
Every model call and every function-tool call (MCP tools included) is a journaled step, so
a takeover resumes from the last completed call and never makes a completed one again.
Handoffs, guardrails and the SDK's hooks work as in plain use. The run's items go to its
event log as `agent_item` events; streamed text as `tokens` events; each model call's usage
and cost as a `model` event. See the README's "OpenAI Agents SDK" section.
"""

from ._errors import AgentRunError, GuardrailTripped
from ._run import AGENT_ITEM, register, run_durably
from ._tools import idempotency_key

__all__ = ["AGENT_ITEM", "AgentRunError", "GuardrailTripped", "idempotency_key", "register", "run_durably"]
