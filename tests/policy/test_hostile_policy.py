"""Generated garbage and out-of-range values in team policy files (hypothesis).

Whatever the bytes, loading a file never raises and every error names a line; and whatever
validation accepts, decide() can use: a policy that passes never makes the engine raise.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.model.node import FleetView
from autoscaler.policy import load_dir, load_file
from tests.builders import snapshot
from tests.hostile_files import GOOD_POLICY, Case, policy_cases

CATALOG = default_catalog()
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
FAST = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _load(tmp_path: Path, data: bytes) -> tuple[Any, list[Any]]:
    path = tmp_path / "team.yaml"
    path.write_bytes(data)
    policy, errors = load_file(path, CATALOG)
    for err in errors:
        assert err.file == str(path) and err.line >= 1 and err.column >= 1 and err.message
    assert (policy is None) == bool(errors)
    return policy, errors


@FAST
@given(data=st.binary(max_size=4000))
def test_random_bytes_never_raise(tmp_path: Path, data: bytes) -> None:
    _load(tmp_path, data)


@FAST
@given(prefix=st.integers(0, len(GOOD_POLICY)), noise=st.text(max_size=200))
def test_a_good_file_with_text_spliced_in_never_raises(tmp_path: Path, prefix: int, noise: str) -> None:
    text = GOOD_POLICY[:prefix] + noise + GOOD_POLICY[prefix:]
    _load(tmp_path, text.encode("utf-8", errors="surrogatepass"))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=40)


@pytest.mark.exhausts_stack
@FAST
@given(doc=JSON, depth=st.integers(0, 400))
def test_nested_documents_never_raise(tmp_path: Path, doc: Any, depth: int) -> None:
    for _ in range(depth):
        doc = [doc]
    # JSON is YAML; non-finite floats are written as YAML's .nan/.inf.
    text = json.dumps(doc).replace("NaN", ".nan").replace("-Infinity", "-.inf")
    _load(tmp_path, text.replace("Infinity", ".inf").encode())


NUMBER = (st.integers(-10**30, 10**30) | st.floats() | st.booleans() | st.text(max_size=6)
          | st.sampled_from(["1e999", ".nan", ".inf", "-1", "0", "3000000d", "1e9s"]))
DURATION = st.text(alphabet="0123456789.smhdw", min_size=1, max_size=10) | NUMBER
CRON_FIELD = st.sampled_from(["*", "0", "59", "60", "31", "29", "30", "2", "*/7", "1-5", "MON",
                              "FEB", "L", "?", "0,30", "7", "*/99999999999", "59-0", "*/0"])


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("case", policy_cases(), ids=lambda c: c.name)
def test_every_hostile_file_is_refused_at_its_line(tmp_path: Path, case: Case) -> None:
    policy, errors = _load(tmp_path, case.data)
    assert policy is None and errors
    if case.line is not None:
        assert min(e.line for e in errors) == case.line, [str(e) for e in errors[:3]]


@st.composite
def pools(draw: st.DrawFn) -> str:
    fields = {
        "min_nodes": draw(NUMBER), "max_nodes": draw(NUMBER),
        "scale_up": {"gpu_utilization_above": draw(NUMBER), "window": draw(DURATION),
                     "max_step": draw(NUMBER), "cooldown": draw(DURATION)},
        "scale_down": {"gpu_utilization_below": draw(NUMBER), "idle_for": draw(DURATION),
                       "drain_timeout": draw(DURATION), "max_draining_percent": draw(NUMBER)},
        "lifetime": {"max_node_age": draw(DURATION), "max_job_runtime": draw(DURATION)},
        "capacity": {"on_demand_base": draw(NUMBER), "spot_percent": draw(NUMBER)},
        # Mostly plausible, so that some schedules pass and reach the engine.
        "schedule": [{"cron": " ".join(draw(st.lists(CRON_FIELD, min_size=4, max_size=6))),
                      "min_nodes": draw(st.integers(0, 4) | NUMBER),
                      "duration": draw(st.sampled_from(["1h", "10h", "30m"]) | DURATION),
                      "timezone": draw(st.sampled_from(["UTC", "Europe/Paris", "Nowhere/X"]))}],
    }
    chosen = draw(st.sets(st.sampled_from(sorted(fields)), max_size=len(fields)))
    lines = "".join(f"    {k}: {json.dumps(fields[k])}\n" for k in sorted(chosen))
    return GOOD_POLICY.replace("    max_nodes: 4\n", "") + ("" if "max_nodes" in chosen
                                                           else "    max_nodes: 4\n") + lines


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=pools())
def test_whatever_validation_accepts_the_engine_can_decide_with(tmp_path: Path, text: str) -> None:
    text = text.replace("NaN", ".nan").replace("Infinity", ".inf")
    policy, _ = _load(tmp_path, text.encode())
    if policy is None:
        return
    decide({policy.team: policy}, FleetView(), snapshot(), NOW, catalog=CATALOG)


def test_two_teams_whose_pools_name_nodes_alike_are_refused_with_both_named(tmp_path: Path) -> None:
    pool = "  - {{name: {}, cloud: aws, region: us-east-1, instance_types: [p3.2xlarge], max_nodes: 2}}\n"
    (tmp_path / "a-b.yaml").write_text("team: a-b\npools:\n" + pool.format("c"))
    (tmp_path / "a.yaml").write_text("team: a\npools:\n" + pool.format("x") + pool.format("b-c"))
    policies, errors = load_dir(tmp_path, CATALOG)
    assert sorted(policies) == ["a-b"]
    (err,) = errors
    assert (Path(err.file).name, err.line, err.path) == ("a.yaml", 4, "pools[1].name")
    assert "a/b-c" in err.message and "a-b/c" in err.message and "a-b-c-<n>" in err.message
    assert str(tmp_path / "a-b.yaml") in err.message


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fields=st.lists(CRON_FIELD, min_size=5, max_size=5),
       zone=st.sampled_from(["UTC", "Europe/Paris", "America/New_York", "Asia/Kolkata"]),
       duration=st.sampled_from(["1h", "10h", "30m", "366d", "1s"]),
       hour=st.integers(0, 23 * 4))
def test_accepted_schedules_never_make_decide_raise(tmp_path: Path, fields: list[str], zone: str,
                                                    duration: str, hour: int) -> None:
    entry = {"cron": " ".join(fields), "min_nodes": 2, "duration": duration, "timezone": zone}
    policy, _ = _load(tmp_path, (GOOD_POLICY + f"    schedule: [{json.dumps(entry)}]\n").encode())
    if policy is None:
        return
    decide({policy.team: policy}, FleetView(), snapshot(), NOW.replace(hour=hour // 4, minute=15 * (hour % 4)),
           catalog=CATALOG)
