"""A fake ``nvidia-smi`` for SSH test hosts, which have no GPUs.

The sandbox and the tests put it on a host (``/usr/bin/nvidia-smi`` in the host's private
filesystem) so the roles' GPU detection and health check run for real against a chosen
GPU inventory. The roles never ship it. It answers ``--query-gpu=a,b,...
--format=csv[,noheader][,nounits]`` and ``-L``; anything else exits 0 silently, like a
no-op setting change.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

INSTALL_PATH = "/usr/bin/nvidia-smi"


@dataclass(frozen=True)
class FakeGpu:
    name: str = "Tesla T4"
    temperature: int = 40
    ecc_uncorrected: int = 0
    memory_mib: int = 15360


_SCRIPT = '''#!/usr/bin/python3
"""Fake nvidia-smi placed by gpu-autoscaler's sandbox (no real GPU here)."""
import json, sys
GPUS = json.loads(%(gpus)r)

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
    return _SCRIPT % {"gpus": data}
