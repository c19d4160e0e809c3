"""Numbers a Kubernetes cluster reports are not trusted: the real reader against the
project's API server, through SignalReader and decide().

A node advertising what its instance type cannot have (1e9, NaN, -1, inf, more than the
catalog's GPUs) has its scheduler view marked missing with the reason; every other pool's
plan is what it is with a sane value, and the engine never sees the value."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.catalog import default_catalog
from autoscaler.engine import Replace, decide
from autoscaler.model.node import Node
from autoscaler.model.plan import Plan, ReportJob
from autoscaler.model.snapshot import GpuMetrics, NodeObservation
from autoscaler.model.snapshot_parts import Observed, assemble
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.schedulers.kubernetes.objects import GPU, MIG_PREFIX, SHARED, TYPE
from autoscaler.service.http.status import fleet_json
from autoscaler.signals.config import SignalsConfig
from autoscaler.signals.kube_fit import POOL_LABEL, TEAM_LABEL
from autoscaler.signals.kubernetes import KubernetesReader
from autoscaler.signals.prometheus import MetricsReading
from autoscaler.signals.reader import SignalReader
from tests.builders import NOW, fleet, make_node, make_policy

CATALOG = default_catalog()


def kpool(name: str, types: list[str], **kw: Any) -> dict[str, Any]:
    return {"name": name, "cloud": "aws", "region": "us-east-1", "instance_types": types,
            "max_nodes": 6, "capacity": {"on_demand_base": 0, "spot_percent": 0},
            "cluster": {"kind": "kubernetes"}, **kw}


POLICIES = {
    "search": make_policy("search", pools=[kpool("t4", ["g4dn.xlarge"]), kpool("a10", ["g5.xlarge"])]),
    "vision": make_policy("vision", priority="high", pools=[
        kpool("v100", ["p3.8xlarge"]),
        kpool("mig", ["p4de.24xlarge"], bootstrap={"sharing": "mig",
                                                   "mig_profiles": ["3g.40gb", "3g.40gb"]})]),
}
FLEET = [
    make_node("search-t4-1", "search", "t4", instance_type="g4dn.xlarge"),  # the hostile one
    make_node("search-a10-1", "search", "a10", instance_type="g5.xlarge"),
    make_node("vision-v100-1", "vision", "v100", instance_type="p3.8xlarge"),
    make_node("vision-mig-1", "vision", "mig", instance_type="p4de.24xlarge"),
]
BAD = "search-t4-1"
HOSTILE = ["1e9", "nan", "-1", "inf", "2", "1e999999E", "not-a-number"]


def labels(node: Node) -> dict[str, str]:
    return {TEAM_LABEL: node.team, POOL_LABEL: node.pool, TYPE: node.instance_type}


class UtilMetrics:
    """Prometheus' part, as the test sets it: node -> GPU util (%)."""

    def __init__(self) -> None:
        self.util: dict[str, float] = {}

    def read(self, node_pools: Any, pools: Any, now: Any, pool_of: Any = None) -> MetricsReading:
        return MetricsReading({name: NodeObservation(metrics=GpuMetrics(
            util_mean=self.util.get(name, 50.0), util_max_idle_window=min(self.util.get(name, 50.0), 100),
            util_max=min(self.util.get(name, 50.0), 100), gpus_reporting=1, sample_age_s=5))
            for name in node_pools})

    def close(self) -> None:
        return None


@pytest.fixture
def world() -> Iterator[tuple[FakeKube, SignalReader, UtilMetrics]]:
    with FakeKube() as kube:
        for node in FLEET:
            if node.pool == "mig":
                kube.add_node(node.name, labels=labels(node),
                              resources={f"{MIG_PREFIX}3g.40gb": 16})
            else:
                kube.add_node(node.name, gpus=CATALOG.get("aws", node.instance_type).gpus,
                              labels=labels(node))
        kube.add_pod("serve", "vision", node="vision-v100-1", gpus=2)
        for i in range(2):
            kube.add_pod(f"train-{i}", "vision", gpus=4,
                         node_selector={TEAM_LABEL: "vision", POOL_LABEL: "v100"})
            kube.add_pod(f"infer-{i}", "search", gpus=1,
                         node_selector={TEAM_LABEL: "search", POOL_LABEL: "a10"})
            kube.add_pod(f"slice-{i}", "vision", resources={f"{MIG_PREFIX}3g.40gb": 1},
                         node_selector={TEAM_LABEL: "vision", POOL_LABEL: "mig"})
        # One t4 pod: the sane t4 node has room for it; a node claiming 1e9 GPUs would too.
        kube.add_pod("small", "search", gpus=1, node_selector={TEAM_LABEL: "search", POOL_LABEL: "t4"})
        cfg = KubernetesConfig(host=kube.url, timeout="3s")
        metrics = UtilMetrics()
        reader = SignalReader(SignalsConfig(scheduler=["kubernetes"], kubernetes=cfg), CATALOG,
                              prometheus=metrics, kubernetes=KubernetesReader(cfg))
        try:
            yield kube, reader, metrics
        finally:
            reader.close()


def wait_for(check: Callable[[], Any], timeout_s: float = 10) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (found := check()):
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)
    return found


def tick(reader: SignalReader) -> tuple[Observed, Plan]:
    observed = reader.read(POLICIES, FLEET, NOW)
    return observed, decide(POLICIES, fleet(*FLEET), assemble(observed), NOW, catalog=CATALOG)


def others(plan: Plan) -> tuple[list[Any], dict[str, Any]]:
    return ([a for a in plan.actions if a.pool != "search/t4"],
            {k: s for k, s in plan.pools.items() if k != "search/t4"})


def advertise(kube: FakeKube, name: str, value: str) -> None:
    def change(node: dict[str, Any]) -> None:
        for part in ("capacity", "allocatable"):
            node["status"][part][GPU] = value
    kube.store.touch("nodes", name, change)


@pytest.mark.parametrize("value", HOSTILE)
def test_a_node_advertising_the_impossible_is_missing_and_no_other_plan_changes(
        world: Any, value: str) -> None:
    kube, reader, _ = world
    sane, sane_plan = tick(reader)
    assert sane.missing == [] and sane.nodes[BAD].scheduler is not None
    assert sane.nodes[BAD].scheduler.gpus_total == 1
    assert not [a for a in sane_plan.actions if a.pool == "search/t4" and a.kind == "launch"]

    advertise(kube, BAD, value)
    seen = wait_for(lambda: (o := tick(reader))[0].nodes[BAD].scheduler_missing and o)
    observed, plan = seen
    obs = observed.nodes[BAD]
    # The node's view is gone, with the reason: what it said and what its type has.
    assert obs.scheduler is None
    assert "g4dn.xlarge has 1 GPU(s)" in str(obs.scheduler_missing)
    assert "the scheduler reports GPUs=" in str(obs.scheduler_missing)
    assert obs.metrics is not None  # its metrics are another source, still believed
    # The source itself is fine, and every other node and pool reads as before.
    assert observed.missing == []
    assert {n: o for n, o in observed.nodes.items() if n != BAD} == {
        n: o for n, o in sane.nodes.items() if n != BAD}
    assert others(plan) == others(sane_plan)
    # Its own pool: no room believed on the node, so the pending pod gets a node.
    assert [(a.pool, a.count) for a in plan.actions if a.kind == "launch" and a.pool == "search/t4"] == [
        ("search/t4", 1)]
    assert plan.pools["search/t4"].error is None
    # And the status API says why, on the node's row.
    row = next(r for r in fleet_json(FLEET, CATALOG, assemble(observed), NOW)["nodes"] if r["name"] == BAD)
    assert row["data_missing"]["scheduler"] == obs.scheduler_missing


def test_too_many_mig_slices_are_more_gpus_than_the_type(world: Any) -> None:
    kube, reader, _ = world
    kube.store.touch("nodes", "vision-mig-1", lambda n: n["status"]["allocatable"].update(
        {f"{MIG_PREFIX}3g.40gb": "2000"}))  # 2 per GPU is 16 on 8 GPUs: 2000 is 1000 GPUs
    observed, _ = wait_for(lambda: (o := tick(reader))[0].nodes["vision-mig-1"].scheduler_missing and o)
    assert "GPUs=1000; p4de.24xlarge has 8 GPU(s)" in str(observed.nodes["vision-mig-1"].scheduler_missing)


def test_util_outside_0_to_100_is_missing_metrics_and_adds_no_launch(world: Any) -> None:
    _, reader, metrics = world
    _, sane_plan = tick(reader)
    for util in (500.0, -5.0):
        metrics.util["vision-v100-1"] = util
        observed, plan = tick(reader)
        obs = observed.nodes["vision-v100-1"]
        assert obs.metrics is None and obs.scheduler is not None
        assert f"util_mean={util:g}: outside 0..100" in str(obs.metrics_missing)
        assert plan.actions == sane_plan.actions or util < 0  # 500% adds no launch
        assert sum(a.count for a in plan.actions if a.kind == "launch") <= sum(
            a.count for a in sane_plan.actions if a.kind == "launch")


def test_hostile_pods_and_quotas(world: Any) -> None:
    kube, reader, _ = world
    for i, value in enumerate(["1e9", "nan", "inf", "-1", "1e999999E"]):
        kube.add_pod(f"odd-{i}", "search", resources={GPU: value},
                     node_selector={TEAM_LABEL: "search", POOL_LABEL: "a10"})
    kube.add_pod("odd-running", "search", node="search-a10-1", resources={GPU: "nan"})

    def read() -> Observed | None:
        observed, _ = tick(reader)
        return observed if len(observed.unserved) == 4 else None
    observed = wait_for(read)
    unserved = {j.id: j.constraint for j in observed.unserved}
    assert unserved == {
        "search/odd-0": "GPUs per node: 1e+09 asked, the largest fitting type has 1",
        "search/odd-1": "GPU request nvidia.com/gpu=nan: not a number of GPUs",
        "search/odd-2": "GPU request nvidia.com/gpu=inf: not a number of GPUs",
        "search/odd-4": "GPU request nvidia.com/gpu=nan: not a number of GPUs",
    }  # -1 GPUs asks for none: not a GPU pod
    assert all(math.isfinite(j.gpus) for p in observed.pools.values() for j in p.pending)
    # A running pod whose GPUs cannot be read: its node's allocation is unknown, not free.
    a10 = observed.nodes["search-a10-1"]
    assert a10.scheduler is None and "allocated GPUs=nan" in str(a10.scheduler_missing)


def test_quotas_that_are_not_numbers_are_no_quota() -> None:
    policies = {"search": make_policy("search", pools=[
        kpool("t4", ["g4dn.xlarge"], cluster={"kind": "kubernetes", "quota_from": "resourcequota"})])}
    with FakeKube() as kube:
        kube.add_quota("gpus", "search", {"requests.nvidia.com/gpu": "inf"})
        kube.add_quota("more", "search", {"requests.nvidia.com/gpu": "-1"})
        cfg = KubernetesConfig(host=kube.url, timeout="3s")
        reader = SignalReader(SignalsConfig(scheduler=["kubernetes"], kubernetes=cfg), CATALOG,
                              kubernetes=KubernetesReader(cfg))
        try:
            observed = reader.read(policies, [], NOW)
            assert observed.missing == ["prometheus"]  # kubernetes read fine
            assert observed.cluster_quotas == {}
            kube.add_quota("real", "search", {"requests.nvidia.com/gpu": "3"})
            quotas = wait_for(lambda: reader.read(policies, [], NOW).cluster_quotas)
            assert quotas["search"].max_gpus == 3
        finally:
            reader.close()


# -- generated objects -------------------------------------------------------------------
QUANTITY = st.one_of(
    st.sampled_from(["1e9", "nan", "NaN", "inf", "-inf", "Infinity", "-1", "1e999999E", "sNaN",
                     "500m", "1Ki", "2k", "0", "", "1e-9", "1.5", "abc", "xm", "1Ei", "9" * 400]),
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.from_regex(r"-?[0-9]{1,4}(\.[0-9]{1,3})?([eE]-?[0-9]{1,7})?(n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ei)?",
                  fullmatch=True),
    st.text(max_size=12),
)
RESOURCE = st.sampled_from([GPU, SHARED, f"{MIG_PREFIX}3g.40gb", f"{MIG_PREFIX}1g.5gb", "cpu"])
NODE = st.tuples(st.sampled_from(FLEET), st.booleans(), st.dictionaries(RESOURCE, QUANTITY, max_size=3))
POD = st.tuples(st.one_of(st.none(), st.integers(0, 3)), st.sampled_from(["search", "vision"]),
                st.dictionaries(RESOURCE, QUANTITY, min_size=1, max_size=2))


def test_generated_nodes_and_pods_never_raise_nor_exceed_the_catalog() -> None:
    """Generated allocatable quantities and pod requests, served by the API server and
    read by the real reader's watch: no error, and no count above what the catalog gives."""
    with FakeKube() as kube:
        cfg = KubernetesConfig(host=kube.url, timeout="3s")
        reader = SignalReader(SignalsConfig(scheduler=["kubernetes"], kubernetes=cfg), CATALOG,
                              kubernetes=KubernetesReader(cfg))
        runs = iter(range(10**6))
        seen = {"refused": 0, "believed": 0}
        try:
            @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
            @given(nodes=st.lists(NODE, min_size=1, max_size=3), pods=st.lists(POD, max_size=4))
            def check(nodes: list[tuple[Node, bool, dict[str, str]]],
                      pods: list[tuple[int | None, str, dict[str, str]]]) -> None:
                run = next(runs)
                names, fleet_nodes, most = [], [], {}
                for i, (like, in_fleet, resources) in enumerate(nodes):
                    name = f"{like.team}-{like.pool}-g{run}x{i}"  # its pool by name prefix
                    kube.add_node(name, labels=labels(like), resources=dict(resources))
                    names.append(name)
                    most[name] = CATALOG.get(like.cloud, like.instance_type).gpus
                    if in_fleet:
                        fleet_nodes.append(dataclasses.replace(like, name=name))
                for j, (on, team, resources) in enumerate(pods):
                    kube.add_pod(f"g{run}p{j}", team, resources=dict(resources),
                                 node=names[on % len(names)] if on is not None else None)
                kube.add_node(f"sentinel-{run}")  # nodes arrive in order: the example is in
                kube.add_pod(f"sentinel-{run}", "search", node=f"sentinel-{run}", gpus=1)
                observed = wait_for(lambda: (o := reader.read(POLICIES, fleet_nodes, NOW)).nodes.get(
                    f"sentinel-{run}") and o.nodes[f"sentinel-{run}"].scheduler and
                    o.nodes[f"sentinel-{run}"].scheduler.jobs and o)
                assert observed.missing == ["prometheus"]
                for name in names:
                    obs = observed.nodes[name]
                    if obs.scheduler is None:
                        assert obs.scheduler_missing
                        seen["refused"] += 1
                        continue
                    seen["believed"] += 1
                    sched = obs.scheduler
                    for value in (sched.gpus_total, sched.gpus_allocated, *(j.gpus for j in sched.jobs)):
                        assert 0 <= value <= most[name] + 1e-6  # its type's, or its pool's by name
                for pool in observed.pools.values():
                    assert all(0 < j.gpus < math.inf for j in pool.pending)
                plan = decide(POLICIES, fleet(*fleet_nodes), assemble(observed), NOW, catalog=CATALOG)
                assert all(s.error is None for s in plan.pools.values())
                for name in [*names, f"sentinel-{run}"]:
                    kube.remove_node(name)

            check()
            assert seen["refused"] and seen["believed"]  # both kinds of node were generated
        finally:
            reader.close()


# -- hostile times (model/bounds.Times in SignalReader; kube_demand._time / _deadline) -----

class Cached:
    """KubernetesReader.assemble over caches the real watch transforms filled (what the
    informers hold), without an API server."""

    def __init__(self, pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
        from autoscaler.schedulers.kubernetes.objects import node_record
        from autoscaler.signals.kube_demand import pod_record
        from autoscaler.signals.kubernetes import _tolerant, _unreadable_pod
        self.reader = KubernetesReader(KubernetesConfig(host="http://127.0.0.1:1"), CATALOG)
        self.caches: dict[str, dict[str, Any]] = {
            "pods": {}, "nodes": {}, "persistentvolumeclaims": {}, "persistentvolumes": {}}
        self.set(pods, nodes, _tolerant("pod", pod_record, _unreadable_pod), _tolerant("node", node_record))

    def set(self, pods: list[dict[str, Any]], nodes: list[dict[str, Any]], pod: Any, node: Any) -> None:
        for p in pods:
            if (rec := pod(p)) is not None:
                self.caches["pods"][f"{p['metadata']['namespace']}/{p['metadata']['name']}"] = rec
        for n in nodes:
            if (rec := node(n)) is not None:
                self.caches["nodes"]["/" + n["metadata"]["name"]] = rec

    def read(self, refs: Any) -> Any:
        return self.reader.assemble(self.caches, refs)


TIMES_POLICIES = {"vision": make_policy("vision", pools=[kpool(
    "v100", ["p3.2xlarge"], health={"unready_grace": "10m"},
    lifetime={"max_job_runtime": "48h", "action": "release"})])}
TIMES_FLEET = [make_node(f"vision-v100-{i}", "vision", "v100", age=timedelta(days=10)) for i in (1, 2)]


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def kube_node(name: str, ready: bool = True, transition: str | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady"}
    if transition is not None:
        cond["lastTransitionTime"] = transition
    return {"metadata": {"name": name, "labels": {TEAM_LABEL: "vision", POOL_LABEL: "v100",
                                                  TYPE: "p3.2xlarge"}},
            "spec": {}, "status": {"allocatable": {GPU: "1"}, "conditions": [cond]}}


def kube_pod(name: str, node: str | None = None, created: str | None = None, started: str | None = None,
             **spec: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {"metadata": {"name": name, "namespace": "vision"},
                           "spec": {"containers": [{"resources": {"requests": {GPU: "1"}}}], **spec}}
    if created is not None:
        pod["metadata"]["creationTimestamp"] = created
    if node is not None:
        pod["spec"]["nodeName"] = node
        pod["status"] = {"phase": "Running", **({"startTime": started} if started else {})}
    else:
        pod["status"] = {"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    return pod


class TimesTick:
    def __init__(self, pods: list[dict[str, Any]], nodes: list[dict[str, Any]]) -> None:
        self.reader = SignalReader(SignalsConfig(scheduler=["kubernetes"],
                                                 kubernetes={"host": "http://127.0.0.1:1"}),
                                   CATALOG, kubernetes=Cached(pods, nodes))

    def __call__(self, now: datetime = NOW) -> tuple[Observed, Plan]:
        observed = self.reader.read(TIMES_POLICIES, TIMES_FLEET, now)
        return observed, decide(TIMES_POLICIES, fleet(*TIMES_FLEET), assemble(observed), now,
                                catalog=CATALOG)


def replaced(plan: Plan) -> list[str]:
    return [a.node for a in plan.actions if isinstance(a, Replace)]


@pytest.mark.parametrize("transition", ["1970-01-01T00:00:00Z", "9999-01-01T00:00:00Z", None])
def test_a_not_ready_nodes_transition_in_1970_or_9999_counts_the_grace_from_first_seen(
        transition: str | None) -> None:
    """1970 replaced a node that had just gone NotReady at once; 9999, or no
    lastTransitionTime at all, never replaced it. The reason says how the time is known."""
    busy_pod = kube_pod("busy", node="vision-v100-2", started=iso(NOW - timedelta(hours=1)))
    tick = TimesTick([busy_pod], [kube_node("vision-v100-1", ready=False, transition=transition),
                                  kube_node("vision-v100-2")])
    observed, plan = tick(NOW)
    assert observed.nodes["vision-v100-1"].scheduler.unusable_since == NOW and replaced(plan) == []
    assert replaced(tick(NOW + timedelta(minutes=9))[1]) == []
    plan = tick(NOW + timedelta(minutes=11))[1]
    assert replaced(plan) == ["vision-v100-1"]
    how = "no time given" if transition is None else f"its time {transition[:19]}+00:00 not believed"
    assert (f"NotReady: KubeletNotReady ({how}; first seen so at {NOW.isoformat()}) for 11m "
            "> unready_grace 10m") in plan.actions[0].reason


def test_a_pods_start_in_1970_is_unknown_and_never_past_max_job_runtime() -> None:
    for started, reported in [("1970-01-01T00:00:00Z", []), (iso(NOW - timedelta(hours=49)), ["vision/train"])]:
        observed, plan = TimesTick([kube_pod("train", node="vision-v100-2", started=started)],
                                   [kube_node("vision-v100-1"), kube_node("vision-v100-2")])()
        (job,) = observed.nodes["vision-v100-2"].scheduler.jobs
        assert job.started_at == (None if not reported else NOW - timedelta(hours=49))
        assert [a.job for a in plan.actions if isinstance(a, ReportJob)] == reported


def test_a_creation_time_without_a_zone_is_utc_and_the_pool_still_launches() -> None:
    """A naive creationTimestamp made scale-up raise TypeError (naive - aware): no launch."""
    from autoscaler.signals.kube_demand import pod_record
    record = pod_record(kube_pod("want", created="2026-11-30T11:00:00"))
    assert record is not None and record.created_at == datetime(2026, 11, 30, 11, 0, tzinfo=UTC)

    full = [kube_pod(f"busy{i}", node=f"vision-v100-{i}", started=iso(NOW - timedelta(hours=1))) for i in (1, 2)]
    observed, plan = TimesTick([kube_pod("want", created="2026-11-30T11:00:00"), *full],
                               [kube_node("vision-v100-1"), kube_node("vision-v100-2")])()
    (job,) = observed.pools["vision/v100"].pending
    assert job.submitted_at == datetime(2026, 11, 30, 11, 0, tzinfo=UTC)
    assert plan.pools["vision/v100"].error is None
    assert [(a.pool, a.count) for a in plan.actions if a.kind == "launch"] == [("vision/v100", 1)]


def test_an_active_deadline_of_10_to_the_12_seconds_is_no_deadline_not_an_unreadable_pod() -> None:
    """10**12 s is a legal int64; started + it overflowed, the pod read as NaN GPUs and
    its node's scheduler view was refused."""
    from autoscaler.signals.kube_demand import pod_record
    svc = kube_pod("svc", node="vision-v100-2", started=iso(NOW - timedelta(hours=1)),
                   activeDeadlineSeconds=10**12)
    record = pod_record(svc)
    assert record is not None and record.ends_at is None and record.gpus == {GPU: 1.0}

    observed, _ = TimesTick([svc], [kube_node("vision-v100-1"), kube_node("vision-v100-2")])()
    node = observed.nodes["vision-v100-2"]
    assert node.scheduler_missing is None and node.scheduler is not None
    assert [(j.id, j.gpus, j.started_at, j.ends_at) for j in node.scheduler.jobs] == [
        ("vision/svc", 1.0, NOW - timedelta(hours=1), None)]
