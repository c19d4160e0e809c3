"""A small fake Kubernetes API server for tests and the sandbox.

The official ``kubernetes`` client and ``kubectl`` work against it unchanged::

    with FakeKube() as kube:
        kube.add_node("gpu-1", gpus=4, taints=["dedicated=ml:NoSchedule"])
        kube.add_pod("train-0", "vision", node="gpu-1", gpus=2)
        kube.add_pod("train-1", "vision", gpus=4, unschedulable=True)
        kube.refuse_evictions("vision/train-0", times=2)   # 429 twice, then evicted
        api = kube.core_v1()                                # kubernetes.client.CoreV1Api

Served (``fake_kube_http``): discovery (``/api``, ``/apis``, ``/version``); nodes
(GET, PATCH, DELETE), pods (GET, DELETE, ``eviction`` with PDB 429s, ``exec``),
persistentvolumeclaims, persistentvolumes, resourcequotas,
``scheduling.k8s.io/v1`` priorityclasses and ``batch/v1`` jobs; namespaces, serviceaccounts
and RBAC's clusterroles and clusterrolebindings, always empty (so ``kubectl apply
--dry-run=client`` maps ``deploy/kubernetes/rbac.yaml``); lists with ``fieldSelector`` /
``labelSelector`` and ``resourceVersion``; ``watch=true`` streams with bookmarks and
``410 Gone`` for versions older than the event log (``compact()``). Pods get
``spec.priority`` from their PriorityClass, as the Priority admission plugin does.
A node added with ``advertise_after`` is Ready with no GPU resources until the clock
(``clock``, injectable) passes that many seconds, like a device plugin starting late.
Every request is recorded in ``requests`` (``("WATCH", path)`` for a watch stream):
``tests/deploy/test_rbac.py`` holds them against the RBAC manifest.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http.server import ThreadingHTTPServer
from typing import Any

from autoscaler.sandbox.fakes.kube_http import handler_for
from autoscaler.sandbox.fakes.kube_objects import GPU, Pdb, node_object, pod_object, timestamp
from autoscaler.sandbox.fakes.kube_store import Store
from autoscaler.sandbox.fakes.threaded_http import ThreadedHttpServer

Clock = Callable[[], datetime]


class FakeKube(ThreadedHttpServer):
    """State plus HTTP server (127.0.0.1 by default, free port, own thread); a context manager."""

    def __init__(self, port: int = 0, clock: Clock | None = None, bookmark_s: float = 1.0,
                 host: str = "127.0.0.1"):
        self.store = Store()
        self._lock = self.store.lock
        self.clock: Clock = clock or (lambda: datetime.now(UTC))
        self.bookmark_s = bookmark_s
        self.nodes = self.store.objects["nodes"]
        self.pods = self.store.objects["pods"]  # "ns/name" -> pod
        self.pdbs: list[Pdb] = []
        self.refusals: dict[str, int] = {}
        self.evicted: list[str] = []
        self.execs: list[tuple[str, str, list[str]]] = []  # (pod, container, command)
        self.exec_exit_codes: dict[str, int] = {}  # pod -> exit code of its exec commands
        self.requests: list[tuple[str, str]] = []
        self.join_token: str | None = None  # set: creating a Node needs it as bearer (kubeadm's)
        self._advertise: dict[str, tuple[datetime, dict[str, str]]] = {}
        self.stopped = threading.Event()  # ends open watch streams
        # host: loopback, or the sandbox's shared address its namespaced nodes reach
        super().__init__(ThreadingHTTPServer((host, port), handler_for(self)), "fake-kube")

    # -- nodes ----------------------------------------------------------------------
    def add_node(self, name: str, gpus: int = 4, labels: dict[str, str] | None = None,
                 ready: bool = True, unschedulable: bool = False, taints: list[str] | None = None,
                 resources: dict[str, int | str] | None = None,
                 advertise_after: float | None = None) -> dict[str, Any]:
        """A node advertising ``gpus`` x nvidia.com/gpu, or ``resources`` (e.g. MIG slices);
        with ``advertise_after`` it advertises none until that many seconds have passed."""
        gpu_res = {k: str(v) for k, v in (resources if resources is not None else {GPU: gpus}).items()}
        with self._lock:
            node = node_object(name, {} if advertise_after else gpu_res, labels or {}, ready,
                               unschedulable, taints or [])
            if advertise_after:
                self._advertise[name] = (self.clock() + timedelta(seconds=advertise_after), gpu_res)
            return copy.deepcopy(self.store.put("nodes", name, node))

    def advance(self) -> None:
        """Apply what the clock says has happened (late device plugins)."""
        with self._lock:
            now = self.clock()
            for name, (at, res) in list(self._advertise.items()):
                if now >= at and name in self.nodes:
                    del self._advertise[name]

                    def show(node: dict[str, Any], res: dict[str, str] = res) -> None:
                        node["status"]["capacity"].update(res)
                        node["status"]["allocatable"].update(res)
                    self.store.touch("nodes", name, show)

    def set_node_ready(self, name: str, ready: bool) -> None:
        """The kubelet's Ready condition changes, stamped with the fake's clock as the node
        lifecycle controller stamps lastTransitionTime (only on a change of status)."""
        status = "True" if ready else "False"
        at = timestamp(self.clock())

        def change(node: dict[str, Any]) -> None:
            for cond in node["status"]["conditions"]:
                if cond["type"] == "Ready" and cond["status"] != status:
                    cond.update(status=status, lastTransitionTime=at,
                                reason="KubeletReady" if ready else "KubeletNotReady")
        self.store.touch("nodes", name, change)

    def remove_node(self, name: str) -> None:
        self.store.delete("nodes", name)

    def cordoned(self, name: str) -> bool:
        with self._lock:
            return bool(self.nodes[name]["spec"].get("unschedulable", False))

    # -- pods -----------------------------------------------------------------------
    def add_pod(self, name: str, namespace: str = "default", node: str | None = None,
                gpus: float = 1, phase: str | None = None, unschedulable: bool | None = None,
                labels: dict[str, str] | None = None, node_selector: dict[str, str] | None = None,
                affinity: dict[str, Any] | None = None, created_at: datetime | None = None,
                resources: dict[str, int | str] | None = None,
                tolerations: list[dict[str, Any]] | None = None,
                priority_class: str | None = None, claims: list[str] | None = None,
                spread: list[dict[str, Any]] | None = None,
                annotations: dict[str, str] | None = None,
                deadline_s: int | None = None) -> dict[str, Any]:
        """A pod; bound to ``node`` (Running) or Pending, Unschedulable unless told not;
        ``deadline_s`` is its ``activeDeadlineSeconds``."""
        if unschedulable is None:
            unschedulable = node is None
        with self._lock:
            pod = pod_object(name, namespace, node, gpus, phase, unschedulable, labels or {},
                             node_selector or {}, affinity, created_at or self.clock(),
                             resources=resources)
            spec = pod["spec"]
            if tolerations:
                spec["tolerations"] = tolerations
            if priority_class:
                spec["priorityClassName"] = priority_class
                spec["priority"] = self._priority(priority_class)
            if claims:
                spec["volumes"] = [{"name": c, "persistentVolumeClaim": {"claimName": c}}
                                   for c in claims]
            if spread:
                spec["topologySpreadConstraints"] = spread
            if deadline_s is not None:
                spec["activeDeadlineSeconds"] = deadline_s
            if annotations:
                pod["metadata"]["annotations"] = dict(annotations)
            return copy.deepcopy(self.store.put("pods", f"{namespace}/{name}", pod))

    def _priority(self, name: str) -> int:
        cls = self.store.objects["priorityclasses"].get(name)
        return int(cls["value"]) if cls else 0

    def bind_pod(self, key: str, node: str) -> None:
        """The scheduler placed a pending pod: it runs on ``node``."""
        def bind(pod: dict[str, Any]) -> None:
            pod["spec"]["nodeName"] = node
            pod["status"] = {"phase": "Running", "startTime": timestamp(self.clock()),
                             "conditions": [{"type": "PodScheduled", "status": "True"}]}
        self.store.touch("pods", key, bind)

    def schedule(self) -> list[tuple[str, str]]:
        """One pass of the fake scheduler's simple bind (``fake_kube_scheduler``): the
        (pod, node) pairs it bound."""
        from autoscaler.sandbox.fakes.kube_scheduler import bind_pending

        with self._lock:
            self.advance()
            return bind_pending(self)

    def finish_pod(self, key: str, phase: str = "Succeeded") -> None:
        self.store.touch("pods", key, lambda pod: pod["status"].update(phase=phase))

    def annotate_pod(self, key: str, annotations: dict[str, str]) -> None:
        self.store.touch("pods", key, lambda pod: pod["metadata"].setdefault(
            "annotations", {}).update(annotations))

    def delete_pod(self, key: str) -> dict[str, Any] | None:
        return self.store.delete("pods", key)

    def refuse_evictions(self, key: str, times: int) -> None:
        """Answer the next ``times`` evictions of pod ``namespace/name`` with 429."""
        with self._lock:
            self.refusals[key] = times

    def add_pdb(self, name: str, namespace: str, match_labels: dict[str, str],
                min_available: int = 1) -> None:
        """A PodDisruptionBudget: evictions that would leave fewer matching Running pods
        than ``min_available`` are refused with 429."""
        with self._lock:
            self.pdbs.append(Pdb(name, namespace, match_labels, min_available))

    # -- other objects --------------------------------------------------------------
    def _meta(self, name: str, namespace: str | None = None,
              labels: dict[str, str] | None = None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": name, "uid": f"uid-{namespace or ''}-{name}",
                                "creationTimestamp": timestamp(self.clock()), "labels": labels or {}}
        if namespace is not None:
            meta["namespace"] = namespace
        return meta

    def add_pv(self, name: str, zone: str) -> None:
        """A PersistentVolume usable only in ``zone`` (its node affinity)."""
        term = {"matchExpressions": [{"key": "topology.kubernetes.io/zone", "operator": "In",
                                      "values": [zone]}]}
        self.store.put("persistentvolumes", name, {
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": self._meta(name),
            "spec": {"capacity": {"storage": "100Gi"}, "accessModes": ["ReadWriteOnce"],
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}}},
            "status": {"phase": "Bound"}})

    def add_pvc(self, name: str, namespace: str, volume: str | None) -> None:
        """A claim, bound to PersistentVolume ``volume`` (None: still unbound)."""
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": "100Gi"}}}
        if volume:
            spec["volumeName"] = volume
        self.store.put("persistentvolumeclaims", f"{namespace}/{name}", {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": self._meta(name, namespace), "spec": spec,
            "status": {"phase": "Bound" if volume else "Pending"}})

    def add_quota(self, name: str, namespace: str, hard: dict[str, str]) -> None:
        self.store.put("resourcequotas", f"{namespace}/{name}", {
            "apiVersion": "v1", "kind": "ResourceQuota", "metadata": self._meta(name, namespace),
            "spec": {"hard": dict(hard)}, "status": {"hard": dict(hard), "used": {}}})

    def add_priority_class(self, name: str, value: int) -> None:
        self.store.put("priorityclasses", name, {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": self._meta(name), "value": value, "preemptionPolicy": "PreemptLowerPriority"})

    def add_job(self, name: str, namespace: str = "default") -> None:
        """A batch/v1 Job, running (no condition yet)."""
        template = {"spec": {"restartPolicy": "Never", "containers": [
            {"name": "main", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}]}}
        self.store.put("jobs", f"{namespace}/{name}", {
            "apiVersion": "batch/v1", "kind": "Job", "metadata": self._meta(name, namespace),
            "spec": {"template": template}, "status": {"active": 1}})

    def finish_job(self, key: str, condition: str = "Complete") -> None:
        """The job ended: ``Complete`` or ``Failed`` becomes a True condition."""
        def end(job: dict[str, Any]) -> None:
            job["status"] = {"active": 0, "conditions": [
                {"type": condition, "status": "True",
                 "lastTransitionTime": timestamp(self.clock())}]}
        self.store.touch("jobs", key, end)

    def compact(self) -> None:
        """Drop the watch event log: watches from older versions get 410 Gone."""
        self.store.compact()

    # -- plumbing -------------------------------------------------------------------
    def core_v1(self) -> Any:
        from kubernetes import client

        cfg = client.Configuration()
        cfg.host = self.url
        return client.CoreV1Api(client.ApiClient(cfg))

    def stop(self) -> None:
        self.stopped.set()
        with self.store.changed:
            self.store.changed.notify_all()
        super().stop()
