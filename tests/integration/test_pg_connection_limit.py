"""A server out of connections is an outage, not a crash: asyncpg's TooManyConnectionsError
(the server's max_connections, or a role's limit, reached) becomes StoreUnreachable, which
every loop retries. Before, it escaped as asyncpg's own error and killed a worker's side
task (seen by `runwright verify` on a shared server at its max_connections)."""

from __future__ import annotations

import uuid

import asyncpg
import pytest

import runwright as rw
from runwright.errors import StoreUnreachable

from ..conftest import PG_BASE


@pytest.mark.parametrize("backend", ["postgres"])
async def test_a_server_out_of_connections_is_store_unreachable(backend: str) -> None:
    role, schema = f"rw_limited_{uuid.uuid4().hex[:8]}", f"rw_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_BASE)
    # A role of its own (a superuser ignores connection limits), limited once it is in.
    await admin.execute(f"CREATE ROLE {role} LOGIN")
    await admin.execute(f"GRANT CREATE ON DATABASE {PG_BASE.rsplit('/', 1)[1]} TO {role}")
    url = PG_BASE.replace("postgres@", f"{role}@", 1) + f"?schema={schema}"
    app = rw.App(url)
    try:
        async with app:
            held = await admin.fetchval("SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role)
            await admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT {held}")
            store = app.store
            async with store._conn():  # noqa: SLF001 (the pool's one session, held)
                with pytest.raises(StoreUnreachable, match="TooManyConnections"):
                    async with store._conn():  # a second session: over the limit
                        pass
            await admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1")
            assert await app.list_runs() == []  # and the store goes on once there is room
    finally:
        await app.close()
        await admin.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        await admin.execute(f"DROP OWNED BY {role}")
        await admin.execute(f"DROP ROLE {role}")
        await admin.close()
