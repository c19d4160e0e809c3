"""End to end: a warm pool on Kubernetes, the service as ``build_service`` wires it.

The Kubernetes e2e's world (moto + the terraform binary, real Prometheus, booted test hosts
bootstrapped over SSH by the real playbook, the project's API server with the sandbox's fake
kubeadm) with a warm pool of 1 (the Slurm side of warm pools: test_warm_pool_e2e.py):

1. the pool fills: a node launched, all but the start part run on it (``--skip-tags start``),
   then stopped: WARM, its instance ``stopped`` in moto, no Node object in the cluster, the
   kubeadm join configuration not written;
2. a pending pod starts it (the same instance), the start part alone runs (``--tags
   start``: the health check, the join configuration, ``kubeadm join``), the Node registers
   with the pool's labels and GPUs, the pod is bound to it and it is READY.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.bake_rig import IMAGE_ONLY, runs_by_part
from tests.e2e.test_kubernetes_e2e import (  # noqa: F401
    S,
    pytestmark,
    running_service,
    service_until,
    states,
)

POLICY = """\
apiVersion: gpu-autoscaler/v1
team: vision
priority: high
pools:
  - name: warm
    cloud: aws
    region: us-east-1
    instance_types: [g4dn.xlarge]
    capacity: {on_demand_base: 1, spot_percent: 0}
    min_nodes: 0
    max_nodes: 1
    warm_pool: {size: 1, max: 1}
    scale_up: {pending_jobs: true, cooldown: 1s}
    scale_down: {gpu_utilization_below: 10, idle_for: 1h, cooldown: 1s, max_draining_percent: 100}
    bootstrap: {timeout: 8m}
    cluster: {kind: kubernetes, labels: {tier: warm}}
"""
# The join's tasks: a warm node runs them only when it starts.
JOIN = {"Write the kubeadm join configuration", "Join the Kubernetes cluster",
        "Query every GPU with nvidia-smi"}
# Node-time tasks outside the start part: run once, before the node is stopped.
PREPARED = {"Create the Kubernetes configuration directory"}


def test_a_pending_pod_starts_the_warm_node_which_joins_with_the_start_part_only(
        tmp_path: Path, capsys: pytest.CaptureFixture[Any]) -> None:
    with running_service(tmp_path, POLICY) as (stack, service):
        kube = stack.kube.kube

        def until(done: Any, timeout: float, what: str) -> None:
            service_until(service, kube, done, timeout, what)

        # 1. The warm pool fills; its node never joins.
        until(lambda: S.WARM in states(service).values(), 600, "a WARM node")
        [name] = [n for n, st in states(service).items() if st is S.WARM]
        warm = service.store.get(name)
        assert warm is not None and warm.launched_for == "warm-pool"
        [res] = stack.ec2().describe_instances(InstanceIds=[warm.instance_id or ""])["Reservations"]
        assert res["Instances"][0]["State"]["Name"] == "stopped"
        assert name not in kube.nodes, "a warm node never joins before it is started"
        entry = runs_by_part(stack)[name]
        assert set(entry) == {"warm"}, entry.keys()
        assert entry["warm"] >= PREPARED and not entry["warm"] & JOIN, entry["warm"] & JOIN

        # 2. A pending pod starts it: the start part joins it, the pod is bound to it.
        kube.add_pod("infer-0", "vision", gpus=1, node_selector={"tier": "warm"})
        started = time.monotonic()
        until(lambda: kube.pods["vision/infer-0"]["spec"].get("nodeName") is not None, 300,
              "the pod bound")
        bound_s = time.monotonic() - started
        assert kube.pods["vision/infer-0"]["spec"]["nodeName"] == name
        until(lambda: states(service)[name] is S.READY, 120, f"{name} READY")
        node = service.store.get(name)
        assert node is not None and node.instance_id == warm.instance_id  # started, not launched
        steps = [t.to_state for t in service.store.transitions(name)]
        assert "STARTING" in steps and steps[-1] == "READY", steps
        labels = kube.core_v1().read_node(name).metadata.labels
        assert (labels["gpu-autoscaler/team"], labels["gpu-autoscaler/pool"], labels["tier"]) == (
            "vision", "warm", "warm")
        start = runs_by_part(stack)[name]["start"]
        assert start >= JOIN, JOIN - start
        assert not start & (IMAGE_ONLY | PREPARED), start & (IMAGE_ONLY | PREPARED)
        with capsys.disabled():
            print(f"\nwarm pool kubernetes e2e: pod bound {bound_s:.0f}s after it was added")
