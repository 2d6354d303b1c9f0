"""Updates: a signal whose sender gets the run's result, validated first, never half applied;
raced with cancel. In-process workers, on every backend."""

from __future__ import annotations

import asyncio

import pytest

import runwright as rw
from runwright.runs import RunState, WaitReason
from runwright.store._params import EventListParams

from ..process import apps
from ..process.harness import wait_until
from .conftest import running_worker


@pytest.fixture
def cart_app(app: rw.App, tmp_path, monkeypatch) -> rw.App:
    monkeypatch.setenv(apps.LEDGER_ENV, str(tmp_path))
    app.tasks.update(apps.app.tasks)
    return app


def _discounts(tmp_path) -> int:
    """How many discounts were applied: the ledger lines the handler's step wrote."""
    return sum(line.startswith("discount ") for log in tmp_path.glob("*.log")
               for line in log.read_text().splitlines())


async def test_an_update_returns_the_runs_result_and_a_refused_one_writes_nothing(cart_app: rw.App,
                                                                                  tmp_path) -> None:
    handle = await cart_app.submit(apps.priced_cart, rounds=2)
    async with running_worker(cart_app):
        with pytest.raises(rw.InvalidInput, match="whole percent in 1..50, got 90"):
            await cart_app.update(handle.id, "discount", 90)
        assert await cart_app.signals(handle.id) == [], "a refused update writes nothing"
        assert await cart_app.update(handle.id, "discount", 10) == 90
        async def published() -> bool:  # the run publishes it after its reply
            return await cart_app.state(handle.id) == {"total": 90}

        await wait_until(published, "the run publishes its new total")
        assert await cart_app.update(handle.id, "discount", 50, key="second") == 45
        again = await cart_app.update(handle.id, "discount", 50, key="second")
        assert again == 45, "the same key is the same update: its result, not a second discount"
        assert await handle.result(timeout_s=30) == {"total": 45}
    assert _discounts(tmp_path) == 2
    events = await cart_app.store.event_list(EventListParams(handle.id))
    replies = [e.data for e in events if e.kind == "updated"]
    assert replies == [{"update": 1, "name": "discount", "result": 90},
                       {"update": 2, "name": "discount", "result": 45}]


async def test_an_update_no_wait_took_is_withdrawn_at_its_timeout_and_never_applied(cart_app: rw.App,
                                                                                   tmp_path) -> None:
    handle = await cart_app.submit(apps.priced_cart, rounds=1, delay_s=3600)  # nobody applies it yet
    with pytest.raises(rw.UpdateTimeout, match="withdrawn: it will not be applied") as caught:
        await cart_app.update(handle.id, "discount", 10, timeout_s=0.3)
    assert caught.value.applying is False
    (withdrawn,) = await cart_app.signals(handle.id)
    assert withdrawn.withdrawn_at is not None and not withdrawn.pending
    assert await cart_app.signals(handle.id, pending=True) == []
    await handle.cancel()
    assert _discounts(tmp_path) == 0


async def test_an_update_raced_with_cancel_is_applied_wholly_or_not_at_all(cart_app: rw.App,
                                                                         tmp_path) -> None:
    applied = refused = 0
    async with running_worker(cart_app, concurrency=8):
        for round_ in range(12):
            handle = await cart_app.submit(apps.priced_cart, rounds=1)
            await wait_until(lambda h=handle: _waiting(cart_app, h.id), "the run waits on its update")
            before = _discounts(tmp_path)
            update = asyncio.ensure_future(cart_app.update(handle.id, "discount", 10, timeout_s=20))
            await asyncio.sleep(0.001 * (round_ % 4))  # the cancel lands before, during or after
            try:
                await handle.cancel()
            except rw.RunEnded:
                pass  # the update was applied and the run ended first
            try:
                assert await update == 90
                applied += 1
                assert _discounts(tmp_path) == before + 1
                async def ended(h: rw.RunHandle = handle) -> bool:
                    return (await h.refresh()).done

                await wait_until(ended, "the run ends")
                assert handle.state in (RunState.SUCCEEDED, RunState.CANCELLED)
            except (rw.RunEnded, rw.UpdateTimeout) as exc:
                refused += 1
                journal = await cart_app.store.step_list(handle.id)
                assert not any(r.name == "update:discount" for r in journal), (exc, journal)
                # Not applied: no journal entry, no new total. A handler the cancel cut short
                # may have begun (a step's function is at-least-once), never twice.
                assert _discounts(tmp_path) <= before + 1
                assert "total" not in await cart_app.state(handle.id)
    assert applied + refused == 12


async def _waiting(app: rw.App, run_id: int) -> bool:
    run = await app.store.run_get(run_id)
    return run is not None and (run.waiting == WaitReason.SIGNAL or run.state is RunState.RUNNING)
