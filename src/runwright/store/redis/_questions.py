"""The Redis store's questions."""

from __future__ import annotations

import json

from ...core._questions import Question
from .. import _rules as rules
from .._hub import QUEUED, events_topic
from .._params import QuestionAnswerParams, QuestionListParams, QuestionOpenParams
from ._base import STALE, RedisBase, Stale
from ._codec import question_from_hash

__all__ = ["RedisQuestions"]


class RedisQuestions(RedisBase):
    """Questions (`QuestionStore`)."""

    # -- questions ------------------------------------------------------------------------

    async def question_open(self, params: QuestionOpenParams) -> Question | None:
        flat = await self._script("question_open", self._now_arg(params.now), params.run_id, params.fence,
                                  params.position, params.kind, params.body,
                                  json.dumps(rules.asked_event(params)))
        self.hub.fire(events_topic(params.run_id))
        return question_from_hash(params.run_id, params.position, flat) if flat else None

    async def question_answer(self, params: QuestionAnswerParams) -> Question:
        async def attempt() -> Question | Stale:
            run = await self.run_get(params.run_id)
            question = await self._question(params.run_id, params.position)
            if not rules.plan_answer(run, question, params):
                assert question is not None
                return question
            assert run is not None
            reply = await self._script("question_answer", self._now_arg(params.now), run.id, params.position,
                                       run.state.value, params.answer, params.by,
                                       json.dumps(rules.answered_event(params)))
            if reply[0] != "ok":
                return STALE
            self.hub.fire(QUEUED)
            self.hub.fire(events_topic(run.id))
            return question_from_hash(run.id, params.position, reply[1])

        return await self._decided(attempt, f"run {params.run_id}: its state during the answer")

    async def _question(self, run_id: int, position: int) -> Question | None:
        fields = await self._call(self.redis.hgetall, self.key(f"q:{run_id}:{position}"))
        return question_from_hash(run_id, position, fields) if fields else None

    async def question_list(self, params: QuestionListParams) -> list[Question]:
        if params.run_id is not None:
            positions = await self._call(self.redis.zrange, self.key(f"qs:{params.run_id}"), 0, -1)
            places = [(params.run_id, int(p)) for p in positions]
        else:
            # Every pending question, oldest first; those of ended runs are skipped below.
            members = await self._call(self.redis.zrange, self.key("qpending"), 0, -1)
            places = [(int(r), int(p)) for r, p in (m.split(":") for m in members)]
        runs = {run.id: run for run in await self.run_get_many([r for r, _ in places])}
        out = []
        for run_id, position in places:
            run = runs.get(run_id)
            if run is None or (params.tenant is not None and run.tenant != params.tenant):
                continue
            if params.pending and run.done:
                continue
            question = await self._question(run_id, position)
            if question is None or (params.pending and question.answered):
                continue
            out.append(question)
            if len(out) >= params.limit:
                break
        return out
