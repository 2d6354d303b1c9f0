"""The layers point down: faces (cli, server) -> App -> engine -> store interface <- backends.

Read from the source with `ast`, so imports under `if TYPE_CHECKING:` and imports inside
functions count as much as the ones at the top: a lazy import hides a circle, it does
not remove it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import runwright

ROOT = Path(runwright.__file__).parent
PACKAGE = "runwright"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_package(name: str) -> bool:
    return (ROOT.parent / name.replace(".", "/") / "__init__.py").exists()


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def _imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The runwright modules `name` imports, wherever in the file the import is."""
    package = name if _is_package(name) else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name.startswith(PACKAGE)}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            if not base.startswith(PACKAGE):
                continue
            # `from . import views` imports the module views (and the package, which is
            # then already loading: no edge to it unless a name of its own is taken).
            submodules = {f"{base}.{alias.name}" for alias in node.names} & known
            found |= submodules
            if len(submodules) < len(node.names):
                found.add(base)
    return {module for module in found if module in known and module != name}


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    return {name: _imports_of(name, path, known) for name, path in modules.items()}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def _importers_of(graph: dict[str, set[str]], under: str, target: str) -> list[str]:
    return sorted(name for name, imports in graph.items()
                  if (name == under or name.startswith(under + ".")) and any(
                      module == target or module.startswith(target + ".") for module in imports))


def test_the_import_graph_has_no_circle():
    assert _circles(_graph()) == []


def test_neither_the_engine_nor_the_store_imports_the_app():
    graph = _graph()
    for layer in ("runwright.engine", "runwright.store"):
        assert _importers_of(graph, layer, "runwright.app") == [], layer


def test_the_faces_call_the_app_and_never_a_store_module():
    graph = _graph()
    for face in ("runwright.server", "runwright.cli", "runwright.observe._metrics"):
        assert _importers_of(graph, face, "runwright.store") == [], face


def test_no_backend_imports_the_engine():
    assert _importers_of(_graph(), "runwright.store", "runwright.engine") == []


SERVER = "runwright.server"


def test_every_server_module_declares_what_it_exports():
    """Each module of the HTTP face says what the others may take from it, and has it."""
    for name in sorted(_modules()):
        if name != SERVER and not name.startswith(SERVER + "."):
            continue
        module = importlib.import_module(name)
        exported = getattr(module, "__all__", None)
        assert exported is not None, f"{name} has no __all__"
        assert len(set(exported)) == len(exported), f"{name}: a name is in __all__ twice"
        for export in exported:
            assert hasattr(module, export), f"{name}.__all__ names {export}, which it lacks"


def test_modules_of_routes_share_helpers_through_deps_not_through_each_other():
    """What two modules of routes both need lives once, in a module below them (deps,
    sse, models): a module of routes importing another would be a helper kept in the
    wrong place, or a route depending on where another is defined."""
    graph = _graph()
    routes = {name for name in graph if name.startswith(SERVER + ".") and name.endswith("_routes")}
    assert {f"{SERVER}._run_routes", f"{SERVER}._thread_routes"} <= routes
    for name in sorted(routes):
        assert graph[name] & routes == set(), name
        assert f"{SERVER}._factory" not in graph[name], f"{name} imports the factory that assembles it"


# Which folders a folder must never import (DESIGN §14: faces -> App and the client side ->
# tasks and the engine -> the store interface <- backends). A folder is a top-level package
# of runwright; what every layer shares is core/ (the records of a run's history, questions,
# schedules, versions, the clock, waits, input checks, resilience), below all of them: it
# imports only the public face's errors and runs, and the log helper.
# Verify is a face too: it registers its tasks and fleet ops through the hooks a user
# has, so neither the engine nor the fleet (nor the built-in jobs) know of it.
FACES = {"server", "cli", "verify", "testing"}
NEVER = {
    "core": {"app", "client", "tasks", "engine", "store", "fleet", "agents", "jobs", "move", *FACES},
    "store": {"app", "client", "tasks", "engine", "fleet", "agents", "jobs", "observe", "verify", "move",
              *FACES},
    "fleet": {"app", "client", "tasks", "engine", "agents", "jobs", "verify", *FACES},
    "tasks": {"app", "client", "engine", "fleet", "jobs", "verify", *FACES},
    "engine": {"app", "client", "jobs", "verify", *FACES},
    "client": {"app", "verify", *FACES},
    "agents": {"app", "client", *FACES},
    "jobs": {"app", "client", "verify", *FACES},
    # A move reads and writes stores below the App (no engine: nothing runs during it);
    # the CLI's `runwright move` calls it, and nothing below imports it.
    "move": {"app", "client", "tasks", "engine", "fleet", "agents", "jobs", "observe", "verify", *FACES},
}


def _folder(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def test_each_folder_imports_only_the_layers_below_it():
    graph = _graph()
    for folder, never in sorted(NEVER.items()):
        crossings = sorted(f"{name} -> {target}" for name, targets in graph.items() if _folder(name) == folder
                           for target in targets if _folder(target) in never)
        assert crossings == [], f"{folder}/ imports a layer above it: {crossings}"


def test_verify_is_reached_only_by_the_app_which_registers_it_and_by_its_command():
    """The App calls verify's `hooks` (its tasks, its fleet ops), the CLI runs `runwright
    verify`: nothing else imports it, and the App nothing of it but its hooks."""
    graph = _graph()
    importers = {name: sorted(t for t in targets if _folder(t) == "verify")
                 for name, targets in graph.items() if _folder(name) != "verify"}
    importers = {name: targets for name, targets in importers.items() if targets}
    assert sorted(importers) == [f"{PACKAGE}.app", f"{PACKAGE}.cli._verifying"]
    assert importers[f"{PACKAGE}.app"] == [f"{PACKAGE}.verify._hooks"]


# The backends' folders under store/ (store.urls picks one from the URL; sql/ is what the
# two SQL backends share).
BACKEND_FOLDERS = ("postgres", "redis", "sqlite", "memory", "sql")


def test_the_fleet_reaches_its_bus_through_the_store_interface_never_a_backend():
    """The fleet asks `store.bus(root)` and speaks to `store.bus.Bus`: it never imports a
    backend's folder (a backend's bus is the backend's, chosen by the store itself)."""
    graph = _graph()
    assert "runwright.fleet._fleet" in graph
    crossings = sorted(f"{name} -> {target}" for name, targets in graph.items()
                       if name == "runwright.fleet" or name.startswith("runwright.fleet.")
                       for target in targets for backend in BACKEND_FOLDERS
                       if target == f"runwright.store.{backend}"
                       or target.startswith(f"runwright.store.{backend}."))
    assert crossings == [], f"fleet/ imports a backend: {crossings}"


def test_the_top_level_holds_the_public_face_alone():
    top = sorted(name for name, path in _modules().items()
                 if name.count(".") == 1 and path.name != "__init__.py")
    assert top == [f"{PACKAGE}.{name}" for name in ("__main__", "app", "errors", "runs")]
