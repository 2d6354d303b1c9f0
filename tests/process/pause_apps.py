"""One task at two versions, for the pause tests (test_pauses.py): `broken` raises in its
second step, every attempt; `fixed` is the deploy that mends it. Its retry policy pauses a
run whose attempts ran out (on_exhausted="pause") instead of sending it to the dead-letter
queue. Each step leaves a ledger line per execution (apps.note)."""

from __future__ import annotations

import runwright as rw

from .apps import note


def _version(fixed: bool) -> rw.App:
    app = rw.App()

    @app.task(name="invoice", retries=1, backoff=rw.Backoff(base_s=0.01, cap_s=0.01), on_exhausted="pause")
    async def invoice(ctx: rw.Context, order: str) -> list[str]:
        def fetch() -> str:
            note("fetch", ctx)
            return f"order {order}"

        def charge() -> str:
            note("charge-fixed" if fixed else "charge-broken", ctx)
            if not fixed:
                raise RuntimeError("the payment API changed under us")
            return "charged"

        return [await ctx.step("fetch", fetch), await ctx.step("charge", charge)]

    return app


broken = _version(fixed=False)
fixed = _version(fixed=True)
