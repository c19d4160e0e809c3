"""The sandbox's Kubernetes cluster: the fake API server plus its simple-bind scheduler.

Started by ``SandboxStack`` when a pool has ``cluster.kind: kubernetes`` (as the Slurm
cluster is for Slurm pools). The API server listens on the shared controller address
(169.254.77.254, on ``lo`` and routed from every node's namespace), so a booted node's
``kubeadm join`` (``fake_kubeadm``) reaches it as the service does. A thread binds pending
pods that fit every ``interval`` seconds (``FakeKube.schedule``), standing in for
kube-scheduler. Joining nodes present a bootstrap token: one per sandbox, passed to Ansible
as a secret (never in service.yaml).
"""

from __future__ import annotations

import logging
import secrets
import threading

from autoscaler.sandbox.fakes.kube import FakeKube

log = logging.getLogger(__name__)
CA_CERT_HASH = "sha256:" + "0" * 64  # no TLS in the sandbox: the join checks nothing
TOKEN_ENV = "GAS_SANDBOX_K8S_TOKEN"


class SandboxKube:
    def __init__(self, host: str, interval: float = 1.0):
        self.kube = FakeKube(host=host)
        self.interval = interval
        # kubeadm's bootstrap token syntax: [a-z0-9]{6}.[a-z0-9]{16}
        self.token = f"{secrets.token_hex(3)}.{secrets.token_hex(8)}"
        self.kube.join_token = self.token
        self.bound: list[tuple[str, str]] = []  # (pod, node), in the order bound
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return self.kube.url

    @property
    def endpoint(self) -> str:
        """host:port, what ``kubeadm join`` is given."""
        return self.kube.url.removeprefix("http://")

    def start(self) -> SandboxKube:
        self.kube.start()
        self._thread = threading.Thread(target=self._run, name="fake-kube-scheduler", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                for pod, node in self.kube.schedule():
                    self.bound.append((pod, node))
                    log.info("sandbox kube: bound %s to %s", pod, node)
            except Exception:  # a pod changed under us: the next pass sees it again
                log.exception("sandbox kube: scheduling pass failed")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.kube.stop()
