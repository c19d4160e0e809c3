"""Kubernetes demand through the official client against the project's fake API server."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.sandbox.fake_kube import FakeKube
from autoscaler.signals.config import KubernetesConfig
from autoscaler.signals.kubernetes import KubernetesReader, gpu_model_of, quantity
from autoscaler.signals.readings import PoolRef, SchedulerReading, pools_in_priority_order
from tests.builders import make_policy

CREATED = datetime(2026, 11, 30, 11, 0, tzinfo=UTC)


def pool(name: str, types: list[str]) -> dict[str, Any]:
    return {"name": name, "cloud": "aws", "region": "us-east-1", "instance_types": types,
            "max_nodes": 4, "cluster": {"kind": "kubernetes"}}


POLICIES = {
    "search": make_policy("search", pools=[pool("t4", ["g4dn.xlarge"]),
                                           pool("a10", ["g5.xlarge"])]),
    "vision": make_policy("vision", priority="high", pools=[pool("v100", ["p3.2xlarge"])]),
}


def refs() -> list[PoolRef]:
    return pools_in_priority_order(POLICIES, default_catalog(), "kubernetes")


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        yield k


def read(kube: FakeKube, **cfg: Any) -> SchedulerReading:
    config = KubernetesConfig(host=kube.url, timeout="3s", **cfg)
    return KubernetesReader(config).read(refs())


def test_pending_unschedulable_gpu_pods_by_pool(kube: FakeKube) -> None:
    # Explicit team + pool selector.
    kube.add_pod("a", "anything", gpus=2, created_at=CREATED,
                 node_selector={"gpu-autoscaler/team": "search", "gpu-autoscaler/pool": "a10"})
    # Team through required node affinity; GPU model from GPU feature discovery's label.
    kube.add_pod("b", "anything", gpus=1, affinity={"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{
            "matchExpressions": [
                {"key": "gpu-autoscaler/team", "operator": "In", "values": ["search"]},
                {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-A10G"]},
            ]}]}}})
    kube.add_pod("c", "vision", gpus=4)  # namespace == team: the team's first pool
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
        "search/a10": [("anything/a", 2, None), ("anything/b", 1, "A10G")],
    }
    assert all(j.reason == "Unschedulable" for v in reading.pending.values() for j in v)
    assert reading.pending["search/a10"][0].submitted_at == CREATED
    assert sorted(j.id for j in reading.unattributed) == ["nobody/e", "search/h"]


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
    kube.add_pod("serve-1", "search", node="search-t4-2", gpus=2)
    kube.add_pod("cpu", "search", node="search-t4-4", gpus=0)
    kube.add_pod("done", "search", node="search-t4-4", gpus=1, phase="Succeeded")
    nodes = read(kube).nodes
    one = nodes["search-t4-1"]
    assert (one.state, one.gpus_total, one.gpus_allocated, one.ready, one.cordoned) == (
        "mixed", 4, 1, True, False)
    assert [(j.id, j.gpus, j.started_at) for j in one.jobs] == [("search/serve-0", 1, CREATED)]
    assert (nodes["search-t4-2"].state, nodes["search-t4-2"].cordoned) == ("draining", True)
    assert (nodes["search-t4-3"].state, nodes["search-t4-3"].ready) == ("down", False)
    assert (nodes["search-t4-4"].state, nodes["search-t4-4"].jobs) == ("idle", [])
    kube.add_pod("serve-2", "search", node="search-t4-4", gpus=1)
    kube.core_v1().patch_node("search-t4-2", {"spec": {"unschedulable": None}})
    kube.remove_node("search-t4-3")
    after = read(kube).nodes
    assert after["search-t4-4"].state == "allocated"
    assert after["search-t4-2"].state == "mixed" and not after["search-t4-2"].cordoned
    assert "search-t4-3" not in after


def test_two_calls_per_tick(kube: FakeKube) -> None:
    for i in range(20):
        kube.add_node(f"n{i}")
        kube.add_pod(f"p{i}", "search", node=f"n{i}")
    read(kube)
    assert kube.requests == [("GET", "/api/v1/nodes"), ("GET", "/api/v1/pods")]


def test_api_down_is_missing_fast() -> None:
    with FakeKube() as kube:
        url = kube.url
    reading = KubernetesReader(KubernetesConfig(host=url, timeout="2s")).read(refs())
    assert reading.error == "kubernetes: API unreachable (NewConnectionError)"


def test_api_that_never_answers_times_out() -> None:
    import socket
    import time

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        host = f"http://127.0.0.1:{server.getsockname()[1]}"
        started = time.monotonic()
        reading = KubernetesReader(KubernetesConfig(host=host, timeout="1s")).read(refs())
    assert time.monotonic() - started < 3
    assert reading.error == "kubernetes: API timed out after 1s"


def test_api_error_and_token(kube: FakeKube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBE_TOKEN", "tok")
    reading = KubernetesReader(KubernetesConfig(host=kube.url + "/nope",
                                                token_env="KUBE_TOKEN")).read(refs())
    assert reading.error == "kubernetes: API answered 404 Not Found"
    missing = KubernetesReader(KubernetesConfig(host=kube.url, token_env="UNSET_TOKEN_VAR"))
    assert missing.read(refs()).error == (
        "kubernetes: kubernetes token: environment variable UNSET_TOKEN_VAR is not set")


@pytest.mark.parametrize(("labels", "model"), [
    ({"gpu-autoscaler/gpu-model": "V100"}, "V100"),
    ({"nvidia.com/gpu.product": "Tesla-T4"}, "T4"),
    ({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}, "A100"),
    ({"nvidia.com/gpu.product": "Tesla-V100-SXM2-16GB"}, "V100"),
    ({}, None),
])
def test_gpu_model_labels(labels: dict[str, str], model: str | None) -> None:
    assert gpu_model_of(labels) == model


def test_quantities() -> None:
    assert (quantity("2"), quantity("500m"), quantity(None), quantity("x")) == (2, 0.5, 0, 0)
