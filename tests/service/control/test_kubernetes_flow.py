"""Kubernetes end to end through decide() and the executor, and through ServiceLoop.tick(),
against the fake API server:
the real reader (watch caches), the real drainer (cordon, evictions, Node deletion) and a
join that posts the Node with its labels, taints and late GPUs. Terraform and Ansible are
the project's fakes (the SSH/Terraform path is covered by their own tests); GPU metrics
are set by the test, as Prometheus would report them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible.results import BootstrapRun
from autoscaler.actuators.drain import PhasedDrainer
from autoscaler.actuators.drain.kubernetes import KubernetesOps
from autoscaler.catalog import default_catalog
from autoscaler.engine import Drain, Launch, Plan, decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, PoolObservation, Snapshot
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.signals.kube_fit import POOL_LABEL, TEAM_LABEL
from autoscaler.signals.kubernetes import KubernetesReader
from autoscaler.signals.readings import pools_in_priority_order
from tests.builders import make_pool_dict
from tests.fakes import FakeAnsible
from tests.service.executor_rig import Rig, make_rig

S = NodeState
SCALE_DOWN = {"idle_for": "5m", "cooldown": "1m", "drain_timeout": "10m", "checkpoint_grace": "1m"}
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]


def policies() -> dict[str, TeamPolicy]:
    def kpool(name: str, types: list[str], **kw: Any) -> dict[str, Any]:
        cluster = {"kind": "kubernetes", **kw.pop("cluster", {})}
        return make_pool_dict(name, instance_types=types, zones=["us-east-1a"], max_nodes=3,
                              scale_down=SCALE_DOWN, cluster=cluster, **kw)

    return {"vision": TeamPolicy.model_validate({"team": "vision", "pools": [
        kpool("gpu", ["p3.8xlarge"], cluster={"taints": ["dedicated=ml:NoSchedule"]}),
        kpool("mig", ["p4de.24xlarge"], bootstrap={"sharing": "mig",
                                                   "mig_profiles": ["3g.40gb", "3g.40gb"]}),
    ]})}


class JoiningAnsible(FakeAnsible):
    """The cluster_join Kubernetes path: the bootstrapped node registers with the pool's
    labels and taints; its device plugin advertises the GPUs ``late`` seconds later."""

    def __init__(self, kube: FakeKube, late: float):
        super().__init__()
        self.kube, self.late = kube, late
        self.missing_gpus = 0  # a device plugin that advertises this many GPUs too few

    def bootstrap(self, nodes: Any, policies: Any, **kw: Any) -> BootstrapRun:
        run = super().bootstrap(nodes, policies, **kw)
        for node in nodes:
            team, pool_name = node.pool_key.split("/")
            pool = policies[team].pool(pool_name)
            itype = default_catalog().get(node.cloud, node.instance_type)
            if pool.bootstrap.sharing == "mig":
                per_gpu = pool.bootstrap.mig_profiles
                resources = {f"nvidia.com/mig-{p}": per_gpu.count(p) * itype.gpus for p in set(per_gpu)}
            else:
                resources = {"nvidia.com/gpu": itype.gpus - self.missing_gpus}
            labels = {TEAM_LABEL: team, POOL_LABEL: pool_name,
                      "node.kubernetes.io/instance-type": node.instance_type,
                      "topology.kubernetes.io/zone": node.zone or "us-east-1a"}
            self.kube.add_node(node.name, labels=labels, taints=list(pool.cluster.taints),
                               resources=resources, advertise_after=self.late)
        return run


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[Rig, FakeKube, KubernetesReader]]:
    rig = make_rig(tmp_path, policies=policies())
    with FakeKube(clock=rig.clock) as kube:
        cfg = KubernetesConfig(host=kube.url, timeout="5s")
        rig.slurm = PhasedDrainer(KubernetesOps(config=cfg))  # type: ignore[assignment]
        rig.ansible = JoiningAnsible(kube, late=60)
        reader = KubernetesReader(cfg)
        try:
            yield rig, kube, reader
        finally:
            reader.close()
            rig.store.close()


def tick(rig: Rig, reader: KubernetesReader, util: dict[str, float]) -> Plan:
    """One loop tick: read the cluster, decide, submit, advance."""
    import time

    time.sleep(0.3)  # let the watch deliver what the test just changed
    refs = pools_in_priority_order(rig.policies, default_catalog(), "kubernetes")
    reading = reader.read(refs)
    assert reading.error is None
    nodes = {name: NodeObservation(scheduler=sn, metrics=GpuMetrics(
        util_mean=util.get(name, 0.0), util_max_idle_window=util.get(name, 0.0),
        util_max=util.get(name, 0.0), gpus_reporting=int(sn.gpus_total), sample_age_s=5))
        for name, sn in reading.nodes.items()}
    snap = Snapshot(taken_at=rig.clock(), nodes=nodes, unserved=reading.unserved,
                    pools={r.key: PoolObservation(pending=reading.pending[r.key]) for r in refs})
    plan = decide(rig.policies, rig.store.fleet_view(), snap, rig.clock())
    executor = rig.executor()
    executor.submit(plan, rig.store.record_plan(plan))
    executor.advance(snapshot=snap)
    return plan


def test_pending_pods_launch_join_bind_then_idle_nodes_drain_and_go(world: Any) -> None:
    rig, kube, reader = world
    kube.add_pod("train", "vision", gpus=2, tolerations=TOLERATE)  # the tainted pool
    kube.add_pod("slice", "vision", resources={"nvidia.com/mig-3g.40gb": 1})  # the MIG pool
    kube.add_pod("nowhere", "vision", gpus=2)  # tolerates nothing, asks whole GPUs: unserved
    plan = tick(rig, reader, {})
    launches = sorted((a.pool, a.instance_type, a.count) for a in plan.actions if isinstance(a, Launch))
    assert launches == [("vision/gpu", "p3.8xlarge", 1), ("vision/mig", "p4de.24xlarge", 1)]
    assert [u.id for u in plan.unserved] == ["vision/nowhere"]
    names = {n.pool: n.name for n in rig.store.nodes()}
    assert all(rig.state(n) is S.BOOTSTRAPPING for n in names.values())
    assert set(kube.nodes) == set(names.values())  # joined: the Node objects exist
    assert kube.nodes[names["gpu"]]["spec"]["taints"] == [
        {"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    # Ready, but no GPUs advertised for 60 s: in flight, nothing launched twice.
    for _ in range(3):
        rig.clock.tick(15)
        plan = tick(rig, reader, {})
        assert not [a for a in plan.actions if isinstance(a, Launch)]
        assert all(rig.state(n) is S.BOOTSTRAPPING for n in names.values())
    rig.clock.tick(20)
    tick(rig, reader, {})
    assert all(rig.state(n) is S.READY for n in names.values())
    # The scheduler binds the pods (the fake's simple bind); they run, then end.
    kube.bind_pod("vision/train", names["gpu"])
    kube.bind_pod("vision/slice", names["mig"])
    kube.add_pod("log-shipper", "vision", node=names["gpu"], gpus=0, tolerations=TOLERATE)
    rig.clock.tick(60)
    plan = tick(rig, reader, {n: 90.0 for n in names.values()})
    assert not plan.changes()
    seen = reader.read(pools_in_priority_order(rig.policies, default_catalog(), "kubernetes")).nodes
    assert (seen[names["mig"]].gpus_total, seen[names["mig"]].gpus_allocated) == (8, 0.5)
    kube.finish_pod("vision/train")
    kube.finish_pod("vision/slice")
    # Idle for idle_for: drained (cordon, nothing left to evict), then terminated.
    drained: list[str] = []
    for _ in range(12):
        rig.clock.tick(60)
        plan = tick(rig, reader, {})
        drained += [a.node for a in plan.actions if isinstance(a, Drain)]
        if all(rig.state(n) is S.TERMINATED for n in names.values()):
            break
    assert sorted(drained) == sorted(names.values())
    assert all(rig.state(n) is S.TERMINATED for n in names.values())
    assert kube.evicted == ["vision/log-shipper"]  # the drain evicted what was left
    assert kube.nodes == {}  # the Node objects went with their instances
    assert rig.cloud.live() == []


def test_a_node_advertising_too_few_gpus_is_failed_after_the_ready_timeout(world: Any) -> None:
    rig, kube, reader = world
    rig.ansible.missing_gpus = 1
    kube.add_pod("train", "vision", gpus=2, tolerations=TOLERATE)
    tick(rig, reader, {})
    (name,) = [n.name for n in rig.store.nodes()]
    rig.clock.tick(120)
    tick(rig, reader, {})
    assert rig.state(name) is S.BOOTSTRAPPING  # Ready, but 3 of the type's 4 GPUs
    rig.clock.tick(rig.settings.ready_wait_timeout.total_seconds())
    tick(rig, reader, {})
    node = rig.node(name)
    assert node.state is S.BOOTSTRAP_FAILED
    assert "advertises 3 nvidia.com/gpu; p3.8xlarge has 4 GPU(s)" in node.reason


def test_unserved_pods_metric_by_team_and_constraint_kind() -> None:
    from datetime import UTC, datetime

    from autoscaler.model.snapshot import UnservedJob
    from autoscaler.service.observe.metrics import ServiceMetrics

    def job(name: str, constraint: str) -> UnservedJob:
        return UnservedJob(id=f"ml/{name}", team="ml", reason="no pool", constraint=constraint)

    metrics = ServiceMetrics()
    now = datetime(2026, 12, 1, tzinfo=UTC)
    metrics.set_pools(Plan(decided_at=now, unserved=[
        job("a", "taint dedicated=ml:NoSchedule not tolerated"),
        job("b", "taint x:NoExecute not tolerated"),
        job("c", "node affinity node.kubernetes.io/instance-type In [p3.8xlarge]")]))
    text = metrics.exposition().decode()
    assert 'gpu_autoscaler_unserved_jobs{constraint="taint",team="ml"} 2.0' in text
    assert 'gpu_autoscaler_unserved_jobs{constraint="node affinity",team="ml"} 1.0' in text
    metrics.set_pools(Plan(decided_at=now))  # served since: the series go away
    assert "gpu_autoscaler_unserved_jobs{" not in metrics.exposition().decode()


class SetMetrics:
    """Prometheus' part, as the test sets it: node -> mean GPU util (0 when unset)."""

    def __init__(self) -> None:
        self.util: dict[str, float] = {}

    def read(self, node_pools: Any, pools: Any, now: Any, pool_of: Any = None) -> Any:
        from autoscaler.signals.prometheus import MetricsReading

        return MetricsReading({name: NodeObservation(metrics=GpuMetrics(
            util_mean=self.util.get(name, 0.0), util_max_idle_window=self.util.get(name, 0.0),
            util_max=self.util.get(name, 0.0), gpus_reporting=1, sample_age_s=5))
            for name in node_pools})

    def close(self) -> None:
        return None


def test_the_service_loop_on_kubernetes(world: Any, tmp_path: Path) -> None:
    """The same scenario through ServiceLoop.tick(): the real SignalReader (Kubernetes
    reader, test metrics), decide, record, the real executor and reconciler."""
    from ruamel.yaml import YAML

    from autoscaler.service.config.models import LeaderSettings
    from autoscaler.service.config.reload import PolicyReloader
    from autoscaler.service.control.leader import Leadership
    from autoscaler.service.control.loop import ServiceLoop
    from autoscaler.service.observe.metrics import ServiceMetrics
    from autoscaler.signals.config import SignalsConfig
    from autoscaler.signals.reader import SignalReader
    from tests.service.service_fakes import FakePrices

    rig, kube, reader = world
    policies_dir = tmp_path / "policies"
    policies_dir.mkdir()
    YAML(typ="safe").dump(rig.policies["vision"].model_dump(mode="json"), policies_dir / "vision.yaml")
    metrics = SetMetrics()
    signals = SignalReader(SignalsConfig(scheduler=["kubernetes"], kubernetes=reader.config),
                           default_catalog(), prometheus=metrics, kubernetes=reader)
    loop = ServiceLoop(store=rig.store, reloader=PolicyReloader(policies_dir, default_catalog()),
                       signals=signals, catalog=default_catalog(), metrics=ServiceMetrics(),
                       leadership=Leadership(rig.store, LeaderSettings(), rig.clock),
                       executor=rig.executor(), reconciler=rig.reconciler(), prices=FakePrices(),
                       clock=rig.clock, interval_s=5)

    def tick(seconds: float) -> Plan:
        import time

        time.sleep(0.3)  # the watch delivers what the test changed
        rig.clock.tick(seconds)
        report = loop.tick()
        assert report.error is None, report.error
        return report.plan

    kube.add_pod("train", "vision", gpus=4, tolerations=TOLERATE)
    plan = tick(0)
    assert [(a.pool, a.count) for a in plan.actions if isinstance(a, Launch)] == [("vision/gpu", 1)]
    (name,) = [n.name for n in rig.store.nodes()]
    for _ in range(4):  # Ready at once, GPUs 60 s later: in flight, no second launch
        plan = tick(15)
        assert not [a for a in plan.actions if isinstance(a, Launch)]
    tick(15)
    assert rig.state(name) is S.READY
    kube.bind_pod("vision/train", name)
    metrics.util[name] = 95.0
    tick(60)
    kube.finish_pod("vision/train")
    metrics.util[name] = 0.0
    for _ in range(15):
        tick(60)
        if rig.state(name) is S.TERMINATED:
            break
    assert rig.state(name) is S.TERMINATED and name not in kube.nodes
