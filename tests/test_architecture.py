"""Every import in autoscaler/ against the layers in autoscaler/layers.toml (DESIGN.md
"Layout"): downwards only, the never-rules, the only-rules (modules, ours or a library's,
that only some packages may import), no cycles between packages, and no import cycles
between the modules of a package."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from pathlib import Path
from typing import Any

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
ALLOWED_CYCLES = RULES.get("cycle", [])


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


# -- cycles between the modules of a package -------------------------------------------------
Where = tuple[str, int]  # file, line
ModuleGraph = Mapping[str, Mapping[str, Where]]  # module -> module it loads -> the import


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def load_time_imports(body: Iterable[ast.stmt]) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports that run when the module is imported: not those in functions (they run
    when called) nor under `if TYPE_CHECKING:` (never run); class bodies, if/try/with/match
    blocks run."""
    for st in body:
        if isinstance(st, ast.Import | ast.ImportFrom):
            yield st
        elif isinstance(st, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        elif isinstance(st, ast.If) and _type_checking(st.test):
            yield from load_time_imports(st.orelse)
        else:
            for block in ("body", "orelse", "finalbody"):
                yield from load_time_imports(getattr(st, block, None) or [])
            for branch in [*(getattr(st, "handlers", None) or []), *(getattr(st, "cases", None) or [])]:
                yield from load_time_imports(branch.body)


def loaded_modules(importer: str, name: str) -> Iterator[str]:
    """The modules of ours that importing ``name`` runs: the module and every package
    above it, except the importer's own packages (already loading when it runs)."""
    parts = name.split(".")
    for i in range(2, len(parts) + 1):
        module = ".".join(parts[:i])
        if module in MODULES and module != importer and not within(importer, module):
            yield module


def module_edges(module: str, path: Path, tree: ast.Module) -> dict[str, Where]:
    """The modules of ours that loading ``module`` (the file ``path``) loads, each with the
    first import that does it."""
    out: dict[str, Where] = {}
    for node in load_time_imports(tree.body):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) \
            else list(_from_names(node, path))
        for name in names:
            for loaded in loaded_modules(module, name):
                out.setdefault(loaded, (str(path.relative_to(REPO)), node.lineno))
    return out


def module_graph() -> dict[str, dict[str, Where]]:
    return {module: module_edges(module, path, ast.parse(path.read_text()))
            for module, path in MODULES.items()}


@dataclass(frozen=True)
class Cycle:
    modules: frozenset[str]  # every module of the group that imports each other
    path: tuple[str, ...]  # one cycle through the group's first module: a, b, ..., a


def module_cycles(graph: ModuleGraph) -> list[Cycle]:
    """Each group of modules that import each other at load time (a strongly connected
    component of two or more). Cycles between packages are refused above, so each group
    lies inside one package."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[frozenset[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, {})):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group: set[str] = set()
            while v not in group:
                group.add(stack.pop())
            if len(group) > 1:
                groups.append(frozenset(group))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return [Cycle(g, _cycle_through(graph, min(g), g)) for g in sorted(groups, key=sorted)]


def _cycle_through(graph: ModuleGraph, start: str, group: frozenset[str]) -> tuple[str, ...]:
    paths = {start: (start,)}
    todo = [start]
    while todo:  # breadth first: the shortest way back to start
        v = todo.pop(0)
        for w in sorted(graph[v]):
            if w == start:
                return (*paths[v], start)
            if w in group and w not in paths:
                paths[w] = (*paths[v], w)
                todo.append(w)
    raise AssertionError(f"{start} is in no cycle of {sorted(group)}")


def describe(graph: ModuleGraph, cycle: Cycle) -> str:
    text = "; ".join(f"{a} -> {b} ({graph[a][b][0]}:{graph[a][b][1]})" for a, b in pairwise(cycle.path))
    rest = cycle.modules - set(cycle.path)
    return text + (f" (and in the same group: {', '.join(sorted(rest))})" if rest else "")


def unexplained(graph: ModuleGraph, allowed: Iterable[Mapping[str, Any]]) -> list[str]:
    known = [frozenset(a["modules"]) for a in allowed]
    return [describe(graph, c) for c in module_cycles(graph) if c.modules not in known]


def test_no_import_cycles_between_the_modules_of_a_package():
    graph = module_graph()
    bad = unexplained(graph, ALLOWED_CYCLES)
    assert not bad, "modules that import each other when loaded:\n" + "\n".join(bad)
    found = [c.modules for c in module_cycles(graph)]
    for allowed in ALLOWED_CYCLES:
        assert allowed["why"].strip(), allowed
        assert frozenset(allowed["modules"]) in found, f"cycle no longer there, remove it: {allowed}"


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


def test_the_checker_finds_a_cycle_of_modules_loaded_at_import_time():
    # The cycle launch backoff once dodged with an import inside a function: backoff needs
    # executor.meta, loading it runs executor/__init__, which imports submit, which
    # imports backoff.
    graph = module_graph()
    assert unexplained(graph, []) == []
    backoff = "autoscaler.service.control.backoff"
    graph[backoff] = module_edges(backoff, MODULES[backoff], ast.parse(
        "from autoscaler.service.executor.meta import progress_of\n"))
    [cycle] = module_cycles(graph)
    assert cycle.path == (backoff, "autoscaler.service.executor", "autoscaler.service.executor.submit",
                          backoff)
    [line] = unexplained(graph, [])
    assert line.startswith(f"{backoff} -> autoscaler.service.executor (autoscaler/service/control/backoff.py:1)")
    assert "(autoscaler/service/executor/__init__.py:" in line and "executor/submit.py:" in line
    allowed = {"modules": [backoff, "autoscaler.service.executor", "autoscaler.service.executor.submit"],
               "why": "w"}
    assert unexplained(graph, [allowed]) == []


def test_load_time_imports_skip_functions_and_type_checking():
    source = ("import a\nif TYPE_CHECKING:\n    import b\nelse:\n    import c\n"
              "try:\n    import d\nexcept ImportError:\n    import e\n"
              "def f():\n    import g\nclass K:\n    import h\n")
    found = [n.names[0].name for n in load_time_imports(ast.parse(source).body)]  # type: ignore[union-attr]
    assert found == ["a", "c", "d", "e", "h"]


def test_a_group_of_modules_importing_each_other_is_one_cycle_naming_them_all():
    graph = {"x.a": {"x.b": ("x/a.py", 1)}, "x.b": {"x.a": ("x/b.py", 2), "x.c": ("x/b.py", 3)},
             "x.c": {"x.b": ("x/c.py", 4)}, "x.d": {"x.a": ("x/d.py", 5)}}
    [cycle] = module_cycles(graph)
    assert cycle == Cycle(frozenset({"x.a", "x.b", "x.c"}), ("x.a", "x.b", "x.a"))
    assert unexplained(graph, []) == [
        "x.a -> x.b (x/a.py:1); x.b -> x.a (x/b.py:2) (and in the same group: x.c)"]
    assert unexplained(graph, [{"modules": ["x.c", "x.b", "x.a"], "why": "w"}]) == []


def test_the_scale_scenarios_bootstrap_stand_in_is_never_part_of_the_service():
    # benchmarks/bench_scale.py replaces Ansible to run 1,000 nodes on two cores; nothing
    # the service loads may know it (issue 36: "never used outside the scale scenario").
    bench = REPO / "benchmarks" / "bench_scale.py"
    assert "class StandInBootstrap" in bench.read_text()
    package = REPO / "autoscaler"
    users = [str(p) for p in package.rglob("*.py")
             if "StandInBootstrap" in p.read_text() or "bench_scale" in p.read_text()]
    assert users == []
