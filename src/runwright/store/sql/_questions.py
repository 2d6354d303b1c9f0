"""The SQL store's questions."""

from __future__ import annotations

from typing import Any

from ...core._questions import Question
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import QuestionAnswerParams, QuestionListParams, QuestionOpenParams
from . import _statements as q
from ._base import SqlBase
from ._columns import run_from_row

__all__ = ["SqlQuestions"]


class SqlQuestions(SqlBase):
    """Questions (`QuestionStore`)."""

    # -- questions ----------------------------------------------------------------------

    async def question_open(self, params: QuestionOpenParams) -> Question | None:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            if await conn.fetchval(q.OWNS_RUN, params.run_id, params.fence) is None:
                return None
            row = await conn.fetchrow(q.QUESTION_GET, params.run_id, params.position)
            if row is None:
                await conn.execute(q.QUESTION_INSERT, params.run_id, params.position, params.kind,
                                   params.body, now)
                await self._log(conn, params.run_id, "asked", rules.asked_event(params), now)
                row = await conn.fetchrow(q.QUESTION_GET, params.run_id, params.position)
        self.hub.fire(events_topic(params.run_id))
        assert row is not None
        return Question.of_row(*row)

    async def question_answer(self, params: QuestionAnswerParams) -> Question:
        now = self.clock.now(params.now)
        async with self._transaction() as conn:
            found = await conn.fetchrow(q.LOCK_RUN, params.run_id)
            row = await conn.fetchrow(q.QUESTION_GET, params.run_id, params.position)
            question = None if row is None else Question.of_row(*row)
            run = None if found is None else run_from_row(found)
            if rules.plan_answer(run, question, params):
                await conn.execute(q.QUESTION_ANSWER, params.run_id, params.position, params.answer,
                                   params.by, now)
                await self._log(conn, params.run_id, "answered", rules.answered_event(params), now)
                # A parked run comes due now; one still running (its park on its way) wakes
                # as its park lands, as a parent does when its child ends.
                await conn.execute(q.WAKE_PARENTS, self.dialect.array([params.run_id]), now)
                await conn.notify("queued")
                row = await conn.fetchrow(q.QUESTION_GET, params.run_id, params.position)
        self.hub.fire(QUEUED)
        self.hub.fire(events_topic(params.run_id))
        assert row is not None
        return Question.of_row(*row)

    async def question_list(self, params: QuestionListParams) -> list[Question]:
        clauses, args = ["1 = 1"], list[Any]()
        if params.run_id is not None:
            args.append(params.run_id)
            clauses.append(f"q.run_id = ${len(args)}")
        if params.pending:
            clauses.append("q.answered_at IS NULL AND r.state IN ('queued', 'running')")
        if params.tenant is not None:
            args.append(params.tenant)
            clauses.append(f"r.tenant = ${len(args)}")
        args.append(params.limit)
        rows = await self._fetch(
            f"SELECT {q.QUESTION_COLUMNS} FROM questions q JOIN runs r ON r.id = q.run_id"
            f" WHERE {' AND '.join(clauses)} ORDER BY q.asked_at, q.run_id, q.position"
            f" LIMIT ${len(args)}", *args)
        return [Question.of_row(*row) for row in rows]
