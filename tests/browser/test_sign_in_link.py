"""The sign-in link of a first `runwright serve` (no token configured), followed in
headless Chromium: the page signs in with the token of the URL's fragment, takes it out of
the address bar, and its header says in one line who the caller is and what it cannot see.
On SQLite alone, with a server of its own (the module's other servers have tokens)."""

from __future__ import annotations

from pathlib import Path

import pytest
from playwright.async_api import async_playwright

from ..api.test_first_serve import SERVE, folder, plain_env, served, sign_in_link  # noqa: F401
from .test_dashboard import CHROMIUM, FLAGS, LONG

pytestmark = pytest.mark.process


async def test_the_printed_link_signs_in_as_the_operator_and_leaves_the_address_bar(folder: Path) -> None:  # noqa: F811
    with served(SERVE, folder, plain_env(), 2) as lines:
        base, token = sign_in_link(lines)
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                page = await browser.new_page(viewport={"width": 1400, "height": 900})
                page.set_default_timeout(LONG)
                await page.goto(f"{base}/#token={token}")
                await page.locator("#whoami:has-text('signed in as the operator')").wait_for()
                assert await page.locator("#whoami").inner_text() == "signed in as the operator: every run"
                assert token not in page.url and "token" not in await page.evaluate("location.hash")
                await page.click("#nav a[data-view=runs]")
                await page.locator("#runs tbody tr").first.wait_for()  # the CLI's run, no tenant's
                assert await page.locator("#runs tbody tr").count() == 1
                # A link of another server (or of this one's earlier life) says so, and is gone.
                other = await browser.new_page()
                other.set_default_timeout(LONG)
                await other.goto(f"{base}/#token=stale-{token}")
                stale = "the sign-in link's token is not this server's"
                await other.locator(f"#flash:has-text(\"{stale}\")").wait_for()
                await other.locator("#view-signin").wait_for()
                assert "token" not in await other.evaluate("location.hash")
            finally:
                await browser.close()


async def test_without_auth_the_header_says_so_and_offers_no_sign_out(folder: Path) -> None:  # noqa: F811
    with served(SERVE, folder, plain_env(RUNWRIGHT_AUTH="off"), 2) as lines:
        base = lines[0].split()[-1]
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
            try:
                page = await browser.new_page()
                page.set_default_timeout(LONG)
                await page.goto(f"{base}/")
                await page.locator("#whoami:has-text('no sign-in')").wait_for()
                said = await page.locator("#whoami").inner_text()
                assert said == "no sign-in (RUNWRIGHT_AUTH=off): every run"
                assert await page.locator("#sign-out").is_hidden()
            finally:
                await browser.close()
