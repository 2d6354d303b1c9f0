"""Questions a run asks a person (`ctx.ask`, a tool that needs approval), and answers.

A question is identified by its run and the journal position of the `ask`: a replay asks
the same question again and finds the same row, answered or not. While it waits the run
is parked (no slot held); an answer, from any process, is stored with who gave it and
wakes the run, which journals the answer at that position and goes on.

The answer's shape is a JSON Schema kept with the question, so whichever process answers
(the CLI, the HTTP API, another service) checks it without the task's code.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..errors import InvalidInput

__all__ = ["APPROVAL_SCHEMA", "Question", "check_answer", "schema_of"]

# What a tool's approval is answered with: `{"approved": true}` or a refusal with its why.
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"approved": {"type": "boolean"}, "reason": {"type": "string"}},
    "required": ["approved"],
    "additionalProperties": False,
}


@dataclass(frozen=True, slots=True)
class Question:
    """One question of a run. `id` is its journal position; `body` holds the text, the
    answer's JSON Schema and, for an approval, the tool call; `answer` is set once answered."""

    run_id: int
    id: int
    kind: str  # "question" (ctx.ask) or "approval" (a tool call waiting for a yes)
    body: dict[str, Any]
    asked_at: float
    answer: Any = None
    answered_by: str | None = None
    answered_at: float | None = None

    @property
    def answered(self) -> bool:
        return self.answered_at is not None

    @property
    def text(self) -> str:
        return str(self.body.get("text", ""))

    @property
    def schema(self) -> dict[str, Any] | None:
        schema = self.body.get("schema")
        return schema if isinstance(schema, dict) else None

    @classmethod
    def of_row(cls, run_id: int, position: int, kind: str, body: str, asked_at: float,
               answer: str | None, answered_by: str | None, answered_at: float | None) -> Question:
        """From the stored columns (JSON text for body and answer)."""
        return cls(int(run_id), int(position), kind, json.loads(body), float(asked_at),
                   None if answer is None else json.loads(answer), answered_by,
                   None if answered_at is None else float(answered_at))


def schema_of(schema: Any) -> dict[str, Any] | None:
    """A JSON Schema from what `ctx.ask(schema=...)` was given: None (any JSON value), a
    JSON Schema dict as it is, or a Python type (bool, str, a pydantic model, a Literal...)
    turned into one by pydantic."""
    if schema is None or isinstance(schema, dict):
        return schema
    from pydantic import TypeAdapter  # only a task that asks with a type pays for it

    try:
        return TypeAdapter(schema).json_schema()
    except Exception as exc:
        raise InvalidInput(f"schema {schema!r} cannot be made a JSON Schema: {exc}") from exc


def check_answer(question: Question, value: Any) -> None:
    """InvalidInput, naming where and why, unless `value` fits the question's schema."""
    schema = question.schema
    if schema is None:
        return
    import jsonschema  # an answer is rare next to a run: loaded when one comes

    errors = sorted(jsonschema.Draft202012Validator(schema).iter_errors(value), key=lambda e: e.path)
    if errors:
        where = "/".join(str(part) for part in errors[0].absolute_path) or "the answer"
        raise InvalidInput(f"run {question.run_id} question {question.id}: {where}: "
                           f"{errors[0].message}")
