"""Durable Pydantic AI agents: an existing `pydantic_ai.Agent`, run inside a runwright
task, makes each model request and each tool call a journaled step.

    from pydantic_ai import Agent
    from runwright.integrations.pydantic_ai import RunwrightAgent

    agent = Agent("openai:gpt-4o-mini", name="support", tools=[lookup, refund])
    durable = RunwrightAgent(agent, tools={"refund": "at_most_once"})
    support = durable.register(app)             # a task: support(prompt) -> the output
    # or, in a task of your own: await durable.run(prompt, deps=...)

After a takeover the run is executed again from the top: journaled model responses and
tool results are returned without calling anything, so the agent resumes from its last
completed model or tool call. Outside a runwright task, `RunwrightAgent` runs the agent
plainly (nothing journaled), as Pydantic AI's own durable wrappers do outside a workflow.
"""

from ._agent import RunwrightAgent
from ._toolset import idempotency_key

__all__ = ["RunwrightAgent", "idempotency_key"]
