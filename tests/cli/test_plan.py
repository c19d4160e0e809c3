"""``gpu-autoscaler plan`` refuses bad input in one line before reading anything, exits
as its help says (``--detailed-exitcode``: 2 for changes), and ``--config`` creates no
store. In process (CliRunner); the live reads go only to 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autoscaler.cli import app
from tests.hostile_answers import one_line_refusal

runner = CliRunner()


def policy(min_nodes: int) -> str:
    return f"""\
apiVersion: gpu-autoscaler/v1
team: vision
pools:
  - name: v100
    cloud: aws
    region: us-east-1
    instance_types: [g4dn.xlarge]
    min_nodes: {min_nodes}
    max_nodes: 4
"""


SNAPSHOT = {"now": "2026-11-30T12:00:00Z", "fleet": {"nodes": []},
            "snapshot": {"taken_at": "2026-11-30T12:00:00Z"}}


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "vision.yaml").write_text(policy(min_nodes=2))
    (tmp_path / "snapshot.json").write_text(json.dumps(SNAPSHOT))
    return tmp_path


def config(root: Path, store: str) -> Path:
    path = root / "config.yaml"
    path.write_text(f"policies_dir: {root / 'policies'}\nstore: {{url: '{store}'}}\n"
                    "clouds: {market_prices: false}\n")
    return path


def snapshot_args(root: Path) -> list[str]:
    return ["plan", "--snapshot", str(root / "snapshot.json"), "--policies", str(root / "policies")]


@pytest.mark.parametrize(("flags", "exit_code"), [([], 0), (["--detailed-exitcode"], 2)])
def test_a_plan_with_changes_exits_2_only_with_detailed_exitcode(files, flags, exit_code):
    result = runner.invoke(app, [*snapshot_args(files), "--json", *flags])
    assert result.exit_code == exit_code, result.output
    assert [a["kind"] for a in json.loads(result.stdout)["plan"]["actions"]] == ["launch", "launch"]


def test_a_plan_without_changes_exits_0_with_detailed_exitcode(files):
    (files / "policies" / "vision.yaml").write_text(policy(min_nodes=0))
    result = runner.invoke(app, [*snapshot_args(files), "--detailed-exitcode"])
    assert result.exit_code == 0, result.output
    assert "No changes" in result.output


@pytest.mark.parametrize(("flag", "value"), [("--max-gpus", "-5"), ("--max-hourly-usd", "nan"),
                                              ("--max-hourly-usd", "-1")])
def test_a_bad_global_cap_is_refused_in_one_line(files, flag, value):
    result = runner.invoke(app, [*snapshot_args(files), flag, value])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert f"{flag} {value}" in result.output


@pytest.mark.parametrize("command", ["plan", "apply"])
def test_settings_that_are_not_yaml_are_one_located_line(files, command):
    bad = files / "bad.yaml"
    bad.write_text("a: [1, 2\nb: {")
    argv = snapshot_args(files) if command == "plan" else ["apply"]
    result = runner.invoke(app, [*argv, "--settings", str(bad)])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert f"{bad}:2:2: expected ',' or ']'" in " ".join(result.output.split())


def test_live_plan_creates_no_store_and_plans_from_an_empty_fleet(files):
    store = files / "typo" / "fleet.db"
    result = runner.invoke(app, ["plan", "--config", str(config(files, f"sqlite:///{store}")),
                                 "--json", "--detailed-exitcode"])
    assert result.exit_code == 2, result.output
    assert f"the store {store} does not exist (it is not created)" in result.stderr
    kinds = [a["kind"] for a in json.loads(result.stdout)["plan"]["actions"]]
    assert kinds.count("launch") == 2, kinds
    assert not store.exists() and not store.parent.exists()


def test_an_unreachable_store_is_one_line(files):
    cfg = config(files, "postgresql+psycopg://u@127.0.0.1:9/db")
    result = runner.invoke(app, ["plan", "--config", str(cfg)])
    assert one_line_refusal(result.exit_code, result.output), result.output
    assert "cannot open the store postgresql+psycopg://u@127.0.0.1:9/db" in result.output


def test_save_input_that_cannot_be_written_is_refused_before_the_live_read(files):
    cfg = config(files, f"sqlite:///{files / 'fleet.db'}")  # would print a note if read
    for target in (files / "none" / "x.json", files / "snapshot.json" / "x.json"):
        result = runner.invoke(app, ["plan", "--config", str(cfg), "--save-input", str(target)])
        assert one_line_refusal(result.exit_code, result.output), result.output
        assert f"cannot write {target}: no directory {target.parent}" in result.output
