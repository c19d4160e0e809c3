"""The project's static checks run with the tests, so CI enforces them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from autoscaler.sandbox.hosts.node_image import cache_dir

REPO = Path(__file__).resolve().parents[1]
# Outside the checkout, as pip's and the node images' caches are: a fresh clone checks only
# what changed (mypy compares each file's hash with its cache; ~45 CPU-seconds without).
MYPY_CACHE = cache_dir().parent / f"mypy-py{sys.version_info.major}.{sys.version_info.minor}"


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=600)


def test_ruff_is_clean():
    result = run("ruff", "check", "autoscaler", "tests", "benchmarks")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_is_clean_where_types_matter():
    """The engine and policy, the shared model, and the adapters checked against their
    Protocols (clouds, actuators, scheduler clients, the service and its executor), and the
    simulator the benchmarks measure with."""
    result = run("mypy", "--cache-dir", str(MYPY_CACHE), "autoscaler/engine", "autoscaler/policy", "autoscaler/model", "autoscaler/schedulers",
                 "autoscaler/clouds", "autoscaler/actuators", "autoscaler/service", "autoscaler/sim")
    assert result.returncode == 0, result.stdout + result.stderr

