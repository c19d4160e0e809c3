"""Reading Kubernetes pods and nodes from their JSON (the watch cache keeps raw dicts).

Only what the demand reader needs: GPU resources by name, scheduling constraints
(nodeSelector, required node affinity, tolerations, zone constraints), priority, and the
node's Ready condition, labels, taints and allocatable GPU resources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.utils import parse_quantity

GPU = "nvidia.com/gpu"
SHARED = "nvidia.com/gpu.shared"
MIG_PREFIX = "nvidia.com/mig-"
ZONE = "topology.kubernetes.io/zone"
TYPE = "node.kubernetes.io/instance-type"

Obj = dict[str, Any]


def quantity(value: Any) -> float:
    """Kubernetes quantities as numbers (``"2"``, ``"500m"``, ``"1e3"``, ``"1Ki"``; absent is
    0). Never raises: what is not a quantity is NaN, so it is refused where it is checked
    against what the node can have, never read as zero GPUs. Infinite and negative amounts
    come back as they are, for the same check."""
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return math.nan
    try:
        return float(parse_quantity(value))  # type: ignore[no-untyped-call]
    except (ValueError, ArithmeticError):  # decimal.Overflow is an ArithmeticError
        return math.nan


def is_gpu_resource(name: str) -> bool:
    return name in (GPU, SHARED) or name.startswith(MIG_PREFIX)


def gpu_resources(amounts: dict[str, Any] | None) -> dict[str, float]:
    return {k: quantity(v) for k, v in (amounts or {}).items() if is_gpu_resource(k)}


def pod_gpu_requests(spec: Obj) -> dict[str, float]:
    """Effective GPU requests per resource: max(sum over containers, largest init)."""
    def one(container: Obj) -> dict[str, float]:
        res = container.get("resources") or {}
        out = gpu_resources(res.get("limits"))
        out.update(gpu_resources(res.get("requests")))  # requests win where both are set
        return out

    main: dict[str, float] = {}
    for c in spec.get("containers") or []:
        for k, v in one(c).items():
            main[k] = main.get(k, 0.0) + v
    for c in spec.get("initContainers") or []:
        for k, v in one(c).items():
            main[k] = max(main.get(k, 0.0), v)
    # NaN (not a quantity) stays, to be refused with its pod; zero and negative asks are none.
    return {k: v for k, v in main.items() if not v <= 0}


@dataclass(frozen=True)
class Requirement:
    """One required node-selector expression (or a nodeSelector entry as ``In [v]``)."""

    key: str
    operator: str  # In | NotIn | Exists | DoesNotExist | Gt | Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        have = labels.get(self.key)
        op = self.operator
        if op == "In":
            return have in self.values
        if op == "NotIn":
            return have not in self.values
        if op == "Exists":
            return have is not None
        if op == "DoesNotExist":
            return have is None
        if op in ("Gt", "Lt") and have is not None and self.values:
            try:
                a, b = int(have), int(self.values[0])
            except ValueError:
                return False
            return a > b if op == "Gt" else a < b
        return False

    def describe(self) -> str:
        if self.values:
            return f"{self.key} {self.operator} [{', '.join(self.values)}]"
        return f"{self.key} {self.operator}"


@dataclass(frozen=True)
class Toleration:
    key: str | None
    operator: str  # Equal | Exists
    value: str
    effect: str | None

    def tolerates(self, key: str, value: str, effect: str) -> bool:
        if self.effect and self.effect != effect:
            return False
        if self.key is None:  # empty key with Exists tolerates everything
            return self.operator == "Exists"
        if self.key != key:
            return False
        return self.operator == "Exists" or self.value == value


@dataclass(frozen=True)
class PodNeeds:
    """What a pending pod needs from a node."""

    gpus: dict[str, float]
    node_selector: tuple[Requirement, ...] = ()
    terms: tuple[tuple[Requirement, ...], ...] = ()  # required affinity: any term, all exprs
    tolerations: tuple[Toleration, ...] = ()
    zones: frozenset[str] | None = None  # from bound volumes and hard topology spread
    labels: dict[str, str] = field(default_factory=dict)  # single-valued In: team, pool, model


def _requirements(exprs: list[Obj] | None) -> tuple[Requirement, ...]:
    return tuple(Requirement(e.get("key", ""), e.get("operator", ""), tuple(e.get("values") or ()))
                 for e in exprs or [])


def pod_needs(spec: Obj, gpus: dict[str, float], pvc_zones: frozenset[str] | None) -> PodNeeds:
    selector = tuple(Requirement(k, "In", (str(v),)) for k, v in (spec.get("nodeSelector") or {}).items())
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {})
    required = affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    terms = tuple(_requirements(t.get("matchExpressions"))
                  for t in required.get("nodeSelectorTerms") or [])
    tolerations = tuple(Toleration(t.get("key") or None, t.get("operator") or "Equal",
                                   t.get("value") or "", t.get("effect") or None)
                        for t in spec.get("tolerations") or [])
    labels = {r.key: r.values[0] for r in selector}
    if len(terms) == 1:  # with several terms no single value is required
        for r in terms[0]:
            if r.operator == "In" and len(r.values) == 1:
                labels.setdefault(r.key, r.values[0])
    return PodNeeds(gpus, selector, terms, tolerations, pvc_zones, labels)


def pvc_names(spec: Obj) -> list[str]:
    return [v["persistentVolumeClaim"]["claimName"] for v in spec.get("volumes") or []
            if isinstance(v.get("persistentVolumeClaim"), dict)
            and v["persistentVolumeClaim"].get("claimName")]


def pv_zones(pv: Obj) -> frozenset[str] | None:
    """Zones a PersistentVolume's node affinity (or its zone label) allows."""
    terms = (((pv.get("spec") or {}).get("nodeAffinity") or {}).get("required") or {}).get(
        "nodeSelectorTerms") or []
    zones: set[str] = set()
    for term in terms:
        for expr in term.get("matchExpressions") or []:
            if expr.get("key") == ZONE and expr.get("operator") == "In":
                zones.update(expr.get("values") or [])
    label = ((pv.get("metadata") or {}).get("labels") or {}).get(ZONE)
    if label:
        zones.add(label)
    return frozenset(zones) if zones else None


def unschedulable(pod: Obj) -> bool:
    status, spec = pod.get("status") or {}, pod.get("spec") or {}
    if status.get("phase") != "Pending" or spec.get("nodeName"):
        return False
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               and c.get("reason") == "Unschedulable" for c in status.get("conditions") or [])


def node_ready(node: Obj) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (node.get("status") or {}).get("conditions") or [])


def ready_condition(node: Obj) -> Obj | None:
    """The node's ``Ready`` condition (its status, reason and lastTransitionTime), if any."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if isinstance(c, dict) and c.get("type") == "Ready":
            return c
    return None


def node_taints(node: Obj) -> list[tuple[str, str, str]]:
    return [(t.get("key", ""), t.get("value") or "", t.get("effect", ""))
            for t in (node.get("spec") or {}).get("taints") or []]


@dataclass(frozen=True)
class NodeRecord:
    """What the watch cache keeps of a Node: the demand reader's view of it and the
    drainer's readiness check read the same record."""

    name: str
    ready: bool
    cordoned: bool
    labels: dict[str, str]
    allocatable: dict[str, float]
    unready: str | None = None  # "NotReady: KubeletNotReady" when not Ready
    unready_since: datetime | None = None  # the Ready condition's lastTransitionTime


def node_record(obj: Obj) -> NodeRecord | None:
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        return None
    ready = node_ready(obj)
    unready, since = (None, None) if ready else _unready(ready_condition(obj))
    return NodeRecord(meta["name"], ready, bool((obj.get("spec") or {}).get("unschedulable")),
                      dict(meta.get("labels") or {}),
                      gpu_resources((obj.get("status") or {}).get("allocatable")),
                      unready, since)


def _unready(cond: Obj | None) -> tuple[str, datetime | None]:
    """Why a node is not Ready, in the kubelet's words, and since when (a time without a
    zone is UTC, as the API server writes them)."""
    if cond is None:
        return "NotReady: no Ready condition posted", None
    status = "NotReady" if cond.get("status") == "False" else f"Ready={str(cond.get('status'))[:20]}"
    reason = str(cond.get("reason") or "")[:100]
    try:
        since = datetime.fromisoformat(str(cond.get("lastTransitionTime") or ""))
    except ValueError:
        since = None
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return (f"{status}: {reason}" if reason else status), since
