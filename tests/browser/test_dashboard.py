"""The dashboard in headless Chromium (Debian's, driven by Playwright) against a real
`runwright serve` with auth on, on every backend (one server per backend for the module,
see conftest): one test per page, each asserting what the page shows. Screenshots of
one backend's run are saved as .artifacts/dashboard-<page>.png (the pages are the same
on every backend: one set is enough)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import shutil
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import httpx
import pytest
from playwright.async_api import Page, Request, Route, async_playwright

import runwright as rw
from runwright.store._params import (
    RunClaimParams,
    RunFinishParams,
    RunRescueParams,
    ThreadAppendParams,
    WorkerRegisterParams,
)

from ..api.test_api import OPERATOR_TOKEN, as_
from ..integration.conftest import running_worker
from ..process import apps
from ..process.harness import ROOT, wait_until
from .conftest import token

# The module's server holds the share of the PostgreSQL budget for its tests (conftest.py).
pytestmark = [pytest.mark.process, pytest.mark.pg_connections(0)]
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IDS = "rows => rows.map(r => Number(r.dataset.id))"
LONG = 60_000  # ms: generous, for a loaded machine
SCREENSHOTS_OF = "sqlite"  # the backend whose run saves the screenshots
# A browser far from UTC: what the pages show and the filters read must not move with it.
FAR_ZONE = "Asia/Kolkata"  # UTC+05:30


@asynccontextmanager
async def signed_in(base: str, secret: str, path: str = "") -> AsyncIterator[Page]:
    """A headless Chromium page on the dashboard, signed in with the token `secret`
    (once: the session cookie serves every page after), at `path` (a hash route, e.g.
    "#/runs"); its clock is in FAR_ZONE. Assertions wait up to LONG."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900}, timezone_id=FAR_ZONE)
            page.set_default_timeout(LONG)
            await page.goto(base + "/" + path)
            await page.fill("#token", secret)
            await page.click("#login button")
            await page.locator("#nav").wait_for()
            yield page
        finally:
            await browser.close()


async def shot(page: Page, name: str, backend: str) -> Path | None:
    """Save the page as .artifacts/dashboard-<name>.png, from SCREENSHOTS_OF's run only."""
    if backend != SCREENSHOTS_OF:
        return None
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"dashboard-{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    return path


def utc(epoch: float) -> str:
    """A time as the pages show it."""
    return dt.datetime.fromtimestamp(epoch, dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


async def dead_letter(app: rw.App, key: str = "doomed", tenant: str = "alice",
                      error: str = "broken") -> rw.RunHandle:
    """A run that ended dead (its attempt made by hand, through the store; on a queue of
    its own, so that the claim takes it and no other run)."""
    queue = f"dead-{tenant}-{key}"
    handle = await app.submit(apps.record, n=9, key=key, tenant=tenant, queue=queue)
    wid = await app.store.worker_register(WorkerRegisterParams("h", 1, [queue], ["record"]))
    (run,) = await app.store.run_claim(RunClaimParams(wid, [queue], ["record"], 1, 30))
    assert run.id == handle.id
    await app.store.run_finish_many([RunFinishParams(
        run.id, run.fence, rw.RunState.DEAD, error=json.dumps({"type": "Boom", "message": error}))])
    await app.store.worker_deregister(wid)
    return handle


async def test_sign_in_once_sets_an_httponly_session(server: str, backend: str) -> None:
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = await browser.new_context(viewport={"width": 1400, "height": 700})
            context.set_default_timeout(LONG)
            page = await context.new_page()
            await page.goto(server + "/#/runs")
            await page.locator("#view-signin").wait_for()
            await page.fill("#token", "not-a-token")
            await page.click("#login button")
            await page.locator("#flash:has-text(\"not one of this server's\")").wait_for()
            await shot(page, "signin", backend)
            await page.fill("#token", token("alice"))
            await page.click("#login button")
            await page.locator("#whoami:has-text('tenant alice')").wait_for()
            await page.locator("#view-runs").wait_for()  # the page asked for, once signed in
            (cookie,) = [c for c in await context.cookies() if c["name"] == "runwright_session"]
            assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
            assert await page.evaluate("document.cookie") == ""  # script cannot read it
            assert await page.evaluate("localStorage.length") == 0
            # Another page of the same browser is signed in already, on any route.
            other = await context.new_page()
            await other.goto(server + "/#/dead")
            await other.locator("#view-dead").wait_for()
            assert await other.locator("#view-signin").is_hidden()
            await other.click("#sign-out")
            await other.locator("#view-signin").wait_for()
            assert [c for c in await context.cookies() if c["name"] == "runwright_session"] == []
        finally:
            await browser.close()


async def test_overview_charts_the_last_hour(server: str, worker_app: rw.App, backend: str) -> None:
    handles = [await worker_app.submit(apps.record, n=i, tenant="overview") for i in range(3)]
    async with running_worker(worker_app):
        for handle in handles:
            await handle.result(timeout_s=60)
    await worker_app.submit(apps.record, n=1, tenant="bob")  # another tenant's: not counted
    for i in range(2):
        await worker_app.submit(apps.record, n=i, tenant="overview")  # due, waiting: the depth
    async with signed_in(server, token("overview")) as page:
        await page.locator("#chart-throughput[data-ended='3']").wait_for()
        await page.locator("#chart-depth[data-now='2']").wait_for()
        assert await page.locator("#tiles .tile[data-name='succeeded'] b").inner_text() == "3"
        assert await page.locator("#tiles .tile[data-name='queued'] b").inner_text() == "2"
        for name in ("throughput", "wait", "duration", "depth"):
            assert await page.locator(f"#chart-{name} canvas").count() == 1
        # Points drawn: one bucket of throughput; a p50, p95 and p99 of each latency.
        assert await page.locator("#chart-throughput").get_attribute("data-points") != "0"
        assert int(await page.locator("#chart-duration").get_attribute("data-points") or 0) >= 3
        assert "3 runs ended" in await page.locator("#series-note").inner_text()
        assert await page.locator("#queues tr[data-queue='default'] td").nth(1).inner_text() == "2"
        await shot(page, "overview", backend)


async def test_runs_filter_by_state_key_tenant_and_a_utc_time_range(
        server: str, worker_app: rw.App, backend: str) -> None:
    ours = [await worker_app.submit(apps.record, n=i, key=f"order-{i}", tenant="runs-a") for i in range(3)]
    doomed = await dead_letter(worker_app, tenant="runs-a")
    theirs = await worker_app.submit(apps.record, n=5, key="order-1", tenant="runs-b")
    async with signed_in(server, token("runs-a"), "#/runs") as page:
        await page.locator(f"#runs tr[data-id='{ours[0].id}']").wait_for()
        assert await page.locator("#runs tbody tr").count() == 4  # runs-b's run is not runs-a's
        created = await page.locator(f"#runs tr[data-id='{ours[0].id}'] td").nth(6).inner_text()
        assert created == utc(ours[0].run.created_at)  # UTC, in a browser that is not
        await page.select_option("#run-filters select[name=state]", "dead")
        await page.click("#run-filters button")
        await page.wait_for_function("location.hash.includes('state=dead')")
        await page.locator(f"#runs tr[data-id='{ours[0].id}']").wait_for(state="detached")
        assert await _ids(page) == [doomed.id]
        # A filtered view is a URL: opening it shows the same rows.
        await page.goto(server + "/#/runs?key=order-1")
        await page.locator(f"#runs tr[data-id='{ours[1].id}']").wait_for()
        assert await _ids(page) == [ours[1].id]
        assert await page.input_value("#run-filters input[name=key]") == "order-1"
        assert await page.locator("#run-filters input[name=tenant]").is_hidden()
        # A time range over submissions, in UTC: the URL's epoch shows as its UTC time...
        since = ours[1].run.created_at
        await page.goto(f"{server}/#/runs?created_after={since}")
        # (The browser leaves out ":00" seconds from the value it shows: compare the times.)
        shown = await page.input_value("#run-filters input[name=created_after]")
        assert dt.datetime.fromisoformat(shown) == \
            dt.datetime.fromtimestamp(since, dt.UTC).replace(tzinfo=None, microsecond=0)
        await page.locator(f"#runs tr[data-id='{ours[2].id}']").wait_for()
        assert ours[0].id not in await _ids(page)
        # ... and a UTC time typed in is that epoch (the browser's zone is not UTC).
        last = int(theirs.run.created_at) + 1
        typed = dt.datetime.fromtimestamp(last, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        await page.goto(f"{server}/#/runs")
        await page.locator(f"#runs tr[data-id='{ours[0].id}']").wait_for()
        await page.fill("#run-filters input[name=created_after]", typed)
        await page.click("#run-filters button")
        await page.wait_for_function(f"location.hash.includes('created_after={last}')")
        await page.locator(f"#runs tr[data-id='{ours[0].id}']").wait_for(state="detached")
        assert await _ids(page) == []
        assert "(UTC)" in await page.locator("#run-filters").inner_text()
    async with signed_in(server, OPERATOR_TOKEN, "#/runs?key=order-1") as page:
        await page.locator(f"#runs tr[data-id='{theirs.id}']").wait_for()
        assert await _ids(page) == [theirs.id, ours[1].id]  # each tenant's run of that key
        await page.fill("#run-filters input[name=tenant]", "runs-b")
        await page.click("#run-filters button")
        await page.locator(f"#runs tr[data-id='{ours[1].id}']").wait_for(state="detached")
        assert await _ids(page) == [theirs.id]
        assert "runs-b" in await page.locator(f"#runs tr[data-id='{theirs.id}']").inner_text()
        await page.fill("#run-filters input[name=key]", "")
        await page.fill("#run-filters input[name=tenant]", "")
        await page.click("#run-filters button")
        await page.locator(f"#runs tr[data-id='{doomed.id}']").wait_for()
        await shot(page, "runs", backend)


async def _ids(page: Page, table: str = "#runs") -> list[int]:
    return list(await page.locator(f"{table} tbody tr").evaluate_all(IDS))


async def test_a_run_page_follows_live_and_shows_attempts_steps_and_children(
        server: str, worker_app: rw.App, backend: str) -> None:
    fresh = await worker_app.submit(apps.record, n=3, tenant="run")
    async with signed_in(server, token("run"), f"#/runs/{fresh.id}") as page:
        await page.locator("#events .event[data-kind='submitted']").wait_for()
        assert await page.locator("#run-cancel").is_enabled()
        async with running_worker(worker_app):
            await page.locator("#events .event[data-kind='succeeded']").wait_for()
            kinds = await page.locator("#events .event").evaluate_all("e => e.map(x => x.dataset.kind)")
            assert kinds == ["submitted", "started", "succeeded"]
            await page.locator("#run-state .state-succeeded").wait_for()
            assert await page.locator("#run-fields dd[data-field=result]").inner_text() == "3"
            assert await page.locator("#run-fields dd[data-field=created]").inner_text() == \
                utc(fresh.run.created_at)
            assert await page.locator("#run-cancel").is_disabled()
            # A parent: its journal's child entries, its children, each child's parent.
            parent = await worker_app.submit(apps.fan_out, count=2, hold_n=-1, tenant="run")
            await parent.result(timeout_s=60)
            await page.goto(f"{server}/#/runs/{parent.id}")
            await page.locator("#run-children tbody tr").nth(1).wait_for()
            children = await page.locator("#run-children tbody tr").evaluate_all(IDS)
            assert len(children) == 2
            assert await page.locator("#run-steps tbody tr:has-text('submit:child')").count() == 2
            await page.locator("#run-timeline .attempt[data-outcome='parked']").first.wait_for()
            await shot(page, "run-children", backend)
            await page.click(f"#run-children a[href='#/runs/{children[0]}']")
            await page.locator(f"#run-fields dd[data-field=parent] a[href='#/runs/{parent.id}']").wait_for()
            # A run that failed twice: two attempts, its traceback, and a retry.
            doomed = await worker_app.submit(apps.doomed, tenant="run")
            with pytest.raises(rw.RunFailed):
                await doomed.result(timeout_s=60)
        await page.goto(f"{server}/#/runs/{doomed.id}")
        await page.locator("#run-state .state-dead").wait_for()
        outcomes = await page.locator("#run-timeline .attempt").evaluate_all(
            "e => e.map(x => x.dataset.outcome)")
        assert outcomes == ["retrying", "dead"]
        trace = await page.locator("#run-error pre").inner_text()
        assert "RuntimeError: doomed" in trace and "Traceback" in trace
        await page.locator("#events .event[data-kind='dead']").wait_for()  # the whole log is in
        # Its emit before the failure is history: the second attempt's replay does not log it again.
        assert await page.locator("#events .event[data-kind='trying']").count() == 1
        await shot(page, "run", backend)
        await page.locator("#run-follow:has-text('its log is complete')").wait_for()
        await page.click("#run-retry")
        await page.locator("#run-state .state-queued").wait_for()
        assert (await doomed.refresh()).state is rw.RunState.QUEUED
        # The log goes on past `dead`: the page says the run was retried, and by whom.
        retried = page.locator("#events .event[data-kind='retried']")
        await retried.wait_for()
        assert '"previous":"dead"' in await retried.inner_text()
        await page.click("#run-cancel")
        await page.locator("#run-state .state-cancelled").wait_for()
        await page.locator("#events .event[data-kind='cancelled']").wait_for()
        kinds = await page.locator("#events .event").evaluate_all("e => e.map(x => x.dataset.kind)")
        assert kinds[-3:] == ["dead", "retried", "cancelled"] and kinds.count("dead") == 1


THREADS_SHOWN = 50  # a page of the threads list


async def test_threads_are_listed_newest_first_a_page_at_a_time(
        server: str, worker_app: rw.App, backend: str) -> None:
    # More threads than a page, a deleted one among them, and another tenant's.
    made = [await worker_app.submit(apps.record, n=i, thread=f"topic-{i}", tenant="threads-a", delay_s=3600)
            for i in range(THREADS_SHOWN + 4)]
    await worker_app.submit(apps.record, n=0, thread="theirs", tenant="threads-b", delay_s=3600)
    gone = f"topic-{THREADS_SHOWN + 2}"  # among the newest: the first page is still a page
    await worker_app.tenant("threads-a").delete_thread(gone)
    async with signed_in(server, token("threads-a"), "#/threads") as page:
        rows = page.locator("#threads tbody tr")
        await page.locator(f"#threads tr[data-thread='topic-{THREADS_SHOWN + 3}']").wait_for()
        assert await rows.count() == THREADS_SHOWN
        assert await rows.first.get_attribute("data-thread") == f"topic-{THREADS_SHOWN + 3}"  # the newest
        newest = page.locator(f"#threads tr[data-thread='topic-{THREADS_SHOWN + 3}'] td")
        assert [await newest.nth(i).inner_text() for i in (2, 3, 4, 5)] == [
            "1", "1 (busy)", str(made[-1].id), "queued"]
        await page.click("#threads-older")
        await page.locator("#threads tr[data-thread='topic-0']").wait_for()
        await page.locator("#threads-older").wait_for(state="hidden")  # the last page
        names = await rows.evaluate_all("rows => rows.map(r => r.dataset.thread)")
        assert names == [f"topic-{i}" for i in range(THREADS_SHOWN + 3, -1, -1) if i != THREADS_SHOWN + 2]
        assert await page.locator("#threads tr[data-thread='theirs']").count() == 0
        await page.check("#threads-deleted")
        await page.locator(f"#threads tr.deleted[data-thread='{gone}']").wait_for()
        assert await rows.count() == THREADS_SHOWN  # the first page again, the deleted one in it
        await shot(page, "threads", backend)
    async with signed_in(server, OPERATOR_TOKEN, "#/threads") as page:  # every tenant's
        row = page.locator("#threads tr[data-thread='theirs']")
        await row.wait_for()
        assert await row.get_attribute("data-tenant") == "threads-b"
        assert "threads-b" in await row.inner_text()


async def test_a_thread_page_follows_its_stream_and_cancels_its_open_runs(
        server: str, worker_app: rw.App, backend: str) -> None:
    # Its first run made by hand, on a queue of its own (the store is shared: the claim
    # takes this run and no other test's).
    first = await worker_app.submit(apps.record, n=1, thread="chat-1", tenant="alice", queue="chat-1")
    wid = await worker_app.store.worker_register(WorkerRegisterParams("h", 1, ["chat-1"], ["record"]))
    (run,) = await worker_app.store.run_claim(RunClaimParams(wid, ["chat-1"], ["record"], 1, 30))
    assert run.id == first.id
    for idx, (role, text) in enumerate([("user", "Where is my order?"), ("assistant", "On its way.")]):
        message = json.dumps({"role": role, "content": text})
        append = ThreadAppendParams(run.id, run.fence, "chat-1", idx, message)
        assert await worker_app.store.thread_append(append)
    await worker_app.store.run_finish_many([RunFinishParams(run.id, run.fence, rw.RunState.SUCCEEDED,
                                                            result="1")])
    await worker_app.store.worker_deregister(wid)
    async with signed_in(server, token("alice"), "#/threads") as page:
        requests: list[str] = []
        page.on("request", lambda request: requests.append(_path(request)))
        await page.locator("#threads tr[data-thread='chat-1'] a").first.click()
        await page.locator("#thread-messages .message:has-text('On its way.')").wait_for()
        roles = await page.locator("#thread-messages .role").all_inner_texts()
        assert roles == ["user", "assistant"]
        await page.locator("#thread-events .event[data-kind='succeeded']").wait_for()
        assert await page.locator("#thread-cancel").is_disabled()  # nothing open
        # A run joins the thread: its events arrive on the open stream, its row follows.
        second = await worker_app.submit(apps.record, n=2, thread="chat-1", tenant="alice", delay_s=3600)
        await page.locator("#thread-events .event[data-kind='submitted']").nth(1).wait_for()
        await page.locator(f"#thread-runs tr[data-id='{second.id}']").wait_for()
        assert await _ids(page, "#thread-runs") == [second.id, first.id]
        tseqs = await page.locator("#thread-events .event").evaluate_all(
            "e => e.map(x => Number(x.dataset.tseq))")
        assert tseqs == list(range(1, len(tseqs) + 1))
        assert "(following live)" in await page.locator("#thread-follow").inner_text()
        await shot(page, "thread", backend)
        # Cancelling is a write through the cookie session: it carries X-Requested-With.
        await page.locator("#thread-cancel:enabled").wait_for()
        await page.click("#thread-cancel")
        await page.locator("#thread-events .event[data-kind='cancelled']").wait_for()
        await page.locator(f"#thread-runs tr[data-id='{second.id}'] .state-cancelled").wait_for()
        await page.locator("#thread-cancel:disabled").wait_for()
        assert (await second.refresh()).state is rw.RunState.CANCELLED
        streams = [p for p in requests if p.endswith("/threads/chat-1/events/stream")]
        assert streams, requests  # the page follows the thread's stream ...
        assert not [p for p in requests if p.endswith("/threads/chat-1/events")], "... and polls none"
    async with signed_in(server, OPERATOR_TOKEN, "#/threads") as page:  # a tenant's thread, by link
        await page.locator("#threads tr[data-thread='chat-1'][data-tenant='alice'] a").first.click()
        await page.wait_for_function("location.hash.includes('tenant=alice')")
        await page.locator("#thread-messages .message:has-text('Where is my order?')").wait_for()
        await page.locator("#thread-events .event[data-kind='cancelled']").wait_for()  # its stream, by tenant


def _path(request: Request) -> str:
    return httpx.URL(request.url).path


async def test_schedules_show_next_fires_and_pause_and_resume(server: str, worker_app: rw.App,
                                                              backend: str) -> None:
    async with httpx.AsyncClient(base_url=server, headers=as_(OPERATOR_TOKEN)) as http:
        made = await http.post("/schedules", json={"name": "nightly", "cron": "0 3 * * *", "task": "record",
                                                   "args": {"n": 1}})
        assert made.status_code == 201, made.text
        next_fire = made.json()["next_fire_at"]
        try:
            await _pause_and_resume(server, worker_app, next_fire, backend)
        finally:
            assert (await http.delete("/schedules/nightly")).status_code == 204  # the store is shared


async def _pause_and_resume(server: str, worker_app: rw.App, next_fire: float, backend: str) -> None:
    async with signed_in(server, token("schedules"), "#/schedules") as page:
        await page.locator("#schedules-note:has-text('operator token')").wait_for()
        assert await page.locator("#schedules tbody tr").count() == 0
    async with signed_in(server, OPERATOR_TOKEN, "#/schedules") as page:
        row = page.locator("#schedules tr[data-name='nightly']")
        await row.wait_for()
        text = await row.inner_text()
        assert "0 3 * * *" in text and utc(next_fire) in text and "active" in text
        await row.locator("button.pause").click()
        await page.locator("#schedules tr[data-name='nightly'][data-paused='true']").wait_for()
        assert await _nightly_paused(worker_app)
        await shot(page, "schedules", backend)
        await page.locator("#schedules tr[data-name='nightly'] button.resume").click()
        await page.locator("#schedules tr[data-name='nightly'][data-paused='false']").wait_for()
        assert not await _nightly_paused(worker_app)


async def _nightly_paused(app: rw.App) -> bool:
    (nightly,) = [s for s in await app.list_schedules() if s.name == "nightly"]
    return nightly.paused


async def test_dead_letters_are_retried_in_bulk(server: str, worker_app: rw.App, backend: str) -> None:
    dead = [await dead_letter(worker_app, key=f"d{i}", tenant="dead-a", error=f"broken {i}")
            for i in range(3)]
    theirs = await dead_letter(worker_app, key="b0", tenant="dead-b")
    async with signed_in(server, token("dead-a"), "#/dead") as page:
        for handle in dead:
            await page.locator(f"#dead tr[data-id='{handle.id}']").wait_for()
        assert await page.locator("#dead tbody tr").count() == 3  # dead-b's is not dead-a's
        assert "Boom: broken 0" in await page.locator(f"#dead tr[data-id='{dead[0].id}']").inner_text()
        assert await page.locator("#retry-selected").is_disabled()
        for handle in dead[:2]:
            await page.check(f"#dead input.pick[data-id='{handle.id}']")
        await shot(page, "dead", backend)
        await page.click("#retry-selected")
        await page.locator("#dead-result:has-text('re-queued 2')").wait_for()
        await page.locator(f"#dead tr[data-id='{dead[0].id}']").wait_for(state="detached")
        assert await _ids(page, "#dead") == [dead[2].id]
    states = [(await h.refresh()).state for h in dead]
    assert states == [rw.RunState.QUEUED, rw.RunState.QUEUED, rw.RunState.DEAD]
    assert (await theirs.refresh()).state is rw.RunState.DEAD


async def test_workers_and_the_fleet(server: str, worker_app: rw.App, backend: str) -> None:
    async with running_worker(worker_app, queues=["default", "mail"]) as worker:
        await wait_until(lambda: worker.id, "the worker registered")
        async with signed_in(server, OPERATOR_TOKEN, "#/workers") as page:
            row = page.locator(f"#workers tr[data-id='{worker.id}']")
            await row.wait_for()
            assert "default, mail" in await row.inner_text()
            await page.locator("#fleet tr[data-name='server-1']").wait_for()
            await shot(page, "workers", backend)


async def test_the_dashboard_answers_a_question(server: str, worker_app: rw.App, backend: str) -> None:
    async with running_worker(worker_app):
        handle = await worker_app.submit(apps.ask_deploy, target="staging", tenant="question")
        async with signed_in(server, token("question")) as page:
            row = f"#questions tr[data-run='{handle.id}']"
            await page.wait_for_selector(f"{row}:has-text('Deploy staging?')")
            await shot(page, "question", backend)
            await page.fill(f"{row} input.answer", "true")
            await page.click(f"{row} button.send")
            await page.wait_for_selector(row, state="detached")
        result = await handle.result(timeout_s=60)
    assert result["approved"] is True
    (question,) = await worker_app.questions(handle.id, pending=False)
    assert question.answered_by == "question"


# Every fetch the page makes, by path (test instrumentation: the dashboard exposes nothing).
COUNT_FETCHES = """
window.fetchedPaths = [];
const realFetch = window.fetch;
window.fetch = function (input, init) {
  window.fetchedPaths.push(new URL(typeof input === "string" ? input : input.url, location.href).pathname);
  return realFetch.apply(this, arguments);
};
"""
REFRESH_PATHS = {"/runs", "/dead", "/summary", "/threads", "/schedules", "/workers"}  # the pages' refreshes


async def _fetched(page: Page, path: str | None = None) -> list[str]:
    """The paths fetched since the last call (only `path`, if given), and forget them."""
    paths: list[str] = await page.evaluate("window.fetchedPaths.splice(0)")
    return [p for p in paths if path is None or p == path]


async def test_fast_navigation_leaves_one_refresh_timer_and_no_page_error(
        server: str, worker_app: rw.App, backend: str) -> None:
    """A page still loading when the next is shown starts no timer of its own: the runs
    list is held until the dead letters' page has loaded; then the dead letters' page
    refreshes once every 3 s (not twice), and a run page (no refresh) fetches no refresh
    and raises nothing. The page's clock is Playwright's: timers fire when the test says."""
    held = await worker_app.submit(apps.record, n=1, tenant="nav", queue="nav-nowhere")
    await dead_letter(worker_app, key="nav-dead", tenant="nav")
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            page.set_default_timeout(LONG)
            errors: list[str] = []
            page.on("pageerror", lambda error: errors.append(str(error)))
            await page.add_init_script(COUNT_FETCHES)
            await page.clock.install()
            await page.goto(server + "/")
            await page.fill("#token", token("nav"))
            await page.click("#login button")
            await page.locator("#view-overview").wait_for()
            await page.clock.pause_at(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=1))

            release, arrived = asyncio.Event(), asyncio.Event()

            async def hold(route: Route) -> None:
                arrived.set()
                await release.wait()
                await route.continue_()

            await page.route(lambda url: httpx.URL(url).path == "/runs", hold)
            await page.evaluate("location.hash = '#/runs'")
            await asyncio.wait_for(arrived.wait(), LONG / 1000)
            await page.evaluate("location.hash = '#/dead'")  # while the runs list is still loading
            await page.locator("#dead tbody tr").first.wait_for()  # shown: its timer is set
            release.set()
            await page.wait_for_function("document.getElementById('runs-count').textContent !== ''")
            await page.unroute_all()

            await _fetched(page)
            await page.clock.run_for(3000)
            assert await _fetched(page, "/dead") == ["/dead"], "one refresh timer, not one per page loaded"
            await page.clock.run_for(3000)
            assert await _fetched(page, "/dead") == ["/dead"]

            await page.evaluate(f"location.hash = '#/runs/{held.id}'")
            await page.locator("#run-state .state-queued").wait_for()
            await _fetched(page)
            await page.clock.run_for(7000)
            assert [p for p in await _fetched(page) if p in REFRESH_PATHS] == [], "no timer outlives its page"
            await page.evaluate("1")  # a round trip: an error the timers raised has been reported
            assert errors == []
        finally:
            await browser.close()


async def test_a_run_page_that_finds_no_run_disables_cancel_and_retry(
        server: str, worker_app: rw.App, backend: str) -> None:
    queued = await worker_app.submit(apps.record, n=1, tenant="gone", queue="gone-nowhere")
    missing = 987654321
    async with signed_in(server, token("gone"), f"#/runs/{missing}") as page:
        await page.locator("#flash:has-text('404')").wait_for()
        assert await page.locator("#run-cancel").is_disabled()
        assert await page.locator("#run-retry").is_disabled()
        # From a run that can be cancelled to one that is not found: nothing of it stays.
        await page.evaluate(f"location.hash = '#/runs/{queued.id}'")
        await page.locator("#run-state .state-queued").wait_for()
        assert await page.locator("#run-cancel").is_enabled()
        await page.evaluate(f"location.hash = '#/runs/{missing}'")
        await page.locator("#flash:has-text('404')").wait_for()
        assert await page.locator("#run-cancel").is_disabled()
        assert await page.locator("#run-retry").is_disabled()
        assert await page.locator("#run-fields dd").count() == 0, "the previous run's fields are gone"
        # Another tenant's run is not found either: its page offers no action on it.
        others = await worker_app.submit(apps.record, n=1, tenant="nav", queue="gone-nowhere")
        await page.evaluate(f"location.hash = '#/runs/{others.id}'")
        await page.locator("#flash:has-text('404')").wait_for()
        assert await page.locator("#run-cancel").is_disabled()
    assert (await queued.refresh()).state is rw.RunState.QUEUED
    assert (await others.refresh()).state is rw.RunState.QUEUED


async def test_the_run_page_numbers_attempts_as_the_api_and_the_cli_do(
        server: str, worker_app: rw.App, store_url: str, backend: str) -> None:
    """A run whose attempt 1 failed and was retried, whose attempt 2 was taken over (its
    worker deregistered: gone), and which waits to go on with attempt 2: the run page, the
    API and `runwright show` all say attempt 2, and list its claims as attempt 1 (fence 1)
    and attempt 2 (fence 2); once a third claim ends it, attempt 2 (fence 3) too."""
    queue = "attempts-nowhere"
    handle = await worker_app.submit(apps.doomed, tenant="attempts", queue=queue)
    store = worker_app.store
    wid = await store.worker_register(WorkerRegisterParams("h", 1, [queue], ["doomed"]))
    (first,) = await store.run_claim(RunClaimParams(wid, [queue], ["doomed"], 1, 30))
    await store.run_finish_many([RunFinishParams(first.id, first.fence, rw.RunState.QUEUED,
                                                 error=json.dumps({"type": "Boom", "message": "x"}))])
    (second,) = await store.run_claim(RunClaimParams(wid, [queue], ["doomed"], 1, 30))
    await store.worker_deregister(wid)
    assert handle.id in [r.id for r in await store.run_rescue_many(RunRescueParams())]
    claims = [(1, 1, "retrying"), (2, 2, "taken over")]
    await _agree(server, store_url, handle.id, 2, claims)

    wid = await store.worker_register(WorkerRegisterParams("h", 1, [queue], ["doomed"]))
    (third,) = await store.run_claim(RunClaimParams(wid, [queue], ["doomed"], 1, 30))
    assert (first.attempt, second.attempt, third.attempt) == (1, 2, 2)
    await store.run_finish_many([RunFinishParams(third.id, third.fence, rw.RunState.SUCCEEDED,
                                                 result="null")])
    await store.worker_deregister(wid)
    await _agree(server, store_url, handle.id, 2, [*claims, (2, 3, "succeeded")])


async def _agree(server: str, store_url: str, run_id: int, attempt: int,
                 claims: list[tuple[int, int, str]]) -> None:
    """The run page, the API and `runwright show` give the run's `attempt` and its claims
    as (attempt, fence, outcome)."""
    async with httpx.AsyncClient(base_url=server, headers=as_(token("attempts"))) as http:
        run = (await http.get(f"/runs/{run_id}")).json()
        listed = (await http.get(f"/runs/{run_id}/attempts")).json()
    assert run["attempt"] == attempt, "the API's run"
    assert [(a["attempt"], a["fence"], a["outcome"]) for a in listed] == claims, "the API's attempts"
    shown = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "runwright", "show", str(run_id),
                                                     "--json", "--url", store_url],
                                    cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    cli = json.loads(shown.stdout)
    assert cli["run"]["attempt"] == attempt, "runwright show's run"
    assert [(a["attempt"], a["fence"], a["outcome"]) for a in cli["attempts"]] == claims, "runwright show"
    async with signed_in(server, token("attempts"), f"#/runs/{run_id}") as page:
        await page.locator(f"#run-timeline .attempt[data-fence='{claims[-1][1]}']").wait_for()
        header = await page.locator("#run-fields dd[data-field=attempt]").inner_text()
        assert header == f"{attempt} of {run['max_attempts']}", "the run page's header"
        rows = await page.locator("#run-timeline .attempt").evaluate_all(
            "e => e.map(x => [Number(x.dataset.attempt), Number(x.dataset.fence), x.dataset.outcome])")
        assert [tuple(row) for row in rows] == claims, "the run page's attempts"
        labels = await page.locator("#run-timeline .attempt > span").all_inner_texts()
        named = [f"attempt {a} (fence {f})" for a, f, _ in claims]
        assert [label.split(" worker")[0] for label in labels] == named
