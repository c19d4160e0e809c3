"""``gpu-autoscaler apply --pool``: a pool that was never planned (a typo) is refused with
the planned ones named, and nothing is applied; a planned pool without a saved plan has
nothing to apply. (Applying real plans: test_plan_terraform.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from tests.hostile_answers import one_line_refusal

runner = CliRunner()


@pytest.fixture
def settings(tmp_path: Path) -> Path:
    workdir = tmp_path / "tf"
    for workspace in (workdir / "vision" / "v100", workdir / "search" / "t4" / "shards" / "1"):
        workspace.mkdir(parents=True)
        (workspace / "main.tf.json").write_text("{}")
    path = tmp_path / "settings.yaml"
    path.write_text(f"workdir: {workdir}\n")
    return path


@pytest.mark.parametrize("pool", ["vision/v10", "garbage"])
def test_a_pool_never_planned_is_refused_naming_the_planned_ones(settings, pool):
    result = runner.invoke(app, ["apply", "--settings", str(settings), "--pool", "vision/v100",
                                 "--pool", pool])
    assert one_line_refusal(result.exit_code, result.output), result.output
    out = " ".join(result.output.split())
    assert f"--pool {pool}: no such pool planned" in out
    assert "pools planned there: search/t4, vision/v100" in out


def test_a_planned_pool_without_a_saved_plan_has_nothing_to_apply(settings):
    result = runner.invoke(app, ["apply", "--settings", str(settings), "--pool", "search/t4"])
    assert result.exit_code == 0, result.output
    assert "nothing to apply" in result.output
