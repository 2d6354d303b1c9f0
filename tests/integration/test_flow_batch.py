"""Batching per key through the App, its HTTP face and a real worker, on every backend:
the declaration checked at registration (one clear error each), a submission's item
joining the key's queued run (handle.outcome "batched", HTTP 200), and the task given
the list of the submissions' arguments once the batch is full."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pydantic
import pytest

import runwright as rw

from .conftest import running_worker


def test_a_batch_is_checked_at_registration() -> None:
    app = rw.App("memory://")
    for most in (0, -1, True, 2.5, 10_001):
        with pytest.raises(rw.ConfigError, match=r"Batch max_items is a whole number in 1\.\.10000, got "):
            rw.Batch(key="k", max_items=most, max_wait_s=1)  # type: ignore[arg-type]
    with pytest.raises(rw.ConfigError, match=r"Batch max_wait_s is seconds in \(0, 86400\], got 0"):
        rw.Batch(key="k", max_items=10, max_wait_s=0)
    with pytest.raises(rw.ConfigError, match=r"Batch key '\{args.\}'"):
        rw.Batch(key="{args.}", max_items=10, max_wait_s=1)
    with pytest.raises(rw.ConfigError, match="one of singleton=, throttle=, debounce=, batch= per task, "
                                             "got debounce, batch"):
        app.task(debounce=rw.Debounce(key="k", window_s=1),
                 batch=rw.Batch(key="k", max_items=2, max_wait_s=1))(lambda items: None)
    with pytest.raises(rw.ConfigError, match="batch= takes a Batch"):
        app.task(batch=rw.Debounce(key="k", window_s=1))(lambda items: None)  # type: ignore[arg-type]
    one = rw.Batch(key="k", max_items=2, max_wait_s=1)
    for shape in ("async def two(order, items): ...", "async def none(): ...",
                  "async def spread(**items): ...", "async def ctx_only(ctx): ..."):
        space: dict[str, Any] = {}
        exec(shape, space)  # noqa: S102 - a function of each shape
        fn = next(value for name, value in space.items() if name != "__builtins__")
        with pytest.raises(rw.ConfigError, match=r"a batched task takes one parameter \(after ctx\)"):
            app.task(name=fn.__name__, batch=one)(fn)

    @app.task(batch=one)
    async def index(ctx: rw.Context, events: list[dict[str, Any]]) -> None:
        return None

    assert index.batch_items == "events"


async def test_submissions_join_the_keys_batch_and_the_task_gets_the_list(app: rw.App) -> None:
    got: list[list[dict[str, Any]]] = []

    @app.task(batch=rw.Batch(key="{args.order}", max_items=3, max_wait_s=3600))
    async def index(events: list[dict[str, Any]]) -> int:
        got.append(events)
        return len(events)

    first = await app.submit(index, order="o-1", line=1)
    assert first.outcome == "new" and first.run.run_at > first.run.created_at + 3000, "due max_wait_s later"
    second = await app.submit(index, order="o-1", line=2)
    other = await app.submit(index, order="o-2", line=1)
    assert (second.outcome, second.id) == ("batched", first.id)
    assert other.outcome == "new" and other.id != first.id
    with pytest.raises(rw.BadArguments, match=r"task 'index': too many positional arguments; signature is "
                                              r"\(\*\*item\)"):  # an item is given by keyword
        await app.submit(index, "o-1")
    with pytest.raises(rw.InvalidInput, match="batch 'index' is keyed by argument 'order', which this "
                                              "submission does not give"):
        await app.submit(index, line=3)
    with pytest.raises(rw.InvalidInput, match=r"flow control \(singleton, throttle, debounce or batch\); "
                                              r"it cannot be submitted to a thread"):
        await app.submit(index, order="o-1", line=3, thread="t")
    with pytest.raises(rw.InvalidInput, match="not with connection="):
        await app.submit(index, order="o-1", line=3, connection=object())
    third = await app.submit(index, order="o-1", line=3)  # fills it: due now
    assert third.id == first.id and third.outcome == "batched"
    async with running_worker(app):
        assert await first.result(timeout_s=60) == 3
    assert got == [[{"order": "o-1", "line": 1}, {"order": "o-1", "line": 2}, {"order": "o-1", "line": 3}]]
    assert (await other.refresh()).state is rw.RunState.QUEUED, "o-2's batch waits for its time"
    events = [e.kind for e in await app.events_page(first.id)]
    assert events.count("batched") == 2, events


async def test_the_http_submit_answers_a_batched_item_with_200(app: rw.App) -> None:
    from runwright.server import Auth
    from runwright.server._factory import create_server

    @app.task(batch=rw.Batch(key="{args.order}", max_items=10, max_wait_s=3600))
    async def index(items: list[dict[str, Any]]) -> None:
        return None

    api = create_server(app, Auth({"tenant-token": "acme"}, operators=frozenset()))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(api), base_url="http://runwright",
                                 headers={"Authorization": "Bearer tenant-token"}) as http:
        made = await http.post("/runs", json={"task": "index", "args": {"order": "o-1", "n": 1}})
        assert made.status_code == 201 and made.json()["outcome"] == "new", made.text
        joined = await http.post("/runs", json={"task": "index", "args": {"order": "o-1", "n": 2}})
        assert joined.status_code == 200, "no new run: the key's batch took it"
        assert joined.json()["outcome"] == "batched" and joined.json()["id"] == made.json()["id"]


def test_a_scheduled_fire_of_a_batched_task_keys_its_limits_by_the_item() -> None:
    """A schedule's fire carries the stored arguments (the list of its one item): its
    concurrency keys are the item's, as a submission's are."""
    app = rw.App("memory://")

    @app.task(batch=rw.Batch(key="{args.order}", max_items=5, max_wait_s=1),
              concurrency=rw.Limit(key="{args.order}", max=1))
    async def index(items: list[dict[str, Any]]) -> None:
        return None

    assert index.concurrency is not None
    fired = app.worker()._flow_of("index", json.dumps({"items": [{"order": "o-1"}]}))
    assert fired is not None and fired.limits is not None and fired.flow is not None
    assert fired.limits == index.concurrency.of({"order": "o-1"}, None) and "o-1" in fired.limits
    assert json.loads(fired.flow)[2] == "o-1", "its batch key is the item's too"


class Event(pydantic.BaseModel):  # at the top level: a hint is resolved in its module
    order: str
    qty: int = 1


async def test_each_item_is_checked_by_the_parameters_hint(app: rw.App) -> None:
    @app.task(batch=rw.Batch(key="{args.order}", max_items=3, max_wait_s=3600))
    async def count(events: list[Event]) -> int:
        return sum(event.qty for event in events)

    first = await app.submit(count, order="o-1", qty="2")
    assert first.run.arguments() == {"events": [{"order": "o-1", "qty": 2}]}, "stored in its JSON form"
    with pytest.raises(rw.BadArguments, match=r"argument 'events\.0\.qty': Input should be a valid integer"):
        await app.submit(count, order="o-1", qty="x")
    joined = await app.submit(count, order="o-1")
    assert joined.id == first.id and (await joined.refresh()).arguments() == {
        "events": [{"order": "o-1", "qty": 2}, {"order": "o-1", "qty": 1}]}, "nothing of the refused one"


async def test_an_item_that_would_take_the_batch_past_the_payload_limit_opens_a_new_one() -> None:
    app = rw.App("memory://", max_payload_bytes=300)

    @app.task(batch=rw.Batch(key="{args.order}", max_items=100, max_wait_s=3600))
    async def index(items: list[dict[str, Any]]) -> None:
        return None

    await app.open()
    try:
        handles = [await app.submit(index, order="o-1", n=n, pad="x" * 40) for n in range(12)]
        runs = {h.id: await app.store.run_get(h.id) for h in handles}
        held = {run_id: [item["n"] for item in run.arguments()["items"]] for run_id, run in runs.items()}
        assert sorted(n for got in held.values() for n in got) == list(range(12)), held
        assert len(held) >= 3 and all(len(run.args.encode()) <= 300 for run in runs.values()), held
        assert [h.outcome for h in handles].count("new") == len(held), "each full batch's next opened one"
    finally:
        await app.close()
