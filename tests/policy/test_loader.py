"""Policy files: every error, with file:line:column, key path and a plain reason."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.policy import load_dir, load_file
from autoscaler.policy.duration import format_duration, parse_duration

REPO = Path(__file__).resolve().parents[2]
CATALOG = default_catalog()

GOOD = """\
apiVersion: gpu-autoscaler/v1
team: vision
pools:
  - name: train
    cloud: aws
    region: us-east-1
    instance_types: [p3.2xlarge]
    max_nodes: 4
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_example_policies_validate():
    policies, errors = load_dir(REPO / "policies", CATALOG)
    assert errors == []
    assert {p.priority.value for p in policies.values()} == {"high", "medium", "low"}
    clouds = {pool.cloud.value for p in policies.values() for pool in p.pools}
    assert clouds == {"aws", "alicloud"}


def test_defaults_match_the_documented_ones(tmp_path):
    policy, errors = load_file(write(tmp_path, "v.yaml", GOOD), CATALOG)
    assert errors == [] and policy is not None
    pool = policy.pools[0]
    assert pool.scale_up.gpu_utilization_above == 80 and pool.scale_up.window == timedelta(minutes=5)
    assert pool.scale_down.gpu_utilization_below == 10 and pool.scale_down.idle_for == timedelta(minutes=15)
    assert policy.priority.value == "medium" and pool.capacity.spot_fallback == "on-demand"


def test_unknown_key_has_position_and_suggestion(tmp_path):
    text = GOOD + "    scale_up: {windw: 5m}\n"
    _, errors = load_file(write(tmp_path, "v.yaml", text), CATALOG)
    (err,) = errors
    assert (err.line, err.column) == (9, 16)
    assert err.path == "pools[0].scale_up.windw"
    assert "did you mean 'window'?" in err.message
    assert str(err).startswith(f"{tmp_path / 'v.yaml'}:9:16: pools[0].scale_up.windw:")


def test_every_error_is_listed(tmp_path):
    text = """\
team: Vision_Team
pools:
  - name: a
    cloud: gcp
    region: us-east-1
    instance_types: [p3.2xlarge]
    max_nodes: -1
    scale_down: {idle_for: 15 minutes}
    schedule: [{cron: "0 8 * * MON", min_nodes: 2}]
"""
    _, errors = load_file(write(tmp_path, "v.yaml", text), CATALOG)
    by_path = {e.path: e for e in errors}
    assert set(by_path) == {"team", "pools[0].cloud", "pools[0].max_nodes", "pools[0].scale_down.idle_for",
                            "pools[0].schedule[0].duration"}
    assert "hostname" in by_path["team"].message and by_path["team"].line == 1
    assert by_path["pools[0].cloud"].line == 4
    assert "'15 minutes' is not a duration" in by_path["pools[0].scale_down.idle_for"].message
    assert by_path["pools[0].schedule[0].duration"].message == "required key is missing"


@pytest.mark.parametrize(
    ("extra", "path", "needle"),
    [
        ("    min_nodes: 5\n", "pools[0].min_nodes", "above max_nodes"),
        ("    capacity: {on_demand_base: 9}\n", "pools[0].capacity.on_demand_base", "above max_nodes"),
        ("    scale_down: {gpu_utilization_below: 85}\n", "pools[0].scale_down.gpu_utilization_below",
         "must be below the scale-up threshold"),
        ("    scale_up: {gpu_utilization_above: 120}\n", "pools[0].scale_up.gpu_utilization_above",
         "less than or equal to 100"),
        ("    schedule: [{cron: '61 * * * *', min_nodes: 1, duration: 1h}]\n", "pools[0].schedule[0].cron",
         "minute field '61' is outside 0-59"),
        ("    zones: [us-west-2a]\n", "pools[0].zones[0]", "not in region"),
        ("    zones: [us-east-1a, us-east-1b]\n    capacity: {spot_scarcity: {zones: 3}}\n",
         "pools[0].capacity.spot_scarcity.zones", "more than the pool's 2 zones"),
        ("    capacity: {spot_scarcity: {zones: 2, within: 3h}}\n",
         "pools[0].capacity.spot_scarcity.within", "3h is not between 1m and 2h"),
        ("    capacity: {spot_percent: 0, spot_scarcity: {zones: 1}}\n",
         "pools[0].capacity.spot_scarcity", "the pool launches no spot"),
    ],
)
def test_cross_field_checks(tmp_path, extra, path, needle):
    _, errors = load_file(write(tmp_path, "v.yaml", GOOD + extra), CATALOG)
    assert [(e.path, needle in e.message) for e in errors] == [(path, True)]


def test_instance_type_must_exist_for_the_cloud(tmp_path):
    text = GOOD.replace("[p3.2xlarge]", "[p3.2xlarge, ecs.gn6i-c4g1.xlarge]")
    _, errors = load_file(write(tmp_path, "v.yaml", text), CATALOG)
    (err,) = errors
    assert err.path == "pools[0].instance_types[1]" and "not a aws instance type" in err.message
    assert (err.line, err.column) == (7, 34)


def test_duplicate_pool_and_team_names(tmp_path):
    pool = GOOD.split("pools:\n")[1]
    write(tmp_path, "a.yaml", GOOD + pool)
    write(tmp_path, "b.yaml", GOOD.replace("pools:", "priority: low\npools:"))
    _, errors = load_dir(tmp_path, CATALOG)
    messages = sorted(str(e) for e in errors)
    assert any("a.yaml:9:" in m and "already used by pools[0]" in m for m in messages)
    assert any("b.yaml:2:7: team: team 'vision' is already defined in" in m for m in messages)


def test_yaml_syntax_error_points_at_the_line(tmp_path):
    _, errors = load_file(write(tmp_path, "v.yaml", GOOD + "  - name: [unclosed\n"), CATALOG)
    (err,) = errors
    assert err.line >= 9 and "not valid YAML" in err.message


@pytest.mark.parametrize(("text", "seconds"), [("90s", 90), ("15m", 900), ("48h", 172800), ("1h30m", 5400),
                                                ("2d", 172800), (30, 30)])
def test_durations(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


def test_duration_round_trip():
    assert format_duration(timedelta(seconds=5400)) == "1h30m"
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration("5 minutes")


@pytest.mark.parametrize(("section", "key", "floor", "below"), [
    ("scale_up", "cooldown", "1s", "0s"), ("scale_down", "cooldown", "1s", "500ms"),
    ("scale_down", "drain_timeout", "30s", "29s"), ("lifetime", "max_node_age", "1h", "59m59s"),
])
def test_durations_whose_zero_meant_none_have_a_floor(tmp_path, section, key, floor, below):
    ok, _ = load_file(write(tmp_path, "ok.yaml", GOOD + f"    {section}: {{{key}: {floor}}}\n"), CATALOG)
    assert ok is not None and getattr(getattr(ok.pools[0], section), key) == parse_duration(floor)
    policy, errors = load_file(write(tmp_path, "low.yaml", GOOD + f"    {section}: {{{key}: {below}}}\n"),
                               CATALOG)
    (err,) = errors
    assert policy is None and err.line == 9 and err.path == f"pools[0].{section}.{key}"
    assert f"is shorter than {floor}" in err.message
