"""End to end: ``gpu-autoscaler image bake`` on the sandbox, then a node launched from the
image next to a cold one, every component real.

moto + the terraform binary and AWS provider, the real playbook through ansible-runner over
SSH to booted test hosts (the follower boots the builder too), a real Slurm cluster, and the
executor as the service wires it (the lifecycle e2e's ``Loop``, woken as the service is when an
operation ends: ``bake_rig.WakingLoop``).

1. The bake: a builder launched by Terraform, the image-time part (``--tags image``) run on
   it, pulling the pool's ``bootstrap.prepull`` image into containerd from the sandbox's
   registry, an image of it tagged with the pool's bootstrap hash, the builder destroyed;
   the sandbox keeps the builder's disk as the image's layer. ``image list`` calls it
   current.
2. Floors of 1 in a baked and a base pool of the same type: the baked node launches from
   the image and runs only the node-time part (``--tags node``): no image-time task, no
   driver reboot (its image blacklists nouveau). The cold node runs the whole playbook and
   reboots once. Both join Slurm; the baked one is READY sooner, with the pre-pulled image
   already in its containerd.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.terraform.rootmodule import HASH_TAG
from autoscaler.sandbox.hosts.netns import CONTROLLER_ADDRESS
from autoscaler.sandbox.services.moto_server import MOTO_AMI
from autoscaler.sandbox.services.registry import Registry, write_image
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions, privileged
from tests.actuators.terraform_fixtures import needs_terraform
from tests.e2e.bake_rig import IMAGE_ONLY, S, WakingLoop, boot_to_ready, cli, runs, write_policy

pytestmark = [
    pytest.mark.slow, needs_terraform,
    pytest.mark.skipif(not privileged(), reason="needs root, network namespaces and Slurm"),
]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[SandboxStack]:
    write_policy(tmp_path / "policies", 0)
    with SandboxStack(tmp_path / "sandbox", StackOptions(policies_dir=tmp_path / "policies")) as s:
        yield s


@pytest.fixture
def registry(stack: SandboxStack) -> Iterator[Registry]:
    """On the address every node routes to the host; stopped by the test."""
    with Registry(stack.dir / "registry", CONTROLLER_ADDRESS) as r:
        yield r


def test_a_baked_node_runs_only_the_node_time_part_and_is_ready_before_a_cold_one(
        stack: SandboxStack, registry: Registry, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[Any]) -> None:
    for key, value in stack.env().items():
        monkeypatch.setenv(key, value)
    ec2 = stack.ec2()
    write_image(registry.root, "sandbox/hello", "1", {"hello.txt": b"pre-pulled\n"})
    pulled = f"{registry.address}/sandbox/hello:1"
    write_policy(tmp_path / "policies", 0, prepull=[pulled])
    # 1. The bake.
    baked = cli(stack, "bake")
    assert baked.returncode == 0, baked.stdout + baked.stderr
    assert "image-time part ran on e2e-baked-builder-" in baked.stdout
    (image,) = ec2.describe_images(Owners=["self"], Filters=[
        {"Name": "tag:team", "Values": ["e2e"]}])["Images"]
    tags = {t["Key"]: t["Value"] for t in image["Tags"]}
    assert f"baked {image['ImageId']} for e2e/baked (bootstrap hash {tags[HASH_TAG]})" \
        in baked.stdout
    builder_run = next(r for n, r in runs(stack).items() if n.startswith("e2e-baked-builder-"))
    assert builder_run["tags"] == "image"
    assert builder_run["tasks"] >= IMAGE_ONLY, builder_run["tasks"]
    assert "Install the cluster's munge key (base64)" not in builder_run["tasks"]  # no secret
    # The scheduler's packages are baked (checked: the node image has them); nothing joins.
    assert "Check whether slurmd and munge are installed" in builder_run["tasks"]
    assert not builder_run["tasks"] & {"Install the cluster's slurm.conf", "Configure slurmd's unit",
                                       "Wait until slurmctld hears from slurmd"}
    builder = ec2.describe_instances(InstanceIds=[tags["gpu-autoscaler/builder"]])
    assert builder["Reservations"][0]["Instances"][0]["State"]["Name"] in (
        "shutting-down", "terminated")
    listed = cli(stack, "list")
    assert listed.returncode == 0 and f"{image['ImageId']}" in listed.stdout, listed.stdout
    assert "(current)" in listed.stdout and "stale: no image" not in listed.stdout
    assert "untracked" not in listed.stdout and "adopted" not in listed.stdout
    assert f"pre-pulls (bootstrap.prepull, in the hash): {pulled}" in listed.stdout
    assert f"pre-pulled into containerd: {pulled}" in baked.stdout

    # 2. A baked node and a cold node, launched in the same tick.
    loop = WakingLoop(stack, write_policy(tmp_path / "policies", 1, prepull=[pulled]))
    loop.until(lambda: list(loop.states().values()).count(S.READY) == 2, 480, "both READY")
    nodes = {n.pool: n for n in loop.store.nodes()}
    hot, cold = nodes["baked"], nodes["cold"]
    described = {i["InstanceId"]: i for r in ec2.describe_instances(
        InstanceIds=[hot.instance_id, cold.instance_id])["Reservations"] for i in r["Instances"]}
    assert described[hot.instance_id]["ImageId"] == image["ImageId"]
    assert described[cold.instance_id]["ImageId"] == MOTO_AMI
    assert hot.progress.baked_image == image["ImageId"] and cold.progress.baked_image is None
    done = runs(stack)
    assert done[hot.name]["tags"] == "node" and done[cold.name]["tags"] is None
    assert done[hot.name]["tasks"].isdisjoint(IMAGE_ONLY), done[hot.name]["tasks"]
    assert done[cold.name]["tasks"] >= IMAGE_ONLY
    assert "Check the loaded driver branch" in done[hot.name]["tasks"]
    assert stack.follower is not None
    hosts = {name: stack.follower.followed[name].host for name in (hot.name, cold.name)}
    assert hosts[hot.name].boots(hot.name) == 1, "the baked image needs no driver reboot"
    assert hosts[cold.name].boots(cold.name) == 2
    # The node is its own machine, not a copy of the builder.
    assert hosts[hot.name].run(hot.name, ["hostname"]).stdout.strip() == hot.name
    assert hosts[hot.name].read_file(hot.name, "/etc/gpu-autoscaler/user-data-ran")
    # The image came with the baked disk: containerd (enabled by the bake) lists it.
    listed = hosts[hot.name].run(hot.name, ["ctr", "--namespace", "k8s.io", "images", "ls", "-q"])
    assert pulled in listed.stdout.split(), listed.stdout
    assert stack.slurm is not None
    assert [stack.slurm.node_state(n) for n in (hot.name, cold.name)] == ["idle", "idle"]
    steps = boot_to_ready(loop.store, [hot.name, cold.name])
    hot_s, cold_s = (steps[n]["boot_to_ready"] for n in (hot.name, cold.name))
    assert hot_s < cold_s, steps
    with capsys.disabled():
        print(f"\nbaked image e2e: boot_to_ready_cold_s={cold_s:.1f} "
              f"boot_to_ready_baked_s={hot_s:.1f} (since REQUESTED: {steps})")
