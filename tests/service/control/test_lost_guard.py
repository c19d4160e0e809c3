"""The reconciler never marks nodes LOST on absence of evidence (fakes; the real
Terraform + moto run is in test_lost_terraform.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoscaler.actuators.node_map import NodeSpec
from autoscaler.catalog import default_catalog
from autoscaler.clouds.base import CloudInstance
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.pool import PoolRef
from autoscaler.model.snapshot import NodeObservation, PoolObservation, RunningJob, SchedulerNode
from autoscaler.model.snapshot_parts import Observed
from autoscaler.policy.models import Market
from autoscaler.service.control.lost_guard import busy_reason, frozen_answer, frozen_pools
from autoscaler.service.control.reconciler import Reconciler
from autoscaler.service.executor import ExecutorSettings
from autoscaler.service.http.status import build_status
from tests.builders import NOW, make_node
from tests.fakes import FakeCloud, FakeTerraform
from tests.fleet.writes import create_node, patch, transition
from tests.service.executor_rig import Rig
from tests.service.service_fakes import make_loop

S = NodeState


class Answer:
    """A cloud whose describe answer the test writes (a successful but wrong answer)."""

    def __init__(self, instances: list[CloudInstance]):
        self.instances = instances

    def managed_instances(self, *_: Any, **__: Any) -> list[CloudInstance]:
        return list(self.instances)


def reconciler(rig: Rig, answer: Answer) -> Reconciler:
    return Reconciler(rig.store, rig.tf, lambda cloud, region: answer, rig.settings, rig.clock,
                      policies=lambda: rig.policies)


def busy(*names: str) -> Observed:
    return Observed(taken_at=NOW, nodes={n: NodeObservation(scheduler=SchedulerNode(
        state="allocated", gpus_total=1, gpus_allocated=1,
        jobs=[RunningJob(id="42", gpus=1)])) for n in names})


def idle(*names: str) -> Observed:
    return Observed(taken_at=NOW, nodes={n: NodeObservation(scheduler=SchedulerNode(
        state="idle", gpus_total=1, gpus_allocated=0)) for n in names})


def test_an_empty_answer_for_a_whole_pool_is_not_believed(rig: Rig) -> None:
    names = rig.ready_nodes(3)
    answer = Answer([])
    rec = reconciler(rig, answer)
    for _ in range(4):
        report = rec.run()
        assert list(report.frozen) == ["vision/gpu"]
        assert ("the cloud answer for aws/us-east-1 lists no instance while the store knows 3 "
                "live there") in report.frozen["vision/gpu"]
        assert report.of("lost") == [] and report.of("missing") == []
    assert [rig.state(n) for n in names] == [S.READY] * 3
    answer.instances = rig.cloud.live()  # the answer recovers: nothing was counted meanwhile
    assert rec.run().frozen == {}
    answer.instances = [i for i in rig.cloud.live() if i.node != names[0]]
    assert [f.node for f in rec.run().of("missing")] == [names[0]]  # one gone: believable


def test_share_and_count_both_needed_to_freeze_a_pool() -> None:
    """The per-pool rule alone (the whole-answer rule is the next test's)."""
    nodes = [make_node(f"n{i}", instance_id=f"i-{i}") for i in range(5)]
    live = {f"i-{i}" for i in range(5)}
    settings = ExecutorSettings()
    assert frozen_pools(nodes, live - {"i-0", "i-1"}, settings) == {}  # 2 of 5, 40%: believed
    assert frozen_pools(nodes, live - {"i-0"}, ExecutorSettings(lost_freeze_count=0,
                                                                lost_freeze_percent=10)) != {}
    [why] = frozen_pools(nodes, live - {"i-0", "i-1", "i-2"}, settings).values()  # 60%
    assert "lacks 3 of the 5 instances known for vision/gpu" in why


def test_an_empty_answer_is_judged_for_the_whole_region_not_pool_by_pool() -> None:
    """Audit F3: 12 single-node pools and one 10-node pool, an empty answer. Pool by pool,
    only the 10-node pool looks odd (each small pool lacks 'only one'); the answer as a
    whole lacks all 22 instances of the region and is not believed."""
    nodes = [make_node(f"n{i}", pool=f"p{i}", instance_id=f"i-{i:04d}") for i in range(12)]
    nodes += [make_node(f"big{i}", pool="big", instance_id=f"i-b{i}") for i in range(10)]
    settings = ExecutorSettings()
    assert list(frozen_pools(nodes, set(), settings)) == ["vision/big"]  # the gap it fills
    why = frozen_answer(nodes, set(), "aws/us-east-1", settings)
    assert why == ("the cloud answer for aws/us-east-1 lists no instance while the store knows "
                   "22 live there: not believed, no node in aws/us-east-1 is marked LOST this run")
    # Not empty but lacking more than max(1, 10% of 22 = 2.2): 3 single-node pools gone.
    all_ids = {n.instance_id or "" for n in nodes}
    why = frozen_answer(nodes, all_ids - {"i-0000", "i-0001", "i-0002"}, "aws/us-east-1", settings)
    assert why is not None and "lacks 3 of the 22 instances known there (14%, more than " \
        "max(1, 10%) = 2.2)" in why
    assert frozen_answer(nodes, all_ids - {"i-0000", "i-0001"}, "aws/us-east-1", settings) is None
    assert frozen_answer(nodes, set(), "aws/us-east-1", ExecutorSettings(lost_freeze_percent=100)) \
        is None  # the documented switch to accept a real mass loss


def test_small_pools_are_not_lost_on_an_empty_answer_end_to_end(rig: Rig) -> None:
    """Audit F3 (b): two empty answers used to mark the 1-node pool's idle READY node LOST."""
    [name] = rig.ready_nodes(1)
    rec = reconciler(rig, Answer([]))
    for _ in range(3):
        report = rec.run(idle(name))
        assert "lists no instance while the store knows 1 live" in report.frozen["vision/gpu"]
        [frozen] = report.of("lost-frozen")
        assert frozen.detail.startswith("the cloud answer for aws/us-east-1 lists no instance")
        assert report.of("lost") == [] and report.of("missing") == [] and report.changes == []
    assert rig.state(name) is S.READY


def test_an_answer_lacking_over_a_tenth_of_the_region_freezes_it(rig: Rig) -> None:
    names = rig.ready_nodes(5)
    rig.settings = ExecutorSettings(lost_after_misses=1)
    two_gone = [i for i in rig.cloud.live() if i.node not in names[:2]]  # 2 of 5 > max(1, 0.5)
    report = reconciler(rig, Answer(two_gone)).run(idle(*names))
    assert "lacks 2 of the 5 instances known there (40%" in report.frozen["vision/gpu"]
    assert report.of("lost") == [] and [rig.state(n) for n in names] == [S.READY] * 5
    one_gone = [i for i in rig.cloud.live() if i.node != names[0]]  # 1: a believable reclaim
    report = reconciler(rig, Answer(one_gone)).run(idle(*names))
    assert report.frozen == {} and [f.node for f in report.of("lost")] == [names[0]]


def test_a_node_the_scheduler_does_not_list_is_kept(rig: Rig) -> None:
    """Absent from the scheduler view is not idle (audit F3): only a listing confirms it."""
    a, b, _ = rig.ready_nodes(3)
    rig.settings = ExecutorSettings(lost_after_misses=1)
    answer = Answer([i for i in rig.cloud.live() if i.node != a])
    report = reconciler(rig, answer).run(idle(b))  # a: not in the view at all
    [refused] = report.of("lost-refused")
    assert refused.node == a and refused.detail.endswith(
        "not marked LOST: the scheduler does not list it: nothing confirms it is idle")
    marker = Observed(taken_at=NOW, nodes={a: NodeObservation(scheduler=SchedulerNode(
        state="unknown", ready=False, unusable="slurm does not list it"))})  # the reader's
    report = reconciler(rig, answer).run(marker)
    assert "does not report its state (slurm does not list it)" in report.of("lost-refused")[0].detail
    unread = Observed(taken_at=NOW, missing=["slurm"])
    assert "(slurm not read this tick)" in busy_reason(rig.node(a), unread)  # type: ignore[operator]
    assert rig.state(a) is S.READY
    report = reconciler(rig, answer).run(idle(a))  # listed, idle: believed
    assert [f.node for f in report.of("lost")] == [a] and rig.state(a) is S.LOST


def test_a_node_with_running_jobs_is_never_lost(rig: Rig) -> None:
    a, _, _ = rig.ready_nodes(3)
    rig.settings = ExecutorSettings(lost_after_misses=1)
    answer = Answer([i for i in rig.cloud.live() if i.node != a])
    report = reconciler(rig, answer).run(busy(a))
    [refused] = report.of("lost-refused")
    assert refused.node == a and "1 job(s) running" in refused.detail
    assert rig.state(a) is S.READY and report.changes == []
    report = reconciler(rig, answer).run(idle(a))  # the jobs are gone too
    assert [f.node for f in report.of("lost")] == [a] and rig.state(a) is S.LOST


def test_unreadable_scheduler_keeps_the_node(rig: Rig) -> None:
    a, _, _ = rig.ready_nodes(3)
    rig.settings = ExecutorSettings(lost_after_misses=1)
    snap = Observed(taken_at=NOW, pools={"vision/gpu": PoolObservation(
        scheduler_missing="squeue: timed out")})
    report = reconciler(rig, Answer([i for i in rig.cloud.live() if i.node != a])).run(snap)
    assert "cannot be read (squeue: timed out)" in report.of("lost-refused")[0].detail
    assert rig.state(a) is S.READY


def test_lost_marks_are_capped_fleet_wide_per_run(rig: Rig) -> None:
    names = rig.ready_nodes(3)
    rig.settings = ExecutorSettings(lost_after_misses=1, lost_freeze_percent=100,
                                    max_removals_per_tick=2)
    rec = reconciler(rig, Answer([]))
    first = rec.run()
    assert len(first.of("lost")) == 2 and len(first.of("removal-capped")) == 1
    assert len(rec.run().of("lost")) == 1
    assert [rig.state(n) for n in names] == [S.LOST] * 3


def test_unknown_instance_destroys_share_the_cap(rig: Rig) -> None:
    rig.ready_nodes(3)  # 2 strays of 5 instances (40%): believed
    rig.settings = ExecutorSettings(unknown_instances="destroy", max_removals_per_tick=1)
    ref, spec = PoolRef("vision", "gpu", "aws", "us-east-1"), NodeSpec(instance_type="p3.2xlarge",
                                                                    market=Market.ON_DEMAND)
    strays = [rig.cloud.launch(ref, f"vision-gpu-{n}", spec).instance_id for n in (7, 8)]
    report = rig.reconciler().run()
    assert [f.instance_id for f in report.of("destroying")] == strays[:1]
    assert len(report.of("removal-capped")) == 1
    assert strays[0] not in [i.instance_id for i in rig.cloud.live()]
    assert strays[1] in [i.instance_id for i in rig.cloud.live()]


def test_a_store_that_knows_few_of_the_pools_instances_destroys_none(rig: Rig) -> None:
    """An emptied store, an old backup or the wrong database: the cloud is right."""
    rig.ready_nodes(1)
    rig.settings = ExecutorSettings(unknown_instances="destroy")
    ref = PoolRef("vision", "gpu", "aws", "us-east-1")
    spec = NodeSpec(instance_type="p3.2xlarge", market=Market.ON_DEMAND)
    strays = {rig.cloud.launch(ref, f"vision-gpu-{n}", spec).instance_id for n in (7, 8)}
    report = rig.reconciler().run()
    assert report.of("destroying") == [] and len(report.of("destroy-frozen")) == 2
    assert "2 of the 3 instances of vision/gpu are unknown" in report.of("destroy-frozen")[0].detail
    assert strays <= {i.instance_id for i in rig.cloud.live()}
    assert [c for c in rig.tf.calls if c[0] == "apply" and c[2]["destroy"]] == []



def test_a_frozen_pool_is_alerted_in_metrics_and_status(tmp_path: Path) -> None:
    kit = make_loop(tmp_path)
    cloud = FakeCloud()
    for _ in range(3):
        node = create_node(kit.store, cooldown="up", pool="train", now=kit.clock())
        inst = cloud.launch(PoolRef("vision", "train", "aws", "us-east-1"), node.name,
                            NodeSpec(instance_type="p3.2xlarge", market=Market.ON_DEMAND))
        for to in (S.PROVISIONING, S.BOOTSTRAPPING, S.READY):
            transition(kit.store, node.name, to, kit.clock(), "test")
        patch(kit.store, node.name, kit.clock(), instance_id=inst.instance_id)
    answer = Answer([])
    kit.loop.reconciler = Reconciler(kit.store, FakeTerraform(cloud), lambda c, r: answer,
                                     ExecutorSettings(), kit.clock, policies=kit.loop.policies)
    kit.loop.tick()
    text = kit.loop.metrics.exposition().decode()
    assert 'gpu_autoscaler_lost_frozen{pool="vision/train"} 1.0' in text
    status = build_status(kit.store, kit.loop.state, {}, [], default_catalog(), None, kit.clock())
    assert "lists no instance while the store knows 3" in status["lost_frozen"]["vision/train"]
    answer.instances = cloud.live()  # the answer recovers: the alert clears
    kit.loop.tick()
    text = kit.loop.metrics.exposition().decode()
    assert 'gpu_autoscaler_lost_frozen{pool="vision/train"} 0.0' in text
    assert kit.loop.state.lost_frozen == {}
    kit.store.close()
