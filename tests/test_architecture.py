"""Every import in autoscaler/ against the layers in autoscaler/layers.toml (DESIGN.md
"Layout"): downwards only, the never-rules, no cycles between packages."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "autoscaler"
RULES = tomllib.loads((PACKAGE / "layers.toml").read_text())


@dataclass(frozen=True)
class Edge:
    file: str  # relative to the repository
    line: int
    importer: str  # package
    module: str  # the imported module, absolute
    imported: str  # its package

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.importer} imports {self.module}"


def module_of(path: Path) -> list[str]:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def imported_modules(tree: ast.AST, path: Path) -> Iterator[tuple[int, str]]:
    """(line, module) of every import, wherever it is (ast.walk sees function bodies and
    `if TYPE_CHECKING:` blocks alike); relative imports resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module_of(path)
                base = base[: len(base) - node.level + (path.name == "__init__.py")]
                yield node.lineno, ".".join([*base, *([node.module] if node.module else [])])
            elif node.module:
                yield node.lineno, node.module


@cache
def edges() -> list[Edge]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mod = module_of(path)
        if len(mod) < 2:
            continue  # autoscaler/__init__.py
        for line, name in imported_modules(ast.parse(path.read_text()), path):
            parts = name.split(".")
            if parts[0] != "autoscaler" or len(parts) < 2 or parts[1] == mod[1]:
                continue
            out.append(Edge(str(path.relative_to(REPO)), line, mod[1], name, parts[1]))
    return out


RANK = {pkg: i for i, layer in enumerate(RULES["layers"]) for pkg in layer}
SIDEWAYS = {tuple(pair) for pair in RULES["sideways"]}
EXCEPTIONS = RULES.get("exception", [])


def excepted(edge: Edge) -> bool:
    return any(e["file"] == edge.file and (edge.module + ".").startswith(e["imports"] + ".")
               for e in EXCEPTIONS)


def why_not(edge: Edge) -> str | None:
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


def test_every_package_has_a_layer():
    packages = {module_of(p)[1] for p in PACKAGE.rglob("*.py") if len(module_of(p)) >= 2}
    assert packages - RANK.keys() == set()


def test_every_import_follows_the_layers():
    bad = [f"{e}  ({why})" for e in edges() if not excepted(e) and (why := why_not(e)) is not None]
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


def test_the_checker_sees_function_level_and_type_checking_imports():
    source = ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from autoscaler.sim import run\n"
              "def f():\n    import autoscaler.sandbox.hosts.procs\n    from . import sibling\n")
    path = PACKAGE / "engine" / "example.py"
    found = sorted(imported_modules(ast.parse(source), path))
    assert found == [(1, "typing"), (3, "autoscaler.sim"), (5, "autoscaler.sandbox.hosts.procs"),
                     (6, "autoscaler.engine")]
    edge = Edge("autoscaler/engine/example.py", 3, "engine", "autoscaler.sim", "sim")
    reason = why_not(edge)
    assert reason is not None and reason.startswith("never")
