"""Kubernetes objects as JSON dicts, selectors and patches for ``FakeKube``."""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

GPU = "nvidia.com/gpu"


def timestamp(at: datetime | None = None) -> str:
    return (at or datetime.now(UTC)).astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(name: str, labels: dict[str, str], at: datetime | None = None,
          namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "uid": str(uuid.uuid4()), "labels": dict(labels),
                            "creationTimestamp": timestamp(at)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def _taint(text: str) -> dict[str, str]:
    """``key=value:Effect`` or ``key:Effect`` as a Node spec taint."""
    head, _, effect = text.rpartition(":")
    key, _, value = head.partition("=")
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def node_object(name: str, gpu_resources: dict[str, str], labels: dict[str, str], ready: bool,
                unschedulable: bool, taints: list[str]) -> dict[str, Any]:
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110", **gpu_resources}
    spec: dict[str, Any] = {"unschedulable": unschedulable}
    if taints:
        spec["taints"] = [_taint(t) for t in taints]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": _meta(name, {"kubernetes.io/hostname": name, **labels}),
        "spec": spec,
        "status": {
            "capacity": dict(resources), "allocatable": dict(resources),
            "conditions": [{"type": "Ready", "status": "True" if ready else "False",
                            "reason": "KubeletReady" if ready else "KubeletNotReady",
                            "lastTransitionTime": timestamp()}],
        },
    }


def pod_object(name: str, namespace: str, node: str | None, gpus: float, phase: str | None,
               unschedulable: bool, labels: dict[str, str], node_selector: dict[str, str],
               affinity: dict[str, Any] | None, created_at: datetime,
               resources: dict[str, int | str] | None = None) -> dict[str, Any]:
    gpu = str(int(gpus)) if float(gpus).is_integer() else str(gpus)
    if resources is not None:  # named GPU resources, e.g. {"nvidia.com/mig-1g.10gb": 2}
        limits = {k: str(v) for k, v in resources.items()}
    else:
        limits = {GPU: gpu} if gpus else {}
    requests = {"cpu": "1", **limits}
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                        "resources": {"requests": requests, "limits": limits}}],
        "nodeSelector": dict(node_selector),
    }
    if affinity:
        spec["affinity"] = affinity
    if node is not None:
        spec["nodeName"] = node
    status: dict[str, Any] = {"phase": phase or ("Running" if node else "Pending")}
    if node is not None:
        status["startTime"] = timestamp(created_at)
        status["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    elif unschedulable:
        status["conditions"] = [{
            "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": f"0/1 nodes are available: 1 Insufficient {next(iter(limits), GPU)}.",
            "lastTransitionTime": timestamp(created_at),
        }]
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": _meta(name, labels, created_at, namespace),
            "spec": spec, "status": status}


def status_object(code: int, reason: str, message: str,
                  causes: list[dict[str, str]] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure", "message": message, "reason": reason,
                           "code": code}
    if causes:
        out["details"] = {"causes": causes}
    return out


def _field(obj: dict[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, dict) else None
    return "" if cur is None else str(cur)


def matches_fields(obj: dict[str, Any], selector: str) -> bool:
    """``spec.nodeName=x,status.phase!=Succeeded`` (empty value: unset)."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if _field(obj, key) == value:
                return False
        else:
            key, value = term.split("==", 1) if "==" in term else term.split("=", 1)
            if _field(obj, key) != value:
                return False
    return True


def matches_labels(obj: dict[str, Any], selector: str) -> bool:
    """Equality-based label selectors: ``a=b,c!=d,e`` (e: the label exists)."""
    labels = obj["metadata"].get("labels") or {}
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


def _merge(target: dict[str, Any], patch: dict[str, Any]) -> None:
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        elif isinstance(value, dict) and isinstance(target.get(key), dict):
            _merge(target[key], value)
        else:
            target[key] = copy.deepcopy(value)


def _pointer_unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~")


def apply_patch(obj: dict[str, Any], body: Any, content_type: str) -> None:
    """Merge / strategic-merge patch (a dict) or JSON patch (a list of ops)."""
    if isinstance(body, dict):
        _merge(obj, body)
        return
    if not isinstance(body, list):
        raise ValueError(f"unsupported patch body for {content_type}")
    for op in body:
        *parents, last = [_pointer_unescape(p) for p in op["path"].lstrip("/").split("/")]
        cur = obj
        for part in parents:
            cur = cur.setdefault(part, {})
        if op["op"] in ("add", "replace"):
            cur[last] = copy.deepcopy(op["value"])
        elif op["op"] == "remove":
            cur.pop(last, None)


@dataclass(frozen=True)
class Pdb:
    name: str
    namespace: str
    match_labels: dict[str, str]
    min_available: int

    def covers(self, pod: dict[str, Any]) -> bool:
        labels = pod["metadata"].get("labels") or {}
        return (pod["metadata"]["namespace"] == self.namespace
                and all(labels.get(k) == v for k, v in self.match_labels.items()))

    def allows(self, pod: dict[str, Any], pods: Iterable[dict[str, Any]]) -> bool:
        if not self.covers(pod):
            return True
        healthy = sum(1 for p in pods if self.covers(p) and p["status"].get("phase") == "Running")
        return healthy - 1 >= self.min_available
