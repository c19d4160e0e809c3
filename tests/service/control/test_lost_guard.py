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
from autoscaler.service.control.reconciler import Reconciler
from autoscaler.service.executor import ExecutorSettings
from autoscaler.service.http.status import build_status
from tests.builders import NOW
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


def test_an_empty_answer_for_a_whole_pool_is_not_believed(rig: Rig) -> None:
    names = rig.ready_nodes(3)
    answer = Answer([])
    rec = reconciler(rig, answer)
    for _ in range(4):
        report = rec.run()
        assert list(report.frozen) == ["vision/gpu"]
        assert "lacks 3 of the 3 instances" in report.frozen["vision/gpu"]
        assert report.of("lost") == [] and report.of("missing") == []
    assert [rig.state(n) for n in names] == [S.READY] * 3
    answer.instances = rig.cloud.live()  # the answer recovers: nothing was counted meanwhile
    assert rec.run().frozen == {}
    answer.instances = [i for i in rig.cloud.live() if i.node != names[0]]
    assert [f.node for f in rec.run().of("missing")] == [names[0]]  # one gone: believable


def test_share_and_count_both_needed_to_freeze(rig: Rig) -> None:
    names = rig.ready_nodes(5)
    rig.settings = ExecutorSettings(lost_after_misses=1)
    two_gone = [i for i in rig.cloud.live() if i.node not in names[:2]]  # 40%: believed
    report = reconciler(rig, Answer(two_gone)).run()
    assert report.frozen == {} and sorted(f.node or "" for f in report.of("lost")) == names[:2]


def test_a_node_with_running_jobs_is_never_lost(rig: Rig) -> None:
    a, _, _ = rig.ready_nodes(3)
    rig.settings = ExecutorSettings(lost_after_misses=1)
    answer = Answer([i for i in rig.cloud.live() if i.node != a])
    report = reconciler(rig, answer).run(busy(a))
    [refused] = report.of("lost-refused")
    assert refused.node == a and "1 job(s) running" in refused.detail
    assert rig.state(a) is S.READY and report.changes == []
    report = reconciler(rig, answer).run(Observed(taken_at=NOW))  # the jobs are gone too
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
    assert "lacks 3 of the 3 instances" in status["lost_frozen"]["vision/train"]
    answer.instances = cloud.live()  # the answer recovers: the alert clears
    kit.loop.tick()
    text = kit.loop.metrics.exposition().decode()
    assert 'gpu_autoscaler_lost_frozen{pool="vision/train"} 0.0' in text
    assert kit.loop.state.lost_frozen == {}
    kit.store.close()
