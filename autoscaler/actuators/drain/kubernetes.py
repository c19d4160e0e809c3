"""Draining Kubernetes nodes through the API server (the official client).

* cordon: ``spec.unschedulable = true``;
* before the drain deadline, pods are evicted through the Eviction API, which honours
  PodDisruptionBudgets: a 429 refusal is retried on the next step. Pods annotated
  ``gpu-autoscaler/do-not-disrupt: "true"`` (or Karpenter's ``karpenter.sh/do-not-disrupt``)
  are *not* evicted before the deadline and keep the node from counting as drained, so a
  long training run can finish;
* at the deadline the pool's ``checkpoint_signal`` is sent to PID 1 of every container
  of the pods still there (the ``exec`` subresource runs ``kill -<SIGNAL> 1``; the image
  needs a ``kill``), the protected ones too, and the evictions go on;
* after ``checkpoint_grace`` the pods still there are deleted. A drain is therefore
  bounded by ``drain_timeout + checkpoint_grace`` even when a PDB never allows an
  eviction, like the drain timeout of a Slurm node;
* a long job released (``lifetime.action: release``) is signalled the same way, and
  after ``checkpoint_grace`` its pod is evicted (a PDB refusal is retried, never forced);
* DaemonSet and static (mirror) pods are left alone: they die with the node;
* a node is ready once it is Ready, not cordoned, and its device plugin advertises the
  GPUs its instance type has (``node.kubernetes.io/instance-type``, set at join):
  ``nvidia.com/gpu``, shared replicas (``nvidia.com/gpu.replicas`` from GPU feature
  discovery) or the same MIG slices on every GPU. Until then it stays in flight, so no
  second node is bought for the same pods (the device plugin starts about a minute
  after the kubelet). The booting nodes of a tick are checked against the signal
  reader's watch cache of nodes when the service hands one over (``cached``), as
  Cluster Autoscaler and Karpenter read nodes from their informers: no API call. Without
  it, or while that cache is not listed or its watch fails, one LIST answers for all;
* when the instance is gone its Node object is deleted (there is no cloud controller
  manager to do it in the sandbox, and the autoscaler knows first).

Kubernetes node names are fleet node names.
"""

from __future__ import annotations

import json
import logging
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream
from urllib3.exceptions import HTTPError

from autoscaler.actuators.drain.base import DrainError, PhasedDrainer, Readiness, Work
from autoscaler.catalog import Catalog, CatalogError, default_catalog
from autoscaler.schedulers.kubernetes.client import KubernetesConfig, connect
from autoscaler.schedulers.kubernetes.objects import (
    GPU,
    MIG_PREFIX,
    SHARED,
    TYPE,
    NodeRecord,
    node_record,
)

log = logging.getLogger(__name__)

DO_NOT_DISRUPT = "gpu-autoscaler/do-not-disrupt"
# Karpenter's spelling, so pods already marked for it are protected here too.
PROTECTING = (DO_NOT_DISRUPT, "karpenter.sh/do-not-disrupt")
MIRROR = "kubernetes.io/config.mirror"
NOT_DONE = "status.phase!=Succeeded,status.phase!=Failed"
REPLICAS = "nvidia.com/gpu.replicas"
# The nodes a watch cache holds now, by name; None while it cannot be trusted (not listed
# yet, or its watch failing). The service passes the signal reader's.
NodeCache = Callable[[], Mapping[str, NodeRecord] | None]
SIGNAL = re.compile(r"^(SIG)?[A-Z][A-Z0-9]{1,7}$")  # USR1, SIGTERM: one argv word, never split


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


class KubernetesOps:
    kind = "kubernetes"

    def __init__(self, api: client.CoreV1Api | None = None, config: KubernetesConfig | None = None,
                 timeout_s: float = 10.0, catalog: Catalog | None = None,
                 cached: NodeCache | None = None):
        if api is None and config is None:
            raise ValueError("give the Kubernetes drainer an API client or a KubernetesConfig")
        self._api = api
        self.config = config
        self.timeout_s = config.timeout.total_seconds() if config is not None else timeout_s
        self.catalog = catalog or default_catalog()  # GPU counts only: prices do not matter
        self.cached = cached

    def api(self) -> client.CoreV1Api:
        if self._api is None:
            # Same connection rules as the signal reader (host or kubeconfig, token, CA).
            self._api = connect(self.config)  # type: ignore[arg-type]
        return self._api

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, _request_timeout=self.timeout_s, **kwargs)
        except ApiException:
            raise
        except (HTTPError, OSError) as exc:
            raise DrainError(f"kubernetes: {what}: API unreachable ({type(exc).__name__})") from None

    # -- SchedulerOps --------------------------------------------------------------------
    def cordon(self, node: str, reason: str) -> bool:
        return self._set_unschedulable(node, True)

    def uncordon(self, node: str) -> None:
        self._set_unschedulable(node, False)

    def _set_unschedulable(self, node: str, value: bool) -> bool:
        try:
            self._call(f"patch node {node}", self.api().patch_node, node,
                       {"spec": {"unschedulable": value}})
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise DrainError(f"kubernetes: cannot {'cordon' if value else 'uncordon'} {node}: "
                             f"{exc.status} {exc.reason}") from None
        return True

    def workload(self, node: str) -> list[Work]:
        try:
            pods = self._call(f"list pods on {node}", self.api().list_pod_for_all_namespaces,
                              field_selector=f"spec.nodeName={node},{NOT_DONE}").items
        except ApiException as exc:
            raise DrainError(f"kubernetes: cannot list pods on {node}: {exc.status} {exc.reason}") from None
        out = []
        for pod in pods:
            meta = pod.metadata
            if meta is None or not meta.name or _node_bound(meta):
                continue
            annotations = meta.annotations or {}
            out.append(Work(_key(meta.namespace or "default", meta.name),
                            protected=any(annotations.get(a, "").lower() == "true"
                                          for a in PROTECTING),
                            ending=meta.deletion_timestamp is not None))
        return out

    def nudge(self, node: str, work: Sequence[Work], *, force: bool) -> list[str]:
        refused = []
        for pod in work:
            if pod.protected and not force:
                continue
            why = self._evict(pod.id)
            if why:
                refused.append(why)
        return refused

    def checkpoint(self, node: str, work: Sequence[Work], signal: str) -> None:
        try:
            self.signal_jobs(node, [w.id for w in work], signal)
        except DrainError as exc:  # no kill in the image: the evictions' SIGTERM still comes
            log.warning("%s: checkpoint signal not sent, evicting anyway: %s", node, exc)
        self.nudge(node, work, force=True)

    def signal_jobs(self, node: str, job_ids: Sequence[str], signal: str) -> bool:
        """``kill -<signal> 1`` in every container of each pod (the exec subresource)."""
        if not SIGNAL.match(signal):
            raise DrainError(f"kubernetes: {signal!r} is not a signal name")
        for key in job_ids:
            namespace, name = _split(key)
            try:
                pod = self._call(f"read pod {key}", self.api().read_namespaced_pod, name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    continue  # it ended meanwhile
                raise DrainError(f"kubernetes: cannot read {key}: {exc.status} {exc.reason}") from None
            for container in pod.spec.containers or []:
                self._exec(key, container.name, ["kill", f"-{signal.removeprefix('SIG')}", "1"])
        return True

    def _exec(self, key: str, container: str, command: list[str]) -> None:
        namespace, name = _split(key)
        # stream() swaps its client's call_api for a websocket one while it runs: on the
        # shared client, other threads' calls (cordons, evictions, readiness) went over
        # the websocket and failed ("0 Handshake status 200 OK", seen at 1,000 nodes).
        shared = self.api().api_client
        own = client.ApiClient(shared.configuration)

        def run() -> Any:
            ws = stream(client.CoreV1Api(own).connect_get_namespaced_pod_exec, name, namespace,
                        command=command, container=container, stdin=False, stdout=True,
                        stderr=True, tty=False, _preload_content=False,
                        _request_timeout=self.timeout_s)
            ws.run_forever(timeout=self.timeout_s)
            return ws.returncode

        try:
            # The WebSocket's handshake has no time limit of its own: the whole exec is one
            # of the client's bounded calls (the handshake, then run_forever's timeout).
            within = getattr(shared, "within", None)
            code = within(3 * self.timeout_s, run, f"exec in {key}") if within else run()
        except ApiException as exc:
            if exc.status == 404:
                return
            raise DrainError(f"kubernetes: exec in {key}: {exc.status} {exc.reason}") from None
        except Exception as exc:  # websocket errors have no common base
            raise DrainError(f"kubernetes: exec in {key} failed ({type(exc).__name__})") from None
        finally:
            own.close()  # type: ignore[no-untyped-call]
        if code:
            raise DrainError(f"kubernetes: {' '.join(command)} in {key}/{container} exited {code}")

    def evacuate(self, node: str, work: Sequence[Work]) -> None:
        for pod in work:
            namespace, name = _split(pod.id)
            try:
                self._call(f"delete pod {pod.id}", self.api().delete_namespaced_pod, name, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise DrainError(f"kubernetes: cannot delete {pod.id}: "
                                     f"{exc.status} {exc.reason}") from None

    def release_jobs(self, node: str, job_ids: Sequence[str]) -> dict[str, str]:
        """Evict each pod through the Eviction API (its controller recreates it elsewhere;
        a PodDisruptionBudget's 429 is returned as a refusal and retried later)."""
        refused = {}
        for key in job_ids:
            why = self._evict(key)
            if why:
                refused[key] = why
        return refused

    def _evict(self, key: str) -> str | None:
        namespace, name = _split(key)
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=name, namespace=namespace))
        try:
            self._call(f"evict {key}", self.api().create_namespaced_pod_eviction, name, namespace, body)
        except ApiException as exc:
            if exc.status == 404:
                return None  # already gone
            if exc.status == 429:
                return f"{key}: {exc.reason or 'TooManyRequests'} (disruption budget)"
            raise DrainError(f"kubernetes: cannot evict {key}: {exc.status} {exc.reason}") from None
        return None

    def readiness(self, node: str) -> Readiness:
        records = self._cache()
        if records is None:
            try:
                answer = self._call(f"read node {node}", self.api().read_node, node,
                                    _preload_content=False)
            except ApiException as exc:
                if exc.status == 404:
                    return Readiness(False, f"kubernetes has no node {node} yet")
                return _no_answer(exc)
            except DrainError as exc:
                return Readiness(False, str(exc), known=False)
            records = _records([json.loads(answer.data)])
        return self._readiness_in(records, node)

    def readiness_many(self, nodes: Sequence[str]) -> dict[str, Readiness]:
        """Many booting nodes at once: from the watch cache where there is one that is
        listed and watching, else one LIST of the cluster's nodes (from the API server's
        cache): at 1,000 nodes a GET each took the advance 424 s against the API server."""
        records = self._cache()
        if records is None:
            if len(nodes) <= 1:
                return {n: self.readiness(n) for n in nodes}
            try:
                answer = self._call("list nodes", self.api().list_node, resource_version="0",
                                    _preload_content=False)
            except ApiException as exc:
                return dict.fromkeys(nodes, _no_answer(exc))
            except DrainError as exc:
                return dict.fromkeys(nodes, Readiness(False, str(exc), known=False))
            records = _records(json.loads(answer.data).get("items") or [])
        return {n: self._readiness_in(records, n) for n in nodes}

    def _cache(self) -> Mapping[str, NodeRecord] | None:
        return self.cached() if self.cached is not None else None

    def _readiness_in(self, records: Mapping[str, NodeRecord], node: str) -> Readiness:
        rec = records.get(node)
        return self._readiness_of(rec) if rec is not None else Readiness(
            False, f"kubernetes has no node {node} yet")

    def _readiness_of(self, node: NodeRecord) -> Readiness:
        if not node.ready:
            return Readiness(False, "node not Ready")
        if node.cordoned:
            return Readiness(False, "node is cordoned")
        problem = self._advertised(node.labels, node.allocatable)
        if problem:
            return Readiness(False, f"node Ready but {problem}")
        return Readiness(True, "node Ready, GPUs advertised")

    def _advertised(self, labels: dict[str, str], amounts: dict[str, float]) -> str | None:
        """Why the advertised GPU resources (parsed: ``gpu_resources``) are not (yet) what
        the instance type has."""
        odd = sorted(k for k, v in amounts.items() if not 0 <= v < math.inf)
        if odd:  # "nan", "inf", "-1": never what a device plugin advertises
            return f"it advertises {', '.join(f'{amounts[k]:g} {k}' for k in odd)}: not a number of GPUs"
        res = {k: int(v) for k, v in amounts.items() if v > 0}
        if not res:
            return "its device plugin advertises no GPUs yet"
        type_name = labels.get(TYPE)
        gpus = self._gpus_of(type_name) if type_name else None
        if gpus is None:
            return None  # unknown type: any advertised GPU resource will do
        label = labels.get(REPLICAS) or "1"
        replicas = int(label) if label.isdigit() and len(label) <= 3 else 0
        if replicas < 1:  # a label is input: "x" or "0" is no number of replicas
            return f"its label {REPLICAS}={label[:20]!r} is not a number of replicas"
        mig = {k: v for k, v in res.items() if k.startswith(MIG_PREFIX)}
        if mig:
            uneven = sorted(k for k, v in mig.items() if v % gpus)
            if uneven:
                return f"it advertises {', '.join(f'{mig[k]} {k}' for k in uneven)}: not the same " \
                       f"MIG slices on each of the {gpus} GPUs of {type_name}"
            return None
        count = res.get(SHARED, res.get(GPU, 0))
        if count != gpus * replicas:
            what = SHARED if SHARED in res else GPU
            return (f"it advertises {count} {what}; {type_name} has {gpus} GPU(s)"
                    + (f" x {replicas} replicas" if replicas > 1 else ""))
        return None

    def _gpus_of(self, type_name: str) -> int | None:
        for cloud in ("aws", "alicloud"):
            try:
                return self.catalog.get(cloud, type_name).gpus
            except CatalogError:
                continue
        return None

    def forget(self, node: str) -> None:
        """The instance is gone: delete its Node object (nothing else would in the sandbox)."""
        try:
            self._call(f"delete node {node}", self.api().delete_node, node)
        except ApiException as exc:
            if exc.status != 404:
                raise DrainError(f"kubernetes: cannot delete node {node}: "
                                 f"{exc.status} {exc.reason}") from None


def _records(items: Sequence[Any]) -> dict[str, NodeRecord]:
    """Nodes the API server answered (raw JSON), as the watch cache keeps them
    (``node_record``), by name."""
    found = (node_record(o) for o in items if isinstance(o, dict))
    return {rec.name: rec for rec in found if rec is not None}


def _no_answer(exc: ApiException) -> Readiness:
    """A refusal that says nothing about the node (throttled, a server error, no answer at
    all) is unknown."""
    status = exc.status or 0  # 0: the client failed before any answer
    return Readiness(False, f"kubernetes: {exc.status} {exc.reason}",
                     known=400 <= status < 500 and status != 429)


def _node_bound(meta: client.V1ObjectMeta) -> bool:
    """DaemonSet and static pods belong to the node and die with it: never evicted."""
    if MIRROR in (meta.annotations or {}):
        return True
    return any(ref.kind == "DaemonSet" for ref in meta.owner_references or [])


def kubernetes_drainer(api: client.CoreV1Api | None = None,
                       config: KubernetesConfig | None = None,
                       cached: NodeCache | None = None) -> PhasedDrainer:
    return PhasedDrainer(KubernetesOps(api, config, cached=cached))
