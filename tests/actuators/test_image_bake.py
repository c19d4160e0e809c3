"""The bake's steps and their order with a recording workspace and Ansible (no Terraform, no
SSH): the builder always goes, images are pruned only after a good bake, refusals say why.
The real thing runs in tests/e2e/test_baked_image_e2e.py and test_terraform_moto.py."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible import AnsibleSettings, BootstrapRun, HostResult, HostStatus
from autoscaler.actuators.image_bake import BakeError, bake_pool, wait_for_port
from autoscaler.actuators.terraform.bake import Builder, KeptImage
from autoscaler.actuators.terraform.settings import RegionInputs, TerraformSettings
from autoscaler.model.node import Node
from autoscaler.policy.models import TeamPolicy
from tests.builders import make_policy, make_pool_dict

INPUTS = RegionInputs(ami="ami-0base")


@dataclass
class Workspace:
    """What BakeWorkspace does, recorded; images as its state would keep them."""

    hash_: str
    instance_type: str
    builder_name: str = "vision-gpu-builder-20261204100000"
    images_: list[KeptImage] = field(default_factory=lambda: [
        KeptImage(f"img-{n}", f"ami-{n}", "i-old", "0ld") for n in (1, 2)])
    calls: list[Any] = field(default_factory=list)
    fail_image: bool = False
    adopted: list[KeptImage] = field(default_factory=list)

    def launch_builder(self) -> Builder:
        self.calls.append("launch")
        return Builder("i-builder", "127.0.0.1")

    def make_image(self, builder: Builder) -> str:
        self.calls.append(("image", builder.instance_id))
        if self.fail_image:  # as when the answer is lost: an image in no state is left
            self.adopted = [KeptImage("img-lost", "ami-lost", builder.instance_id, self.hash_,
                                      adopted=True)]
            raise RuntimeError("CreateImage refused")
        self.images_.append(KeptImage("img-3", "ami-3", builder.instance_id, self.hash_))
        return "ami-3"

    def finish(self, keep: int | None = None) -> list[KeptImage]:
        self.calls.append(("finish", keep))
        gone = [] if keep is None else self.images_[:max(0, len(self.images_) - keep)]
        self.images_ = [i for i in self.images_ if i not in gone]
        return gone

    def images(self) -> list[KeptImage]:
        return list(self.images_)


class Ansible:
    def __init__(self, port: int, status: HostStatus = HostStatus.OK):
        self.settings = AnsibleSettings(ssh_port=port)
        self.status = status
        self.baked: list[Node] = []

    def bake(self, builder: Node, policies: dict[str, TeamPolicy]) -> BootstrapRun:
        self.baked.append(builder)
        task = None if self.status is HostStatus.OK else "Install the NVIDIA driver 550"
        return BootstrapRun("run-1", Path("/runs/run-1"), "successful", 1.0, {
            builder.name: HostResult(builder.name, self.status, task, "apt failed", changed=7)})


@pytest.fixture
def listening() -> Iterator[int]:
    """A loopback port that accepts connections: the builder's sshd."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(4)
        yield sock.getsockname()[1]


def policies(image: str = "baked") -> dict[str, TeamPolicy]:
    pool = make_pool_dict(instance_types=["g4dn.xlarge", "g4dn.2xlarge"],
                          bootstrap={"image": image, "images_kept": 2})
    return {"vision": make_policy(team="vision", pools=[pool])}


def bake(ansible: Ansible, made: list[Workspace], pols: dict[str, TeamPolicy] | None = None,
         **kw: Any) -> Any:
    def workspace(settings: TerraformSettings, team: str, pool: str, region: str, *,
                  hash_: str, instance_type: str, clock: Any) -> Workspace:
        made.append(Workspace(hash_, instance_type, **kw))
        return made[-1]

    settings = TerraformSettings(regions={"aws/us-east-1": INPUTS})
    return bake_pool(pols or policies(), "vision", "gpu", terraform=settings,
                     ansible=ansible, address_of=lambda node: None,  # type: ignore[arg-type]
                     workspace=workspace,  # type: ignore[arg-type]
                     say=lambda line: None)


def test_a_good_bake_images_the_builder_then_destroys_it_and_keeps_the_newest(listening: int) -> None:
    ansible, made = Ansible(listening), list[Workspace]()
    result = bake(ansible, made)
    (ws,) = made
    assert ws.instance_type == "g4dn.xlarge" and len(ws.hash_) == 12
    assert ws.calls == ["launch", ("image", "i-builder"), ("finish", 2)]
    assert result.image == "ami-3" and result.builder == "i-builder" and result.hash == ws.hash_
    assert [i.id for i in result.deregistered] == ["ami-1"]
    assert [i.id for i in result.kept] == ["ami-2", "ami-3"]
    (node,) = ansible.baked
    assert node.name == ws.builder_name and node.pool == "gpu" and node.address == "127.0.0.1"
    assert node.instance_id == "i-builder" and node.instance_type == "g4dn.xlarge"
    assert {"launch", "boot", "ansible", "image", "finish"} <= set(result.seconds)


def test_a_failed_image_time_part_destroys_the_builder_and_deregisters_nothing(listening: int) -> None:
    made: list[Workspace] = []
    with pytest.raises(BakeError, match="image-time part failed on the builder i-builder: "
                       "failed at task 'Install the NVIDIA driver 550': apt failed"):
        bake(Ansible(listening, HostStatus.FAILED), made)
    assert made[0].calls == ["launch", ("finish", None)]
    assert [i.id for i in made[0].images_] == ["ami-1", "ami-2"]


def test_a_failed_image_still_destroys_the_builder_and_says_what_it_adopted(
        listening: int, caplog: pytest.LogCaptureFixture) -> None:
    made: list[Workspace] = []
    with pytest.raises(RuntimeError, match="CreateImage refused"):
        bake(Ansible(listening), made, fail_image=True)
    assert made[0].calls == ["launch", ("image", "i-builder"), ("finish", None)]
    assert "adopted 1 image(s) of the pool that no state held (left by a CreateImage whose " \
        "answer was lost): ami-lost (img-lost)" in caplog.text


def test_a_base_pool_or_an_unknown_pool_is_refused_before_anything_runs(listening: int) -> None:
    made: list[Workspace] = []
    with pytest.raises(BakeError, match=r"bootstrap\.image: base; set bootstrap\.image: baked"):
        bake(Ansible(listening), made, pols=policies("base"))
    with pytest.raises(BakeError, match="no pool vision/gpu"):
        bake(Ansible(listening), made, pols={"other": make_policy(team="other")})
    assert made == []


def test_a_builder_that_never_answers_fails_within_the_bound() -> None:
    ticks = iter(range(0, 100, 30))
    with pytest.raises(BakeError, match="did not answer on port 9 within 60 s"):
        wait_for_port("127.0.0.1", 9, 60, sleep=lambda s: None, monotonic=lambda: next(ticks))
