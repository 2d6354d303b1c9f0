"""Tenancy is a property of the App: library submissions with `tenant=` (or through
`app.tenant(name)`) share no keys, runs or threads across tenants."""

from __future__ import annotations

import pytest

import runwright as rw
from runwright.store._params import ThreadAppendParams

from .conftest import running_worker


def _tasks(app: rw.App):
    @app.task
    async def note(text: str) -> str:
        return text

    @app.task
    async def remember(ctx: rw.Context, text: str) -> str:
        """Adds one message to its thread (its tenant's), as an agent's turn would."""
        run = ctx.run
        assert run.thread is not None
        await ctx.runtime.store.thread_append(ThreadAppendParams(
            run.id, run.fence, run.thread, 0, f'{{"text": "{text}"}}'))
        return text

    return note, remember


async def test_the_same_key_in_two_tenants_names_two_runs(app):
    note, _ = _tasks(app)
    acme = await app.submit(note, "a", key="shared", tenant="acme", delay_s=60)
    bolt = await app.tenant("bolt").submit(note, "b", key="shared", delay_s=60)
    assert not bolt.existed and bolt.id != acme.id and bolt.run.tenant == "bolt"
    again = await app.tenant("acme").submit(note, "a", key="shared", delay_s=60)
    assert again.existed and again.id == acme.id  # submit(tenant=) and the view are one
    untenanted = await app.submit(note, "none", key="shared", delay_s=60)
    assert untenanted.id not in (acme.id, bolt.id)
    with pytest.raises(rw.KeyConflict, match=f"names run {acme.id}, which was submitted with other arg"):
        await app.tenant("acme").submit(note, "a again", key="shared")  # within a tenant, compared


async def test_a_tenant_cannot_reach_another_tenants_run(app):
    note, _ = _tasks(app)
    acme = await app.tenant("acme").submit(note, "a", delay_s=60)
    bolt = app.tenant("bolt")
    elsewhere = rf"^run {acme.id} not found among the runs of tenant 'bolt' \("
    for operation in (bolt.get, bolt.read_run, bolt.cancel, bolt.retry, bolt.attempts,
                      bolt.events_page, bolt.wait_done):
        with pytest.raises(rw.RunNotFound, match=elsewhere):
            await operation(acme.id)
    with pytest.raises(rw.RunNotFound):
        [item async for item in bolt.events(acme.id, follow=False)]
    assert (await app.get(acme.id)).state is rw.RunState.QUEUED  # nothing was cancelled
    assert await bolt.list_runs() == [] and await bolt.count_by_state() == {}
    assert [run.id for run in await app.tenant("acme").list_runs()] == [acme.id]
    assert (await app.tenant("acme").count_by_state()) == {"queued": 1}
    with pytest.raises(rw.InvalidInput, match="^this view is of tenant 'bolt'; it cannot submit as 'acme'$"):
        await bolt.submit(note, "b", tenant="acme")


async def test_a_thread_name_in_two_tenants_is_two_histories(app):
    _, remember = _tasks(app)
    acme, bolt = app.tenant("acme"), app.tenant("bolt")
    async with running_worker(app):
        first = await acme.submit(remember, "from acme", thread="t")
        second = await bolt.submit(remember, "from bolt", thread="t")  # not ThreadBusy
        assert await first.result(timeout_s=30) == "from acme"
        assert await second.result(timeout_s=30) == "from bolt"
    assert await acme.thread_history("t") == [{"text": "from acme"}]
    assert await bolt.thread_history("t") == [{"text": "from bolt"}]
    assert [run.id for run in await bolt.list_runs(thread="t")] == [second.id]
    await acme.delete_thread("t")
    with pytest.raises(rw.ThreadDeleted):
        await acme.thread_history("t")
    assert await bolt.thread_history("t") == [{"text": "from bolt"}]
