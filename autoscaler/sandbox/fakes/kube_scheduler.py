"""The fake API server's scheduler: a simple bind, enough for the sandbox's service loop.

kube-scheduler does not run here, so ``FakeKube.schedule()`` places pending pods the way
its filter plugins would for what the autoscaler cares about, and nothing more: a node is
a candidate when it is Ready, not cordoned, its NoSchedule/NoExecute taints are tolerated,
the pod's nodeSelector and required node affinity match its labels, and its allocatable
GPU resources (``nvidia.com/gpu``, MIG slices, shared GPUs) minus what the pods bound to it
request cover the pod's requests. The first candidate by name wins (no scoring); higher
``spec.priority`` and then older pods are placed first. No preemption. A pod left without
a node stays Pending / Unschedulable, which is what the demand reader looks for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autoscaler.schedulers.kubernetes.objects import (
    gpu_resources,
    node_ready,
    node_taints,
    pod_gpu_requests,
    pod_needs,
)

if TYPE_CHECKING:
    from autoscaler.sandbox.fakes.kube import FakeKube

Obj = dict[str, Any]
DONE = ("Succeeded", "Failed")


def _free(node: Obj, pods: list[Obj]) -> dict[str, float]:
    free = gpu_resources((node.get("status") or {}).get("allocatable"))
    for pod in pods:
        for name, amount in pod_gpu_requests(pod.get("spec") or {}).items():
            free[name] = free.get(name, 0.0) - amount
    return free


def _fits(pod: Obj, node: Obj, free: dict[str, float]) -> bool:
    spec = pod.get("spec") or {}
    gpus = pod_gpu_requests(spec)
    if not node_ready(node) or (node.get("spec") or {}).get("unschedulable"):
        return False
    if any(free.get(name, 0.0) < amount for name, amount in gpus.items()):
        return False
    needs = pod_needs(spec, gpus, None)
    for key, value, effect in node_taints(node):
        if effect in ("NoSchedule", "NoExecute") and not any(
                t.tolerates(key, value, effect) for t in needs.tolerations):
            return False
    labels = (node.get("metadata") or {}).get("labels") or {}
    if not all(r.matches(labels) for r in needs.node_selector):
        return False
    return not needs.terms or any(all(r.matches(labels) for r in term) for term in needs.terms)


def bind_pending(kube: FakeKube) -> list[tuple[str, str]]:
    """Bind what fits now; the caller holds the store lock."""
    on_node: dict[str, list[Obj]] = {}
    pending: list[tuple[str, Obj]] = []
    for key, pod in kube.pods.items():
        node_name = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node_name and phase not in DONE:
            on_node.setdefault(node_name, []).append(pod)
        elif not node_name and phase == "Pending":
            pending.append((key, pod))
    pending.sort(key=lambda kp: (-int((kp[1].get("spec") or {}).get("priority") or 0),
                                 kp[1]["metadata"].get("creationTimestamp") or "", kp[0]))
    bound = []
    for key, pod in pending:
        for name in sorted(kube.nodes):
            node = kube.nodes[name]
            if _fits(pod, node, _free(node, on_node.get(name, []))):
                kube.bind_pod(key, name)
                on_node.setdefault(name, []).append(kube.pods[key])
                bound.append((key, name))
                break
    return bound
