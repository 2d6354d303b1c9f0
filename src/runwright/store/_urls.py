"""From a URL to a store: `sqlite:///path`, `postgresql://...?schema=name` (behind a
transaction pooler also `&direct=postgresql://<the server itself>`),
`redis://[:password@]host:6379/0?namespace=name` (or `rediss://`), `memory://[name]` (one
process's own, see memory/_store.py)."""

from __future__ import annotations

import os
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..errors import ConfigError
from ._interface import Store

__all__ = ["DEFAULT_URL", "resolve_url", "store_from_url"]

DEFAULT_URL = "sqlite:///./runwright.db"


def resolve_url(url: str | None) -> str:
    """The URL given, else RUNWRIGHT_URL, else the embedded default."""
    return url or os.environ.get("RUNWRIGHT_URL") or DEFAULT_URL


def store_from_url(url: str | None = None) -> Store:
    url = resolve_url(url)
    scheme = url.split(":", 1)[0].lower()
    if scheme == "sqlite":
        return _sqlite(url)
    if scheme in ("postgresql", "postgres"):
        return _postgres(url)
    if scheme in ("redis", "rediss"):
        return _redis(url)
    if scheme == "memory":
        return _memory(url)
    raise ConfigError(f"unknown store URL {url!r}: expected sqlite:///path.db, "
                      f"postgresql://user@host/db, redis://host:6379/0 or memory:// "
                      f"(set RUNWRIGHT_URL or pass it to App)")


def _sqlite(url: str) -> Store:
    from .sqlite import SqliteStore

    if not url.startswith("sqlite:///"):
        raise ConfigError(f"{url!r}: a SQLite URL is sqlite:///relative.db or sqlite:////abs/path.db")
    path, _, query = url[len("sqlite:///"):].partition("?")
    options = dict(parse_qsl(query))
    if not path or path == ":memory:":
        raise ConfigError(f"{url!r}: SQLite needs a file that worker processes can share, "
                          f"not an in-memory database")
    synchronous = options.pop("synchronous", "normal").upper()
    if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA") or options:
        raise ConfigError(f"{url!r}: the only SQLite option is synchronous=off|normal|full|extra")
    return SqliteStore(url, path, synchronous=synchronous)


def _memory(url: str) -> Store:
    from .memory import MemoryStore

    rest = url.split(":", 1)[1]
    if not rest.startswith("//") or "?" in rest or "/" in rest[2:]:
        raise ConfigError(f"{url!r}: a memory URL is memory:// (a database of its own) or"
                          f" memory://NAME (shared by the stores of this process that name it)")
    name = rest[2:]
    if name and not all(c.isalnum() or c in "_-." for c in name):
        raise ConfigError(f"{url!r}: a memory database's name is letters, digits, '_', '-' or '.'")
    return MemoryStore(url, name or None)


def _postgres(url: str) -> Store:
    from .postgres._pooling import DIRECT_OPTION
    from .postgres._store import DEFAULT_SCHEMA, PostgresStore

    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    schema = options.pop("schema", DEFAULT_SCHEMA)
    pool_size = int(options.pop("pool_size", 10))
    direct = options.pop(DIRECT_OPTION, None)
    dsn = urlunsplit(parts._replace(query=urlencode(options)))
    if direct is not None:
        _check_direct(url, direct)
    try:
        return PostgresStore(url, dsn, schema, pool_size=pool_size, direct_dsn=direct)
    except ValueError as exc:
        raise ConfigError(f"{url!r}: {exc}") from None


def _check_direct(url: str, direct: str) -> None:
    """`?direct=` (behind a transaction pooler) is the server's own URL: a PostgreSQL URL
    whose options are asyncpg's, not the store's (those stay on the main URL)."""
    from .postgres._pooling import safe_dsn

    if direct.split(":", 1)[0].lower() not in ("postgresql", "postgres") or "//" not in direct:
        raise ConfigError(f"{safe_dsn(url)}: direct= must be a postgresql:// URL of the server"
                          f" itself (percent-encoded when it has options of its own)")
    store_options = {"schema", "pool_size", "direct"} & dict(parse_qsl(urlsplit(direct).query)).keys()
    if store_options:
        raise ConfigError(f"{safe_dsn(url)}: {', '.join(sorted(store_options))} belong on the main"
                          f" URL, not in direct=")


def _redis(url: str) -> Store:
    from .redis._store import DEFAULT_NAMESPACE, RedisStore

    parts = urlsplit(url)
    options = dict(parse_qsl(parts.query))
    namespace = options.pop("namespace", DEFAULT_NAMESPACE)
    liveness_s = options.pop("liveness_s", None)
    if not namespace or not all(c.isalnum() or c in "_-." for c in namespace):
        raise ConfigError(f"{url!r}: namespace must be letters, digits, '_', '-' or '.', "
                          f"got {namespace!r}")
    client_url = urlunsplit(parts._replace(query=urlencode(options)))
    try:
        liveness = float(liveness_s) if liveness_s is not None else None
    except ValueError:
        raise ConfigError(f"{url!r}: liveness_s must be a number of seconds") from None
    if liveness is not None and liveness <= 0:
        raise ConfigError(f"{url!r}: liveness_s must be positive")
    if liveness is None:
        return RedisStore(url, client_url, namespace)
    return RedisStore(url, client_url, namespace, liveness_s=liveness)
