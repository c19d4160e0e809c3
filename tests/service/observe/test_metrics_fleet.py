"""Per-node, per-team and lifecycle-duration metrics from the store's transitions."""

from __future__ import annotations

from datetime import timedelta

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.engine.pricing import Prices
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.progress import InterruptionRecord, ProgressUpdate
from autoscaler.model.snapshot import CapacityError, PoolObservation, Snapshot
from autoscaler.policy.models import Market
from autoscaler.service.executor.settings import ExecutorSettings
from autoscaler.service.observe.metrics import ServiceMetrics
from autoscaler.service.observe.metrics_fleet import FleetObserver
from tests.builders import NOW, make_policy, pending
from tests.fleet.statements import counted
from tests.fleet.writes import create_node, transition

S = NodeState
LIMITS = ExecutorSettings().state_limits  # 2 bootstrap retries 30s apart, 10m ready wait


@pytest.fixture
def store(tmp_path):
    s = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    yield s
    s.close()


def new_node(store, now=NOW, market=Market.SPOT):
    return create_node(store, cooldown="up", market=market, now=now).name


def walk(store, name, *steps):
    for seconds, state, fields in steps:
        transition(store, name, state, NOW + timedelta(seconds=seconds), "test", **fields)


def value(metrics, name, **labels):
    return metrics.registry.get_sample_value(name, labels)


def test_boot_drain_and_notice_durations_are_observed_once_from_the_transitions(store):
    metrics, observer = ServiceMetrics(), FleetObserver(store)
    a, b = new_node(store), new_node(store)
    walk(store, a, (60, S.PROVISIONING, {}), (120, S.BOOTSTRAPPING, {}), (300, S.READY, {}),
         (400, S.DRAINING, {"drain_trigger": "idle"}), (520, S.DRAINED, {}))
    notice = ProgressUpdate(interruption=InterruptionRecord(kind="interruption",
                                                            at=NOW + timedelta(seconds=395)))
    walk(store, b, (60, S.PROVISIONING, {}), (90, S.BOOTSTRAPPING, {}), (200, S.READY, {}),
         (400, S.INTERRUPTED, {"progress": notice}))
    observer.durations(metrics)
    observer.durations(metrics)  # nothing new: nothing observed twice
    assert value(metrics, "gpu_autoscaler_boot_to_ready_seconds_count", instance_type="p3.2xlarge") == 2
    assert value(metrics, "gpu_autoscaler_boot_to_ready_seconds_sum", instance_type="p3.2xlarge") == 500
    assert value(metrics, "gpu_autoscaler_drain_duration_seconds_sum", pool="vision/gpu",
                 trigger="idle") == 120
    assert value(metrics, "gpu_autoscaler_interruption_notice_to_drain_seconds_sum",
                 pool="vision/gpu") == 5
    assert value(metrics, "gpu_autoscaler_interruptions_total", pool="vision/gpu") == 1


def test_a_drain_is_timed_from_its_last_start_and_each_node_from_its_own(store):
    metrics, observer = ServiceMetrics(), FleetObserver(store)
    a, b = new_node(store), new_node(store)
    for name in (a, b):
        walk(store, name, (60, S.PROVISIONING, {}), (120, S.BOOTSTRAPPING, {}), (300, S.READY, {}))
    walk(store, a, (400, S.DRAINING, {"drain_trigger": "idle"}), (450, S.READY, {}),
         (600, S.DRAINING, {"drain_trigger": "idle"}))
    walk(store, b, (700, S.DRAINING, {"drain_trigger": "idle"}), (730, S.DRAINED, {}))
    walk(store, a, (900, S.DRAINED, {}))
    observer.durations(metrics)
    assert value(metrics, "gpu_autoscaler_drain_duration_seconds_count", pool="vision/gpu",
                 trigger="idle") == 2
    assert value(metrics, "gpu_autoscaler_drain_duration_seconds_sum", pool="vision/gpu",
                 trigger="idle") == 300 + 30  # a: from its second drain; b: its own


def test_the_durations_of_a_tick_take_three_queries_whatever_the_fleet(store):
    """The steps, their nodes, the drain starts: not a query per node or per drain, which
    grew with the fleet (benchmarks/bench_surfaces.py)."""
    sent = {}
    for size in (2, 20):
        metrics, observer = ServiceMetrics(), FleetObserver(store)
        for name in [new_node(store) for _ in range(size)]:
            walk(store, name, (60, S.PROVISIONING, {}), (120, S.BOOTSTRAPPING, {}),
                 (300, S.READY, {}), (400, S.DRAINING, {"drain_trigger": "idle"}),
                 (520, S.DRAINED, {}))
        with counted(store) as statements:
            observer.durations(metrics)
        sent[size] = len(statements)
        assert value(metrics, "gpu_autoscaler_drain_duration_seconds_count", pool="vision/gpu",
                     trigger="idle") == size
    assert sent == {2: 3, 20: 3}


def test_a_follower_and_a_restarted_service_do_not_observe_old_steps(store):
    a = new_node(store)
    walk(store, a, (60, S.PROVISIONING, {}), (120, S.BOOTSTRAPPING, {}), (300, S.READY, {}))
    restarted = ServiceMetrics()
    FleetObserver(store).durations(restarted)  # starts after the newest row
    follower_metrics, follower = ServiceMetrics(), FleetObserver(store)
    b = new_node(store)
    walk(store, b, (60, S.PROVISIONING, {}), (120, S.BOOTSTRAPPING, {}), (300, S.READY, {}))
    follower.durations(follower_metrics, observe=False)
    follower.durations(follower_metrics)  # became leader: the old rows stay unobserved
    for m in (restarted, follower_metrics):
        assert value(m, "gpu_autoscaler_boot_to_ready_seconds_count", instance_type="p3.2xlarge") is None


def test_gauges_per_node_team_and_pool_follow_the_fleet(store):
    metrics, observer = ServiceMetrics(), FleetObserver(store)
    policies = {"vision": make_policy(quota={"max_gpus": 1, "max_hourly_usd": 50},
                                      bootstrap={"timeout": "10m"}, priority="high",
                                      capacity={"spot_percent": 50})}
    a = new_node(store)
    walk(store, a, (0, S.PROVISIONING, {}), (0, S.BOOTSTRAPPING, {}))
    now = NOW + timedelta(minutes=15)
    err = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.8xlarge", zone=None,
                        market=Market.SPOT, code="InsufficientInstanceCapacity", at=now)
    snap = Snapshot(taken_at=now, pools={"vision/gpu": PoolObservation(pending=pending(1, 2))},
                    capacity_errors=[err])
    prices = Prices(default_catalog(), snap, now)
    observer.gauges(metrics, store.nodes(), policies, LIMITS, prices, snap, now)
    assert value(metrics, "gpu_autoscaler_node_info", node=a, team="vision", pool="vision/gpu",
                 instance_type="p3.2xlarge", market="spot") == 1
    # 15 minutes of the pool's 3 x 10m bootstrap runs, 2 x 30s backoffs and 10m ready wait.
    assert value(metrics, "gpu_autoscaler_node_state_timeout_ratio", node=a, pool="vision/gpu",
                 state="BOOTSTRAPPING") == round(15 / 41, 4)
    assert value(metrics, "gpu_autoscaler_team_gpus", team="vision") == 1
    assert value(metrics, "gpu_autoscaler_team_quota_gpus", team="vision") == 1
    assert value(metrics, "gpu_autoscaler_team_quota_hourly_usd", team="vision") == 50
    assert value(metrics, "gpu_autoscaler_pending_gpus", team="vision", pool="vision/gpu",
                 priority="high") == 3
    assert value(metrics, "gpu_autoscaler_pool_backoff", pool="vision/gpu") == 1
    on_demand = {"vision": make_policy(capacity={"spot_percent": 0})}  # a spot error: no matter
    observer.gauges(metrics, store.nodes(), on_demand, LIMITS, prices, snap, now)
    assert value(metrics, "gpu_autoscaler_pool_backoff", pool="vision/gpu") == 0
    walk(store, a, (900, S.TERMINATING, {}), (901, S.TERMINATED, {}))
    observer.gauges(metrics, store.nodes(), policies, LIMITS, prices, Snapshot(taken_at=now), now)
    assert value(metrics, "gpu_autoscaler_node_info", node=a, team="vision", pool="vision/gpu",
                 instance_type="p3.2xlarge", market="spot") is None
    assert value(metrics, "gpu_autoscaler_team_gpus", team="vision") == 0


def ratio(metrics, node, state):
    return value(metrics, "gpu_autoscaler_node_state_timeout_ratio", node=node, pool="vision/gpu",
                 state=state)


@pytest.mark.parametrize(("minutes", "stuck"), [(35, False), (41, False), (62, True)])
def test_a_bootstrapping_node_is_stuck_only_past_the_limit_the_reconciler_acts_on(store, minutes,
                                                                                    stuck):
    """The ratio used to divide by one run's bootstrap.timeout: 35 minutes in read 3.5 times
    over while the executor still had runs, backoffs and the ready wait to go."""
    metrics, observer = ServiceMetrics(), FleetObserver(store)
    policies = {"vision": make_policy(bootstrap={"timeout": "10m"})}
    a = new_node(store)
    walk(store, a, (0, S.PROVISIONING, {}), (0, S.BOOTSTRAPPING, {}))
    now = NOW + timedelta(minutes=minutes)
    snap = Snapshot(taken_at=now)
    observer.gauges(metrics, store.nodes(), policies, LIMITS, Prices(default_catalog(), snap, now),
                    snap, now)
    assert ratio(metrics, a, "BOOTSTRAPPING") == round(minutes / 41, 4)  # 3 x 10m + 2 x 30s + 10m
    assert (ratio(metrics, a, "BOOTSTRAPPING") > 1.5) is stuck  # the alert's threshold


def test_a_draining_node_gets_its_checkpoint_grace_and_margin(store):
    metrics, observer = ServiceMetrics(), FleetObserver(store)
    policies = {"vision": make_policy(scale_down={"drain_timeout": "20m", "checkpoint_grace": "5m"})}
    a = new_node(store)
    walk(store, a, (0, S.PROVISIONING, {}), (0, S.BOOTSTRAPPING, {}), (0, S.READY, {}),
         (0, S.DRAINING, {"drain_trigger": "idle"}))
    now = NOW + timedelta(minutes=24)
    snap = Snapshot(taken_at=now)
    observer.gauges(metrics, store.nodes(), policies, LIMITS, Prices(default_catalog(), snap, now),
                    snap, now)
    assert ratio(metrics, a, "DRAINING") == 0.8  # 24m of 20m + 5m grace + 5m margin


def test_a_stopped_warm_node_counts_its_volume_and_no_gpu(store):
    from autoscaler.catalog.volumes import stopped_hourly_usd

    metrics, observer = ServiceMetrics(), FleetObserver(store)
    policies = {"vision": make_policy(capacity={"spot_percent": 0},
                                      warm_pool={"size": 1, "max": 1})}
    a = new_node(store, market=Market.ON_DEMAND)
    walk(store, a, (0, S.PROVISIONING, {}), (30, S.BOOTSTRAPPING, {}), (60, S.STOPPING, {}),
         (90, S.WARM, {}))
    now = NOW + timedelta(minutes=5)
    snap = Snapshot(taken_at=now)
    observer.gauges(metrics, store.nodes(), policies, LIMITS, Prices(default_catalog(), snap, now),
                    snap, now)
    volume = round(stopped_hourly_usd(), 4)
    assert value(metrics, "gpu_autoscaler_warm_pool_hourly_usd", pool="vision/gpu") == volume
    assert value(metrics, "gpu_autoscaler_team_hourly_usd", team="vision") == volume
    assert value(metrics, "gpu_autoscaler_team_gpus", team="vision") == 0


def test_a_pool_keeps_its_series_while_in_the_policies_or_the_fleet(store):
    """A pool removed from the policies keeps its counters while a node of it lives (a
    counter removed restarts at 0); once its last node is gone, its series go."""
    metrics, observer = ServiceMetrics(), FleetObserver(store)
    policies = {"vision": make_policy()}  # pool vision/gpu
    old = create_node(store, pool="old", cooldown="up", now=NOW).name
    snap = Snapshot(taken_at=NOW)
    prices = Prices(default_catalog(), snap, NOW)

    def tick():
        metrics.interruptions.labels("vision/old").inc()
        metrics.drain_duration.labels("vision/old", "idle").observe(60)
        observer.gauges(metrics, store.nodes(), policies, LIMITS, prices, snap, NOW)

    tick()
    tick()
    assert value(metrics, "gpu_autoscaler_interruptions_total", pool="vision/old") == 2
    assert value(metrics, "gpu_autoscaler_interruptions_total", pool="vision/gpu") == 0
    walk(store, old, (60, S.TERMINATING, {}), (61, S.TERMINATED, {}))
    tick()
    assert value(metrics, "gpu_autoscaler_interruptions_total", pool="vision/old") is None
    assert value(metrics, "gpu_autoscaler_drain_duration_seconds_count", pool="vision/old",
                 trigger="idle") is None
    assert value(metrics, "gpu_autoscaler_interruptions_total", pool="vision/gpu") == 0
