"""What an install of the wheel gets: every distribution the code imports is declared, the
extras' ones only where their feature lives, and every runtime dependency is bounded so a
new major release cannot change an install unseen. The wheel itself is built as a release is
and installed without extras into a new virtual environment on a clean host by
tests/playbooks/test_controller.py (docs/internals/releasing.md)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions, version
from pathlib import Path

from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
RUNTIME = [Requirement(r) for r in PROJECT["dependencies"]]
EXTRAS = {name: [Requirement(r) for r in reqs] for name, reqs in PROJECT["optional-dependencies"].items()}

# Distributions that only an extra installs -> (the extra, the only code that may import them).
EXTRA_ONLY = {
    "matplotlib": ("plots", ("autoscaler/sim/plots.py",)),
    "grafana-foundation-sdk": ("dashboards", ("autoscaler/dashboards/",)),
    "moto": ("test", ("autoscaler/sandbox/",)),  # the sandbox's AWS (demo and tests)
}


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_distributions() -> dict[str, set[str]]:
    """Distribution -> the files of autoscaler/ that import it (anywhere in the file)."""
    owners = packages_distributions()
    found: dict[str, set[str]] = {}
    for path in sorted((REPO / "autoscaler").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                tops = [alias.name.split(".")[0] for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                tops = [node.module.split(".")[0]]
            else:
                continue
            for top in tops:
                if top in sys.stdlib_module_names or top == "autoscaler":
                    continue
                dists = owners.get(top)
                assert dists, f"{path.relative_to(REPO)}:{node.lineno}: {top} is installed by no distribution"
                for dist in dists:
                    found.setdefault(normal(dist), set()).add(str(path.relative_to(REPO)))
    return found


def test_every_imported_distribution_is_declared_and_extras_stay_in_their_modules() -> None:
    runtime = {normal(r.name) for r in RUNTIME}
    problems = []
    for dist, files in imported_distributions().items():
        if dist in runtime:  # declared: usable anywhere
            continue
        if dist not in EXTRA_ONLY:
            problems.append(f"{dist}: imported by {sorted(files)} but not a runtime dependency")
            continue
        extra, allowed = EXTRA_ONLY[dist]
        if dist not in {normal(r.name) for r in EXTRAS[extra]}:
            problems.append(f"{dist}: not in the {extra!r} extra")
        problems += [f"{f}: imports {dist} (the {extra!r} extra), allowed only in {allowed}"
                     for f in sorted(files) if not f.startswith(allowed)]
    assert not problems, "\n".join(problems)


def test_runtime_dependencies_have_a_floor_and_a_ceiling() -> None:
    unbounded = [str(r) for r in RUNTIME
                 if not any(s.operator in (">=", "==", "~=") for s in r.specifier)
                 or not any(s.operator in ("<", "==", "~=") for s in r.specifier)]
    assert not unbounded, f"bound these (>=floor,<next major): {unbounded}"


def test_matplotlib_is_only_the_plots_extra() -> None:
    assert "matplotlib" not in {normal(r.name) for r in RUNTIME}
    assert [r.name for r in EXTRAS["plots"]] == ["matplotlib"]
    assert "gpu-autoscaler[plots]" in PROJECT["optional-dependencies"]["test"]  # CI draws the plots


def test_the_versions_tested_here_are_within_the_bounds() -> None:
    """The suite runs with what is installed: it must be what the bounds allow."""
    outside = [f"{r.name} {version(r.name)} not in {r.specifier}"
               for r in [*RUNTIME, *EXTRAS["plots"], *EXTRAS["test"]]
               if normal(r.name) != "gpu-autoscaler" and not r.specifier.contains(version(r.name), prereleases=True)]
    assert not outside, outside
