"""A real Slurm cluster (22.05: munged, slurmctld, slurmd) in one directory, on loopback.

Used by tests and the sandbox. Everything lives under ``workdir``: munge key and socket,
``slurm.conf``, ``gres.conf``, fake GPU device files (symlinks to /dev/null), state, spool
and logs. Nothing touches /etc/slurm or system services.

Two kinds of nodes (``SlurmNodeSpec.local``):

* local: ``slurmd -D -N <name>`` started here, ``NodeAddr=127.0.0.1`` with its own port;
* remote: declared in ``slurm.conf`` (``NodeAddr`` = its address, e.g. a network namespace
  test host) and started by someone else, e.g. Ansible's ``cluster_join`` over SSH or
  ``slurmd_argv()`` run with ``nsenter``. They need ``controller_addr`` reachable from them:
  ``SlurmCluster(..., controller_addr="169.254.77.254")`` writes
  ``SlurmctldHost=<this host's name>(169.254.77.254)`` (slurmctld refuses any other name);
  put that address on ``lo`` and route it from each namespace (RECIPES.md).

Nodes enter the cluster in one of two ways, as on a real site:

* dynamic (``dynamic_partitions``, Slurm 22.05's dynamic nodes): no name is declared; a
  node's ``slurmd -Z --conf "Gres=... Feature=partition-<p>,..."`` registers it, the
  partition's ``Nodeset`` (``Feature=partition-<p>``) puts it in the partition, and
  ``scontrol delete nodename=`` removes it. ``MaxNodeCount`` bounds how many exist at
  once (a deleted node's slot is reused). A local one is ``start_dynamic_slurmd()``: its
  port is ``SlurmdPort`` (``--conf`` cannot set one), so one at a time on this host;
* declared: named in ``slurm.conf`` up front (``local=False``; they show as down/not
  responding until their slurmd registers, and ``ReturnToService=2`` makes them idle when
  it does), or ``add_nodes()`` later, which rewrites the file and restarts slurmctld
  (state is kept in ``StateSaveLocation``; ``scontrol reconfigure`` does not add static
  nodes in 22.05).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autoscaler.sandbox.hosts.procs import (
    ManagedProcess,
    ProcessError,
    free_port,
    proc_stat,
    stop_pids,
    wait_until,
)


class SlurmError(RuntimeError):
    pass


@dataclass
class SlurmNodeSpec:
    name: str
    gpus: int = 2
    gpu_type: str = "t4"
    cpus: int = 2
    memory_mb: int = 1000
    partition: str = "gpu"
    local: bool = True
    addr: str = "127.0.0.1"
    port: int = field(default_factory=free_port)
    # GPU sharing as the cluster_join role advertises it: one gpu type per MIG profile of
    # this per-GPU layout (e.g. ("3g.40gb", "3g.40gb")), or shards per GPU (MPS,
    # time-slicing). Its gres.conf names fake MIG device files (nvidia-caps) and the GPUs.
    mig_profiles: tuple[str, ...] = ()
    shards_per_gpu: int = 0

    def gres(self) -> str:
        """The node's gres as slurm.conf and ``slurmd --conf`` say it: ``gpu:t4:2``,
        ``gpu:3g.40gb:4``, ``gpu:t4:2,shard:8``."""
        if not self.gpus:
            return ""
        if self.mig_profiles:
            counts = {p: self.mig_profiles.count(p) * self.gpus for p in self.mig_profiles}
            return ",".join(f"gpu:{p}:{n}" for p, n in counts.items())
        shards = f",shard:{self.gpus * self.shards_per_gpu}" if self.shards_per_gpu else ""
        return f"gpu:{self.gpu_type}:{self.gpus}{shards}"

    def mig_devices(self) -> list[tuple[int, str, int, int]]:
        """(GPU, profile, GPU-instance minor, compute-instance minor) per MIG device: the
        driver's /dev/nvidia-caps minors (``/proc/driver/nvidia-caps/mig-minors``:
        gpu<G>/gi<I>/access, then its ci0..ci7, for 15 instances of 32 GPUs)."""
        out = []
        for gpu in range(self.gpus if self.mig_profiles else 0):
            for i, profile in enumerate(self.mig_profiles):
                gi_minor = 3 + gpu * 15 * 9 + (i + 1) * 9
                out.append((gpu, profile, gi_minor, gi_minor + 1))
        return out

    def conf_line(self) -> str:
        gres = f" Gres={self.gres()}" if self.gpus else ""
        host = " NodeHostname=localhost" if self.local else ""
        return (f"NodeName={self.name}{host} NodeAddr={self.addr} Port={self.port} "
                f"CPUs={self.cpus} RealMemory={self.memory_mb}{gres} State=UNKNOWN")


class SlurmCluster:
    """``with SlurmCluster(tmp, [SlurmNodeSpec("gpu1"), SlurmNodeSpec("gpu2")]) as c: ...``"""

    def __init__(self, workdir: Path, nodes: Sequence[SlurmNodeSpec],
                 controller_addr: str | None = None, cluster_name: str = "sandbox",
                 slurmd_timeout: int = 60, dynamic_partitions: Sequence[str] = (),
                 max_nodes: int = 64):
        for binary in ("munged", "mungekey", "slurmctld", "slurmd", "scontrol"):
            if shutil.which(binary) is None:
                raise SlurmError(f"{binary} is not installed (apt-get install -y slurmctld "
                                 "slurmd munge)")
        self.workdir = Path(workdir).resolve()
        self.nodes: dict[str, SlurmNodeSpec] = {n.name: n for n in nodes}
        self.controller_addr = controller_addr
        self.cluster_name = cluster_name
        # How long slurmctld waits for a silent slurmd before it sets the node DOWN ("Not
        # responding"); it pings every third of it. A test of that lowers it.
        self.slurmd_timeout = slurmd_timeout
        # Partitions that take dynamic nodes (a Nodeset each), and how many nodes may exist.
        self.dynamic_partitions = list(dict.fromkeys(dynamic_partitions))
        self.max_nodes = max_nodes
        self.dynamic: dict[str, SlurmNodeSpec] = {}  # local dynamic nodes, for gres.conf
        self.ctld_port = free_port()
        self.slurmd_port = free_port()
        self.conf_dir = self.workdir / "etc"
        self.slurm_conf = self.conf_dir / "slurm.conf"
        self.gres_conf = self.conf_dir / "gres.conf"
        self.munge_dir = self.workdir / "munge"
        self.munge_key = self.munge_dir / "munge.key"
        # Unix sockets live under a short path of their own: a socket path has at most 108
        # bytes, and slurmd's step sockets (spool/<node>/<node>_<job>.<step>) under a test's
        # temporary directory (/tmp/pytest-of-root/pytest-250/popen-gw0/...) went past it,
        # so every job failed to launch and was requeued held.
        digest = hashlib.sha1(str(self.workdir).encode()).hexdigest()[:12]
        self.socket_root = Path(tempfile.gettempdir()) / f"slurm-{digest}"
        self.munge_socket_dir = self.socket_root / "munge-run"
        self.munge_socket = self.munge_socket_dir / "munge.socket"
        self.state_dir = self.workdir / "state"
        self.spool_dir = self.socket_root / "spool"
        self.log_dir = self.workdir / "log"
        self.dev_dir = self.workdir / "dev"
        self.jobs_dir = self.workdir / "jobs"
        self._munged: ManagedProcess | None = None
        self._ctld: ManagedProcess | None = None
        self._slurmd: dict[str, ManagedProcess] = {}

    # ------------------------------------------------------------------ files

    def env(self) -> dict[str, str]:
        """Environment for scontrol/squeue/sinfo/sbatch against this cluster."""
        return {"SLURM_CONF": str(self.slurm_conf)}

    def controller_host(self) -> str:
        if self.controller_addr is None:
            return "localhost"
        return f"{socket.gethostname()}({self.controller_addr})"

    def partitions(self) -> dict[str, list[str]]:
        """Each partition's members in slurm.conf: its declared nodes, and the Nodeset of
        its dynamic nodes."""
        parts: dict[str, list[str]] = {}
        for spec in self.nodes.values():
            parts.setdefault(spec.partition, []).append(spec.name)
        for part in self.dynamic_partitions:
            parts.setdefault(part, []).append(nodeset_name(part))
        return parts

    def render_conf(self) -> str:
        d = self.workdir
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={self.controller_host()}",
            f"SlurmctldPort={self.ctld_port}",
            f"SlurmdPort={self.slurmd_port}",
            "SlurmUser=root", "SlurmdUser=root",
            "AuthType=auth/munge", f"AuthInfo=socket={self.munge_socket}",
            "CredType=cred/munge",
            f"StateSaveLocation={self.state_dir}",
            f"SlurmdSpoolDir={self.spool_dir}/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid", f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.log_dir}/slurmctld.log",
            f"SlurmdLogFile={self.log_dir}/slurmd-%n.log",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "GresTypes=gpu,shard", "ReturnToService=2",
            # Declared CPUs/memory win over the host's (many slurmd share 2 cores).
            "SlurmdParameters=config_overrides",
            "SchedulerType=sched/backfill", "MpiDefault=none",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none", "JobCompType=jobcomp/none",
            "SlurmctldTimeout=30", f"SlurmdTimeout={self.slurmd_timeout}", "InactiveLimit=0",
            "MinJobAge=300",
            "KillWait=5", "MessageTimeout=10", "SchedulerParameters=sched_interval=2",
            "",
        ]
        if self.dynamic_partitions:
            # TreeWidth: slurmctld talks to every node itself, since no slurmd can look a
            # dynamic node up in its slurm.conf to forward a message to it.
            lines[-1:-1] = [f"MaxNodeCount={len(self.nodes) + self.max_nodes}", "TreeWidth=65533"]
            lines += [f"Nodeset={nodeset_name(p)} Feature=partition-{p}"
                      for p in self.dynamic_partitions]
        lines += [spec.conf_line() for spec in self.nodes.values()]
        for part, names in self.partitions().items():
            default = "YES" if part == next(iter(self.partitions())) else "NO"
            lines.append(f"PartitionName={part} Nodes={','.join(names)} Default={default} "
                         "MaxTime=INFINITE State=UP")
        return "\n".join(lines) + "\n"

    def render_gres(self) -> str:
        lines = ["AutoDetect=off"]
        for spec in [*self.nodes.values(), *self.dynamic.values()]:
            dev = self.dev_dir / spec.name
            gpus = f"{dev}/nvidia[0-{spec.gpus - 1}]"
            for gpu, profile, gi, ci in spec.mig_devices():
                lines.append(f"NodeName={spec.name} Name=gpu Type={profile} MultipleFiles="
                             f"{dev}/nvidia{gpu},{dev}/nvidia-caps/nvidia-cap{gi},"
                             f"{dev}/nvidia-caps/nvidia-cap{ci}")
            if spec.gpus and not spec.mig_profiles:
                lines.append(f"NodeName={spec.name} Name=gpu Type={spec.gpu_type} File={gpus}")
            if spec.gpus and spec.shards_per_gpu and not spec.mig_profiles:
                lines.append(f"NodeName={spec.name} Name=shard "
                             f"Count={spec.gpus * spec.shards_per_gpu} File={gpus}")
        return "\n".join(lines) + "\n"

    def write_config(self) -> None:
        for path in (self.conf_dir, self.state_dir, self.spool_dir, self.log_dir, self.jobs_dir):
            path.mkdir(parents=True, exist_ok=True)
        for spec in [*self.nodes.values(), *self.dynamic.values()]:
            node_dev = self.dev_dir / spec.name
            node_dev.mkdir(parents=True, exist_ok=True)
            caps = [f"nvidia-caps/nvidia-cap{m}" for _, _, gi, ci in spec.mig_devices()
                    for m in (gi, ci)]
            for name in [*(f"nvidia{i}" for i in range(spec.gpus)), *caps]:
                dev = node_dev / name
                dev.parent.mkdir(exist_ok=True)
                if not dev.is_symlink():
                    dev.symlink_to("/dev/null")
        self.slurm_conf.write_text(self.render_conf())
        self.gres_conf.write_text(self.render_gres())

    def _write_munge_key(self) -> None:
        self.munge_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.munge_dir, 0o700)
        self.munge_socket_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.munge_socket_dir, 0o711)  # munged insists
        if not self.munge_key.exists():
            subprocess.run(["mungekey", "-c", "-b", "1024", "-k", str(self.munge_key)],
                           check=True, capture_output=True, timeout=30)
        os.chmod(self.munge_key, 0o400)

    # --------------------------------------------------------------- processes

    def start(self, timeout: float = 60) -> SlurmCluster:
        self.write_config()
        self._write_munge_key()
        self._munged = ManagedProcess("munged", [
            "munged", "-F", "--force", f"--socket={self.munge_socket}",
            f"--key-file={self.munge_key}", f"--pid-file={self.munge_dir}/munged.pid",
            f"--log-file={self.log_dir}/munged.log", f"--seed-file={self.munge_dir}/munged.seed",
        ], self.log_dir / "munged.out")
        wait_until(self.munge_socket.exists, 15, "munged socket", proc=self._munged)
        self._start_ctld(timeout)
        for spec in self.nodes.values():
            if spec.local:
                self.start_slurmd(spec.name)
        for spec in self.nodes.values():
            if spec.local:
                self.wait_node_state(spec.name, {"idle"}, timeout)
        return self

    def _start_ctld(self, timeout: float) -> None:
        self._ctld = ManagedProcess("slurmctld", ["slurmctld", "-D", "-f", str(self.slurm_conf)],
                                    self.log_dir / "slurmctld.out", env=self.env())
        wait_until(lambda: self.scontrol("ping").returncode == 0
                   and "UP" in self.scontrol("ping").stdout,
                   timeout, "slurmctld answering ping", proc=self._ctld, interval=0.5)

    def stop_controller(self) -> None:
        """Stop slurmctld (outage tests); ``start_controller`` brings it back."""
        if self._ctld is not None:
            self._ctld.stop()
            self._ctld = None

    def start_controller(self, timeout: float = 60) -> None:
        if self._ctld is None:
            self._start_ctld(timeout)

    def slurmd_argv(self, name: str) -> list[str]:
        """How to start ``name``'s slurmd (with ``SLURM_CONF=<slurm_conf>`` in its env)."""
        return ["slurmd", "-D", "-N", name, "-f", str(self.slurm_conf)]

    def start_slurmd(self, name: str) -> None:
        if name in self._slurmd and self._slurmd[name].alive():
            return
        self._slurmd[name] = ManagedProcess(f"slurmd-{name}", self.slurmd_argv(name),
                                            self.log_dir / f"slurmd-{name}.out", env=self.env())

    def start_dynamic_slurmd(self, spec: SlurmNodeSpec, features: Sequence[str] = (),
                             weight: int = 100) -> None:
        """Register ``spec`` as a dynamic node: ``slurmd -Z`` on this host, with its gres,
        ``partition-<its partition>`` and ``features``. One at a time (they share
        SlurmdPort); stop or delete the last one first."""
        if spec.partition not in self.dynamic_partitions:
            raise SlurmError(f"partition {spec.partition} takes no dynamic nodes "
                             f"(dynamic_partitions: {self.dynamic_partitions})")
        alive = [n for n in self.dynamic if n in self._slurmd and self._slurmd[n].alive()]
        if alive:
            raise SlurmError(f"{alive[0]}'s slurmd holds SlurmdPort: stop it first")
        self.dynamic[spec.name] = spec
        self.write_config()
        conf = [f"Gres={spec.gres()}"] if spec.gpus else []
        conf += [f"CPUs={spec.cpus}", f"RealMemory={spec.memory_mb}",
                 "Feature=" + ",".join([f"partition-{spec.partition}", *features]),
                 f"Weight={weight}"]
        self._slurmd[spec.name] = ManagedProcess(
            f"slurmd-{spec.name}", [*self.slurmd_argv(spec.name), "-Z", "--conf", " ".join(conf)],
            self.log_dir / f"slurmd-{spec.name}.out", env=self.env())

    def node_names(self) -> list[str]:
        """Every node slurmctld knows now (``scontrol show nodes``), declared or dynamic."""
        out = self.scontrol("--oneliner", "show", "nodes").stdout
        return re.findall(r"^NodeName=(\S+)", out, flags=re.M)

    def stop_slurmd(self, name: str) -> None:
        """The node dies: its slurmd, and the steps and job processes it ran (slurmstepd
        outlives slurmd, as on a node whose slurmd crashed; a dead node keeps nothing)."""
        proc = self._slurmd.pop(name, None)
        if proc is not None:
            proc.stop()
        steps = self.job_processes(name)
        for pid in steps:  # SIGKILL: a dead node's steps tell slurmctld nothing
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stop_pids(steps, timeout=5.0)

    def delete_dynamic(self, name: str, timeout: float = 30) -> None:
        """Stop a dynamic node's slurmd and delete it from slurmctld. A job cancelled just
        before keeps the node COMPLETING, and slurmctld refuses to delete a node with a job,
        so the node is set DOWN (which ends the completion) before each retry."""
        self.stop_slurmd(name)

        def deleted() -> bool:
            if name not in self.node_names():
                return True
            if self.scontrol("delete", f"nodename={name}").returncode == 0:
                return True
            self.run(["scontrol", "update", f"nodename={name}", "state=DOWN",
                      "reason=sandbox node deleted"])
            return False

        wait_until(deleted, timeout, f"{name} deleted from slurmctld", interval=0.5)

    def job_processes(self, node: str | None = None) -> list[int]:
        """This cluster's job processes (their environment names its slurm.conf), of
        ``node`` or of every node, with the slurmstepd above them."""
        mine = f"SLURM_CONF={self.slurm_conf}".encode()
        wanted = f"SLURMD_NODENAME={node}".encode() if node is not None else None
        found: set[int] = set()
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                env = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if mine in env and (wanted is None or wanted in env):
                found.add(int(entry))
        for pid in list(found):  # the steps above them (their own environment names no node)
            fields = proc_stat(pid)
            while fields is not None and fields[2] not in ("0", "1"):
                parent = int(fields[2])
                fields = proc_stat(parent)
                if fields is None or not fields[0].startswith("slurmstepd"):
                    break
                found.add(parent)
        return sorted(found)

    def add_nodes(self, specs: Iterable[SlurmNodeSpec], timeout: float = 60) -> None:
        """Declare more nodes: rewrite slurm.conf, restart slurmctld, start local slurmd."""
        new = [s for s in specs if s.name not in self.nodes]
        for spec in new:
            self.nodes[spec.name] = spec
        self.write_config()
        if self._ctld is not None:
            self._ctld.stop()
            self._start_ctld(timeout)
        if self._slurmd:  # running slurmd learn the new nodes' addresses
            self.scontrol("reconfigure")
        for spec in new:
            if spec.local:
                self.start_slurmd(spec.name)
        for spec in new:
            if spec.local:
                self.wait_node_state(spec.name, {"idle"}, timeout)

    def stop(self) -> None:
        for name in list(self._slurmd):
            self.stop_slurmd(name)
        for proc in (self._ctld, self._munged):
            if proc is not None:
                proc.stop()
        stop_pids(self.job_processes(), timeout=5.0)  # steps of nodes stopped earlier
        self._ctld = self._munged = None
        shutil.rmtree(self.socket_root, ignore_errors=True)

    def __enter__(self) -> SlurmCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- commands

    def run(self, argv: Sequence[str], timeout: float = 30,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                                env={**os.environ, **self.env()}, check=False)
        if check and result.returncode != 0:
            raise SlurmError(f"{' '.join(argv)} failed: {result.stderr.strip()}")
        return result

    def scontrol(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self.run(["scontrol", *args])

    def submit(self, command: str = "sleep 300", gpus: int = 1, gpu_type: str | None = None,
               partition: str | None = None, nodelist: str | None = None,
               name: str = "sandbox-job", extra: Sequence[str] = (),
               output: str = "/tmp/slurm-%j.out") -> str:
        """``sbatch --wrap`` a job; returns its id. It runs in /tmp of its node: booted
        sandbox nodes have their own filesystem and no shared one (slurmd on this host can
        write ``output`` under the cluster's ``jobs_dir`` instead)."""
        gres = f"gpu:{gpu_type}:{gpus}" if gpu_type else f"gpu:{gpus}"
        argv = ["sbatch", "--parsable", f"--job-name={name}", "--chdir=/tmp",
                f"--output={output}", "--ntasks=1", "--cpus-per-task=1",
                "--mem=100"]
        if gpus:
            argv.append(f"--gres={gres}")
        if partition:
            argv.append(f"--partition={partition}")
        if nodelist:
            argv.append(f"--nodelist={nodelist}")
        argv += [*extra, "--wrap", command]
        out = self.run(argv, check=True).stdout.strip()
        return out.split(";", 1)[0]

    def node_state(self, name: str) -> str:
        """Lower-case base state with flags, e.g. ``idle``, ``mixed``, ``idle+drain``
        (without ``+dynamic_norm``, which says how the node was made, not its state)."""
        out = self.scontrol("show", "node", name).stdout
        match = re.search(r"State=(\S+)", out)
        if not match:
            return "unknown"
        return "+".join(f for f in match.group(1).lower().split("+")
                        if not f.startswith("dynamic_"))

    def wait_node_state(self, name: str, states: set[str], timeout: float = 60) -> str:
        """Until the node's state (``scontrol`` spelling, lower case) is one of ``states``."""
        seen: list[str] = []

        def ok() -> bool:
            seen.append(self.node_state(name))
            return seen[-1] in states

        try:
            wait_until(ok, timeout, f"node {name} in {sorted(states)}", interval=0.5)
        except ProcessError as exc:
            tail = self.log_tail()
            raise SlurmError(f"{exc} (last state {seen[-1] if seen else '?'})\n{tail}") from None
        return seen[-1]

    def job_state(self, job_id: str) -> str:
        out = self.scontrol("show", "job", job_id).stdout
        match = re.search(r"JobState=(\S+)", out)
        return match.group(1) if match else "UNKNOWN"

    def wait_job_state(self, job_id: str, states: set[str], timeout: float = 60) -> None:
        wait_until(lambda: self.job_state(job_id) in states, timeout,
                   f"job {job_id} in {sorted(states)}", interval=0.5)

    def drain(self, name: str, reason: str = "sandbox") -> None:
        self.run(["scontrol", "update", f"nodename={name}", "state=DRAIN", f"reason={reason}"],
                 check=True)

    def resume(self, name: str) -> None:
        self.run(["scontrol", "update", f"nodename={name}", "state=RESUME"], check=True)

    def log_tail(self, lines: int = 15) -> str:
        path = self.log_dir / "slurmctld.log"
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def nodeset_name(partition: str) -> str:
    """The Nodeset that puts a partition's dynamic nodes (``Feature=partition-<p>``) in it."""
    return f"{partition}_cloud"
