"""Bulk actions on the dashboard's lists (POST /bulk over the list's filter), in headless
Chromium against a real `runwright serve` with auth on: a dry run counts and samples and
changes nothing; a confirm acts on what matches and reports what was done and each refusal
with why; the buttons are disabled while it works; a tenant acts on its own runs alone, and
an error reads as the problem's one line."""

from __future__ import annotations

import asyncio
import re

import pytest
from playwright.async_api import Page, Route

import runwright as rw
from runwright.client._bulk import fork_key

from ..api.test_api import OPERATOR_TOKEN
from .conftest import token
from .test_dashboard import _fits, _ids, dead_letter, shot, signed_in

# The module's server holds the share of the PostgreSQL budget for its tests (conftest.py).
pytestmark = [pytest.mark.process, pytest.mark.pg_connections(0)]
BULK = "#runs-bulk"


async def _filter_by_error(page: Page, text: str, expected: list[int]) -> None:
    """Filter the runs list by error text and wait until it shows `expected` (newest first)."""
    await page.fill("#run-filters input[name=error]", text)
    await page.click("#run-filters button")
    await page.wait_for_function(f"location.hash.includes('error={text}')")
    await page.wait_for_function(
        "ids => JSON.stringify([...document.querySelectorAll('#runs tbody tr')]"
        ".map(r => Number(r.dataset.id))) === JSON.stringify(ids)", arg=expected)


async def _dry_run(page: Page, action: str, box: str = BULK) -> str:
    """Pick `action`, ask for the dry run, and return the line that says what matched."""
    await page.select_option(f"{box} select[name=action]", action)
    await page.click(f"{box} button.bulk-check")
    status = page.locator(f"{box} .bulk-status.matched")
    await status.wait_for()
    said = await status.inner_text()
    confirm = page.locator(f"{box} button.bulk-confirm")
    assert await (confirm.is_disabled() if said.startswith("0 runs") else confirm.is_enabled()), said
    return said


async def _states(app: rw.App, ids: list[int]) -> list[rw.RunState]:
    return [run.state for run in await app.store.run_get_many(ids)]


async def test_a_bulk_retry_by_error_text_dry_runs_then_requeues_exactly_the_matching_runs(
        server: str, worker_app: rw.App, backend: str) -> None:
    ours = [await dead_letter(worker_app, key=f"ba{i}", tenant="bulk-a", error=f"quota zq7 exhausted {i}")
            for i in range(3)]
    other_error = await dead_letter(worker_app, key="ba-other", tenant="bulk-a", error="disk full")
    theirs = await dead_letter(worker_app, key="bb-zq7", tenant="bulk-b", error="quota zq7 exhausted")
    ids = [h.id for h in ours]
    async with signed_in(server, token("bulk-a"), "#/runs") as page:
        await page.locator(f"#runs tr[data-id='{other_error.id}']").wait_for()
        await _filter_by_error(page, "zq7", ids[::-1])
        await page.click(f"{BULK} summary")
        assert "filter: error text zq7;" in await page.locator(f"{BULK} .bulk-scope").inner_text()
        assert await page.locator(f"{BULK} button.bulk-confirm").is_disabled()  # no dry run yet
        said = await _dry_run(page, "retry")
        sample = ", ".join(f"#{i}" for i in ids[::-1])
        assert said == f"3 runs match (sample: {sample})"
        assert await page.locator(f"{BULK} button.bulk-confirm").inner_text() == "Retry 3 runs"
        assert await _states(worker_app, ids) == [rw.RunState.DEAD] * 3, "a dry run changes nothing"
        # A change of the cap asks for a new dry run before any confirm.
        await page.fill(f"{BULK} input[name=limit]", "2")
        assert await page.locator(f"{BULK} button.bulk-confirm").is_disabled()
        assert (await _dry_run(page, "retry")).startswith("2 runs match")
        assert "more match than the cap" in await page.locator(f"{BULK} .bulk-status").inner_text()
        await page.fill(f"{BULK} input[name=limit]", "1000")
        await _dry_run(page, "retry")

        # While the action works, every control is disabled and the page says so: the
        # request is held here until that is seen, then let through.
        release = asyncio.Event()

        async def hold(route: Route) -> None:
            await release.wait()
            await route.continue_()

        await page.route("**/bulk", hold)
        await page.click(f"{BULK} button.bulk-confirm")
        await page.locator(f"{BULK} .bulk-status.working").wait_for()
        assert (await page.locator(f"{BULK} .bulk-status").inner_text()).startswith("working: retry")
        for control in ("button.bulk-check", "button.bulk-confirm", "select[name=action]",
                        "input[name=limit]"):
            assert await page.locator(f"{BULK} {control}").is_disabled(), control
        release.set()
        summary = page.locator(f"{BULK} .bulk-summary")
        await summary.wait_for()
        await page.unroute("**/bulk")
        assert await summary.inner_text() == "retry: 3 runs done, 0 refused, of 3 matched."
        assert sorted(await page.locator(f"{BULK} .bulk-done a").evaluate_all(
            "links => links.map(a => Number(a.textContent))")) == ids
        assert await page.locator(f"{BULK} table.bulk-refused").count() == 0
        assert await page.locator(f"{BULK} button.bulk-check").is_enabled()
        assert await page.locator(f"{BULK} button.bulk-confirm").is_disabled()  # a new dry run first
        assert await _states(worker_app, ids) == [rw.RunState.QUEUED] * 3
        assert await _states(worker_app, [other_error.id, theirs.id]) == [rw.RunState.DEAD] * 2

        # A refusal is reported with its why: a run forked already is not forked again.
        forked, fresh = [await dead_letter(worker_app, key=f"bf{i}", tenant="bulk-a", error="lost zq8")
                         for i in range(2)]
        first = await worker_app.tenant("bulk-a").fork(forked.id, 0, key=fork_key(forked.id, 0))
        await _filter_by_error(page, "zq8", [fresh.id, forked.id])
        assert (await _dry_run(page, "fork")).startswith("2 runs match")
        await page.click(f"{BULK} button.bulk-confirm")
        await summary.wait_for()
        assert await summary.inner_text() == ("fork from the failing step: 1 run done, 1 refused, "
                                              "of 2 matched.")
        assert await _ids(page, f"{BULK} table.bulk-refused") == [forked.id]
        why = await page.locator(f"{BULK} table.bulk-refused tr[data-id='{forked.id}'] td").nth(1)\
            .inner_text()
        assert why == f"ForkedAlready: run {first.id} forks it from step 0"
        assert [f.id for f in await worker_app.forks(forked.id)] == [first.id]
        (made,) = await worker_app.forks(fresh.id)
        assert made.key == fork_key(fresh.id, 0)
        await shot(page, "runs-bulk", backend)
        await _fits(page, 390)  # the panel, its report and its table fit a phone


async def test_a_tenant_bulk_action_touches_its_own_runs_only(server: str, worker_app: rw.App,
                                                              backend: str) -> None:
    mine = [await dead_letter(worker_app, key=f"bc{i}", tenant="bulk-c", error="tq9 refused")
            for i in range(2)]
    theirs = [await dead_letter(worker_app, key=f"bd{i}", tenant="bulk-d", error="tq9 refused")
              for i in range(3)]
    async with signed_in(server, token("bulk-c"), "#/runs?error=tq9") as page:
        await page.click(f"{BULK} summary")
        assert (await _dry_run(page, "retry")).startswith("2 runs match")
        await page.click(f"{BULK} button.bulk-confirm")
        done = page.locator(f"{BULK} .bulk-summary:has-text('2 runs done, 0 refused, of 2 matched')")
        await done.wait_for()
        # Another tenant's runs cannot be named: the problem's title and detail, one line.
        await page.goto(f"{server}/#/runs?error=tq9&tenant=bulk-d")
        await page.click(f"{BULK} button.bulk-check")
        error = page.locator(f"{BULK} .bulk-status.error")
        await error.wait_for()
        said = await error.inner_text()
        assert re.fullmatch(r"403 Operator only: the runs of tenant 'bulk-d' are not yours[^\n]*", said), said
        await shot(page, "runs-bulk-error", backend)
        assert await page.locator(f"{BULK} button.bulk-confirm").is_disabled()
        # A filter POST /bulk does not take (a thread) is never sent: it would act on more
        # runs than the list shows.
        await page.goto(f"{server}/#/runs?error=tq9&thread=t-bulk")
        await page.locator(f"{BULK} .bulk-scope:has-text('clear the thread filter')").wait_for()
        assert await page.locator(f"{BULK} button.bulk-check").is_disabled()
        assert await page.locator(f"{BULK} .bulk-status").inner_text() == ""  # the 403 line is gone
        # The dead letters' panel: the tenant's own dead runs (bulk-d's are not counted).
        await page.goto(f"{server}/#/dead")
        await page.click("#dead-bulk summary")
        assert (await _dry_run(page, "retry", "#dead-bulk")).startswith("0 runs match")
    assert await _states(worker_app, [h.id for h in mine]) == [rw.RunState.QUEUED] * 2
    assert await _states(worker_app, [h.id for h in theirs]) == [rw.RunState.DEAD] * 3
    # The operator narrows to one tenant with the list's tenant filter: that tenant's runs alone.
    async with signed_in(server, OPERATOR_TOKEN, "#/runs?error=tq9&tenant=bulk-d") as page:
        await page.locator(f"#runs tr[data-id='{theirs[0].id}']").wait_for()
        await page.click(f"{BULK} summary")
        assert "tenant bulk-d" in await page.locator(f"{BULK} .bulk-scope").inner_text()
        assert (await _dry_run(page, "retry")).startswith("3 runs match")
        await page.click(f"{BULK} button.bulk-confirm")
        await page.locator(f"{BULK} .bulk-summary:has-text('3 runs done')").wait_for()
    assert await _states(worker_app, [h.id for h in theirs]) == [rw.RunState.QUEUED] * 3
