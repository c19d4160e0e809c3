"""`gpu-autoscaler --version` prints the installed version (from the git tag it was built
from, docs/internals/releasing.md) and loads no command to do it."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

from packaging.version import Version
from typer.testing import CliRunner

from autoscaler.cli import app

# Run the console script's main() for --version and print the command modules it loaded.
CODE = """
import sys
import autoscaler.cli
sys.argv = ["gpu-autoscaler", "--version"]
try:
    autoscaler.cli.main()
except SystemExit as exc:
    print("exit", exc.code)
print(sorted(set(autoscaler.cli.COMMANDS.values()) & set(sys.modules)))
"""


def test_version_prints_the_installed_distributions_version() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    name, printed = result.stdout.split()
    assert name == "gpu-autoscaler" and printed == version("gpu-autoscaler")
    Version(printed)  # PEP 440, as setuptools-scm writes it


def test_version_loads_no_command() -> None:
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[1:] == ["exit 0", "[]"]
    assert out.stdout.startswith("gpu-autoscaler ")
