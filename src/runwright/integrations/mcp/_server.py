"""runwright as an MCP server (`runwright mcp MODULE:APP`): an MCP client (an assistant, an
IDE, another agent) submits runs, reads and follows them, answers their questions, cancels
and retries them, with the HTTP API's semantics and scoping.

Each tool is a route of the HTTP API, checked by the same models (`server._models`) and
acting through the same scope (`server._deps.Scopes`): a tenant's token sees only its
tenant's runs (another tenant's run is "not found", as a 404 is), a submitter never
chooses a tenant or another operator-only option, and the operator (an operator token, or
no token over stdio: whoever starts the process holds the store) sees every run.

MCP tools are request/response, so following a run is a long poll: `follow_run` returns
the run's events after `after`, waiting up to `wait_s` seconds for the first new one; call
it again with its `next_after` until `done`.

Bad input, an unknown run, a refused transition: an MCP tool error (`isError`) whose text
is one line, never a traceback.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Awaitable, Callable

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ...core import _inputs as inputs
from ...core._inputs import (
    MAX_ID,
    MAX_KEY_CHARS,
    MAX_NAME_CHARS,
    MAX_QUEUE_CHARS,
    MAX_SEQ,
    MAX_TENANT_CHARS,
    MAX_THREAD_CHARS,
)
from ...core._waiting import bounded
from ...errors import ConfigError, RunwrightError
from ...runs import RunState, WaitReason
from ...server._auth import Auth
from ...server._deps import Scopes
from ...server._models import SUBMIT_TAGS, EventOut, RunOut, SubmitIn, TaskSubmitIn
from ...server._problems import OperatorOnly
from ...server._question_routes import AnswerIn, QuestionOut
from ...tasks._submission import refuse_options_in

if TYPE_CHECKING:
    from mcp.server.lowlevel import Server

    from ...app import App

__all__ = ["MAX_WAIT_S", "caller_of_http", "caller_of_stdio", "create_mcp_server", "require_token"]

MAX_WAIT_S = 60.0  # the longest a follow_run call waits for a new event
logger = logging.getLogger("runwright.mcp")


def _unless_none(check: Callable[[Any], Any]) -> AfterValidator:
    return AfterValidator(lambda value: value if value is None else check(value))


# What each input may be: the HTTP API's bounds and `inputs` checks (server/_deps.py).
RunId = Annotated[int, Field(ge=1, le=MAX_ID, description="The run's id.")]
Thread = Annotated[str, Field(min_length=1, max_length=MAX_THREAD_CHARS), AfterValidator(inputs.thread_name)]
ThreadFilter = Annotated[str | None, Field(None, min_length=1, max_length=MAX_THREAD_CHARS),
                         _unless_none(inputs.thread_name)]
KeyFilter = Annotated[str | None, Field(None, min_length=1, max_length=MAX_KEY_CHARS),
                      _unless_none(inputs.key)]
NameFilter = Annotated[str | None, Field(None, min_length=1, max_length=MAX_NAME_CHARS),
                       _unless_none(lambda value: inputs.name(value, "task"))]
QueueFilter = Annotated[str | None, Field(None, min_length=1, max_length=MAX_QUEUE_CHARS),
                        _unless_none(inputs.queue)]
TenantFilter = Annotated[str | None, Field(None, min_length=1, max_length=MAX_TENANT_CHARS,
                                           description="The operator's: one tenant's runs."),
                         _unless_none(inputs.tenant)]


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunIn(_In):
    run_id: RunId


class FollowIn(_In):
    run_id: RunId
    after: int = Field(0, ge=0, le=MAX_SEQ, description="The seq of the last event already seen.")
    wait_s: float = Field(10.0, ge=0, le=MAX_WAIT_S, description="How long to wait for a new event.")


class ListIn(_In):
    state: list[RunState] = Field(default_factory=list)
    task: NameFilter = None
    queue: QueueFilter = None
    thread: ThreadFilter = None
    key: KeyFilter = None
    tenant: TenantFilter = None
    error: str | None = Field(None, min_length=1, max_length=200,
                              description="Runs whose error contains this text.")
    waiting: WaitReason | None = Field(None, description="Queued runs that wait on this.")
    before: int | None = Field(None, ge=1, le=MAX_ID, description="The cursor: runs older than this id.")
    limit: int = Field(50, ge=1, le=500)
    created_after: float | None = Field(None, ge=0, le=1e11)
    created_before: float | None = Field(None, ge=0, le=1e11)


class ThreadIn(_In):
    thread: Thread
    incarnation: int | None = Field(None, ge=1, le=MAX_ID)
    tenant: TenantFilter = None


class QuestionsIn(_In):
    run_id: int | None = Field(None, ge=1, le=MAX_ID, description="One run's; else every open run's.")
    answered: bool = Field(False, description="Every question the run asked, not only pending ones.")


class AnswerToolIn(AnswerIn):
    run_id: RunId


Caller = Callable[[Any], "str | None | bool"]  # a request's context -> its tenant (None: the operator)


@dataclass(frozen=True)
class _Tool:
    name: str
    description: str
    model: type[BaseModel]
    handler: Callable[[Any, Any], Awaitable[Any]]  # (the caller's tenant, the checked input)
    read_only: bool = True
    destructive: bool = False
    idempotent: bool = True


def create_mcp_server(app: App, auth: Auth, caller: Caller, name: str = "runwright") -> Server[Any]:
    """The MCP server of `app`'s runs; `caller` says whose each request is."""
    from mcp import types
    from mcp.server.lowlevel import Server

    scopes = Scopes(app, auth)
    submit_check: TypeAdapter[Any] = TypeAdapter(SubmitIn)

    async def submit_run(who: str | None, raw: dict[str, Any]) -> dict[str, Any]:
        body = submit_check.validate_python(raw)
        arguments = body.arguments()
        refuse_options_in(arguments)
        handle = await scopes.of(who).submit(body.task, **body.submission(), **arguments)
        return {**RunOut.of(handle.run).model_dump(mode="json"), "existed": handle.existed}

    async def get_run(who: str | None, given: RunIn) -> dict[str, Any]:
        scope = scopes.of(who)
        run = await scope.read_run(given.run_id)
        return RunOut.of(run, (await scope.waiting([run])).get(run.id)).model_dump(mode="json")

    async def follow_run(who: str | None, given: FollowIn) -> dict[str, Any]:
        scope = scopes.of(who)
        page = await scope.events_page(given.run_id, given.after)
        if not page and given.wait_s > 0:
            page = await _next_events(scope, given.run_id, given.after, given.wait_s)
        run = await scope.read_run(given.run_id)
        return {"events": [EventOut.of(e).model_dump(mode="json") for e in page],
                "next_after": page[-1].seq if page else given.after, "state": run.state.value,
                "done": run.done and (page[-1].seq if page else given.after) >= run.last_seq}

    async def list_runs(who: str | None, given: ListIn) -> dict[str, Any]:
        scope = scopes.narrowed(who, given.tenant)
        runs = await scope.list_runs(
            states=given.state, task=given.task, queue=given.queue, thread=given.thread,
            limit=given.limit, before_id=given.before, created_after=given.created_after,
            created_before=given.created_before, key=given.key, waiting=given.waiting, error=given.error)
        waiting = await scope.waiting(runs)
        items = [RunOut.of(run, waiting.get(run.id)).model_dump(mode="json") for run in runs]
        return {"items": items, "next_before": runs[-1].id if len(runs) == given.limit else None}

    async def read_thread(who: str | None, given: ThreadIn) -> dict[str, Any]:
        scope = scopes.narrowed(who, given.tenant)
        messages = await scope.thread_history(given.thread, given.incarnation)
        return {"thread": given.thread, "messages": messages}

    async def questions(who: str | None, given: QuestionsIn) -> dict[str, Any]:
        found = await scopes.of(who).questions(given.run_id, pending=not given.answered, limit=1000)
        return {"items": [QuestionOut.of(q).model_dump(mode="json") for q in found]}

    async def answer(who: str | None, given: AnswerToolIn) -> dict[str, Any]:
        identity = who or "operator"  # who answered is the caller's token; `by` only adds a name
        by = identity if given.by is None else f"{identity}:{given.by}"
        question = await scopes.of(who).answer(given.run_id, given.question, given.value, by=by)
        return QuestionOut.of(question).model_dump(mode="json")

    async def cancel(who: str | None, given: RunIn) -> dict[str, Any]:
        return RunOut.of(await scopes.of(who).cancel(given.run_id)).model_dump(mode="json")

    async def retry(who: str | None, given: RunIn) -> dict[str, Any]:
        return RunOut.of((await scopes.of(who).retry(given.run_id)).run).model_dump(mode="json")

    tools = [
        _Tool("submit_run", "Submit a run of a task (or a built-in job: webhook, llm, chain) with its "
              "JSON args; `key` makes the submission idempotent (the same key is the same run), "
              "`thread` joins a conversation. Returns the run.", TaskSubmitIn, submit_run,
              read_only=False, idempotent=False),
        _Tool("get_run", "A run: its state, result or error, and why it waits.", RunIn, get_run),
        _Tool("follow_run", "A run's events after the seq `after`, waiting up to `wait_s` seconds for "
              "the first new one (a long poll: call again with `next_after` until `done`).",
              FollowIn, follow_run),
        _Tool("list_runs", "Runs, newest first, filtered as GET /runs filters them; `before` (the "
              "last id of a page) pages on.", ListIn, list_runs),
        _Tool("read_thread", "A thread's conversation: the messages of its runs.", ThreadIn, read_thread),
        _Tool("list_questions", "The questions runs wait on (ctx.ask, tool approvals), or every "
              "question of one run.", QuestionsIn, questions),
        _Tool("answer_question", "Answer a run's question (its id from list_questions); the value "
              "must fit the question's schema. The run wakes.", AnswerToolIn, answer,
              read_only=False, idempotent=True),
        _Tool("cancel_run", "Cancel a run (a running one stops at its next step).", RunIn, cancel,
              read_only=False, destructive=True),
        _Tool("retry_run", "Re-queue a failed or dead run with fresh attempts.", RunIn, retry,
              read_only=False, idempotent=False),
    ]
    by_name = {tool.name: tool for tool in tools}
    listed = [types.Tool(name=t.name, description=t.description, input_schema=_schema(t),
                         annotations=types.ToolAnnotations(read_only_hint=t.read_only,
                                                           destructive_hint=t.destructive,
                                                           idempotent_hint=t.idempotent,
                                                           open_world_hint=False))
              for t in tools]

    async def on_list_tools(_ctx: Any, _params: Any) -> Any:
        return types.ListToolsResult(tools=listed)

    async def on_call_tool(ctx: Any, params: Any) -> Any:
        tool = by_name.get(params.name)
        if tool is None:
            return _failure(f"unknown tool {params.name!r}; the tools are: {', '.join(by_name)}")
        who = caller(ctx)
        if who is False:
            return _failure("unauthorized: send Authorization: Bearer <token> (a token of "
                            "RUNWRIGHT_TOKENS or RUNWRIGHT_OPERATOR_TOKENS)")
        arguments = params.arguments or {}
        try:
            given: Any = arguments if tool.model is TaskSubmitIn else tool.model.model_validate(arguments)
            value = await tool.handler(who, given)
        except ValidationError as exc:
            return _failure(_one_line(exc))
        except (RunwrightError, OperatorOnly) as exc:
            return _failure(f"{type(exc).__name__}: {_first_line(str(exc))}")
        except Exception:  # ours, not the caller's: the log has it, the caller a line
            logger.exception("MCP tool %s failed", tool.name)
            return _failure(f"{tool.name} failed inside the server; its log has the error")
        return types.CallToolResult(content=[types.TextContent(type="text", text=json.dumps(value))],
                                    structured_content=value)

    return Server(name, on_list_tools=on_list_tools, on_call_tool=on_call_tool)


async def _next_events(scope: Any, run_id: int, after: int, wait_s: float) -> list[Any]:
    """The events after `after` once there is one (the follower is woken by the store's
    notifications), or none after `wait_s` or once the run has ended with none left."""
    events = scope.events(run_id, after, follow=True)
    try:
        first = await bounded(anext(events), wait_s)
    except (TimeoutError, StopAsyncIteration):
        return []
    finally:
        await events.aclose()
    return [first, *await scope.events_page(run_id, first.seq)]


def _schema(tool: _Tool) -> dict[str, Any]:
    schema = tool.model.model_json_schema()
    schema.pop("title", None)
    return schema


def _failure(message: str) -> Any:
    from mcp import types

    return types.CallToolResult(content=[types.TextContent(type="text", text=message)], is_error=True)


def _one_line(exc: ValidationError) -> str:
    """Every problem of the input on one line, as the HTTP API's 422 detail reads."""
    problems = []
    for error in exc.errors():
        loc = error["loc"]
        if len(loc) > 1 and loc[0] in SUBMIT_TAGS:  # the tag of the model that checked a submission
            loc = loc[1:]
        where = ".".join(str(part) for part in loc)
        message = str(error["msg"]).removeprefix("Value error, ")
        problems.append(f"{where}: {message}" if where else message)
    return "invalid input: " + "; ".join(problems)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text


def caller_of_stdio(token: str | None) -> tuple[Auth, str | None]:
    """The Auth and the fixed caller of a stdio server: with a token, the tenant (or the
    operator) it names, as the HTTP API maps it (RUNWRIGHT_TOKENS, RUNWRIGHT_OPERATOR_TOKENS);
    with none, the operator (the process holds the store's URL already)."""
    if token is None:
        return Auth(enabled=False), None
    auth = Auth.from_env()
    who = auth.tenant_of(f"Bearer {token}")
    if who is False:
        raise ConfigError("the token is none of RUNWRIGHT_TOKENS or RUNWRIGHT_OPERATOR_TOKENS")
    assert who is not True
    return auth, who


def caller_of_http(auth: Auth) -> Caller:
    """Each HTTP request's tenant, from its own Authorization header (as the HTTP API)."""

    def of(ctx: Any) -> str | None | bool:
        request = getattr(ctx, "request", None)
        headers = getattr(request, "headers", None)
        return auth.tenant_of(headers.get("authorization") if headers is not None else None)

    return of


def require_token(asgi: Any, auth: Auth) -> Any:
    """An ASGI app that answers 401 to a request without a good bearer token, before MCP
    sees it (the tools check each request's token again: `caller_of_http`)."""

    async def guarded(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and auth.enabled:
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}
            if auth.tenant_of(headers.get("authorization")) is False:
                body = json.dumps({"error": "unauthorized: send Authorization: Bearer <token>"}).encode()
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer")]})
                await send({"type": "http.response.body", "body": body})
                return
        await asgi(scope, receive, send)

    return guarded

