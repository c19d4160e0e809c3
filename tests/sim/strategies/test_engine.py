"""The engine strategy: decide() drives the simulated cluster the way the executor would."""

from __future__ import annotations

from datetime import datetime

import pytest

from autoscaler.engine.binpack import shapes_of
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView
from autoscaler.model.snapshot import GpuMetrics, PendingJob, PendingShape, Snapshot
from autoscaler.policy.models import Market, Priority, TeamPolicy
from autoscaler.sim.cluster import SimNode
from autoscaler.sim.observe import to_datetime
from autoscaler.sim.replay import Replay
from autoscaler.sim.run import run_all
from autoscaler.sim.strategies.engine import EngineStrategy
from autoscaler.traces import Job
from tests.sim.conftest import CATALOG, EXACT, policy, ready_node, replay_for, run_job, workload

OD = 3.06


def test_pending_job_launches_once_and_the_fleet_view_shows_it_in_flight() -> None:
    pol = policy()
    ours = EngineStrategy(pol, pol.pools[0], CATALOG)
    replay = replay_for([Job("a", 0, 3600, 1.0)], strategy=ours)
    sim = replay.jobs[0]
    replay.cluster.arrive(sim, 0)
    ours.tick(replay, 0)
    ours.tick(replay, 30)  # the job fits on the node on its way: no second launch
    assert [n.state for n in replay.cluster.nodes.values()] == [NodeState.PROVISIONING]
    assert ours.actions["launch"] == 1
    assert ours.history.last_scale_up_at is not None


def test_scale_down_cooldown_after_a_scale_up_holds_idle_nodes() -> None:
    """Job 240..840 s; idle_for 1 min -> idle from 900, but the 20-min cooldown since the
    launch at 0 holds it until the tick at 1200; terminated at the next tick, 1230."""
    pol = policy(scale_down={"idle_for": "1m", "cooldown": "20m"})
    report = run_all(workload([Job("a", 0, 600, 1.0)]), pol, pol.pools[0], CATALOG, EXACT,
                     strategies=("ours",))
    ours = report.result("ours")
    assert ours.cost_usd == pytest.approx(OD * 1230 / 3600)
    assert ours.extra["actions"]["hold"] >= 1


def test_expired_node_is_replaced_and_drain_timeout_requeues_its_job() -> None:
    """max_node_age 1h: at the tick of 3630 the node is drained and a new one launched
    (ready at 3870). The job cannot finish before drain_timeout (10 min) and the 2-min
    checkpoint_grace: killed at 4350 with 2 checkpoints (3600 s) of its 4110 s kept, it
    restarts on the new node."""
    pol = policy(lifetime={"max_node_age": "1h"}, scale_down={"idle_for": "10m", "cooldown": "1s",
                                                               "drain_timeout": "10m"})
    report = run_all(workload([Job("long", 0, 3 * 3600, 1.0)], end=5000), pol, pol.pools[0], CATALOG, EXACT,
                     strategies=("ours",))
    ours = report.result("ours")
    assert ours.extra["actions"]["replace"] == 1
    assert ours.kills_by_cause == {"drain-timeout": 1}
    assert ours.gpu_hours_lost == pytest.approx(510 / 3600)
    assert ours.launches == 2


def test_engine_sees_running_jobs_and_never_drains_a_busy_node() -> None:
    pol = policy()
    ours = EngineStrategy(pol, pol.pools[0], CATALOG)
    job = Job("a", 0, 10**6, 0.05)  # 5% util: below the idle threshold, but it has a job
    replay = replay_for([job], strategy=ours)
    node = ready_node(replay)
    run_job(replay, job, node, 0)
    for t in range(0, 7200, 30):
        ours.tick(replay, t)
    assert node.state is NodeState.READY
    assert ours.actions["drain"] == 0


def test_a_share_no_gpu_has_room_for_launches_although_the_node_has_that_much_free() -> None:
    """Four 0.8-GPU shares leave 0.2 of each GPU of a p3.8xlarge: 0.8 free in all, but a
    0.5 share fits none of them. The engine sees the node's GPUs one by one (what the
    scheduler reports) and buys for it."""
    pol = policy(instance_types=["p3.8xlarge"])
    ours = EngineStrategy(pol, pol.pools[0], CATALOG)
    shares = [Job(f"s{i}", 0, 10**5, 0.8) for i in range(4)]
    late = Job("late", 0, 3600, 0.5)
    replay = replay_for([*shares, late], strategy=ours)
    node = ready_node(replay, "p3.8xlarge")
    for job in shares:
        run_job(replay, job, node, 0)
    replay.cluster.arrive(next(j for j in replay.jobs if j.job.id == "late"), 0)
    replay.cluster.schedule(0)
    ours.tick(replay, 0)
    assert ours.actions["launch"] == 1
    assert len(replay.cluster.nodes) == 2


def test_consolidation_moves_a_stranded_job_and_saves_the_node() -> None:
    """Two 4-GPU nodes each keep one 10-hour 1-GPU job after their 3-GPU jobs end at ~1h:
    with consolidate_below 50 one of them is drained, its job requeued after the 2m grace
    onto the other node's free GPUs, and the emptied node terminated."""
    jobs = [Job("a", 0, 10 * 3600, 1.0), Job("b", 0, 3600, 3.0),
            Job("c", 0, 10 * 3600, 1.0), Job("d", 0, 3600, 3.0)]
    results = {}
    for below in (None, 50):
        pol = policy(instance_types=["p3.8xlarge"],
                     scale_down={"idle_for": "10m", "cooldown": "1s", "consolidate_below": below})
        report = run_all(workload(jobs, end=12 * 3600), pol, pol.pools[0], CATALOG, EXACT, strategies=("ours",))
        results[below] = report.result("ours")
    plain, moved = results[None], results[50]
    assert plain.kills_by_cause == {} and moved.kills_by_cause == {"consolidation": 1}
    assert moved.jobs_finished == plain.jobs_finished == 4
    # About 9 hours of a 4-GPU node saved, less the work redone since the last checkpoint.
    assert moved.cost_usd < plain.cost_usd - 8 * 4 * OD


def test_observer_caches_stay_bounded_by_live_jobs() -> None:
    from autoscaler.sim.observe import Observer

    jobs = [Job(f"j{i}", 60 * i, 30, 1.0) for i in range(400)]  # short jobs, one after another
    pol = policy()
    replay = replay_for(jobs, strategy=EngineStrategy(pol, pol.pools[0], CATALOG), end=400 * 60 + 600)
    replay.run()
    observer = replay.strategy.observer  # type: ignore[attr-defined]
    assert isinstance(observer, Observer)
    assert replay.cluster.done == 400
    assert len(observer._running) <= 64 + 2
    assert observer._queues == {}  # the pending index holds only what waits: nothing here


class CheckedQueue(EngineStrategy):
    """Ours, checking at every tick that the pending shapes it reports are the cluster's
    queue: by GPUs asked, ids in order, each with the start of its current wait."""

    checked = 0

    def observe(self, replay: Replay, now: float) -> tuple[FleetView, Snapshot]:
        fleet, snapshot = super().observe(replay, now)
        listed = [PendingJob(id=j.job.id, gpus=j.gpus, submitted_at=to_datetime(j.pending_since))
                  for j in replay.cluster.pending]
        got = snapshot.pools[self.observer.key].pending_shapes
        assert sorted(map(_fields, got)) == sorted(map(_fields, shapes_of(listed)))
        self.checked += bool(got)
        return fleet, snapshot


def _fields(s: PendingShape) -> tuple[float, list[str], list[datetime | None]]:
    return s.gpus, s.ids, s.submitted_at


def test_pending_shapes_follow_arrivals_starts_and_requeues() -> None:
    """A backlog of three shapes behind a 3-node cap; nodes expire after 1 h, so their jobs
    are killed at the drain timeout and wait again (since the requeue)."""
    pol = policy(max_nodes=3, lifetime={"max_node_age": "1h"},
                 scale_down={"idle_for": "10m", "cooldown": "1s", "drain_timeout": "5m"})
    jobs = [Job(f"j{(i * 37) % 90:02d}", 20 * i, 1800 + 600 * (i % 5), (1.0, 0.5, 4.0)[i % 3]) for i in range(90)]
    ours = CheckedQueue(pol, pol.pools[0], CATALOG)
    replay = replay_for(jobs, strategy=ours, end=6 * 3600)
    replay.run()
    assert ours.checked > 100
    assert replay.cluster.totals.kills["drain-timeout"] > 0


@pytest.mark.parametrize(("headroom", "waits", "launches"), [(0, [240.0, 260.0], 2), (1, [240.0, 0.0], 3)])
def test_headroom_serves_the_next_arrival_at_once(headroom: int, waits: list[float], launches: int) -> None:
    """Job a at 0 s, job b at 1000 s. Without headroom b waits for the tick at 1020 and a
    boot; with one GPU of headroom the spare launched with a's node (and kept from idle
    scale-down) takes b at once, and the next tick launches the next spare."""
    pol = policy(scale_up={"gpu_utilization_above": 100, "max_step": 10, "headroom_gpus": headroom})
    ours = EngineStrategy(pol, pol.pools[0], CATALOG)
    replay = replay_for([Job("a", 0, 3600, 1.0), Job("b", 1000, 3600, 1.0)], strategy=ours, end=1500)
    replay.run()
    assert [j.first_start - j.job.arrival for j in replay.jobs if j.first_start is not None] == waits
    assert replay.cluster.totals.launches == launches


class CheckedViews(EngineStrategy):
    """Ours, checking at every tick that the views built without validation (and shared
    while unchanged) validate to themselves, and that each node's GPU metrics are the
    aggregates of its util samples, summed afresh."""

    checked = 0

    def observe(self, replay: Replay, now: float) -> tuple[FleetView, Snapshot]:
        fleet, snapshot = super().observe(replay, now)
        assert FleetView.model_validate(fleet.model_dump()) == fleet
        assert Snapshot.model_validate(snapshot.model_dump()) == snapshot
        window = self.pool.scale_up.window.total_seconds()
        idle = self.pool.scale_down.idle_for.total_seconds()
        for name, seen in snapshot.nodes.items():
            node = replay.cluster.nodes[name]
            recent, quiet = node.util_since(now - window), node.util_since(now - idle)
            assert seen.metrics == GpuMetrics(
                util_mean=sum(recent) / len(recent) if recent else None, util_max=max(recent, default=None),
                util_max_idle_window=max(quiet, default=None), gpus_reporting=node.gpus, sample_age_s=0.0)
            self.checked += 1
        return fleet, snapshot


def test_views_built_without_validation_are_what_validation_builds() -> None:
    pol = policy(instance_types=["p3.2xlarge", "p3.8xlarge"], max_nodes=6)
    jobs = [Job(f"j{i:02d}", 90 * i, 600 + 300 * (i % 7), (1.0, 0.5, 0.25, 2.0)[i % 4]) for i in range(60)]
    ours = CheckedViews(pol, pol.pools[0], CATALOG)
    replay_for(jobs, strategy=ours, end=4 * 3600).run()
    assert ours.checked > 500


def _refused(replay: Replay, ours: EngineStrategy, zone: str, now: float) -> None:
    """A spot launch into ``zone`` refused at ``now`` (the replay's own report of it)."""
    itype = CATALOG.get("aws", "p3.2xlarge")
    node = replay.cluster.new_node(itype, Market.SPOT, zone, replay.hourly(itype, Market.SPOT), now)
    replay.cluster.move(node, NodeState.PROVISION_FAILED, now, reason="capacity-error")
    ours.capacity_error(replay, node, now)


@pytest.mark.parametrize(("fallback", "priority", "held"), [
    ("on-demand", Priority.HIGH, [5, 10, 20, 30, 30]),  # on-demand at once: the backoff escalates
    ("on-demand", Priority.MEDIUM, []),  # jobs wait 10 min for spot first
    ("none", Priority.HIGH, []),  # spot only: capacity_error_backoff alone
])
def test_spot_refusals_escalate_only_where_the_pool_goes_on_demand_at_once(
        fallback: str, priority: Priority, held: list[int]) -> None:
    """model/backoff.py's rule, as the service's launch backoff applies it: refusals in a
    row (a minute apart) hold the zone 5, 10, 20, 30 min; the plain refusal stays held for
    capacity_error_backoff either way."""
    base = policy(zones=["us-east-1a"], capacity={"spot_percent": 100, "spot_fallback": fallback,
                                                  "capacity_error_backoff": "3m"})
    pol = TeamPolicy.model_validate({**base.model_dump(), "priority": priority})
    ours = EngineStrategy(pol, pol.pools[0], CATALOG)
    replay = replay_for([], strategy=ours)
    seen = []
    for i in range(5):
        _refused(replay, ours, "us-east-1a", 60.0 * i)
        until = [e.until for e in ours.errors if e.until is not None]
        seen += [round((u - to_datetime(60.0 * i)).total_seconds() / 60) for u in until]
        assert sum(e.until is None for e in ours.errors) == 1  # the newest refusal, once
    assert seen == held


def test_a_spot_node_ready_resets_the_refusals_in_a_row_and_the_switch_turns_them_off() -> None:
    base = policy(zones=["us-east-1a"], capacity={"spot_percent": 100, "spot_fallback": "on-demand",
                                                  "capacity_error_backoff": "3m"})
    pol = TeamPolicy.model_validate({**base.model_dump(), "priority": Priority.HIGH})
    ours = EngineStrategy(pol, pol.pools[0], CATALOG)
    replay = replay_for([], strategy=ours)
    _refused(replay, ours, "us-east-1a", 0)
    _refused(replay, ours, "us-east-1a", 60)
    assert [s.count for s in ours.streaks.values()] == [2]
    ours.observe(replay, 300)  # nothing became READY: the 10-min hold stays
    assert [e.until for e in ours.errors if e.until is not None] == [to_datetime(660)]
    ready_node(replay, now=400, market=Market.SPOT, zone="us-east-1a")
    ours.observe(replay, 420)
    assert ours.streaks == {} and ours.errors == []  # reset; the plain refusal is 6 min old
    _refused(replay, ours, "us-east-1a", 500)
    assert [s.count for s in ours.streaks.values()] == [1]

    off = EngineStrategy(pol, pol.pools[0], CATALOG, escalate_refusals=False)
    replay = replay_for([], strategy=off)
    _refused(replay, off, "us-east-1a", 0)
    assert off.streaks == {} and [e.until for e in off.errors] == [None]


def test_spot_scarcity_keeps_refusals_for_its_window_and_the_idle_node_while_they_count() -> None:
    """Two zones refused spot at 0 and 60 s; the rule holds scale-down while both count (30
    min), although capacity_error_backoff (3 min) stopped holding the zones long before.
    The idle node goes at the first tick after the window; without the rule, after idle_for."""
    def run(capacity: dict[str, object]) -> tuple[EngineStrategy, Replay, SimNode]:
        pol = policy(zones=["us-east-1a", "us-east-1b"],
                     capacity={"spot_percent": 100, "capacity_error_backoff": "3m", **capacity})
        ours = EngineStrategy(pol, pol.pools[0], CATALOG)
        replay = replay_for([], strategy=ours)
        node = ready_node(replay, now=0, market=Market.SPOT, zone="us-east-1a")
        _refused(replay, ours, "us-east-1a", 0)
        _refused(replay, ours, "us-east-1b", 60)
        return ours, replay, node

    def first_drain(ours: EngineStrategy, replay: Replay, node: SimNode) -> float:
        for now in range(30, 3600, 30):
            ours.tick(replay, float(now))
            if node.state is not NodeState.READY:
                return float(now)
        raise AssertionError("never drained")

    ours, replay, node = run({"spot_scarcity": {"zones": 2, "within": "30m"}})
    ours.observe(replay, 29 * 60)
    assert sorted(e.zone for e in ours.errors) == ["us-east-1a", "us-east-1b"]
    assert first_drain(ours, replay, node) == 1800  # the refusal at 0 no longer counts: one zone left
    plain, replay, node = run({})
    plain.observe(replay, 4 * 60)
    assert plain.errors == []
    assert first_drain(plain, replay, node) == 600  # ready at 0, idle for 10 min
