"""The `runwright` command: a thin face over the App (and, for `worker`, the engine's processes).

`main` holds the command group and what every command shares; each module of commands
registers its own on it when imported here, in the order `runwright --help` lists them."""

# isort: off
from . import processes as _processes  # noqa: F401 (registers its commands)
from . import runs as _runs  # noqa: F401
from . import schedules as _schedules  # noqa: F401
from . import operating as _operating  # noqa: F401
from . import threads as _threads  # noqa: F401
from . import questions as _questions  # noqa: F401
from . import sweep as _sweep  # noqa: F401
# isort: on
from .fleet import fleet_cli
from .main import cli, main

cli.add_typer(fleet_cli, name="fleet")

__all__ = ["cli", "main"]
