"""Kubernetes demand through the official client against the project's fake API server."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.signals.kubernetes import KubernetesReader, gpu_model_of, quantity
from autoscaler.signals.readings import ClusterPool, SchedulerReading, pools_in_priority_order
from tests.builders import make_policy

CREATED = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)


def pool(name: str, types: list[str]) -> dict[str, Any]:
    return {"name": name, "cloud": "aws", "region": "us-east-1", "instance_types": types,
            "max_nodes": 4, "cluster": {"kind": "kubernetes"}}


POLICIES = {
    "search": make_policy("search", pools=[pool("t4", ["g4dn.xlarge"]),
                                           pool("a10", ["g5.xlarge"])]),
    "vision": make_policy("vision", priority="high",
                          pools=[pool("v100", ["p3.2xlarge", "p3.8xlarge"])]),
}


def refs() -> list[ClusterPool]:
    return pools_in_priority_order(POLICIES, default_catalog(), "kubernetes")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        yield k


def read(kube: FakeKube, **cfg: Any) -> SchedulerReading:
    """One tick of a fresh reader (list + watch), closed after."""
    reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="3s", **cfg))
    try:
        return reader.read(refs())
    finally:
        reader.close()


def test_pending_unschedulable_gpu_pods_by_pool(kube: FakeKube) -> None:
    # Explicit team + pool selector.
    kube.add_pod("a", "anything", gpus=1, created_at=CREATED,
                 node_selector={"gpu-autoscaler/team": "search", "gpu-autoscaler/pool": "a10"})
    # Team through required node affinity; GPU model from GPU feature discovery's label:
    # only the a10 pool's nodes have it.
    kube.add_pod("b", "anything", gpus=1, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
            "matchExpressions": [
                {"key": "gpu-autoscaler/team", "operator": "In", "values": ["search"]},
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A10G"]},
            ]}]}}})
    kube.add_pod("c", "vision", gpus=4)  # namespace == team: the team's pool
    kube.add_pod("d", "search", gpus=0.5)  # a shared GPU
    kube.add_pod("e", "nobody", gpus=1)  # no team, no rule: unattributed
    kube.add_pod("f", "search", gpus=1, unschedulable=False)  # pending, not yet judged
    kube.add_pod("g", "search", gpus=0)  # CPU-only
    kube.add_pod("h", "search", gpus=1, node_selector={"gpu-autoscaler/pool": "nope",
                                                       "gpu-autoscaler/team": "search"})
    reading = read(kube)
    assert reading.error is None
    got = {k: [(j.id, j.gpus, j.gpu_model) for j in v] for k, v in reading.pending.items()}
    assert got == {
        "vision/v100": [("vision/c", 4, None)],
        "search/t4": [("search/d", 0.5, None)],
        "search/a10": [("anything/a", 1, None), ("anything/b", 1, None)],
    }
    assert all(j.reason == "Unschedulable" for v in reading.pending.values() for j in v)
    assert reading.pending["search/a10"][0].submitted_at == CREATED
    assert sorted(j.id for j in reading.unattributed) == ["nobody/e", "search/h"]
    assert reading.unserved == []


def test_namespace_rules(kube: FakeKube) -> None:
    kube.add_pod("x", "ml-research", gpus=1)
    kube.add_pod("y", "inference-prod", gpus=1)
    reading = read(kube, namespace_teams=[
        {"namespace": "ml-*", "team": "vision"},
        {"namespace": "inference-*", "team": "search", "pool": "a10"},
    ])
    assert [j.id for j in reading.pending["vision/v100"]] == ["ml-research/x"]
    assert [j.id for j in reading.pending["search/a10"]] == ["inference-prod/y"]


def test_nodes_jobs_ready_and_cordon(kube: FakeKube) -> None:
    kube.add_node("search-t4-1", gpus=4)
    kube.add_node("search-t4-2", gpus=4, unschedulable=True)
    kube.add_node("search-t4-3", gpus=1, ready=False)
    kube.add_node("search-t4-4", gpus=1)
    kube.add_pod("serve-0", "search", node="search-t4-1", gpus=1, created_at=CREATED)
    kube.add_pod("serve-1", "search", node="search-t4-2", gpus=2, created_at=CREATED,
                 deadline_s=3600)
    kube.add_pod("cpu", "search", node="search-t4-4", gpus=0)
    kube.add_pod("done", "search", node="search-t4-4", gpus=1, phase="Succeeded")
    nodes = read(kube).nodes
    one = nodes["search-t4-1"]
    assert (one.state, one.gpus_total, one.gpus_allocated, one.ready, one.cordoned) == (
        "mixed", 4, 1, True, False)
    assert [(j.id, j.gpus, j.started_at) for j in one.jobs] == [("search/serve-0", 1, CREATED)]
    assert (nodes["search-t4-2"].state, nodes["search-t4-2"].cordoned) == ("draining", True)
    # activeDeadlineSeconds: the kubelet ends it an hour after it started.
    assert [j.ends_at for j in nodes["search-t4-2"].jobs] == [CREATED + timedelta(hours=1)]
    assert one.jobs[0].ends_at is None
    assert (nodes["search-t4-3"].state, nodes["search-t4-3"].ready) == ("down", False)
    assert (nodes["search-t4-4"].state, nodes["search-t4-4"].jobs) == ("idle", [])
    kube.add_pod("serve-2", "search", node="search-t4-4", gpus=1)
    kube.core_v1().patch_node("search-t4-2", {"spec": {"unschedulable": None}})
    kube.remove_node("search-t4-3")
    after = read(kube).nodes
    assert after["search-t4-4"].state == "allocated"
    assert after["search-t4-2"].state == "mixed" and not after["search-t4-2"].cordoned
    assert "search-t4-3" not in after


def test_list_once_then_watch_no_calls_per_tick(kube: FakeKube) -> None:
    for i in range(20):
        kube.add_node(f"n{i}")
        kube.add_pod(f"p{i}", "search", node=f"n{i}")
    reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="3s"))
    try:
        first = reader.read(refs())
        assert len(first.nodes) == 20
        lists = sorted(p for m, p in kube.requests if m == "GET")
        assert lists == ["/api/v1/nodes", "/api/v1/persistentvolumeclaims",
                         "/api/v1/persistentvolumes", "/api/v1/pods"]
        wait_for(lambda: sum(m == "WATCH" for m, _ in kube.requests) == 4)
        before = len(kube.requests)
        for _ in range(5):
            reader.read(refs())
        assert len(kube.requests) == before  # ticks read the caches only
        # Changes arrive through the watch.
        kube.add_pod("late", "search", gpus=1)
        kube.remove_node("n3")
        wait_for(lambda: "n3" not in reader.read(refs()).nodes)
        assert [j.id for j in reader.read(refs()).pending["search/t4"]] == ["search/late"]
        assert len(kube.requests) == before
    finally:
        reader.close()


def test_a_gpu_pod_that_becomes_unschedulable_on_the_watch_is_told_once(kube: FakeKube) -> None:
    """What wakes the service's next tick (tick.wake_after): only new unschedulable GPU pods."""
    kube.add_node("n1")
    kube.add_pod("old", "search", gpus=1)  # pending before the list: the first tick sees it
    reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="3s"))
    told: list[str] = []
    reader.on_demand = told.append
    try:
        reader.read(refs())
        wait_for(lambda: sum(m == "WATCH" for m, _ in kube.requests) == 4)
        kube.add_pod("cpu", "search", gpus=0)  # no GPU
        kube.add_pod("running", "search", gpus=1, node="n1")
        kube.add_pod("new", "search", gpus=1)
        wait_for(lambda: told == ["GPU pod search/new unschedulable"])
        kube.annotate_pod("search/new", {"seen": "again"})  # still pending: not new demand
        kube.bind_pod("search/new", "n1")
        wait_for(lambda: "search/new" not in {j.id for j in reader.read(refs()).pending.get("search/t4", [])})
        assert told == ["GPU pod search/new unschedulable"]
    finally:
        reader.close()


def test_gone_relists(kube: FakeKube) -> None:
    kube.add_node("n1")
    reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="3s"))
    try:
        reader.read(refs())
        wait_for(lambda: sum(m == "WATCH" for m, _ in kube.requests) == 4)
        nodes = reader._informers["nodes"]
        kube.compact()  # the open watches get 410 Gone and list again
        kube.add_node("n2")
        wait_for(lambda: nodes.lists == 2 and "n2" in reader.read(refs()).nodes)
    finally:
        reader.close()


def wait_for(check: Any, timeout_s: float = 10) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


def test_api_down_is_missing_fast() -> None:
    with FakeKube() as kube:
        url = kube.url
    reader = KubernetesReader(KubernetesConfig(host=url, timeout="2s"))
    try:
        reading = reader.read(refs())
    finally:
        reader.close()
    assert reading.error == "kubernetes: API unreachable (NewConnectionError)"


def test_api_that_never_answers_times_out() -> None:
    import socket
    import time

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        host = f"http://127.0.0.1:{server.getsockname()[1]}"
        started = time.monotonic()
        reader = KubernetesReader(KubernetesConfig(host=host, timeout="1s"))
        try:
            reading = reader.read(refs())
            elapsed = time.monotonic() - started
        finally:
            reader.close()
    assert elapsed < 3
    assert reading.error == "kubernetes: API timed out after 1s"


def test_api_error_and_token(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBE_TOKEN", "tok")
    reader = KubernetesReader(KubernetesConfig(host=kube.url + "/nope", token_env="KUBE_TOKEN"))
    try:
        reading = reader.read(refs())
    finally:
        reader.close()
    assert reading.error == "kubernetes: API answered 404 Not Found"
    missing = KubernetesReader(KubernetesConfig(host=kube.url, token_env="UNSET_TOKEN_VAR"))
    assert missing.read(refs()).error == (
        "kubernetes: kubernetes token: environment variable UNSET_TOKEN_VAR is not set")


@pytest.mark.parametrize(("product", "model"), [
    ("Tesla-T4", "T4"), ("NVIDIA-A100-SXM4-40GB", "A100"), ("Tesla-V100-SXM2-16GB", "V100"),
    ("NVIDIA-H100-80GB-HBM3", "H100"), ("NVIDIA-A10G", "A10G"), ("something", None),
])
def test_gpu_model_of_product(product: str, model: str | None) -> None:
    assert gpu_model_of(product) == model


def test_quantities() -> None:
    assert (quantity("2"), quantity("500m"), quantity(None), quantity("1e3"), quantity("1Ki")) == (
        2, 0.5, 0, 1000, 1024)
    # Not a quantity: NaN, refused with its node or pod, never read as zero GPUs.
    assert all(math.isnan(quantity(q)) for q in ("x", "xm", "nan", "1e999999E", "sNaN", [1], True))
    assert (quantity("inf"), quantity("-1")) == (math.inf, -1)


def test_api_lost_after_sync_is_missing_not_stale() -> None:
    kube = FakeKube().start()
    kube.add_node("n1")
    reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="2s"))
    try:
        assert reader.read(refs()).error is None
        kube.stop()  # open watches end; re-watching is refused
        wait_for(lambda: reader.read(refs()).error is not None)
        # The stream cut (ProtocolError) or the refused re-watch (NewConnectionError).
        assert str(reader.read(refs()).error).startswith("kubernetes: API unreachable (")
    finally:
        reader.close()


def test_not_ready_carries_the_kubelets_reason_and_transition_time() -> None:
    went = datetime(2026, 11, 30, 11, 48, tzinfo=UTC)
    with FakeKube(clock=lambda: went) as kube:
        kube.add_node("search-t4-1", gpus=4)
        kube.add_node("search-t4-2", gpus=4)
        kube.set_node_ready("search-t4-1", False)
        nodes = read(kube).nodes
    down = nodes["search-t4-1"]
    assert (down.state, down.ready, down.unusable, down.unusable_since) == (
        "down", False, "NotReady: KubeletNotReady", went)
    assert (nodes["search-t4-2"].unusable, nodes["search-t4-2"].unusable_since) == (None, None)


@pytest.mark.parametrize(("cond", "said", "since"), [
    (None, "NotReady: no Ready condition posted", None),
    ({"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
      "lastTransitionTime": "2026-11-30T11:48:00"}, "Ready=Unknown: NodeStatusUnknown",
     datetime(2026, 11, 30, 11, 48, tzinfo=UTC)),
    ({"type": "Ready", "status": "False", "lastTransitionTime": "yesterday"}, "NotReady", None),
    ({"type": "Ready", "status": "False", "reason": "r" * 500, "lastTransitionTime": 7},
     "NotReady: " + "r" * 100, None),
])
def test_odd_ready_conditions_are_read_as_data(cond: dict[str, Any] | None, said: str,
                                               since: datetime | None) -> None:
    from autoscaler.signals.kubernetes import node_record
    rec = node_record({"metadata": {"name": "n"}, "status": {"conditions": [cond] if cond else []}})
    assert rec is not None and (rec.ready, rec.unready, rec.unready_since) == (False, said, since)


def test_a_placement_group_lists_every_pool_whose_nodes_could_run_the_pod(kube: FakeKube) -> None:
    west = {**pool("west", ["p3.2xlarge"]), "region": "us-west-2"}
    group = {"vision": make_policy("vision", pools=[pool("east", ["p3.2xlarge"]), west,
                                                   pool("t4", ["g4dn.xlarge"])]).model_copy(
        update={"placement_groups": {"any": ["east", "west", "t4"]}})}
    kube.add_pod("any", "vision", gpus=1)
    kube.add_pod("pinned", "vision", gpus=1, node_selector={"topology.kubernetes.io/region": "us-west-2"})
    kube.add_pod("v100", "vision", gpus=1, node_selector={"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"})
    reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="3s"))
    try:
        reading = reader.read(pools_in_priority_order(group, default_catalog(), "kubernetes"))
    finally:
        reader.close()
    jobs = {j.id: j for v in reading.pending.values() for j in v}
    assert [o.pool for o in jobs["vision/any"].options] == ["vision/east", "vision/west", "vision/t4"]
    assert jobs["vision/pinned"].options == []  # its region's pool is the only one
    assert [o.pool for o in jobs["vision/v100"].options] == ["vision/east", "vision/west"]
    assert "vision/pinned" in [j.id for j in reading.pending["vision/west"]]


def test_a_running_pod_is_told_the_pools_of_its_group_it_could_run_in(kube: FakeKube) -> None:
    """RunningJob.pools, by the fit a pending pod's options get: a region nodeSelector keeps
    a pod running in us-east-1 to that region's pools; a pool in no group narrows nothing."""
    west = {**pool("west", ["p3.2xlarge"]), "region": "us-west-2"}
    group = {"vision": make_policy("vision", pools=[pool("east", ["p3.2xlarge"]), west,
                                                   pool("t4", ["g4dn.xlarge"]), pool("solo", ["p3.2xlarge"])]
                                   ).model_copy(update={"placement_groups": {"any": ["east", "west", "t4"]}})}
    labels = {"gpu-autoscaler/team": "vision", "gpu-autoscaler/pool": "east"}
    kube.add_node("vision-east-1", gpus=4, labels=labels)
    kube.add_node("vision-solo-1", gpus=4, labels={**labels, "gpu-autoscaler/pool": "solo"})
    kube.add_node("stray-1", gpus=4)  # no pool's labels
    kube.add_pod("any", "vision", node="vision-east-1", gpus=1)
    kube.add_pod("pinned", "vision", node="vision-east-1", gpus=1,
                 node_selector={"topology.kubernetes.io/region": "us-east-1"})
    kube.add_pod("v100", "vision", node="vision-east-1", gpus=1,
                 node_selector={"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"})
    kube.add_pod("alone", "vision", node="vision-solo-1", gpus=1,
                 node_selector={"topology.kubernetes.io/region": "us-east-1"})
    kube.add_pod("stray", "vision", node="stray-1", gpus=1)
    reader = KubernetesReader(KubernetesConfig(host=kube.url, timeout="3s"))
    try:
        reading = reader.read(pools_in_priority_order(group, default_catalog(), "kubernetes"))
    finally:
        reader.close()
    pools = {j.id: j.pools for n in reading.nodes.values() for j in n.jobs}
    assert pools == {
        "vision/any": ["vision/east", "vision/west", "vision/t4"],
        "vision/pinned": ["vision/east", "vision/t4"],  # not west: another region
        "vision/v100": ["vision/east", "vision/west"],
        "vision/alone": None,  # its pool is in no group
        "vision/stray": None,  # its node is no pool's
    }


def test_a_running_pod_whose_spec_cannot_be_read_stays_where_it_runs() -> None:
    from autoscaler.signals.kube_demand import Demand, pod_record
    group = {"vision": make_policy("vision", pools=[pool("east", ["p3.2xlarge"]), pool("west", ["p3.2xlarge"])]
                                   ).model_copy(update={"placement_groups": {"any": ["east", "west"]}})}
    refs = pools_in_priority_order(group, default_catalog(), "kubernetes")
    demand = Demand(KubernetesConfig(host="http://unused"), default_catalog(), refs, {}, {})
    spec: dict[str, Any] = {"nodeName": "vision-east-1", "nodeSelector": ["not", "a", "map"],
                            "containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
    odd = {"metadata": {"name": "p", "namespace": "vision"}, "spec": spec}
    rec = pod_record(odd)
    assert rec is not None and rec.needs is None and rec.gpus == {"nvidia.com/gpu": 1.0}
    assert demand.running_pools(rec, refs[0], 1.0) == ["vision/east"]
    fine = pod_record({**odd, "spec": {**spec, "nodeSelector": {"topology.kubernetes.io/region": "us-east-1"}}})
    assert fine is not None and demand.running_pools(fine, refs[0], 1.0) == ["vision/east", "vision/west"]
