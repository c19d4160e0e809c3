"""A fake NVIDIA stack for sandbox nodes, which have no GPUs: ``nvidia-smi``, device files
and a driver that loads at boot once nouveau is blacklisted.

The sandbox places ``node_files()`` in a node's overlay before it boots, so the roles' GPU
detection, driver check, reboot decision, health check and Slurm gres run for real against
a chosen GPU inventory. The roles never ship any of it.

* ``/usr/bin/nvidia-smi`` answers ``--query-gpu=a,b,... --format=csv[,noheader][,nounits]``
  and ``-L``; anything else exits 0 silently, like a no-op setting change. Until the driver
  is loaded it fails the way the real one does (exit 9, "couldn't communicate with the
  NVIDIA driver").
* The "driver" loads at boot (a oneshot unit touching ``LOADED_FLAG`` under /run) only when
  ``/etc/modprobe.d/blacklist-nouveau.conf`` exists, as on a GPU instance where nouveau
  holds the GPUs until the node reboots with the blacklist: the nvidia_driver role's reboot
  path is needed on a fresh node and not afterwards. It runs before sshd, so Ansible never
  reconnects to a node whose driver is still loading.
* ``/dev/nvidia0..N-1`` are links to /dev/null made at every boot (systemd-tmpfiles), the
  device files Slurm's gres.conf names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from autoscaler.sandbox.hosts.ssh_hosts import NodeFile

INSTALL_PATH = "/usr/bin/nvidia-smi"
LOADED_FLAG = "/run/gpu-autoscaler-fake-nvidia/loaded"
DEVICE_PREFIX = "/dev/nvidia"
DRIVER_UNIT = "gpu-autoscaler-fake-nvidia-driver.service"


@dataclass(frozen=True)
class FakeGpu:
    name: str = "Tesla T4"
    temperature: int = 40
    ecc_uncorrected: int = 0
    memory_mib: int = 15360


_SCRIPT = '''#!/usr/bin/python3
"""Fake nvidia-smi placed by gpu-autoscaler's sandbox (no real GPU here)."""
import json, os, sys
GPUS = json.loads(%(gpus)r)
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
        "mig.mode.current": "[N/A]", "driver_version": "550.54.15",
    }.get(key, "[N/A]")

args = sys.argv[1:]
query = next((a.split("=", 1)[1] for a in args if a.startswith("--query-gpu=")), None)
fmt = next((a.split("=", 1)[1] for a in args if a.startswith("--format=")), "")
nounits = "nounits" in fmt
if query is not None:
    keys = [k.strip() for k in query.split(",")]
    if "noheader" not in fmt:
        print(", ".join(keys))
    for i, gpu in enumerate(GPUS):
        print(", ".join(field(i, gpu, k) for k in keys))
elif "-L" in args:
    for i, gpu in enumerate(GPUS):
        print("GPU %%d: %%s (UUID: GPU-fake-%%04d)" %% (i, gpu["name"], i))
'''


def script(gpus: list[FakeGpu]) -> str:
    """The executable text of a fake nvidia-smi reporting ``gpus``."""
    data = json.dumps([g.__dict__ for g in gpus])
    return _SCRIPT % {"gpus": data, "flag": LOADED_FLAG}


_DRIVER_UNIT = f"""[Unit]
Description=Fake NVIDIA driver of gpu-autoscaler's sandbox (loads when nouveau is blacklisted)
ConditionPathExists=/etc/modprobe.d/blacklist-nouveau.conf
# A real module loads from udev long before sshd; without this order Ansible's reboot could
# reconnect first and find no driver (failed once in CI under load).
Before=ssh.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c 'mkdir -p {LOADED_FLAG.rsplit("/", 1)[0]} && touch {LOADED_FLAG}'
RemainAfterExit=yes
# No Restart=: the one failure seen (CI under load, after the driver reboot) was the
# sandbox's, hosts sharing one cgroup tree (hosts/cgroups.py), and a retry would hide the
# next one.

[Install]
WantedBy=multi-user.target
"""


def node_files(gpus: list[FakeGpu]) -> list[NodeFile]:
    """What the sandbox places in a node's overlay for ``gpus`` (see the module text)."""
    devices = "".join(f"L+ {DEVICE_PREFIX}{i} - - - - /dev/null\n" for i in range(len(gpus)))
    unit = f"/etc/systemd/system/{DRIVER_UNIT}"
    return [
        NodeFile(INSTALL_PATH, script(gpus), 0o755),
        NodeFile("/etc/tmpfiles.d/gpu-autoscaler-fake-nvidia.conf", devices),
        NodeFile(unit, _DRIVER_UNIT),
        NodeFile(f"/etc/systemd/system/multi-user.target.wants/{DRIVER_UNIT}", f"../{DRIVER_UNIT}",
                 link=True),
    ]
