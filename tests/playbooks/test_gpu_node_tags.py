"""gpu-node.yml's split into an image-time part (``--tags image``: what a baked image
carries) and a node-time part (``--tags node``: what a node launched from it still runs),
and the node-time part's start part (``--tags start``: what a warm node runs when a launch
starts it), read from ``ansible-playbook --list-tasks`` (no host is contacted; the tasks a
role includes at run time are not listed, only the include).

A task in both parts runs at bake time and again on every node; a run without --tags (the
full bootstrap) runs every task, so every task must be in at least one part.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.skipif(shutil.which("ansible-playbook") is None,
                                reason="ansible-playbook not installed")

PLAYBOOK = Path(__file__).resolve().parents[2] / "playbooks" / "gpu-node.yml"
_TASK = re.compile(r"^\s{6}(?P<name>\S.*?)\tTAGS: \[(?P<tags>[^\]]*)\]$")

REPO = "nvidia_cuda_repo : Gather the facts NVIDIA's repositories need", \
    "nvidia_cuda_repo : Install the CUDA repository keyring", \
    "nvidia_cuda_repo : Refresh the package index now if the repository was added"
BOTH = [
    "nvidia_driver : Check the loaded driver branch",
    "nvidia_driver : Fail when the loaded driver is not on the pinned branch",
]
IMAGE = [
    *REPO,
    "nvidia_driver : Gather the facts NVIDIA's repositories need",
    "nvidia_driver : Create the modprobe configuration directory",
    "nvidia_driver : Pin the NVIDIA driver to its branch",
    "nvidia_driver : Blacklist the nouveau driver",
    "nvidia_driver : Rebuild the initramfs without nouveau",
    "nvidia_driver : Install kernel headers and DKMS",
    "nvidia_driver : Install the NVIDIA driver {{ nvidia_driver_branch }}",
    "nvidia_driver : Check whether the NVIDIA driver answers",
    "nvidia_driver : Check whether nouveau is loaded",
    "nvidia_driver : Decide whether a reboot is needed",
    "nvidia_driver : Fail when a reboot is needed but not allowed",
    "nvidia_driver : Reboot to load the NVIDIA driver",
    *BOTH,
    *REPO,
    "cuda_toolkit : Install the CUDA toolkit {{ cuda_toolkit_version }}",
    "cuda_toolkit : Put the CUDA toolkit on every login PATH",
    "cuda_toolkit : Check the installed nvcc version",
    "container_toolkit : Download the repository signing key",
    "container_toolkit : Add the repository source",
    "container_toolkit : Refresh the package index now if the repository was added",
    "container_toolkit : Install nvidia-container-toolkit",
    "container_toolkit : Configure the runtime {{ container_toolkit_runtime }}",
    *REPO,
    "dcgm_exporter : Install DCGM",
    "Start the DCGM host engine",
    "dcgm_exporter : Fail without a dcgm-exporter binary URL",
    "dcgm_exporter : Download dcgm-exporter",
    "dcgm_exporter : Create the dcgm-exporter configuration directory",
    "dcgm_exporter : Write the dcgm-exporter counters",
    "Start containerd for the pulls",
    "image_prepull : List the images containerd already has",
    "image_prepull : Pull the pool's container images",
    # Only to reach the scheduler's package tasks (JOIN_IMAGE_TASKS): the join is node time.
    "cluster_join : Join the cluster {{ cluster_join_kind }}",
]
# The tasks of the join's files that a bake runs: the scheduler's packages, nothing else.
JOIN_IMAGE_TASKS = {"Check whether slurmd and munge are installed", "Install slurmd and munge",
                    "Install kubeadm and kubelet from pkgs.k8s.io"}
START = [
    "nvidia_driver : Read persistence mode",
    "nvidia_driver : Turn persistence mode on",
    "dcgm_exporter : Set the host name to the node name",
    "Start the DCGM host engine",
    "Start dcgm-exporter",
    "gpu_sharing : Check the sharing mode",
    "gpu_sharing : List the GPUs",
    "gpu_sharing : Remove the configuration of other sharing modes",
    "gpu_sharing : Configure the sharing mode {{ gpu_sharing_mode }}",
    "gpu_health_check : Query every GPU with nvidia-smi",
    "gpu_health_check : Fail when nvidia-smi does not answer",
    "gpu_health_check : Parse the GPU report",
    "gpu_health_check : Check the GPU count",
    "gpu_health_check : Check the GPU model",
    "gpu_health_check : Check uncorrectable ECC errors",
    "gpu_health_check : Check GPU temperatures",
    "gpu_health_check : Run the DCGM diagnostic level {{ gpu_health_check_dcgm_diag_level }}",
    "gpu_health_check : Fail when the DCGM diagnostic fails",
    "cluster_join : Check the cluster kind",
    "cluster_join : Join the cluster at a warm node's start, {{ cluster_join_kind }}",
]
# What a warm node's entry runs of the node-time part beside the start part: files a stop
# keeps, and the include of the join's own tasks (each tagged start or not).
NODE = [*BOTH, *START[:4], "Write the dcgm-exporter unit", *START[4:-1],
        "cluster_join : Join the cluster {{ cluster_join_kind }}", START[-1]]


def list_tasks(*args: str) -> list[tuple[str, set[str]]]:
    out = subprocess.run(
        ["ansible-playbook", "-i", "localhost,", "--list-tasks", *args, str(PLAYBOOK)],
        capture_output=True, text=True, timeout=120, check=True,
        cwd=PLAYBOOK.parent).stdout
    return [(m["name"], {t.strip() for t in m["tags"].split(",") if t.strip()})
            for m in map(_TASK.match, out.splitlines()) if m]


def test_image_and_node_tags_split_the_playbook_exactly() -> None:
    with ThreadPoolExecutor(3) as pool:
        full, image, node, start, entry = pool.map(
            lambda a: list_tasks(*a), [(), ("--tags", "image"), ("--tags", "node"),
                                       ("--tags", "start"), ("--skip-tags", "start")])
    assert [name for name, _ in image] == IMAGE
    assert [name for name, _ in node] == NODE
    # A warm node: its entry and its start together run the full bootstrap, each task once.
    assert [name for name, _ in start] == START
    assert all("node" in tags for _, tags in start)
    entered = [name for name, _ in entry]
    assert sorted([*entered, *START]) == sorted(name for name, _ in full)
    # The full bootstrap is unchanged: every task, in its order, and each in a part.
    shared = [name for name in NODE if name in IMAGE]
    assert shared == [*BOTH, "Start the DCGM host engine",
                      "cluster_join : Join the cluster {{ cluster_join_kind }}"]
    assert len(full) == len(IMAGE) + len(NODE) - len(shared)
    untagged = [name for name, tags in full if not tags & {"image", "node"}]
    assert untagged == []
    # Nothing that names the node, joins or checks the node's GPUs is baked in.
    baked = {name for name, _ in image}
    assert not baked & {"dcgm_exporter : Set the host name to the node name",
                        "Write the dcgm-exporter unit", "nvidia_driver : Turn persistence mode on"}
    assert not any(name.startswith(("gpu_health_check", "gpu_sharing")) for name in baked)
    assert [name for name in baked if name.startswith("cluster_join")] == [
        "cluster_join : Join the cluster {{ cluster_join_kind }}"]


def test_the_join_bakes_only_the_schedulers_packages() -> None:
    """The join's files are included at run time (not listed above): read their tags."""
    image = set()
    for path in (PLAYBOOK.parent / "roles" / "cluster_join" / "tasks").glob("*.yml"):
        if path.name == "main.yml":  # the include, listed above
            continue
        for task in yaml.safe_load(path.read_text()) or []:
            if "image" in task.get("tags", []):
                image.add(task["name"])
                assert "start" not in task.get("tags", []), task["name"]
    assert image == JOIN_IMAGE_TASKS
