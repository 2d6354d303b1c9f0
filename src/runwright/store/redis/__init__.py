"""The Redis backend: store and bus, one Lua script per operation."""

from ._store import RedisStore

__all__ = ["RedisStore"]
