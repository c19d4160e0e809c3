"""Sandbox GPU nodes: booted test hosts with fake GPUs that join a real Slurm cluster.

What the playbook tests and the bootstrap benchmark give the Ansible actuator instead of
cloud instances. The hosts are ``SshHosts`` (the node image booted with systemd, one
container per node in its network namespace); each gets the fake NVIDIA stack of
``fake_nvidia_smi`` for its GPUs and its host name in its overlay, as a cloud instance
gets its name at first boot; the cluster is a ``SlurmCluster`` whose ``slurm.conf``
declares every host as a remote node at its namespace address, with the controller on the
shared address 169.254.77.254 (RECIPES.md).

``ansible_settings()`` and ``secrets()`` are what the actuator needs to bootstrap them:
tasks needing NVIDIA hardware or third-party repositories skipped, the cluster's
slurm.conf and munge key.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from autoscaler.actuators.ansible.settings import AnsibleSettings
from autoscaler.model.node import Node
from autoscaler.sandbox.fakes.nvidia_smi import FakeGpu, node_files
from autoscaler.sandbox.hosts import netns
from autoscaler.sandbox.hosts.overlay import NodeFile
from autoscaler.sandbox.hosts.ssh_hosts import SshHosts
from autoscaler.sandbox.services.slurm import SlurmCluster, SlurmNodeSpec

CONTROLLER_ADDRESS = netns.CONTROLLER_ADDRESS
SANDBOX_SKIP_TAGS = ("gpu-hardware", "external-repo")


@contextlib.contextmanager
def controller_address() -> Iterator[str]:
    """The shared address on ``lo`` that namespaced slurmd reach slurmctld on."""
    with netns.CONTROLLER_ON_LO.used():
        yield CONTROLLER_ADDRESS


def gpu_type_of(gpu: FakeGpu) -> str:
    """The GRES type the roles derive from a GPU name ("Tesla T4" -> "t4")."""
    words = gpu.name.lower().split()
    if words and words[0] in ("nvidia", "tesla") and len(words) > 1:
        words = words[1:]
    return words[0].split("-")[0] if words else "gpu"


class SandboxGpuNodes:
    """``with SandboxGpuNodes(dir, {"gpu-a": [FakeGpu()] * 4}) as lab: ...``

    ``declared_gpus`` overrides what slurm.conf (the instance type) promises for a host,
    e.g. to make a host whose nvidia-smi reports fewer GPUs than its type has.
    ``slurm_nodes``: the hosts declared in slurm.conf (default: all).
    ``dynamic_partitions``: partitions that take dynamic nodes (``slurmd -Z``), e.g. a
    host left out of ``slurm_nodes`` bootstrapped with registration dynamic.
    ``files``: more files per host, placed in its overlay before its first boot.
    """

    def __init__(self, workdir: Path, gpus: Mapping[str, Sequence[FakeGpu]], *,
                 declared_gpus: Mapping[str, int] | None = None,
                 slurm_nodes: Sequence[str] | None = None,
                 dynamic_partitions: Sequence[str] = (),
                 files: Mapping[str, Sequence[NodeFile]] | None = None,
                 controller: str = CONTROLLER_ADDRESS):
        self.workdir = Path(workdir).resolve()
        self.gpus = {name: list(g) for name, g in gpus.items()}
        self.declared = dict(declared_gpus or {})
        self.slurm_nodes = list(self.gpus) if slurm_nodes is None else list(slurm_nodes)
        self.controller = controller
        self.dynamic_partitions = list(dynamic_partitions)
        self.slurm_dir = self.workdir / "slurm"
        extra = dict(files or {})
        placed = {name: [*node_files(g), NodeFile("/etc/hostname", f"{name}\n"),
                         *extra.get(name, [])]
                  for name, g in self.gpus.items()}
        self.hosts = SshHosts(list(self.gpus), self.workdir / "hosts", routes=[controller],
                              files=placed)
        self.cluster: SlurmCluster | None = None
        self._stack = contextlib.ExitStack()

    def start(self) -> SandboxGpuNodes:
        try:
            self._stack.enter_context(self.hosts)
            specs = [SlurmNodeSpec(name, gpus=self.declared.get(name, len(g)),
                                   gpu_type=gpu_type_of(g[0]) if g else "t4", local=False,
                                   addr=self.hosts.address_of(name))
                     for name, g in self.gpus.items() if name in self.slurm_nodes]
            self.cluster = self._stack.enter_context(
                SlurmCluster(self.slurm_dir, specs, controller_addr=self.controller,
                             dynamic_partitions=self.dynamic_partitions))
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self._stack.close()

    def __enter__(self) -> SandboxGpuNodes:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _cluster(self) -> SlurmCluster:
        if self.cluster is None:
            raise RuntimeError("SandboxGpuNodes is not started")
        return self.cluster

    def address_of(self, node: Node) -> str:
        """The actuator's resolver seam: a node name -> its namespace address."""
        return self.hosts.address_of(node.name)

    def ansible_settings(self, runs_dir: Path, **overrides: Any) -> AnsibleSettings:
        cluster = self._cluster()
        extra_vars: dict[str, object] = {
            "cluster_join_slurm_conf_src": str(cluster.slurm_conf),
            # Its hosts are named in slurm.conf (the mode for Slurm before 22.05).
            "cluster_join_slurm_registration": "declared",
            **overrides.pop("extra_vars", {}),
        }
        base: dict[str, Any] = {
            "runs_dir": runs_dir, "ssh_port": self.hosts.port,
            "private_key_file": self.hosts.private_key, "ssh_user": self.hosts.user,
            "skip_tags": list(SANDBOX_SKIP_TAGS), "forks": max(10, len(self.gpus)),
            "extra_vars": extra_vars,
        }
        return AnsibleSettings(**{**base, **overrides})

    def secrets(self) -> dict[str, str]:
        key = self._cluster().munge_key.read_bytes()
        return {"cluster_join_munge_key_b64": base64.b64encode(key).decode()}
