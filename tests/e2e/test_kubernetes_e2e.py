"""End to end on Kubernetes: the service loop on the sandbox, every component real but the
API server.

The running service as ``build_service`` wires it (its scheduler, worker pools, HTTP API),
moto + the terraform binary and AWS provider, real Prometheus scraping the synthetic DCGM
exporter, one booted test host per instance (the node image with systemd, in its network
namespace) bootstrapped over SSH by the real playbook; the cluster is the project's fake
API server (no kube-apiserver can be installed here) with its simple-bind scheduler, and
the ``cluster_join`` role's Kubernetes path runs ``kubeadm join`` in the node, where the
sandbox's fake kubeadm registers the Node over the shared controller address.

1. a pending pod asking ``nvidia.com/gpu: 2`` that tolerates the pool's taint and selects
   its label leads to a launch; the node joins with the pool's labels, taint and 4 GPUs,
   becomes READY and the pod is bound to it; a pod asking one ``nvidia.com/mig-3g.20gb``
   slice gets a node of the MIG pool, which joins advertising 2 slices per GPU (the layout
   ``gpu_sharing`` recorded), and is bound there;
2. a pod that does not tolerate the taint is reported unserved in ``/status`` and never
   bought for (one node per pod only);
3. when the pods end, the idle nodes are cordoned and drained (the CPU pod left on the
   first is evicted, after one PDB refusal), destroyed in moto, and their Node objects
   deleted.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.stack.kube_cluster import TOKEN_ENV
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions, privileged
from autoscaler.service.app import Service
from autoscaler.service.config.load import load_config
from autoscaler.service.wiring import build_service
from tests.actuators.terraform_fixtures import needs_terraform

pytestmark = [
    pytest.mark.slow, needs_terraform, pytest.mark.timeout(1800),
    pytest.mark.skipif(not privileged(), reason="needs root and network namespaces"),
]
S = NodeState
POLICY = """\
apiVersion: gpu-autoscaler/v1
team: vision
priority: high
pools:
  - name: train
    cloud: aws
    region: us-east-1
    instance_types: [p3.8xlarge]
    capacity: {on_demand_base: 2, spot_percent: 0}
    min_nodes: 0
    max_nodes: 2
    scale_up: {pending_jobs: true, cooldown: 1s}
    scale_down: {gpu_utilization_below: 10, idle_for: 5s, cooldown: 1s, drain_timeout: 5m,
                 max_draining_percent: 100}
    bootstrap: {timeout: 8m}
    cluster:
      kind: kubernetes
      labels: {tier: train}
      taints: ["dedicated=ml:NoSchedule"]
  - name: mig
    cloud: aws
    region: us-east-1
    instance_types: [p4d.24xlarge]
    capacity: {on_demand_base: 1, spot_percent: 0}
    min_nodes: 0
    max_nodes: 1
    scale_up: {pending_jobs: true, cooldown: 1s}
    scale_down: {gpu_utilization_below: 10, idle_for: 5s, cooldown: 1s, drain_timeout: 5m,
                 max_draining_percent: 100}
    bootstrap: {timeout: 8m, sharing: mig, mig_profiles: [3g.20gb, 3g.20gb]}
    cluster: {kind: kubernetes}
"""
TOLERATE = [{"key": "dedicated", "operator": "Equal", "value": "ml", "effect": "NoSchedule"}]
NODE, MIG_NODE = "vision-train-1", "vision-mig-1"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[tuple[SandboxStack, Service]]:
    with running_service(tmp_path, POLICY) as running:
        yield running


@contextmanager
def running_service(tmp_path: Path, policy: str) -> Iterator[tuple[SandboxStack, Service]]:
    """The sandbox stack on Kubernetes and the service as ``build_service`` wires it, run in a
    thread, with team vision's ``policy``; both stopped on the way out."""
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "vision.yaml").write_text(policy)
    stack = SandboxStack(tmp_path / "sandbox", StackOptions(policies_dir=tmp_path / "policies",
                                                            tick_interval="2s"))
    saved: dict[str, str | None] = {}
    stop = threading.Event()
    runner: threading.Thread | None = None
    try:
        stack.start()
        saved = {k: os.environ.get(k) for k in stack.env()}
        os.environ.update(stack.env())
        service = build_service(load_config(stack.config_file))
        runner = threading.Thread(target=service.run, args=(stop,), name="service", daemon=True)
        runner.start()
        wait_until(lambda: service.api is not None, 30, "the API")
        yield stack, service
    finally:
        stop.set()
        if runner is not None:
            runner.join(timeout=120)
        stack.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def states(service: Service) -> dict[str, NodeState]:
    return {n.name: n.state for n in service.store.nodes(include_terminated=True)}


def status(service: Service) -> dict[str, Any]:
    with urllib.request.urlopen(f"{service.api.url}/status", timeout=10) as resp:
        return json.loads(resp.read())


def service_until(service: Service, kube: Any, done: Any, timeout: float, what: str) -> None:
    """``wait_until`` every second; a timeout fails with the fleet, the cluster's nodes and
    the service's status."""
    try:
        wait_until(done, timeout, what, interval=1.0)
    except Exception as exc:
        raise AssertionError(f"{exc}; fleet {states(service)}; kube nodes "
                             f"{sorted(kube.nodes)}; status {status(service)}") from None


def test_pending_pod_launches_a_node_that_joins_runs_it_then_drains_and_goes(
        world: tuple[SandboxStack, Service], capsys: pytest.CaptureFixture[Any]) -> None:
    stack, service = world
    kube = stack.kube.kube
    started = time.monotonic()
    kube.add_pod("train-0", "vision", gpus=2, tolerations=TOLERATE, node_selector={"tier": "train"})
    kube.add_pod("slice-0", "vision", resources={"nvidia.com/mig-3g.20gb": 1})
    kube.add_pod("loose", "vision", gpus=1)  # no toleration: no pool can run it

    # 1. Launch, bootstrap over SSH, kubeadm join, READY, bound.
    def bound(pod: str = "vision/train-0") -> str | None:
        return kube.pods[pod]["spec"].get("nodeName")

    def until(done: Any, timeout: float, what: str) -> None:
        service_until(service, kube, done, timeout, what)

    until(lambda: bound() is not None, 900, "the GPU pod bound")  # 344 s at load 34
    assert bound() == NODE  # bound once the Node registers: the join ends the bootstrap
    until(lambda: states(service)[NODE] is S.READY, 120, f"{NODE} READY")
    up_s = time.monotonic() - started
    node = kube.core_v1().read_node(NODE)
    labels = node.metadata.labels
    assert (labels["gpu-autoscaler/team"], labels["gpu-autoscaler/pool"], labels["tier"]) == (
        "vision", "train", "train")
    assert labels["node.kubernetes.io/instance-type"] == "p3.8xlarge"
    assert [(t.key, t.value, t.effect) for t in node.spec.taints] == [("dedicated", "ml", "NoSchedule")]
    assert node.status.allocatable["nvidia.com/gpu"] == "4"
    stored = service.store.get(NODE)
    assert stored is not None and stored.address and stored.address.startswith("169.254.77.")
    until(lambda: bound("vision/slice-0") is not None, 300, "the MIG pod bound")
    assert bound("vision/slice-0") == MIG_NODE
    mig = kube.core_v1().read_node(MIG_NODE).status.allocatable
    assert {k: v for k, v in mig.items() if k.startswith("nvidia.com/")} == {
        "nvidia.com/mig-3g.20gb": "16"}
    until(lambda: states(service)[MIG_NODE] is S.READY, 120, f"{MIG_NODE} READY")

    # 2. The pod that tolerates nothing is reported, not bought for.
    wait_until(lambda: "vision/loose" in json.dumps(status(service)), 30, "loose reported unserved")
    assert "dedicated=ml:NoSchedule not tolerated" in json.dumps(status(service))
    assert kube.pods["vision/loose"]["status"]["phase"] == "Pending"
    assert stack.running_instances() == 2 and sorted(states(service)) == [MIG_NODE, NODE]

    # 3. A CPU pod beside it, its first eviction refused; the GPU pod ends: drained, gone.
    kube.add_pod("logs", "vision", node=NODE, gpus=0)
    kube.refuse_evictions("vision/logs", times=1)
    ticks = service.loop.state.ticks
    wait_until(lambda: service.loop.state.ticks >= ticks + 3, 60, "ticks while the pod runs")
    assert states(service)[NODE] is S.READY, "drained while its GPU pod ran"
    kube.finish_pod("vision/train-0")
    kube.finish_pod("vision/slice-0")
    until(lambda: states(service)[NODE] is S.TERMINATED, 420, f"{NODE} destroyed")
    until(lambda: states(service)[MIG_NODE] is S.TERMINATED, 120, f"{MIG_NODE} destroyed")
    assert "vision/logs" in kube.evicted and kube.refusals.get("vision/logs") == 0
    assert ("PATCH", f"/api/v1/nodes/{NODE}") in kube.requests  # the cordon
    assert stack.running_instances() == 0
    wait_until(lambda: not {NODE, MIG_NODE} & set(kube.nodes), 60, "the Node objects deleted")
    for name in (NODE, MIG_NODE):
        steps = [t.to_state for t in service.store.transitions() if t.node == name]
        assert steps == ["REQUESTED", "PROVISIONING", "BOOTSTRAPPING", "READY", "DRAINING",
                         "DRAINED", "TERMINATING", "TERMINATED"], (name, steps)
    # The bootstrap token is a secret: in DIR/env for the service, never in service.yaml or
    # anything the Ansible runs kept.
    cfg = load_config(stack.config_file)
    assert cfg.signals.scheduler == ["kubernetes"] and cfg.signals.kubernetes is not None
    assert cfg.signals.kubernetes.host == kube.url
    assert cfg.ansible.secret_env["cluster_join_k8s_token"] == TOKEN_ENV
    token = stack.kube.token
    assert token in (stack.dir / "env").read_text() and token not in stack.config_file.read_text()
    kept = [f for f in (stack.dir / "ansible-runs").rglob("*") if f.is_file()]
    assert kept and not [f for f in kept if token in f.read_text(errors="replace")]
    with capsys.disabled():
        print(f"\nkubernetes e2e: pod bound after {up_s:.0f}s, whole life "
              f"{time.monotonic() - started:.0f}s")
