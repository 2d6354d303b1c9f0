import ast
import importlib
import re
import types
from pathlib import Path

import pytest

import runwright as rw
from runwright import errors, runs, testing
from runwright.agents import _models as models
from runwright.integrations import openai_agents
from runwright.jobs import _webhook as webhook

# Where the errors drawn in errors.py live: the tree is whole, so errors defined beside
# the code that raises them are drawn too.
ERROR_MODULES = (errors, models, testing, webhook, openai_agents)
_TREE_LINE = re.compile(r"^(?P<indent>[ │├└─]*?)(?:[├└]── )?(?P<name>[A-Z]\w+)\b")


def _public_names(module: types.ModuleType) -> set[str]:
    return {name for name, value in vars(module).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)}


def _drawn_tree() -> dict[str, str | None]:
    """name -> parent name, as errors.py's docstring draws them (4 columns a level)."""
    parents: dict[str, str | None] = {}
    path: list[str] = []
    for line in errors.__doc__.splitlines():
        match = _TREE_LINE.match(line.removeprefix("    "))
        if not line.startswith("    ") or match is None:
            continue
        depth = len(line.removeprefix("    ")[:match.start("name")]) // 4
        del path[depth:]
        parents[match["name"]] = path[-1] if path else None
        path.append(match["name"])
    return parents


def _error_class(name: str) -> type[BaseException]:
    (found,) = {getattr(m, name) for m in ERROR_MODULES if hasattr(m, name)}
    return found


def _subclasses(cls: type) -> set[type]:
    direct = set(cls.__subclasses__())
    return direct.union(*(_subclasses(c) for c in direct))


def test_all_is_sorted_and_complete():
    assert rw.__all__ == sorted(rw.__all__, key=lambda n: (not n.isupper(), n))
    for name in rw.__all__:
        assert hasattr(rw, name), name


def test_every_public_name_is_exported_and_only_public_names_are():
    missing = _public_names(rw) - set(rw.__all__)
    assert not missing, f"public in runwright but not in __all__: {sorted(missing)}"
    for name in rw.__all__:
        assert not name.startswith("_"), f"{name} in __all__ is private"
        assert hasattr(rw, name), f"{name} in __all__ does not exist"
        assert not isinstance(getattr(rw, name), types.ModuleType), f"{name} in __all__ is a module"
    assert len(set(rw.__all__)) == len(rw.__all__), "a name is in __all__ twice"


def _packages() -> list[types.ModuleType]:
    root = Path(rw.__file__).parent
    names = sorted("runwright." + ".".join(init.parent.relative_to(root).parts)
                   for init in root.rglob("__init__.py") if init.parent != root)
    return [importlib.import_module(name) for name in names]


def _foreign(package: types.ModuleType) -> set[str]:
    """The names a package's __init__ binds by importing them from outside runwright
    (`TYPE_CHECKING`, `Any`, `annotations`...): not its API."""
    tree = ast.parse(Path(package.__file__).read_text())
    return {alias.asname or alias.name for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.level == 0
            and not (node.module or "").startswith("runwright")
            for alias in node.names} | {
        (alias.asname or alias.name).partition(".")[0] for node in ast.walk(tree)
        if isinstance(node, ast.Import) for alias in node.names}


def test_below_the_top_level_every_module_is_private():
    root = Path(rw.__file__).parent
    public = sorted(str(path.relative_to(root)) for path in root.rglob("*.py")
                    if path.parent != root and not path.name.startswith("_"))
    assert not public, f"modules below the top level must be private (_name.py): {public}"


@pytest.mark.parametrize("package", _packages(), ids=lambda package: package.__name__)
def test_each_package_exports_what_it_binds_and_has_what_it_exports(package: types.ModuleType):
    exported = getattr(package, "__all__", [])
    assert exported == sorted(exported, key=lambda n: (not n.isupper(), n)), "__all__ is not sorted"
    assert len(set(exported)) == len(exported), "a name is in __all__ twice"
    for name in exported:
        assert not name.startswith("_"), f"{name} in __all__ is private"
        assert hasattr(package, name), f"{package.__name__}.__all__ names {name}, which it lacks"
        assert not isinstance(getattr(package, name), types.ModuleType), f"{name} in __all__ is a module"
    unexported = _public_names(package) - _foreign(package) - set(exported)
    assert not unexported, f"public in {package.__name__} but not in __all__: {sorted(unexported)}"


def test_runwright_testing_exports_the_classes_and_functions_its_modules_define():
    defined = {name for name, value in vars(testing).items() if not name.startswith("_")
               and isinstance(value, (type, types.FunctionType))
               and value.__module__.startswith(f"{testing.__name__}.")}  # defined in the package
    assert defined, "the package re-exports what its modules define"
    assert defined <= set(testing.__all__), sorted(defined - set(testing.__all__))


def test_every_error_is_drawn_in_the_errors_docstring():
    for name in errors.__all__:
        assert name in errors.__doc__, f"{name} missing from the tree in errors.py"


def test_the_drawn_tree_is_the_class_tree_and_it_is_whole():
    drawn = _drawn_tree()
    assert drawn.pop("RunwrightError") is None
    for name, parent in drawn.items():
        cls = _error_class(name)
        assert _error_class(parent) in cls.__bases__, f"{name} is drawn under {parent}"
    ours = {cls.__name__ for cls in _subclasses(errors.RunwrightError)
            if cls.__module__.startswith("runwright.")}
    assert ours <= set(drawn), f"errors not drawn in errors.py: {sorted(ours - set(drawn))}"


def test_model_and_webhook_errors_are_runwright_errors_on_the_right_branch():
    assert issubclass(models.ModelError, errors.FinalError)
    assert issubclass(webhook.WebhookRefused, errors.FinalError)
    for retryable in (models.ModelUnavailable, webhook.WebhookRetryable, errors.TaskTimeout):
        assert issubclass(retryable, errors.RunwrightError)
        assert not issubclass(retryable, errors.FinalError)
    assert issubclass(models.ModelUnavailable, RuntimeError)  # what callers caught before
    assert issubclass(errors.TaskTimeout, TimeoutError)


def test_transition_table_covers_every_state_and_terminal_states_only_leave_by_retry():
    assert set(runs.TRANSITIONS) == set(runs.RunState)
    for state in runs.TERMINAL_STATES:
        assert runs.TRANSITIONS[state] <= {runs.RunState.QUEUED}
    assert runs.sources_of(runs.RunState.RUNNING) == ("queued",)
    assert runs.sources_of(runs.RunState.QUEUED) == ("dead", "failed", "running")
