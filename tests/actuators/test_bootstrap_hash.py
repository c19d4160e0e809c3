"""The bootstrap hash: same bake inputs, same hash; any image-time setting or image-time
role file changed, a new hash; node-time settings (join, labels, sharing, health) never
change it. The warm hash (warm-pool nodes) is the same over every role's files."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible.inventory import pool_vars
from autoscaler.actuators.ansible.settings import DEFAULT_PLAYBOOK
from autoscaler.actuators.bootstrap_hash import (
    HASH_LENGTH,
    bootstrap_hash,
    pool_bootstrap_hash,
    read_role_files,
)
from tests.builders import make_policy

ROLES = DEFAULT_PLAYBOOK.parent / "roles"
AMI = "ami-1e749f67"
BASE: dict[str, Any] = {"bootstrap": {"driver": "550", "cuda": "12.4"},
                        "cluster": {"kind": "slurm", "partition": "gpu"}}


def pool_hash(pool_kw: dict[str, Any] | None = None, *, team: str = "vision",
              ami: str = AMI, extra: dict[str, object] | None = None,
              roles: Path = ROLES, warm: bool = False) -> str:
    policy = make_policy(team=team, **(pool_kw if pool_kw is not None else BASE))
    if warm:
        return bootstrap_hash(ami, {**pool_vars(team, policy.pools[0]), **(extra or {})},
                              read_role_files(roles, every_role=True), warm=True)
    return pool_bootstrap_hash(team, policy.pools[0], ami, extra or {}, roles)


def test_same_settings_give_the_same_short_hash() -> None:
    first, again = pool_hash(), pool_hash(dict(BASE))
    assert first == again
    assert len(first) == HASH_LENGTH and int(first, 16) >= 0
    # Order of variables or files does not matter; the function is pure.
    files = read_role_files(ROLES)
    assert bootstrap_hash(AMI, {"a_x": 1, "cuda_toolkit_version": "12.4"}, files) == \
        bootstrap_hash(AMI, {"cuda_toolkit_version": "12.4", "a_x": 1},
                       dict(reversed(list(files.items()))))


IMAGE_TIME: list[tuple[str, dict[str, Any]]] = [
    ("driver branch", {"pool_kw": {**BASE, "bootstrap": {"driver": "535", "cuda": "12.4"}}}),
    ("cuda version", {"pool_kw": {**BASE, "bootstrap": {"driver": "550", "cuda": "12.2"}}}),
    ("container runtime", {"pool_kw": {**BASE, "bootstrap": {
        "driver": "550", "cuda": "12.4", "container_runtime": "docker"}}}),
    ("base image", {"ami": "ami-0123abcd"}),
    ("container toolkit version", {"extra": {"container_toolkit_version": "1.17.3-1"}}),
    ("dcgm package", {"extra": {"dcgm_exporter_dcgm_package": "datacenter-gpu-manager-4-cuda12"}}),
    ("dcgm-exporter build", {"extra": {"dcgm_exporter_binary_checksum": "sha256:" + "0" * 64}}),
    ("driver source", {"extra": {"nvidia_driver_source": "distro"}}),
    ("pre-pulled images", {"pool_kw": {**BASE, "bootstrap": {
        **BASE["bootstrap"], "prepull": ["nvcr.io/nvidia/pytorch:24.05-py3"]}}}),
    ("plain-HTTP registries", {"extra": {"image_prepull_plain_http": ["registry.internal"]}}),
    # The bake installs the scheduler's packages: slurmd and munge, or kubeadm and kubelet.
    ("cluster kind", {"pool_kw": {**BASE, "cluster": {"kind": "kubernetes"}}}),
    ("kubernetes packages", {"extra": {"cluster_join_k8s_version": "1.31"}}),
]


@pytest.mark.parametrize(("what", "change"), IMAGE_TIME, ids=[w for w, _ in IMAGE_TIME])
def test_an_image_time_setting_changes_the_hash(what: str, change: dict[str, Any]) -> None:
    assert pool_hash(**change) != pool_hash(), what
    assert pool_hash(**change, warm=True) != pool_hash(warm=True), what


NODE_TIME: list[tuple[str, dict[str, Any]]] = [
    ("team", {"team": "speech"}),
    ("sharing", {"pool_kw": {**BASE, "bootstrap": {**BASE["bootstrap"], "sharing": "mps"}}}),
    ("diag level and timeout", {"pool_kw": {**BASE, "bootstrap": {
        **BASE["bootstrap"], "dcgm_diag_level": 3, "timeout": "45m"}}}),
    ("cluster labels", {"pool_kw": {**BASE, "cluster": {
        "kind": "slurm", "partition": "gpu", "labels": {"tier": "batch"}}}}),
    ("partition", {"pool_kw": {**BASE, "cluster": {"kind": "slurm", "partition": "big"}}}),
    ("health", {"pool_kw": {**BASE, "health": {"max_gpu_temperature": 80}}}),
    ("join secrets and node name", {"extra": {"cluster_join_k8s_token": "abcdef.0123456789abcdef",
                                              "dcgm_exporter_node_name": "other"}}),
]


@pytest.mark.parametrize(("what", "change"), NODE_TIME, ids=[w for w, _ in NODE_TIME])
def test_a_node_time_setting_keeps_the_hash(what: str, change: dict[str, Any]) -> None:
    assert pool_hash(**change) == pool_hash(), what
    # A warm node's entry writes nothing a node-time setting decides (the start part does).
    assert pool_hash(**change, warm=True) == pool_hash(warm=True), what


def test_an_image_time_role_change_makes_a_new_hash_a_node_time_role_change_does_not(
        tmp_path: Path) -> None:
    roles = tmp_path / "roles"
    shutil.copytree(ROLES, roles)
    before = pool_hash(roles=roles)
    assert before == pool_hash()
    warm = pool_hash(roles=roles, warm=True)
    assert warm != before  # never taken for a baked image's hash
    with (roles / "cluster_join" / "tasks" / "main.yml").open("a") as fh:
        fh.write("\n# a node-time change\n")
    assert pool_hash(roles=roles) == before
    # A warm node's entry ran every role: any role's change makes it stale.
    assert pool_hash(roles=roles, warm=True) != warm
    with (roles / "nvidia_driver" / "tasks" / "main.yml").open("a") as fh:
        fh.write("\n# an image-time change\n")
    changed = pool_hash(roles=roles)
    assert changed != before
    (roles / "dcgm_exporter" / "templates" / "extra.j2").write_text("new file\n")
    third = pool_hash(roles=roles)
    assert third not in (before, changed)
    with (roles / "image_prepull" / "tasks" / "main.yml").open("a") as fh:
        fh.write("\n# the pull changed\n")
    assert pool_hash(roles=roles) not in (before, changed, third)
