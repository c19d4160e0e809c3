"""What the engine takes from a Kubernetes cluster: quotas, priorities, unserved pods,
and nodes in flight until their GPUs are advertised (no second launch meanwhile)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from autoscaler.actuators.drain import PhasedDrainer
from autoscaler.actuators.drain.kubernetes import KubernetesOps
from autoscaler.catalog import default_catalog
from autoscaler.engine import Hold, Launch, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import ClusterQuota, PendingJob, PoolObservation, UnservedJob
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.signals.kubernetes import KubernetesReader
from autoscaler.signals.readings import pools_in_priority_order
from tests.builders import NOW, fleet, idle, make_node, make_policy, pending, snapshot


def launched(plan) -> int:
    return sum(a.count for a in plan.actions if isinstance(a, Launch))


def test_resourcequota_below_the_policy_caps_the_team() -> None:
    policy = make_policy(quota={"max_gpus": 8}, instance_types=["p3.2xlarge"])
    obs = {"vision/gpu": PoolObservation(pending=pending(1, 1, 1, 1, 1))}
    quota = {"vision": ClusterQuota(max_gpus=3, source="ResourceQuota vision/gpus")}
    plan = decide({"vision": policy}, fleet(), snapshot({}, obs, cluster_quotas=quota), NOW)
    assert launched(plan) == 3
    assert any(isinstance(a, Hold) and "team vision (ResourceQuota vision/gpus) GPU cap 3" in a.reason
               for a in plan.actions)
    loose = {"vision": ClusterQuota(max_gpus=20, source="ResourceQuota vision/gpus")}
    plan = decide({"vision": make_policy(quota={"max_gpus": 2}, instance_types=["p3.2xlarge"])},
                  fleet(), snapshot({}, obs, cluster_quotas=loose), NOW)
    assert launched(plan) == 2
    assert any("policy max_gpus 2 <= ResourceQuota vision/gpus 20" in a.reason
               for a in plan.actions if isinstance(a, Hold))


def test_higher_priority_pods_are_placed_first_under_a_cap() -> None:
    policy = make_policy(quota={"max_gpus": 4}, instance_types=["p3.2xlarge", "p3.8xlarge"])
    jobs = [PendingJob(id="big-low", gpus=4), PendingJob(id="small-high", gpus=1, priority=1000),
            PendingJob(id="small-high-2", gpus=1, priority=1000)]
    plan = decide({"vision": policy}, fleet(),
                  snapshot({}, {"vision/gpu": PoolObservation(pending=jobs)}), NOW)
    # Without priorities first-fit-decreasing would buy a p3.8xlarge for big-low, and the
    # cap would leave nothing for the two urgent pods.
    assert [(a.instance_type, a.count) for a in plan.actions if isinstance(a, Launch)] == [
        ("p3.2xlarge", 2)]


def test_unserved_pods_are_in_the_plan_and_not_bought_for() -> None:
    job = UnservedJob(id="ml/x", team="vision", reason="no pool's nodes could run it: vision/gpu: "
                      "taint a=b:NoSchedule not tolerated", constraint="taint a=b:NoSchedule not tolerated")
    plan = decide({"vision": make_policy()}, fleet(), snapshot({}, {}, unserved=[job]), NOW)
    assert plan.unserved == [job] and launched(plan) == 0


def test_no_second_launch_while_the_first_node_advertises_no_gpus() -> None:
    """A pod asks for 4 GPUs; a node was launched for it and is Ready, but its device
    plugin advertises the GPUs only 60 s later (fake clock)."""
    policy = make_policy(instance_types=["p3.8xlarge"], cluster={"kind": "kubernetes"})
    policies = {"vision": policy}
    refs = pools_in_priority_order(policies, default_catalog(), "kubernetes")

    class Clock:
        now = NOW

        def __call__(self):
            return self.now

    clock = Clock()
    with FakeKube(clock=clock) as kube:
        kube.add_pod("train", "vision", gpus=4)
        reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="3s"))
        ops = PhasedDrainer(KubernetesOps(config=KubernetesConfig(host=kube.url)))
        try:
            def plan_at(node_state: NodeState | None):
                reading = reader.read(refs)
                obs = {"vision/gpu": PoolObservation(pending=reading.pending["vision/gpu"])}
                nodes = [] if node_state is None else [make_node(
                    "vision-gpu-1", state=node_state, instance_type="p3.8xlarge")]
                return decide(policies, fleet(*nodes), snapshot({}, obs), clock.now)

            assert launched(plan_at(None)) == 1  # the first tick buys the node
            kube.add_node("vision-gpu-1", labels={"node.kubernetes.io/instance-type": "p3.8xlarge"},
                          gpus=4, advertise_after=60)
            for seconds in (0, 30, 59):
                clock.now = NOW + timedelta(seconds=seconds)
                ready = ops.readiness(make_node("vision-gpu-1", instance_type="p3.8xlarge"))
                assert not ready.ready and "advertises no GPUs yet" in ready.why
                assert launched(plan_at(NodeState.BOOTSTRAPPING)) == 0  # still in flight
            clock.now = NOW + timedelta(seconds=60)
            assert ops.readiness(make_node("vision-gpu-1", instance_type="p3.8xlarge")).ready
        finally:
            reader.close()


def test_a_zone_bound_job_launches_in_its_zone_and_skips_free_gpus_elsewhere() -> None:
    policy = make_policy(instance_types=["p3.2xlarge"], zones=["us-east-1a", "us-east-1b"])
    free = make_node("vision-gpu-1", instance_type="p3.2xlarge", zone="us-east-1a")
    jobs = [PendingJob(id="ckpt", gpus=1, zones=["us-east-1b"]), PendingJob(id="any", gpus=1)]
    obs = {"vision-gpu-1": idle()}
    plan = decide({"vision": policy}, fleet(free),
                  snapshot(obs, {"vision/gpu": PoolObservation(pending=jobs)}), NOW)
    # "any" takes the free GPU in us-east-1a; "ckpt" needs a new node in us-east-1b.
    assert [(a.zone, a.count) for a in plan.actions if isinstance(a, Launch)] == [("us-east-1b", 1)]


def test_a_zone_bound_job_on_a_pool_without_zones_is_held_and_says_why() -> None:
    # The pool launches in any zone of the region: nothing it buys is sure to be in us-east-1b.
    policy = make_policy(instance_types=["p3.2xlarge"], zones=[])
    jobs = [PendingJob(id="ckpt", gpus=1, zones=["us-east-1b"])]
    plan = decide({"vision": policy}, fleet(),
                  snapshot({}, {"vision/gpu": PoolObservation(pending=jobs)}), NOW)
    assert not [a for a in plan.actions if isinstance(a, Launch)]
    held = " ".join(a.reason for a in plan.actions if isinstance(a, Hold))
    assert "ckpt (1 GPUs): the job may run only in us-east-1b and the pool lists no zones" in held


def test_an_instance_type_bound_job_launches_that_type_and_skips_free_gpus_of_others() -> None:
    # p3.2xlarge and p3.8xlarge cost the same per GPU; the smaller wins a tie, but the job
    # selected the larger (node.kubernetes.io/instance-type), and the free GPU is on a p3.2xlarge.
    policy = make_policy(instance_types=["p3.2xlarge", "p3.8xlarge"])
    free = make_node("vision-gpu-1", instance_type="p3.2xlarge")
    jobs = [PendingJob(id="big", gpus=1, instance_types=["p3.8xlarge"]), PendingJob(id="any", gpus=1)]
    plan = decide({"vision": policy}, fleet(free),
                  snapshot({"vision-gpu-1": idle()}, {"vision/gpu": PoolObservation(pending=jobs)}), NOW)
    assert [(a.instance_type, a.count) for a in plan.actions if isinstance(a, Launch)] == [("p3.8xlarge", 1)]


def test_an_instance_type_the_pool_does_not_offer_is_held_with_the_reason() -> None:
    policy = make_policy(instance_types=["p3.2xlarge"])
    jobs = [PendingJob(id="big", gpus=1, instance_types=["p3.8xlarge"])]
    plan = decide({"vision": policy}, fleet(),
                  snapshot({}, {"vision/gpu": PoolObservation(pending=jobs)}), NOW)
    assert not [a for a in plan.actions if isinstance(a, Launch)]
    held = " ".join(a.reason for a in plan.actions if isinstance(a, Hold))
    assert "big (1 GPUs): the job runs only on p3.8xlarge, which the pool does not offer" in held


@pytest.mark.parametrize("reported", [1e9, math.nan, math.inf, -1.0, 5.0])
def test_a_reported_gpu_count_beyond_the_type_is_no_room_and_costs_nothing(reported: float) -> None:
    """decide() is handed the impossible (a snapshot file, a trace): the node's bin never
    has more GPUs than its type (p3.2xlarge: 1), so packing does not grow with the value,
    and the plan is the plan of a node with no room."""
    from autoscaler.engine.binpack import Bin
    from autoscaler.model.snapshot import NodeObservation, SchedulerNode

    assert Bin.observed(reported, 0.0, None, most=1).free == []
    assert Bin.observed(1.0, math.nan, None, most=1).free == [0.0]  # in use: unknown

    def plan(total: float) -> object:
        obs = {"vision-gpu-1": NodeObservation(scheduler=SchedulerNode(state="idle", gpus_total=total))}
        snap = snapshot(obs, {"vision/gpu": PoolObservation(pending=pending(1))})
        return decide({"vision": make_policy()}, fleet(make_node("vision-gpu-1")), snap, NOW).actions

    assert plan(reported) == plan(0.0)
    assert launched_actions(plan(reported)) == 1 and launched_actions(plan(1.0)) == 0


def launched_actions(actions: object) -> int:
    return sum(a.count for a in actions if isinstance(a, Launch))  # type: ignore[attr-defined]
