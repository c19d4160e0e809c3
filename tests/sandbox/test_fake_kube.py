"""The fake Kubernetes API server, driven by the official client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from autoscaler.sandbox.fakes.kube import FakeKube


@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube() as k:
        k.add_node("gpu-1", gpus=4, labels={"pool": "a"})
        k.add_node("gpu-2", gpus=8, ready=False)
        k.add_pod("train-0", "vision", node="gpu-1", gpus=2, labels={"app": "train"})
        k.add_pod("train-1", "vision", node="gpu-1", gpus=1, labels={"app": "train"})
        k.add_pod("wait-0", "search", gpus=4)
        yield k


def evict(api: client.CoreV1Api, ns: str, name: str) -> None:
    body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=ns))
    api.create_namespaced_pod_eviction(name, ns, body)


def test_nodes_list_read_and_status(kube: FakeKube) -> None:
    api = kube.core_v1()
    nodes = {n.metadata.name: n for n in api.list_node().items}
    assert set(nodes) == {"gpu-1", "gpu-2"}
    assert nodes["gpu-2"].status.allocatable["nvidia.com/gpu"] == "8"
    ready = {n: [c.status for c in v.status.conditions if c.type == "Ready"] for n, v in nodes.items()}
    assert ready == {"gpu-1": ["True"], "gpu-2": ["False"]}
    assert [n.metadata.name for n in api.list_node(label_selector="pool=a").items] == ["gpu-1"]
    assert api.read_node("gpu-1").metadata.labels["kubernetes.io/hostname"] == "gpu-1"
    with pytest.raises(ApiException) as err:
        api.read_node("nope")
    assert err.value.status == 404


def test_pods_with_field_selectors(kube: FakeKube) -> None:
    api = kube.core_v1()
    on_node = api.list_pod_for_all_namespaces(field_selector="spec.nodeName=gpu-1").items
    assert sorted(p.metadata.name for p in on_node) == ["train-0", "train-1"]
    pending = api.list_pod_for_all_namespaces(field_selector="status.phase=Pending").items
    assert [p.metadata.name for p in pending] == ["wait-0"]
    cond = pending[0].status.conditions[0]
    assert (cond.type, cond.status, cond.reason) == ("PodScheduled", "False", "Unschedulable")
    assert pending[0].spec.containers[0].resources.requests["nvidia.com/gpu"] == "4"
    not_done = api.list_pod_for_all_namespaces(
        field_selector="status.phase!=Succeeded,status.phase!=Failed").items
    assert len(not_done) == 3
    assert len(api.list_namespaced_pod("vision").items) == 2
    assert api.read_namespaced_pod("wait-0", "search").status.phase == "Pending"


def test_cordon_and_label_patches(kube: FakeKube) -> None:
    api = kube.core_v1()
    api.patch_node("gpu-1", {"spec": {"unschedulable": True},
                             "metadata": {"labels": {"gpu-autoscaler/draining": "true"}}})
    assert kube.cordoned("gpu-1")
    node = api.read_node("gpu-1")
    assert node.spec.unschedulable is True
    assert node.metadata.labels["gpu-autoscaler/draining"] == "true"
    api.patch_node("gpu-1", {"spec": {"unschedulable": None},
                             "metadata": {"labels": {"gpu-autoscaler/draining": None}}})
    assert not kube.cordoned("gpu-1")
    assert "gpu-autoscaler/draining" not in api.read_node("gpu-1").metadata.labels


def test_eviction_refused_n_times_then_evicted(kube: FakeKube) -> None:
    api = kube.core_v1()
    kube.refuse_evictions("vision/train-0", times=2)
    for _ in range(2):
        with pytest.raises(ApiException) as err:
            evict(api, "vision", "train-0")
        assert err.value.status == 429
        assert '"reason": "TooManyRequests"' in err.value.body
    evict(api, "vision", "train-0")
    assert kube.evicted == ["vision/train-0"]
    with pytest.raises(ApiException) as gone:
        api.read_namespaced_pod("train-0", "vision")
    assert gone.value.status == 404


def test_pdb_keeps_min_available(kube: FakeKube) -> None:
    api = kube.core_v1()
    kube.add_pdb("train-pdb", "vision", {"app": "train"}, min_available=1)
    evict(api, "vision", "train-1")  # 2 running -> 1 left: allowed
    with pytest.raises(ApiException) as err:
        evict(api, "vision", "train-0")  # would leave 0
    assert err.value.status == 429 and "train-pdb" in err.value.body
    api.delete_namespaced_pod("train-0", "vision")  # a delete bypasses PDBs, as in Kubernetes
    assert list(kube.pods) == ["search/wait-0"]


def test_bind_pod_and_records_requests(kube: FakeKube) -> None:
    kube.bind_pod("search/wait-0", "gpu-1")
    api = kube.core_v1()
    pod = api.read_namespaced_pod("wait-0", "search")
    assert (pod.spec.node_name, pod.status.phase) == ("gpu-1", "Running")
    assert ("GET", "/api/v1/namespaces/search/pods/wait-0") in kube.requests


def test_a_joining_node_is_created_by_post_and_a_second_post_conflicts(kube: FakeKube) -> None:
    api = kube.core_v1()
    body = client.V1Node(
        metadata=client.V1ObjectMeta(name="gpu-3", labels={"gpu-autoscaler/pool": "a"}),
        spec=client.V1NodeSpec(taints=[client.V1Taint(key="dedicated", value="ml",
                                                      effect="NoSchedule")]),
        status=client.V1NodeStatus(allocatable={"nvidia.com/gpu": "2"},
                                   conditions=[client.V1NodeCondition(type="Ready", status="True")]))
    made = api.create_node(body)
    assert made.metadata.uid and made.metadata.creation_timestamp is not None
    node = api.read_node("gpu-3")
    assert node.status.allocatable == {"nvidia.com/gpu": "2"} and node.spec.taints[0].key == "dedicated"
    with pytest.raises(ApiException) as err:
        api.create_node(body)
    assert err.value.status == 409


def test_simple_bind_places_pods_where_they_fit(kube: FakeKube) -> None:
    kube.add_node("gpu-t", gpus=4, taints=["dedicated=ml:NoSchedule"])
    kube.add_node("gpu-z", gpus=2)
    kube.add_pod("big", "search", gpus=2)  # gpu-1 has 1 free, gpu-2 is not Ready
    kube.add_pod("tolerant", "search", gpus=3, tolerations=[
        {"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}])
    kube.add_pod("picky", "search", gpus=1, node_selector={"pool": "b"})
    # wait-0 (4 GPUs, no toleration): nowhere. big: the first node with 2 free, untainted.
    assert sorted(kube.schedule()) == [("search/big", "gpu-z"), ("search/tolerant", "gpu-t")]
    assert kube.pods["search/picky"]["status"]["phase"] == "Pending"
    assert kube.pods["search/wait-0"]["status"]["phase"] == "Pending"
    assert kube.schedule() == []  # gpu-z is full now
