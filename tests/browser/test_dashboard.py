"""The dashboard in headless Chromium (Debian's, driven by Playwright) with auth on, on
every backend: it lists runs, streams a run's events live, and retries a dead letter."""

from __future__ import annotations

import shutil
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest
from playwright.async_api import Page, async_playwright

import runwright as rw
from runwright.store.params import RunClaimParams, RunFinishParams, WorkerRegisterParams

from ..api.test_api import server, worker_app  # noqa: F401 (fixtures)
from ..integration.conftest import running_worker
from ..process import apps

pytestmark = pytest.mark.process
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[2] / ".artifacts"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@asynccontextmanager
async def signed_in(base: str, token: str) -> AsyncIterator[Page]:
    """A headless Chromium page on the dashboard, signed in with `token`."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = await browser.new_page()
            await page.goto(base)
            await page.fill("#token", token)
            await page.click("#login button")
            yield page
        finally:
            await browser.close()


async def dead_letter(app: rw.App) -> rw.RunHandle:
    """A run that ended dead (its attempts made by hand, through the store)."""
    handle = await app.submit(apps.record, n=9, key="doomed", tenant="alice")
    wid = await app.store.worker_register(WorkerRegisterParams("h", 1, ["default"], ["record"]))
    (run,) = await app.store.run_claim(RunClaimParams(wid, ["default"], ["record"], 1, 30))
    await app.store.run_finish_many([RunFinishParams(run.id, run.fence, rw.RunState.DEAD,
                                                     error='{"type": "Boom", "message": "broken"}')])
    await app.store.worker_deregister(wid)
    return handle


async def test_the_dashboard_lists_streams_and_retries(server: str, worker_app: rw.App) -> None:  # noqa: F811
    doomed = await dead_letter(worker_app)
    async with signed_in(server, "alice-token") as page:
        await page.wait_for_selector(f"#dead button.retry[data-id='{doomed.id}']")
        fresh = await _submit(page)
        await page.wait_for_selector(f"#runs tr[data-id='{fresh}']")
        await page.click(f"#runs tr[data-id='{fresh}']")
        await page.wait_for_selector("#events .event")  # "submitted" arrives over SSE
        async with running_worker(worker_app):
            await page.wait_for_selector("#events .event:has-text('succeeded')", timeout=30_000)
            events = await page.locator("#events .event").all_inner_texts()
        assert [line.split()[1] for line in events] == ["submitted", "started", "succeeded"]
        await page.click(f"#dead button.retry[data-id='{doomed.id}']")
        await page.wait_for_selector(f"#dead button.retry[data-id='{doomed.id}']", state="detached")
        ARTIFACTS.mkdir(exist_ok=True)
        await page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)
    assert (await doomed.refresh()).state in (rw.RunState.QUEUED, rw.RunState.RUNNING,
                                              rw.RunState.SUCCEEDED)
    assert (ARTIFACTS / "dashboard.png").stat().st_size > 0


async def _submit(page) -> int:
    """Submit through the API with the page's own token, as a user of the API would."""
    answer = await page.evaluate("""async () => {
        const r = await fetch('/runs', {method: 'POST', headers: {'Content-Type': 'application/json',
            'Authorization': 'Bearer ' + localStorage.getItem('runwright-token')},
            body: JSON.stringify({task: 'record', args: {n: 3}})});
        return (await r.json()).id; }""")
    return int(answer)


async def test_the_dashboard_answers_a_question(server: str, worker_app: rw.App) -> None:  # noqa: F811
    async with running_worker(worker_app):
        handle = await worker_app.submit(apps.ask_deploy, target="staging", tenant="alice")
        async with signed_in(server, "alice-token") as page:
            row = f"#questions tr[data-run='{handle.id}']"
            await page.wait_for_selector(f"{row}:has-text('Deploy staging?')", timeout=30_000)
            ARTIFACTS.mkdir(exist_ok=True)
            await page.screenshot(path=str(ARTIFACTS / "dashboard-question.png"), full_page=True)
            await page.fill(f"{row} input.answer", "true")
            await page.click(f"{row} button.send")
            await page.wait_for_selector(row, state="detached", timeout=30_000)
        result = await handle.result(timeout_s=30)
    assert result["approved"] is True
    (question,) = await worker_app.questions(handle.id, pending=False)
    assert question.answered_by == "alice"
