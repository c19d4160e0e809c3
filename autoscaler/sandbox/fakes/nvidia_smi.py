"""A fake NVIDIA stack for sandbox nodes, which have no GPUs: ``nvidia-smi``, device files
and a driver that loads at boot once nouveau is blacklisted.

The sandbox places ``node_files()`` in a node's overlay before it boots, so the roles' GPU
detection, driver check, reboot decision, health check and Slurm gres run for real against
a chosen GPU inventory. The roles never ship any of it.

* ``/usr/bin/nvidia-smi`` answers ``--query-gpu=a,b,... --format=csv[,noheader][,nounits]``,
  ``-L``, ``mig -lgi`` and ``mig -lci`` (each with ``-i N``); anything else exits 0
  silently, like a no-op setting change. Until the driver is loaded it fails the way the
  real one does (exit 9, "couldn't communicate with the NVIDIA driver").
* MIG: a ``FakeGpu(mig=("3g.20gb", "3g.20gb"))`` is in MIG mode with one GPU instance per
  profile, each with one compute instance using all of it (what ``nvidia-smi mig -cgi ...
  -C`` makes). ``mig.mode.current`` says Enabled; ``-L`` lists its MIG devices under it;
  ``mig -lgi`` / ``-lci`` print NVIDIA's tables (profile IDs and placements as on an A100 /
  H100; GPU-instance IDs are 1, 2, ... in layout order, where the real driver picks them by
  placement). The driver makes ``/dev/nvidia-caps/nvidia-cap<N>`` of the instances and its
  ``/proc/driver/nvidia-caps/mig-minors``: procfs takes no new files, so the driver unit
  bind-mounts a directory holding that file (placed in the overlay) on ``/proc/driver``
  when it loads, and the roles read the real path. Nothing else of MIG is faked: the
  gpu_sharing role's MIG commands are tagged gpu-hardware and skipped in the sandbox.
* The "driver" loads at boot (a oneshot unit touching ``LOADED_FLAG`` under /run) only when
  ``/etc/modprobe.d/blacklist-nouveau.conf`` exists, as on a GPU instance where nouveau
  holds the GPUs until the node reboots with the blacklist: the nvidia_driver role's reboot
  path is needed on a fresh node and not afterwards. It runs before sshd, so Ansible never
  reconnects to a node whose driver is still loading.
* ``/dev/nvidia0..N-1`` (and the MIG instances' ``/dev/nvidia-caps/nvidia-cap<N>``) are
  links to /dev/null made at every boot (systemd-tmpfiles), the device files Slurm's
  gres.conf names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from autoscaler.catalog.mig import MEMORY_SLICES
from autoscaler.sandbox.hosts.overlay import NodeFile

INSTALL_PATH = "/usr/bin/nvidia-smi"
LOADED_FLAG = "/run/gpu-autoscaler-fake-nvidia/loaded"
DEVICE_PREFIX = "/dev/nvidia"
DRIVER_UNIT = "gpu-autoscaler-fake-nvidia-driver.service"
CAPS_DIR = "/dev/nvidia-caps"
MIG_MINORS = "/proc/driver/nvidia-caps/mig-minors"
# What the fake driver bind-mounts on /proc/driver when it loads (holds nvidia-caps/).
PROC_DRIVER_SOURCE = "/usr/lib/gpu-autoscaler-fake-nvidia/proc-driver"
# The driver's minor table: 15 GPU instances of 8 compute instances per GPU, after
# "config 1" and "monitor 2".
_GPU_INSTANCES, _COMPUTE_INSTANCES = 15, 8
# NVML's GPU-instance profile IDs by compute slices (1g with 2 memory slices: 15) and the
# compute-instance profile ID of a compute instance using all of them.
_GI_PROFILE_ID = {1: 19, 2: 14, 3: 9, 4: 5, 7: 0}
_CI_PROFILE_ID = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}


@dataclass(frozen=True)
class FakeGpu:
    name: str = "Tesla T4"
    temperature: int = 40
    ecc_uncorrected: int = 0
    memory_mib: int = 15360
    # MIG mode with one GPU instance per profile ("3g.20gb"...); () = MIG off or none.
    mig: tuple[str, ...] = ()


@dataclass(frozen=True)
class MigInstance:
    """One MIG device of a fake GPU: a GPU instance with one compute instance (ID 0)."""

    gpu: int
    profile: str  # "3g.20gb"
    gi: int  # GPU-instance ID
    gi_profile_id: int
    start: int  # placement, in memory slices
    size: int
    compute: int  # compute slices: the compute instance's placement is 0:compute
    ci_profile_id: int

    @property
    def gi_minor(self) -> int:
        """The driver's /dev/nvidia-caps minor of ``gpu<G>/gi<I>/access``."""
        return 3 + self.gpu * _GPU_INSTANCES * (_COMPUTE_INSTANCES + 1) + \
            self.gi * (_COMPUTE_INSTANCES + 1)

    @property
    def ci_minor(self) -> int:
        """The minor of ``gpu<G>/gi<I>/ci0/access``."""
        return self.gi_minor + 1


class FakeMigError(ValueError):
    pass


def _profile(profile: str, gpu_memory_mib: int) -> tuple[int, int]:
    """(compute slices, memory slices of 8) of a profile: "3g.20gb" on a 40 GB GPU -> (3, 4)."""
    try:
        compute, memory = profile.split(".", 1)
        slices, gib = int(compute.removesuffix("g")), int(memory.removesuffix("gb"))
    except ValueError:
        raise FakeMigError(f"not a MIG profile name: {profile!r}") from None
    if slices not in _GI_PROFILE_ID:
        raise FakeMigError(f"no MIG profile {profile!r} on a fake GPU")
    whole = max(1, round(gpu_memory_mib / 1024))
    return slices, max(1, min(MEMORY_SLICES, round(gib * MEMORY_SLICES / whole)))


def mig_instances(gpus: list[FakeGpu]) -> list[MigInstance]:
    """Every MIG device of ``gpus``, in nvidia-smi's order (GPU, then GPU instance)."""
    out = []
    for index, gpu in enumerate(gpus):
        if len(gpu.mig) >= _GPU_INSTANCES:
            raise FakeMigError(f"GPU {index}: more MIG instances than a GPU holds")
        start = 0
        for i, profile in enumerate(gpu.mig):
            compute, size = _profile(profile, gpu.memory_mib)
            gi_profile = 15 if compute == 1 and size == 2 else _GI_PROFILE_ID[compute]
            out.append(MigInstance(index, profile, i + 1, gi_profile, start, size, compute,
                                   _CI_PROFILE_ID[compute]))
            start += size
    return out


def mig_minors(gpus: int) -> str:
    """/proc/driver/nvidia-caps/mig-minors as the driver writes it for ``gpus`` GPUs."""
    lines, minor = ["config 1", "monitor 2"], 3
    for gpu in range(gpus):
        for gi in range(_GPU_INSTANCES):
            lines.append(f"gpu{gpu}/gi{gi}/access {minor}")
            lines += [f"gpu{gpu}/gi{gi}/ci{ci}/access {minor + 1 + ci}"
                      for ci in range(_COMPUTE_INSTANCES)]
            minor += _COMPUTE_INSTANCES + 1
    return "\n".join(lines) + "\n"


_SCRIPT = """#!/usr/bin/python3
\"\"\"Fake nvidia-smi placed by gpu-autoscaler's sandbox (no real GPU here).\"\"\"
import json, os, sys
GPUS = json.loads(%(gpus)r)
MIG = json.loads(%(mig)r)
if not os.path.exists(%(flag)r):
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running.")
    sys.exit(9)

def field(i, gpu, key):
    return {
        "index": str(i), "name": gpu["name"], "uuid": "GPU-fake-%%04d" %% i,
        "ecc.errors.uncorrected.volatile.total": str(gpu["ecc_uncorrected"]),
        "temperature.gpu": str(gpu["temperature"]),
        "memory.total": str(gpu["memory_mib"]) + ("" if nounits else " MiB"),
        "persistence_mode": "Enabled", "compute_mode": "Default",
        "mig.mode.current": "Enabled" if gpu["mig"] else "[N/A]",
        "driver_version": "550.54.15",
    }.get(key, "[N/A]")

def table(title, header, rows):
    rule = "+" + "-" * (len(header[0]) - 2) + "+"
    print(rule)
    print(("| " + title).ljust(len(rule) - 1) + "|")
    for line in header:
        print(line)
    print("|" + "=" * (len(rule) - 2) + "|")
    for row in rows:
        print(row)
        print(rule)

args = sys.argv[1:]
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
nounits = "nounits" in fmt
only = args[args.index("-i") + 1] if "-i" in args[:-1] else None
shown = [i for i in range(len(GPUS)) if only is None or str(i) == only]
if only is not None and not shown:
    print("No devices were found")
    sys.exit(6)
mig = [m for m in MIG if m["gpu"] in shown]
if query is not None:
    keys = [k.strip() for k in query.split(",")]
    if "noheader" not in fmt:
        print(", ".join(keys))
    for i in shown:
        print(", ".join(field(i, GPUS[i], k) for k in keys))
elif "-L" in args:
    for i in shown:
        print("GPU %%d: %%s (UUID: GPU-fake-%%04d)" %% (i, GPUS[i]["name"], i))
        for d, m in enumerate(x for x in mig if x["gpu"] == i):
            print("  MIG %%-11s Device %%2d: (UUID: MIG-fake-%%04d-%%d)" %% (m["profile"], d, i, d))
elif args[:1] == ["mig"] and ("-lgi" in args or "-lci" in args):
    if not any(GPUS[i]["mig"] for i in shown):
        print("No MIG-enabled devices found.")
        sys.exit(6)
    if "-lgi" in args:
        table("GPU instances:", [
            "| GPU   Name             Profile  Instance   Placement  |",
            "|                          ID       ID       Start:Size |"],
            ["|  %%2d  MIG %%-13s%%5d %%8d %%10d:%%-5d |" %% (
                m["gpu"], m["profile"], m["gi_profile_id"], m["gi"], m["start"], m["size"])
             for m in mig])
    else:
        table("Compute instances:", [
            "| GPU     GPU       Name             Profile   Instance   Placement  |",
            "|       Instance                       ID        ID       Start:Size |",
            "|         ID                                                         |"],
            ["|  %%2d  %%5d       MIG %%-13s%%5d %%9d %%10d:%%-5d |" %% (
                m["gpu"], m["gi"], m["profile"], m["ci_profile_id"], 0, 0, m["compute"])
             for m in mig])
"""


def script(gpus: list[FakeGpu]) -> str:
    """The executable text of a fake nvidia-smi reporting ``gpus``."""
    data = json.dumps([{**g.__dict__, "mig": list(g.mig)} for g in gpus])
    mig = json.dumps([m.__dict__ for m in mig_instances(gpus)])
    return _SCRIPT % {"gpus": data, "mig": mig, "flag": LOADED_FLAG}


_DRIVER_UNIT = """[Unit]
Description=Fake NVIDIA driver of gpu-autoscaler's sandbox (loads when nouveau is blacklisted)
ConditionPathExists=/etc/modprobe.d/blacklist-nouveau.conf
# A real module loads from udev long before sshd; without this order Ansible's reboot could
# reconnect first and find no driver (failed once in CI under load).
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'mkdir -p {flag_dir} && touch {flag}'
{mig}RemainAfterExit=yes
# No Restart=: the one failure seen (CI under load, after the driver reboot) was the
# sandbox's, hosts sharing one cgroup tree (hosts/cgroups.py), and a retry would hide the
# next one.

[Install]
WantedBy=multi-user.target
"""


def driver_unit(mig: bool) -> str:
    """The fake driver's unit; with MIG it also shows the driver's mig-minors in /proc."""
    mount = (f"# The driver's {MIG_MINORS} (procfs takes no new files).\n"
             f"ExecStart=/bin/mount --bind {PROC_DRIVER_SOURCE} /proc/driver\n") if mig else ""
    return _DRIVER_UNIT.format(flag_dir=LOADED_FLAG.rsplit("/", 1)[0], flag=LOADED_FLAG, mig=mount)


def node_files(gpus: list[FakeGpu]) -> list[NodeFile]:
    """What the sandbox places in a node's overlay for ``gpus`` (see the module text)."""
    devices = "".join(f"L+ {DEVICE_PREFIX}{i} - - - - /dev/null\n" for i in range(len(gpus)))
    mig = mig_instances(gpus)
    if mig:
        devices += f"d {CAPS_DIR} 0755 root root -\n" + "".join(
            f"L+ {CAPS_DIR}/nvidia-cap{minor} - - - - /dev/null\n"
            for minor in [1, 2, *(m for d in mig for m in (d.gi_minor, d.ci_minor))])
    unit = f"/etc/systemd/system/{DRIVER_UNIT}"
    files = [
        NodeFile(INSTALL_PATH, script(gpus), 0o755),
        NodeFile("/etc/tmpfiles.d/gpu-autoscaler-fake-nvidia.conf", devices),
        NodeFile(unit, driver_unit(bool(mig))),
        NodeFile(f"/etc/systemd/system/multi-user.target.wants/{DRIVER_UNIT}", f"../{DRIVER_UNIT}",
                 link=True),
    ]
    if mig:
        files.append(NodeFile(f"{PROC_DRIVER_SOURCE}/nvidia-caps/mig-minors", mig_minors(len(gpus))))
    return files
