"""Demand that fits: which pool's nodes could run a pending pod, read through the fake API
server with the official client (taints, selectors, affinity, zones, MIG, shared GPUs,
priority, ResourceQuota)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.schedulers.kubernetes.objects import pod_needs
from autoscaler.signals.kube_fit import PoolShape, fit
from autoscaler.signals.kubernetes import KubernetesReader
from autoscaler.signals.readings import ClusterPool, SchedulerReading, pools_in_priority_order
from tests.builders import make_policy


def kpool(name: str, types: list[str], **kw: Any) -> dict[str, Any]:
    cluster = {"kind": "kubernetes", **kw.pop("cluster", {})}
    return {"name": name, "cloud": "aws", "region": "us-east-1", "instance_types": types,
            "max_nodes": 4, "cluster": cluster, **kw}


POLICIES = {
    "ml": make_policy("ml", pools=[
        kpool("train", ["p3.8xlarge", "p3.16xlarge"], zones=["us-east-1a"],
              cluster={"taints": ["dedicated=ml:NoSchedule"], "labels": {"tier": "train"}}),
        kpool("mig", ["p4de.24xlarge"], zones=["us-east-1a", "us-east-1b"],
              bootstrap={"sharing": "mig", "mig_profiles": ["3g.40gb", "3g.40gb"]}),
        kpool("shared", ["g4dn.12xlarge"], bootstrap={"sharing": "time-slicing",
                                                      "time_slicing_replicas": 4}),
        kpool("mps", ["g4dn.12xlarge"], bootstrap={"sharing": "mps", "time_slicing_replicas": 4,
                                                   "mps": {"replicas": 8}}),
    ]),
    "vision": make_policy("vision", pools=[
        kpool("v100", ["p3.2xlarge", "p3.8xlarge"], zones=["us-east-1a", "us-east-1b"],
              cluster={"quota_from": "resourcequota"}),
        kpool("t4", ["g4dn.xlarge"], zones=["us-east-1b"]),
    ]),
}
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
TYPE, ZONE = "node.kubernetes.io/instance-type", "topology.kubernetes.io/zone"


def refs() -> list[ClusterPool]:
    return pools_in_priority_order(POLICIES, default_catalog(), "kubernetes")


def shape(key: str) -> PoolShape:
    return PoolShape.of(next(r for r in refs() if r.key == key), default_catalog())


def needs(gpus: dict[str, float], **spec: Any) -> Any:
    return pod_needs(spec, gpus, spec.pop("zones", None))


def affinity(*exprs: dict[str, Any]) -> dict[str, Any]:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}


@pytest.mark.parametrize(("pool", "gpus", "spec", "want"), [
    # Taints: the pool's NoSchedule taint must be tolerated.
    ("ml/train", {"nvidia.com/gpu": 4}, {}, "taint dedicated=ml:NoSchedule not tolerated"),
    ("ml/train", {"nvidia.com/gpu": 4}, {"tolerations": TOLERATE}, (4, None)),
    ("ml/train", {"nvidia.com/gpu": 4}, {"tolerations": [{"operator": "Exists"}]}, (4, None)),
    # nodeSelector against the labels set at join (cluster.labels included).
    ("ml/train", {"nvidia.com/gpu": 1}, {"tolerations": TOLERATE, "nodeSelector": {"tier": "train"}},
     (1, None)),
    ("ml/train", {"nvidia.com/gpu": 1}, {"tolerations": TOLERATE, "nodeSelector": {"tier": "serve"}},
     "nodeSelector tier=serve"),
    # Instance type in the affinity, each type only in its own zone: the engine can be told
    # types and zones, not pairs of them -> not bought for.
    ("vision/v100", {"nvidia.com/gpu": 1}, {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": TYPE, "operator": "In", "values": ["p3.8xlarge"]},
                                  {"key": ZONE, "operator": "In", "values": ["us-east-1a"]}]},
            {"matchExpressions": [{"key": TYPE, "operator": "In", "values": ["p3.2xlarge"]},
                                  {"key": ZONE, "operator": "In", "values": ["us-east-1b"]}]},
        ]}}}},
     "node affinity node.kubernetes.io/instance-type In [p3.8xlarge]: only some of the pool's "
     "types or zones fit and the pool may launch the others"),
    # ... the GPU model in the affinity chooses all types of that model: served.
    ("vision/v100", {"nvidia.com/gpu": 1}, {"affinity": affinity(
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-V100-SXM2-16GB"]})},
     (1, None)),
    ("vision/t4", {"nvidia.com/gpu": 1}, {"affinity": affinity(
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["Tesla-V100-SXM2-16GB"]})},
     "node affinity nvidia.com/gpu.product In [Tesla-V100-SXM2-16GB]"),
    # Zones: a bound volume in us-east-1c fits no pool zone; us-east-1a only half of v100's.
    ("vision/t4", {"nvidia.com/gpu": 1}, {"zones": frozenset({"us-east-1c"})},
     "zone us-east-1c (bound volume / topology spread)"),
    ("ml/train", {"nvidia.com/gpu": 1}, {"tolerations": TOLERATE, "zones": frozenset({"us-east-1a"})},
     (1, None)),
    # GPUs per node.
    ("vision/v100", {"nvidia.com/gpu": 8}, {}, "GPUs per node: 8 asked, the largest fitting type has 4"),
    # MIG: slices of the pool's layout (two 3g.40gb per A100 80GB) are half a GPU each.
    ("ml/mig", {"nvidia.com/mig-3g.40gb": 1}, {}, (0.5, None)),
    ("ml/mig", {"nvidia.com/mig-1g.10gb": 1}, {},
     "resource nvidia.com/mig-1g.10gb: the pool's nodes offer nvidia.com/mig-3g.40gb"),
    ("vision/v100", {"nvidia.com/mig-3g.40gb": 1}, {},
     "resource nvidia.com/mig-3g.40gb: the pool's nodes offer nvidia.com/gpu"),
    # Time-slicing: 4 replicas per GPU.
    ("ml/shared", {"nvidia.com/gpu.shared": 2}, {}, (0.5, None)),
    # MPS shares count by mps.replicas, not the time-slicing setting.
    ("ml/mps", {"nvidia.com/gpu.shared": 2}, {}, (0.25, None)),
    ("ml/shared", {"nvidia.com/gpu": 1}, {},
     "resource nvidia.com/gpu: the pool's nodes offer nvidia.com/gpu.shared"),
])
def test_fit(pool: str, gpus: dict[str, float], spec: dict[str, Any], want: Any) -> None:
    got = fit(needs(gpus, **spec), shape(pool))
    if isinstance(want, str):
        assert got.failed == want
    else:
        assert got.failed is None and (got.gpus, got.gpu_model) == want


@pytest.mark.parametrize(("spec", "types", "zones"), [
    # One type of two V100 types: the GPU model cannot say it, so the types are passed on.
    ({"affinity": affinity({"key": TYPE, "operator": "In", "values": ["p3.8xlarge"]})},
     {"p3.8xlarge"}, None),
    ({"nodeSelector": {TYPE: "p3.8xlarge"}}, {"p3.8xlarge"}, None),
    ({"affinity": affinity({"key": TYPE, "operator": "NotIn", "values": ["p3.2xlarge"]})},
     {"p3.8xlarge"}, None),
    # ... with a zone too: both are passed on.
    ({"affinity": affinity({"key": TYPE, "operator": "In", "values": ["p3.8xlarge", "p4d.24xlarge"]},
                           {"key": ZONE, "operator": "In", "values": ["us-east-1b"]})},
     {"p3.8xlarge"}, {"us-east-1b"}),
    # Every type of the pool: no constraint to pass on.
    ({"affinity": affinity({"key": TYPE, "operator": "Exists"})}, None, None),
])
def test_instance_type_narrowing_tells_the_engine_the_types(
        spec: dict[str, Any], types: set[str] | None, zones: set[str] | None) -> None:
    got = fit(needs({"nvidia.com/gpu": 1}, **spec), shape("vision/v100"))
    assert got.failed is None and got.gpu_model is None
    assert got.instance_types == (frozenset(types) if types else None)
    assert got.zones == (frozenset(zones) if zones else None)


def test_an_instance_type_the_pool_lacks_is_unserved() -> None:
    got = fit(needs({"nvidia.com/gpu": 1}, nodeSelector={TYPE: "p4d.24xlarge"}), shape("vision/v100"))
    assert got.failed == f"nodeSelector {TYPE}=p4d.24xlarge"


def test_zone_narrowing_tells_the_engine_the_zone() -> None:
    # A volume in one of the pool's two zones: served, in that zone only.
    got = fit(needs({"nvidia.com/gpu": 1}, zones=frozenset({"us-east-1a"})), shape("vision/v100"))
    assert (got.failed, got.zones) == (None, frozenset({"us-east-1a"}))
    # A pool without zones (any zone of the region) cannot promise one.
    anywhere = PoolShape.of(pools_in_priority_order({"x": make_policy("x", pools=[
        kpool("any", ["p3.2xlarge"], zones=[])])}, default_catalog(), "kubernetes")[0],
        default_catalog())
    no_zones = "the pool lists no zones, so it cannot promise the zone of a new node"
    got = fit(needs({"nvidia.com/gpu": 1}, zones=frozenset({"us-east-1a"})), anywhere)
    assert got.failed == f"zone us-east-1a (bound volume / topology spread): {no_zones}"
    # Zone affinity or selectors cannot be promised either, not even NotIn (the new node
    # may land in the excluded zone); Exists holds, since every node gets a zone at join.
    zone = "topology.kubernetes.io/zone"
    got = fit(needs({"nvidia.com/gpu": 1}, nodeSelector={zone: "us-east-1a"}), anywhere)
    assert got.failed == f"nodeSelector {zone}=us-east-1a: {no_zones}"
    for op, values in (("In", ["us-east-1a"]), ("NotIn", ["us-east-1a"]), ("DoesNotExist", [])):
        got = fit(needs({"nvidia.com/gpu": 1}, affinity=affinity(
            {"key": zone, "operator": op, "values": values})), anywhere)
        assert got.failed is not None and got.failed.startswith(f"node affinity {zone} {op}")
        assert got.failed.endswith(no_zones)
    got = fit(needs({"nvidia.com/gpu": 1}, affinity=affinity({"key": zone, "operator": "Exists"})),
              anywhere)
    assert (got.failed, got.zones) == (None, None)


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        yield k


def read(kube: FakeKube) -> SchedulerReading:
    reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="3s"))
    try:
        return reader.read(refs())
    finally:
        reader.close()


def test_reader_pools_unserved_priority_and_volumes(kube: FakeKube) -> None:
    kube.add_priority_class("urgent", 1000)
    kube.add_pv("data-a", zone="us-east-1a")
    kube.add_pv("data-c", zone="us-east-1c")
    kube.add_pvc("ckpt-a", "ml", volume="data-a")
    kube.add_pvc("ckpt-c", "vision", volume="data-c")
    kube.add_pod("slow", "ml", gpus=4, tolerations=TOLERATE, claims=["ckpt-a"])
    kube.add_pod("fast", "ml", gpus=1, tolerations=TOLERATE, priority_class="urgent")
    kube.add_pod("slice", "ml", resources={"nvidia.com/mig-3g.40gb": 1})
    kube.add_pod("untolerated", "ml", gpus=4)  # train is tainted, mig/shared offer no nvidia.com/gpu
    kube.add_pod("far", "vision", gpus=1, claims=["ckpt-c"])
    reading = read(kube)
    assert reading.error is None
    got = {k: [(j.id, j.gpus, j.priority) for j in v] for k, v in reading.pending.items() if v}
    assert got == {"ml/train": [("ml/fast", 1, 1000), ("ml/slow", 4, 0)],
                   "ml/mig": [("ml/slice", 0.5, 0)]}
    unserved = {u.id: (u.team, u.constraint) for u in reading.unserved}
    assert unserved == {
        "ml/untolerated": ("ml", "taint dedicated=ml:NoSchedule not tolerated"),
        "vision/far": ("vision", "zone us-east-1c (bound volume / topology spread)"),
    }
    # Reported once, with every pool it was tried on.
    far = next(u for u in reading.unserved if u.id == "vision/far")
    assert far.reason.startswith("no pool's nodes could run it: vision/v100: zone us-east-1c")
    assert "vision/t4: zone us-east-1c" in far.reason


def test_topology_spread_picks_the_emptier_zone(kube: FakeKube) -> None:
    kube.add_node("a-1", labels={"topology.kubernetes.io/zone": "us-east-1a"})
    kube.add_node("b-1", labels={"topology.kubernetes.io/zone": "us-east-1b"})
    for i in range(2):
        kube.add_pod(f"run-{i}", "vision", node="a-1", gpus=1, labels={"app": "infer"})
    spread = [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
               "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "infer"}}}]
    kube.add_pod("next", "vision", gpus=1, labels={"app": "infer"}, spread=spread)
    reading = read(kube)
    # us-east-1a already has 2, us-east-1b none: only 1b keeps the skew. The v100 pool
    # (first in order) has both zones: served there, told to launch in us-east-1b.
    assert [(j.id, j.zones) for j in reading.pending["vision/v100"]] == [("vision/next", ["us-east-1b"])]


def test_mig_and_shared_node_capacity(kube: FakeKube) -> None:
    labels = {"gpu-autoscaler/team": "ml", "gpu-autoscaler/pool": "mig"}
    kube.add_node("ml-mig-1", labels=labels, resources={"nvidia.com/mig-3g.40gb": 16})
    kube.add_pod("s0", "ml", node="ml-mig-1", resources={"nvidia.com/mig-3g.40gb": 3})
    shared = {"gpu-autoscaler/team": "ml", "gpu-autoscaler/pool": "shared"}
    kube.add_node("ml-shared-1", labels=shared, resources={"nvidia.com/gpu.shared": 16})
    kube.add_pod("t0", "ml", node="ml-shared-1", resources={"nvidia.com/gpu.shared": 2})
    nodes = read(kube).nodes
    mig = nodes["ml-mig-1"]
    assert (mig.gpus_total, mig.gpus_allocated, mig.state) == (8, 1.5, "mixed")
    ts = nodes["ml-shared-1"]
    assert (ts.gpus_total, ts.gpus_allocated) == (4, 0.5)


def test_quota_from_resourcequota(kube: FakeKube) -> None:
    kube.add_quota("gpus", "vision", {"requests.nvidia.com/gpu": "6"})
    kube.add_quota("tight", "vision", {"nvidia.com/gpu": "4", "pods": "100"})
    kube.add_quota("gpus", "ml", {"requests.nvidia.com/gpu": "2"})  # ml takes its quota from policy
    quotas = read(kube).quotas
    assert list(quotas) == ["vision"]
    assert (quotas["vision"].max_gpus, quotas["vision"].source) == (4, "ResourceQuota vision/tight")


def test_reader_passes_an_instance_type_selector_on_to_the_engine(kube: FakeKube) -> None:
    kube.add_pod("big-node", "vision", gpus=1, node_selector={TYPE: "p3.8xlarge"})
    kube.add_pod("any-v100", "vision", gpus=1)
    reading = read(kube)
    got = [(j.id, j.instance_types) for j in reading.pending["vision/v100"]]
    assert sorted(got) == [("vision/any-v100", None), ("vision/big-node", ["p3.8xlarge"])]
