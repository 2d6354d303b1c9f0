"""Find the App a command names: `package.module:attribute`."""

from __future__ import annotations

import importlib
import os
import sys

from ..app import App, store_url_of
from ..errors import ConfigError

__all__ = ["load_app"]


def load_app(spec: str) -> App:
    module_name, _, attribute = spec.partition(":")
    if not module_name:
        raise ConfigError(f"{spec!r}: name the app as module:attribute, e.g. myproject.jobs:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # like `python -m`: the project's modules import
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(f"cannot import {module_name!r} (from {spec!r}): {exc}") from exc
    app = getattr(module, attribute or "app", None)
    if not isinstance(app, App):
        raise ConfigError(f"{spec!r}: {attribute or 'app'} in {module_name} is not a runwright App")
    _check_store(spec, app)
    return app


def _check_store(spec: str, app: App) -> None:
    """An App built with a URL of its own ignores --url and RUNWRIGHT_URL: when they name
    another store, say so instead of working on one the command line did not name."""
    given = os.environ.get("RUNWRIGHT_URL")
    if not given or app.url_from_env:
        return
    if store_url_of(given) != app.url:
        raise ConfigError(f"{spec!r} builds its App on its own store ({app.url}), but --url or RUNWRIGHT_URL "
                          f"names {given}: build it with rw.App() (no URL) to take the command line's "
                          f"store, or leave --url out")
