"""The Redis backend: store and bus, one Lua script per operation."""

from .store import RedisStore

__all__ = ["RedisStore"]
