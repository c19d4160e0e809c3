"""The Prometheus reader against a real Prometheus: backfilled history with hand-computed
window aggregates, and a live scrape of the synthetic DCGM exporter."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.engine import decide
from autoscaler.model.node import FleetView
from autoscaler.model.plan import Drain, Hold, Plan, Replace, Terminate
from autoscaler.model.snapshot import Snapshot
from autoscaler.sandbox.fakes.dcgm_exporter import (
    THERMAL_THROTTLE,
    Constant,
    DcgmExporterServer,
    SyntheticDcgm,
)
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.services import rule_eval
from autoscaler.sandbox.services.prometheus import PrometheusServer, write_file_sd
from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.prometheus import MetricsReading, PrometheusReader
from autoscaler.signals.rules import RuleSet, recording_rules
from tests.builders import make_node, make_policy
from tests.signals.history import History, tick_end

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("prometheus") is None, reason="prometheus not installed"),
]

VISION = make_policy("vision", pools=[{
    "name": "gpu", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.8xlarge"],
    "max_nodes": 10, "scale_up": {"window": "5m"}, "scale_down": {"idle_for": "15m"}}]).pools[0]
SEARCH = make_policy("search", pools=[{
    "name": "t4", "cloud": "aws", "region": "us-east-1", "instance_types": ["g4dn.xlarge"],
    "max_nodes": 10, "scale_up": {"window": "3m", "metric": "gr_engine_active"},
    "scale_down": {"idle_for": "20m"}}]).pools[0]
END = tick_end()
STALE_AFTER = PrometheusConfig(url="http://x").stale_after


def build_history(end: datetime) -> History:
    h = History(end)
    # vision-gpu-1: gpu0 20% for the last 5 m and 80% before; gpu1 40% throughout.
    h.gpu("vision-gpu-1", 0, lambda k: 20 if k < 10 else 80, temp=60, power=100, used=1000,
          free=15000)
    h.gpu("vision-gpu-1", 1, lambda k: 40, temp=71, power=150, used=2000, free=14000,
          throttle=64)  # HW thermal slowdown
    # vision-gpu-2: gpu0 alternates 90/10, gpu1 idle with one XID at k=3; SW power cap.
    h.gpu("vision-gpu-2", 0, lambda k: 90 if k % 2 == 0 else 10, throttle=4)
    h.gpu("vision-gpu-2", 1, lambda k: 0, xid=lambda k: 79 if k == 3 else 0, throttle=4)
    # vision-gpu-3 stopped reporting 215 s ago, vision-gpu-4 755 s ago (past the 5 m lookback).
    h.gpu("vision-gpu-3", 0, lambda k: 50, alive=lambda k: k >= 7)
    h.gpu("vision-gpu-4", 0, lambda k: 50, alive=lambda k: k >= 25)
    # search-t4-1 reports only the profiling metric: 0.5 for the last 3 m, 0.25 before.
    h.gpu("search-t4-1", 0, lambda k: 50 if k < 6 else 25, util_metric=False)
    return h


@pytest.fixture(scope="module")
def history_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    work = tmp_path_factory.mktemp("prom-history")
    build_history(END).backfill(work / "data")
    with PrometheusServer(work, data_dir=work / "data") as prom:
        yield prom


def read(prom_url: str, **cfg: object) -> tuple[MetricsReading, int]:
    sent: list[str] = []
    reader = PrometheusReader(
        PrometheusConfig(url=prom_url, **cfg),  # type: ignore[arg-type]
        session_hook=lambda s: s.hooks["response"].append(lambda r, *a, **k: sent.append(r.url)))
    nodes = {f"vision-gpu-{i}": VISION for i in range(1, 6)} | {"search-t4-1": SEARCH}
    try:
        return reader.read(nodes, [VISION, SEARCH], END), len(sent)
    finally:
        reader.close()


def test_window_aggregates_match_hand_computed_values(history_prom: PrometheusServer) -> None:
    result, http_queries = read(history_prom.url)
    assert result.error is None
    # Two queries plus one dating the nodes that stopped reporting (vision-gpu-4, -5).
    assert result.queries == http_queries == 3
    m = result.nodes["vision-gpu-1"].metrics
    assert m is not None and result.nodes["vision-gpu-1"].metrics_missing is None
    assert m.util_mean == pytest.approx(30.0)  # (20 + 40) / 2 over 5 m
    assert m.util_max == pytest.approx(40.0)
    assert m.util_max_idle_window == pytest.approx(80.0)  # 15 m reaches the 80% period
    assert (m.mem_used_mib, m.mem_free_mib) == (3000.0, 29000.0)
    assert (m.temperature_max_c, m.power_w) == (71.0, 250.0)
    assert m.thermal_throttle is True and m.xid_errors == 0
    assert m.gpus_reporting == 2
    assert m.sample_age_s == pytest.approx(5.0, abs=0.01)
    m2 = result.nodes["vision-gpu-2"].metrics
    assert m2 is not None
    assert m2.util_mean == pytest.approx(25.0)  # gpu0 (5 x 90 + 5 x 10) / 10 = 50, gpu1 0
    assert m2.util_max == pytest.approx(90.0)
    assert m2.xid_errors == 1 and m2.thermal_throttle is False


def test_profiling_metric_is_scaled_to_percent(history_prom: PrometheusServer) -> None:
    result, _ = read(history_prom.url)
    m = result.nodes["search-t4-1"].metrics
    assert m is not None and result.nodes["search-t4-1"].metrics_missing is None
    assert m.util_mean == pytest.approx(50.0)  # 3 m window: 0.5 only
    assert m.util_max_idle_window == pytest.approx(50.0)  # 20 m: max(0.5, 0.25)
    assert m.gpus_reporting == 1


def test_stale_and_absent_nodes_are_explicit(history_prom: PrometheusServer) -> None:
    result, _ = read(history_prom.url, stale_after="2m")
    stale = result.nodes["vision-gpu-3"]
    assert stale.metrics_missing == "no sample for 215s (stale after 120s)"
    assert stale.metrics is not None and stale.metrics.sample_age_s == pytest.approx(215, abs=0.01)
    gone = result.nodes["vision-gpu-4"]
    assert gone.metrics_missing is not None and gone.metrics_missing.startswith("no sample for 7")
    assert gone.metrics is not None and 755 <= (gone.metrics.sample_age_s or 0) <= 770
    absent = result.nodes["vision-gpu-5"]
    assert absent.metrics is None
    assert absent.metrics_missing == "no DCGM_FI_DEV_GPU_UTIL sample in the last 20m"


def test_query_count_does_not_grow_with_pools(history_prom: PrometheusServer) -> None:
    pools = [make_policy(f"t{i}", pools=[{
        "name": "p", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.2xlarge"],
        "max_nodes": 2, "scale_up": {"window": f"{i + 1}m"},
        "scale_down": {"idle_for": f"{i + 5}m"}}]).pools[0] for i in range(12)]
    reader = PrometheusReader(PrometheusConfig(url=history_prom.url))
    try:
        result = reader.read({"vision-gpu-1": pools[3]}, pools, END)
    finally:
        reader.close()
    assert result.error is None and result.queries == 2
    m = result.nodes["vision-gpu-1"].metrics
    assert m is not None and m.util_mean == pytest.approx(30.0, abs=25)


def test_node_label_instance(tmp_path: Path) -> None:
    h = History(END, label="instance")
    h.gpu("vision-gpu-1", 0, lambda k: 12)
    h.backfill(tmp_path / "data")
    with PrometheusServer(tmp_path, data_dir=tmp_path / "data") as prom:
        reader = PrometheusReader(PrometheusConfig(url=prom.url, node_label="instance"))
        result = reader.read({"vision-gpu-1": VISION}, [VISION], END)
        reader.close()
    m = result.nodes["vision-gpu-1"].metrics
    assert m is not None and m.util_mean == pytest.approx(12.0)


def test_prometheus_stopped_mid_test_marks_data_missing(tmp_path: Path) -> None:
    build_history(END).backfill(tmp_path / "data")
    prom = PrometheusServer(tmp_path, data_dir=tmp_path / "data").start()
    try:
        before, _ = read(prom.url)
        assert before.error is None and before.nodes["vision-gpu-1"].metrics is not None
    finally:
        prom.stop()
    started = time.monotonic()
    after, _ = read(prom.url)
    assert time.monotonic() - started < 5
    assert after.error == f"prometheus unreachable at {prom.url}"
    assert after.nodes == {}


# ---------------------------------------------------- recording-rule mode


@pytest.fixture(scope="module")
def recorded_prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """Raw history plus the policies' recording rules evaluated at END (the read time)."""
    work = tmp_path_factory.mktemp("prom-recorded")
    build_history(END).backfill(work / "data")
    rules = recording_rules(RuleSet.of([VISION, SEARCH], "Hostname", STALE_AFTER), "30s")
    rule_eval.record_all(rules, work / "data", work, END.timestamp(), END.timestamp() - 1500, 30)
    with PrometheusServer(work / "recorded", data_dir=work / "data") as prom:
        yield prom


def test_recorded_series_give_the_same_verdicts(history_prom: PrometheusServer,
                                                recorded_prom: PrometheusServer) -> None:
    raw, _ = read(history_prom.url)
    recorded, http_queries = read(recorded_prom.url, recording_rules=True)
    # vision-gpu-5 never reported: it reads as silent, so it is looked up in the raw
    # series by a second query (a node the rules date is not).
    assert recorded.error is None and recorded.queries == http_queries == 2
    for node, pool in (("vision-gpu-1", VISION), ("vision-gpu-2", VISION), ("search-t4-1", SEARCH)):
        got, want = recorded.nodes[node].metrics, raw.nodes[node].metrics
        assert got is not None and want is not None, node
        assert got.util_mean == pytest.approx(want.util_mean), node
        assert (got.xid_errors, got.thermal_throttle, got.gpus_reporting) == (
            want.xid_errors, want.thermal_throttle, want.gpus_reporting), node
        # Only what decisions use is recorded: the idle-window peak when it is below the
        # idle threshold, the temperature when it is above the health limit.
        peak = want.util_max_idle_window
        idle = peak is not None and peak < pool.scale_down.gpu_utilization_below
        assert got.util_max_idle_window == (pytest.approx(peak) if idle else None), node
        assert got.temperature_max_c is None, node  # nobody is past max_gpu_temperature
    assert recorded.nodes["search-t4-1"].metrics.util_mean == pytest.approx(50.0)  # type: ignore[union-attr]
    for node in ("vision-gpu-3", "vision-gpu-4", "vision-gpu-5"):
        assert bool(recorded.nodes[node].metrics_missing) == bool(raw.nodes[node].metrics_missing), node
    assert recorded.nodes["vision-gpu-5"].metrics is None


def test_a_node_the_rules_have_not_dated_yet_is_dated_from_its_raw_series(
        tmp_path: Path) -> None:
    """Rule groups are evaluated apart: a node's window mean can empty before the node
    group dates it. Until then it reads as silent with no age, which the engine would count
    from READY, so the reader dates such nodes from their raw series in a second query."""
    build_history(END).backfill(tmp_path / "data")
    rules = recording_rules(RuleSet.of([VISION, SEARCH], "Hostname", STALE_AFTER), "30s")
    for group in rules["groups"]:  # the node group has not run since the node went quiet
        group["rules"] = [r for r in group["rules"] if "newest_timestamp_over" not in r["record"]]
    rule_eval.record_all(rules, tmp_path / "data", tmp_path, END.timestamp(),
                         END.timestamp() - 1500, 30)
    with PrometheusServer(tmp_path / "recorded", data_dir=tmp_path / "data") as prom:
        result, http_queries = read(prom.url, recording_rules=True)
    assert result.error is None and result.queries == http_queries == 2
    quiet = result.nodes["vision-gpu-4"]  # its last sample 755 s before END, window 5 m
    assert quiet.metrics is not None and quiet.metrics.sample_age_s is not None
    assert 755 <= quiet.metrics.sample_age_s < 800
    assert quiet.metrics_silent and quiet.metrics_missing == "no sample for 755s (stale after 120s)"
    never = result.nodes["vision-gpu-5"]
    assert never.metrics is None and never.metrics_silent
    assert never.metrics_missing == "no DCGM_FI_DEV_GPU_UTIL sample in the last 20m"
    fresh = result.nodes["vision-gpu-1"]
    assert fresh.metrics is not None and not fresh.metrics_silent


def test_recorded_windows_follow_node_names(tmp_path: Path) -> None:
    """A node's window is picked by its name: its own pool's (<team>-<pool>-<n>), every
    window for a name like no pool's nodes, and an explicit reason when the name matches
    only another pool's nodes."""
    h = History(END)
    for node in ("vision-gpu-7", "gpu7", "vision-t4-2"):
        h.gpu(node, 0, lambda k: 20 if k < 6 else 80)  # 3 m: 20%, 5 m: (6 x 20 + 4 x 80) / 10
    h.backfill(tmp_path / "data")
    rules = recording_rules(RuleSet.of([VISION, SEARCH], "Hostname", STALE_AFTER), "30s")
    rule_eval.record_all(rules, tmp_path / "data", tmp_path, END.timestamp(),
                         END.timestamp() - 1500, 30)
    with PrometheusServer(tmp_path / "recorded", data_dir=tmp_path / "data") as prom:
        reader = PrometheusReader(PrometheusConfig(url=prom.url, recording_rules=True))
        nodes = {"vision-gpu-7": VISION, "gpu7": VISION, "vision-t4-2": VISION}
        try:
            result = reader.read(nodes, [VISION, SEARCH], END)
        finally:
            reader.close()
    assert result.error is None
    for node in ("vision-gpu-7", "gpu7"):
        m = result.nodes[node].metrics
        assert m is not None and result.nodes[node].metrics_missing is None, node
        assert m.util_mean == pytest.approx(44.0) and m.gpus_reporting == 1, node
    mismatched = result.nodes["vision-t4-2"]
    assert mismatched.metrics is None
    assert mismatched.metrics_missing is not None
    assert "matches another pool's nodes" in mismatched.metrics_missing


def test_recorded_mode_without_rules_says_how_to_install_them(history_prom: PrometheusServer) -> None:
    result, _ = read(history_prom.url, recording_rules=True)
    assert result.error is not None and "gpu-autoscaler signals --print-rules" in result.error
    assert result.nodes == {}


def test_rule_file_follows_the_policies_windows() -> None:
    rules = recording_rules(RuleSet.of([VISION, SEARCH], "hostname", STALE_AFTER), "10s")
    assert {g["interval"] for g in rules["groups"]} == {"10s"}
    exprs = {r["record"]: r["expr"] for g in rules["groups"] for r in g["rules"]}
    # A node's mean is recorded for its own pool's window only (the fleet names nodes
    # <team>-<pool>-<n>), or for every window when its name matches no pool's nodes.
    assert exprs["gpu_autoscaler:node_gpu_util:avg_over_5m"].startswith(
        '(avg by (hostname) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{hostname=~".+-(?:gpu)-[^-]*"}'
        '[300s]) or avg_over_time(DCGM_FI_DEV_GPU_UTIL{hostname!~".+-(?:gpu|t4)-[^-]*",'
        'hostname!=""}[300s]))) * on (hostname) group_left (gpus) count_values by (hostname) '
        '("gpus", ')
    # Thresholds are applied when recording: only the nodes that matter are read.
    assert exprs["gpu_autoscaler:node_gpu_util:max_over_15m"].endswith(" < 10")
    assert exprs["gpu_autoscaler:node_gpu_temp_c:max"].endswith(" > 87")
    assert "gpu_autoscaler:node_gpu_util:max_over_15m" in exprs
    assert "gpu_autoscaler:node_gr_engine_active:avg_over_3m" in exprs
    assert "gpu_autoscaler:node_gr_engine_active:max_over_20m" in exprs


# ------------------------------------------------------------ live scrape


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SyntheticDcgm, PrometheusServer]]:
    work = tmp_path_factory.mktemp("prom-live")
    sd = work / "targets.json"
    dcgm = SyntheticDcgm(Constant(35))
    with DcgmExporterServer(dcgm) as exporter:
        dcgm.on_nodes_changed = lambda nodes: write_file_sd(sd, exporter.address, nodes)
        dcgm.add_node("vision-gpu-1", gpus=2)
        dcgm.add_node("vision-gpu-2", gpus=2, model="T4")
        dcgm.set_util(90, node="vision-gpu-2")
        with PrometheusServer(work, file_sd=[sd]) as prom:
            prom.wait_for_series("DCGM_FI_DEV_FB_FREE", count=4, timeout=30)
            yield dcgm, prom


def served(dcgm: SyntheticDcgm, node: str, metric: str) -> list[float]:
    text = dcgm.render(node) or ""
    return [s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == metric]


def live_read(prom: PrometheusServer, stale_after: str = "3s") -> MetricsReading:
    reader = PrometheusReader(PrometheusConfig(url=prom.url, stale_after=stale_after))
    nodes = {"vision-gpu-1": VISION, "vision-gpu-2": VISION}
    try:
        return reader.read(nodes, [VISION], datetime.now(UTC))
    finally:
        reader.close()


def test_live_scrape_values_match_the_exporter(live: tuple[SyntheticDcgm, PrometheusServer]) -> None:
    dcgm, prom = live
    result = live_read(prom)
    assert result.error is None
    for node, util in (("vision-gpu-1", 35.0), ("vision-gpu-2", 90.0)):
        obs = result.nodes[node]
        m = obs.metrics
        assert obs.metrics_missing is None and m is not None
        assert (m.util_mean, m.util_max, m.util_max_idle_window) == (util, util, util)
        assert m.mem_used_mib == sum(served(dcgm, node, "DCGM_FI_DEV_FB_USED"))
        assert m.mem_free_mib == sum(served(dcgm, node, "DCGM_FI_DEV_FB_FREE"))
        assert m.temperature_max_c == max(served(dcgm, node, "DCGM_FI_DEV_GPU_TEMP"))
        assert m.power_w == pytest.approx(sum(served(dcgm, node, "DCGM_FI_DEV_POWER_USAGE")))
        assert m.gpus_reporting == 2 and m.xid_errors == 0 and not m.thermal_throttle
        assert m.sample_age_s is not None and m.sample_age_s < 3


def test_live_faults_and_dropout(live: tuple[SyntheticDcgm, PrometheusServer]) -> None:
    dcgm, prom = live
    dcgm.inject_xid("vision-gpu-1", gpu=1, xid=79)
    dcgm.set_throttle(THERMAL_THROTTLE, node="vision-gpu-1")
    dcgm.set_dropout("vision-gpu-2")
    seen: list[MetricsReading] = []

    def settled() -> bool:
        seen.append(live_read(prom))
        one, two = seen[-1].nodes["vision-gpu-1"], seen[-1].nodes["vision-gpu-2"]
        return (one.metrics is not None and one.metrics.xid_errors == 1
                and one.metrics.thermal_throttle and two.metrics_missing is not None)

    try:
        wait_until(settled, 30, "XID, throttle and dropout visible through Prometheus")
    finally:
        dcgm.set_dropout("vision-gpu-2", on=False)
    two = seen[-1].nodes["vision-gpu-2"]
    assert two.metrics_missing is not None and two.metrics_missing.startswith("no sample for")
    # The dropped node's last values are kept but flagged, never replaced by zeros.
    assert two.metrics is not None and two.metrics.util_mean == 90.0


def test_live_memory_faults_and_a_vanished_target(live: tuple[SyntheticDcgm, PrometheusServer]) -> None:
    """An uncorrectable ECC error is counted; a node whose scrape target disappears (the
    node or its exporter died) is silent: no sample came, which the engine tells apart
    from impossible numbers."""
    dcgm, prom = live
    dcgm.inject_ecc("vision-gpu-1", gpu=0, double=1)
    dcgm.remove_node("vision-gpu-2")
    seen: list[MetricsReading] = []

    def settled() -> bool:
        seen.append(live_read(prom))
        one, two = seen[-1].nodes["vision-gpu-1"], seen[-1].nodes["vision-gpu-2"]
        return one.metrics is not None and one.metrics.ecc_dbe_errors == 1 and two.metrics_silent

    try:
        wait_until(settled, 30, "the ECC error and the vanished target visible through Prometheus")
    finally:
        dcgm.add_node("vision-gpu-2", gpus=2, model="T4")
        dcgm.set_util(90, node="vision-gpu-2")
    one, two = seen[-1].nodes["vision-gpu-1"], seen[-1].nodes["vision-gpu-2"]
    assert one.metrics_missing is None and not one.metrics_silent
    assert one.metrics is not None and (one.metrics.row_remap_failures, one.metrics.retired_pages_pending) == (0, 0)
    assert two.metrics_missing is not None


def test_live_a_silent_node_is_replaced_and_a_blind_fleet_is_not(
        live: tuple[SyntheticDcgm, PrometheusServer]) -> None:
    """decide() on what the real Prometheus answers: one node's target disappears while
    three report, and it is replaced once its newest sample is older than silent_grace;
    then every target disappears, and nothing is replaced or removed (no fleet to compare
    with: the observer is the likelier fault)."""
    dcgm, prom = live
    policy = make_policy("vision", pools=[{
        "name": "gpu", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.8xlarge"],
        "max_nodes": 10, "capacity": {"on_demand_base": 0, "spot_percent": 0},
        "health": {"silent_grace": "4s"}, "scale_down": {"idle_for": "1m"}}])
    names = [f"vision-gpu-{i}" for i in range(5, 9)]  # fresh: no fault of the tests above
    ready_since = datetime.now(UTC) - timedelta(hours=1)
    fleet = FleetView(nodes=[make_node(n, instance_type="p3.8xlarge", state_since=ready_since)
                             for n in names])
    reader = PrometheusReader(PrometheusConfig(url=prom.url, stale_after="3s"))

    def plan_now() -> tuple[Plan, MetricsReading]:
        now = datetime.now(UTC)
        reading = reader.read(dict.fromkeys(names, policy.pools[0]), policy.pools, now)
        assert reading.error is None, reading.error
        return decide({"vision": policy}, fleet, Snapshot(taken_at=now, nodes=reading.nodes),
                      now), reading

    try:
        for name in names:
            dcgm.add_node(name, gpus=2)
        dcgm.set_util(0)  # idle everywhere: a blind engine would be tempted to remove them
        wait_until(lambda: all(o.metrics_missing is None for o in plan_now()[1].nodes.values()),
                   30, "four nodes reporting")
        dcgm.remove_node("vision-gpu-6")
        replaces: list[Replace] = []

        def replaced() -> bool:
            plan, _ = plan_now()
            assert not [a for a in plan.actions if isinstance(a, Drain | Terminate)], plan
            replaces[:] = [a for a in plan.actions if isinstance(a, Replace)]
            return bool(replaces)

        wait_until(replaced, 30, "the silent node replaced", interval=0.5)
        [replace] = replaces
        assert (replace.node, replace.trigger) == ("vision-gpu-6", "unhealthy")
        assert re.search(r"no GPU metrics for (\d+)s \(newest sample\) > silent_grace 4s "
                         r"while 3 of 4 READY nodes report", replace.reason), replace.reason

        for name in names:
            dcgm.remove_node(name)
        wait_until(lambda: all(o.metrics_silent for o in plan_now()[1].nodes.values()), 30,
                   "every target gone")
        time.sleep(5)  # past silent_grace for all four: the grace is not what holds them
        plan, reading = plan_now()
        assert all(o.metrics_silent for o in reading.nodes.values())
        assert not [a for a in plan.actions if isinstance(a, Replace | Drain | Terminate)], plan
        [held] = [a.reason for a in plan.actions if isinstance(a, Hold)]
        assert held.startswith("vision/gpu: 4 node(s) without GPU metrics past silent_grace 4s "
                               "kept (vision-gpu-5, vision-gpu-6, vision-gpu-7, vision-gpu-8): "
                               "0 of 4 READY nodes report"), held
    finally:
        reader.close()
        for name in names:
            dcgm.remove_node(name)
        dcgm.set_util(None)
        dcgm.set_util(90, node="vision-gpu-2")


# ------------------------------------------------------- fail fast, auth


@contextmanager
def live_rules(tmp_path: Path, pool: Any, setup: Callable[[SyntheticDcgm], None],
               ) -> Iterator[tuple[SyntheticDcgm, PrometheusReader]]:
    """A synthetic exporter (35% load) set up by ``setup``, a real Prometheus scraping it
    with ``pool``'s recording rules evaluated every second, and a reader of those rules."""
    sd = tmp_path / "targets.json"
    dcgm = SyntheticDcgm(Constant(35))
    rules = recording_rules(RuleSet.of([pool], "Hostname", STALE_AFTER), "1s")
    with DcgmExporterServer(dcgm) as exporter:
        dcgm.on_nodes_changed = lambda nodes: write_file_sd(sd, exporter.address, nodes)
        setup(dcgm)
        with PrometheusServer(tmp_path, file_sd=[sd], rules=rules) as prom:
            reader = PrometheusReader(PrometheusConfig(url=prom.url, recording_rules=True,
                                                       rules_interval="1s"))
            try:
                yield dcgm, reader
            finally:
                reader.close()


def test_live_prometheus_evaluates_the_printed_rules(tmp_path: Path) -> None:
    """The rule file loads in a real Prometheus, and the one recorded query reads it."""
    def setup(dcgm: SyntheticDcgm) -> None:
        dcgm.add_node("vision-gpu-1", gpus=2)
        dcgm.add_node("vision-gpu-2", gpus=2)
        dcgm.set_util(2, node="vision-gpu-2")
        dcgm.inject_ecc("vision-gpu-1", gpu=1, double=2)

    with live_rules(tmp_path, VISION, setup) as (_, reader):
        nodes = {"vision-gpu-1": VISION, "vision-gpu-2": VISION}
        readings: list[MetricsReading] = []

        def settled() -> bool:
            readings.append(reader.read(nodes, [VISION], datetime.now(UTC)))
            got = readings[-1]
            # Each rule group (node facts, 5m window, 15m window) is evaluated on its
            # own schedule: wait until every one has run once.
            idle = got.nodes.get("vision-gpu-2")
            return got.error is None and all(
                o.metrics is not None and o.metrics.gpus_reporting == 2
                and o.metrics.util_mean is not None for o in got.nodes.values()) \
                and idle is not None and idle.metrics is not None \
                and idle.metrics.util_max_idle_window is not None \
                and got.nodes["vision-gpu-1"].metrics is not None \
                and got.nodes["vision-gpu-1"].metrics.ecc_dbe_errors == 2
        wait_until(settled, 60, "recorded series for both nodes", interval=1)
    result = readings[-1]
    assert result.queries == 1
    busy, idle = result.nodes["vision-gpu-1"].metrics, result.nodes["vision-gpu-2"].metrics
    assert busy is not None and idle is not None
    assert (busy.util_mean, idle.util_mean) == (35.0, 2.0)
    assert busy.util_max_idle_window is None and idle.util_max_idle_window == 2.0
    assert (busy.ecc_dbe_errors, idle.ecc_dbe_errors, busy.row_remap_failures) == (2, 0, 0)


FAST = make_policy("vision", pools=[{
    "name": "fast", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.8xlarge"],
    "max_nodes": 10, "scale_up": {"window": "3s"}, "scale_down": {"idle_for": "4s"}}]).pools[0]


def test_a_node_whose_scrapes_fail_is_dated_not_taken_for_silent_since_it_joined(
        tmp_path: Path) -> None:
    """A failed scrape marks the node's series stale at once, and a short window empties in
    seconds: the mean and the newest-sample series are gone. The rules then date the node
    with its newest sample, so it reads as seen seconds ago; undated, the engine would count
    its silence from READY (an hour for a node READY an hour) and replace it."""
    with live_rules(tmp_path, FAST, lambda d: d.add_node("vision-fast-1", gpus=2)) \
            as (dcgm, reader):
        def node() -> Any:
            return reader.read({"vision-fast-1": FAST}, [FAST],
                               datetime.now(UTC)).nodes.get("vision-fast-1")

        wait_until(lambda: (o := node()) is not None and o.metrics is not None
                   and o.metrics.util_mean == 35.0, 60, "the node's mean", interval=0.5)
        dcgm.set_dropout("vision-fast-1")
        wait_until(lambda: (o := node()) is None or o.metrics is None
                   or o.metrics.util_mean is None, 30, "the window empty", interval=0.5)
        blip = node()
    assert blip is not None and blip.metrics is not None, blip
    assert not blip.metrics_silent and blip.metrics_missing is None, blip
    assert blip.metrics.sample_age_s is not None and 3 <= blip.metrics.sample_age_s < 30


def test_fail_fast_on_a_server_that_never_answers(tmp_path: Path) -> None:
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        url = f"http://127.0.0.1:{server.getsockname()[1]}"
        reader = PrometheusReader(PrometheusConfig(url=url, timeout="1s"))
        started = time.monotonic()
        result = reader.read({"vision-gpu-1": VISION}, [VISION], END)
        reader.close()
    assert time.monotonic() - started < 3
    assert result.error == "prometheus timed out after 1s" and result.queries == 1


def test_query_error_is_reported(tmp_path: Path) -> None:
    build_history(END).backfill(tmp_path / "data")
    # A limit this low makes every query fail in Prometheus itself (HTTP 422).
    with PrometheusServer(tmp_path, data_dir=tmp_path / "data",
                          extra_args=["--query.max-samples=10"]) as prom:
        result, http_queries = read(prom.url)
    assert http_queries == 1 and result.nodes == {}
    assert result.error is not None
    assert result.error.startswith("prometheus query failed: HTTP Status Code 422")
    assert "too many samples" in result.error
