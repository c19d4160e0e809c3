"""Boot and bootstrap of sandbox GPU nodes with the real playbook: 1 vs 6 hosts, in one run.

Each node is the sandbox's node image (minimal Debian 12, cached) booted with systemd in
its own network namespace, with 4 fake T4 GPUs; the play runs every role (tasks needing
NVIDIA hardware or third-party repositories are skipped), reboots the node once (the fake
driver loads after a boot with nouveau blacklisted) and joins a real Slurm cluster, as the
playbook tests do. First one host is booted alone and timed until sshd answers; then one
batch of 1 fresh host is bootstrapped, then one batch of 6 other fresh hosts.

Each batch line splits the CPU time: the controller (ansible-playbook and its ssh clients)
and the test hosts (every process in their namespaces, with the children they reaped:
sshd, the modules' Python, systemd). The per-host CPU must not grow with the batch; the
wall-clock ratio is bounded by the two shared cores the hosts and the controller use.

Last line: `boot_to_ssh_s=<a> bootstrap_s_1=<b> bootstrap_s_6=<c> cpu_s_per_host_6_over_1=<d>`.
Needs root, systemd-nspawn (systemd-container), mmdebstrap (or a cached image),
slurmctld/slurmd and munge.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.actuators.ansible import AnsibleActuator
from autoscaler.catalog.catalog import default_catalog
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.policy.models import Market, TeamPolicy
from autoscaler.sandbox.fakes.nvidia_smi import FakeGpu
from autoscaler.sandbox.hosts import netns
from autoscaler.sandbox.hosts.gpu_nodes import SandboxGpuNodes, controller_address
from autoscaler.sandbox.hosts.ssh_hosts import SshHosts

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def policy() -> TeamPolicy:
    return TeamPolicy.model_validate({
        "team": "bench", "pools": [{
            "name": "train", "cloud": "aws", "region": "us-east-1", "max_nodes": 16,
            "instance_types": ["g4dn.12xlarge"],
            "bootstrap": {"sharing": "mps"}, "cluster": {"kind": "slurm", "partition": "gpu"},
        }]})


def node(name: str) -> Node:
    return Node(name=name, team="bench", pool="train", cloud="aws", region="us-east-1",
                instance_type="g4dn.12xlarge", market=Market.ON_DEMAND,
                state=NodeState.BOOTSTRAPPING, state_since=NOW, created_at=NOW)


def controller_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hosts_cpu_s(lab: SandboxGpuNodes, names: list[str]) -> float:
    """CPU of every process in the hosts' namespaces and of the children they reaped."""
    total = 0
    for name in names:
        for pid in netns.pids_in(lab.hosts.hosts[name].slot):
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def boot_to_ssh_s(workdir: Path) -> float:
    """One host booted alone from the cached image until its sshd answers."""
    with SshHosts(["boot-probe"], workdir) as hosts:
        seconds = hosts.hosts["boot-probe"].boot_seconds
    if seconds is None:
        sys.exit("the boot probe never answered SSH")
    print(f"boot to ssh (cached image, one host alone): {seconds:.2f}s")
    return seconds


def timed(actuator: AnsibleActuator, names: list[str], lab: SandboxGpuNodes
          ) -> tuple[float, float]:
    started, ctl0, hosts0 = time.monotonic(), controller_cpu_s(), hosts_cpu_s(lab, names)
    run = actuator.bootstrap([node(n) for n in names], {"bench": policy()},
                             secrets=lab.secrets())
    elapsed = time.monotonic() - started
    if run.failed:
        details = {n: (r.failed_task, r.message) for n, r in run.hosts.items() if n in run.failed}
        sys.exit(f"bootstrap failed on {run.failed}: {details}\nlogs: {run.run_dir}")
    time.sleep(1)  # let sshd reap the sessions of the connections just closed
    ctl, hosts = controller_cpu_s() - ctl0, hosts_cpu_s(lab, names) - hosts0
    print(f"batch of {len(names)}: {elapsed:.1f}s wall, {run.changed_total()} changes, "
          f"{sum(lab.hosts.boots(n) - 1 for n in names)} reboots; CPU: controller {ctl:.1f}s, "
          f"test hosts {hosts:.1f}s, {(ctl + hosts) / len(names):.1f}s per host")
    return elapsed, (ctl + hosts) / len(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=6, help="hosts in the parallel batch")
    parser.add_argument("--control-master", choices=["auto", "no"], default="auto",
                        help="SSH connection sharing (auto: the production default)")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_bootstrap needs root (network namespaces)")
    single = ["bench-1"]
    batch = [f"bench-{i}" for i in range(2, args.hosts + 2)]
    with tempfile.TemporaryDirectory(prefix="bench-bootstrap-") as tmp, \
            controller_address() as controller:
        boot = boot_to_ssh_s(Path(tmp) / "probe")
        result = bootstrap_batches(Path(tmp), controller, single, batch, args.control_master)
    (t1, cpu1), (tn, cpun) = result
    print(f"wall ratio {len(batch)} over 1: {tn / t1:.2f} (two shared cores)")
    print(f"boot_to_ssh_s={boot:.2f} bootstrap_s_1={t1:.1f} bootstrap_s_{len(batch)}={tn:.1f} "
          f"cpu_s_per_host_{len(batch)}_over_1={cpun / cpu1:.2f}")


def bootstrap_batches(tmp: Path, controller: str, single: list[str], batch: list[str],
                      control_master: str) -> tuple[tuple[float, float], tuple[float, float]]:
    t4 = FakeGpu("Tesla T4")
    with SandboxGpuNodes(tmp / "lab", {n: [t4] * 4 for n in single + batch},
                         controller=controller) as lab:
        settings = lab.ansible_settings(tmp / "runs", control_persist=control_master == "auto")
        actuator = AnsibleActuator(settings, lab.address_of, catalog=default_catalog())
        first = timed(actuator, single, lab)
        many = timed(actuator, batch, lab)
        cluster = lab.cluster
        if cluster is not None:
            for name in single + batch:
                cluster.wait_node_state(name, {"idle"}, timeout=60)
            print(f"all {len(single + batch)} nodes idle in Slurm with their GPUs")
    return first, many


if __name__ == "__main__":
    main()
