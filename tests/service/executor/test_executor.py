"""The executor with fakes: launch to READY, failures, drains, cancels, replacements."""

from __future__ import annotations

import math
from datetime import timedelta

from autoscaler.actuators.ansible import HostStatus
from autoscaler.actuators.drain import DrainError
from autoscaler.actuators.terraform import StateLockedError, TerraformError
from autoscaler.clouds.base import CloudUnreachableError
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import CancelDrain, Plan, Replace, ReportJob
from autoscaler.model.progress import InterruptionRecord, NodeProgress, ProgressUpdate
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, Snapshot
from autoscaler.policy.models import Market
from autoscaler.service.executor import ExecutorSettings
from autoscaler.service.executor.drain import interruption_progress
from tests.fakes import FakeDrainer
from tests.fleet.writes import create_node, transition
from tests.service.executor_rig import Rig, drain, launch, slurm_policy, terminate

S = NodeState


def test_launch_goes_requested_provisioning_bootstrapping_ready(rig: Rig) -> None:
    [name] = rig.submit(launch())
    assert name == "vision-gpu-1" and rig.state(name) is S.REQUESTED
    assert rig.tf.calls == [] and rig.cloud.instances == {}  # submit has no side effect

    report = rig.advance()
    node = rig.node(name)
    [inst] = rig.cloud.live()
    assert node.state is S.BOOTSTRAPPING and node.instance_id == inst.instance_id
    assert node.address == "169.254.77.3"  # the resolver seam, not the cloud's 172.31 address
    assert rig.ansible.calls == [[name]]
    assert report.moved(S.PROVISIONING) == [name] and report.moved(S.BOOTSTRAPPING) == [name]
    assert report.bootstrapped == [name]

    rig.advance()  # slurm does not know the node yet
    assert rig.state(name) is S.BOOTSTRAPPING and rig.ansible.calls == [[name]]
    rig.slurm.scheduler.join(name)
    assert rig.advance().moved(S.READY) == [name]
    steps = [(t.from_state, t.to_state) for t in rig.store.transitions(name)]
    assert steps == [(None, "REQUESTED"), ("REQUESTED", "PROVISIONING"),
                     ("PROVISIONING", "BOOTSTRAPPING"), ("BOOTSTRAPPING", "READY")]


def test_nodes_on_a_baked_image_run_the_node_time_part_in_batches_of_their_own(rig: Rig) -> None:
    rig.tf.baked = {"vision-gpu-1": "ami-0baked", "vision-gpu-3": "ami-0baked"}
    names = rig.submit(launch(3))
    rig.advance()
    assert {n: rig.node(n).progress.baked_image for n in names} == {
        "vision-gpu-1": "ami-0baked", "vision-gpu-2": None, "vision-gpu-3": "ami-0baked"}
    # Never one run for both parts (the fake, like the real actuator, refuses a mixed batch).
    assert dict(zip(rig.ansible.tags, rig.ansible.calls, strict=True)) == {
        None: ["vision-gpu-2"], "node": ["vision-gpu-1", "vision-gpu-3"]}
    for name in names:
        rig.slurm.scheduler.join(name)
    rig.advance()
    reasons = {n: [(t.to_state, t.reason) for t in rig.store.transitions(n)][-2:] for n in names}
    baked = "baked image ami-0baked (node-time bootstrap)"
    assert reasons["vision-gpu-1"][0] == ("BOOTSTRAPPING", f"instance {rig.node('vision-gpu-1').instance_id} "
                                          f"created; {baked}")
    assert reasons["vision-gpu-1"][1][1].startswith(f"bootstrapped, {baked}; ")
    assert reasons["vision-gpu-2"][0][1].endswith("created; full bootstrap")
    assert reasons["vision-gpu-2"][1][1].startswith("bootstrapped, full bootstrap; ")


def test_state_is_written_before_terraform_and_ansible_run(rig: Rig) -> None:
    seen: dict[str, object] = {}
    rig.tf.on_apply = lambda ref, nodes: seen.update(
        {f"apply:{n}": rig.state(n) for n in nodes})
    inner = rig.ansible.bootstrap

    def bootstrap(nodes, policies, **kw):  # type: ignore[no-untyped-def]
        for n in nodes:
            seen[f"ansible:{n.name}"] = (rig.state(n.name), rig.store.meta(n.name)["bootstrap"]["attempts"])
        return inner(nodes, policies, **kw)

    rig.ansible.bootstrap = bootstrap  # type: ignore[method-assign]
    rig.submit(launch(2))
    rig.advance()
    assert seen == {"apply:vision-gpu-1": S.PROVISIONING, "apply:vision-gpu-2": S.PROVISIONING,
                    "ansible:vision-gpu-1": (S.BOOTSTRAPPING, 1),
                    "ansible:vision-gpu-2": (S.BOOTSTRAPPING, 1)}


def test_cluster_kind_none_is_ready_right_after_bootstrap(rig: Rig) -> None:
    rig.policies = {"vision": slurm_policy(cluster={"kind": "none"})}
    [name] = rig.submit(launch())
    assert rig.advance().moved(S.READY) == [name]
    assert rig.store.meta(name)["cluster"] == "none"


def test_ready_waits_for_metrics_when_given_the_snapshot(rig: Rig) -> None:
    [name] = rig.submit(launch())
    rig.slurm.scheduler.join(name)
    empty = Snapshot(taken_at=rig.clock())
    rig.advance(snapshot=empty)
    assert rig.state(name) is S.BOOTSTRAPPING
    seen = Snapshot(taken_at=rig.clock(), nodes={name: NodeObservation(
        metrics=GpuMetrics(util_mean=3.0, gpus_reporting=1, sample_age_s=2))})
    assert rig.advance(snapshot=seen).moved(S.READY) == [name]


def test_capacity_error_is_provision_failed_and_reported(rig: Rig) -> None:
    rig.tf.no_capacity.add(("p3.2xlarge", Market.SPOT))
    [spot] = rig.submit(launch(market=Market.SPOT))
    report = rig.advance()
    node = rig.node(spot)
    assert node.state is S.PROVISION_FAILED and "InsufficientInstanceCapacity" in node.reason
    [err] = report.capacity_errors
    assert (err.instance_type, err.market, err.code) == ("p3.2xlarge", Market.SPOT,
                                                         "InsufficientInstanceCapacity")
    # The engine cleans it up: nothing was created, so no instance to destroy.
    rig.submit(terminate(spot))
    rig.advance()
    assert rig.state(spot) is S.TERMINATED and rig.cloud.live() == []


def test_apply_errors_not_tied_to_a_node_fail_it_after_a_few_attempts(rig: Rig) -> None:
    [name] = rig.submit(launch())
    for attempt in range(1, 4):
        rig.tf.next_error = TerraformError("Error: provider crashed")
        report = rig.advance()
        assert any("provider crashed" in e for e in report.errors)
        assert rig.state(name) is (S.PROVISION_FAILED if attempt == 3 else S.PROVISIONING)
    assert "3 applies of vision/gpu failed" in rig.node(name).reason


def test_a_cloud_that_does_not_answer_before_the_apply_fails_no_node(rig: Rig) -> None:
    """At 1,000 nodes the endpoint timed out on the stray check before the apply: three
    such ticks failed every node of the pool. No apply ran, so no attempt is counted."""
    names = rig.submit(launch(count=3))
    for _ in range(4):
        rig.tf.next_error = CloudUnreachableError("ec2 describe_instances: read timeout")
        report = rig.advance()
        assert any("cloud did not answer, retrying next tick" in e for e in report.errors)
        assert {rig.state(n) for n in names} == {S.PROVISIONING}
        assert {rig.node(n).progress.provision_failures for n in names} == {0}
    rig.advance()
    assert {rig.state(n) for n in names} != {S.PROVISIONING}


def test_a_state_lock_held_by_another_run_is_waited_out(rig: Rig) -> None:
    """A dead leader's terraform can hold the pool's lock for a while after a failover."""
    [name] = rig.submit(launch())
    for _ in range(5):
        rig.tf.next_error = StateLockedError("state locked by another run")
        report = rig.advance()
        assert any("locked" in e for e in report.errors)
        assert rig.state(name) is S.PROVISIONING
    rig.advance()
    assert rig.state(name) is not S.PROVISIONING


def test_bootstrap_retries_with_backoff_then_fails_with_the_task(rig: Rig) -> None:
    rig.settings = ExecutorSettings(bootstrap_retries=1, bootstrap_retry_backoff="1m")
    [name] = rig.submit(launch())
    rig.ansible.fail[name] = (HostStatus.FAILED, "gpu_health_check : Check GPUs", "found 0 GPUs, expected 1")
    report = rig.advance()
    assert rig.state(name) is S.BOOTSTRAPPING and "expected 1" in report.bootstrap_failed[name]
    rig.advance()  # within the backoff: not run again
    assert len(rig.ansible.calls) == 1
    rig.clock.tick(61)
    rig.advance()
    node = rig.node(name)
    assert node.state is S.BOOTSTRAP_FAILED and len(rig.ansible.calls) == 2
    assert "2 time(s)" in node.reason and "gpu_health_check : Check GPUs" in node.reason


def test_unreachable_then_ok_on_retry(rig: Rig) -> None:
    rig.settings = ExecutorSettings(bootstrap_retry_backoff="0s")
    [name] = rig.submit(launch())
    rig.ansible.fail_once[name] = (HostStatus.UNREACHABLE, "Gathering Facts", "no route to host")
    rig.advance()
    rig.slurm.scheduler.join(name)
    rig.advance()
    assert rig.state(name) is S.READY and len(rig.ansible.calls) == 2


def test_a_bootstrap_cancelled_at_shutdown_is_not_an_attempt_and_runs_again(rig: Rig) -> None:
    rig.settings = ExecutorSettings(bootstrap_retries=0)
    [name] = rig.submit(launch())
    rig.ansible.cancel()  # the service is stopping while the node waits for Ansible
    report = rig.advance()
    assert rig.state(name) is S.BOOTSTRAPPING and name not in report.bootstrap_failed
    assert rig.node(name).progress.bootstrap.attempts == 0
    rig.ansible.cancelled = False  # the next leader
    rig.advance()
    rig.slurm.scheduler.join(name)
    rig.advance()
    assert rig.state(name) is S.READY and len(rig.ansible.calls) == 2


def test_nodes_without_an_address_wait_for_the_resolver(rig: Rig) -> None:
    rig.addresses = {}
    [name] = rig.submit(launch())
    rig.advance()
    assert rig.state(name) is S.BOOTSTRAPPING and rig.ansible.calls == []
    rig.addresses = {name: "169.254.77.6"}
    rig.advance()
    assert rig.ansible.calls == [[name]]


def test_not_ready_in_time_is_bootstrap_failed(rig: Rig) -> None:
    [name] = rig.submit(launch())
    rig.advance()
    rig.clock.tick(11 * 60)
    rig.advance()
    node = rig.node(name)
    assert node.state is S.BOOTSTRAP_FAILED and "not joined yet" in node.reason


def test_a_node_slurm_offers_fewer_gpus_than_its_type_is_failed_with_its_type_and_zone(
        rig: Rig) -> None:
    """The GPU-initialisation watchdog: joined, but its Gres offers 3 of p3.8xlarge's 4."""
    [name] = rig.submit(launch(instance_type="p3.8xlarge"))
    rig.advance()
    rig.slurm.scheduler.join(name, gpus=3)
    rig.advance()
    assert rig.state(name) is S.BOOTSTRAPPING  # not READY with a GPU missing
    rig.clock.tick(9 * 60)
    rig.advance()
    assert rig.state(name) is S.BOOTSTRAPPING  # nothing measured yet: ready_wait_timeout, 10m
    rig.clock.tick(2 * 60)
    rig.advance()
    node = rig.node(name)
    assert node.state is S.BOOTSTRAP_FAILED
    assert "slurm offers 3 of the 4 GPU(s) of p3.8xlarge" in node.reason
    assert "ready_wait_timeout; no node of the pool measured yet" in node.reason
    assert node.reason.endswith(f"; p3.8xlarge in {node.zone or node.region}")


def test_a_gpu_count_that_is_not_a_number_is_not_enough_gpus(rig: Rig) -> None:
    """NaN < 4 is False: a drainer's NaN count must not pass for a node's 4 GPUs."""
    [name] = rig.submit(launch(instance_type="p3.8xlarge"))
    rig.advance()
    rig.slurm.scheduler.join(name, gpus=math.nan)
    rig.advance()
    assert rig.state(name) is S.BOOTSTRAPPING
    rig.clock.tick(11 * 60)
    rig.advance()
    node = rig.node(name)
    assert node.state is S.BOOTSTRAP_FAILED
    assert "slurm offers nan of the 4 GPU(s) of p3.8xlarge" in node.reason


def test_a_scheduler_that_does_not_answer_fails_no_bootstrapped_node(rig: Rig) -> None:
    """At 1,000 nodes the API server timed out on readiness reads, and nodes that had
    joined were failed at the ready wait: no answer concludes nothing. An answer does."""
    [name] = rig.submit(launch(instance_type="p3.8xlarge"))
    rig.advance()
    for _ in range(3):
        rig.clock.tick(5 * 60)  # past ready_wait_timeout each time
        rig.slurm.scheduler.next_error = DrainError("slurm: scontrol timed out")
        report = rig.advance()
        assert rig.state(name) is S.BOOTSTRAPPING
        assert any(f"1 bootstrapped node(s) kept waiting, the scheduler did not answer for "
                   f"them: {name} (" in e and "scontrol timed out)" in e
                   for e in report.errors), report.errors
    rig.advance()  # it answers: not joined, past the wait
    assert rig.state(name) is S.BOOTSTRAP_FAILED and "not joined yet" in rig.node(name).reason


def test_the_gpu_wait_is_derived_from_how_long_the_pools_nodes_took(rig: Rig) -> None:
    [first] = rig.submit(launch(instance_type="p3.8xlarge"))
    rig.advance()
    rig.clock.tick(40)  # seen 40 s after its bootstrap, with its 4 GPUs
    rig.slurm.scheduler.join(first, gpus=4)
    rig.advance()
    assert rig.state(first) is S.READY
    [second] = rig.submit(launch(instance_type="p3.8xlarge"))
    rig.advance()
    rig.slurm.scheduler.join(second, gpus=0)  # its GPUs never came up
    rig.clock.tick(150)
    rig.advance()
    assert rig.state(second) is S.BOOTSTRAPPING  # 4 x 40 s = 2m40s, not 10 minutes
    rig.clock.tick(20)
    rig.advance()
    node = rig.node(second)
    assert node.state is S.BOOTSTRAP_FAILED, node.reason
    assert "not ready after 2m40s (4 x the slowest of the pool's last 1 node(s), 40s" in node.reason
    assert "slurm offers 0 of the 4 GPU(s)" in node.reason
    # Offered all its GPUs, a node is READY as before.
    [third] = rig.submit(launch(instance_type="p3.8xlarge"))
    rig.advance()
    rig.slurm.scheduler.join(third, gpus=4)
    rig.advance()
    assert rig.state(third) is S.READY


def test_drain_waits_for_jobs_then_terminate_destroys_the_instance(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    sched = rig.slurm.scheduler
    sched.run(name, "101", "102")
    rig.submit(drain(name))
    assert rig.state(name) is S.DRAINING and name not in sched.cordoned  # intent only
    report = rig.advance()
    assert name in sched.cordoned and rig.state(name) is S.DRAINING
    assert "waiting for 2 job(s)" in report.drain_steps[name]
    sched.finish(name)
    rig.clock.tick(10)
    assert rig.advance().moved(S.DRAINED) == [name]
    rig.submit(terminate(name))
    instance = rig.node(name).instance_id
    rig.advance()
    assert rig.state(name) is S.TERMINATED and rig.cloud.live() == []
    assert rig.cloud.instances[instance].state == "terminated"
    assert ("forget", name) in sched.calls


def test_drain_deadline_signals_then_requeues_with_the_pool_settings(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    sched = rig.slurm.scheduler
    sched.run(name, "7")
    rig.submit(drain(name))
    rig.advance()
    rig.clock.tick(10 * 60)  # drain_timeout 10m
    rig.advance()
    assert ("checkpoint", name, ["7"], "USR2") in sched.calls
    assert rig.store.meta(name)["drain"]["phase"] == "signalled"
    assert not any(c[0] == "evacuate" for c in sched.calls)
    rig.clock.tick(61)  # checkpoint_grace 1m
    rig.advance()
    assert ("evacuate", name, ["7"]) in sched.calls
    rig.clock.tick(10)
    assert rig.advance().moved(S.DRAINED) == [name]


def test_a_step_of_the_wall_clock_neither_ends_a_drain_early_nor_holds_it_late(rig: Rig) -> None:
    """Once the service has seen a drain, its wait is measured on the monotonic clock: a
    +1 h step of the wall clock used to signal the jobs at once, 10 s into a 10-minute
    wait, and a -2 h step held the requeue two hours past the checkpoint grace."""
    [name] = rig.ready_nodes()
    sched = rig.slurm.scheduler
    sched.run(name, "7")
    rig.submit(drain(name))
    mono = [5000.0]
    executor = rig.executor(monotonic=lambda: mono[0])
    executor.advance()
    rig.clock.tick(3600)
    mono[0] += 10
    executor.advance()
    assert not any(c[0] == "checkpoint" for c in sched.calls)
    assert rig.store.meta(name)["drain"]["phase"] == "cordoned"
    mono[0] += 10 * 60  # drain_timeout 10m, really elapsed
    rig.clock.tick(10 * 60)
    executor.advance()
    assert ("checkpoint", name, ["7"], "USR2") in sched.calls
    rig.clock.tick(-2 * 3600)
    mono[0] += 61  # checkpoint_grace 1m, really elapsed
    executor.advance()
    assert ("evacuate", name, ["7"]) in sched.calls
    sched.finish(name)
    mono[0] += 10
    rig.clock.tick(10)
    assert executor.advance().moved(S.DRAINED) == [name]
    executor.advance()
    assert executor.timeline._first == {}  # a drain that ended is forgotten at the next


def test_drain_times_written_ahead_of_a_restarted_service_count_from_now(rig: Rig) -> None:
    """A service restarted after a backward step of the wall clock finds the drain's
    signal stamped two hours ahead: the grace counts from now, not from then."""
    [name] = rig.ready_nodes()
    sched = rig.slurm.scheduler
    sched.run(name, "7")
    rig.submit(drain(name, trigger="consolidate"))
    rig.advance()
    assert ("checkpoint", name, ["7"], "USR2") in sched.calls
    rig.clock.tick(-2 * 3600)
    rig.advance()  # a new executor: the wall clock is all it knows
    assert rig.node(name).progress.drain.signalled_at == rig.clock()  # type: ignore[union-attr]
    assert not any(c[0] == "evacuate" for c in sched.calls)
    rig.clock.tick(61)  # checkpoint_grace 1m
    rig.advance()
    assert ("evacuate", name, ["7"]) in sched.calls


def test_consolidation_signals_at_once_and_requeues_after_the_grace(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    sched = rig.slurm.scheduler
    sched.run(name, "8")
    rig.submit(drain(name, trigger="consolidate"))
    rig.advance()  # no drain_timeout wait: the room elsewhere would fill up meanwhile
    assert ("checkpoint", name, ["8"], "USR2") in sched.calls
    rig.clock.tick(61)  # checkpoint_grace 1m
    rig.advance()
    assert ("evacuate", name, ["8"]) in sched.calls


def test_cancel_drain_is_ready_first_then_resumed_in_the_scheduler(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    rig.slurm.scheduler.run(name, "9")
    rig.submit(drain(name))
    rig.advance()
    rig.submit(CancelDrain(pool="vision/gpu", node=name, reason="pending jobs fit on it"))
    node = rig.node(name)
    assert node.state is S.READY and node.drain_trigger == "cancelled"
    assert name in rig.slurm.scheduler.cordoned
    rig.slurm.next_error = RuntimeError("slurmctld timeout")
    rig.advance()
    assert rig.node(name).drain_trigger == "cancelled"  # retried next time
    rig.advance()
    assert rig.node(name).drain_trigger is None and name not in rig.slurm.scheduler.cordoned
    assert "drain" not in rig.store.meta(name)


def test_replace_drains_the_old_node_and_launches_one_like_it(rig: Rig) -> None:
    [old] = rig.ready_nodes()
    created = rig.submit(Replace(pool="vision/gpu", node=old, instance_type="p3.2xlarge",
                                 market=Market.ON_DEMAND, trigger="unhealthy", reason="XID 79"))
    node = rig.node(old)
    assert node.state is S.DRAINING and node.replacement_requested and node.drain_trigger == "unhealthy"
    assert created == ["vision-gpu-2"] and rig.store.meta("vision-gpu-2")["replaces"] == old
    assert "replacement" not in rig.store.meta(old)


def test_consolidating_replace_launches_the_cheaper_type_and_signals_at_once(rig: Rig) -> None:
    [old] = rig.ready_nodes()
    created = rig.submit(Replace(pool="vision/gpu", node=old, instance_type="p3.2xlarge",
                                 market=Market.ON_DEMAND, trigger="consolidate", reason="1 of 4 GPUs"))
    assert created == ["vision-gpu-2"] and rig.node(old).drain_trigger == "consolidate"
    drain_meta = rig.store.meta(old)["drain"]
    assert drain_meta["deadline"] == drain_meta["started_at"]  # no drain_timeout wait


def test_a_node_whose_spot_replacement_is_ready_is_signalled_at_once(rig: Rig) -> None:
    [old] = rig.ready_nodes()
    rig.submit(drain(old, trigger="spot-returned"))
    drain_meta = rig.store.meta(old)["drain"]
    assert rig.node(old).drain_trigger == "spot-returned"
    assert drain_meta["deadline"] == drain_meta["started_at"]  # no drain_timeout wait


def test_launch_that_replaces_interrupted_nodes_flags_them(rig: Rig) -> None:
    [old] = rig.ready_nodes()
    transition(rig.store, old, S.INTERRUPTED, rig.clock(), "spot notice")
    [new] = rig.submit(launch(replaces=[old], trigger="interruption", market=Market.SPOT))
    assert rig.node(old).replacement_requested
    assert rig.store.meta(new)["replaces"] == old


def test_resubmitting_a_recorded_plan_creates_nothing_twice(rig: Rig) -> None:
    plan = Plan(decided_at=rig.clock(), actions=[launch(2)])
    plan_id = rig.store.record_plan(plan)
    ex = rig.executor()
    assert ex.submit(plan, plan_id) == ["vision-gpu-1", "vision-gpu-2"]
    assert ex.submit(plan, plan_id) == []
    [row] = rig.store.actions(plan_id)
    assert row.status == "submitted"
    # A crash after the first node of a launch: the row says "submitting".
    plan2 = Plan(decided_at=rig.clock(), actions=[launch(3)])
    pid2 = rig.store.record_plan(plan2)
    rig.store.set_action_status(rig.store.actions(pid2)[0].id, "submitting", rig.clock())
    create_node(rig.store, cooldown="up", now=rig.clock(), reason="first slot",
                progress=NodeProgress(action=rig.store.actions(pid2)[0].id, index=0))
    assert ex.submit(plan2, pid2) == ["vision-gpu-4", "vision-gpu-5"]


def test_a_launch_and_its_replaced_nodes_are_one_store_write(rig: Rig) -> None:
    """All slots of a launch, and the flags on the nodes they replace, in one transaction:
    a crash leaves all of them or none (the resubmission above finds which)."""
    [old] = rig.ready_nodes()
    transition(rig.store, old, S.INTERRUPTED, rig.clock(), "spot notice")
    writes: list[int] = []
    real = rig.store.apply
    rig.store.apply = lambda changes, now: writes.append(len(changes)) or real(changes, now)  # type: ignore[method-assign]
    names = rig.submit(launch(5, replaces=[old], trigger="interruption"), record=True)
    assert len(names) == 5 and writes == [6]  # five creates and the replaced node's flag
    assert rig.node(old).replacement_requested and rig.node(old).progress.replacement is None
    assert [rig.store.meta(n).get("replaces") for n in names].count(old) == 1


def test_illegal_actions_are_reported_not_raised(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    plan_actions = [terminate(name), drain("vision-gpu-99")]
    plan = Plan(decided_at=rig.clock(), actions=plan_actions)
    plan_id = rig.store.record_plan(plan)
    assert rig.executor().submit(plan, plan_id) == []
    rows = rig.store.actions(plan_id)
    assert [r.status for r in rows] == ["failed", "failed"]
    assert "drain it before terminating" in rows[0].detail and "no node named" in rows[1].detail
    assert rig.state(name) is S.READY


def test_terraform_recreating_a_gone_instance_makes_the_node_lost(rig: Rig) -> None:
    [a, b] = rig.ready_nodes(2)
    rig.cloud.terminate(rig.node(a).instance_id or "")
    rig.submit(launch())  # any change to the pool makes it apply
    rig.advance()
    node = rig.node(a)
    assert node.state is S.LOST and "recreated" in node.reason
    rig.advance()  # LOST leaves the map: the recreated instance is destroyed
    assert rig.state(a) is S.TERMINATED
    assert {i.node for i in rig.cloud.live()} == {b, "vision-gpu-3"}


def test_pools_are_applied_in_parallel_and_one_failure_spares_the_others(rig: Rig) -> None:
    rig.policies = {"vision": slurm_policy(pools=[
        {"name": f"p{i}", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.2xlarge"],
         "max_nodes": 4, "cluster": {"kind": "none"}} for i in range(4)])}
    for i in range(4):
        rig.submit(launch(pool=f"vision/p{i}"))
    calls = []

    def on_apply(ref, nodes):  # type: ignore[no-untyped-def]
        calls.append(ref.key)
        if ref.key == "vision/p2":
            raise RuntimeError("provider crashed")

    rig.tf.on_apply = on_apply
    report = rig.advance()
    assert sorted(calls) == [f"vision/p{i}" for i in range(4)]
    assert sorted(report.moved(S.READY)) == ["vision-p0-1", "vision-p1-1", "vision-p3-1"]
    assert rig.state("vision-p2-1") is S.PROVISIONING
    assert any("provider crashed" in e for e in report.errors)


def test_interrupted_node_drains_fast_and_is_terminated(rig: Rig) -> None:
    rig.settings = ExecutorSettings(interruption_drain_deadline="60s")  # type: ignore[arg-type]
    [name] = rig.ready_nodes()
    rig.slurm.scheduler.run(name, "55")
    deadline = rig.clock() + timedelta(minutes=2)
    notice = InterruptionRecord(kind="interruption", at=rig.clock(), deadline=deadline, source="aws")
    progress = interruption_progress(rig.settings, None, notice, rig.clock())
    assert progress.deadline == rig.clock() + timedelta(seconds=60)
    transition(rig.store, name, S.INTERRUPTED, rig.clock(), "spot notice",
                         progress=ProgressUpdate(interruption=notice, drain=progress))
    rig.advance()
    assert name in rig.slurm.scheduler.cordoned and rig.state(name) is S.INTERRUPTED
    rig.clock.tick(60)
    rig.advance()
    assert any(c[0] == "checkpoint" for c in rig.slurm.calls)
    rig.clock.tick(31)
    rig.advance()  # requeued
    rig.clock.tick(10)
    report = rig.advance()
    assert report.moved(S.TERMINATING) == [name] and report.moved(S.TERMINATED) == [name]
    assert rig.cloud.live() == []


def test_long_jobs_are_reported_once_and_signalled_once(rig: Rig) -> None:
    [name] = rig.ready_nodes()
    report = ReportJob(pool="vision/gpu", node=name, job="42", signal=True,
                       reason="vision/gpu: job 42 on vision-gpu-1 has run 49h, past 48h")
    quiet = ReportJob(pool="vision/gpu", node=name, job="43", signal=False, reason="job 43: 50h")
    for _ in range(3):  # the engine repeats the report every tick while the job runs
        rig.submit(report, quiet)
        rig.advance()
        rig.clock.tick()
    signals = [c for c in rig.slurm.calls if c[0] == "signal"]
    assert signals == [("signal", name, ["42"], "USR2")]  # the pool's checkpoint_signal
    events = [(a.event, a.detail) for a in rig.store.audit_log() if a.event.startswith("long-job")]
    assert events == [("long-job", report.reason), ("long-job", quiet.reason),
                      ("long-job-signal", f"42 on {name}: SIGUSR2 sent")]
    jobs = rig.store.meta(name)["long_jobs"]
    assert jobs["42"]["outcome"] == "SIGUSR2 sent" and jobs["43"]["signalled_at"] is None


def test_long_jobs_on_kubernetes_stay_reported_only(rig: Rig) -> None:
    k8s = FakeDrainer("kubernetes")
    rig.policies = {"vision": slurm_policy(cluster={"kind": "kubernetes"})}
    rig.slurm = k8s  # the rig's drainer slot, now a Kubernetes scheduler
    [name] = rig.ready_nodes()
    rig.submit(ReportJob(pool="vision/gpu", node=name, job="ns/train-0", signal=True, reason="r"))
    rig.advance()
    assert rig.store.meta(name)["long_jobs"]["ns/train-0"]["outcome"] == (
        "kubernetes cannot signal jobs: reported only")
