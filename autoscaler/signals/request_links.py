"""Whether the objects capacity requests are linked to have ended: positive evidence only.

A request linked to a Slurm job, a Kubernetes pod, a Kubernetes job or a label selector
is released when that ends. Only an answer that says so counts:

* Slurm job: every record in an ended state (``slurm_jobs.ended_jobs``);
* pod: phase ``Succeeded`` or ``Failed``;
* job (batch/v1): a ``Complete`` or ``Failed`` condition that is ``True``;
* selector: at least one pod matches (in any namespace) and every one has ended.

An error, a timeout (each whole call is bounded: ``schedulers/kubernetes/bounded_api``) or
an object that is gone (404) is no evidence either way: the request keeps its nodes until
its ttl. Names and selectors have a closed syntax
(``fleet/request_spec.py``) and go to the API as path parts and query values only.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from autoscaler.model.request_spec import Link
from autoscaler.schedulers.kubernetes.client import KubernetesConfig, api_client
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.schedulers.slurm.jobs import ended_jobs

log = logging.getLogger(__name__)
POD_ENDED = frozenset({"Succeeded", "Failed"})


def _pod_ended(pod: Any) -> bool:
    return bool(pod.status is not None and pod.status.phase in POD_ENDED)


def _job_ended(job: Any) -> bool:
    conditions = (job.status.conditions if job.status is not None else None) or []
    return any(c.type in ("Complete", "Failed") and c.status == "True" for c in conditions)


@dataclass
class KubeLinks:
    core: client.CoreV1Api
    batch: client.BatchV1Api
    timeout_s: float = 10.0

    @classmethod
    def connect(cls, cfg: KubernetesConfig) -> KubeLinks:
        api = api_client(cfg)
        return cls(client.CoreV1Api(api), client.BatchV1Api(api), cfg.timeout.total_seconds())

    def ended(self, link: Link) -> bool:
        t = self.timeout_s
        if link.kubernetes_pod is not None:
            ns, name = link.kubernetes_pod.split("/", 1)
            return _pod_ended(self.core.read_namespaced_pod(name, ns, _request_timeout=t))
        if link.kubernetes_job is not None:
            ns, name = link.kubernetes_job.split("/", 1)
            return _job_ended(self.batch.read_namespaced_job(name, ns, _request_timeout=t))
        if link.kubernetes_selector is not None:
            pods = self.core.list_pod_for_all_namespaces(
                label_selector=link.kubernetes_selector, _request_timeout=t).items
            return bool(pods) and all(_pod_ended(p) for p in pods)
        return False


@dataclass
class LinkWatcher:
    """``ended(links) -> keys``, asking Slurm and Kubernetes (whichever is configured)."""

    slurm: SlurmConfig | None = None
    kube: KubeLinks | None = None

    def __call__(self, links: Iterable[Link]) -> frozenset[str]:
        links = list(links)
        out: set[str] = set()
        jobs = [link.slurm_job for link in links if link.slurm_job is not None]
        if jobs and self.slurm is not None:
            out |= {f"slurm_job={j}" for j in ended_jobs(self.slurm, jobs)}
        for link in links:
            if link.slurm_job is not None or self.kube is None:
                continue
            try:
                if self.kube.ended(link):
                    out.add(link.key())
            except (ApiException, HTTPError, OSError, ValueError) as exc:  # no evidence either way
                log.debug("linked %s: no answer (%s)", link.describe(), type(exc).__name__)
        return frozenset(out)


__all__ = ["KubeLinks", "LinkWatcher"]
