"""The dashboard in headless Chromium (Debian's, driven by Playwright) against a real
`runwright serve` with auth on: one test per page, each asserting what the page shows
and saving a screenshot as .artifacts/dashboard-<page>.png. The page that follows a run
live runs on every backend; the others read the same HTTP API, so SQLite suffices."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import httpx
import pytest
from playwright.async_api import Page, async_playwright

import runwright as rw
from runwright.store.params import (
    RunClaimParams,
    RunFinishParams,
    ThreadAppendParams,
    WorkerRegisterParams,
)

from ..api.test_api import OPERATOR_TOKEN, as_, server, worker_app  # noqa: F401 (fixtures)
from ..integration.conftest import running_worker
from ..process import apps
from ..process.harness import wait_until

pytestmark = pytest.mark.process
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
IDS = "rows => rows.map(r => Number(r.dataset.id))"
SQLITE = pytest.mark.parametrize("backend", ["sqlite"])
LONG = 30_000  # ms: generous, for a loaded machine


@asynccontextmanager
async def signed_in(base: str, token: str, path: str = "") -> AsyncIterator[Page]:
    """A headless Chromium page on the dashboard, signed in with `token` (once: the
    session cookie serves every page after), at `path` (a hash route, e.g. "#/runs")."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page(viewport={"width": 1400, "height": 900})
            await page.goto(base + "/" + path)
            await page.fill("#token", token)
            await page.click("#login button")
            await page.locator("#nav").wait_for()
            yield page
        finally:
            await browser.close()


async def shot(page: Page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"dashboard-{name}.png"
    await page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0
    return path


async def dead_letter(app: rw.App, key: str = "doomed", tenant: str = "alice",
                      error: str = "broken") -> rw.RunHandle:
    """A run that ended dead (its attempt made by hand, through the store; on a queue of
    its own, so that the claim takes it and no other run)."""
    handle = await app.submit(apps.record, n=9, key=key, tenant=tenant, queue=f"dead-{key}")
    wid = await app.store.worker_register(WorkerRegisterParams("h", 1, [f"dead-{key}"], ["record"]))
    (run,) = await app.store.run_claim(RunClaimParams(wid, [f"dead-{key}"], ["record"], 1, 30))
    assert run.id == handle.id
    await app.store.run_finish_many([RunFinishParams(
        run.id, run.fence, rw.RunState.DEAD, error=json.dumps({"type": "Boom", "message": error}))])
    await app.store.worker_deregister(wid)
    return handle


async def test_sign_in_once_sets_an_httponly_session(server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            context = await browser.new_context(viewport={"width": 1400, "height": 700})
            page = await context.new_page()
            await page.goto(server + "/#/runs")
            await page.locator("#view-signin").wait_for()
            await page.fill("#token", "not-a-token")
            await page.click("#login button")
            await page.locator("#flash:has-text(\"not one of this server's\")").wait_for()
            await shot(page, "signin")
            await page.fill("#token", "alice-token")
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


@SQLITE
async def test_overview_charts_the_last_hour(server: str, worker_app: rw.App) -> None:  # noqa: F811
    handles = [await worker_app.submit(apps.record, n=i, tenant="alice") for i in range(3)]
    async with running_worker(worker_app):
        for handle in handles:
            await handle.result(timeout_s=30)
    await worker_app.submit(apps.record, n=1, tenant="bob")  # another tenant's: not counted
    for i in range(2):
        await worker_app.submit(apps.record, n=i, tenant="alice")  # due, waiting: the depth
    async with signed_in(server, "alice-token") as page:
        await page.locator("#chart-throughput[data-ended='3']").wait_for(timeout=LONG)
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
        await shot(page, "overview")


@SQLITE
async def test_runs_filter_by_state_key_and_tenant(server: str, worker_app: rw.App) -> None:  # noqa: F811
    ours = [await worker_app.submit(apps.record, n=i, key=f"order-{i}", tenant="alice") for i in range(3)]
    doomed = await dead_letter(worker_app)
    theirs = await worker_app.submit(apps.record, n=5, key="order-1", tenant="bob")
    async with signed_in(server, "alice-token", "#/runs") as page:
        await page.locator(f"#runs tr[data-id='{ours[0].id}']").wait_for()
        assert await page.locator("#runs tbody tr").count() == 4  # bob's run is not alice's
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
        # A time range over submissions: none was submitted after the last one.
        await page.goto(f"{server}/#/runs?created_after={theirs.run.created_at + 1}")
        await page.locator(f"#runs tr[data-id='{ours[1].id}']").wait_for(state="detached")
        assert await _ids(page) == []
        assert await page.input_value("#run-filters input[name=created_after]") != ""
    async with signed_in(server, OPERATOR_TOKEN, "#/runs?key=order-1") as page:
        await page.locator(f"#runs tr[data-id='{theirs.id}']").wait_for()
        assert await _ids(page) == [theirs.id, ours[1].id]  # each tenant's run of that key
        await page.fill("#run-filters input[name=tenant]", "bob")
        await page.click("#run-filters button")
        await page.locator(f"#runs tr[data-id='{ours[1].id}']").wait_for(state="detached")
        assert await _ids(page) == [theirs.id]
        assert "bob" in await page.locator(f"#runs tr[data-id='{theirs.id}']").inner_text()
        await page.fill("#run-filters input[name=key]", "")
        await page.fill("#run-filters input[name=tenant]", "")
        await page.click("#run-filters button")
        await page.locator(f"#runs tr[data-id='{doomed.id}']").wait_for()
        await shot(page, "runs")


async def _ids(page: Page) -> list[int]:
    return list(await page.locator("#runs tbody tr").evaluate_all(IDS))


async def test_a_run_page_follows_live_and_shows_attempts_steps_and_children(
        server: str, worker_app: rw.App) -> None:  # noqa: F811
    fresh = await worker_app.submit(apps.record, n=3, tenant="alice")
    async with signed_in(server, "alice-token", f"#/runs/{fresh.id}") as page:
        await page.locator("#events .event[data-kind='submitted']").wait_for()
        assert await page.locator("#run-cancel").is_enabled()
        async with running_worker(worker_app):
            await page.locator("#events .event[data-kind='succeeded']").wait_for(timeout=LONG)
            kinds = await page.locator("#events .event").evaluate_all("e => e.map(x => x.dataset.kind)")
            assert kinds == ["submitted", "started", "succeeded"]
            await page.locator("#run-state .state-succeeded").wait_for()
            assert await page.locator("#run-fields dd[data-field=result]").inner_text() == "3"
            assert await page.locator("#run-cancel").is_disabled()
            # A parent: its journal's child entries, its children, each child's parent.
            parent = await worker_app.submit(apps.fan_out, count=2, hold_n=-1, tenant="alice")
            await parent.result(timeout_s=60)
            await page.goto(f"{server}/#/runs/{parent.id}")
            await page.locator("#run-children tbody tr").nth(1).wait_for()
            children = await page.locator("#run-children tbody tr").evaluate_all(IDS)
            assert len(children) == 2
            assert await page.locator("#run-steps tbody tr:has-text('submit:child')").count() == 2
            await page.locator("#run-timeline .attempt[data-outcome='parked']").first.wait_for()
            await shot(page, "run-children")
            await page.click(f"#run-children a[href='#/runs/{children[0]}']")
            await page.locator(f"#run-fields dd[data-field=parent] a[href='#/runs/{parent.id}']").wait_for()
            # A run that failed twice: two attempts, its traceback, and a retry.
            doomed = await worker_app.submit(apps.doomed, tenant="alice")
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
        assert await page.locator("#events .event[data-kind='trying']").count() == 2
        await shot(page, "run")
        await page.click("#run-retry")
        await page.locator("#run-state .state-queued").wait_for()
        assert (await doomed.refresh()).state is rw.RunState.QUEUED
        await page.click("#run-cancel")
        await page.locator("#run-state .state-cancelled").wait_for()


@SQLITE
async def test_threads_list_and_show_history(server: str, worker_app: rw.App) -> None:  # noqa: F811
    first = await worker_app.submit(apps.record, n=1, thread="chat-1", tenant="alice")
    wid = await worker_app.store.worker_register(WorkerRegisterParams("h", 1, ["default"], ["record"]))
    (run,) = await worker_app.store.run_claim(RunClaimParams(wid, ["default"], ["record"], 1, 30))
    for idx, (role, text) in enumerate([("user", "Where is my order?"), ("assistant", "On its way.")]):
        message = json.dumps({"role": role, "content": text})
        append = ThreadAppendParams(run.id, run.fence, "chat-1", idx, message)
        assert await worker_app.store.thread_append(append)
    await worker_app.store.run_finish_many([RunFinishParams(run.id, run.fence, rw.RunState.SUCCEEDED,
                                                            result="1")])
    second = await worker_app.submit(apps.record, n=2, thread="chat-1", tenant="alice")
    async with signed_in(server, "alice-token", "#/threads") as page:
        row = page.locator("#threads tr[data-thread='chat-1']")
        await row.wait_for()
        assert "2" in await row.locator("td").nth(1).inner_text()  # two runs
        await row.locator("a").first.click()
        await page.locator("#thread-messages .message:has-text('On its way.')").wait_for()
        roles = await page.locator("#thread-messages .role").all_inner_texts()
        assert roles == ["user", "assistant"]
        ids = await page.locator("#thread-runs tbody tr").evaluate_all(IDS)
        assert ids == [second.id, first.id]
        assert await page.locator("#thread-events .event").count() >= 4
        await shot(page, "threads")
    async with signed_in(server, OPERATOR_TOKEN, "#/threads") as page:  # a tenant's thread, by link
        await page.locator("#threads tr[data-thread='chat-1'] a").first.click()
        await page.wait_for_function("location.hash.includes('tenant=alice')")
        await page.locator("#thread-messages .message:has-text('Where is my order?')").wait_for()


@SQLITE
async def test_schedules_show_next_fires_and_pause_and_resume(server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with httpx.AsyncClient(base_url=server, headers=as_(OPERATOR_TOKEN)) as http:
        made = await http.post("/schedules", json={"name": "nightly", "cron": "0 3 * * *", "task": "record",
                                                   "args": {"n": 1}})
        assert made.status_code == 201, made.text
        next_fire = made.json()["next_fire_at"]
    async with signed_in(server, "alice-token", "#/schedules") as page:
        await page.locator("#schedules-note:has-text('operator token')").wait_for()
        assert await page.locator("#schedules tbody tr").count() == 0
    async with signed_in(server, OPERATOR_TOKEN, "#/schedules") as page:
        row = page.locator("#schedules tr[data-name='nightly']")
        await row.wait_for()
        text = await row.inner_text()
        shown = dt.datetime.fromtimestamp(next_fire, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
        assert "0 3 * * *" in text and shown in text and "active" in text
        await row.locator("button.pause").click()
        await page.locator("#schedules tr[data-name='nightly'][data-paused='true']").wait_for()
        assert [s.paused for s in await worker_app.list_schedules()] == [True]
        await shot(page, "schedules")
        await page.locator("#schedules tr[data-name='nightly'] button.resume").click()
        await page.locator("#schedules tr[data-name='nightly'][data-paused='false']").wait_for()
        assert [s.paused for s in await worker_app.list_schedules()] == [False]


@SQLITE
async def test_dead_letters_are_retried_in_bulk(server: str, worker_app: rw.App) -> None:  # noqa: F811
    dead = [await dead_letter(worker_app, key=f"d{i}", error=f"broken {i}") for i in range(3)]
    theirs = await dead_letter(worker_app, key="b0", tenant="bob")
    async with signed_in(server, "alice-token", "#/dead") as page:
        for handle in dead:
            await page.locator(f"#dead tr[data-id='{handle.id}']").wait_for()
        assert await page.locator("#dead tbody tr").count() == 3  # bob's is not alice's
        assert "Boom: broken 0" in await page.locator(f"#dead tr[data-id='{dead[0].id}']").inner_text()
        assert await page.locator("#retry-selected").is_disabled()
        for handle in dead[:2]:
            await page.check(f"#dead input.pick[data-id='{handle.id}']")
        await shot(page, "dead")
        await page.click("#retry-selected")
        await page.locator("#dead-result:has-text('re-queued 2')").wait_for()
        await page.locator(f"#dead tr[data-id='{dead[0].id}']").wait_for(state="detached")
        assert await _dead_ids(page) == [dead[2].id]
    states = [(await h.refresh()).state for h in dead]
    assert states == [rw.RunState.QUEUED, rw.RunState.QUEUED, rw.RunState.DEAD]
    assert (await theirs.refresh()).state is rw.RunState.DEAD


async def _dead_ids(page: Page) -> list[int]:
    return list(await page.locator("#dead tbody tr").evaluate_all(IDS))


@SQLITE
async def test_workers_and_the_fleet(server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with running_worker(worker_app, queues=["default", "mail"]) as worker:
        await wait_until(lambda: worker.id, "the worker registered")
        async with signed_in(server, OPERATOR_TOKEN, "#/workers") as page:
            row = page.locator(f"#workers tr[data-id='{worker.id}']")
            await row.wait_for(timeout=LONG)
            assert "default, mail" in await row.inner_text()
            await page.locator("#fleet tr[data-name='server-1']").wait_for(timeout=LONG)
            await shot(page, "workers")


async def test_the_dashboard_answers_a_question(server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with running_worker(worker_app):
        handle = await worker_app.submit(apps.ask_deploy, target="staging", tenant="alice")
        async with signed_in(server, "alice-token") as page:
            row = f"#questions tr[data-run='{handle.id}']"
            await page.wait_for_selector(f"{row}:has-text('Deploy staging?')", timeout=LONG)
            await shot(page, "question")
            await page.fill(f"{row} input.answer", "true")
            await page.click(f"{row} button.send")
            await page.wait_for_selector(row, state="detached", timeout=LONG)
        result = await handle.result(timeout_s=30)
    assert result["approved"] is True
    (question,) = await worker_app.questions(handle.id, pending=False)
    assert question.answered_by == "alice"
