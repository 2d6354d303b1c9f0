"""The questions runs ask a person, over HTTP: list them, answer them.

Who answered is the caller's token (the operator, or the tenant), so it cannot be made
up; a body's `by` only adds a name to it ("acme:ana")."""

from __future__ import annotations

from typing import Any, Callable

from fastapi import FastAPI, Query
from pydantic import BaseModel, ConfigDict, Field

from ..client._scope import RunScope
from ..core._questions import Question
from ._deps import RunId, Tenant

__all__ = ["AnswerIn", "QuestionOut", "add_question_routes"]


class QuestionOut(BaseModel):
    run_id: int
    id: int = Field(description="The question's id within its run (its journal position).")
    kind: str = Field(description="question (ctx.ask) or approval (a tool call waiting for a yes)")
    body: dict[str, Any] = Field(description="text, the answer's JSON Schema, and for an "
                                             "approval the tool and its arguments")
    asked_at: float
    answer: Any = None
    answered_by: str | None = None
    answered_at: float | None = None

    @classmethod
    def of(cls, q: Question) -> QuestionOut:
        return cls(run_id=q.run_id, id=q.id, kind=q.kind, body=q.body, asked_at=q.asked_at,
                   answer=q.answer, answered_by=q.answered_by, answered_at=q.answered_at)


class AnswerIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: int = Field(ge=0, le=2**31 - 1, description="The question's id.")
    value: Any = Field(description="The answer; it must fit the question's schema. For an "
                                   'approval: {"approved": true} or {"approved": false, "reason": "..."}')
    by: str | None = Field(None, min_length=1, max_length=100,
                           description="A name added to the caller's identity, e.g. a person's.")


def add_question_routes(api: FastAPI, scope_of: Callable[[str | None], RunScope]) -> None:
    @api.get("/questions", response_model=list[QuestionOut])
    async def pending_questions(who: Tenant, limit: int = Query(100, ge=1, le=1000)) -> list[QuestionOut]:
        """The questions open runs wait on, oldest first (the caller's runs)."""
        return [QuestionOut.of(q) for q in await scope_of(who).questions(limit=limit)]

    @api.get("/runs/{run_id}/questions", response_model=list[QuestionOut])
    async def run_questions(run_id: RunId, who: Tenant, answered: bool = False) -> list[QuestionOut]:
        """A run's pending questions; with `answered=true`, every question it asked."""
        found = await scope_of(who).questions(run_id, pending=not answered, limit=1000)
        return [QuestionOut.of(q) for q in found]

    @api.post("/runs/{run_id}/answers", response_model=QuestionOut)
    async def answer(run_id: RunId, body: AnswerIn, who: Tenant) -> QuestionOut:
        """Answer a question and wake its run. The same answer again is accepted (200);
        another one is a 409, as is an answer to a run that ended."""
        identity = who or "operator"
        by = identity if body.by is None else f"{identity}:{body.by}"
        return QuestionOut.of(await scope_of(who).answer(run_id, body.question, body.value, by=by))
