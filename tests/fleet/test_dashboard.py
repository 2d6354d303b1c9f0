"""The dashboard's fleet panel in headless Chromium against a real `runwright serve`
(which is itself `server-1` of its fleet): the operator sees the census, a tenant is told
that the panel is the operator's."""

from __future__ import annotations

import pytest

from ..api.test_api import OPERATOR_TOKEN, server  # noqa: F401 (fixture)
from ..browser.test_dashboard import signed_in

pytestmark = pytest.mark.process


@pytest.mark.parametrize("backend", ["sqlite"])  # the panel reads /fleet: the same on every store
async def test_the_fleet_panel_shows_the_census_to_the_operator_only(server: str) -> None:  # noqa: F811
    async with signed_in(server, OPERATOR_TOKEN, "#/workers") as page:
        row = page.locator("#fleet tr[data-name='server-1']")
        await row.wait_for()
        assert (await row.locator("td").nth(2).inner_text()) == "ready"
        assert await page.locator("#fleet-note").inner_text() == "(runwright:v0)"
    async with signed_in(server, "alice-token", "#/workers") as page:
        await page.locator("#fleet-note:has-text('operator token only')").wait_for()
        assert await page.locator("#fleet tbody tr").count() == 0
