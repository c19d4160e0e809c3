"""playbooks/gpu-node.yml over real SSH on booted fresh Debian 12 hosts, joining a real Slurm.

Six test hosts, each the sandbox's minimal node image booted with systemd in its own
network namespace: gpu-a/b/c (Slurm pool, 4 fake T4 GPUs each), gpu-d (Slurm pool, but its
fake nvidia-smi reports 2 of the instance type's 4 GPUs), gpu-e (Kubernetes pool, with
a fake kubeadm) and gpu-m (Slurm MIG pool: 8 fake A100 40GB in MIG mode, an image that
already blacklists nouveau; it joins as a dynamic node, the others are declared in
slurm.conf). The fixture, never the roles, places the fake NVIDIA stack and kubeadm.
Tasks tagged gpu-hardware (NVIDIA hardware or repositories) and external-repo (pkgs.k8s.io)
are skipped; everything else runs, services through systemd, and the nvidia_driver role's
reboot: the fake driver loads only after a boot with nouveau blacklisted. The joined
gpu-a/b/c also serve as a hybrid pool's on-prem nodes (issue 34), with no boot of their own.
Last, gpu-a/b/c rejoin as 15 dynamic nodes of partition burst in turn, each removed again.
"""

from __future__ import annotations

import base64
import dataclasses
import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible import AnsibleActuator, BootstrapRun, HostStatus
from autoscaler.actuators.ansible.settings import KNOWN_HOSTS_DIR
from autoscaler.actuators.drain import PhasedDrainer
from autoscaler.actuators.drain.base import Readiness
from autoscaler.actuators.drain.slurm import SlurmOps
from autoscaler.catalog.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView, Node
from autoscaler.model.plan import Launch, Replace
from autoscaler.model.snapshot import NodeObservation, PoolObservation, Snapshot
from autoscaler.model.snapshot_parts import assemble
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.fakes import nvidia_smi
from autoscaler.sandbox.fakes.nvidia_smi import FakeGpu
from autoscaler.sandbox.hosts.gpu_nodes import CONTROLLER_ADDRESS, SandboxGpuNodes, controller_address
from autoscaler.sandbox.hosts.overlay import NodeFile
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.hosts.ssh_hosts import SshHosts
from autoscaler.sandbox.services.slurm import SlurmCluster
from autoscaler.schedulers.slurm.client import SlurmConfig
from autoscaler.signals.config import SignalsConfig
from autoscaler.signals.reader import SignalReader
from autoscaler.signals.readings import pools_in_priority_order
from autoscaler.signals.slurm import SlurmReader
from tests.builders import make_node, make_policy
from tests.service.executor_rig import launch, make_rig

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(shutil.which("slurmctld") is None, reason="slurmctld not installed"),
]

CONTROLLER = CONTROLLER_ADDRESS
SLURM_HOSTS = ["gpu-a", "gpu-b", "gpu-c", "gpu-d"]
K8S_HOST = "gpu-e"
MIG_HOST = "gpu-m"
# p4d.24xlarge: 8 A100 40GB, each in MIG mode with two 3g.20gb instances (the pool's layout).
MIG_LAYOUT = ("3g.20gb", "3g.20gb")
A100_MIG = FakeGpu("NVIDIA A100-SXM4-40GB", memory_mib=40960, mig=MIG_LAYOUT)
# A partition only dynamic nodes join (its Nodeset): no node name of it is in slurm.conf.
BURST_PARTITION = "burst"
# A bootstrapped host joining again under a new node name: the cluster_join role alone.
JOIN_PLAYBOOK = """- name: Join the cluster
  hosts: all
  become: "{{ gpu_node_become | default(true) }}"
  gather_facts: false
  roles:
    - role: cluster_join
"""
K8S_TOKEN = "abcdef.0123456789abcdef"
FAKE_KUBEADM = """#!/bin/sh
# Fake kubeadm placed by the test: checks the join configuration and "joins".
set -e
[ "$1" = join ] && [ "$2" = --config ] || { echo "unexpected: $*" >&2; exit 2; }
grep -q 'token: "abcdef.0123456789abcdef"' "$3" || { echo "no token in $3" >&2; exit 1; }
mkdir -p /etc/kubernetes
echo "joined with $3" > /etc/kubernetes/kubelet.conf
echo "$*" >> /var/log/fake-kubeadm.log
"""


@dataclass
class Lab:
    nodes_lab: SandboxGpuNodes
    actuator: AnsibleActuator
    dynamic: AnsibleActuator  # the same, registering Slurm nodes dynamically (slurmd -Z)
    policies: dict[str, TeamPolicy]
    nodes: dict[str, Node]
    secrets: dict[str, str]
    runs_dir: Path

    @property
    def hosts(self) -> SshHosts:
        return self.nodes_lab.hosts

    @property
    def cluster(self) -> SlurmCluster:
        if self.nodes_lab.cluster is None:
            raise RuntimeError("cluster not started")
        return self.nodes_lab.cluster

    def bootstrap(self, *names: str) -> BootstrapRun:
        return self.actuator.bootstrap([self.nodes[n] for n in names], self.policies,
                                       secrets=self.secrets)


def _policies() -> dict[str, TeamPolicy]:
    pools = [
        {"name": "train", "cloud": "aws", "region": "us-east-1", "max_nodes": 8,
         "instance_types": ["g4dn.12xlarge"],
         "bootstrap": {"sharing": "mps", "mps": {"active_thread_percentage": 50}},
         "cluster": {"kind": "slurm", "partition": "gpu"}},
        {"name": "infer", "cloud": "aws", "region": "us-east-1", "max_nodes": 8,
         "instance_types": ["g4dn.12xlarge"],
         "bootstrap": {"sharing": "time-slicing", "time_slicing_replicas": 4},
         "cluster": {"kind": "kubernetes", "labels": {"workload": "inference"}}},
        {"name": "slices", "cloud": "aws", "region": "us-east-1", "max_nodes": 2,
         "instance_types": ["p4d.24xlarge"],
         "bootstrap": {"sharing": "mig", "mig_profiles": list(MIG_LAYOUT)},
         "cluster": {"kind": "slurm", "partition": "mig"}},
    ]
    return {"vision": make_policy(team="vision", pools=pools)}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    work = tmp_path_factory.mktemp("gpu-node")
    t4 = FakeGpu("Tesla T4")
    # g4dn.12xlarge has 4 T4s; gpu-d's nvidia-smi reports only 2 of them.
    gpus = {name: [t4] * (2 if name == "gpu-d" else 4) for name in [*SLURM_HOSTS, K8S_HOST]}
    gpus[MIG_HOST] = [A100_MIG] * 8
    # gpu-m's image already blacklists nouveau (a baked image): its driver loads at first
    # boot and its bootstrap needs no reboot (~30 s less; gpu-a/b/c test the reboot).
    baked = {MIG_HOST: [NodeFile("/etc/modprobe.d/blacklist-nouveau.conf", "blacklist nouveau\n")]}
    with controller_address() as controller, SandboxGpuNodes(
            work, gpus, declared_gpus={"gpu-d": 4}, slurm_nodes=SLURM_HOSTS,
            dynamic_partitions=["mig", BURST_PARTITION], files=baked, controller=controller) as nodes_lab:
        nodes_lab.hosts.write_file(K8S_HOST, "/usr/bin/kubeadm", FAKE_KUBEADM, 0o755)
        settings = nodes_lab.ansible_settings(
            work / "runs",
            extra_vars={"cluster_join_k8s_api_endpoint": f"{controller}:6443",
                        "cluster_join_k8s_ca_cert_hash": "sha256:" + "0" * 64})
        actuator = AnsibleActuator(settings, nodes_lab.address_of, catalog=default_catalog())
        dynamic = AnsibleActuator(nodes_lab.ansible_settings(
            work / "runs", extra_vars={"cluster_join_slurm_registration": "dynamic"}),
            nodes_lab.address_of, catalog=default_catalog())
        nodes = {n: make_node(n, pool="train", instance_type="g4dn.12xlarge",
                              state=NodeState.BOOTSTRAPPING) for n in SLURM_HOSTS}
        nodes[K8S_HOST] = make_node(K8S_HOST, pool="infer", instance_type="g4dn.12xlarge",
                                    state=NodeState.BOOTSTRAPPING)
        nodes[MIG_HOST] = make_node(MIG_HOST, pool="slices", instance_type="p4d.24xlarge",
                                    state=NodeState.BOOTSTRAPPING)
        secrets = {**nodes_lab.secrets(), "cluster_join_k8s_token": K8S_TOKEN}
        yield Lab(nodes_lab, actuator, dynamic, _policies(), nodes, secrets, work / "runs")


@pytest.fixture(scope="module")
def first_run(lab: Lab) -> BootstrapRun:
    return lab.bootstrap("gpu-a", "gpu-b", "gpu-c")


def test_first_run_bootstraps_all_hosts_and_they_join_slurm_idle_with_gres(
        lab: Lab, first_run: BootstrapRun) -> None:
    assert first_run.status == "successful"
    assert {n: r.status for n, r in first_run.hosts.items()} == \
        dict.fromkeys(["gpu-a", "gpu-b", "gpu-c"], HostStatus.OK), first_run.hosts
    assert all(r.changed > 0 for r in first_run.hosts.values())
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        assert lab.cluster.wait_node_state(name, {"idle"}, timeout=30) == "idle"
    gres = lab.cluster.run(["sinfo", "-h", "-N", "-n", "gpu-a,gpu-b,gpu-c", "-o", "%N %G"],
                           check=True).stdout.split("\n")
    assert sorted(line for line in gres if line) == [
        "gpu-a gpu:t4:4", "gpu-b gpu:t4:4", "gpu-c gpu:t4:4"]
    # The joined node runs jobs on its (fake) GPUs.
    job = lab.cluster.submit("echo gpus=$CUDA_VISIBLE_DEVICES", gpus=2, nodelist="gpu-b")
    lab.cluster.wait_job_state(job, {"COMPLETED"}, timeout=60)
    assert lab.hosts.read_file("gpu-b", f"/tmp/slurm-{job}.out").strip() == "gpus=0,1"


def test_hybrid_jobs_fill_the_booted_on_prem_hosts_first_and_only_the_overflow_bursts(
        lab: Lab, first_run: BootstrapRun) -> None:
    """Issue 34, hybrid burst on booted hosts: gpu-a, gpu-b and gpu-c, joined by the
    playbook, are a cloud pool's on-prem nodes (cluster.on_prem) in partition gpu; gpu-c is
    drained by hand (in maintenance: no room), gpu-a and gpu-b are partly busy. Through
    the real SignalReader and decide(): jobs that fit the free on-prem GPUs start there
    and launch nothing; a 4-GPU job that does not fit launches exactly one g4dn.12xlarge,
    its reason naming the on-prem nodes; no action names an on-prem node (they are not
    fleet nodes). Every job is cancelled and gpu-c resumed: later tests find them idle."""
    on_prem = ["gpu-a", "gpu-b", "gpu-c"]
    policy = make_policy(team="vision", instance_types=["g4dn.xlarge", "g4dn.12xlarge"],
                         cluster={"kind": "slurm", "partition": "gpu",
                                  "on_prem": {"nodes": ",".join(on_prem)}})
    policies = {"vision": policy}
    reader = SignalReader(SignalsConfig(scheduler=["slurm"]), default_catalog(),
                          slurm=SlurmReader(SlurmConfig(env=lab.cluster.env())))
    c = lab.cluster
    jobs: list[str] = []

    def plan_now() -> tuple[list[Launch], set[str], list[tuple[str, int, float]]]:
        now = datetime.now(UTC)
        observed = reader.read(policies, [], now)
        seen = observed.pools["vision/gpu"]
        plan = decide(policies, FleetView(nodes=[]), assemble(observed), now,
                      catalog=default_catalog())
        named = {n for a in plan.actions
                 for n in [getattr(a, "node", None), *getattr(a, "replaces", [])] if n}
        launches = [a for a in plan.actions if isinstance(a, Launch)]
        return launches, named, [(n.name, n.gpus, n.allocated) for n in seen.on_prem or []]

    try:
        c.drain("gpu-c", reason="maintenance")
        # One CPU a job, two a node: one busy job and one more fit on each.
        jobs += [c.submit("sleep 600", gpus=3, nodelist="gpu-a", name="busy"),
                 c.submit("sleep 600", gpus=2, nodelist="gpu-b", name="busy")]
        for job in jobs:
            c.wait_job_state(job, {"RUNNING"}, 30)
        launches, named, room = plan_now()
        assert room == [("gpu-a", 4, 3), ("gpu-b", 4, 2)]  # gpu-c drained: no room
        assert (launches, named & {*on_prem, "gpu-d"}) == ([], set())
        # The free 1 + 2 GPUs: the 2-GPU job first, so only gpu-b can take it.
        fits = [c.submit("sleep 600", gpus=2, gpu_type="t4", name="fits"),
                c.submit("sleep 600", gpus=1, gpu_type="t4", name="fits")]
        jobs += fits
        for job, host in zip(fits, ["gpu-b", "gpu-a"], strict=True):
            c.wait_job_state(job, {"RUNNING"}, 30)
            assert f"NodeList={host}" in c.scontrol("show", "job", job).stdout
        launches, named, room = plan_now()
        assert room == [("gpu-a", 4, 4), ("gpu-b", 4, 4)]
        assert (launches, named & {*on_prem, "gpu-d"}) == ([], set())

        big = c.submit("sleep 600", gpus=4, gpu_type="t4", name="overflow")
        jobs.append(big)
        wait_until(lambda: c.run(["squeue", "-h", "-j", big, "-o", "%r"]).stdout.strip()
                   == "Resources", 30, "the 4-GPU job pending for Resources", interval=0.5)
        launches, named, room = plan_now()
        assert [(a.instance_type, a.count, a.gpus_per_node) for a in launches] == [
            ("g4dn.12xlarge", 1, 4)], launches
        assert ("0 of 1 pending job part(s) fit on-prem gpu-a,gpu-b,gpu-c (0 of 8 GPUs free)"
                in launches[0].reason), launches[0].reason
        assert named & {*on_prem, "gpu-d"} == set()
        assert [c.node_state(n) for n in on_prem] == ["allocated", "allocated", "idle+drain"]
    finally:
        if jobs:
            c.run(["scancel", *jobs])
        c.resume("gpu-c")
        for name in on_prem:
            c.wait_node_state(name, {"idle"}, timeout=60)


def test_roles_wrote_the_node_configuration(lab: Lab, first_run: BootstrapRun) -> None:
    read = lab.hosts.read_file
    gres = read("gpu-a", "/etc/slurm/gres.conf")
    assert "NodeName=gpu-a Name=gpu Type=t4 File=/dev/nvidia[0-3]" in gres
    assert read("gpu-a", "/etc/slurm/slurm.conf") == lab.cluster.slurm_conf.read_text()
    assert read("gpu-a", "/etc/hostname").strip() == "gpu-a"
    assert "CUDA_HOME=/usr/local/cuda-12.4" in read("gpu-a", "/etc/profile.d/cuda.sh")
    assert "blacklist nouveau" in read("gpu-a", "/etc/modprobe.d/blacklist-nouveau.conf")
    assert "Pin: version 550.*" in read("gpu-a",
                                        "/etc/apt/preferences.d/gpu-autoscaler-nvidia-driver")
    dcgm = read("gpu-a", "/etc/systemd/system/dcgm-exporter.service")
    assert 'Environment="NODE_NAME=gpu-a"' in dcgm
    assert "--collectors /etc/dcgm-exporter/counters.csv" in dcgm
    assert "DCGM_FI_DEV_GPU_UTIL, gauge" in read("gpu-a", "/etc/dcgm-exporter/counters.csv")
    mps = read("gpu-a", "/etc/systemd/system/nvidia-mps.service")
    assert 'Environment="CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50"' in mps
    assert "ExecStart=/usr/bin/nvidia-cuda-mps-control -f" in mps
    plugin = read("gpu-a", "/etc/nvidia-device-plugin/config.yaml")  # MPS shares on Kubernetes
    assert "mps:" in plugin and "renameByDefault: true" in plugin and "replicas: 4" in plugin
    assert 'BinaryName = "/usr/bin/nvidia-container-runtime"' in read(
        "gpu-a", "/etc/containerd/conf.d/99-nvidia.toml")
    # The secret arrived where it belongs: the cluster's munge key, readable by munge only.
    key = lab.hosts.run("gpu-a", ["stat", "-c", "%U %a", "/etc/munge/munge.key"]).stdout.split()
    assert key == ["munge", "400"]
    on_node = lab.hosts.run("gpu-a", ["base64", "-w0", "/etc/munge/munge.key"]).stdout
    assert on_node == base64.b64encode(lab.cluster.munge_key.read_bytes()).decode()


def test_services_run_under_systemd_and_the_driver_reboot_happened_once(
        lab: Lab, first_run: BootstrapRun) -> None:
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        units = lab.hosts.run(name, ["systemctl", "is-enabled", "munge", "slurmd"]).stdout.split()
        assert units == ["enabled", "enabled"]
        assert lab.hosts.run(name, ["systemctl", "is-active", "munge", "slurmd"]).stdout.split() \
            == ["active", "active"]
        restart = lab.hosts.run(name, ["systemctl", "show", "--property=Restart", "slurmd"])
        assert restart.stdout.strip() == "Restart=on-failure"
        # The fresh node's fake driver needed a boot with nouveau blacklisted: one reboot.
        assert lab.hosts.boots(name) == 2
    stdout = (first_run.run_dir / "stdout").read_text()
    assert "Reboot to load the NVIDIA driver" in stdout


def test_the_periodic_health_check_passes_a_healthy_node_and_fails_a_hot_one(
        lab: Lab, first_run: BootstrapRun) -> None:
    """playbooks/health-check.yml as the executor runs it every health.check_interval."""
    node = lab.nodes["gpu-a"]
    run = lab.actuator.health_check([node], lab.policies)
    assert run.hosts["gpu-a"].status is HostStatus.OK, run.hosts
    assert run.hosts["gpu-a"].changed == 0  # a check changes nothing on the node
    hot = [FakeGpu("Tesla T4", temperature=95), *[FakeGpu("Tesla T4")] * 3]
    lab.hosts.write_file("gpu-a", nvidia_smi.INSTALL_PATH, nvidia_smi.script(hot), 0o755)
    try:
        run = lab.actuator.health_check([node], lab.policies)
    finally:
        lab.hosts.write_file("gpu-a", nvidia_smi.INSTALL_PATH,
                             nvidia_smi.script([FakeGpu("Tesla T4")] * 4), 0o755)
    bad = run.hosts["gpu-a"]
    assert bad.status is HostStatus.FAILED and bad.failed_task == "Check GPU temperatures", bad
    assert "GPU health check failed: GPU 0 above 87 C" in bad.message


def test_a_rebooted_node_serves_again_by_itself(lab: Lab, first_run: BootstrapRun) -> None:
    boots = lab.hosts.boots("gpu-c")
    lab.hosts.run("gpu-c", ["systemctl", "reboot"], check=False)
    lab.hosts.wait_booted("gpu-c", boots + 1)
    # munged and slurmd are enabled units; their tmpfs directories come back with tmpfiles.
    job = lab.cluster.submit("echo back", gpus=1, nodelist="gpu-c")
    lab.cluster.wait_job_state(job, {"COMPLETED"}, timeout=90)


class AsHost:
    """A rig node seen as booted host ``host`` by the real Slurm drainer (the rig names its
    nodes vision-gpu-N; everything else is the drainer's own)."""

    def __init__(self, inner: PhasedDrainer, host: str):
        self.inner, self.host = inner, host
        self.kind = inner.kind

    def readiness(self, node: Node) -> Readiness:
        return self.inner.readiness(dataclasses.replace(node, name=self.host))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_node_back_from_a_reboot_with_fewer_gpus_is_failed_by_the_watchdog(
        lab: Lab, first_run: BootstrapRun, tmp_path: Path) -> None:
    """gpu-c comes back from a reboot with 2 of its 4 GPUs (device files and nvidia-smi).
    Its slurmd waits for the device files gres.conf names ("Waiting for gres.conf file
    /dev/nvidia2") and never registers, so real Slurm never offers the node; the executor,
    its bootstrap done, holds it and fails it after the GPU-initialisation wait with
    Slurm's words and its type and zone."""
    healthy = {f.path: f for f in nvidia_smi.node_files([FakeGpu("Tesla T4")] * 4) if not f.link}
    for item in nvidia_smi.node_files([FakeGpu("Tesla T4")] * 2):
        if not item.link and "/systemd/" not in item.path:
            lab.hosts.write_file("gpu-c", item.path, item.content, item.mode)
    boots = lab.hosts.boots("gpu-c")
    lab.hosts.run("gpu-c", ["systemctl", "reboot"], check=False)
    lab.hosts.wait_booted("gpu-c", boots + 1)
    try:
        assert lab.hosts.run("gpu-c", ["nvidia-smi", "-L"]).stdout.count("GPU ") == 2
        drainer = AsHost(PhasedDrainer(SlurmOps(SlurmConfig(env=lab.cluster.env(),
                                                           registration="declared"))), "gpu-c")
        wait_until(lambda: "NOT_RESPONDING" in drainer.readiness(lab.nodes["gpu-c"]).why, 90,
                   "slurmctld to find gpu-c's slurmd silent", interval=1)
        policy = make_policy(team="vision", instance_types=["g4dn.12xlarge"],
                             cluster={"kind": "slurm", "partition": "gpu"})
        rig = make_rig(tmp_path, policies={"vision": policy})
        rig.slurm = drainer  # type: ignore[assignment]
        [name] = rig.submit(launch(instance_type="g4dn.12xlarge"))
        rig.advance()  # instance up, bootstrap (fake Ansible) done: BOOTSTRAPPING until seen
        rig.advance()
        assert rig.state(name) is NodeState.BOOTSTRAPPING, rig.node(name).reason
        rig.clock.tick(11 * 60)  # past ready_wait_timeout: no node of the pool measured yet
        rig.advance()
        node = rig.node(name)
        assert node.state is NodeState.BOOTSTRAP_FAILED, node.reason
        assert "not ready after 10m (ready_wait_timeout" in node.reason
        assert ": slurm state IDLE+NOT_RESPONDING; g4dn.12xlarge in " in node.reason
        assert node.reason.endswith(f"; g4dn.12xlarge in {node.zone or node.region}")
        rig.store.close()
    finally:  # its 4 GPUs back without a reboot: the files, then the device files
        for item in healthy.values():
            lab.hosts.write_file("gpu-c", item.path, item.content, item.mode)
        lab.hosts.run("gpu-c", ["systemd-tmpfiles", "--create",
                                *[p for p in healthy if "/tmpfiles.d/" in p]])


def test_a_second_run_changes_nothing_and_a_mixed_batch_fails_only_the_bad_hosts(
        lab: Lab, first_run: BootstrapRun) -> None:
    # One run (each costs ~100 s of CI): gpu-a and gpu-b again, gpu-c unreachable, gpu-d
    # unhealthy, the Kubernetes host for the first time.
    lab.hosts.set_reachable("gpu-c", False)
    try:
        run = lab.bootstrap("gpu-a", "gpu-b", "gpu-c", "gpu-d", K8S_HOST)
    finally:
        lab.hosts.set_reachable("gpu-c", True)
    results = run.hosts
    for again in ("gpu-a", "gpu-b"):  # idempotent: nothing changes, no second reboot
        assert results[again].status is HostStatus.OK and results[again].changed == 0, results[again]
        assert lab.cluster.node_state(again) == "idle"
        assert lab.hosts.boots(again) == 2
    assert results[K8S_HOST].status is HostStatus.OK, results[K8S_HOST]
    assert results["gpu-c"].status is HostStatus.UNREACHABLE
    assert "ssh" in results["gpu-c"].message.lower()
    bad = results["gpu-d"]
    assert bad.status is HostStatus.FAILED
    assert bad.failed_task == "Check the GPU count"
    assert "expected 4 GPUs, nvidia-smi reports 2" in bad.message
    # The unhealthy node never joined: its slurmd was not started.
    state = lab.cluster.node_state("gpu-d")
    # never registered: UNKNOWN until slurmctld's first ping marks it not responding
    assert "not_responding" in state or state.endswith("*") or state == "unknown", state


def test_a_booted_node_whose_slurmd_stops_is_replaced_after_the_grace(
        lab: Lab, first_run: BootstrapRun) -> None:
    """slurmd stopped in booted host gpu-b: slurmctld sets it DOWN ("Not responding") after
    SlurmdTimeout (60 s here); the real Slurm reader hands Slurm's words and reason time to
    decide(), which replaces the node once unready_grace has passed since then, and only
    it. Its slurmd started again, Slurm takes it back (ReturnToService=2)."""
    reader = SlurmReader(SlurmConfig(env=lab.cluster.env()))
    policy = make_policy(team="vision", instance_types=["g4dn.12xlarge"], max_nodes=8,
                         cluster={"kind": "slurm", "partition": "gpu"},
                         health={"unready_grace": "5s"})
    ready = [make_node(n, instance_type="g4dn.12xlarge") for n in ("gpu-a", "gpu-b")]
    refs = pools_in_priority_order({"vision": policy}, default_catalog(), "slurm")
    lab.hosts.run("gpu-b", ["systemctl", "stop", "slurmd"])
    replaces: list[Replace] = []
    try:
        def replaced() -> bool:
            now = datetime.now(UTC)
            reading = reader.read(refs)
            assert reading.error is None, reading.error
            nodes = {n: NodeObservation(scheduler=sn) for n, sn in reading.nodes.items()}
            plan = decide({"vision": policy}, FleetView(nodes=ready), Snapshot(
                taken_at=now, nodes=nodes), now, catalog=default_catalog())
            replaces[:] = [a for a in plan.actions if isinstance(a, Replace)]
            return bool(replaces)

        wait_until(replaced, 150, "gpu-b DOWN in Slurm past its grace", interval=2)
    finally:
        lab.hosts.run("gpu-b", ["systemctl", "start", "slurmd"])
    [replace] = replaces
    assert (replace.node, replace.trigger) == ("gpu-b", "unhealthy")
    assert "the scheduler says NOT_RESPONDING by root: Not responding for " in replace.reason
    assert "> unready_grace 5s" in replace.reason
    lab.cluster.wait_node_state("gpu-b", {"idle"}, timeout=60)


def test_kubernetes_join_passes_the_token_securely_and_labels_the_node(
        lab: Lab, first_run: BootstrapRun) -> None:
    # Runs after the mixed batch above, which bootstrapped gpu-e.
    config = "/etc/kubernetes/gpu-autoscaler-join.yaml"
    mode = lab.hosts.run(K8S_HOST, ["stat", "-c", "%a", config]).stdout.strip()
    assert mode == "600"
    text = lab.hosts.read_file(K8S_HOST, config)
    line = next(x for x in text.splitlines() if "node-labels:" in x)
    labels = dict(kv.split("=", 1) for kv in line.split('"')[1].split(","))
    assert {k: v for k, v in labels.items() if not k.startswith(("node.", "topology."))} == {
        "gpu-autoscaler/market": "on-demand", "gpu-autoscaler/pool": "infer",
        "gpu-autoscaler/team": "vision", "nvidia.com/gpu.present": "true", "workload": "inference"}
    assert "node.kubernetes.io/instance-type" in labels  # read back by the readiness check
    assert "  taints: []" in text
    assert f'apiServerEndpoint: "{CONTROLLER}:6443"' in text
    assert "joined with" in lab.hosts.read_file(K8S_HOST, "/etc/kubernetes/kubelet.conf")
    plugin = lab.hosts.read_file(K8S_HOST, "/etc/nvidia-device-plugin/config.yaml")
    assert "version: v1" in plugin and "renameByDefault: true" in plugin  # nvidia.com/gpu.shared


def test_a_mig_job_launches_the_mig_type_and_runs_on_a_slice_of_the_joined_node(
        lab: Lab) -> None:
    """Issue 34: a job asking for a MIG slice (--gres=gpu:3g.20gb:1) pends in partition mig,
    which has no node yet; the real Slurm reader makes it demand of the MIG pool and
    decide() launches that pool's p4d.24xlarge. gpu-m, that node (8 fake A100 40GB in MIG
    mode), bootstraps through the real playbook, registers as a dynamic node with the gres
    the role read from `nvidia-smi mig -lci` and the driver's mig-minors, and the job runs
    on one slice and completes."""
    job = lab.cluster.submit("echo slices=$SLURM_GPUS_ON_NODE", gpus=1, gpu_type="3g.20gb",
                             partition="mig")
    refs = pools_in_priority_order(lab.policies, default_catalog(), "slurm")
    reading = SlurmReader(SlurmConfig(env=lab.cluster.env())).read(refs)
    assert reading.error is None, reading.error
    assert [(j.id, j.gpus) for j in reading.pending["vision/slices"]] == [(job, 0.5)]
    now = datetime.now(UTC)
    pools = {r.key: PoolObservation(pending=reading.pending.get(r.key, [])) for r in refs}
    plan = decide(lab.policies, FleetView(nodes=[]), Snapshot(taken_at=now, pools=pools), now,
                  catalog=default_catalog())
    launches = [(a.pool, a.instance_type, a.count) for a in plan.actions if isinstance(a, Launch)]
    assert launches == [("vision/slices", "p4d.24xlarge", 1)], plan.actions

    run = lab.dynamic.bootstrap([lab.nodes[MIG_HOST]], lab.policies, secrets=lab.secrets)
    assert run.hosts[MIG_HOST].status is HostStatus.OK, run.hosts
    assert lab.hosts.boots(MIG_HOST) == 1  # its driver was loaded: no reboot
    lab.cluster.wait_job_state(job, {"COMPLETED"}, timeout=90)
    node = lab.cluster.scontrol("show", "node", MIG_HOST).stdout
    assert re.search(r"^\s*Gres=gpu:3g.20gb:16$", node, re.M) and "Partitions=mig" in node, node
    assert "DYNAMIC_NORM" in node, node  # registered by slurmd -Z, not declared
    detail = lab.cluster.scontrol("show", "job", "-d", job).stdout
    assert "JOB_GRES=gpu:3g.20gb:1" in detail and f"NodeList={MIG_HOST}" in detail, detail
    assert lab.hosts.read_file(MIG_HOST, f"/tmp/slurm-{job}.out").strip() == "slices=1"
    gres = lab.hosts.read_file(MIG_HOST, "/etc/slurm/gres.conf")
    assert (f"NodeName={MIG_HOST} Name=gpu Type=3g.20gb MultipleFiles=/dev/nvidia7,"
            "/dev/nvidia-caps/nvidia-cap957,/dev/nvidia-caps/nvidia-cap958") in gres
    assert gres.count("Type=3g.20gb") == 16


def test_fifteen_dynamic_names_join_and_leave_a_slurmctld_that_declares_none(
        lab: Lab, first_run: BootstrapRun, tmp_path: Path) -> None:
    """Issue 34: a pool of partition burst, which slurm.conf gives only a Nodeset (no node
    name), joins and removes 15 nodes in sequence, more than the 12 names a pre-declared
    pool had: five rounds of three, each giving booted gpu-a/b/c new node names. A node
    joins through the actuator running the playbook's cluster_join role alone (all a
    bootstrapped host needs to register slurmd -Z under another name; the whole node-time
    part would cost ~35 s a round), and leaves as the executor removes it: its instance
    gone (slurmd stopped), then the Slurm drainer's forget(), which deletes a dynamic node.
    After every join and every removal `scontrol show nodes` lists exactly the declared
    nodes, gpu-m and the live ones; at the end none of the 15. Runs after every test that
    needs gpu-a/b/c as declared nodes: it leaves their slurmd stopped."""
    c = lab.cluster
    names = [f"vision-burst-{i}" for i in range(1, 16)]
    conf = c.slurm_conf.read_text()
    assert "State=CLOUD" not in conf and not [n for n in names if n in conf]
    assert f"Nodeset={BURST_PARTITION}_cloud Feature=partition-{BURST_PARTITION}" in conf
    before = set(c.node_names())  # declared, and gpu-m once the MIG test registered it
    assert set(SLURM_HOSTS) <= before <= {*SLURM_HOSTS, MIG_HOST}, before
    hosts = ["gpu-a", "gpu-b", "gpu-c"]
    policies = {"vision": make_policy(team="vision", pools=[
        {"name": "burst", "cloud": "aws", "region": "us-east-1", "max_nodes": len(hosts),
         "instance_types": ["g4dn.12xlarge"],
         "bootstrap": {"sharing": "mps", "mps": {"active_thread_percentage": 50}},
         "cluster": {"kind": "slurm", "partition": BURST_PARTITION}}])}
    (tmp_path / "roles").symlink_to(lab.dynamic.settings.roles_dir())
    (tmp_path / "join.yml").write_text(JOIN_PLAYBOOK)
    host_of: dict[str, str] = {}
    settings = lab.nodes_lab.ansible_settings(
        lab.runs_dir, playbook=tmp_path / "join.yml",
        extra_vars={"cluster_join_slurm_registration": "dynamic"})
    actuator = AnsibleActuator(settings, lambda node: lab.hosts.address_of(host_of[node.name]),
                               catalog=default_catalog())
    drainer = PhasedDrainer(SlurmOps(SlurmConfig(env=c.env(), registration="dynamic")))
    live: dict[str, Node] = {}

    def remove(node: Node) -> None:
        lab.hosts.run(host_of[node.name], ["systemctl", "stop", "slurmd"])  # instance gone
        drainer.forget(node)  # what the executor does once the cloud lists no instance
        del live[node.name]

    try:
        for start in range(0, len(names), len(hosts)):
            batch = [make_node(n, pool="burst", instance_type="g4dn.12xlarge",
                               state=NodeState.BOOTSTRAPPING)
                     for n in names[start:start + len(hosts)]]
            host_of.update(zip([n.name for n in batch], hosts, strict=True))
            run = actuator.bootstrap(batch, policies, secrets=lab.secrets)
            assert {n: r.status for n, r in run.hosts.items()} == \
                dict.fromkeys([n.name for n in batch], HostStatus.OK), run.hosts
            live.update((n.name, n) for n in batch)
            assert set(c.node_names()) == before | live.keys()
            for node in batch:
                shown = c.scontrol("--oneliner", "show", "node", node.name).stdout
                assert "DYNAMIC_NORM" in shown and f"Partitions={BURST_PARTITION}" in shown, shown
            for node in batch:
                remove(node)
                assert set(c.node_names()) == before | live.keys()
        assert set(c.node_names()) == before
    finally:  # every slurmd the runs started, and every name still registered
        for host in hosts:
            lab.hosts.run(host, ["systemctl", "stop", "slurmd"], check=False)
        for node in list(live.values()):
            drainer.forget(node)


def test_no_secret_in_any_kept_log_or_result(lab: Lab, first_run: BootstrapRun) -> None:
    runs = sorted(p for p in lab.runs_dir.iterdir() if p.is_dir() and p.name != KNOWN_HOSTS_DIR)
    assert len(runs) >= 3  # one directory per run, for operators
    for run_dir in runs:
        assert {"stdout", "events.jsonl", "results.json", "inventory.json"} <= \
            {p.name for p in run_dir.iterdir()}
    leaked = []
    for path in lab.runs_dir.rglob("*"):
        if path.is_file():
            text = path.read_text(errors="replace")
            leaked += [f"{path}: {name}" for name, value in lab.secrets.items() if value in text]
    assert leaked == []
    # The play did use them (stdout names the tasks that handled them, hidden).
    assert "Install the cluster's munge key (base64)" in (runs[0] / "stdout").read_text()
