"""Alert thresholds are finite numbers in range and windows are Prometheus durations:
NaN, infinities, -1 and PromQL text never reach a rule, from code or ``--set``.
(Does not use the package's scenario fixture.)"""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from typer.testing import CliRunner

from autoscaler.cli import app
from autoscaler.dashboards.alerts import (
    MAX_DURATION_S,
    PROM_DURATION,
    Thresholds,
    prom_seconds,
    rules_yaml,
)

runner = CliRunner()
NUMBERS = ["tick_errors", "tick_stale_s", "quota_fraction", "interruptions", "stuck_ratio"]
WINDOWS = ["ecc_window", "tick_window", "interruption_window"]
FORS = ["thermal_for", "xid_for", "data_missing_for", "quota_for", "stuck_for", "backoff_for"]
PROMQL = ["5m) or vector(1", "1 or on() vector(1)", "10m]) > 0 or up[5m", "{{ $value }}", "5m\n- alert: X"]
BAD_NUMBERS = ["nan", "NaN", "inf", "-inf", "-1", "0", "1e400", *PROMQL]
BAD_DURATIONS = ["nan", "inf", "-1m", "", "5", "5M", "1.5h", "10m5h", "31d", "9999999999999999y",
                 *PROMQL]


@pytest.mark.parametrize("name", NUMBERS)
@pytest.mark.parametrize("text", BAD_NUMBERS)
def test_a_number_that_is_not_finite_and_in_range_is_refused(name, text):
    with pytest.raises(ValueError, match=f"threshold {name}="):
        Thresholds().with_overrides({name: text})


@pytest.mark.parametrize("name", WINDOWS + FORS)
@pytest.mark.parametrize("text", BAD_DURATIONS)
def test_a_duration_that_is_not_prometheus_syntax_is_refused(name, text):
    with pytest.raises(ValueError, match=f"threshold {name}="):
        Thresholds().with_overrides({name: text})


def test_a_window_of_zero_is_refused_but_a_for_of_zero_is_not():
    with pytest.raises(ValueError, match="above 0"):
        Thresholds().with_overrides({"ecc_window": "0m"})
    assert Thresholds().with_overrides({"xid_for": "0s", "tick_window": "1h30m"}).tick_window == "1h30m"


def test_code_cannot_build_them_either():
    with pytest.raises(ValidationError):
        Thresholds(quota_fraction=float("nan"))
    with pytest.raises(ValidationError):
        Thresholds(stuck_for="5m) or vector(1")


@pytest.mark.parametrize("setting", ["quota_fraction=nan", "stuck_ratio=inf", "tick_errors=-1",
                                     "stuck_for=5m) or vector(1", "ecc_window=0m", "bogus=1",
                                     "no-equals-sign"])
def test_the_command_refuses_in_one_line(setting):
    result = runner.invoke(app, ["dashboards", "alerts", "--set", setting])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("error:"), result.output
    assert isinstance(result.exception, SystemExit)


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(WINDOWS + FORS), text=st.text(max_size=20))
def test_generated_durations_reach_the_rules_only_in_prometheus_syntax(name, text):
    try:
        t = Thresholds().with_overrides({name: text})
    except ValueError:
        return
    assert PROM_DURATION.fullmatch(text) and 0 <= prom_seconds(text) <= MAX_DURATION_S
    assert text in rules_yaml(t)


@settings(max_examples=80, deadline=None)
@given(name=st.sampled_from(NUMBERS),
       text=st.one_of(st.floats().map(repr), st.integers().map(str), st.text(max_size=12)))
def test_generated_numbers_reach_the_rules_only_finite_and_in_range(name, text):
    try:
        t = Thresholds().with_overrides({name: text})
    except ValueError:
        return
    value = getattr(t, name)
    assert 0 < value <= MAX_DURATION_S  # the largest bound of any threshold (a month of seconds)
    assert re.search(r"nan|inf", rules_yaml(t), re.IGNORECASE) is None
