"""Every malformed or hostile file of tests/hostile_files.py, through the CLI command that
reads it: exit 1, the file and line named, no traceback. (Timings for a 1 MB file are
measured by benchmarks/bench_hostile.py, not asserted here.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from tests.hostile_files import REPO, Case, all_cases, command, place

runner = CliRunner()


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("case", all_cases(), ids=lambda c: f"{c.kind}-{c.name}")
def test_refused_with_file_and_line_and_exit_1(case: Case, tmp_path: Path) -> None:
    path = place(case, tmp_path)
    result = runner.invoke(app, command(case, path, REPO / "policies"))
    out = " ".join(result.output.split())  # rich wraps long lines
    assert result.exit_code == 1, out
    assert isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    found = re.search(re.escape(str(path)) + r":(\d+)", out)
    assert found, out
    if case.line is not None:
        assert int(found.group(1)) == case.line, out
