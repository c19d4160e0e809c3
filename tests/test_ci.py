"""CI runs exactly the README's test command, and that command runs the whole suite in
parallel and says where the time went (docs/internals/testing.md)."""

from __future__ import annotations

import gc
import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def readme_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", (REPO / "README.md").read_text(), re.S)
    assert block is not None, "README.md starts with a bash block of the two commands"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


def test_ci_runs_exactly_the_readmes_test_command() -> None:
    install, tests = readme_commands()[:2]
    script = (REPO / ".ci" / "run").read_text().splitlines()
    commands = [line.strip() for line in script if line.strip() and not line.startswith("#")]
    assert commands[-1] == tests == "python3 -m pytest"
    assert "./scripts/install.sh" in commands and install.startswith("./scripts/install.sh")


def test_the_release_wheel_is_checked_by_the_suite_not_by_a_step_of_its_own() -> None:
    # tests/playbooks/test_controller.py builds it as a release is and installs it without
    # extras on a clean host; a serial step before the tests cost CI 1.5 minutes.
    script = (REPO / ".ci" / "run").read_text()
    assert "check_wheel" not in script
    test = (REPO / "tests" / "playbooks" / "test_controller.py").read_text()
    assert "wheelhouse.build_wheel" in test and "run --help" in test and "EXTRAS_ONLY" in test


def test_the_test_command_runs_in_parallel_and_prints_the_slowest_tests() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    opts = config["addopts"].split()
    assert "--durations=30" in opts
    assert opts[opts.index("-n") + 1].isdigit() and "--dist" in opts
    assert opts[opts.index("--dist") + 1] == "loadfile"  # module fixtures are started once
    assert any("slow" in marker for marker in config["markers"])


@pytest.mark.exhausts_stack
def test_no_garbage_collection_runs_while_a_test_exhausts_the_stack() -> None:
    # A collection at the recursion limit runs earlier tests' finalizers with no stack
    # left: unraisable RecursionErrors that fail the test (tests/conftest.py).
    assert not gc.isenabled()


def test_garbage_collection_runs_in_every_other_test() -> None:
    assert gc.isenabled()
