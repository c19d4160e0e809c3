"""The reconciler with fakes: unknown instances, LOST nodes, timeouts, state drift."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.actuators.node_map import NodeSpec
from autoscaler.actuators.terraform.bake import ROLE_TAG
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.fleet.intents import NewNode, interpret
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Plan
from autoscaler.model.pool import PoolRef
from autoscaler.model.progress import DrainPhase, ProgressUpdate
from autoscaler.model.snapshot import NodeObservation, PoolObservation, RunningJob, SchedulerNode
from autoscaler.model.snapshot_parts import Observed
from autoscaler.policy.models import Market
from autoscaler.service.control.reconciler import Reconciler
from autoscaler.service.executor import ExecutorSettings
from autoscaler.service.executor.operations import WorkerPools
from autoscaler.service.executor.provision import apply_key
from tests.builders import NOW
from tests.clouds.helpers import AWS_TEST_ENV
from tests.fleet.writes import patch, transition
from tests.service.executor_rig import Rig, drain, launch
from tests.trickle import trickling

S = NodeState
POOL = PoolRef("vision", "gpu", "aws", "us-east-1")
SPEC = NodeSpec(instance_type="p3.2xlarge", market=Market.ON_DEMAND)


def stray(rig: Rig, node: str = "vision-gpu-7") -> str:
    """An instance with our tags that the store never heard of (a leak, or another copy)."""
    return rig.cloud.launch(POOL, node, SPEC).instance_id


def test_unknown_instance_is_reported_and_left_alone_by_default(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    leaked = stray(rig)
    report = rig.reconciler().run()
    [finding] = report.of("unknown-instance")
    assert finding.instance_id == leaked and finding.pool == "vision/gpu"
    assert [i.instance_id for i in rig.cloud.live() if i.instance_id == leaked] == [leaked]
    assert [c for c in rig.tf.calls if c[0] == "apply" and c[2]["destroy"]] == []
    assert rig.state(name) is S.READY and report.changes == []


def test_unknown_instance_destroyed_through_terraform(rig: Rig) -> None:
    rig.settings = ExecutorSettings(unknown_instances="destroy")
    [name] = rig.ready_nodes()
    leaked = stray(rig)
    report = rig.reconciler().run()
    [destroyed] = report.of("destroying")
    assert destroyed.instance_id == leaked
    apply_call = [c for c in rig.tf.calls if c[0] == "apply"][-1]
    assert apply_call[2] == {"nodes": {name: SPEC}, "destroy": [leaked]}
    assert [i.node for i in rig.cloud.live()] == [name]  # only the stray is gone
    assert rig.reconciler().run().of("unknown-instance") == []


def test_a_bake_builder_is_reported_never_destroyed_nor_adopted(rig: Rig) -> None:
    """A bake's builder carries our tags but belongs to the bake's own state, which
    destroys it: destroying or adopting it here would break the bake under way."""
    for mode in ("destroy", "adopt"):
        rig.settings = ExecutorSettings(unknown_instances=mode)
        builder = rig.cloud.launch(POOL, f"vision-gpu-builder-{mode}", SPEC)
        rig.cloud.instances[builder.instance_id] = replace(
            builder, tags={**builder.tags, ROLE_TAG: "builder"})
        report = rig.reconciler().run()
        [found] = [f for f in report.of("bake-builder") if f.instance_id == builder.instance_id]
        assert "gpu-autoscaler image bake vision/gpu" in found.detail
        assert report.of("unknown-instance") == report.of("destroying") == []
        assert report.of("adopted") == [] and rig.store.get(builder.node or "") is None
    assert [c for c in rig.tf.calls if c[0] == "apply"] == []
    assert len(rig.cloud.live()) == 2


def test_unknown_instance_adopted_into_store_and_terraform_state(rig: Rig) -> None:
    rig.settings = ExecutorSettings(unknown_instances="adopt")
    leaked = stray(rig, "vision-gpu-7")
    report = rig.reconciler().run()
    [adopted] = report.of("adopted")
    node = rig.node("vision-gpu-7")
    assert adopted.node == node.name and node.state is S.BOOTSTRAPPING
    assert node.instance_id == leaked and rig.store.meta(node.name)["cluster"] == "slurm"
    assert rig.tf.applied(POOL) is None  # stale: the next advance applies the pool
    rig.advance()  # the apply imports the instance under its key instead of launching another
    assert [i.instance_id for i in rig.cloud.live()] == [leaked]
    assert rig.tf.state["vision/gpu"]["vision-gpu-7"].id == leaked
    assert rig.ansible.calls == [["vision-gpu-7"]]


@pytest.mark.parametrize("launched", [datetime(1970, 1, 1, tzinfo=UTC), datetime(9999, 1, 1, tzinfo=UTC),
                                      NOW - timedelta(days=5 * 365, seconds=1),
                                      NOW + timedelta(minutes=5, seconds=1),
                                      datetime(1970, 1, 1), "1970-01-01T00:00:00Z"])
def test_an_adopted_node_with_an_implausible_launch_time_is_aged_from_now(
        rig: Rig, launched: object) -> None:
    """1970 would replace the node at once by max_node_age, 9999 would never age it out."""
    rig.settings = ExecutorSettings(unknown_instances="adopt")
    leaked = stray(rig)
    rig.cloud.instances[leaked] = replace(rig.cloud.instances[leaked], launched_at=launched)
    [adopted] = rig.reconciler().run().of("adopted")
    assert rig.node("vision-gpu-7").created_at == rig.clock()
    assert adopted.detail.startswith(f"{leaked} adopted as vision-gpu-7 (BOOTSTRAPPING); its launch "
                                     "time ")
    assert adopted.detail.endswith(", so its age counts from now")


@pytest.mark.parametrize("launched", [NOW - timedelta(days=5 * 365), NOW - timedelta(hours=1),
                                      NOW + timedelta(minutes=5)])
def test_an_adopted_node_with_a_plausible_launch_time_keeps_it(rig: Rig, launched: datetime) -> None:
    rig.settings = ExecutorSettings(unknown_instances="adopt")
    leaked = stray(rig)
    rig.cloud.instances[leaked] = replace(rig.cloud.instances[leaked], launched_at=launched)
    [adopted] = rig.reconciler().run().of("adopted")
    assert rig.node("vision-gpu-7").created_at == launched
    assert adopted.detail == f"{leaked} adopted as vision-gpu-7 (BOOTSTRAPPING)"


def test_adoption_refused_without_policy_or_with_a_taken_name(rig: Rig) -> None:
    rig.settings = ExecutorSettings(unknown_instances="adopt")
    [name] = rig.ready_nodes()
    transition(rig.store, name, S.DRAINING, rig.clock(), "test")
    other = rig.cloud.launch(PoolRef("ghost", "gpu", "aws", "us-east-1"), "ghost-gpu-1", SPEC)
    twin = stray(rig, name)  # a second instance claiming an existing node's name
    texts = [f.detail for f in rig.reconciler().run().of("unknown-instance")]
    assert any(f"cannot adopt {other.instance_id}: its pool has no policy" in t for t in texts)
    assert any(f"cannot adopt {twin}: the name {name} is taken" in t for t in texts)


def test_node_whose_instance_vanished_is_lost_after_two_misses_then_terminated(rig: Rig) -> None:
    [a, b] = rig.ready_nodes(2)
    rig.cloud.terminate(rig.node(a).instance_id or "")
    first = rig.reconciler()
    assert [f.node for f in first.run().of("missing")] == [a] and rig.state(a) is S.READY
    report = first.run()
    assert [f.node for f in report.of("lost")] == [a] and rig.state(a) is S.LOST
    rig.advance()
    assert rig.state(a) is S.TERMINATED and rig.state(b) is S.READY
    assert [i.node for i in rig.cloud.live()] == [b]  # LOST is never recreated


def test_the_cloud_is_listed_at_its_interval_and_a_lost_node_still_found(rig: Rig) -> None:
    """cloud_list_interval: runs in between list nothing and conclude nothing; the misses
    that mark a node LOST come from listings, one per interval."""
    rig.settings = ExecutorSettings(cloud_list_interval="2m")
    [name, _] = rig.ready_nodes(2)  # one node of two gone: believable (an empty answer is not)
    rig.cloud.terminate(rig.node(name).instance_id or "")
    rec = rig.reconciler()
    listings = lambda: sum(1 for c in rig.cloud.calls if c[0] == "managed_instances")  # noqa: E731
    before = listings()
    assert [f.node for f in rec.run().of("missing")] == [name]
    for _ in range(3):
        rig.clock.tick(30)
        assert rec.run().of("missing") == [] and rig.state(name) is S.READY
    assert listings() == before + 1
    rig.clock.tick(30)
    assert [f.node for f in rec.run().of("lost")] == [name] and listings() == before + 2


def test_cloud_errors_conclude_nothing(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    rig.cloud.terminate(rig.node(name).instance_id or "")
    rec = rig.reconciler()
    for _ in range(3):
        rig.cloud.next_error = ConnectionError("endpoint down")
        report = rec.run()
        assert report.errors and report.of("lost") == []
    assert rig.state(name) is S.READY


@pytest.mark.parametrize(("state", "after", "then"), [
    (S.REQUESTED, timedelta(minutes=16), S.PROVISION_FAILED),
    (S.PROVISIONING, timedelta(minutes=21), S.PROVISION_FAILED),
    (S.INTERRUPTED, timedelta(minutes=3), S.TERMINATING),
    (S.TERMINATING, timedelta(minutes=21), S.LOST),
])
def test_stuck_states_time_out_per_the_lifecycle_table(rig: Rig, state: NodeState,
                                                       after: timedelta, then: NodeState) -> None:
    [name] = rig.submit(launch())
    path = {S.REQUESTED: [], S.PROVISIONING: [S.PROVISIONING],
            S.INTERRUPTED: [S.PROVISIONING, S.BOOTSTRAPPING, S.INTERRUPTED],
            S.TERMINATING: [S.PROVISIONING, S.TERMINATING]}[state]
    for step in path:
        transition(rig.store, name, step, rig.clock(), "test")
    rig.clock.tick(after.total_seconds() - 120)
    assert rig.reconciler().run().of("timeout") == []
    rig.clock.tick(120)
    [finding] = rig.reconciler().run().of("timeout")
    assert rig.state(name) is then and finding.node == name
    assert f"{state} for" in rig.node(name).reason


def drain_at(rig: Rig, name: str, phase: DrainPhase, signalled: bool) -> None:
    """The drain's progress as the drainer would have left it at ``phase``."""
    progress = rig.node(name).progress.drain
    assert progress is not None
    at = progress.started_at + timedelta(minutes=10) if signalled else None
    patch(rig.store, name, rig.clock(), progress=ProgressUpdate(
        drain=progress.at(phase, signalled_at=at)))


def test_drain_timeout_uses_the_pool_limit_plus_grace_and_margin(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    rig.slurm.scheduler.run(name, "1")
    rig.submit(drain(name))
    drain_at(rig, name, DrainPhase.REQUEUED, signalled=True)  # the drainer did its part
    # Pool: drain_timeout 10m + checkpoint_grace 1m, settings margin 5m.
    rig.clock.tick(15 * 60)
    assert rig.reconciler().run().of("timeout") == []
    rig.clock.tick(61)
    rig.reconciler().run()
    assert rig.state(name) is S.DRAINED


def busy_view(rig: Rig, name: str) -> Observed:
    return Observed(taken_at=rig.clock(), nodes={name: NodeObservation(scheduler=SchedulerNode(
        state="allocated", gpus_total=1, gpus_allocated=1, cordoned=True,
        jobs=[RunningJob(id="1", gpus=1)]))})


def test_a_drain_that_never_reached_the_scheduler_is_not_forced(rig: Rig) -> None:
    """Audit F4: slurmctld unreachable for 3 h, no drain step ran (never cordoned, jobs never
    signalled). Time alone used to force DRAINED (and say the jobs were requeued)."""
    [name] = rig.ready_nodes()
    rig.submit(drain(name))
    rig.clock.tick(3 * 3600)
    rec = rig.reconciler()
    report = rec.run(Observed(taken_at=rig.clock(), missing=["slurm"]))
    node = rig.node(name)
    assert node.state is S.DRAINING and node.progress.drain is not None
    assert node.progress.drain.phase is DrainPhase.REQUESTED
    assert report.of("timeout") == [] and report.changes == []
    [stuck] = report.of("drain-stuck")
    assert stuck.node == name and stuck.detail == (
        "drain stuck for 3h (limit 16m): phase requested, scheduler does not list it (slurm not "
        "read this tick); not forced")
    unread = Observed(taken_at=rig.clock(), pools={"vision/gpu": PoolObservation(
        scheduler_missing="squeue: timed out")})
    [stuck] = rec.run(unread).of("drain-stuck")
    assert "phase requested, scheduler cannot be read (squeue: timed out); not forced" in stuck.detail
    drain_at(rig, name, DrainPhase.CORDONED, signalled=False)  # cordoned, jobs still running
    [stuck] = rec.run(busy_view(rig, name)).of("drain-stuck")
    assert "phase cordoned, scheduler reports 1 job(s) running on it; not forced" in stuck.detail
    [stuck] = rec.run().of("drain-stuck")  # no scheduler view at all: no evidence either
    assert "scheduler was not read; not forced" in stuck.detail
    assert rig.state(name) is S.DRAINING


@pytest.mark.parametrize(("phase", "says"), [
    (DrainPhase.SIGNALLED, "its jobs were sent SIGUSR2 at 2026-11-30 12:10:00 but not requeued"),
    (DrainPhase.REQUEUEING, "its jobs were sent SIGUSR2 at 2026-11-30 12:10:00; their requeue "
                            "was started"),
    (DrainPhase.REQUEUED, "its jobs were sent SIGUSR2 at 2026-11-30 12:10:00 and requeued"),
])
def test_a_stuck_drain_whose_jobs_were_signalled_is_forced_and_says_so(
        rig: Rig, phase: DrainPhase, says: str) -> None:
    [name] = rig.ready_nodes()
    rig.submit(drain(name))
    drain_at(rig, name, phase, signalled=True)
    rig.clock.tick(3 * 3600)
    report = rig.reconciler().run(Observed(taken_at=rig.clock(), missing=["slurm"]))
    [timeout] = report.of("timeout")
    assert rig.state(name) is S.DRAINED and report.of("drain-stuck") == []
    assert timeout.detail == rig.node(name).reason == (
        f"DRAINING for 3h, over 16m: the drain reached {phase}: {says}; the scheduler does not "
        "list it (slurm not read this tick)")


def test_a_drain_signalled_late_still_gets_its_whole_checkpoint_grace(rig: Rig) -> None:
    """Audit 8 F7: the limit (drain_timeout + grace + margin) assumes the signal went out at
    the deadline. One sent 3 h late (an outage) was forced 90 s after it, and the node
    terminated inside its jobs' checkpoint grace."""
    [name] = rig.ready_nodes()
    rig.submit(drain(name))
    rig.clock.tick(3 * 3600)
    late = rig.node(name).progress.drain
    assert late is not None
    patch(rig.store, name, rig.clock(), progress=ProgressUpdate(
        drain=late.at(DrainPhase.SIGNALLED, signalled_at=rig.clock())))
    rig.clock.tick(30)
    rec = rig.reconciler()
    report = rec.run(busy_view(rig, name))
    assert rig.state(name) is S.DRAINING and report.of("timeout") == []
    assert report.of("drain-stuck") == []  # inside its grace: not stuck either
    rig.clock.tick(31)  # the pool's checkpoint_grace (1m) has passed since the signal
    [timeout] = rec.run(busy_view(rig, name)).of("timeout")
    assert rig.state(name) is S.DRAINED and "the drain reached signalled" in timeout.detail


def test_a_forward_step_of_the_wall_clock_does_not_age_a_node_once_seen(rig: Rig) -> None:
    """Audit 8 F7: NTP (or a resumed VM) steps the controller's clock forward 2 h. Durations
    on the wall clock alone failed a bootstrap mid-run (and forced drains): once a node is
    seen in its state, the monotonic clock measures how long it stays there."""
    [name] = rig.submit(launch())
    rig.advance()
    assert rig.state(name) is S.BOOTSTRAPPING
    mono = [1000.0]
    rec = Reconciler(rig.store, rig.tf, lambda cloud, region: rig.cloud, rig.settings, rig.clock,
                     policies=lambda: rig.policies, monotonic=lambda: mono[0])
    rec.run()  # first seen BOOTSTRAPPING, a few seconds old
    rig.clock.tick(2 * 3600)  # the step; 30 s really passed
    mono[0] += 30
    assert rec.run().of("timeout") == [] and rig.state(name) is S.BOOTSTRAPPING
    mono[0] += 41 * 60  # past the limit (41m) on the monotonic clock
    [timeout] = rec.run().of("timeout")
    assert timeout.node == name and rig.state(name) is S.BOOTSTRAP_FAILED
    # A reconciler that never saw it before (a restart) has only the wall clock.
    [other] = rig.submit(launch())
    rig.advance()
    rig.clock.tick(2 * 3600)
    rig.reconciler().run()
    assert rig.state(other) is S.BOOTSTRAP_FAILED


def test_a_stuck_drain_the_scheduler_reports_empty_is_forced_and_says_so(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    rig.submit(drain(name))
    rig.clock.tick(3 * 3600)
    empty = Observed(taken_at=rig.clock(), nodes={name: NodeObservation(
        scheduler=SchedulerNode(state="idle", gpus_total=1, cordoned=True))})
    [timeout] = rig.reconciler().run(empty).of("timeout")
    assert rig.state(name) is S.DRAINED
    assert timeout.detail == ("DRAINING for 3h, over 16m: the scheduler reports it idle with no "
                              "jobs (drain at phase requested): nothing left to drain")
    assert "signalled" not in timeout.detail and "requeued" not in timeout.detail


def test_bootstrapping_limit_covers_retries_and_ready_wait(rig: Rig) -> None:
    [name] = rig.submit(launch())
    rig.advance()
    # bootstrap.timeout 10m x 3 runs + 2 x 30s backoff + 10m ready wait = 41m
    rig.clock.tick(40 * 60)
    rig.reconciler().run()
    assert rig.state(name) is S.BOOTSTRAPPING
    rig.clock.tick(61)
    rig.reconciler().run()
    assert rig.state(name) is S.BOOTSTRAP_FAILED and "BOOTSTRAPPING for" in rig.node(name).reason


def test_terraform_state_drift_marks_the_pool_stale_at_the_check_interval(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    rig.tf.no_capacity.add(("p3.2xlarge", Market.SPOT))
    [old] = rig.submit(launch(market=Market.SPOT))
    rig.advance()
    assert rig.state(old) is S.PROVISION_FAILED  # a row that wants no instance
    rec = rig.reconciler()
    assert rec.run().of("state-only") == []
    held = rig.tf.state["vision/gpu"]
    held[old] = held[name].model_copy(update={"id": "i-0000000000000abcd"})
    assert rec.run().of("state-only") == []  # checked again only after state_check_interval
    rig.clock.tick(5 * 60 + 1)
    [finding] = rec.run().of("state-only")
    assert finding.node == old and rig.tf.applied(POOL) is None
    del held[name], held[old]
    rig.clock.tick(5 * 60 + 1)
    assert [f.node for f in rec.run().of("state-missing")] == [name]


def test_a_state_key_the_store_has_no_row_for_is_reported_not_applied_away(rig: Rig) -> None:
    """A store restored from a backup lacks the nodes launched since: the state still holds
    them. They are not drift to apply away (an apply would destroy running nodes): the
    pool's apply waits, says why, and a node named anew is not handed their instance."""
    [name] = rig.ready_nodes()
    held = rig.tf.state["vision/gpu"]
    held["vision-gpu-9"] = held[name].model_copy(update={"id": "i-0000000000000abcd"})
    rig.tf.applied_maps["vision/gpu"]["vision-gpu-9"] = rig.tf.applied_maps["vision/gpu"][name]
    rec = rig.reconciler()
    rec.run()
    rig.clock.tick(5 * 60 + 1)
    report = rec.run()
    assert report.of("state-only") == [] and rig.tf.applied(POOL) is not None
    [finding] = report.of("state-unknown")
    assert finding.node == "vision-gpu-9" and "not applied until it is adopted" in finding.detail
    applies = rig.tf.calls.count
    before = len([c for c in rig.tf.calls if c[0] == "apply"])
    [new] = rig.submit(launch())
    advanced = rig.advance()
    assert len([c for c in rig.tf.calls if c[0] == "apply"]) == before, applies
    assert rig.state(new) is S.REQUESTED and "vision-gpu-9" in held
    [error] = [e for e in advanced.errors if "not applied" in e]
    assert ("its Terraform state holds vision-gpu-9, which the store has no row for, and an "
            "apply would destroy") in error and "executor.unknown_instances: adopt" in error


def test_state_checks_run_on_a_worker_under_the_pools_apply_key(rig: Rig) -> None:
    """Given a runner, the state pull is an operation: never in the tick, never during the
    pool's apply; what it finds is in the next run's report."""
    [name] = rig.ready_nodes()
    held = rig.tf.state["vision/gpu"]
    held["vision-gpu-9"] = held[name].model_copy(update={"id": "i-0000000000000abcd"})
    runner = WorkerPools(rig.clock, {"state": 1})
    base = rig.reconciler()
    rec = Reconciler(rig.store, rig.tf, lambda cloud, region: rig.cloud, rig.settings, rig.clock,
                     policies=lambda: rig.policies, runner=runner)
    assert base.runner is None
    try:
        reads = rig.tf.calls.count(("instances", "vision/gpu", None))
        with runner.claim([apply_key("vision/gpu")]) as claimed:  # the pool is being applied
            assert claimed
            assert rec.run().of("state-unknown") == []
            assert rig.tf.calls.count(("instances", "vision/gpu", None)) == reads
        assert rec.run().of("state-unknown") == []  # started on the worker, not waited for
        assert runner.wait(10)
        [finding] = rec.run().of("state-unknown")  # collected by the next run
        assert finding.node == "vision-gpu-9" and rig.tf.applied(POOL) is not None  # no row: kept
        assert rec.run().of("state-unknown") == []  # checked again only after the interval
    finally:
        runner.close()


def test_ready_node_that_the_scheduler_reports_down(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    snap = Observed(taken_at=rig.clock(), nodes={name: NodeObservation(
        scheduler=SchedulerNode(state="down", ready=False))})
    [finding] = rig.reconciler().run(snap).of("scheduler-down")
    assert finding.node == name


def test_a_replacement_promised_before_a_restart_is_created_before_the_engine_counts(
        rig: Rig) -> None:
    [old] = rig.ready_nodes()
    # A crash after the promise was written and before the new node was created.
    spec = launch(replaces=[old]).model_copy(update={"count": 1})
    from_intent = interpret(Plan(decided_at=rig.clock(), actions=[spec]))[0]
    assert isinstance(from_intent, NewNode)
    patch(rig.store, old, rig.clock(), replacement_requested=True,
          progress=ProgressUpdate(replacement=from_intent.launch()))
    report = rig.reconciler().run()
    [found] = report.of("replacement-created")
    new = rig.store.get(found.node)  # type: ignore[arg-type]
    assert new is not None and new.state is S.REQUESTED and new.replaces == old
    assert rig.store.get(old).progress.replacement is None  # type: ignore[union-attr]
    assert rig.reconciler().run().of("replacement-created") == []  # done once


@pytest.mark.timeout(30)
def test_a_cloud_listing_that_trickles_is_a_reconcile_error_within_the_call_limit(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore bounds each socket read, not the answer: a listing page that overruns its
    limit is the run's error (nothing concluded, nothing moved), and the next run's listing
    fails at once while that call still runs."""
    for key, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(key, value)
    [name] = rig.ready_nodes()
    with trickling() as trickle:
        cloud = AwsCloud("us-east-1", settings=AwsSettings(
            endpoint_url=trickle.url, connect_timeout=0.5, read_timeout=0.5, max_attempts=1))
        reconciler = Reconciler(rig.store, rig.tf, lambda cloud_name, region: cloud,
                                rig.settings, rig.clock, policies=lambda: rig.policies)
        cloud._client("ec2")  # built beforehand: loading botocore's models is not the call
        started = time.monotonic()
        first = reconciler.run()
        assert time.monotonic() - started < 1.5 + 1.5
        assert first.errors == [f"aws/us-east-1: cannot list instances: ec2 describe_instances in "
                                f"us-east-1: {trickle.url} did not finish its answer within 1.5s"]
        started = time.monotonic()
        second = reconciler.run()
        assert time.monotonic() - started < 0.5
        [error] = second.errors
        assert error.endswith("is still sending the answer to a call that overran its time: "
                              "nothing sent")
        assert trickle.requests == 1
    assert first.changes == second.changes == [] and rig.state(name) is S.READY


def test_a_miss_count_is_dropped_once_its_node_left_by_another_path(rig: Rig) -> None:
    """A spot node missed once, then reclaimed through its notice (INTERRUPTED,
    TERMINATING), is never listed again nor marked LOST: its count must not stay."""
    names = rig.ready_nodes(7)  # the last one stays: an empty listing is not believed
    rec = rig.reconciler()
    for name in names[:5]:
        rig.cloud.terminate(rig.node(name).instance_id or "")
        assert [f.node for f in rec.run().of("missing")] == [name]
        transition(rig.store, name, S.INTERRUPTED, rig.clock())
        transition(rig.store, name, S.TERMINATING, rig.clock())
    rec.run()
    assert rec._misses == {}
    rig.cloud.terminate(rig.node(names[5]).instance_id or "")
    rec.run()
    assert rec._misses == {names[5]: 1}  # a node still counted keeps its count
