"""The dashboard in headless Chromium (Debian's, driven by Playwright) against a real
`runwright serve` with auth on, on every backend (one server per backend for the module,
see conftest): one test per page, each asserting what the page shows. Screenshots of
one backend's run are saved as .artifacts/dashboard-<page>.png (the pages are the same
on every backend: one set is enough)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import httpx
import pytest
from playwright.async_api import Page, Request, Route, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeout

import runwright as rw
from runwright.store._params import (
    RunCancelParams,
    RunClaimParams,
    RunFinishParams,
    RunInsertParams,
    RunRescueParams,
    StepRecordParams,
    ThreadAppendParams,
    WorkerRegisterParams,
)

from ..agents.scripted_openai import Reply, ScriptedOpenAI, call, last_role, tool_results
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
    """Save the page as .artifacts/dashboard-<name>.png, from SCREENSHOTS_OF's run only, when
    RUNWRIGHT_SCREENSHOTS=1 asks for them: the committed ones are taken on purpose, and an
    ordinary run of the suite leaves the checkout as it found it."""
    if backend != SCREENSHOTS_OF or os.environ.get("RUNWRIGHT_SCREENSHOTS") != "1":
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
    # Due by the store's clock, which the submitter's estimate of it may run a moment ahead
    # of (seen on Redis): claim until it is.
    async with asyncio.timeout(30):
        while not (runs := await app.store.run_claim(RunClaimParams(wid, [queue], ["record"], 1, 30))):
            await asyncio.sleep(0.01)
    (run,) = runs
    assert run.id == handle.id
    await app.store.run_finish_many([RunFinishParams(
        run.id, run.fence, rw.RunState.DEAD, error=json.dumps({"type": "Boom", "message": error}))])
    await app.store.worker_deregister(wid)
    return handle


async def test_the_overview_shows_the_operator_each_limits_keys_in_use(server: str, worker_app: rw.App,
                                                                      backend: str) -> None:
    """The operator's overview lists each key of a concurrency limit with runs under it:
    running, max, queued, and a link to the runs that wait for it when the key is full, and
    the weights set on fair keys. A tenant's overview has neither table (a key names other
    tenants)."""
    queue, task = f"limits-{backend}", "limited_by_hand"
    limits = json.dumps([["crm", "acme-dash", 1]])
    inserted = await worker_app.store.run_insert_many([RunInsertParams(
        key=f"lim-dash-{i}", task=task, args="{}", queue=queue, limits=limits) for i in range(3)])
    wid = await worker_app.store.worker_register(WorkerRegisterParams("h", 1, [queue], [task]))
    claim = RunClaimParams(wid, [queue], [task], 5, 600, limited=[task])
    async with asyncio.timeout(30):  # due by the store's clock: claim until it is
        while not (runs := await worker_app.store.run_claim(claim)):
            await asyncio.sleep(0.01)
    await worker_app.set_weight("dash-tenants:acme", 3)
    try:
        async with signed_in(server, OPERATOR_TOKEN, "#/overview") as page:
            row = page.locator("#limits tr[data-limit='crm'][data-key='acme-dash']")
            await row.wait_for()
            assert [await cell.inner_text() for cell in await row.locator("td").all()] == [
                "crm", "acme-dash", "1", "1", "2", "waiting"]
            assert await row.get_attribute("data-full") == "true"
            weight = page.locator("#weights tr[data-target='dash-tenants:acme']")
            await weight.wait_for()  # set before the page was opened
            assert [await cell.inner_text() for cell in await weight.locator("td").all()] == [
                "dash-tenants:acme", "3"]
            await row.get_by_role("link", name="waiting").click()
            await page.wait_for_url(re.compile(r"#/runs\?state=queued&waiting=limit"))
        async with signed_in(server, token("limits"), "#/overview") as page:
            await page.locator("#tiles .tile").first.wait_for()
            assert not await page.locator("#limits").is_visible()
            assert not await page.locator("#weights").is_visible()
    finally:
        await worker_app.set_weight("dash-tenants:acme", None)
        await worker_app.store.run_finish_many([RunFinishParams(run.id, run.fence, rw.RunState.SUCCEEDED,
                                                                result="null", limited=True) for run in runs])
        for run in inserted[1:]:
            await worker_app.store.run_cancel(RunCancelParams(run.id))
        await worker_app.store.worker_deregister(wid)


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
            assert await page.locator("#whoami").inner_text() == (
                "signed in as tenant alice: runs of other tenants and runs submitted with no tenant (from "
                "Python or the CLI) are hidden \u2014 sign in with an operator token to see them")
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
            # The family as a tree: the parent (this page's run) with its children under it ...
            await page.locator(f"#run-tree li.self[data-id='{parent.id}'] > ul > li").nth(1).wait_for()
            assert await page.locator(f"#run-tree li.self[data-id='{parent.id}'] > ul > li").evaluate_all(
                IDS) == children
            await page.click(f"#run-children a[href='#/runs/{children[0]}']")
            await page.locator(f"#run-fields dd[data-field=parent] a[href='#/runs/{parent.id}']").wait_for()
            # ... and from a child: its parent above it, itself marked among its siblings.
            above = f"#run-tree li[data-id='{parent.id}']"
            await page.locator(f"{above} > ul > li.self[data-id='{children[0]}']").wait_for()
            await page.locator(f"{above} > ul > li").nth(1).wait_for()  # the tree is drawn a level at a time
            assert await page.locator(f"{above} > ul > li").evaluate_all(IDS) == children
            assert await page.locator(f"{above} > .node a").get_attribute("href") == f"#/runs/{parent.id}"
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


async def test_a_run_page_pauses_and_resumes_a_run(server: str, worker_app: rw.App, ledger: Path,
                                                   caplog: pytest.LogCaptureFixture) -> None:
    # Queued: held at once (not claimed, not woken), then due again at its submitted time.
    later = await worker_app.submit(apps.record, n=1, tenant="pause", delay_s=3600)
    async with signed_in(server, token("pause"), f"#/runs/{later.id}") as page:
        await page.locator("#events .event[data-kind='submitted']").wait_for()
        assert await page.locator("#run-pause").is_enabled()
        assert await page.locator("#run-resume").is_disabled()
        await page.click("#run-pause")
        await page.locator("#events .event[data-kind='paused']").wait_for()
        await page.locator("#run-resume:enabled").wait_for()
        assert await page.locator("#run-pause").is_disabled()
        assert "paused" in await page.locator("#run-waiting").inner_text()
        assert (await later.refresh()).paused
        await page.click("#run-resume")
        await page.locator("#events .event[data-kind='resumed']").wait_for()
        await page.locator("#run-pause:enabled").wait_for()
        resumed = await later.refresh()
        assert not resumed.paused and resumed.run_at == later.run.run_at
    # Running: asked to pause, it stops at its next step; resumed, it goes on from there.
    gated = await worker_app.submit(apps.narrated_steps, steps=2, gates=[0], tenant="pause")
    # The ledger is the module's, for every backend: a gate opened for a run of this id
    # in another backend's store is closed again, and only a new arrival at it counts.
    apps.gate_file(ledger, gated.id, 0).unlink(missing_ok=True)
    mine = ledger / f"{os.getpid()}.log"
    at_gate = lambda: mine.read_text().count(f"gate-0 {gated.id} ") if mine.exists() else 0  # noqa: E731
    before = at_gate()
    with caplog.at_level(logging.INFO, logger="runwright"):
        async with running_worker(worker_app):
            await wait_until(lambda: at_gate() > before, "step 0 waits at its gate")
            async with signed_in(server, token("pause"), f"#/runs/{gated.id}") as page:
                await page.locator("#run-state .state-running").wait_for()
                await page.click("#run-pause")
                await page.locator("#events .event[data-kind='pause_requested']").wait_for()
                await page.locator("#run-resume:enabled").wait_for()
                await wait_until(lambda: any("pause requested" in r.getMessage() for r in caplog.records),
                                 "the worker heard the request")
                apps.gate_file(ledger, gated.id, 0).touch()
                await page.locator("#events .event[data-kind='paused']").wait_for()
                await page.locator("#run-state .state-queued").wait_for()
                assert (await gated.refresh()).paused
                await page.click("#run-resume")
                await page.locator("#run-state .state-succeeded").wait_for()
                kinds = await page.locator("#events .event").evaluate_all("e => e.map(x => x.dataset.kind)")
                assert kinds.count("started") == 2 and kinds[-1] == "succeeded"
                assert await page.locator("#run-pause").is_disabled()
                assert await page.locator("#run-resume").is_disabled()
async def test_a_step_of_the_run_page_forks_the_run_from_there(
        server: str, worker_app: rw.App, backend: str) -> None:
    original = await worker_app.submit(apps.steps_with_ledger, steps=3, tenant="fork")
    async with running_worker(worker_app):
        assert await original.result(timeout_s=60) == 3
    async with signed_in(server, token("fork"), f"#/runs/{original.id}") as page:
        rows = page.locator("#run-steps tbody tr")
        await rows.nth(2).wait_for()
        assert await page.locator("#run-fields dd[data-field=forks]").count() == 0
        enabled = await rows.locator("button.fork-step").evaluate_all("b => b.map(x => !x.disabled)")
        assert enabled == [True] * 3
        await page.click("#run-steps tbody tr[data-position='1'] button.fork-step")
        # The page moves to the fork: it names its original, and holds step 0 alone, copied.
        back = page.locator(f"#run-fields dd[data-field='forked from'] a[href='#/runs/{original.id}']")
        await back.wait_for()
        fork_id = int(page.url.rsplit("/", 1)[1])
        assert fork_id != original.id and await page.locator("#run-id").inner_text() == str(fork_id)
        (fork,) = await worker_app.tenant("fork").forks(original.id)
        assert fork.id == fork_id and fork.forked_from == original.id
        assert [s.name for s in await worker_app.steps(fork_id)] == ["step-0"]
        first = "#run-steps tbody tr[data-position='0']"
        await page.locator(f"{first}:has-text('copied from run {original.id}')").wait_for()
        async with running_worker(worker_app):
            await page.locator("#run-state .state-succeeded").wait_for()
        await rows.nth(2).wait_for()
        assert (await worker_app.get(fork_id)).run.result == "3"
        assert await rows.locator("text=copied from run").count() == 1  # step-1 and step-2 are its own
        assert await page.locator("#run-timeline .attempt").count() == 1
        await shot(page, "run-fork", backend)
        await back.click()
        await page.locator(f"#run-fields dd[data-field=forks] a[href='#/runs/{fork_id}']").wait_for()


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
    async def claimed() -> list:
        return await worker_app.store.run_claim(RunClaimParams(wid, ["chat-1"], ["record"], 1, 30))

    # Until it is due by the store's clock (on Redis, the server's: the submitter's estimate
    # of it may run a few ms ahead).
    (run,) = await wait_until(claimed, "the thread's first run is claimed")
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
        # Said once, in one line, where the rows would be (a note above repeated it).
        await page.locator("#schedules caption.empty:has-text('operator token')").wait_for()
        assert await page.locator("#schedules tbody tr").count() == 0
        assert await page.locator("#schedules-note").inner_text() == ""
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


async def test_a_run_page_shows_its_signals_and_published_state(server: str, worker_app: rw.App,
                                                                 backend: str) -> None:
    handle = await worker_app.submit(apps.await_payment, order="o-7", tenant="signals")
    async with running_worker(worker_app):
        await wait_until(lambda: _waits_on_signal(worker_app, handle.id), "the run waits on its signal")
        async with signed_in(server, token("signals")) as page:
            await page.goto(f"{server}/#/runs/{handle.id}")
            await page.wait_for_selector("#run-state-published td:has-text('awaiting payment')")
            await page.wait_for_selector("#run-signals caption.empty")  # none sent yet: says how
            await worker_app.tenant("signals").signal(handle.id, "payment", {"amount": 12}, by="ops")
            await handle.result(timeout_s=60)
            await page.reload()
            row = "#run-signals tr[data-seq='1']"
            await page.wait_for_selector(f"{row}:has-text('payment')")
            shown = await page.inner_text(row)
            assert "by step #" in shown and "ops" in shown and '"amount":12' in shown
            await page.wait_for_selector("#run-state-published td:has-text('charging')")
            await shot(page, "run-signals", backend)


async def _waits_on_signal(app: rw.App, run_id: int) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and run.waiting == rw.WaitReason.SIGNAL


# Every fetch the page makes, by path (test instrumentation: the dashboard exposes nothing).
COUNT_FETCHES = """
window.fetchedPaths = [];
const realFetch = window.fetch;
window.fetch = function (input, init) {
  // A run page reads the run's forks from GET /runs?forked_from= as it reloads on the
  // run's events: named apart, as it is no list's refresh.
  const url = new URL(typeof input === "string" ? input : input.url, location.href);
  window.fetchedPaths.push(url.searchParams.has("forked_from") ? `${url.pathname} (forks)` : url.pathname);
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


# -- an agent run's conversation ---------------------------------------------------------

AGENT_QUEUE = "agent-ui"  # the agent's runs, taken by this test's worker only


def _agent_script(body: dict, index: int) -> Reply:
    """First run: two tool calls, then an answer from their results; a thanks (the
    thread's second run) is answered at once."""
    if last_role(body) == "user":
        if "thanks" in body["messages"][-1]["content"]:
            return Reply(content="You're welcome.", usage=(300, 4))
        return Reply(tool_calls=[call("add", {"a": 2, "b": 3}, "c1"), call("shout", {"text": "hi"}, "c2")],
                     usage=(100, 20))
    results = tool_results(body)
    return Reply(content=f"2 + 3 = {results['c1']}, and {results['c2']}!", usage=(200, 10))


def _agent(app: rw.App, base_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent with two tools on the scripted server, registered in `app` (its worker runs it)."""
    monkeypatch.setenv("OPENAI_BASE_URL", base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "test-key")

    @app.tool
    async def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @app.tool
    def shout(text: str) -> str:
        """Upper-case a text."""
        return text.upper()

    app.agent("helper", model="openai:gpt-4o-mini", tools=[add, shout], instructions="Be brief.",
              retries=0)


async def test_an_agent_run_shows_its_conversation_as_cards_with_usage_and_totals(
        server: str, worker_app: rw.App, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with ScriptedOpenAI(_agent_script) as model_server:
        _agent(worker_app, model_server.base_url, monkeypatch)
        async with running_worker(worker_app, queues=[AGENT_QUEUE]):
            first = await worker_app.submit("helper", input="What is 2 + 3? And shout hi.", tenant="agent",
                                            thread="support-1", queue=AGENT_QUEUE)
            assert await first.result(timeout_s=60) == "2 + 3 = 5, and HI!"
            second = await worker_app.submit("helper", input="thanks!", tenant="agent", thread="support-1",
                                             queue=AGENT_QUEUE)
            assert await second.result(timeout_s=60) == "You're welcome."
    async with signed_in(server, token("agent"), f"#/runs/{first.id}") as page:
        cards = page.locator("#conv-cards > .card")
        await page.locator("#conv-cards .card.final").wait_for()
        kinds = await cards.evaluate_all(
            "cs => cs.map(c => c.classList.contains('msg-user') ? 'user' :"
            " c.classList.contains('msg-assistant') ? 'assistant' :"
            " c.classList.contains('tool-result') ? 'tool:' + c.dataset.tool : c.className)")
        assert kinds == ["user", "assistant", "tool:add", "tool:shout", "assistant"]
        assert "What is 2 + 3? And shout hi." in await cards.nth(0).inner_text()
        # The first model call: its model, tokens, cost and latency, and the tool calls it made.
        ask = cards.nth(1)
        assert await ask.get_attribute("data-model") == "openai:gpt-4o-mini"
        meta = await ask.locator(".meta").inner_text()
        assert "openai:gpt-4o-mini" in meta and "100 in / 20 out tokens" in meta
        assert f"${(100 * 0.15 + 20 * 0.60) / 1e6:.6f}" in meta and meta.rstrip().endswith(("ms", " s"))
        calls = ask.locator(".card.tool-call")
        assert await calls.evaluate_all("cs => cs.map(c => c.dataset.tool)") == ["add", "shout"]
        assert json.loads(await calls.nth(0).locator("pre.json").inner_text()) == {"a": 2, "b": 3}
        assert await cards.nth(2).locator("pre.json").inner_text() == "5"
        assert "c1" in await cards.nth(2).inner_text()  # the result names the call it answers
        assert await cards.nth(3).locator("pre.json").inner_text() == "HI"
        assert "2 + 3 = 5, and HI!" in await cards.nth(4).inner_text()
        # Totals: this run's two model calls; the thread's three (both runs).
        run_total = page.locator("#conv-totals .total[data-scope=run]")
        assert await run_total.get_attribute("data-calls") == "2"
        assert await run_total.get_attribute("data-tokens") == str(100 + 20 + 200 + 10)
        thread_total = page.locator("#conv-totals .total[data-scope=thread][data-calls='3']")
        await thread_total.wait_for()
        assert await thread_total.get_attribute("data-tokens") == str(330 + 304)
        assert "2 model calls" in await run_total.inner_text()
        await _fits(page, 1280)
        await shot(page, "agent-conversation", backend)
        await _fits(page, 390)
        await shot(page, "agent-conversation-phone", backend)
        await page.set_viewport_size({"width": 1400, "height": 900})
        # The thread's second run: what it started from folded, its one call, the thread's totals.
        await page.goto(f"{server}/#/runs/{second.id}")
        history = page.locator("#conv-cards .card.history")
        await history.wait_for()
        assert await history.get_attribute("data-messages") == "5"  # user, call, 2 results, answer
        assert "5 earlier messages of thread support-1" in await history.inner_text()
        await page.locator("#conv-totals .total[data-scope=run][data-calls='1']").wait_for()
        await page.locator("#conv-totals .total[data-scope=thread][data-calls='3']").wait_for()
        assert "You're welcome." in await page.locator("#conv-cards .card.final").inner_text()
        # The thread's page: its history as cards, and its totals from its log.
        await page.goto(f"{server}/#/threads/support-1")
        await page.locator("#thread-totals .total[data-calls='3']").wait_for()
        roles = await page.locator("#thread-messages > .card").evaluate_all(
            "cs => cs.map(c => c.dataset.role || 'tool')")
        assert roles == ["user", "assistant", "tool", "tool", "assistant", "user", "assistant"]
        assert await page.locator("#thread-messages .card.tool-call[data-tool=add]").count() == 1


async def _fits(page: Page, width: int) -> None:
    """At `width` px wide, the page is no wider than the window: whatever is wide (a table,
    a JSON value, a chart) scrolls or wraps in its own box."""
    await page.set_viewport_size({"width": width, "height": 900})
    try:
        await page.wait_for_function("document.documentElement.scrollWidth <= window.innerWidth",
                                     timeout=5000)
    except PlaywrightTimeout:
        wider = await page.evaluate(WIDER_THAN_THE_WINDOW)
        raise AssertionError(f"at {width} px the page is wider than the window; what sticks out: "
                             f"{wider}") from None
    measured = await page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert measured <= [width, width], (page.url, measured, await page.evaluate(WIDER_THAN_THE_WINDOW))


# The elements whose right edge is past the window's, outermost first (what a failure names).
WIDER_THAN_THE_WINDOW = """
[...document.querySelectorAll("body *")].filter(e => e.getBoundingClientRect().right > window.innerWidth + 0.5
    && e.offsetParent !== null).slice(0, 8).map(e => `${e.tagName.toLowerCase()}#${e.id}.${e.className} ` +
    `${Math.round(e.getBoundingClientRect().right)}px`)
"""


# -- a run's steps on its time axis --------------------------------------------------------

async def test_a_runs_steps_on_a_timeline_mark_its_retry_and_its_takeover(
        server: str, worker_app: rw.App, backend: str) -> None:
    """Claim 1 journals a step and fails (a retry); claim 2 journals one and its worker is
    lost (a takeover); claim 3 journals the last and succeeds. Each step is a bar of its
    claim's attempt, and the retry and the takeover are marked where the next claim began."""
    queue = "timeline-nowhere"
    handle = await worker_app.submit(apps.doomed, tenant="timeline", queue=queue)
    store = worker_app.store

    async def claim() -> tuple[int, int]:
        wid = await store.worker_register(WorkerRegisterParams("h", 1, [queue], ["doomed"]))
        (run,) = await store.run_claim(RunClaimParams(wid, [queue], ["doomed"], 1, 30))
        return wid, run.fence

    async def step(fence: int, position: int, name: str) -> None:
        await asyncio.sleep(0.15)  # the step's work: a bar of some width
        assert await store.step_record_many([StepRecordParams(handle.id, fence, position, name, "done",
                                                              result=json.dumps(name))]) == [True]

    await asyncio.sleep(0.1)
    wid, fence = await claim()
    await step(fence, 0, "fetch")
    await asyncio.sleep(0.1)
    await store.run_finish_many([RunFinishParams(handle.id, fence, rw.RunState.QUEUED,
                                                 error=json.dumps({"type": "Boom", "message": "flaky"}))])
    await store.worker_deregister(wid)
    wid, fence = await claim()
    await step(fence, 1, "parse")
    await asyncio.sleep(0.1)
    await store.worker_deregister(wid)  # lost mid-run: taken over
    assert handle.id in [r.id for r in await store.run_rescue_many(RunRescueParams())]
    wid, fence = await claim()
    await step(fence, 2, "save")
    await store.run_finish_many([RunFinishParams(handle.id, fence, rw.RunState.SUCCEEDED, result="null")])
    await store.worker_deregister(wid)
    async with signed_in(server, token("timeline"), f"#/runs/{handle.id}") as page:
        rows = page.locator("#run-gantt .g-row.step")
        await rows.nth(2).wait_for()
        seen = await rows.evaluate_all(
            "rs => rs.map(r => [r.dataset.name, Number(r.dataset.attempt), Number(r.dataset.fence)])")
        assert [tuple(r) for r in seen] == [("fetch", 1, 1), ("parse", 2, 2), ("save", 2, 3)]
        flags = page.locator("#run-gantt .g-flag")
        assert await flags.evaluate_all("fs => fs.map(f => [f.dataset.kind, f.textContent])") == [
            ["retry", "retry → attempt 2"], ["takeover", "takeover: recovered → attempt 2"]]
        # Each bar lies within its claim: after the boundary that began it, in time order.
        lefts = await page.locator("#run-gantt .g-row.step .g-bar").evaluate_all(
            "bs => bs.map(b => [parseFloat(b.style.left), parseFloat(b.style.width)])")
        retry_at, takeover_at = await flags.evaluate_all("fs => fs.map(f => parseFloat(f.style.left))")
        assert lefts[0][0] + lefts[0][1] <= retry_at <= lefts[1][0]
        assert lefts[1][0] + lefts[1][1] <= takeover_at <= lefts[2][0]
        assert all(width > 1 for _, width in lefts), lefts  # 150 ms of a run of about a second
        # The lines run across every row: one per boundary in each lane.
        assert await page.locator("#run-gantt .g-row.step .g-line.retry").count() == 3
        assert await page.locator("#run-gantt .g-row.step .g-line.takeover").count() == 3
        await shot(page, "run-timeline", backend)


# -- charts in ISO UTC; what an empty page says -------------------------------------------

async def test_charts_read_iso_utc_and_empty_pages_say_what_would_be_there(
        server: str, backend: str) -> None:
    """A tenant with no run at all: each chart says so (no made-up y axis), its time axis
    and legend are ISO UTC; each empty table says what would be there and how to get some."""
    async with signed_in(server, token("empty")) as page:
        for name in ("throughput", "wait", "duration", "depth"):
            await page.locator(f"#chart-{name}[data-empty='true']").wait_for()
        empty = await page.locator("#chart-throughput .chart-empty").inner_text()
        assert empty == "No runs ended in the last hour."
        ticks = await page.evaluate("rw.charts.throughput.axes[0]._values")
        assert ticks and all(re.fullmatch(r"\d\d-\d\d \d\d:\d\dZ", t) for t in ticks), ticks
        for name in ("throughput", "wait", "duration", "depth"):
            values = await page.evaluate(f"rw.charts.{name}.axes[1]._values")
            assert len(set(values)) == len(values), (name, values)  # no 0.001 over and over
        # Each time tick's label is drawn whole: the last one, centred on its tick near the
        # axis' end, was cut at the chart's right edge.
        overflow = await page.evaluate("""() => Object.values(rw.charts).map(u => {
            const axis = u.axes[0], ratio = devicePixelRatio;
            u.ctx.font = axis.font[0];
            const [value, label] = [axis._splits.at(-1), axis._values.at(-1)];
            const x = u.bbox.left / ratio + u.valToPos(value, "x");
            return x + u.ctx.measureText(label).width / ratio / 2 - u.width; })""")
        assert all(px <= 0 for px in overflow), overflow
        # Nothing is due, so nothing has waited: not "0 ms".
        assert await page.locator("#tiles .tile[data-name='oldest due'] b").inner_text() == "–"
        # The legend's time, under the cursor, is a full ISO time in UTC (the browser's zone is not).
        box = await page.locator("#chart-throughput .u-over").bounding_box()
        assert box is not None
        await page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
        legend = page.locator("#chart-throughput .u-legend .u-series").first.locator(".u-value")
        await page.wait_for_function(
            "() => /^\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ$/.test(document.querySelector("
            "'#chart-throughput .u-legend .u-series .u-value').textContent)")
        assert (await legend.inner_text()).endswith("Z")
        assert "No run waits on a person" in await page.locator("#questions caption.empty").inner_text()
        assert "No queue has due runs" in await page.locator("#queues caption.empty").inner_text()
        await shot(page, "overview-empty", backend)
        expected = {
            "#/dead": ("#dead", "No dead runs. A run lands here after its last attempt fails; runwright dead "
                                "lists them too"),
            "#/runs": ("#runs", "No runs yet. Submit one with POST /runs"),
            "#/runs?state=dead&task=nothing": ("#runs", "No run matches these filters."),
            "#/threads": ("#threads", "No threads yet. A thread comes to exist with its first run"),
            "#/schedules": ("#schedules", "Schedules are the deployment's, so the operator's"),
        }
        for route, (table, text) in expected.items():
            await page.goto(f"{server}/{route}")
            caption = page.locator(f"{table} caption.empty")
            await page.wait_for_function(f"(document.querySelector('{table} caption.empty') || {{}})"
                                         f".textContent?.startsWith({json.dumps(text)})")
            assert await page.locator(f"{table} tbody tr").count() == 0
            assert (await caption.inner_text()).startswith(text)
            if route == "#/dead":
                assert await caption.locator("code").inner_text() == "runwright dead"
                await shot(page, "dead-empty", backend)


# -- searching runs, what they wait for ----------------------------------------------------

async def test_runs_are_searched_by_error_text_task_thread_and_tenant_and_show_what_they_wait_for(
        server: str, worker_app: rw.App, backend: str) -> None:
    reset = await dead_letter(worker_app, key="s-reset", tenant="search", error="connection reset by peer")
    full = await dead_letter(worker_app, key="s-full", tenant="search", error="disk full")
    on_thread = await worker_app.submit(apps.record, n=1, tenant="search", thread="t-search", delay_s=3600)
    other_task = await worker_app.submit(apps.nap, seconds=1, tenant="search", delay_s=3600)
    theirs = await dead_letter(worker_app, key="s-theirs", tenant="phone", error="connection reset by peer")
    async with signed_in(server, token("search"), "#/runs") as page:
        await page.locator(f"#runs tr[data-id='{reset.id}']").wait_for()
        assert await _ids(page) == [other_task.id, on_thread.id, full.id, reset.id]

        async def search(**fields: str) -> list[int]:
            for name in ("task", "thread", "error"):
                await page.fill(f"#run-filters input[name={name}]", fields.get(name, ""))
            before = await page.evaluate("location.hash")
            await page.click("#run-filters button")
            await page.wait_for_function(f"location.hash !== {json.dumps(before)}")
            await page.wait_for_function(
                "document.getElementById('runs-count').textContent === "
                "document.querySelectorAll('#runs tbody tr').length + ' shown'")
            await page.wait_for_timeout(300)  # the answer to this hash, not the last one's
            return await _ids(page)

        assert await search(error="RESET BY") == [reset.id]  # any case; never another tenant's
        assert "error=RESET+BY" in await page.evaluate("location.hash")
        assert await page.input_value("#run-filters input[name=error]") == "RESET BY"
        assert await search(error="100%") == []
        assert "No run matches these filters" in await page.locator("#runs caption.empty").inner_text()
        assert await search(task="nap") == [other_task.id]
        assert await search(thread="t-search") == [on_thread.id]
        assert await search(task="record", error="disk") == [full.id]
    async with signed_in(server, OPERATOR_TOKEN, "#/runs?error=reset%20by%20peer") as page:
        await page.locator(f"#runs tr[data-id='{theirs.id}']").wait_for()
        assert await _ids(page) == [theirs.id, reset.id]
        await page.fill("#run-filters input[name=tenant]", "phone")
        await page.click("#run-filters button")
        await page.locator(f"#runs tr[data-id='{reset.id}']").wait_for(state="detached")
        assert await _ids(page) == [theirs.id]
    await _what_runs_wait_for(server, worker_app, backend)


async def _what_runs_wait_for(server: str, worker_app: rw.App, backend: str) -> None:
    """Runs parked by a real worker say what they wait for, as the server judges it: a
    badge (the detail for a tooltip) in the list and on the run's page, and the filter
    asks the server for it."""
    sleeping = await worker_app.submit(apps.nap, seconds=3600, tenant="search", queue="waits")
    asking = await worker_app.submit(apps.ask_deploy, target="staging", tenant="search", queue="waits")
    async with running_worker(worker_app, queues=["waits"]):
        for handle in (sleeping, asking):
            await wait_until(lambda h=handle: _parked(h), f"run {handle.id} parked")
    wake = (await sleeping.refresh()).run_at
    async with signed_in(server, token("search"), "#/runs") as page:
        asked: list[str] = []
        page.on("request", lambda request: asked.append(request.url))
        await page.goto(f"{server}/#/runs?state=queued")
        badge = page.locator(f"#runs tr[data-id='{sleeping.id}'] .waiting")
        await badge.wait_for()
        assert await badge.inner_text() == f"sleeping until {utc(wake)}"
        assert (await badge.get_attribute("title") or "").startswith("it sleeps (ctx.sleep) until ")
        asks = page.locator(f"#runs tr[data-id='{asking.id}'] .waiting")
        assert await asks.inner_text() == "waiting: answer"
        await shot(page, "runs-waiting", backend)
        # Every reason can be filtered by (signal was missing), in the API's order.
        offered = await page.locator("#run-filters select[name=waiting] option").evaluate_all(
            "options => options.map(o => o.value)")
        assert offered == ["", *(reason.value for reason in rw.WaitReason)]
        await page.select_option("#run-filters select[name=waiting]", "answer")
        await page.click("#run-filters button")
        await page.locator(f"#runs tr[data-id='{sleeping.id}']").wait_for(state="detached")
        assert await _ids(page) == [asking.id]
        assert any("waiting=answer" in url for url in asked)  # the server is asked to filter
        await page.goto(f"{server}/#/runs/{asking.id}")
        await page.locator("#run-waiting .waiting[data-reason=answer]").wait_for()
        assert (await page.locator("#run-waiting-detail").inner_text()).startswith(
            "it waits for a person's answer")
        assert "waiting: answer" in await page.locator("#run-fields dd[data-field=waiting]").inner_text()


async def _parked(handle: rw.RunHandle) -> bool:
    run = await handle.refresh()
    return run.state is rw.RunState.QUEUED and run.started_at is not None


# -- a laptop and a phone ------------------------------------------------------------------

async def test_every_page_fits_a_laptop_and_a_phone(server: str, worker_app: rw.App, backend: str) -> None:
    """No page is wider than the window, at 1280 px and at a phone's 390 px: wide tables
    scroll in their own box, long JSON and errors wrap in theirs, dates stay on one line."""
    wide = {"payload": "x" * 300, "nested": {"list": list(range(60)), "words": "a long value " * 20}}
    handle = await worker_app.submit(apps.keep, value=wide, tenant="phone",
                                     thread="a-thread-with-a-long-name-" + "y" * 40, delay_s=3600)
    await dead_letter(worker_app, key="p-dead", tenant="phone", error="an error message that goes on " * 12)
    async with signed_in(server, token("phone"), "#/runs") as page:
        await page.locator(f"#runs tr[data-id='{handle.id}']").wait_for()
        # Each page with what shows it has rendered its data: a page measured before that is
        # narrow because it is empty, and would pass whatever its tables hold.
        routes = {"#/overview": "#tiles > *",
                  "#/runs": f"#runs tr[data-id='{handle.id}']",
                  f"#/runs/{handle.id}": "#run-fields dd[data-field=args]",
                  "#/dead": "#dead tbody tr",
                  "#/threads": "#threads tbody tr",
                  "#/schedules": "#schedules tbody tr, #schedules caption.empty, #schedules-note:not(:empty)",
                  "#/workers": "#workers tbody tr, #workers caption.empty"}
        for route, rendered in routes.items():
            await page.set_viewport_size({"width": 1400, "height": 900})
            await page.goto(f"{server}/{route}")
            await page.wait_for_load_state("networkidle")
            await page.locator(rendered).first.wait_for()
            for width in (1280, 390):
                await _fits(page, width)
            if route == "#/runs":
                await page.locator(f"#runs tr[data-id='{handle.id}']").wait_for()
                created = page.locator(f"#runs tr[data-id='{handle.id}'] td").nth(7)
                # The live list may redraw the row between the wait and the measure (no box
                # then): measured again until the cell is there.
                box = await wait_until(created.bounding_box, "the created cell is laid out")
                assert box["height"] < 30  # one line
                await shot(page, "runs-phone", backend)
            if route == f"#/runs/{handle.id}":
                args = page.locator("#run-fields dd[data-field=args]")
                box = await args.bounding_box()
                assert box is not None and box["x"] + box["width"] <= 390
