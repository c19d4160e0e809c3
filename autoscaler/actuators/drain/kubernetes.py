"""Draining Kubernetes nodes through the API server (the official client).

* cordon: ``spec.unschedulable = true``;
* before the drain deadline, pods are evicted through the Eviction API, which honours
  PodDisruptionBudgets: a 429 refusal is retried on the next step. Pods annotated
  ``gpu-autoscaler/do-not-disrupt: "true"`` are *not* evicted before the deadline and keep
  the node from counting as drained, so a long training run can finish;
* at the deadline every pod is evicted, the protected ones too (eviction sends SIGTERM
  and honours the pod's termination grace period: Kubernetes' own checkpoint signal, so
  the pool's ``checkpoint_signal`` does not apply here), still retrying PDB refusals;
* after ``checkpoint_grace`` the pods still there are deleted. A drain is therefore
  bounded by ``drain_timeout + checkpoint_grace`` even when a PDB never allows an
  eviction, like the drain timeout of a Slurm node;
* DaemonSet and static (mirror) pods are left alone: they die with the node.

Kubernetes node names are fleet node names.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from autoscaler.actuators.drain.base import DrainError, PhasedDrainer, Readiness, Work
from autoscaler.signals.config import KubernetesConfig
from autoscaler.signals.kubernetes import KubernetesReader

DO_NOT_DISRUPT = "gpu-autoscaler/do-not-disrupt"
MIRROR = "kubernetes.io/config.mirror"
NOT_DONE = "status.phase!=Succeeded,status.phase!=Failed"


def _key(namespace: str, name: str) -> str:
    return f"{namespace}/{name}"


def _split(key: str) -> tuple[str, str]:
    namespace, _, name = key.partition("/")
    return namespace, name


class KubernetesOps:
    kind = "kubernetes"

    def __init__(self, api: client.CoreV1Api | None = None, config: KubernetesConfig | None = None,
                 timeout_s: float = 10.0):
        if api is None and config is None:
            raise ValueError("give the Kubernetes drainer an API client or a KubernetesConfig")
        self._api = api
        self.config = config
        self.timeout_s = config.timeout.total_seconds() if config is not None else timeout_s
        self.evictions: list[str] = []  # pods evicted or deleted, for status and tests

    def api(self) -> client.CoreV1Api:
        if self._api is None:
            # Same connection rules as the signal reader (host or kubeconfig, token, CA).
            self._api = KubernetesReader(self.config)._connect()  # type: ignore[arg-type]
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
                            protected=annotations.get(DO_NOT_DISRUPT, "").lower() == "true",
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
        self.nudge(node, work, force=True)

    def signal_jobs(self, node: str, job_ids: Sequence[str], signal: str) -> bool:
        # The API can only evict or delete a pod; signalling its process would need exec
        # rights into every namespace. Long pods are reported, never disturbed.
        return False

    def evacuate(self, node: str, work: Sequence[Work]) -> None:
        for pod in work:
            namespace, name = _split(pod.id)
            try:
                self._call(f"delete pod {pod.id}", self.api().delete_namespaced_pod, name, namespace)
            except ApiException as exc:
                if exc.status != 404:
                    raise DrainError(f"kubernetes: cannot delete {pod.id}: "
                                     f"{exc.status} {exc.reason}") from None
            self.evictions.append(f"deleted {pod.id}")

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
        self.evictions.append(f"evicted {key}")
        return None

    def readiness(self, node: str) -> Readiness:
        try:
            obj = self._call(f"read node {node}", self.api().read_node, node)
        except ApiException as exc:
            if exc.status == 404:
                return Readiness(False, f"kubernetes has no node {node} yet")
            return Readiness(False, f"kubernetes: {exc.status} {exc.reason}")
        except DrainError as exc:
            return Readiness(False, str(exc))
        conditions = (obj.status.conditions or []) if obj.status else []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        if not ready:
            return Readiness(False, "node not Ready")
        if obj.spec is not None and obj.spec.unschedulable:
            return Readiness(False, "node is cordoned")
        return Readiness(True, "node Ready")

    def forget(self, node: str) -> None:
        """Nothing: the cloud controller manager deletes Node objects of gone instances."""
        return None


def _node_bound(meta: client.V1ObjectMeta) -> bool:
    """DaemonSet and static pods belong to the node and die with it: never evicted."""
    if MIRROR in (meta.annotations or {}):
        return True
    return any(ref.kind == "DaemonSet" for ref in meta.owner_references or [])


def kubernetes_drainer(api: client.CoreV1Api | None = None,
                       config: KubernetesConfig | None = None) -> PhasedDrainer:
    return PhasedDrainer(KubernetesOps(api, config))
