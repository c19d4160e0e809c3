"""`gpu-autoscaler plan` says what the engine did not buy and why a placement won: pending
jobs no pool can run and each placement choice's reason, in the terminal and in Markdown."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.cli.plan_render import preview_markdown
from autoscaler.cli.render import placements_table, unserved_table
from autoscaler.model.plan import PlacementChoice, Plan

REPO = Path(__file__).resolve().parents[2]
UNSERVED = {"id": "ml/resnet-7", "team": "vision", "constraint": "taint gpu=a100:NoSchedule",
            "reason": "no pool's nodes could run it: vision/v100-train: taint gpu=a100:NoSchedule "
                      "not tolerated"}
WHY = "vision/east chosen: it fits on capacity already there or on its way"
CHOICE = PlacementChoice(job="j1", pool="vision/east", listed_under="vision/east",
                         compared=["vision/east", "vision/west"], reason=f"job j1: {WHY}")


@pytest.mark.parametrize("markdown", [False, True])
def test_plan_names_each_pending_job_no_pool_can_run_with_its_why(tmp_path, markdown):
    doc = json.loads((REPO / "examples" / "snapshot.json").read_text())
    doc["snapshot"]["unserved"] = [UNSERVED]
    (tmp_path / "in.json").write_text(json.dumps(doc))
    args = ["plan", "--snapshot", str(tmp_path / "in.json"), "--policies", str(REPO / "policies")]
    result = CliRunner().invoke(app, args + (["--markdown"] if markdown else []),
                                env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    if markdown:
        assert "### Pending jobs no pool can run" in result.output
        assert f"- `ml/resnet-7` (team vision): {UNSERVED['reason']}" in result.output
    else:
        assert "Pending jobs no pool can run (not bought for)" in result.output
        assert "ml/resnet-7" in result.output and UNSERVED["reason"] in result.output


def test_no_unserved_table_when_every_job_has_a_pool():
    assert unserved_table(Plan(decided_at=datetime(2026, 11, 30, tzinfo=UTC))) is None


def test_a_placement_choice_is_shown_with_its_reason():
    plan = Plan(decided_at=datetime(2026, 11, 30, tzinfo=UTC), placements=[CHOICE])
    table = placements_table(plan)
    assert table is not None
    console = Console(record=True, width=400)
    console.print(table)
    assert WHY in console.export_text()
    text = preview_markdown(plan, None)
    assert f"- `j1` -> `vision/east`: vision/east; vision/west\n  - why: {WHY}\n" in text
