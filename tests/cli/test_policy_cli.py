"""`gpu-autoscaler policy validate|schema` and `plan` from a recorded snapshot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app

REPO = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_validate_example_policies_exits_zero():
    result = runner.invoke(app, ["policy", "validate", str(REPO / "policies")])
    assert result.exit_code == 0, result.output
    assert "3 team(s)" in result.output


def test_validate_lists_every_error_and_exits_one(tmp_path):
    (tmp_path / "a.yaml").write_text("team: a\npools:\n  - name: p\n    cloud: aws\n    region: us-east-1\n"
                                     "    instance_types: [p3.2xlarge]\n    max_nodes: 1\n    scale_up: {windw: 5m}\n")
    (tmp_path / "b.yaml").write_text("team: B\npools: []\n")
    result = runner.invoke(app, ["policy", "validate", str(tmp_path)])
    assert result.exit_code == 1
    out = result.output
    assert "a.yaml:8:16: pools[0].scale_up.windw: unknown key 'windw'; did you mean 'window'?" in out
    assert "b.yaml:1:7: team:" in out and "b.yaml:2:8: pools:" in out
    assert "3 error(s) in 2 of 2 file(s)" in out


def test_schema_is_json():
    result = runner.invoke(app, ["policy", "schema"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["title"] == "gpu-autoscaler team policy"


def test_plan_from_the_example_snapshot_as_json():
    result = runner.invoke(app, ["plan", "--snapshot", str(REPO / "examples/snapshot.json"),
                                 "--policies", str(REPO / "policies"),
                                 "--prices", str(REPO / "examples/prices-alicloud.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)["plan"]
    kinds = {a["kind"] for a in plan["actions"]}
    assert {"launch", "replace", "report_job"} <= kinds
    assert all(a["reason"] for a in plan["actions"])


def test_plan_table_shows_reasons():
    result = runner.invoke(app, ["plan", "--snapshot", str(REPO / "examples/snapshot.json"),
                                 "--policies", str(REPO / "policies"),
                                 "--prices", str(REPO / "examples/prices-alicloud.yaml")],
                           env={"COLUMNS": "160"})
    assert result.exit_code == 0, result.output
    assert "unhealthy (2 GPU(s)" in result.output and "Pools after this plan" in result.output


def test_plan_refuses_a_broken_snapshot_clearly(tmp_path):
    bad = tmp_path / "s.json"
    bad.write_text('{"now": "yesterday", "snapshot": {}}')
    result = runner.invoke(app, ["plan", "--snapshot", str(bad), "--policies", str(REPO / "policies")])
    assert result.exit_code == 1
    assert "is not a valid snapshot" in result.output and "now" in result.output


@pytest.mark.slow  # a new process that imports every command's module for the list
def test_console_script_help_explains_itself():
    out = subprocess.run([sys.executable, "-m", "autoscaler.cli", "--help"], capture_output=True, text=True,
                         check=True).stdout
    assert "Keeps a cloud GPU fleet the right size" in out
    for sub in (["policy", "--help"], ["plan", "--help"]):
        result = runner.invoke(app, sub)
        assert result.exit_code == 0 and len(result.output) > 200


def test_validate_fails_when_the_directory_holds_no_policy_file(tmp_path):
    (tmp_path / "notes.txt").write_text("not a policy\n")
    result = runner.invoke(app, ["policy", "validate", str(tmp_path)])
    assert result.exit_code == 1
    assert f"no policy file (*.yaml, *.yml) found in {tmp_path}" in " ".join(result.stderr.split())


def test_validate_given_a_file_asks_for_the_directory(tmp_path):
    path = tmp_path / "a.yaml"
    path.write_text("team: a\npools: []\n")
    result = runner.invoke(app, ["policy", "validate", str(path)])
    assert result.exit_code == 1
    assert "is a file: give the directory of team policy files" in " ".join(result.stderr.split())


def test_prices_file_yaml_error_is_one_located_line(tmp_path):
    bad = tmp_path / "prices.yaml"
    bad.write_text("prices:\n  aws: [1, 2\n  x: {\n")
    result = runner.invoke(app, ["policy", "validate", str(REPO / "policies"), "--prices", str(bad)])
    assert result.exit_code == 1
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {bad}:3:4: not valid YAML: "), result.stderr
