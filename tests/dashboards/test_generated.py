"""The committed dashboards, provisioning file and alert rules are the generators' output,
and promtool accepts the rules and passes their unit tests."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.dashboards.alerts import Thresholds, alert_names, rules_yaml
from autoscaler.dashboards.panels import DASHBOARDS
from autoscaler.dashboards.provisioning import REPO_DASHBOARDS, provisioning_yaml
from autoscaler.dashboards.render import render_all

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
REGENERATE = "run `gpu-autoscaler dashboards render` and commit the result"


def test_committed_dashboards_equal_the_generator_output():
    rendered = render_all()
    committed = {p.name: p.read_text() for p in (ROOT / "dashboards").glob("*.json")}
    assert set(committed) == set(rendered), REGENERATE
    for name, text in rendered.items():
        assert committed[name] == text, f"{name} differs: {REGENERATE}"
    assert REPO_DASHBOARDS == ROOT / "dashboards"
    assert (ROOT / "dashboards/provisioning.yaml").read_text() == provisioning_yaml(), REGENERATE


def test_every_panel_is_rendered_with_its_queries_and_the_datasource_variable():
    for spec in DASHBOARDS:
        doc = json.loads((ROOT / "dashboards" / f"{spec.uid}.json").read_text())
        assert doc["uid"] == spec.uid and doc["title"] == spec.title
        assert [p["title"] for p in doc["panels"]] == [p.title for p in spec.panels]
        for panel, want in zip(doc["panels"], spec.panels, strict=True):
            assert [t["expr"] for t in panel["targets"]] == [x.expr for x in want.queries]
            assert panel["datasource"]["uid"] == "${datasource}"
        names = [v["name"] for v in doc["templating"]["list"]]
        assert names == ["datasource", *spec.variables]


def test_committed_rules_equal_the_generator_output_and_promtool_checks_them():
    assert (ALERTS / "gpu-autoscaler.rules.yml").read_text() == rules_yaml(), \
        "run `gpu-autoscaler dashboards alerts > alerts/gpu-autoscaler.rules.yml`"
    check = subprocess.run(["promtool", "check", "rules", "gpu-autoscaler.rules.yml"], cwd=ALERTS,
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in check.stdout


def test_promtool_unit_tests_pass_and_cover_every_alert():
    run = subprocess.run(["promtool", "test", "rules", "tests.yml"], cwd=ALERTS,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    tested = (ALERTS / "tests.yml").read_text()
    untested = [a for a in alert_names() if f"alertname: {a}" not in tested]
    assert untested == []


def test_thresholds_are_overridden_by_name_with_their_type():
    t = Thresholds().with_overrides({"stuck_for": "30m", "interruptions": "5", "stuck_ratio": "2"})
    assert (t.stuck_for, t.interruptions, t.stuck_ratio) == ("30m", 5, 2.0)
    assert "increase(gpu_autoscaler_interruptions_total[10m])) >= 5" in rules_yaml(t)
    with pytest.raises(ValueError, match="unknown threshold"):
        Thresholds().with_overrides({"bogus": "1"})


def test_the_service_never_imports_grafanas_sdk():
    code = ("import sys, autoscaler.cli, autoscaler.service.app; "
            "sys.exit('grafana_foundation_sdk' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], timeout=120).returncode == 0


def test_the_cli_prints_the_provisioning_snippet(tmp_path):
    from typer.testing import CliRunner

    from autoscaler.cli import app

    result = CliRunner().invoke(app, ["dashboards", "provisioning", "--path", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert result.output == provisioning_yaml(tmp_path)
    assert f"path: {tmp_path}" in result.output
