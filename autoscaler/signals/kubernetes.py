"""Kubernetes demand and node state from informer caches (list once, then watch).

* Caches (``kube_watch.Informer``): GPU pods, nodes, PVCs and PVs (zones of bound
  volumes), and ResourceQuotas when a pool takes its quota from them. A tick reads them
  and makes no API call.
* Pending demand: pods requesting a GPU resource (``nvidia.com/gpu``,
  ``nvidia.com/mig-<profile>``, ``nvidia.com/gpu.shared``) whose ``PodScheduled``
  condition is False with reason ``Unschedulable``. A pod is demand for the first of its
  team's pools (priority order) whose nodes could run it (``kube_fit``); a pod none of
  them fits is ``unserved`` with the constraint that failed. Team: the pod's
  ``gpu-autoscaler/team`` (+ ``/pool``) selector, else the config's namespace rules,
  else namespace == team name. Within a pool, pods are ordered by priority (the value
  Kubernetes' Priority admission copied from the PriorityClass), then age.
* Nodes: GPU pods per node, allocatable GPU resources in GPUs of the node's pool (MIG
  slices and shared replicas counted as the share of a GPU they are), ``Ready``,
  ``spec.unschedulable``. Kubernetes node names are fleet node names.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

from autoscaler.catalog import Catalog, default_catalog
from autoscaler.model.snapshot import RunningJob, SchedulerNode
from autoscaler.schedulers.kubernetes.client import KubernetesConfig, connect
from autoscaler.schedulers.kubernetes.objects import (
    GPU,
    ZONE,
    NodeRecord,
    Obj,
    node_record,
    pv_zones,
    quantity,
)
from autoscaler.schedulers.kubernetes.watch import Informer, object_key
from autoscaler.secrets import SecretError
from autoscaler.signals.kube_demand import Demand, PodRecord, pod_record, spread_zones
from autoscaler.signals.kube_fit import PoolShape, gpu_model_of
from autoscaler.signals.kube_quota import quota_record, team_quotas
from autoscaler.signals.readings import ClusterPool, SchedulerReading

__all__ = ["KubernetesReader", "gpu_model_of", "quantity"]
log = logging.getLogger(__name__)
NOT_DONE = "status.phase!=Succeeded,status.phase!=Failed"


def _same(a: Sequence[object], b: Sequence[object]) -> bool:
    """The same objects in the same order (records are replaced, never changed in place)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))


def _pvc_volume(obj: Obj) -> str | None:
    return (obj.get("spec") or {}).get("volumeName") or None


def _unreadable_pod(obj: Obj) -> PodRecord | None:
    """A pod whose spec cannot be read: on a node its GPUs are unknown (NaN), which marks
    that node's data missing instead of showing its GPUs free; a pending one is left out."""
    meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
    node, name, namespace = spec.get("nodeName"), meta.get("name"), meta.get("namespace")
    if not (isinstance(node, str) and isinstance(name, str) and isinstance(namespace, str)
            and node and name and namespace):
        return None
    return PodRecord(key=f"{namespace}/{name}", name=name, namespace=namespace, node=node,
                     pending=False, gpus={GPU: math.nan})


def _tolerant(kind: str, transform: Callable[[Obj], Any],
              fallback: Callable[[Obj], Any] | None = None) -> Callable[[Obj], Any]:
    """``transform`` for the watch cache, where an exception would fail the whole list (every
    pool of the cluster blind for one odd object): the object is logged in one line (no
    traceback: it is input) and left out, or kept as ``fallback`` makes it."""
    def read(obj: Obj) -> Any:
        try:
            return transform(obj)
        except Exception as exc:  # any shape of JSON the API may send
            try:
                kept = fallback(obj) if fallback else None
            except Exception:  # as unreadable as the rest of it
                kept = None
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            log.warning("kubernetes: %s %s is unreadable (%s: %s): %s", kind,
                        object_key(obj) if isinstance(meta, dict) else "?", type(exc).__name__,
                        str(exc)[:200], "left out" if kept is None else "its GPUs count as unknown")
            return kept
    return read


class KubernetesReader:
    def __init__(self, cfg: KubernetesConfig, catalog: Catalog | None = None):
        self.config = cfg
        self.catalog = catalog or default_catalog()
        self._api: client.CoreV1Api | None = None
        self._informers: dict[str, Informer] = {}
        self._reported: set[str] = set()  # unserved pods already logged
        self._nodes: dict[str, tuple[Any, ...]] = {}  # name -> (record, pool, pods, view)
        # Told of each GPU pod that becomes unschedulable on the watch (the service wakes a
        # tick): called from the watch thread, so it must be quick and thread-safe.
        self.on_demand: Callable[[str], None] | None = None

    def _connect(self) -> client.CoreV1Api:
        if self._api is not None:
            return self._api
        # Unbounded: the informers' lists and watches run on their own threads (a watch's
        # stream stays open by design), and a tick waits for a list at most its timeout.
        self._api = connect(self.config, bounded=False)
        return self._api

    # -- caches -----------------------------------------------------------------------
    def _informer(self, what: str, list_fn: Callable[..., Any],
                  transform: Callable[[Obj], Any],
                  on_change: Callable[[Any | None, Any | None], None] | None = None) -> Informer:
        if what not in self._informers:
            self._informers[what] = Informer(what, list_fn, transform, on_change=on_change,
                                             timeout_s=self.config.timeout.total_seconds()).start()
        return self._informers[what]

    def _pod_changed(self, old: Any | None, new: Any | None) -> None:
        if (self.on_demand is not None and isinstance(new, PodRecord) and new.pending
                and new.gpus and not (isinstance(old, PodRecord) and old.pending)):
            self.on_demand(f"GPU pod {new.namespace}/{new.name} unschedulable")

    def _caches(self, refs: list[ClusterPool]) -> list[Informer]:
        api = self._connect()
        out = [
            self._informer("nodes", api.list_node, _tolerant("node", node_record)),
            self._informer("pods", lambda **kw: api.list_pod_for_all_namespaces(
                field_selector=NOT_DONE, **kw), _tolerant("pod", pod_record, _unreadable_pod),
                self._pod_changed),
            self._informer("persistentvolumeclaims",
                           api.list_persistent_volume_claim_for_all_namespaces,
                           _tolerant("persistentvolumeclaim", _pvc_volume)),
            self._informer("persistentvolumes", api.list_persistent_volume,
                           _tolerant("persistentvolume", pv_zones)),
        ]
        if any(r.pool.cluster.quota_from == "resourcequota" for r in refs):
            out.append(self._informer("resourcequotas", api.list_resource_quota_for_all_namespaces,
                                      _tolerant("resourcequota", quota_record)))
        return out

    def node_records(self) -> dict[str, NodeRecord] | None:
        """The nodes as the watch cache holds them now, by name: what the drainer checks
        booting nodes against (``actuators/drain/kubernetes.NodeCache``) instead of listing
        1,000 nodes a tick. None before the cache has listed and while its watch fails:
        the drainer then asks the API server."""
        informer = self._informers.get("nodes")
        if informer is None or not informer.synced or informer.error:
            return None
        items, _ = informer.snapshot()
        return {rec.name: rec for rec in items.values() if isinstance(rec, NodeRecord)}

    def close(self) -> None:
        for informer in self._informers.values():
            informer.stop()
        self._informers.clear()

    def read(self, refs: list[ClusterPool]) -> SchedulerReading:
        timeout = self.config.timeout.total_seconds()
        try:
            informers = self._caches(refs)
        except SecretError as exc:
            return SchedulerReading(error=f"kubernetes: {exc}", source="kubernetes api")
        for informer in informers:
            # A little past the request timeout, so a list that times out says so itself.
            if not informer.wait_tried(timeout + 0.5) or informer.error:
                return SchedulerReading(error=f"kubernetes: {self._why(informer, timeout)}",
                                        source="kubernetes api")
        snaps = {i.what: i.snapshot()[0] for i in informers}
        reading = self.assemble(snaps, refs)
        now = {job.id for job in reading.unserved}
        for job in reading.unserved:
            if job.id not in self._reported:  # once per pod, not once per tick
                log.warning("kubernetes: pending pod %s is not bought for: %s", job.id, job.reason)
        self._reported = now
        for gone in self._nodes.keys() - reading.nodes.keys():
            del self._nodes[gone]
        return reading

    @staticmethod
    def _why(informer: Informer, timeout: float) -> str:
        exc = informer.failure
        if exc is None:
            return f"API did not answer the {informer.what} list within {timeout:g}s"
        if isinstance(exc, ApiException):
            return f"API answered {exc.status} {exc.reason}"
        # urllib3 2 makes "connection refused" (NewConnectionError) a TimeoutError too.
        if isinstance(exc, Urllib3Timeout) and not isinstance(exc, NewConnectionError):
            return f"API timed out after {timeout:g}s"
        cause = exc
        while isinstance(reason := getattr(cause, "reason", None), Exception):
            cause = reason  # MaxRetryError -> NewConnectionError
        if isinstance(cause, Urllib3Timeout) and not isinstance(cause, NewConnectionError):
            return f"API timed out after {timeout:g}s"
        return f"API unreachable ({type(cause).__name__})"

    # -- one tick ---------------------------------------------------------------------
    def assemble(self, caches: dict[str, dict[str, Any]], refs: list[ClusterPool]) -> SchedulerReading:
        demand = Demand(self.config, self.catalog, refs, caches.get("persistentvolumeclaims", {}),
                        caches.get("persistentvolumes", {}))
        running: dict[str, list[PodRecord]] = {}
        pending: list[PodRecord] = []
        for pod in caches["pods"].values():
            if pod.node:
                running.setdefault(pod.node, []).append(pod)
            elif pod.pending:
                pending.append(pod)
        node_zone: dict[str, str] = {}
        placed: list[PodRecord] = []
        pool_zones = {z for r in refs for z in r.pool.zones}
        if any(p.spreads for p in pending):  # only then are running pods counted per zone
            node_zone = {r.name: r.labels[ZONE] for r in caches["nodes"].values() if ZONE in r.labels}
            placed = [p for pods in running.values() for p in pods]
        for pod in pending:
            demand.add(pod, spread_zones(pod, placed, node_zone, pool_zones) if pod.spreads else None)
        nodes = {rec.name: self._node_cached(rec, running.get(rec.name, []), demand)
                 for rec in caches["nodes"].values()}
        quotas = team_quotas(caches["resourcequotas"], refs, self.config) \
            if "resourcequotas" in caches else {}
        return SchedulerReading(nodes=nodes, pending=demand.pending_by_pool(),
                                unattributed=demand.unattributed, unserved=demand.unserved,
                                quotas=quotas, source="kubernetes watch")

    def _node_cached(self, rec: NodeRecord, pods: list[PodRecord], demand: Demand) -> SchedulerNode:
        """The node's view, rebuilt only when its record, its pods or its pool changed
        (records are immutable and replaced on every watch event)."""
        shape = demand.shape_of_node(rec.labels)
        # its pool and the pools of its group (its jobs' pools are fit against them)
        pools = (tuple(r.pool for r in demand.group_of(shape.ref)) or (shape.ref.pool,)) if shape else ()
        hit = self._nodes.get(rec.name)
        if hit is not None and hit[0] is rec and _same(hit[1], pools) and _same(hit[2], pods):
            cached: SchedulerNode = hit[3]
            return cached
        view = self._node(rec, pods, shape, demand)
        self._nodes[rec.name] = (rec, pools, pods, view)
        return view

    @staticmethod
    def _node(rec: NodeRecord, pods: list[PodRecord], shape: PoolShape | None,
              demand: Demand) -> SchedulerNode:
        jobs = []
        for pod in pods:
            gpus = shape.capacity(pod.gpus) if shape else pod.gpus.get(GPU, 0.0)
            jobs.append(RunningJob(id=pod.key, gpus=gpus, started_at=pod.started_at, name=pod.name,
                                   ends_at=pod.ends_at,
                                   pools=demand.running_pools(pod, shape.ref, gpus) if shape else None))
        total = shape.capacity(rec.allocatable) if shape else rec.allocatable.get(GPU, 0.0)
        allocated = sum(j.gpus for j in jobs)
        if not rec.ready:
            state = "down"
        elif rec.cordoned:
            state = "draining" if jobs else "drained"
        elif allocated <= 0:
            state = "idle"
        else:
            state = "allocated" if allocated >= total else "mixed"
        return SchedulerNode(state=state, gpus_total=total, gpus_allocated=allocated, jobs=jobs,
                             cordoned=rec.cordoned, ready=rec.ready, unusable=rec.unready,
                             unusable_since=rec.unready_since)
