"""deploy/kubernetes/rbac.yaml grants what the Kubernetes code calls, and nothing more.

The permissions the code needs are found statically (the client methods it names, their
HTTP method and path from the client's generated code) and checked against the requests
the project's fake API server records while the reader, the drainer and the request links
run through their calls; the ClusterRole must grant exactly that set.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client
from pydantic import BaseModel

from autoscaler.actuators.drain.base import Work
from autoscaler.actuators.drain.kubernetes import KubernetesOps
from autoscaler.catalog import default_catalog
from autoscaler.model.request_spec import Link
from autoscaler.sandbox.fakes.kube import FakeKube
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.schedulers.kubernetes.client import KubernetesConfig, api_client
from autoscaler.service.doctor.schedulers import drainer_rights
from autoscaler.signals.kubernetes import KubernetesReader
from autoscaler.signals.readings import pools_in_priority_order
from autoscaler.signals.request_links import KubeLinks
from tests.builders import make_policy
from tests.deploy.kube_permissions import MANIFEST, Permission, granted, needed_by_code, permissions

KUBECTL = shutil.which("kubectl")
MODELS: dict[str, type[BaseModel]] = {"Namespace": client.V1Namespace, "ServiceAccount": client.V1ServiceAccount,
          "ClusterRole": client.V1ClusterRole, "ClusterRoleBinding": client.V1ClusterRoleBinding}


def documents() -> dict[str, dict[str, Any]]:
    docs = list(yaml.safe_load_all(MANIFEST.read_text()))
    by_kind = {doc["kind"]: doc for doc in docs}
    assert len(by_kind) == len(docs), "one object of each kind"
    return by_kind


def test_the_manifest_is_the_four_objects_and_each_is_valid() -> None:
    docs = documents()
    assert set(docs) == set(MODELS)
    for kind, doc in docs.items():
        # The client's models forbid unknown fields and check types: a misspelt key fails.
        MODELS[kind].model_validate(doc)
    account, binding = docs["ServiceAccount"]["metadata"], docs["ClusterRoleBinding"]
    assert account["namespace"] == docs["Namespace"]["metadata"]["name"]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                  "name": docs["ClusterRole"]["metadata"]["name"]}
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": account["name"],
                                    "namespace": account["namespace"]}]


def test_the_role_names_every_group_resource_and_verb() -> None:
    """No wildcard, no resourceNames, no non-resource URLs: each grant is one the test can
    hold against the code."""
    for rule in documents()["ClusterRole"]["rules"]:
        assert set(rule) == {"apiGroups", "resources", "verbs"}, rule
        assert "*" not in rule["apiGroups"] + rule["resources"] + rule["verbs"], rule


def _uses(needed: dict[Permission, list[str]], perms: set[Permission]) -> str:
    return "; ".join(f"{p}: {', '.join(needed.get(p, ['-']))}" for p in sorted(perms))


def test_every_call_the_code_makes_is_granted_and_every_grant_is_used() -> None:
    needed, grants = needed_by_code(), granted()
    missing, unused = set(needed) - grants, grants - set(needed)
    assert not missing, f"rbac.yaml does not grant what the code calls: {_uses(needed, missing)}"
    assert not unused, f"rbac.yaml grants what no code calls: {sorted(unused)}"


@pytest.mark.parametrize(("method", "path", "watch", "expected"), [
    ("GET", "/api/v1/nodes", False, {("", "nodes", "list")}),
    ("GET", "/api/v1/nodes", True, {("", "nodes", "watch")}),
    ("GET", "/api/v1/nodes/gpu-1", False, {("", "nodes", "get")}),
    ("PATCH", "/api/v1/nodes/{name}", False, {("", "nodes", "patch")}),
    ("GET", "/api/v1/namespaces/{namespace}/pods", False, {("", "pods", "list")}),
    ("DELETE", "/api/v1/namespaces/ci/pods", False, {("", "pods", "deletecollection")}),
    ("POST", "/api/v1/namespaces/ci/pods/p/eviction", False, {("", "pods/eviction", "create")}),
    ("GET", "/api/v1/namespaces/ci/pods/p/exec?command=kill", False,
     {("", "pods/exec", "get"), ("", "pods/exec", "create")}),
    ("GET", "/api/v1/namespaces/ci", False, {("", "namespaces", "get")}),
    ("GET", "/apis/batch/v1/namespaces/ci/jobs/train", False, {("batch", "jobs", "get")}),
])
def test_a_request_is_authorized_as_the_api_server_does(
        method: str, path: str, watch: bool, expected: set[Permission]) -> None:
    assert permissions(method, path, watch) == expected


# -- the same, from the requests the code sends ---------------------------------------------
@pytest.fixture
def kube() -> Iterator[FakeKube]:
    with FakeKube(bookmark_s=0.2) as k:
        k.add_node("gpu-1", gpus=4)
        k.add_pod("train-0", "vision", node="gpu-1", gpus=2, labels={"app": "train"})
        k.add_pod("waiting", "vision", gpus=1, unschedulable=True)
        k.add_pv("data", "us-east-1a")
        k.add_pvc("data", "vision", "data")
        k.add_quota("gpus", "vision", {"requests.nvidia.com/gpu": "8"})
        k.add_job("train-8", "ci")
        yield k


def _read(kube: FakeKube, cfg: KubernetesConfig) -> None:
    """One tick of the reader, its watches open (a pool with its quota from ResourceQuotas:
    every cache)."""
    pool = {"name": "v100", "cloud": "aws", "region": "us-east-1", "instance_types": ["p3.2xlarge"],
            "max_nodes": 4, "cluster": {"kind": "kubernetes", "quota_from": "resourcequota"}}
    refs = pools_in_priority_order({"vision": make_policy("vision", pools=[pool])},
                                   default_catalog(), "kubernetes")
    reader = KubernetesReader(cfg)
    try:
        reading = reader.read(refs)
        assert reading.error is None and [j.id for j in reading.pending["vision/v100"]] == [
            "vision/waiting"]
        wait_until(lambda: sum(m == "WATCH" for m, _ in kube.requests) >= 5, 5,
                   "the reader's five watches", interval=0.02)
    finally:
        reader.close()


def _drain(kube: FakeKube, cfg: KubernetesConfig) -> None:
    """Every step of a drain, then the node's end."""
    ops = KubernetesOps(config=cfg)
    assert ops.cordon("gpu-1", "idle")
    work = ops.workload("gpu-1")
    assert [w.id for w in work] == ["vision/train-0"]
    ops.checkpoint("gpu-1", work, "USR1")  # reads the pod, execs kill, evicts
    assert kube.execs and kube.evicted == ["vision/train-0"]
    ops.evacuate("gpu-1", [Work("vision/train-0")])  # already evicted: the DELETE is a 404
    ops.uncordon("gpu-1")
    assert ops.readiness("gpu-1").ready
    ops.forget("gpu-1")
    assert "gpu-1" not in kube.nodes


def test_the_requests_the_code_sends_are_what_the_analysis_found(kube: FakeKube) -> None:
    cfg = KubernetesConfig(host=kube.url, timeout="3s")
    _read(kube, cfg)
    _drain(kube, cfg)
    links = KubeLinks.connect(cfg)
    assert not links.ended(Link(kubernetes_pod="vision/waiting"))
    assert not links.ended(Link(kubernetes_job="ci/train-8"))
    assert not links.ended(Link(kubernetes_selector="app=none"))
    assert drainer_rights(api_client(cfg), 3) == ([], [])  # the fake serves no reviews (404)
    sent: set[Permission] = set()
    for method, path in kube.requests:
        sent |= permissions("GET" if method == "WATCH" else method, path, watch=method == "WATCH")
    needed = needed_by_code()
    assert sent == set(needed), (f"sent, not found by the analysis: {sorted(sent - set(needed))}; "
                                 f"found, not sent: {_uses(needed, set(needed) - sent)}")


@pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")
def test_kubectl_accepts_the_manifest(kube: FakeKube) -> None:
    """``kubectl apply --dry-run=client`` maps every kind through the API server's discovery
    (the fake serves no OpenAPI schema: the models above check the fields)."""
    got = subprocess.run([str(KUBECTL), "--server", kube.url, "apply", "--dry-run=client",
                          "--validate=false", "-f", str(MANIFEST)],
                         capture_output=True, text=True, timeout=30, check=False)
    assert got.returncode == 0, got.stderr
    assert got.stdout.split("\n")[:-1] == [
        "namespace/gpu-autoscaler created (dry run)",
        "serviceaccount/gpu-autoscaler created (dry run)",
        "clusterrole.rbac.authorization.k8s.io/gpu-autoscaler created (dry run)",
        "clusterrolebinding.rbac.authorization.k8s.io/gpu-autoscaler created (dry run)"]
