"""The cluster_join role's Slurm gres for shared GPUs, rendered by ansible-playbook on
localhost (no host, no slurmd): gres.conf and the dynamic node's ``slurmd --conf`` Gres=
from what nvidia-smi and the driver report, for MIG, MPS / time-slicing and whole GPUs.

The role's own vars and template are used as they are; only the registered results of its
detection tasks (``nvidia-smi``, ``nvidia-smi mig -lci``, the driver's mig-minors) are given,
as a node with the GPUs would produce them.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.sandbox.fakes.nvidia_smi import mig_minors

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="ansible-playbook not installed")

ROLE = Path(__file__).resolve().parents[2] / "playbooks" / "roles" / "cluster_join"
A100 = ["0, NVIDIA A100-SXM4-80GB", "1, NVIDIA A100-SXM4-80GB"]
T4 = [f"{i}, Tesla T4" for i in range(4)]
# `nvidia-smi mig -lci` of two A100s with two 3g.40gb instances each (GPU instances 1, 2).
LCI = """\
+--------------------------------------------------------------------+
| Compute instances:                                                 |
| GPU     GPU       Name             Profile   Instance   Placement  |
|       Instance                       ID        ID       Start:Size |
|         ID                                                         |
|====================================================================|
|   0      1       MIG 3g.40gb          2         0          0:3     |
+--------------------------------------------------------------------+
|   0      2       MIG 3g.40gb          2         0          0:3     |
+--------------------------------------------------------------------+
|   1      1       MIG 3g.40gb          2         0          0:3     |
+--------------------------------------------------------------------+
|   1      2       MIG 3g.40gb          2         0          0:3     |
+--------------------------------------------------------------------+
"""


PLAYBOOK = """\
- hosts: all
  connection: local
  gather_facts: false
  vars_files: [{role}/vars/main.yml]
  tasks:
    - name: Render gres.conf
      ansible.builtin.template:
        src: {role}/templates/gres.conf.j2
        dest: "{{{{ out }}}}/{{{{ inventory_hostname }}}}.gres.conf"
        mode: "0644"
    - name: Record the dynamic node's --conf
      ansible.builtin.copy:
        content: "{{{{ cluster_join_slurm_dynamic_conf }}}}"
        dest: "{{{{ out }}}}/{{{{ inventory_hostname }}}}.conf"
        mode: "0644"
"""
MINORS = base64.b64encode(mig_minors(2).encode()).decode()
NODES: dict[str, dict[str, Any]] = {
    "mig": {"gpus": A100, "gpu_sharing_mode": "mig",
            "gpu_sharing_mig_profiles": ["3g.40gb", "3g.40gb"],
            "cluster_join_mig_listing": {"stdout": LCI},
            "cluster_join_mig_minors": {"content": MINORS}},
    "mps": {"gpus": T4, "gpu_sharing_mode": "mps", "gpu_sharing_mps_replicas": 4},
    "time-slicing": {"gpus": T4, "gpu_sharing_mode": "time-slicing",
                     "gpu_sharing_time_slicing_replicas": 8},
    "none": {"gpus": T4[:1]},
}


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[str], str]]:
    """Each node's gres.conf lines and --conf: one ansible-playbook run for all of them."""
    tmp = tmp_path_factory.mktemp("cluster-join-gres")
    hosts = {name: {"out": str(tmp), "ansible_python_interpreter": sys.executable,
                    "cluster_join_node_name": f"vision-{name}-1", "cluster_join_team": "vision",
                    "cluster_join_pool": name,
                    "cluster_join_gpus": {"stdout_lines": node["gpus"]},
                    **{k: v for k, v in node.items() if k != "gpus"}}
             for name, node in NODES.items()}
    # The role's defaults as group vars: below the hosts' own, as a role's defaults are.
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    (tmp / "hosts.json").write_text(json.dumps({"all": {"vars": defaults, "hosts": hosts}}))
    (tmp / "play.yml").write_text(PLAYBOOK.format(role=ROLE))
    done = subprocess.run(["ansible-playbook", "-i", str(tmp / "hosts.json"), str(tmp / "play.yml")],
                          capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return {name: ([line for line in (tmp / f"{name}.gres.conf").read_text().splitlines()
                    if line.startswith("NodeName=")], (tmp / f"{name}.conf").read_text())
            for name in NODES}


def test_mig_gres_names_each_device_by_its_gpu_and_nvidia_caps_files(
        rendered: dict[str, tuple[list[str], str]]) -> None:
    lines, conf = rendered["mig"]
    # GPU g, GPU instance i: minor 3 + 135 g + 9 i; its compute instance 0: one more.
    assert lines == [
        "NodeName=vision-mig-1 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,"
        "/dev/nvidia-caps/nvidia-cap12,/dev/nvidia-caps/nvidia-cap13",
        "NodeName=vision-mig-1 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia0,"
        "/dev/nvidia-caps/nvidia-cap21,/dev/nvidia-caps/nvidia-cap22",
        "NodeName=vision-mig-1 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia1,"
        "/dev/nvidia-caps/nvidia-cap147,/dev/nvidia-caps/nvidia-cap148",
        "NodeName=vision-mig-1 Name=gpu Type=3g.40gb MultipleFiles=/dev/nvidia1,"
        "/dev/nvidia-caps/nvidia-cap156,/dev/nvidia-caps/nvidia-cap157",
    ]
    assert conf.startswith("Gres=gpu:3g.40gb:4 Feature=partition-gpu,team-vision,pool-mig")


@pytest.mark.parametrize(("node", "shards"), [("mps", 16), ("time-slicing", 32)])
def test_shared_gpus_advertise_shards_next_to_the_gpus(
        rendered: dict[str, tuple[list[str], str]], node: str, shards: int) -> None:
    lines, conf = rendered[node]  # 4 T4s x 4 MPS clients, x 8 time-slicing replicas
    assert lines == [f"NodeName=vision-{node}-1 Name=gpu Type=t4 File=/dev/nvidia[0-3]",
                     f"NodeName=vision-{node}-1 Name=shard Count={shards} File=/dev/nvidia[0-3]"]
    assert conf.startswith(f"Gres=gpu:t4:4,shard:{shards} Feature=")


def test_unshared_gpus_are_whole_gpus_as_before(
        rendered: dict[str, tuple[list[str], str]]) -> None:
    lines, conf = rendered["none"]
    assert lines == ["NodeName=vision-none-1 Name=gpu Type=t4 File=/dev/nvidia0"]
    assert conf.startswith("Gres=gpu:t4:1 Feature=")
