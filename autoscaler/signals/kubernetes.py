"""Kubernetes demand and node state through the official client (two list calls per tick).

* Pending demand: pods requesting ``nvidia.com/gpu`` whose ``PodScheduled`` condition is
  False with reason ``Unschedulable`` -> ``PendingJob(id="ns/name", reason="Unschedulable")``.
* Pool: the pod's ``gpu-autoscaler/team`` + ``gpu-autoscaler/pool`` (node selector or
  required node affinity ``In``), else the config's namespace rules, else namespace ==
  team name; without a pool label the team's first kubernetes pool that fits the GPU model.
* GPU model: ``gpu-autoscaler/gpu-model`` or ``nvidia.com/gpu.product`` (GPU feature
  discovery, e.g. ``Tesla-T4``) in the selector.
* Nodes: GPU pods per node, allocatable GPUs, ``Ready`` condition, ``spec.unschedulable``.
  Kubernetes node names are fleet node names.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError, NewConnectionError
from urllib3.exceptions import TimeoutError as Urllib3Timeout

from autoscaler.engine.snapshot import PendingJob, RunningJob, SchedulerNode
from autoscaler.signals.config import KubernetesConfig, SecretError, read_secret
from autoscaler.signals.readings import PoolRef, SchedulerReading, first_fitting

GPU = "nvidia.com/gpu"
TEAM_LABEL = "gpu-autoscaler/team"
POOL_LABEL = "gpu-autoscaler/pool"
MODEL_LABEL = "gpu-autoscaler/gpu-model"
PRODUCT_LABEL = "nvidia.com/gpu.product"
KNOWN_MODELS = ("A10G", "A100", "H100", "V100", "P100", "K80", "T4", "L4", "A10")
DONE_PHASES = "status.phase!=Succeeded,status.phase!=Failed"


def quantity(value: Any) -> float:
    """Kubernetes quantities as numbers: ``"2"``, ``"500m"``."""
    text = str(value or "0").strip()
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    try:
        return float(text)
    except ValueError:
        return 0.0


def pod_gpus(spec: client.V1PodSpec) -> float:
    """Effective GPU request: max(sum over containers, largest init container)."""
    def one(container: client.V1Container) -> float:
        res = container.resources
        if res is None:
            return 0.0
        amount = (res.requests or {}).get(GPU)
        if amount is None:
            amount = (res.limits or {}).get(GPU)
        return quantity(amount)

    main = sum((one(c) for c in spec.containers or []), 0.0)
    init = max((one(c) for c in spec.init_containers or []), default=0.0)
    return max(main, init)


def selector_labels(spec: client.V1PodSpec) -> dict[str, str]:
    """nodeSelector plus single-valued ``In`` terms of required node affinity."""
    out = dict(spec.node_selector or {})
    affinity = spec.affinity.node_affinity if spec.affinity else None
    required = affinity.required_during_scheduling_ignored_during_execution if affinity else None
    for term in (required.node_selector_terms or []) if required else []:
        for expr in term.match_expressions or []:
            if expr.operator == "In" and expr.values and len(expr.values) == 1:
                out.setdefault(expr.key, expr.values[0])
    return out


def gpu_model_of(labels: dict[str, str]) -> str | None:
    if labels.get(MODEL_LABEL):
        return labels[MODEL_LABEL]
    product = labels.get(PRODUCT_LABEL, "").upper()
    for model in KNOWN_MODELS:
        if re.search(rf"(^|[^A-Z0-9]){model}([^A-Z0-9]|$)", product):
            return model
    return None


def unschedulable(pod: client.V1Pod) -> bool:
    if pod.status is None or pod.status.phase != "Pending" or pod.spec is None or pod.spec.node_name:
        return False
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in pod.status.conditions or [])


class KubernetesReader:
    def __init__(self, cfg: KubernetesConfig, api: client.CoreV1Api | None = None):
        self.config = cfg
        self._api = api

    def _connect(self) -> client.CoreV1Api:
        if self._api is not None:
            return self._api
        cfg = self.config
        if cfg.host is None:
            api_client = config.new_client_from_config(  # type: ignore[no-untyped-call]
                config_file=str(cfg.kubeconfig))
        else:
            conf = client.Configuration()
            conf.host = cfg.host
            conf.verify_ssl = cfg.verify
            conf.retries = False  # fail fast: no retries inside a tick
            if cfg.ca_file is not None:
                conf.ssl_ca_cert = str(cfg.ca_file)
            token = read_secret(cfg.token_env, cfg.token_file, "kubernetes token")
            if token:
                conf.api_key = {"authorization": token}
                conf.api_key_prefix = {"authorization": "Bearer"}
            api_client = client.ApiClient(conf)
        self._api = client.CoreV1Api(api_client)
        return self._api

    def read(self, refs: list[PoolRef]) -> SchedulerReading:
        timeout = self.config.timeout.total_seconds()
        try:
            api = self._connect()
            nodes = api.list_node(_request_timeout=timeout).items
            pods = api.list_pod_for_all_namespaces(field_selector=DONE_PHASES,
                                                   _request_timeout=timeout).items
        except ApiException as exc:
            return SchedulerReading(error=f"kubernetes: API answered {exc.status} {exc.reason}",
                                    source="kubernetes api")
        except (HTTPError, OSError) as exc:
            # urllib3 2 makes "connection refused" (NewConnectionError) a TimeoutError too.
            if isinstance(exc, Urllib3Timeout) and not isinstance(exc, NewConnectionError):
                why = f"API timed out after {timeout:g}s"
            else:
                why = f"API unreachable ({type(exc).__name__})"
            return SchedulerReading(error=f"kubernetes: {why}", source="kubernetes api")
        except SecretError as exc:
            return SchedulerReading(error=f"kubernetes: {exc}", source="kubernetes api")
        return self.assemble(nodes, pods, refs)

    def assemble(self, nodes: Iterable[client.V1Node], pods: Iterable[client.V1Pod],
                 refs: list[PoolRef]) -> SchedulerReading:
        pending: dict[str, list[PendingJob]] = {ref.key: [] for ref in refs}
        unattributed: list[PendingJob] = []
        running: dict[str, list[RunningJob]] = {}
        for pod in pods:
            spec, meta = pod.spec, pod.metadata
            if spec is None or meta is None or not meta.name or not meta.namespace:
                continue
            gpus = pod_gpus(spec)
            if gpus <= 0:
                continue
            key = f"{meta.namespace}/{meta.name}"
            if spec.node_name:
                started = pod.status.start_time if pod.status else None
                running.setdefault(spec.node_name, []).append(
                    RunningJob(id=key, gpus=gpus, started_at=started, name=meta.name))
            elif unschedulable(pod):
                labels = selector_labels(spec)
                job = PendingJob(id=key, gpus=gpus, reason="Unschedulable",
                                 submitted_at=meta.creation_timestamp,
                                 gpu_model=gpu_model_of(labels))
                ref = self.pool_for(meta.namespace, labels, job.gpu_model, refs)
                (pending[ref.key] if ref else unattributed).append(job)
        sched = {}
        for node in nodes:
            name = node.metadata.name if node.metadata else None
            if name:
                sched[name] = self._node(node, running.get(name, []))
        return SchedulerReading(nodes=sched, pending=pending, unattributed=unattributed,
                                source="kubernetes api")

    def pool_for(self, namespace: str, labels: dict[str, str], model: str | None,
                 refs: list[PoolRef]) -> PoolRef | None:
        team, pool = labels.get(TEAM_LABEL), labels.get(POOL_LABEL)
        if team is None:
            for rule in self.config.namespace_teams:
                if rule.matches(namespace):
                    team, pool = rule.team, pool or rule.pool
                    break
            else:
                team = namespace
        candidates = [r for r in refs if r.team == team]
        if pool is not None:
            exact = [r for r in candidates if r.pool.name == pool]
            return exact[0] if exact else None
        return first_fitting(candidates, model)

    @staticmethod
    def _node(node: client.V1Node, jobs: list[RunningJob]) -> SchedulerNode:
        total = quantity((node.status.allocatable or {}).get(GPU)) if node.status else 0.0
        allocated = sum(j.gpus for j in jobs)
        cordoned = bool(node.spec.unschedulable) if node.spec else False
        conditions = (node.status.conditions or []) if node.status else []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        if not ready:
            state = "down"
        elif cordoned:
            state = "draining" if jobs else "drained"
        elif allocated <= 0:
            state = "idle"
        else:
            state = "allocated" if allocated >= total else "mixed"
        return SchedulerNode(state=state, gpus_total=total, gpus_allocated=allocated, jobs=jobs,
                             cordoned=cordoned, ready=ready)
