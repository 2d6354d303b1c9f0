"""Submission through the App: options, idempotency and every bad input of DESIGN §11."""

from __future__ import annotations

import datetime as dt
import inspect

import pytest

import runwright as rw
from runwright.store._params import RunCountParams
from runwright.tasks._submission import MAX_PRIORITY, OPTIONS

from ..conftest import PG_BASE


def _tasks(app: rw.App):
    @app.task(queue="mail", priority=rw.HIGH, retries=4, timeout_s=30)
    async def send(ctx: rw.Context, to: str, body: str = "") -> str:
        return to

    return send


async def test_submit_records_the_task_options(app):
    send = _tasks(app)
    handle = await app.submit(send, "a@b.c", body="hi")
    run = handle.run
    assert (run.task, run.queue, run.priority, run.max_attempts, run.timeout_s) == ("send", "mail", 1, 5, 30)
    assert run.arguments() == {"to": "a@b.c", "body": "hi"}
    assert run.state is rw.RunState.QUEUED and not handle.existed


async def test_submit_options_override_and_delay(app):
    send = _tasks(app)
    handle = await app.submit(send, to="x", priority=rw.LOW, queue="other", delay_s=60)
    assert handle.run.priority == 3 and handle.run.queue == "other"
    # Any priority in 0..MAX_PRIORITY, not only the four named ones.
    assert (await app.submit(send, to="p", priority=7)).run.priority == 7
    assert (await app.submit(send, to="q", priority=MAX_PRIORITY)).run.priority == MAX_PRIORITY
    assert handle.run.run_at == pytest.approx(handle.run.created_at + 60)
    at = dt.datetime(2031, 1, 1, tzinfo=dt.UTC)
    assert (await app.submit(send, to="y", run_at=at)).run.run_at == at.timestamp()
    # ISO 8601 text with a zone, as the CLI and the HTTP API pass it on.
    assert (await app.submit(send, to="z", run_at="2031-01-01T01:00:00+01:00")).run.run_at == at.timestamp()
    assert (await app.submit(send, to="w", run_at="2031-01-01T00:00:00Z")).run.run_at == at.timestamp()
    batch = await app.submit_many(send, [rw.Call({"to": "v"}, run_at="2031-01-01T00:00:00Z")])
    assert batch[0].run.run_at == at.timestamp()


async def test_submission_options_never_collide_with_task_arguments(app):
    """Options are keyword-only names of `submit`; a task may not name a parameter like
    one (refused at registration, naming it), so every argument reaches the task."""
    for name in OPTIONS:
        async def shadowing(ctx: rw.Context, **kwargs: object) -> None: ...

        shadowing.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
            inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD),
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY)])
        with pytest.raises(rw.ConfigError, match=f"rename '{name}'; .* submission option"):
            app.task(name=f"shadowing_{name}")(shadowing)
    assert not any(name.startswith("shadowing") for name in app.tasks)
    with pytest.raises(rw.ConfigError, match="rename 'key', 'queue'"):
        app.task(lambda queue, key: None)

    @app.task
    async def mail(ctx: rw.Context, to: str, keys: list[str], queued: bool = False) -> None: ...

    handle = await app.submit(mail, "a@b.c", ["k1"], queued=True, key="k", queue="q", priority=0)
    assert handle.run.arguments() == {"to": "a@b.c", "keys": ["k1"], "queued": True}
    assert (handle.run.key, handle.run.queue, handle.run.priority) == ("k", "q", 0)


async def test_the_same_key_returns_the_existing_run_and_says_so(app):
    send = _tasks(app)
    first = await app.submit(send, to="x", body="b", key="weekly-2026-w42")
    # The same submission, its arguments given another way (positionally, in another order).
    again = await app.submit(send, "x", key="weekly-2026-w42", body="b")
    assert again.id == first.id and again.existed and not first.existed
    assert again.run.arguments() == {"to": "x", "body": "b"}


async def test_a_key_reused_with_other_arguments_is_a_conflict_and_writes_nothing(app):
    send = _tasks(app)
    first = await app.submit(send, to="x", key="weekly")
    with pytest.raises(rw.KeyConflict) as refused:
        await app.submit(send, to="DIFFERENT", key="weekly")
    assert str(refused.value) == (f"key 'weekly' names run {first.id}, which was submitted with other "
                                  f"arguments; give another key, or on_conflict='return' to get run "
                                  f"{first.id} as it is")
    conflict = refused.value
    assert (conflict.key, conflict.run_id, conflict.differs) == ("weekly", first.id, ["arguments"])
    assert not isinstance(refused.value, ValueError)  # not a malformed input: a taken key
    assert await app.store.run_count_by_state(RunCountParams()) == {"queued": 1}
    (run,) = await app.list_runs(key="weekly")
    assert run.arguments() == {"to": "x"} and run.last_seq == 1  # its log: `submitted` only
    # Asked to, the existing run is returned as it is.
    accepted = await app.submit(send, to="DIFFERENT", key="weekly", on_conflict="return")
    assert accepted.id == first.id and accepted.existed and accepted.run.arguments() == {"to": "x"}


async def test_what_a_key_compares_task_arguments_queue_priority_thread_budget(app):
    send = _tasks(app)

    @app.task(queue="mail", priority=rw.HIGH)
    async def other(ctx: rw.Context, to: str, body: str = "") -> str:
        return to

    first = await app.submit(send, to="x", key="k", budget=rw.Budget(max_cost_usd=1.0))
    differing = [
        (dict(task=other), ["task"], "task 'send' (not 'other')"),
        (dict(to="y"), ["arguments"], "other arguments"),
        (dict(to="x", body=""), ["arguments"], "other arguments"),  # a default given is an argument
        (dict(queue="other"), ["queue"], "queue 'mail' (not 'other')"),
        (dict(priority=rw.LOW), ["priority"], "priority 1 (not 3)"),
        (dict(budget=rw.Budget(max_cost_usd=2.0)), ["budget"],
         'budget {"max_cost_usd": 1.0} (not {"max_cost_usd": 2.0})'),
        (dict(budget=None), ["budget"], 'budget {"max_cost_usd": 1.0} (not none)'),
        (dict(to="y", priority=0), ["arguments", "priority"], "other arguments, priority 1 (not 0)"),
    ]
    for change, differs, detail in differing:
        given = {"task": send, "to": "x", "budget": rw.Budget(max_cost_usd=1.0), **change}
        task = given.pop("task")
        with pytest.raises(rw.KeyConflict) as refused:
            await app.submit(task, key="k", **given)
        assert (refused.value.differs, refused.value.detail) == (differs, detail), change
    # What is not compared: when it is due, the trace, the busy policy (of a submission to no
    # thread), the priority and queue given as the task's own defaults.
    for same in (dict(delay_s=60), dict(run_at=dt.datetime(2031, 1, 1, tzinfo=dt.UTC)),
                 dict(traceparent="00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
                 dict(priority=rw.HIGH, queue="mail")):
        again = await app.submit(send, to="x", key="k", budget=rw.Budget(max_cost_usd=1.0), **same)
        assert again.id == first.id and again.existed, same
    assert await app.store.run_count_by_state(RunCountParams()) == {"queued": 1}


async def test_a_key_on_a_thread_is_the_same_run_only_on_that_thread(app):
    send = _tasks(app)
    first = await app.submit(send, to="x", key="k", thread="t")
    again = await app.submit(send, to="x", key="k", thread="t")  # the thread is busy with it: no ThreadBusy
    assert again.id == first.id and again.existed
    with pytest.raises(rw.KeyConflict, match=r"thread 't' \(not 'u'\)"):
        await app.submit(send, to="x", key="k", thread="u")
    with pytest.raises(rw.KeyConflict, match=r"thread 't' \(not none\)"):
        await app.submit(send, to="x", key="k")
    with pytest.raises(rw.KeyConflict, match="other arguments"):
        await app.submit(send, to="y", key="k", thread="t", on_busy="enqueue")
    assert [t.thread for t in await app.list_threads()] == ["t"]  # no thread "u" was left behind
    (run,) = await app.list_runs(thread="t")
    assert run.id == first.id
    # Another tenant's key is another run.
    theirs = await app.tenant("acme").submit(send, to="y", key="k", thread="u")
    assert theirs.id != first.id and not theirs.existed


async def test_a_batch_with_conflicting_keys_writes_its_other_items_and_says_which_conflict(app):
    send = _tasks(app)
    same, taken = await app.submit_many(send, [rw.Call({"to": "a"}, key="same"),
                                               rw.Call({"to": "b"}, key="taken")])
    items = [rw.Call({"to": "a"}, key="same"), rw.Call({"to": "OTHER"}, key="taken"), {"to": "new"},
             rw.Call({"to": "c"}, key="twice"), rw.Call({"to": "d"}, key="twice")]
    with pytest.raises(rw.KeyConflict) as refused:
        await app.submit_many(send, items)
    conflict = refused.value
    assert conflict.items == [1, 4] and (conflict.key, conflict.run_id) == ("taken", taken.id)
    assert str(conflict).startswith(f"item 1: key 'taken' names run {taken.id}, which was submitted with "
                                    f"other arguments;")
    assert str(conflict).endswith("(items 1, 4 of the batch conflict)")
    handles = conflict.handles
    assert [h.id for h in handles[:2]] == [same.id, taken.id] and handles[1].run.arguments() == {"to": "b"}
    assert not handles[2].existed and handles[2].run.arguments() == {"to": "new"}  # written
    assert handles[4].id == handles[3].id and handles[3].run.arguments() == {"to": "c"}
    assert await app.store.run_count_by_state(RunCountParams()) == {"queued": 4}
    # Asked to, every item gets its run as it is; nothing more is written.
    again = await app.submit_many(send, items[:2] + items[3:], on_conflict="return")
    assert [h.id for h in again] == [same.id, taken.id, handles[3].id, handles[3].id]
    assert await app.store.run_count_by_state(RunCountParams()) == {"queued": 4}


async def test_submit_many_in_one_batch_with_per_item_options(app):
    send = _tasks(app)
    handles = await app.submit_many(send, [{"to": "a"}, rw.Call({"to": "b"}, key="kb", priority=0),
                                           {"to": "c"}])
    assert [h.run.arguments()["to"] for h in handles] == ["a", "b", "c"]
    assert handles[1].run.key == "kb" and handles[1].run.priority == 0
    again = await app.submit_many(send, [rw.Call({"to": "b"}, key="kb", priority=0)])
    assert again[0].id == handles[1].id and again[0].existed
    with pytest.raises(rw.KeyConflict, match=r"priority 0 \(not 1\)"):  # the task's default is another
        await app.submit_many(send, [rw.Call({"to": "b"}, key="kb")])


async def test_a_large_batch_is_one_batch_in_submission_order(app):
    """Sent in chunks on PostgreSQL: keys repeated across chunks and keys taken before
    still make one run each, and the handles keep the items' order."""
    send = _tasks(app)
    (old,) = await app.submit_many(send, [rw.Call({"to": "old"}, key="old")])
    items = [rw.Call({"to": str(n)}, key="kb") if n in (5, 600) else
             rw.Call({"to": "again"}, key="old") if n == 999 else {"to": str(n)} for n in range(1000)]
    with pytest.raises(rw.KeyConflict) as refused:  # items 600 and 999 name runs of other arguments
        await app.submit_many(send, (item for item in items))  # any iterable
    assert refused.value.items == [600, 999] and refused.value.run_id == refused.value.handles[5].id
    handles = refused.value.handles
    assert [h.run.arguments()["to"] for h in handles[:5]] == ["0", "1", "2", "3", "4"]
    assert handles[600].id == handles[5].id and handles[600].existed and not handles[5].existed
    assert handles[999].id == old.id and handles[999].existed
    assert handles[999].run.arguments() == {"to": "old"}
    fresh = [h for n, h in enumerate(handles) if n not in (600, 999)]
    assert not any(h.existed for h in fresh) and len({h.id for h in fresh}) == 998
    assert [h.id for h in fresh] == sorted(h.id for h in fresh), "ids in submission order"
    assert await app.store.run_count_by_state(RunCountParams()) == {"queued": 999}
    # Once more, every key now names its run: nothing new is written, nothing conflicts.
    again = await app.submit_many(send, [rw.Call({"to": str(n)}, key=f"k{n}") for n in range(3)]
                                  + [rw.Call({"to": "5"}, key="kb")])
    assert again[-1].id == handles[5].id and again[-1].existed
    assert await app.store.run_count_by_state(RunCountParams()) == {"queued": 1002}


@pytest.mark.parametrize("call, error, match", [
    (lambda app, t: app.submit("nope"), rw.UnknownTask, "unknown task 'nope'"),
    (lambda app, t: app.submit(t), rw.BadArguments, "missing a required argument"),
    (lambda app, t: app.submit(t, to="x", cc="y"), rw.BadArguments, "unexpected keyword"),
    (lambda app, t: app.submit(t, to=object()), rw.BadArguments,
     "task 'send': argument 'to': Input should be a valid string"),
    (lambda app, t: app.submit(t, to="x" * (2 << 20)), rw.PayloadTooLarge, "over the limit"),
    (lambda app, t: app.submit(t, to="x", delay_s=-5), rw.InvalidTime, ">= 0"),
    (lambda app, t: app.submit(t, to="x", delay_s=float("nan")), rw.InvalidTime, "finite"),
    (lambda app, t: app.submit(t, to="x", run_at=dt.datetime(2030, 1, 1)), rw.InvalidTime, "time zone"),
    (lambda app, t: app.submit(t, to="x", run_at=1.0, delay_s=1), rw.InvalidTime, "not both"),
    (lambda app, t: app.submit(t, to="x", run_at="2030-01-01T09:00"), rw.InvalidTime, "time zone"),
    (lambda app, t: app.submit(t, to="x", run_at="next tuesday"), rw.InvalidTime, "ISO 8601"),
    (lambda app, t: app.submit(t, to="x", run_at="nan"), rw.InvalidTime, "finite"),
    (lambda app, t: app.submit(t, to="x", priority=-1), rw.InvalidInput, "priority"),
    (lambda app, t: app.submit(t, to="x", priority=MAX_PRIORITY + 1), rw.InvalidInput,
     r"priority must be an int in 0\.\.32767"),
    (lambda app, t: app.submit(t, to="x", on_busy="enqueue"), rw.InvalidInput, "give the thread too"),
    (lambda app, t: app.submit(t, to="x", key=""), rw.InvalidInput, "key"),
    (lambda app, t: app.submit(t, to="x", key="k", on_conflict="ignore"), rw.InvalidInput,
     "on_conflict must be one of reject, return, got 'ignore'"),
    (lambda app, t: app.submit_many(t, [{"to": "x"}], on_conflict=None), rw.InvalidInput,
     "on_conflict must be one of reject, return, got None"),
    (lambda app, t: app.submit_many(t, [{"to": "a"}, {"too": "b"}]), rw.BadArguments, "item 1"),
    # Far into a large batch, after PostgreSQL has sent the first chunks of it.
    (lambda app, t: app.submit_many(t, [{"to": str(n)} for n in range(950)] + [{"too": "b"}]),
     rw.BadArguments, "item 950"),
    (lambda app, t: app.submit_many(t, (rw.Call({"to": "a"}, key=f"k{n}") if n < 999 else {"to": 1, "x": 2}
                                        for n in range(1000))), rw.BadArguments, "item 999"),
])
async def test_bad_input_is_refused_and_nothing_is_written(app, call, error, match):
    send = _tasks(app)
    with pytest.raises(error, match=match):
        await call(app, send)
    assert await app.store.run_count_by_state(RunCountParams()) == {}


@pytest.mark.parametrize("operation", ["get", "cancel", "retry"])
async def test_unknown_run_ids_are_a_clear_error(app, operation):
    with pytest.raises(rw.RunNotFound, match="not found"):
        await getattr(app, operation)(424242)
    with pytest.raises(rw.RunNotFound, match="integers"):
        await getattr(app, operation)("abc")
    with pytest.raises(rw.RunNotFound, match="not found"):
        await getattr(app, operation)(2**70)


async def test_an_unreachable_store_is_a_clear_error():
    app = rw.App("postgresql://postgres@127.0.0.1:1/nope")
    with pytest.raises(rw.StoreUnreachable, match="127.0.0.1:1"):
        await app.open()
    with pytest.raises(rw.StoreUnreachable, match="does not exist"):
        await rw.App("sqlite:////no/such/dir/x.db").open()


async def test_a_postgresql_server_without_the_database_says_to_create_it():
    """Reached, but the database is not there: the schema's kind of error (exit 4, "no
    database"), not an unreachable store (3), with what to do."""
    base = PG_BASE.rsplit("/", 1)[0]
    missing = r'database "rw_test_no_such_db" does not exist .*CREATE DATABASE'
    with pytest.raises(rw.SchemaError, match=missing):
        await rw.App(f"{base}/rw_test_no_such_db").open()
