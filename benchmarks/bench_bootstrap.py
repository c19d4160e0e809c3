"""Bootstrap of 1 vs 6 sandbox GPU nodes with the real playbook, in one run.

Each node is an SSH test host in a network namespace with 4 fake T4 GPUs; the play runs
every role (tasks needing NVIDIA hardware or third-party repositories are skipped) and
joins a real Slurm cluster, exactly as the playbook tests do. One batch of 1 fresh host is
timed, then one batch of 6 other fresh hosts: Ansible configures the hosts of a batch in
parallel, so the second should take far less than 6 times the first.

Each batch line also splits the CPU time: the controller (ansible-playbook and its ssh
clients) and the test hosts (sshd and everything the play runs there, mostly Python
importing Ansible's module code for each task). On real nodes the second part runs on each
node's own CPUs; here all hosts share this machine's cores with the controller, which caps
how much a batch of 6 can gain from parallelism.

Prints one line per batch, then `bootstrap_s_1=<a> bootstrap_s_6=<b> ratio=<b/a>`.
Needs root (network namespaces), sshd, slurmctld/slurmd and munge.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

from autoscaler.actuators.ansible import AnsibleActuator
from autoscaler.catalog.catalog import default_catalog
from autoscaler.fleet.lifecycle import NodeState
from autoscaler.fleet.node import Node
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.fake_nvidia_smi import FakeGpu
from autoscaler.sandbox.gpu_nodes import SandboxGpuNodes, controller_address

NOW_FIELDS = {"state_since": "2026-11-30T12:00:00Z", "created_at": "2026-11-30T12:00:00Z"}


def policy() -> TeamPolicy:
    return TeamPolicy.model_validate({
        "team": "bench", "pools": [{
            "name": "train", "cloud": "aws", "region": "us-east-1", "max_nodes": 16,
            "instance_types": ["g4dn.12xlarge"],
            "bootstrap": {"sharing": "mps"}, "cluster": {"kind": "slurm", "partition": "gpu"},
        }]})


def node(name: str) -> Node:
    return Node.model_validate({
        "name": name, "team": "bench", "pool": "train", "cloud": "aws", "region": "us-east-1",
        "instance_type": "g4dn.12xlarge", "market": "on-demand",
        "state": NodeState.BOOTSTRAPPING, **NOW_FIELDS})


def controller_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def hosts_cpu_s(lab: SandboxGpuNodes, names: list[str]) -> float:
    """CPU of each host's sshd and the sessions it has reaped (what the play ran there)."""
    total = 0
    for name in names:
        sshd = lab.hosts.hosts[name].sshd
        if sshd is not None:
            fields = Path(f"/proc/{sshd.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def timed(actuator: AnsibleActuator, names: list[str], lab: SandboxGpuNodes) -> float:
    started, ctl0, hosts0 = time.monotonic(), controller_cpu_s(), hosts_cpu_s(lab, names)
    run = actuator.bootstrap([node(n) for n in names], {"bench": policy()},
                             secrets=lab.secrets())
    elapsed = time.monotonic() - started
    if run.failed:
        details = {n: (r.failed_task, r.message) for n, r in run.hosts.items() if n in run.failed}
        sys.exit(f"bootstrap failed on {run.failed}: {details}\nlogs: {run.run_dir}")
    time.sleep(1)  # let sshd reap the sessions of the connections just closed
    print(f"batch of {len(names)}: {elapsed:.1f}s wall, {run.changed_total()} changes; "
          f"CPU: controller {controller_cpu_s() - ctl0:.1f}s, "
          f"test hosts {hosts_cpu_s(lab, names) - hosts0:.1f}s")
    return elapsed


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
    t4 = FakeGpu("Tesla T4")
    with tempfile.TemporaryDirectory(prefix="bench-bootstrap-") as tmp, \
            controller_address() as controller, \
            SandboxGpuNodes(Path(tmp), {n: [t4] * 4 for n in single + batch},
                            controller=controller) as lab:
        settings = lab.ansible_settings(Path(tmp) / "runs",
                                        control_persist=args.control_master == "auto")
        actuator = AnsibleActuator(settings, lab.address_of, catalog=default_catalog())
        t1 = timed(actuator, single, lab)
        tn = timed(actuator, batch, lab)
        cluster = lab.cluster
        if cluster is not None:
            for name in single + batch:
                cluster.wait_node_state(name, {"idle"}, timeout=30)
            print(f"all {len(single + batch)} nodes idle in Slurm with their GPUs")
    print(f"bootstrap_s_1={t1:.1f} bootstrap_s_{len(batch)}={tn:.1f} ratio={tn / t1:.2f}")


if __name__ == "__main__":
    main()
