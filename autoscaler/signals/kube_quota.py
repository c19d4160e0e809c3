"""Team GPU limits from Kubernetes ResourceQuotas (``cluster.quota_from: resourcequota``).

A quota's hard ``requests.nvidia.com/gpu`` (or ``nvidia.com/gpu``, the older spelling
for extended resources) caps the GPUs pods of its namespace may request. A team's limit
is the sum over its namespaces (the namespace rules of the config, else namespace ==
team) of the smallest such limit in each; the engine uses the smaller of that and the
policy's ``quota.max_gpus``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from autoscaler.model.snapshot import ClusterQuota
from autoscaler.schedulers.kubernetes.client import KubernetesConfig
from autoscaler.schedulers.kubernetes.objects import GPU, Obj, quantity
from autoscaler.signals.readings import ClusterPool

log = logging.getLogger(__name__)
KEYS = (f"requests.{GPU}", GPU, f"limits.{GPU}")


@dataclass(frozen=True)
class QuotaRecord:
    namespace: str
    name: str
    gpus: float


def quota_record(obj: Obj) -> QuotaRecord | None:
    meta = obj.get("metadata") or {}
    hard = ((obj.get("spec") or {}).get("hard")) or {}
    limits = [quantity(hard[k]) for k in KEYS if k in hard]
    if not limits or not meta.get("namespace"):
        return None
    if not all(0 <= v < math.inf for v in limits):  # the API server never stores these
        log.warning("kubernetes: ResourceQuota %s/%s left out: its GPU limit %s is not a number "
                    "of GPUs", meta["namespace"], meta.get("name", ""),
                    ", ".join(str(hard[k])[:40] for k in KEYS if k in hard))
        return None
    return QuotaRecord(meta["namespace"], meta.get("name", ""), min(limits))


def _team(namespace: str, cfg: KubernetesConfig) -> str:
    for rule in cfg.namespace_teams:
        if rule.matches(namespace):
            return rule.team
    return namespace


def team_quotas(cache: dict[str, Any], refs: list[ClusterPool],
                cfg: KubernetesConfig) -> dict[str, ClusterQuota]:
    teams = {r.team for r in refs if r.pool.cluster.quota_from == "resourcequota"}
    tightest: dict[str, QuotaRecord] = {}  # namespace -> its smallest quota
    for rec in cache.values():
        if _team(rec.namespace, cfg) in teams and (
                rec.namespace not in tightest or rec.gpus < tightest[rec.namespace].gpus):
            tightest[rec.namespace] = rec
    out: dict[str, ClusterQuota] = {}
    for team in sorted(teams):
        recs = sorted((r for r in tightest.values() if _team(r.namespace, cfg) == team),
                      key=lambda r: r.namespace)
        if recs:
            names = ", ".join(f"{r.namespace}/{r.name}" for r in recs)
            out[team] = ClusterQuota(max_gpus=math.floor(sum(r.gpus for r in recs) + 1e-9),
                                     source=f"ResourceQuota {names}")
    return out
