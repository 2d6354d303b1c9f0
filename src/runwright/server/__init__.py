"""The HTTP service: a thin FastAPI face over the same App that the CLI and the library use."""

from .auth import Auth
from .factory import create_server

__all__ = ["Auth", "create_server"]
