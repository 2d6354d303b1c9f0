"""Flow control per key through the App, its HTTP face and a real worker, on every backend:
the declarations checked at registration, what a submission did said to the submitter
(handle.outcome, the HTTP answer), a throttled run's wait explained, and a singleton that
waits running its key's runs one at a time."""

from __future__ import annotations

import asyncio

import httpx
import pytest

import runwright as rw

from .conftest import running_worker


def test_declarations_are_checked_at_registration() -> None:
    app = rw.App("memory://")
    with pytest.raises(rw.ConfigError, match=r"Singleton key '\{args.\}': \{args.\} is neither"):
        rw.Singleton(key="{args.}")
    with pytest.raises(rw.ConfigError, match="Singleton on_conflict is one of refuse, replace, wait"):
        rw.Singleton(key="k", on_conflict="drop")
    with pytest.raises(rw.ConfigError, match="Throttle on_excess is one of drop, delay"):
        rw.Throttle(key="k", per_s=1, on_excess="replace")
    with pytest.raises(rw.ConfigError, match=r"Throttle per_s is seconds in \(0, 86400\]"):
        rw.Throttle(key="k", per_s=0)
    with pytest.raises(rw.ConfigError, match=r"Debounce window_s is seconds in \(0, 86400\]"):
        rw.Debounce(key="k", window_s=float("nan"))
    with pytest.raises(rw.ConfigError, match="one of singleton=, throttle=, debounce=, batch= per task"):
        app.task(singleton=rw.Singleton(key="k"), debounce=rw.Debounce(key="k", window_s=1))(lambda: None)
    with pytest.raises(rw.ConfigError, match="throttle= takes a Throttle"):
        app.task(throttle=rw.Debounce(key="k", window_s=1))(lambda: None)  # type: ignore[arg-type]

    @app.task(singleton=rw.Singleton(key="{args.order}", on_conflict="wait"))
    async def ship(order: str) -> None:
        return None

    # "wait" is a concurrency limit of 1 on the key, not a decision at submission.
    assert ship.flow is None and ship.concurrency is not None
    assert [(name, limit.max) for name, limit in ship.concurrency.limits] == [("singleton.ship", 1)]


async def test_the_submitter_learns_what_each_submission_did(app: rw.App) -> None:
    @app.task(singleton=rw.Singleton(key="{args.order}"))
    async def charge(order: str) -> None:
        return None

    @app.task(singleton=rw.Singleton(key="{args.order}", on_conflict="replace"))
    async def quote(order: str, n: int) -> None:
        return None

    @app.task(debounce=rw.Debounce(key="{tenant}", window_s=600))
    async def reindex(n: int) -> None:
        return None

    @app.task(throttle=rw.Throttle(key="{args.user}", per_s=600, on_excess="delay"))
    async def digest(user: str) -> None:
        return None

    first = await app.submit(charge, order="o-1")
    assert first.outcome == "new" and first.replaced is None
    with pytest.raises(rw.SingletonTaken, match=f"singleton key 'o-1' is held by run {first.id} "
                                                 f"\\(queued\\); nothing was submitted"):
        await app.submit(charge, order="o-1")
    assert (await app.submit(charge, order="o-2")).outcome == "new"

    old = await app.submit(quote, order="o-1", n=1)
    new = await app.submit(quote, order="o-1", n=2)
    assert new.outcome == "replaced" and new.replaced == old.id
    assert (await old.refresh()).state is rw.RunState.CANCELLED

    acme = app.tenant("acme")
    a = await acme.submit(reindex, n=1)
    b = await acme.submit(reindex, n=2)
    assert (a.outcome, b.outcome, b.id) == ("new", "debounced", a.id)
    assert (await a.refresh()).arguments() == {"n": 2}
    with pytest.raises(rw.InvalidInput, match="debounce 'reindex' is per tenant; submit with tenant="):
        await app.submit(reindex, n=3)
    with pytest.raises(rw.InvalidInput, match="cannot be submitted to a thread"):
        await acme.submit(reindex, n=3, thread="t")

    now = await app.submit(digest, user="u")
    later = await app.submit(digest, user="u")
    assert (now.outcome, later.outcome) == ("new", "delayed")
    assert later.run.run_at == pytest.approx(now.run.run_at + 600)
    why = (await app.waiting([await later.refresh()]))[later.id]
    assert why.reason is rw.WaitReason.THROTTLE and why.detail.startswith("a throttle of its key")
    assert [run.id for run in await app.list_runs(waiting="throttle")] == [later.id]


async def test_the_http_submit_answers_with_the_outcome(app: rw.App) -> None:
    from runwright.server import Auth
    from runwright.server._factory import create_server

    @app.task(singleton=rw.Singleton(key="{args.order}"))
    async def charge(order: str) -> None:
        return None

    @app.task(throttle=rw.Throttle(key="{args.user}", per_s=600))
    async def digest(user: str) -> None:
        return None

    api = create_server(app, Auth({"tenant-token": "acme"}, operators=frozenset()))
    headers = {"Authorization": "Bearer tenant-token"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(api), base_url="http://runwright",
                                 headers=headers) as http:
        made = await http.post("/runs", json={"task": "charge", "args": {"order": "o-1"}})
        assert made.status_code == 201 and made.json()["outcome"] == "new", made.text
        taken = await http.post("/runs", json={"task": "charge", "args": {"order": "o-1"}})
        assert taken.status_code == 409 and taken.json()["title"] == "Singleton key taken"
        assert f"held by run {made.json()['id']}" in taken.json()["detail"]
        first = await http.post("/runs", json={"task": "digest", "args": {"user": "u"}})
        dropped = await http.post("/runs", json={"task": "digest", "args": {"user": "u"}})
        assert dropped.status_code == 200, "no new run: the key's standing one answers"
        assert dropped.json()["outcome"] == "dropped" and dropped.json()["id"] == first.json()["id"]


async def test_a_waiting_singleton_runs_its_keys_runs_one_at_a_time(app: rw.App) -> None:
    release = asyncio.Event()
    running: list[int] = []
    most = [0]

    @app.task(singleton=rw.Singleton(key="{args.order}", on_conflict="wait"))
    async def ship(order: str, n: int) -> int:
        running.append(n)
        most[0] = max(most[0], len(running))
        await release.wait()
        running.remove(n)
        return n

    async with running_worker(app, concurrency=4):
        first = await app.submit(ship, order="o-1", n=1)
        second = await app.submit(ship, order="o-1", n=2)
        other = await app.submit(ship, order="o-2", n=3)
        async with asyncio.timeout(60):
            while sorted(running) != [1, 3]:
                await asyncio.sleep(0.02)
            while True:  # held by its key's limit of 1, and says so
                why = (await app.waiting([await second.refresh()])).get(second.id)
                if why is not None and why.reason is rw.WaitReason.LIMIT:
                    break
                await asyncio.sleep(0.05)
        release.set()
        assert [await h.result(timeout_s=60) for h in (first, second, other)] == [1, 2, 3]
    assert most[0] == 2, "o-1's two runs never overlapped (o-2's ran beside)"
