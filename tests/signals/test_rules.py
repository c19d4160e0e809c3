"""What the recorded query's answer means, without Prometheus (the real one is in
test_prometheus.py)."""

from __future__ import annotations

from typing import Any

from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.promql import PoolWindows
from autoscaler.signals.rules import MARKER, RecordedQuery, RuleSet
from tests.builders import make_policy

VISION = make_policy("vision", pools=[{
    "name": "gpu", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.8xlarge"],
    "max_nodes": 10, "scale_up": {"window": "5m"}, "scale_down": {"idle_for": "15m"}}]).pools[0]
SEARCH = make_policy("search", pools=[{
    "name": "t4", "cloud": "aws", "region": "us-east-1", "instance_types": ["g4dn.xlarge"],
    "max_nodes": 10, "scale_up": {"window": "3m"}, "scale_down": {"idle_for": "20m"}}]).pools[0]
STALE_AFTER = PrometheusConfig(url="http://x").stale_after
RULES = RuleSet.of([VISION, SEARCH], "Hostname", STALE_AFTER)
NOW = 1_800_000_000.0


def series(name: str, value: float | str, **labels: str) -> dict[str, Any]:
    return {"metric": {"__name__": name, **labels}, "value": [NOW, str(value)]}


def observe(result: list[dict[str, Any]], node: str, pool: Any = VISION) -> Any:
    query = RecordedQuery(RULES)
    fields, _ = query.collect(result, NOW)
    return query.observe(fields.get(node, {}), PoolWindows.of(pool))


def test_the_tick_is_one_selector_over_the_recorded_names() -> None:
    query = RecordedQuery(RULES).query()
    assert query.startswith('{__name__=~"') and " or " not in query
    assert "gpu_autoscaler:node_gpu_util:avg_over_5m" in query and MARKER in query


def test_one_series_carries_the_mean_and_the_gpu_count() -> None:
    obs = observe([series("gpu_autoscaler:node_gpu_util:avg_over_5m", 37.5,
                          Hostname="vision-gpu-1", gpus="8")], "vision-gpu-1")
    assert obs.metrics_missing is None and obs.metrics is not None
    assert (obs.metrics.util_mean, obs.metrics.gpus_reporting) == (37.5, 8)
    assert obs.metrics.sample_age_s is None  # fresh: dated only once silent for 60 s


def test_an_empty_window_is_no_mean_not_zero() -> None:
    obs = observe([series("gpu_autoscaler:node_gpu_util:avg_over_5m", "NaN",
                          Hostname="vision-gpu-1", gpus="2")], "vision-gpu-1")
    assert obs.metrics_missing is None and obs.metrics is not None
    assert obs.metrics.util_mean is None and obs.metrics.gpus_reporting == 2


def test_a_silent_node_is_dated_from_the_recorded_timestamp() -> None:
    obs = observe([series("gpu_autoscaler:node_gpu_util:newest_timestamp_over_20m", NOW - 215,
                          Hostname="vision-gpu-3")], "vision-gpu-3")
    assert obs.metrics_missing == "no sample for 215s (stale after 120s)"
    assert obs.metrics is not None and obs.metrics.sample_age_s == 215


def test_a_node_recorded_for_another_pools_window_only_is_missing_with_the_reason() -> None:
    obs = observe([series("gpu_autoscaler:node_gpu_util:avg_over_3m", 50,
                          Hostname="vision-t4-2", gpus="1")], "vision-t4-2")
    assert obs.metrics is None
    assert obs.metrics_missing is not None and "matches another pool's nodes" in obs.metrics_missing


def test_an_absent_node_is_missing() -> None:
    obs = observe([], "vision-gpu-5")
    assert obs.metrics is None
    assert obs.metrics_missing == "no DCGM_FI_DEV_GPU_UTIL sample in the last 20m"
