"""Every import in autoscaler/ against the layers in autoscaler/layers.toml (DESIGN.md
"Layout"): downwards only, the never-rules, the only-rules (modules, ours or a library's,
that only some packages may import), no cycles between packages."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "autoscaler"
RULES = tomllib.loads((PACKAGE / "layers.toml").read_text())


def module_of(path: Path) -> list[str]:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


MODULES = {".".join(module_of(p)): p for p in PACKAGE.rglob("*.py")}


@dataclass(frozen=True)
class Edge:
    file: str  # relative to the repository
    line: int
    importer: str  # package
    module: str  # the imported module, absolute
    imported: str | None  # its package; None outside autoscaler (a library, the stdlib)

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.importer} imports {self.module}"


def _from_names(node: ast.ImportFrom, path: Path) -> Iterator[str]:
    if node.level:
        base = module_of(path)
        base = base[: len(base) - node.level + (path.name == "__init__.py")]
        parent = ".".join([*base, *([node.module] if node.module else [])])
    elif node.module:
        parent = node.module
    else:
        return
    # `from autoscaler.fleet import tables` imports the module autoscaler.fleet.tables; a
    # name that is not a module of ours is an attribute of `parent`.
    found = {f"{parent}.{a.name}" for a in node.names if f"{parent}.{a.name}" in MODULES}
    yield from sorted(found)
    if len(found) < len(node.names):
        yield parent


def imported_modules(tree: ast.AST, path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import, wherever it is (ast.walk sees function bodies and
    `if TYPE_CHECKING:` blocks alike); relative imports resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            for name in _from_names(node, path):
                yield node.lineno, name


def edges_of(tree: ast.AST, path: Path) -> list[Edge]:
    mod = module_of(path)
    out = []
    for line, name in imported_modules(tree, path):
        parts = name.split(".")
        imported = parts[1] if parts[0] == "autoscaler" and len(parts) >= 2 else None
        out.append(Edge(str(path.relative_to(REPO)), line, mod[1], name, imported))
    return out


@cache
def edges() -> list[Edge]:
    return [e for path in sorted(PACKAGE.rglob("*.py")) if len(module_of(path)) >= 2  # not autoscaler/__init__.py
            for e in edges_of(ast.parse(path.read_text()), path)]


RANK = {pkg: i for i, layer in enumerate(RULES["layers"]) for pkg in layer}
SIDEWAYS = {tuple(pair) for pair in RULES["sideways"]}
EXCEPTIONS = RULES.get("exception", [])


def within(module: str, prefix: str) -> bool:
    return (module + ".").startswith(prefix + ".")


def excepted(edge: Edge) -> bool:
    return any(e["file"] == edge.file and within(edge.module, e["imports"]) for e in EXCEPTIONS)


def why_not(edge: Edge) -> str | None:
    for rule in RULES.get("only", []):
        for module in rule["modules"]:
            if within(edge.module, module) and edge.importer not in rule["importers"]:
                return f"only {', '.join(rule['importers'])} may import {module}: {rule['why']}"
    if edge.imported is None or edge.imported == edge.importer:
        return None
    for rule in RULES["never"]:
        if edge.importer in rule["importers"] and edge.imported in rule["imported"]:
            return f"never: {rule['why']}"
    if edge.importer not in RANK or edge.imported not in RANK:
        return "a package layers.toml does not place in a layer"
    if RANK[edge.imported] > RANK[edge.importer]:
        return None
    if RANK[edge.imported] == RANK[edge.importer] and (edge.importer, edge.imported) in SIDEWAYS:
        return None
    return "imports upward" if RANK[edge.imported] < RANK[edge.importer] else "sideways, not listed"


def violations(found: Iterable[Edge]) -> list[str]:
    return [f"{e}  ({why})" for e in found if not excepted(e) and (why := why_not(e)) is not None]


def test_every_package_has_a_layer():
    packages = {module_of(p)[1] for p in PACKAGE.rglob("*.py") if len(module_of(p)) >= 2}
    assert packages - RANK.keys() == set()


def test_the_rules_name_only_packages_that_have_a_layer():
    named = {p for pair in RULES["sideways"] for p in pair}
    for rule in RULES["never"]:
        named |= {*rule["importers"], *rule["imported"]}
    for rule in RULES.get("only", []):
        named |= set(rule["importers"])
        assert rule["why"].strip() and rule["modules"], rule
    assert named - RANK.keys() == set()


def test_every_import_follows_the_layers():
    bad = violations(edges())
    assert not bad, "imports against autoscaler/layers.toml:\n" + "\n".join(bad)


def test_every_exception_is_still_needed_and_says_why():
    found = edges()
    for exc in EXCEPTIONS:
        assert exc["why"].strip(), exc
        assert any(e.file == exc["file"] and excepted(e) and why_not(e) for e in found), \
            f"exception no longer needed, remove it: {exc}"


def test_no_cycles_between_packages():
    graph: dict[str, set[str]] = {}
    for e in edges():
        if e.imported is not None and e.imported != e.importer:
            graph.setdefault(e.importer, set()).add(e.imported)
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(pkg: str, path: list[str]) -> list[str] | None:
        state[pkg] = 1
        for nxt in sorted(graph.get(pkg, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt):], nxt] if nxt in path else [*path, nxt]
            if nxt not in state and (cycle := visit(nxt, [*path, nxt])):
                return cycle
        state[pkg] = 2
        return None

    for pkg in sorted(graph):
        if pkg not in state:
            cycle = visit(pkg, [pkg])
            assert cycle is None, " -> ".join(cycle)


# -- the checker itself ------------------------------------------------------------------------
def test_the_checker_sees_function_level_and_type_checking_imports():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from autoscaler.sim import run\n"
              "def f():\n    import autoscaler.sandbox.hosts.procs\n    from . import sibling\n")
    path = PACKAGE / "engine" / "example.py"
    found = sorted(imported_modules(ast.parse(source), path))
    assert found == [(1, "typing"), (3, "autoscaler.sim.run"), (5, "autoscaler.sandbox.hosts.procs"),
                     (6, "autoscaler.engine")]
    edge = Edge("autoscaler/engine/example.py", 3, "engine", "autoscaler.sim", "sim")
    reason = why_not(edge)
    assert reason is not None and reason.startswith("never")


def test_the_checker_reports_sqlalchemy_and_the_tables_outside_fleet_with_file_and_line():
    source = ("import sqlalchemy.orm\nfrom sqlalchemy import select\n"
              "from autoscaler.fleet import queries, tables\nfrom autoscaler.fleet.tables import NodeRow\n")
    tree = ast.parse(source)
    bad = violations(edges_of(tree, PACKAGE / "service" / "example.py"))
    assert [line.split("  (")[0] for line in bad] == [
        "autoscaler/service/example.py:1: service imports sqlalchemy.orm",
        "autoscaler/service/example.py:2: service imports sqlalchemy",
        "autoscaler/service/example.py:3: service imports autoscaler.fleet.tables",
        "autoscaler/service/example.py:4: service imports autoscaler.fleet.tables"]
    assert all("only fleet may import" in line for line in bad)
    assert violations(edges_of(tree, PACKAGE / "fleet" / "example.py")) == []
    # The listed exception covers its file only.
    submit = PACKAGE / "service" / "executor" / "submit.py"
    assert violations(edges_of(tree, submit)) == [line.replace("example.py", "executor/submit.py")
                                                  for line in bad[:2]]
