"""A baked image in the sandbox: the node image plus the image-time part, kept as a layer.

A bake (``actuators/terraform/bake.py``) launches a *builder* instance, runs the playbook's
image-time part on it and makes an AMI of it tagged with the pool's bootstrap hash and the
builder's instance id, then destroys the builder. Moto stores the AMI but no disk, so the
sandbox keeps the disk itself: what the builder's host wrote over the node image (its
overlay's upper layer) is copied to ``<images_dir>/<hash>/`` when the builder goes, and a
node launched from an image carrying that hash boots the node image with this directory as
an extra read-only layer (``SshHosts(layers=...)``).

What belongs to the builder instance, not to the image, is left out (``PER_INSTANCE`` and
every file the sandbox itself placed in the builder's host), so a node from the image gets
its own machine id, host name, SSH host key and journal, and runs its own user_data at its
first boot (the first-boot marker is not copied).

Real AWS snapshots the disk at CreateImage; here the copy is taken when the builder is
removed. The bake runs nothing on the builder between making the image and destroying it,
so the builder's disk is the same at both times.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from autoscaler.actuators.terraform.bake import BUILDER_TAG
from autoscaler.actuators.terraform.rootmodule import HASH_TAG
from autoscaler.sandbox.hosts import first_boot
from autoscaler.sandbox.services.moto_server import MOTO_AMI

# The instance's own, never the image's (a trailing * matches names in that directory).
PER_INSTANCE = (
    "/etc/machine-id", "/etc/hostname", "/etc/ssh/ssh_host_*", "/root/.ssh", "/var/log/journal",
    "/var/lib/systemd/random-seed", "/tmp", "/var/tmp", "/run", first_boot.DONE,
)
COPY_TIMEOUT_S = 300.0
_HASH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")  # becomes a directory name


class BakedImageError(RuntimeError):
    pass


def _tags(image: dict[str, Any]) -> dict[str, str]:
    return {t["Key"]: t["Value"] for t in image.get("Tags", [])}


def hash_of_image(ec2: Any, image_id: str) -> str | None:
    """The bootstrap hash an image carries, or None (moto's base image: no call made)."""
    if not image_id or image_id == MOTO_AMI:
        return None
    images = ec2.describe_images(ImageIds=[image_id]).get("Images", [])
    return _tags(images[0]).get(HASH_TAG) if images else None


def hashes_of_builder(ec2: Any, instance_id: str) -> dict[str, list[str]]:
    """hash -> the ids of our images made of this builder instance."""
    out: dict[str, list[str]] = {}
    images = ec2.describe_images(Owners=["self"], Filters=[
        {"Name": f"tag:{BUILDER_TAG}", "Values": [instance_id]}]).get("Images", [])
    for image in images:
        hash_ = _tags(image).get(HASH_TAG)
        if hash_:
            out.setdefault(hash_, []).append(image["ImageId"])
    return out


def layer_path(images_dir: Path, hash_: str) -> Path:
    if not _HASH.fullmatch(hash_):
        raise BakedImageError(f"not a plain bootstrap hash: {hash_!r}")
    return Path(images_dir) / hash_


def _drop(root: Path, node_path: str) -> None:
    rel = Path(node_path.lstrip("/"))
    parent = root / rel.parent
    names = (fnmatch.filter(os.listdir(parent), rel.name) if parent.is_dir() else []) \
        if "*" in rel.name else [rel.name]
    for name in names:
        path = parent / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()


def capture(upper: Path, images_dir: Path, hash_: str, placed: Iterable[str]) -> Path:
    """Copy a builder's upper layer to ``<images_dir>/<hash>`` without the instance's own
    files. ``cp -a`` keeps modes, owners, xattrs and overlayfs whiteouts; the copy is made
    in a temporary directory beside it and renamed, so a half-copied layer is never used."""
    target = layer_path(images_dir, hash_)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{hash_}."))
    try:
        copy = tmp / "layer"
        proc = subprocess.run(["cp", "-a", "--", str(upper), str(copy)], capture_output=True,
                              text=True, timeout=COPY_TIMEOUT_S, check=False)
        if proc.returncode != 0:
            raise BakedImageError(f"copying {upper} failed: {proc.stderr.strip()[-500:]}")
        for node_path in [*PER_INSTANCE, *placed]:
            _drop(copy, node_path)
        os.rename(copy, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def files_in(layer: Path) -> int:
    """How many entries (files, links, whiteouts) a layer holds, directories aside."""
    return sum(len(files) for _, _, files in os.walk(layer))
