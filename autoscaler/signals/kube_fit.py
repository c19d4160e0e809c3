"""Could a node of this pool run this pending pod? (What Cluster Autoscaler and Karpenter
simulate before they buy.)

A pool's possible nodes are its (instance type, zone) pairs, each with the labels the
node gets at join (``cluster_join``: team, pool, market, ``cluster.labels``, instance
type, zone, region, GPU model) and the pool's ``cluster.taints``. A pod fits the pool when
its GPU resources are what the pool's nodes advertise, it tolerates every NoSchedule /
NoExecute taint, and some pair satisfies its nodeSelector, required node affinity and
zone constraints. The engine is told the choice as a GPU model (when it alone picks the
fitting types), else a list of instance types (``node.kubernetes.io/instance-type`` in a
selector or affinity), and a set of zones (``PendingJob.gpu_model``, ``instance_types``,
``zones``), and buys the cheapest type that fits there, so a constraint that admits only
some pairs is served when the fitting pairs are every fitting type in every fitting zone;
otherwise the pod is reported unserved with the constraint that failed, never bought for.
A pool without ``zones`` launches in any zone of the region, so the zone of its next node
is unknown: it serves no zone constraint (bound volume, topology spread, a
zone in the nodeSelector or affinity other than ``Exists``), and the failure says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from autoscaler.catalog import Catalog, CatalogError, InstanceType
from autoscaler.schedulers.kubernetes.objects import (
    GPU,
    MIG_PREFIX,
    SHARED,
    TYPE,
    ZONE,
    PodNeeds,
    Requirement,
)
from autoscaler.signals.readings import ClusterPool

TEAM_LABEL = "gpu-autoscaler/team"
POOL_LABEL = "gpu-autoscaler/pool"
MARKET_LABEL = "gpu-autoscaler/market"
MODEL_LABEL = "gpu-autoscaler/gpu-model"
PRODUCT_LABEL = "nvidia.com/gpu.product"
REGION = "topology.kubernetes.io/region"
KNOWN_MODELS = ("A10G", "A100", "H100", "V100", "P100", "K80", "T4", "L4", "A10")
MARKETS = ("on-demand", "spot")  # a node may be either: a selector on it picks neither
NO_ZONES = "the pool lists no zones, so it cannot promise the zone of a new node"


def gpu_model_of(product: str) -> str | None:
    """``NVIDIA-A100-SXM4-40GB`` (GPU feature discovery) -> ``A100``."""
    text = product.upper()
    for model in KNOWN_MODELS:
        if re.search(rf"(^|[^A-Z0-9]){model}([^A-Z0-9]|$)", text):
            return model
    return None


@dataclass(frozen=True)
class Variant:
    itype: InstanceType
    zone: str | None
    labels: dict[str, str]


@dataclass(frozen=True)
class PoolShape:
    ref: ClusterPool
    variants: tuple[Variant, ...]
    taints: tuple[tuple[str, str, str], ...]

    @classmethod
    def of(cls, ref: ClusterPool, catalog: Catalog) -> PoolShape:
        pool = ref.pool
        base = {TEAM_LABEL: ref.team, POOL_LABEL: pool.name, REGION: pool.region,
                "nvidia.com/gpu.present": "true", "kubernetes.io/os": "linux",
                **pool.cluster.labels}
        variants = []
        for name in pool.instance_types:
            try:
                itype = catalog.get(pool.cloud.value, name)
            except CatalogError:
                continue  # the policy loader reports unknown types
            for zone in list[str | None](pool.zones) or [None]:
                labels = {**base, TYPE: name, MODEL_LABEL: itype.gpu_model}
                if zone:
                    labels[ZONE] = zone
                variants.append(Variant(itype, zone, labels))
        return cls(ref, tuple(variants), tuple(pool.cluster.taint_triples()))

    def gpu_equivalents(self, gpus: dict[str, float]) -> tuple[float, str | None]:
        """The pod's GPU requests in GPUs of this pool's nodes, or why they are not offered.
        Shared pools (time-slicing, MPS) advertise ``nvidia.com/gpu.shared``, replicas per
        GPU (the device plugin's ``renameByDefault``); MIG pools one resource per profile."""
        boot = self.ref.pool.bootstrap
        total = 0.0
        for name, amount in sorted(gpus.items()):
            share = self._share(name)
            if share is not None:
                total += amount * share
            elif amount > 0:
                offered = offered_resources(boot.sharing, list(boot.mig_profiles))
                return 0.0, f"resource {name}: the pool's nodes offer {', '.join(offered)}"
        return total, None

    def capacity(self, amounts: dict[str, float]) -> float:
        """GPUs that advertised (or running pods') resources stand for; others ignored."""
        total = 0.0
        for name, amount in amounts.items():
            share = self._share(name)
            if share is not None:
                total += amount * share
        return total

    def _share(self, name: str) -> float | None:
        """The share of one GPU that one unit of resource ``name`` is on this pool."""
        boot = self.ref.pool.bootstrap
        if name == GPU and boot.sharing == "none":
            return 1.0
        if name == SHARED and boot.sharing == "time-slicing":
            return 1.0 / boot.time_slicing_replicas
        if name == SHARED and boot.sharing == "mps":
            return 1.0 / boot.mps.replicas
        profile = name[len(MIG_PREFIX):]
        if name.startswith(MIG_PREFIX) and boot.sharing == "mig" and profile in boot.mig_profiles:
            return 1.0 / boot.mig_profiles.count(profile)
        return None


def offered_resources(sharing: str, mig_profiles: list[str]) -> list[str]:
    if sharing == "mig":
        return sorted({MIG_PREFIX + p for p in mig_profiles})
    if sharing in ("time-slicing", "mps"):
        return [SHARED]
    return [GPU]


@dataclass(frozen=True)
class Fit:
    gpus: float = 0.0  # GPU equivalents on this pool's nodes
    gpu_model: str | None = None  # the model the pod's constraints choose, if any
    instance_types: frozenset[str] | None = None  # the types they choose, if no model does
    zones: frozenset[str] | None = None  # the zones they choose, if fewer than the pool's
    failed: str | None = None  # the constraint that failed, when it does not fit


def _matches(req: Requirement, labels: dict[str, str]) -> bool:
    if req.key == ZONE and ZONE not in labels:  # a zone-less pool: the zone is unknown
        return req.operator == "Exists"  # every node gets one at join
    if req.key == PRODUCT_LABEL and req.operator in ("In", "NotIn"):
        # GPU feature discovery names products (Tesla-V100-SXM2-16GB); compare models.
        models = {gpu_model_of(v) for v in req.values}
        hit = labels.get(MODEL_LABEL) in models
        return hit if req.operator == "In" else not hit
    if req.key == PRODUCT_LABEL:
        return req.operator == "Exists"
    if req.key == MARKET_LABEL and req.operator == "In":
        return all(m in req.values for m in MARKETS)
    return req.matches(labels)


def _variant_fails(needs: PodNeeds, v: Variant) -> str | None:
    def why(text: str, key: str) -> str:
        return f"{text}: {NO_ZONES}" if key == ZONE and v.zone is None else text

    for req in needs.node_selector:
        if not _matches(req, v.labels):
            return why(f"nodeSelector {req.key}={req.values[0]}", req.key)
    if needs.terms and not any(all(_matches(r, v.labels) for r in term) for term in needs.terms):
        failing = next(r for r in needs.terms[0] if not _matches(r, v.labels))
        return why(f"node affinity {failing.describe()}", failing.key)
    if needs.zones is not None and v.zone not in needs.zones:
        return why(f"zone {' or '.join(sorted(needs.zones))} (bound volume / topology spread)", ZONE)
    return None


def fit(needs: PodNeeds, shape: PoolShape) -> Fit:
    gpus, why = shape.gpu_equivalents(needs.gpus)
    if why:
        return Fit(failed=why)
    for key, value, effect in shape.taints:
        if effect == "PreferNoSchedule":
            continue
        if not any(t.tolerates(key, value, effect) for t in needs.tolerations):
            return Fit(failed=f"taint {key}{'=' + value if value else ''}:{effect} not tolerated")
    fails = [(v, _variant_fails(needs, v)) for v in shape.variants]
    ok = [v for v, f in fails if f is None]
    if not ok:
        return Fit(failed=fails[0][1] if fails else "the pool has no known instance type")
    model: str | None = None
    types: frozenset[str] | None = None
    zones: frozenset[str] | None = None
    if len(ok) < len(fails):
        narrowed = _narrowed(ok, shape)
        if narrowed is None:
            bad = next(f for _, f in fails if f)
            return Fit(failed=f"{bad}: only some of the pool's types or zones fit and the "
                              "pool may launch the others")
        model, types, zones = narrowed
    biggest = max(v.itype.gpus for v in ok)
    if not gpus <= biggest:  # NaN too
        return Fit(failed=f"GPUs per node: {gpus:g} asked, the largest fitting type has {biggest}")
    return Fit(gpus=gpus, gpu_model=model, instance_types=types, zones=zones)


Narrowed = tuple[str | None, frozenset[str] | None, frozenset[str] | None]


def _narrowed(ok: list[Variant], shape: PoolShape) -> Narrowed | None:
    """(GPU model, instance types, zones) that select exactly the fitting (type, zone)
    pairs, if they do: a model when it picks exactly the fitting types, else the types."""
    types = {v.itype.name for v in ok}
    zones = {v.zone for v in ok}
    if len(ok) != len(types) * len(zones) or None in zones:
        return None  # not every fitting type fits in every fitting zone
    all_types = {v.itype.name for v in shape.variants}
    all_zones = {v.zone for v in shape.variants}
    model, chosen = None, None
    if types != all_types:
        models = {v.itype.gpu_model for v in ok}
        of_model = {v.itype.name for v in shape.variants if v.itype.gpu_model in models}
        if len(models) == 1 and of_model == types:
            model = models.pop()
        else:
            chosen = frozenset(types)
    return model, chosen, (frozenset(z for z in zones if z) if zones != all_zones else None)
