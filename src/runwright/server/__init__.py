"""The HTTP service: a thin FastAPI face over the same App that the CLI and the library use."""

from ._auth import Auth
from ._factory import create_server

__all__ = ["Auth", "create_server"]
