"""Find the App a command names: `package.module:attribute`."""

from __future__ import annotations

import importlib
import os
import sys

from ..app import App
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
    return app
