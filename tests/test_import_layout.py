"""The import graph of ``flight_server/`` and ``catalog/`` has no circles, and nothing below the
server imports it.

Every import statement counts, wherever it is: at the top, inside a function (a lazy import is
still a dependency) and under ``TYPE_CHECKING`` (a module that needs another's types to be
checked depends on it as much as one that calls it). What does not count is the implicit import
of a module's parent package: ``flight_server.engine.slots`` runs ``flight_server/engine/__init__``
first, which is how packages work, not a dependency of ``slots`` on the package.

Services are built by the server from the collaborators they use (``FlightSqlDeps``,
``FeedDeps``, ``HttpDeps``, ``Authorizer``, ...), so only the entry point that starts a server
(``flight_server.cli.main``) imports ``flight_server.server``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("flight_server", "catalog")
SERVER = "flight_server.server"
# Modules above the server: they start it.
MAY_IMPORT_SERVER = {"flight_server.cli.main"}


def module_files(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``packages`` under ``root``."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules (of ``modules``) it imports, by any import statement in it."""

    def resolve(name: str) -> str | None:
        while name:  # ``import a.b.c`` where only ``a.b`` is one of ours: a.b
            if name in modules:
                return name
            name = name.rpartition(".")[0]
        return None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(t for a in node.names if (t := resolve(a.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = here[: len(here) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    # ``from pkg import mod`` imports the module; ``from pkg import name`` the package.
                    full = f"{base}.{alias.name}"
                    target = full if full in modules else resolve(base)
                    if target:
                        targets.add(target)
        targets.discard(name)
        graph[name] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
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
    return found


def describe(component: list[str], graph: dict[str, set[str]]) -> str:
    inside = set(component)
    return "\n".join(f"  {m} -> {', '.join(sorted(graph[m] & inside))}" for m in component)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return import_graph(module_files(ROOT, PACKAGES))


def test_no_import_circles(graph: dict[str, set[str]]) -> None:
    found = circles(graph)
    assert not found, "import circles (module -> what it imports inside the circle):\n" + "\n\n".join(
        describe(c, graph) for c in found)


def test_nothing_below_the_server_imports_it(graph: dict[str, set[str]]) -> None:
    assert SERVER in graph
    importers = sorted(m for m, targets in graph.items() if SERVER in targets and m not in MAY_IMPORT_SERVER)
    assert not importers, (f"{importers} import {SERVER}; build the service from the collaborators it uses "
                           "(see FlightSqlDeps, FeedDeps, HttpDeps) instead of taking the server")


def test_the_walk_sees_every_kind_of_import(tmp_path: Path) -> None:
    # The checker itself: a circle through TYPE_CHECKING, a lazy import and a relative import
    # is found, and a parent package is not a dependency of its submodule.
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub import leaf\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "leaf.py").write_text("import os\n")
    (pkg / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.b import B\n")
    (pkg / "b.py").write_text("def f():\n    from . import c\n")
    (pkg / "c.py").write_text("from .a import thing\n")
    g = import_graph(module_files(tmp_path, ["pkg"]))
    assert g["pkg"] == {"pkg.sub.leaf"}
    assert g["pkg.sub.leaf"] == set()
    assert g["pkg.a"] == {"pkg.b"} and g["pkg.b"] == {"pkg.c"} and g["pkg.c"] == {"pkg.a"}
    assert circles(g) == [["pkg.a", "pkg.b", "pkg.c"]]
