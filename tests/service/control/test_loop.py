"""The tick: signals -> decide -> record -> submit/advance, with errors contained."""

from __future__ import annotations

import dataclasses
import html
import logging
from datetime import timedelta

import pytest

from autoscaler.fleet import queries
from autoscaler.fleet.demand_history import DemandHistory, bin_start
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Drain, Hold, Launch, PlacementChoice, Plan, Replace
from autoscaler.model.progress import NodeProgress
from autoscaler.model.snapshot import CapacityError, ImageObservation, PoolObservation, UnservedJob
from autoscaler.model.snapshot_parts import Observed
from autoscaler.policy.models import Market
from autoscaler.service.control import loop as loop_module
from autoscaler.service.control.backoff import fingerprint
from autoscaler.service.control.reconciler import Finding, ReconcileReport
from autoscaler.service.http.status import build_status
from autoscaler.service.http.ui import status_page
from autoscaler.service.observe.forecasts import PoolForecasts
from tests.builders import busy, idle, pending
from tests.fleet.writes import create_node, transition, walk
from tests.service.service_fakes import make_loop, write_policy


@pytest.fixture
def kit(tmp_path):
    k = make_loop(tmp_path)
    yield k
    k.store.close()


def demand(kit, *gpus):
    kit.signals.pools = {"vision/train": PoolObservation(pending=pending(*gpus))}


def status_of(kit, leader=True):
    state = dataclasses.replace(kit.loop.state, is_leader=leader)
    return build_status(kit.store, state, {"is_leader": leader}, [], kit.loop.catalog,
                        kit.loop.last_snapshot, kit.clock())


def page_of(kit):
    return status_page(status_of(kit)).body.decode()


def test_a_tick_records_the_plan_and_hands_it_to_the_executor(kit, caplog):
    demand(kit, 1, 1)
    with caplog.at_level(logging.INFO, logger="autoscaler.service.control.loop"):
        report = kit.loop.tick()
    assert report.error is None and report.leader
    launches = [a for a in report.plan.actions if isinstance(a, Launch)]
    assert sum(a.count for a in launches) == 2
    # The engine's "now" is the injected clock, and the plan is in the store with its id.
    assert report.plan.decided_at == kit.clock.now
    plan_id, stored = kit.store.last_plan()
    assert plan_id == report.plan_id and stored == report.plan
    assert [pid for _, pid in kit.executor.submitted] == [plan_id]
    assert kit.executor.advanced == 1 and kit.reconciler.runs == 1
    assert len(report.created) == 2
    assert {n.state for n in kit.store.nodes()} == {NodeState.READY}
    # One log line per action, with its reason.
    lines = [r.getMessage() for r in caplog.records if "launch" in r.getMessage()]
    assert len(lines) == len(launches)
    assert all(a.reason in line for a, line in zip(launches, lines, strict=True))


def test_dry_run_decides_and_stores_but_changes_nothing(tmp_path):
    kit = make_loop(tmp_path, dry_run=True)
    demand(kit, 1)
    report = kit.loop.tick()
    assert report.error is None and any(isinstance(a, Launch) for a in report.plan.actions)
    assert kit.executor.submitted == [] and kit.executor.advanced == 0
    assert kit.reconciler.runs == 0 and kit.store.nodes() == []
    assert {a.status for a in kit.store.actions(plan_id=report.plan_id)} == {"skipped"}
    with kit.store.session() as s:
        from autoscaler.fleet.tables import PlanRow

        assert s.get(PlanRow, report.plan_id).dry_run is True
    kit.store.close()


def test_a_failing_stage_is_logged_counted_and_the_next_tick_runs(kit, caplog):
    kit.signals.next_error = RuntimeError("prometheus exploded")
    with caplog.at_level(logging.ERROR):
        bad = kit.loop.tick()
    assert bad.error is not None and bad.error.stage == "signals"
    assert "prometheus exploded" in caplog.text and "signals" in caplog.text
    assert kit.executor.submitted == []
    metrics = kit.loop.metrics.exposition().decode()
    assert 'gpu_autoscaler_tick_errors_total{stage="signals"} 1.0' in metrics
    assert kit.loop.state.last_error_stage == "signals"
    demand(kit, 1)
    good = kit.loop.tick()
    assert good.error is None and kit.executor.submitted
    assert kit.loop.state.last_error is None and kit.loop.state.ticks == 2


def test_executor_failure_is_contained_and_a_reconciler_failure_does_not_stop_scaling(kit):
    demand(kit, 1)
    kit.reconciler.next_error = RuntimeError("cloud API down")
    kit.executor.next_error = RuntimeError("terraform lock")
    report = kit.loop.tick()
    assert report.error.stage == "advance"
    assert kit.executor.submitted, "decided and submitted although the reconciler failed"
    text = kit.loop.metrics.exposition().decode()
    assert 'stage="reconcile"} 1.0' in text and 'stage="advance"} 1.0' in text


def test_a_follower_neither_decides_nor_acts(tmp_path):
    from autoscaler.service.config.models import LeaderSettings

    leader = make_loop(tmp_path, leader=LeaderSettings(enabled=True, ttl="30s", holder="a"))
    follower = make_loop(tmp_path, leader=LeaderSettings(enabled=True, ttl="30s", holder="b"),
                         store=leader.store)
    follower.clock.now = leader.clock.now
    demand(leader, 1)
    demand(follower, 1)
    assert leader.loop.tick().leader
    report = follower.loop.tick()
    assert not report.leader and report.plan is None
    assert follower.executor.submitted == [] and follower.signals.calls == 0
    assert len(leader.store.nodes()) == 1
    assert "gpu_autoscaler_leader 0.0" in follower.loop.metrics.exposition().decode()
    leader.store.close()


def test_stop_request_finishes_the_step_and_skips_the_rest(kit):
    demand(kit, 1)
    kit.executor.on_submit = kit.loop.request_stop
    report = kit.loop.tick()
    assert report.stopped_early and kit.executor.submitted and kit.executor.advanced == 0
    assert {n.state for n in kit.store.nodes()} == {NodeState.REQUESTED}


def test_capacity_errors_met_by_the_executor_reach_the_price_signals(kit):
    err = CapacityError(cloud="aws", region="us-east-1", instance_type="p3.2xlarge",
                        zone="us-east-1a", market=Market.SPOT, code="InsufficientInstanceCapacity",
                        at=kit.clock.now)
    kit.executor.capacity_errors = [err]
    kit.loop.tick()
    assert kit.prices.recorded == [err]


def test_missing_metrics_freeze_scale_down_and_show_in_metrics_and_state(kit):
    kit.loop.tick()
    create_node(kit.store, cooldown="up", pool="train", market=Market.SPOT, now=kit.clock.now)
    kit.loop.tick()  # fake advance makes it READY
    kit.clock.advance(hours=2)
    node = kit.store.nodes()[0].name
    kit.signals.nodes = {node: idle(util=0.0)}
    kit.signals.pools = {"vision/train": PoolObservation(metrics_missing="prometheus unreachable")}
    report = kit.loop.tick()
    assert not [a for a in report.plan.actions if isinstance(a, Drain)]
    assert any(isinstance(a, Hold) and "frozen" in a.reason for a in report.plan.actions)
    assert "prometheus unreachable" in kit.loop.state.data_missing["vision/train"]
    assert 'gpu_autoscaler_data_missing{pool="vision/train"} 1.0' in kit.loop.metrics.exposition().decode()
    kit.signals.pools = {}
    report = kit.loop.tick()
    assert [a.node for a in report.plan.actions if isinstance(a, Drain)] == [node]
    assert 'gpu_autoscaler_data_missing{pool="vision/train"} 0.0' in kit.loop.metrics.exposition().decode()


def test_metrics_count_actions_by_kind_and_trigger_and_report_the_fleet(kit):
    demand(kit, 1)
    kit.loop.tick()
    text = kit.loop.metrics.exposition().decode()
    assert 'gpu_autoscaler_actions_total{kind="launch",mode="live",trigger="pending"} 1.0' in text
    assert 'gpu_autoscaler_decisions_total{mode="live"} 1.0' in text
    assert 'gpu_autoscaler_nodes{market="spot",pool="train",state="READY",team="vision"} 1.0' in text \
        or 'gpu_autoscaler_nodes{market="on-demand",pool="train",state="READY",team="vision"} 1.0' in text
    assert "gpu_autoscaler_fleet_hourly_usd 0.0" not in text
    assert "gpu_autoscaler_tick_duration_seconds_count 1.0" in text
    assert "gpu_autoscaler_ticks_total 1.0" in text


def test_a_tick_times_each_stage_in_the_order_they_ran(kit):
    demand(kit, 1)
    report = kit.loop.tick()
    assert list(report.stages) == ["leader", "reload", "fleet", "signals", "reconcile",
                                   "snapshot", "decide", "record", "report", "preview",
                                   "submit", "advance", "metrics"]
    assert all(t.seconds >= 0 and t.cpu_seconds >= 0 for t in report.stages.values())
    # "fleet" ran twice (before and after the reconcile): its time is the sum.
    assert report.stages["fleet"].seconds > 0
    described = loop_module.describe_stages(report.stages)
    assert described.count("s (cpu ") == len(report.stages)


def test_a_failed_stage_is_timed_too(kit):
    kit.signals.next_error = RuntimeError("prometheus down")
    report = kit.loop.tick()
    assert report.error is not None and report.error.stage == "signals"
    assert "signals" in report.stages and "decide" not in report.stages
    assert "metrics" in report.stages


@pytest.mark.parametrize("drain_removed", [False, True])
def test_removing_a_team_file_drains_only_when_confirmed(tmp_path, drain_removed):
    kit = make_loop(tmp_path, drain_removed_pools=drain_removed)
    write_policy(kit.policies_dir, "search", name="infer", max_nodes=2)
    kit.loop.tick()
    create_node(kit.store, cooldown="up", team="search", pool="infer", now=kit.clock.now)
    kit.loop.tick()
    (kit.policies_dir / "search.yaml").unlink()
    report = kit.loop.tick()
    drains = [a for a in report.plan.actions if isinstance(a, Drain)]
    holds = [a for a in report.plan.actions if isinstance(a, Hold) and a.pool == "search/infer"]
    if drain_removed:
        assert [d.trigger for d in drains] == ["pool-removed"]
    else:
        assert drains == [] and "drain_removed_pools" in holds[0].reason
    kit.store.close()


def test_a_broken_policy_keeps_the_last_good_one_and_is_reported(kit):
    kit.loop.tick()
    path = kit.policies_dir / "vision.yaml"
    path.write_text(path.read_text().replace("max_nodes: 4", "max_nodes: 4\n  bogus_key: 1"))
    demand(kit, 1)
    report = kit.loop.tick()
    assert report.error is None
    assert any(isinstance(a, Launch) for a in report.plan.actions), "team kept its policy"
    errors = kit.loop.reloader.errors()
    assert len(errors) == 1 and "bogus_key" in str(errors[0])
    text = kit.loop.metrics.exposition().decode()
    assert f'gpu_autoscaler_policy_errors{{file="{path}"}} 1.0' in text


def test_each_changed_pool_is_previewed_with_its_hourly_delta(kit, caplog):
    demand(kit, 1)
    with caplog.at_level(logging.INFO, logger="autoscaler.service.control.loop"):
        kit.loop.tick()
    previews = kit.loop.state.previews
    assert len(previews) == 1
    assert previews[0].startswith("preview vision/train: create 1 (vision-train-1: p3.2xlarge")
    assert "$/h 0.000 -> " in previews[0] and "(+" in previews[0]
    assert previews[0] in caplog.text
    assert any("preview vision/train" in line for line in kit.loop.state.activity)


def test_the_snapshot_decide_gets_is_built_after_the_reconciler(kit, monkeypatch):
    # The reconciler reads what the scheduler observed (a busy node is never LOST); the
    # parts that follow the fleet are computed from the fleet as the reconciler left it.
    S, now = NodeState, kit.clock.now
    kit.loop.reloader.refresh()
    launched_under = NodeProgress(policy=fingerprint(kit.loop.policies()["vision"].pools[0]))
    keep, lost = (walk(kit.store, create_node(kit.store, pool="train", now=now).name, now,
                       S.PROVISIONING, S.BOOTSTRAPPING, S.READY) for _ in range(2))
    failing = walk(kit.store, create_node(kit.store, pool="train", now=now,
                                          progress=launched_under).name,
                   now, S.PROVISIONING, S.BOOTSTRAPPING)
    kit.signals.nodes = {keep.name: busy(), lost.name: idle()}

    def reconcile() -> None:
        transition(kit.store, lost.name, S.LOST, now, "gone from the cloud")
        transition(kit.store, failing.name, S.BOOTSTRAP_FAILED, now,
                   "bootstrap failed at task 'nvidia driver'")

    kit.reconciler.on_run = reconcile
    kit.loop.held = lambda nodes, at: {n.name: f"held while {n.state}" for n in nodes}
    kit.loop.forecasts = PoolForecasts(kit.store)
    decided = []
    real_decide = loop_module.decide
    monkeypatch.setattr(loop_module, "decide", lambda policies, fleet, snapshot, at, **kw: (
        decided.append(snapshot) or real_decide(policies, fleet, snapshot, at, **kw)))
    assert kit.loop.tick().error is None
    [observed] = kit.reconciler.snapshots
    assert isinstance(observed, Observed) and observed.nodes == kit.signals.nodes
    [snapshot] = decided
    assert snapshot is kit.loop.last_snapshot and snapshot.nodes == observed.nodes
    assert snapshot.held == {keep.name: "held while READY", lost.name: "held while LOST",
                             failing.name: "held while BOOTSTRAP_FAILED"}
    [backoff] = snapshot.capacity_errors  # the failure the reconciler found holds launches
    assert backoff.code == "launch-backoff" and "nvidia driver" in backoff.message
    [demand_bin] = DemandHistory(kit.store).bins("vision/train", bin_start(now))
    assert demand_bin.nodes_serving == 1  # the forecast's sample: LOST does not serve


def test_broken_nodes_held_by_the_unhealthy_budget_show_in_the_metric(kit):
    kit.loop.tick()
    for _ in range(4):
        create_node(kit.store, cooldown="up", pool="train", now=kit.clock.now)
    kit.loop.tick()  # fake advance makes them READY
    kit.clock.advance(hours=2)
    names = [n.name for n in kit.store.nodes() if n.state is NodeState.READY]
    assert len(names) == 4
    base = busy()
    assert base.metrics is not None
    kit.signals.nodes = {n: dataclasses.replace(base, metrics=dataclasses.replace(base.metrics, xid_errors=1))
                         for n in names}
    report = kit.loop.tick()
    assert not [a for a in report.plan.actions if isinstance(a, Drain | Replace)]
    assert any(isinstance(a, Hold) and "4 of 4 READY nodes look broken" in a.reason
               for a in report.plan.actions)
    text = kit.loop.metrics.exposition().decode()
    assert 'gpu_autoscaler_unhealthy_budget_held{pool="vision/train"} 4.0' in text
    kit.signals.nodes = {n: busy() for n in names}
    kit.loop.tick()
    text = kit.loop.metrics.exposition().decode()
    assert 'gpu_autoscaler_unhealthy_budget_held{pool="vision/train"} 0.0' in text


class FakeImages:
    def __init__(self, found: dict[str, ImageObservation] | None = None,
                 error: Exception | None = None):
        self.found, self.error, self.calls = found or {}, error, 0

    def observe(self, policies):
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.found


def test_a_stale_baked_pool_s_image_reaches_the_snapshot_and_its_launches_are_held(tmp_path):
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=4,
                 bootstrap={"image": "baked", "when_stale": "hold"})
    kit = make_loop(tmp_path)
    stale = ImageObservation(hash="0123456789ab")
    kit.loop.images = FakeImages({"vision/train": stale})
    demand(kit, 1)
    report = kit.loop.tick()
    assert report.error is None
    assert kit.loop.last_snapshot.pools["vision/train"] == PoolObservation(pending=pending(1), image=stale)
    assert [a.kind for a in report.plan.actions] == ["hold"]
    assert "no image has bootstrap hash 0123456789ab" in report.plan.actions[0].reason
    assert kit.executor.submitted and report.created == []
    kit.store.close()


def test_a_failing_image_read_leaves_images_unknown_and_is_logged_once(tmp_path, caplog):
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=4,
                 bootstrap={"image": "baked", "when_stale": "hold"})
    kit = make_loop(tmp_path)
    kit.loop.images = FakeImages(error=OSError("roles directory not found"))
    demand(kit, 1)
    with caplog.at_level(logging.WARNING, logger="autoscaler.service.control.loop"):
        first, second = kit.loop.tick(), kit.loop.tick()
    assert first.error is None and second.error is None
    assert kit.loop.last_snapshot.pools["vision/train"].image is None
    assert [a.kind for a in first.plan.actions] == ["launch"]  # unknown: decided as usual
    assert len([r for r in caplog.records if "roles directory" in r.getMessage()]) == 1
    kit.store.close()


def test_the_last_reconcile_run_s_findings_reach_status_and_the_page(kit, monkeypatch):
    stuck = Finding(kind="drain-stuck", node="vision-train-9", pool="vision/train",
                    detail="drain stuck for 2h10m (limit 1h): phase requested, scheduler "
                           "cannot be read (GET https://ops:hunter2@slurm.example/ failed); not forced")
    region = Finding(kind="lost-frozen", detail="aws/us-east-1 answered with no instance")
    found = [stuck, region]
    monkeypatch.setattr(kit.reconciler, "run", lambda snapshot=None: ReconcileReport(
        at=kit.clock(), findings=list(found)))
    kit.loop.tick()
    lines = status_of(kit)["loop"]["reconcile_findings"]
    assert lines == ["drain-stuck vision-train-9: drain stuck for 2h10m (limit 1h): phase requested, "
                     "scheduler cannot be read (GET https://ops:***@slurm.example/ failed); not forced",
                     "lost-frozen: aws/us-east-1 answered with no instance"]
    ran_at = status_of(kit)["loop"]["reconciled_at"]
    assert ran_at is not None and status_of(kit)["loop"]["reconcile_error"] is None
    page = page_of(kit)
    assert f"From the run at {ran_at}." in page and "drain stuck for 2h10m" in page
    assert "hunter2" not in page

    # A run that fails keeps the last findings, and both surfaces say they are older.
    def broken(snapshot=None):  # type: ignore[no-untyped-def]
        raise RuntimeError("DescribeInstances timed out (token=hunter2)")
    monkeypatch.setattr(kit.reconciler, "run", broken)
    kit.loop.tick()
    loop = status_of(kit)["loop"]
    assert loop["reconciled_at"] == ran_at and len(loop["reconcile_findings"]) == 2
    assert loop["reconcile_error"].startswith("RuntimeError: DescribeInstances timed out")
    page = page_of(kit)
    assert "The last run failed: RuntimeError: DescribeInstances timed out" in page
    assert f"From the run at {ran_at}. Its findings may no longer be true." in page
    assert "hunter2" not in page and "hunter2" not in str(loop)

    found.clear()  # replaced each run: what is true now, not a history
    monkeypatch.setattr(kit.reconciler, "run", lambda snapshot=None: ReconcileReport(
        at=kit.clock(), findings=list(found)))
    kit.loop.tick()
    assert status_of(kit)["loop"]["reconcile_findings"] == []
    assert status_of(kit)["loop"]["reconcile_error"] is None
    assert "drain stuck for 2h10m" not in page_of(kit)


def test_a_job_no_pool_can_run_is_logged_when_it_starts_and_shown_on_the_page(kit, caplog,
                                                                            monkeypatch):
    job = UnservedJob(id="ml/resnet-7", team="vision", constraint="taint gpu=a100:NoSchedule",
                      reason="no pool's nodes could run it: vision/train: taint gpu=a100:NoSchedule "
                             "not tolerated")
    read = kit.signals.read
    monkeypatch.setattr(kit.signals, "read", lambda *args: dataclasses.replace(
        read(*args), unserved=[job]))
    with caplog.at_level(logging.DEBUG, logger="autoscaler.service.control.loop"):
        kit.loop.tick()
        kit.loop.tick()
    said = [(r.levelno, r.getMessage()) for r in caplog.records if "unserved ml/resnet-7" in r.getMessage()]
    assert [level for level, _ in said] == [logging.INFO, logging.DEBUG]  # like a hold
    assert all("(taint gpu=a100:NoSchedule)" in text and job.reason in text for _, text in said)
    page = page_of(kit)
    assert "Pending jobs no pool can run" in page
    assert "<td>ml/resnet-7</td><td>vision</td><td>taint gpu=a100:NoSchedule</td>" in page


def test_placement_choices_are_logged_at_debug(kit, caplog):
    choice = PlacementChoice(job="j1", pool="vision/east", listed_under="vision/east",
                             compared=["vision/east", "vision/west"],
                             reason="job j1: vision/east chosen: it fits on capacity already there")
    with caplog.at_level(logging.DEBUG, logger="autoscaler.service.control.loop"):
        kit.loop._log_plan(7, Plan(decided_at=kit.clock(), placements=[choice]))
    [record] = [r for r in caplog.records if "placement" in r.getMessage()]
    assert record.levelno == logging.DEBUG and record.getMessage() == f"plan 7: placement {choice.reason}"


def test_a_launch_backoff_is_logged_once_when_it_starts_and_shown_on_the_page(tmp_path, caplog):
    kit = make_loop(tmp_path, dry_run=True)  # nothing launched: the back-off lasts
    S, now = NodeState, kit.clock.now
    kit.loop.reloader.refresh()
    launched_under = NodeProgress(policy=fingerprint(kit.loop.policies()["vision"].pools[0]))
    node = create_node(kit.store, pool="train", now=now, progress=launched_under).name
    walk(kit.store, node, now, S.PROVISIONING, S.BOOTSTRAPPING)
    transition(kit.store, node, S.BOOTSTRAP_FAILED, now, "bootstrap failed at task 'nvidia driver'")
    with caplog.at_level(logging.INFO, logger="autoscaler.service.control.loop"):
        kit.loop.tick()
        kit.loop.tick()
    said = [r.getMessage() for r in caplog.records if "launch back-off" in r.getMessage()]
    assert len(said) == 1 and "bootstrap failed at task 'nvidia driver', 1 time(s) in a row" in said[0]
    page = page_of(kit)
    assert "Launch back-offs" in page and "nvidia driver&#x27;, 1 time(s) in a row" in page
    kit.store.close()


def test_status_and_the_page_show_the_engine_s_plan_not_a_capacity_request_s(kit):
    demand(kit, 1, 1)
    engine = kit.loop.tick()
    launch = engine.plan.actions[0].reason
    # What RequestKeeper.run records after the tick when a request's ttl ends.
    keeper = Plan(decided_at=kit.clock(), actions=[Drain(
        pool="vision/train", node="vision-train-1", trigger="ttl",
        reason="vision/ci-4711: ttl 2h ended; draining its nodes")])
    newest = kit.store.record_plan(keeper)
    last = status_of(kit)["last_plan"]
    assert last["id"] == engine.plan_id and last["plan"]["pools"]
    assert html.escape(launch) in page_of(kit)
    # A follower has no plan of its own: the newest recorded one.
    assert status_of(kit, leader=False)["last_plan"]["id"] == newest


def test_the_leader_prunes_old_plans_at_most_hourly_and_keeps_open_ones(kit, monkeypatch):
    """A plan row per tick was kept for ever (~17 MB a day with 20 pools)."""
    monkeypatch.setattr(loop_module, "KEEP_PLANS", 2)
    kit.loop.plan_retention = timedelta(days=7)

    def old(status):
        plan = Plan(decided_at=kit.clock() - timedelta(days=8), actions=[
            Drain(pool="vision/train", node="vision-train-9", trigger="idle", reason="idle")])
        plan_id = kit.store.record_plan(plan)
        [row] = kit.store.actions(plan_id)
        kit.store.set_action_status(row.id, status, kit.clock())
        return plan_id

    settled, still_open = [old("submitted"), old("failed")], old("submitting")
    assert kit.loop.tick().error is None
    assert [queries.plan_by_id(kit.store, i) is None for i in (*settled, still_open)] == [
        True, True, False]
    assert kit.store.last_plan()[0] == kit.loop.state.last_plan_id  # the tick's own stays
    later = old("submitted")
    kit.clock.advance(minutes=30)
    kit.loop.tick()
    assert queries.plan_by_id(kit.store, later) is not None, "pruned at most once an hour"
    kit.clock.advance(minutes=31)
    kit.loop.tick()
    assert queries.plan_by_id(kit.store, later) is None
    assert queries.plan_by_id(kit.store, still_open) is not None


def test_the_leader_prunes_old_audit_rows_in_the_hourly_prune(kit, monkeypatch):
    """The audit table grew by rows per interruption, failed health check and long job."""
    monkeypatch.setattr(loop_module, "PRUNE_BATCH", 2)
    kit.loop.audit_retention = timedelta(days=90)
    for days in (200, 150, 120, 91, 30):
        kit.store.audit("interruption", f"{days}d", kit.clock() - timedelta(days=days))
    assert kit.loop.tick().error is None
    assert [r.detail for r in kit.store.audit_log() if r.event == "interruption"] == [
        "120d", "91d", "30d"], "one batch a prune"
    kit.clock.advance(seconds=30)
    kit.loop.tick()  # a full batch leaves more: the next tick goes on
    assert [r.detail for r in kit.store.audit_log() if r.event == "interruption"] == ["30d"]


def test_the_hourly_prune_removes_demand_bins_of_pools_gone_from_the_policies(kit, monkeypatch):
    """Only a predictive pool's refit pruned its bins: a removed pool kept them for ever."""
    monkeypatch.setattr(loop_module, "PRUNE_BATCH", 3)
    kit.loop.forecasts = PoolForecasts(kit.store)
    history = kit.loop.forecasts.history
    old = bin_start(kit.clock()) - history.retention - timedelta(days=1)
    history.fill("gone/gpu", [(old + i * timedelta(minutes=5), 2.0) for i in range(5)])
    recent = bin_start(kit.clock()) - timedelta(days=1)
    history.fill("gone/gpu", [(recent, 2.0)])
    kit.loop.tick()
    assert len(history.bins("gone/gpu", old)) == 3, "one bounded batch a prune"
    kit.clock.advance(seconds=30)
    kit.loop.tick()  # a full batch leaves more: the next tick goes on
    assert [b.start for b in history.bins("gone/gpu", old)] == [recent]
