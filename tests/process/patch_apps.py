"""One task at three versions, for `runwright replay` (tests/integration/test_patches.py): the
old code, the new code changed without a patch (it breaks runs that went past the change),
and the new code behind `ctx.patched` (it replays every run)."""

from __future__ import annotations

import runwright as rw


def _version(change: str) -> rw.App:
    app = rw.App()

    @app.task(name="flow", retries=0)
    async def flow(ctx: rw.Context) -> list[str]:
        path = [await ctx.step("a", lambda: "a")]
        if change == "patched" and await ctx.patched("lookup-v2"):
            path.append(await ctx.step("b_new", lambda: "b_new"))
        elif change == "unpatched":
            path.append(await ctx.step("b_new", lambda: "b_new"))
        else:
            path.append(await ctx.step("b_old", lambda: "b_old"))
        path.append(await ctx.wait_signal("go"))
        path.append(await ctx.step("c", lambda: "c"))
        return path

    return app


old = _version("old")
unpatched = _version("unpatched")
patched = _version("patched")
