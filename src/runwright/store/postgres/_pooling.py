"""Behind a connection pooler: telling a transaction pooler from a session of our own,
and checking the direct URL that goes beside one.

A transaction pooler (PgBouncer pool_mode=transaction, and managed poolers that work the
same way) lends a server session to a client for one transaction at a time. Queries work
through it. A session advisory lock (a worker's liveness mark, see _marks.py) and LISTEN
cannot: the lock would stay on a server session that goes on to serve other clients, and
notifications would reach whoever holds that session next. So the URL of such a pooler
needs `?direct=<the server itself>` beside it for those two, and without one the store
refuses to start rather than mistake live workers for dead ones.
"""

from __future__ import annotations

import asyncio
from typing import Awaitable, Callable

import asyncpg

from ...errors import ConfigError
from ._marks import close_quietly

__all__ = ["DIRECT_OPTION", "refuse_transaction_pooler", "require_same_database", "safe_dsn"]

DIRECT_OPTION = "direct"  # the URL query parameter that names the direct URL
LOOKS = 2  # see refuse_transaction_pooler
_PID = "SELECT pg_backend_pid()"


async def refuse_transaction_pooler(dsn: str, *, direct: bool = False) -> None:
    """ConfigError, naming the setting, when `dsn` (the direct URL if `direct`) answers
    like a transaction pooler.

    Nothing in the protocol says whether a pooler answers, nor in which mode, so look at
    what a session is: while a client stays connected, its server session serves no
    other client and runs each of its statements. Behind a transaction pooler, the
    session that ran `first`'s statement goes back to the pool and serves `second`'s
    transaction (PgBouncer lends the session freed last first), or `first`'s next
    statement runs in another session. A session of our own never shows either, so this
    never raises a false alarm; a pooler that lends sessions round-robin may slip past
    one look, hence a few.
    """
    first, second = await _connect_two(dsn)
    try:
        for _ in range(LOOKS):
            pid = await first.fetchval(_PID)
            async with second.transaction():
                shared = await second.fetchval(_PID) == pid
                moved = await first.fetchval(_PID) != pid
            if shared or moved:
                fix = (f"{DIRECT_OPTION}= must be the URL of the PostgreSQL server itself" if direct
                       else f"add the URL option {DIRECT_OPTION}=<URL of the PostgreSQL server itself>")
                raise ConfigError(
                    f"postgresql: {safe_dsn(dsn)} is a transaction pooler (its server sessions"
                    f" serve other clients between transactions), which cannot hold a worker's"
                    f" liveness mark or LISTEN: {fix}")
    finally:
        await asyncio.gather(close_quietly(first), close_quietly(second))


async def _connect_two(dsn: str) -> tuple[asyncpg.Connection, asyncpg.Connection]:
    """Two sessions, opened at once (each connect is a few round trips of waiting); if
    either fails, the other is closed and the failure raised."""
    made = await asyncio.gather(_connect(dsn), _connect(dsn), return_exceptions=True)
    sessions = [m for m in made if isinstance(m, asyncpg.Connection)]
    if len(sessions) < len(made):
        await asyncio.gather(*map(close_quietly, sessions))
        raise next(m for m in made if isinstance(m, BaseException))
    return sessions[0], sessions[1]


async def require_same_database(pooled_dsn: str, direct_dsn: str,
                                connect_direct: Callable[[], Awaitable[asyncpg.Connection]]) -> None:
    """The direct URL must reach the server and database the pooler serves: the rescue
    reads the liveness marks back through the pooler (pg_locks of this database), so
    with marks held elsewhere every live worker would look dead. The direct session is
    looked for, by pid and start time, through the pooler."""
    direct = await connect_direct()
    try:
        row = await direct.fetchrow("SELECT pid, backend_start FROM pg_stat_activity"
                                    " WHERE pid = pg_backend_pid()")
        pooled = await _connect(pooled_dsn)
        try:
            seen = await pooled.fetchval(
                "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1"
                " AND backend_start = $2 AND datname = current_database())", row[0], row[1])
        finally:
            await close_quietly(pooled)
    finally:
        await close_quietly(direct)
    if not seen:
        raise ConfigError(f"postgresql: ?{DIRECT_OPTION}={safe_dsn(direct_dsn)} reaches another server"
                          f" or database than {safe_dsn(pooled_dsn)} serves; it must be the same one")


async def _connect(dsn: str) -> asyncpg.Connection:
    # No statement cache: a named prepared statement would outlive the pooler's loan.
    return await asyncpg.connect(dsn, timeout=10, statement_cache_size=0)


def safe_dsn(dsn: str) -> str:
    """The DSN without its password, for error messages."""
    if "@" in dsn and ":" in dsn.split("@", 1)[0].split("//", 1)[-1]:
        scheme, rest = dsn.split("//", 1)
        creds, host = rest.split("@", 1)
        return f"{scheme}//{creds.split(':', 1)[0]}:***@{host}"
    return dsn
