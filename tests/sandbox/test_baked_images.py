"""A baked image's layer in the sandbox: what a builder's upper layer keeps and leaves out
(no booted host here; tests/sandbox/test_stack.py boots a builder and a node of its image)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.terraform.bake import BUILDER_TAG
from autoscaler.actuators.terraform.rootmodule import HASH_TAG
from autoscaler.sandbox.hosts import first_boot
from autoscaler.sandbox.services.moto_server import MOTO_AMI
from autoscaler.sandbox.stack.baked_images import (
    BakedImageError,
    capture,
    hash_of_image,
    hashes_of_builder,
    layer_path,
)


class FakeEc2:
    """describe_images over a fixed list of images; records each call."""

    def __init__(self, images: list[dict[str, Any]]):
        self.images = images
        self.calls: list[dict[str, Any]] = []

    def describe_images(self, **kwargs: Any) -> dict[str, Any]:
        self.calls.append(kwargs)
        ids = kwargs.get("ImageIds")
        wanted = {f["Name"][4:]: f["Values"] for f in kwargs.get("Filters", [])}
        return {"Images": [i for i in self.images if (ids is None or i["ImageId"] in ids) and all(
            any(t["Key"] == k and t["Value"] in v for t in i.get("Tags", []))
            for k, v in wanted.items())]}


def image(image_id: str, **tags: str) -> dict[str, Any]:
    return {"ImageId": image_id, "Tags": [{"Key": k, "Value": v} for k, v in tags.items()]}


def write(root: Path, rel: str, text: str = "x") -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_the_layer_keeps_the_plays_files_and_none_of_the_instances_own(tmp_path: Path) -> None:
    upper = tmp_path / "upper"
    kept = ["etc/modprobe.d/blacklist-nouveau.conf", "opt/tool/bin", "var/log/cloud-init-output.log"]
    own = ["etc/machine-id", "etc/hostname", "etc/ssh/ssh_host_ed25519_key",
           "etc/ssh/ssh_host_ed25519_key.pub", "root/.ssh/authorized_keys",
           "var/log/journal/abc/system.journal", "var/lib/systemd/random-seed", "tmp/x",
           "var/tmp/y", "run/z", first_boot.DONE.lstrip("/"), "usr/local/bin/nvidia-smi"]
    for rel in [*kept, *own]:
        write(upper, rel)
    (upper / "opt/tool/bin").chmod(0o750)
    (upper / "etc/systemd/system/multi-user.target.wants").mkdir(parents=True)
    (upper / "etc/systemd/system/multi-user.target.wants/u.service").symlink_to("../u.service")
    placed = ("/usr/local/bin/nvidia-smi", "/etc/systemd/system/multi-user.target.wants/u.service")
    layer = capture(upper, tmp_path / "images", "abc123", placed)
    assert layer == tmp_path / "images" / "abc123"
    assert all((layer / rel).is_file() for rel in kept)
    assert (layer / "opt/tool/bin").stat().st_mode & 0o777 == 0o750  # cp -a keeps modes
    assert [rel for rel in own if (layer / rel).exists()] == []
    assert not (layer / "etc/systemd/system/multi-user.target.wants/u.service").is_symlink()
    assert (layer / "etc/ssh").is_dir()  # only the keys went
    assert [p.name for p in (tmp_path / "images").iterdir()] == ["abc123"]  # no temp dir left
    assert (upper / "etc/machine-id").exists()  # the builder's own disk is untouched


@pytest.mark.parametrize("bad", ["", "../up", "a/b", ".hidden", "x" * 200])
def test_a_hash_that_is_not_a_plain_name_makes_no_path(tmp_path: Path, bad: str) -> None:
    with pytest.raises(BakedImageError):
        layer_path(tmp_path, bad)


def test_images_are_found_by_their_builder_and_the_base_image_asks_nothing() -> None:
    ec2 = FakeEc2([image("ami-1", **{HASH_TAG: "h1", BUILDER_TAG: "i-b"}),
                   image("ami-2", **{HASH_TAG: "h1", BUILDER_TAG: "i-b"}),
                   image("ami-3", **{HASH_TAG: "h2", BUILDER_TAG: "i-other"}),
                   image("ami-4", Name="no hash")])
    assert hashes_of_builder(ec2, "i-b") == {"h1": ["ami-1", "ami-2"]}
    assert ec2.calls[-1]["Owners"] == ["self"]
    assert (hash_of_image(ec2, "ami-3"), hash_of_image(ec2, "ami-4")) == ("h2", None)
    calls = len(ec2.calls)
    assert hash_of_image(ec2, MOTO_AMI) is None and len(ec2.calls) == calls
