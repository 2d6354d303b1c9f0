"""The dashboard's decode switch, in headless Chromium against a real `runwright serve`
that holds the payload keys and runs with --operator-decode: the operator sees a tenant's
encrypted arguments sealed until it turns the switch on; the tenant sees its own plain
and has no switch."""

from __future__ import annotations

import httpx
import pytest

from ..api.test_api import OPERATOR_TOKEN, as_, serving
from ..api.test_operator_decode import MARKER, Keys
from .test_dashboard import signed_in

pytestmark = pytest.mark.process
TOKENS = {"alice-token": "alice"}


async def test_the_operator_turns_decode_on_to_read_a_tenants_payloads(store_url: str, tmp_path) -> None:
    keys = Keys()
    async with serving(store_url, tmp_path, TOKENS, env=keys.env, args=("--operator-decode",)) as base:
        async with httpx.AsyncClient(base_url=base, headers=as_("alice-token"), timeout=60) as alice:
            made = await alice.post("/runs", json={"task": "keep", "args": {"value": MARKER},
                                                   "delay_s": 3600})
            assert made.status_code == 201, made.text
        run_id = made.json()["id"]
        args = "#run-fields dd[data-field=args]"
        async with signed_in(base, OPERATOR_TOKEN, f"#/runs/{run_id}") as page:
            await page.locator(f"{args}:has-text('~sealed')").wait_for()
            shown = await page.locator(args).inner_text()
            assert MARKER not in shown and keys.key_id in shown
            assert await page.locator("#decode-switch").is_visible()
            await page.check("#decode")
            await page.locator(f"{args}:has-text('{MARKER}')").wait_for()
            assert "~sealed" not in await page.locator(args).inner_text()
            await page.uncheck("#decode")
            await page.locator(f"{args}:has-text('~sealed')").wait_for()
        async with signed_in(base, "alice-token", f"#/runs/{run_id}") as page:
            await page.locator(f"{args}:has-text('{MARKER}')").wait_for()
            assert not await page.locator("#decode-switch").is_visible()
