"""`runwright questions` and `runwright answer`: what runs ask a person, and the answers."""

from __future__ import annotations

import dataclasses
import getpass
import json
from typing import TYPE_CHECKING, Any

import typer

from ..core import _inputs as inputs
from ..core._questions import Question
from ..errors import InvalidInput
from ._exits import clear_errors
from ._main import URL, cli, with_app
from ._output import out
from ._params import ID, Integer
from ._views import instant

if TYPE_CHECKING:
    from rich.table import Table

__all__ = ["answer", "questions"]


@cli.command()
def questions(
    run_id: int | None = typer.Argument(None, click_type=ID, help="Only this run's questions."),
    answered: bool = typer.Option(False, "--answered", help="With RUN_ID: the answered ones too."),
    as_json: bool = typer.Option(False, "--json", help="One JSON array, for scripts."),
    url: str | None = URL,
) -> None:
    """List the questions runs wait on (ctx.ask, tool approvals), oldest first."""
    if answered and run_id is None:
        with clear_errors():
            raise InvalidInput("--answered needs a RUN_ID: answered questions are listed per run")
    found = with_app(url, lambda app: app.questions(run_id, pending=not answered))
    if as_json:
        print(json.dumps([dataclasses.asdict(q) for q in found]))
        return
    out.print(_table(found))


@cli.command()
def answer(
    run_id: int = typer.Argument(..., click_type=ID, help="The run that asked."),
    question_id: int = typer.Argument(..., click_type=Integer(0, 2**31 - 1),
                                      help="The question's id (see `runwright questions`)."),
    value: str | None = typer.Argument(None, metavar="[JSON]",
                                       help="The answer as JSON: true, \"text\", {\"k\": 1}..."),
    approve: bool = typer.Option(False, "--approve", help="For a tool's approval: allow the call."),
    deny: str | None = typer.Option(None, "--deny", metavar="REASON",
                                    help="For a tool's approval: refuse the call, saying why."),
    by: str | None = typer.Option(None, "--by", help="Who answers (a name, not blank). Defaults to "
                                                     "the login name."),
    url: str | None = URL,
) -> None:
    """Answer a run's question; the run resumes with it on any worker."""
    with clear_errors():
        given = _answer_of(value, approve, deny)
        # Given, it is checked as given: an empty --by is refused, not read as "not given".
        who = inputs.answerer(by, "--by") if by is not None else getpass.getuser()
    done = with_app(url, lambda app: app.answer(run_id, question_id, given, by=who))
    out.print(f"answered question {done.id} of run {done.run_id} as {done.answered_by}", highlight=False)


def _answer_of(value: str | None, approve: bool, deny: str | None) -> Any:
    """The one answer the command line gave: JSON, or --approve, or --deny REASON."""
    if sum((value is not None, approve, deny is not None)) != 1:
        raise InvalidInput("give exactly one of: a JSON answer, --approve, --deny REASON")
    if approve:
        return {"approved": True}
    if deny is not None:
        return {"approved": False, "reason": deny}
    assert value is not None
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"the answer is not JSON ({exc.msg} at column {exc.colno}): {value!r}; "
                           f"quote a text answer as JSON, e.g. '\"yes\"'") from None


def _table(found: list[Question]) -> Table:
    from rich.table import Table

    table = Table(title=f"questions ({len(found)})")
    for column in ("run", "id", "kind", "question", "asked", "answer"):
        table.add_column(column)
    for q in found:
        shown = "-" if not q.answered else f"{json.dumps(q.answer)} by {q.answered_by}"
        text = q.text if q.kind != "approval" else f"{q.text} {json.dumps(q.body.get('arguments'))}"
        table.add_row(str(q.run_id), str(q.id), q.kind, text, instant(q.asked_at), shown)
    return table
