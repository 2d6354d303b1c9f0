"""The `runwright` command: a thin face over the App (and, for `worker`, the engine's processes).

`main` holds the command group and what every command shares; each module of commands
registers its own on it when imported here, in the order `runwright --help` lists them."""

# isort: off
from . import _processes  # noqa: F401 (registers its commands)
from . import _runs  # noqa: F401
from . import _schedules  # noqa: F401
from . import _limits  # noqa: F401
from . import _operating  # noqa: F401
from . import _threads  # noqa: F401
from . import _questions  # noqa: F401
from . import _signals  # noqa: F401
from . import _events  # noqa: F401
from . import _forking  # noqa: F401
from . import _replaying  # noqa: F401
from . import _sweep  # noqa: F401
from . import _mcp  # noqa: F401
from . import _moving  # noqa: F401
# isort: on
from ._fleet import fleet_cli as _fleet_cli
from ._main import cli, main

cli.add_typer(_fleet_cli, name="fleet")

__all__ = ["cli", "main"]
