"""CI runs exactly the README's test command, and that command runs the whole suite in
parallel and says where the time went (docs/testing.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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


def test_ci_installs_the_wheel_into_an_empty_environment_before_the_tests() -> None:
    # Too slow for the suite (docs/releasing.md); CI is where it runs.
    script = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert script.index("python3 scripts/check_wheel.py") < script.index("python3 -m pytest")


def test_the_test_command_runs_in_parallel_and_prints_the_slowest_tests() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    opts = config["addopts"].split()
    assert "--durations=30" in opts
    assert opts[opts.index("-n") + 1].isdigit() and "--dist" in opts
    assert opts[opts.index("--dist") + 1] == "loadfile"  # module fixtures are started once
    assert any("slow" in marker for marker in config["markers"])
