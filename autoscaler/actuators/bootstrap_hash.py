"""The bootstrap hash: which baked image a pool's nodes may launch from.

A baked image is the pool's base image with gpu-node.yml's image-time part (``--tags
image``) applied. Everything that decides what that part installs goes into the hash, and
nothing else, so an image is stale exactly when one of these changed:

============================================  ========  ==================================
input                                         hashed    why
============================================  ========  ==================================
base image (the region's ``ami``)             yes       the image is built on it
image-time role variables: ``nvidia_driver_*``  yes     driver branch and source, CUDA
``nvidia_cuda_repo_*`` ``cuda_toolkit_*``               version, container runtime and
``container_toolkit_*`` ``dcgm_exporter_*``             toolkit version, DCGM package,
``image_prepull_*`` (policy ``bootstrap.driver``,       dcgm-exporter binary URL/checksum,
``.cuda``, ``.container_runtime``, ``.prepull``;        the pre-pulled container images
the operator's ``ansible.extra_vars``)
``cluster_join_kind`` (``cluster.kind``),       yes       which scheduler's packages the
``cluster_join_k8s_version``                            image carries (slurmd and munge,
                                                        or kubeadm and kubelet)
every file of the image-time roles            yes       a role change makes images stale
``dcgm_exporter_node_name``                   no        set per node, at node time
the join's files (cluster_join)              no        its package tasks run at node time
                                                        too: a node installs what its
                                                        image lacks
node-time settings: ``bootstrap.sharing``,    no        the node-time part (``--tags
``mig_profiles``, ``mps``, ``dcgm_diag_level``,         node``) applies them on every node
``timeout``; health; cluster (join, labels,
partition, taints); team and pool names
============================================  ========  ==================================

A warm node (policy ``warm_pool``) is stopped with all of gpu-node.yml but its start part
applied. The node-time tasks outside the start part only write what no policy setting
changes (directories, the exporter's unit, slurmd's options: the node's name); whatever a
setting or the cluster decides (sharing, slurmd's unit, slurm.conf, the munge key, the
join) is in the start part. So its **warm hash** (:func:`warm_pool_hashes`) is the
bootstrap hash over the files of every role instead of the image-time ones: an upgrade
that changes any role makes the warm nodes stale, and they are replaced.

A pre-pulled image is hashed by its reference: a tag that a registry moves to new content
does not make the image stale (pin a digest, ``name@sha256:...``, to bake exactly that).

:func:`baked_images` gives every Terraform workspace of a baked pool (the service's
provisioner and tick preview, ``gpu-autoscaler plan``) its :class:`BakedImage`; it is
computed from the policies it is given, so a policy reload changes it on the next call.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from pathlib import Path

from autoscaler.actuators.ansible.inventory import pool_vars
from autoscaler.actuators.ansible.settings import AnsibleSettings
from autoscaler.actuators.terraform.rootmodule import BakedImage
from autoscaler.actuators.terraform.settings import TerraformSettings
from autoscaler.policy.models import Pool, TeamPolicy, pool_key

# The roles gpu-node.yml runs under --tags image (with their dependencies and helpers).
IMAGE_ROLES = ("nvidia_cuda_repo", "nvidia_driver", "cuda_toolkit", "container_toolkit",
               "dcgm_exporter", "image_prepull", "node_service")
_IMAGE_VAR_PREFIXES = tuple(f"{role}_" for role in IMAGE_ROLES)
# Variables of the image-time roles whose value is the node's own: never in an image.
NODE_TIME_VARS = frozenset({"dcgm_exporter_node_name"})
# The join's variables that decide which scheduler packages a bake installs.
IMAGE_TIME_VARS = frozenset({"cluster_join_kind", "cluster_join_k8s_version"})
# Hex digits kept: short enough for a tag and a message, 48 bits against collisions
# among one account's images.
HASH_LENGTH = 12
# Changing how the hash is made changes every hash (old images become stale).
_FORMAT = 1


def image_vars(variables: Mapping[str, object]) -> dict[str, object]:
    """The image-time role variables among ``variables`` (role variable name -> value)."""
    return {name: value for name, value in sorted(variables.items())
            if (name.startswith(_IMAGE_VAR_PREFIXES) and name not in NODE_TIME_VARS)
            or name in IMAGE_TIME_VARS}


def bootstrap_hash(base_image: str, variables: Mapping[str, object],
                   role_files: Mapping[str, bytes], *, warm: bool = False) -> str:
    """The short sha256 of a bake's inputs (see the table above).

    ``variables``: the role variables a bootstrap run would pass (the pool's, then the
    operator's extra vars over them); only the image-time ones count. ``role_files``:
    path (relative to the roles directory) -> content, of the image-time roles
    (:func:`read_role_files`), or of every role for a ``warm`` hash.
    """
    doc = {
        "format": _FORMAT,
        **({"warm": True} if warm else {}),
        "base_image": base_image,
        "vars": image_vars(variables),
        "files": {path: hashlib.sha256(content).hexdigest()
                  for path, content in sorted(role_files.items())},
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def read_role_files(roles_dir: Path, *, every_role: bool = False) -> dict[str, bytes]:
    """Every file of the image-time roles (or of every role) under ``roles_dir``, by
    relative path."""
    out: dict[str, bytes] = {}
    roles = sorted(p.name for p in roles_dir.iterdir() if p.is_dir()) if every_role else IMAGE_ROLES
    for role in roles:
        for path in sorted((roles_dir / role).rglob("*")):
            if path.is_file():
                out[path.relative_to(roles_dir).as_posix()] = path.read_bytes()
    return out


def _run_vars(team: str, pool: Pool, extra_vars: Mapping[str, object]) -> dict[str, object]:
    """The role variables a bootstrap run passes for ``pool``: the operator's extra vars win,
    as they do in Ansible."""
    return {**pool_vars(team, pool), **extra_vars}


def pool_bootstrap_hash(team: str, pool: Pool, base_image: str,
                        extra_vars: Mapping[str, object], roles_dir: Path) -> str:
    """A pool's hash, from the same role variables its bootstrap runs pass."""
    return bootstrap_hash(base_image, _run_vars(team, pool, extra_vars),
                          read_role_files(roles_dir))


def baked_images(policies: Mapping[str, TeamPolicy], terraform: TerraformSettings,
                 ansible: AnsibleSettings) -> dict[str, BakedImage]:
    """Pool key -> the image each pool with ``bootstrap.image: baked`` launches from: the
    hash of its region's base image (``terraform.regions``), its role variables with
    ``ansible.extra_vars`` over them and the image-time roles beside ``ansible.playbook``,
    and its ``when_stale``. Base pools are absent (``.get`` gives None), and so is a baked
    pool in a region without Terraform inputs (Terraform does not plan it at all). The role
    files are read once per call, and only if a pool is baked."""
    hashes = _hashes(policies, terraform, ansible, lambda p: p.bootstrap.image == "baked")
    pools = {pool_key(t.team, p.name): p for t in policies.values() for p in t.pools}
    return {key: BakedImage(digest, pools[key].bootstrap.when_stale)
            for key, digest in hashes.items()}


def warm_pool_hashes(policies: Mapping[str, TeamPolicy], terraform: TerraformSettings,
                     ansible: AnsibleSettings) -> dict[str, str]:
    """Pool key -> the warm hash of each pool with a warm pool (the module's docstring): a
    warm node warmed with another hash is stale and is replaced. A pool in a region without
    Terraform inputs is absent (nothing launches there)."""
    return _hashes(policies, terraform, ansible, lambda p: p.warm_pool is not None, warm=True)


def _hashes(policies: Mapping[str, TeamPolicy], terraform: TerraformSettings,
            ansible: AnsibleSettings, wanted: Callable[[Pool], bool], *,
            warm: bool = False) -> dict[str, str]:
    """Pool key -> bootstrap (or ``warm``) hash of the ``wanted`` pools with Terraform
    inputs for their region; the role files are read once, and only if a pool is wanted."""
    chosen = [(t.team, p) for t in policies.values() for p in t.pools if wanted(p)]
    if not chosen:
        return {}
    files = read_role_files(ansible.roles_dir(), every_role=warm)
    out: dict[str, str] = {}
    for team, pool in chosen:
        inputs = terraform.inputs_for(pool.cloud, pool.region)
        if inputs is not None:
            out[pool_key(team, pool.name)] = bootstrap_hash(
                inputs.ami, _run_vars(team, pool, ansible.extra_vars), files, warm=warm)
    return out
