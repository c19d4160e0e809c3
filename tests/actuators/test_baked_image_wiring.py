"""Baked images reach every Terraform workspace that plans or applies a pool (no Terraform
run): the service's provisioner, the tick preview, ``gpu-autoscaler plan`` and ``apply``
each make a baked pool's workspace with the BakedImage of the pool's bootstrap hash, and a
base pool's with None. The hash is bootstrap_hash.pool_bootstrap_hash's, from the current
policies, the region's base image and the operator's Ansible settings. The nodes the
provisioner returns say which image each instance runs, and ``baked`` for a baked pool's
instance on its baked image (what the executor bootstraps with ``--tags node``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from autoscaler.actuators.ansible.settings import AnsibleSettings
from autoscaler.actuators.bootstrap_hash import baked_images, pool_bootstrap_hash
from autoscaler.actuators.node_map import PoolMaps
from autoscaler.actuators.terraform import (
    BakedImage,
    ImageChoice,
    NodeOutput,
    PoolPlan,
    TerraformSettings,
)
from autoscaler.actuators.terraform.preview import PoolPreview, baked_workspace
from autoscaler.actuators.terraform.provisioner import (
    TerraformProvisioner,
    mark_baked,
    state_outputs,
)
from autoscaler.catalog import load_catalog
from autoscaler.cli import plan as plan_cli
from autoscaler.cli.apply import plan_workspace
from autoscaler.engine import DecisionInput, Plan
from autoscaler.fleet.store import FleetStore
from autoscaler.model.clock import utc_now
from autoscaler.model.node import FleetView
from autoscaler.model.pool import PoolRef
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import TeamPolicy
from autoscaler.service.config.models import AwsCloudConfig, CloudsConfig, ServiceConfig, StoreSettings
from autoscaler.service.wiring import (
    Markets,
    build_actuators,
    build_images,
    pool_images,
    preview_images,
)
from tests.actuators.test_terraform_files import AT, INPUTS
from tests.builders import NOW, make_policy, make_pool_dict
from tests.clouds.helpers import moto, moto_url  # noqa: F401 (fixtures)
from tests.service.executor.test_executor_terraform import FakeWorkspace

BAKED = PoolRef("vision", "baked", "aws", "us-east-1")
BASE = PoolRef("vision", "base", "aws", "us-east-1")
ELSEWHERE = PoolRef("vision", "far", "aws", "eu-west-1")  # no Terraform inputs there
EXTRA: dict[str, object] = {"container_toolkit_version": "1.17.3-1"}


def policies(driver: str = "550", when_stale: str = "hold") -> dict[str, TeamPolicy]:
    baked = {"image": "baked", "driver": driver, "when_stale": when_stale}
    return {"vision": make_policy(pools=[
        make_pool_dict("baked", bootstrap=baked),
        make_pool_dict("base", bootstrap={"driver": driver}),
        make_pool_dict("far", region="eu-west-1", bootstrap=baked)])}


def terraform(workdir: Path) -> TerraformSettings:
    return TerraformSettings(workdir=workdir, regions={"aws/us-east-1": INPUTS})


def expected(current: dict[str, TeamPolicy], ansible: AnsibleSettings) -> BakedImage:
    pool = next(p for p in current["vision"].pools if p.name == "baked")
    digest = pool_bootstrap_hash("vision", pool, INPUTS.ami, ansible.extra_vars,
                                 ansible.roles_dir())
    return BakedImage(digest, "hold")


def test_only_baked_pools_with_terraform_inputs_get_an_image(tmp_path: Path) -> None:
    ansible = AnsibleSettings(extra_vars=EXTRA)
    images = baked_images(policies(), terraform(tmp_path), ansible)
    assert images == {BAKED.key: expected(policies(), ansible)}
    # The operator's extra vars are part of it, as in the bootstrap runs.
    assert baked_images(policies(), terraform(tmp_path), AnsibleSettings()) != images
    # No baked pool: the roles are not even read.
    missing = AnsibleSettings(playbook=tmp_path / "nowhere" / "gpu-node.yml")
    assert baked_images({"vision": make_policy()}, terraform(tmp_path), missing) == {}


def test_the_services_provisioner_gives_each_workspace_the_current_policies_image(
        tmp_path: Path) -> None:
    config = ServiceConfig(policies_dir=tmp_path, terraform=terraform(tmp_path),
                           ansible=AnsibleSettings(extra_vars=EXTRA))
    current = policies()
    prov = TerraformProvisioner(config.terraform, images=pool_images(config, lambda: current))
    first = prov.workspace(BAKED)
    assert first.image == expected(current, config.ansible)
    assert prov.workspace(BASE).image is None
    assert prov.workspace(BAKED) is first  # unchanged policies: the same workspace
    current = policies(driver="535")  # a reload changes the driver: a new hash
    again = prov.workspace(BAKED)
    assert again is not first and again.image == expected(current, config.ansible)
    assert again.image != first.image
    assert TerraformProvisioner(config.terraform).workspace(BAKED).image is None


def test_the_service_wiring_gives_executor_and_reconciler_that_provisioner(tmp_path: Path) -> None:
    config = ServiceConfig(policies_dir=tmp_path, terraform=terraform(tmp_path),
                           store=StoreSettings(url=f"sqlite:///{tmp_path / 'fleet.db'}"))
    catalog, store = load_catalog(None), FleetStore(config.store.url)
    executor, reconciler = build_actuators(config, store, policies, lambda node: None, catalog,
                                           utc_now, Markets(config, catalog))
    try:
        assert reconciler.provisioner is executor.provisioner
        assert executor.provisioner.workspace(BAKED).image == expected(policies(), config.ansible)  # type: ignore[attr-defined]
        assert executor.provisioner.workspace(BASE).image is None  # type: ignore[attr-defined]
    finally:
        executor.close()
        store.close()


def test_the_tick_preview_and_the_plan_command_make_baked_workspaces(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = ServiceConfig(policies_dir=tmp_path, terraform=terraform(tmp_path))
    images = preview_images(config)(policies())
    assert images == baked_images(policies(), config.terraform, config.ansible)
    make = baked_workspace(images)
    assert make(config.terraform, BAKED, 0).image == expected(policies(), config.ansible)  # type: ignore[attr-defined]
    assert make(config.terraform, BASE, 1).image is None  # type: ignore[attr-defined]

    made: dict[str, Any] = {}

    def fake_preview(maps: Any, settings: TerraformSettings, prices: Any,
                     workspace: Any) -> list[PoolPreview]:
        made.update({ref.key: workspace(settings, ref, 0) for ref in (BAKED, BASE)})
        return []

    monkeypatch.setattr(plan_cli, "preview_pools", fake_preview)
    monkeypatch.setattr(plan_cli, "preview_maps", lambda *a: {BAKED.key: PoolMaps(BAKED, {}, {})})
    data = DecisionInput(now=NOW, fleet=FleetView(nodes=[]), snapshot=Snapshot(taken_at=NOW))
    ansible = AnsibleSettings(extra_vars=EXTRA)
    plan_cli.terraform_preview(policies(), data, Plan(decided_at=NOW), None,  # type: ignore[arg-type]
                               config.terraform, ansible)
    assert made[BAKED.key].image == expected(policies(), ansible)
    assert made[BASE.key].image is None


def test_plan_reads_the_ansible_section_of_a_service_config_given_as_settings(
        tmp_path: Path) -> None:
    (tmp_path / "play").mkdir()
    path = tmp_path / "config.yaml"
    path.write_text("policies_dir: p\nterraform: {regions: {aws/us-east-1: {ami: ami-1}}}\n"
                    "ansible: {playbook: play/gpu-node.yml, extra_vars: {nvidia_driver_source: distro}}\n")
    ansible = plan_cli.ansible_settings(path)
    assert ansible.extra_vars == {"nvidia_driver_source": "distro"}
    assert ansible.roles_dir() == tmp_path / "play" / "roles"
    only_terraform = tmp_path / "terraform.yaml"
    only_terraform.write_text("regions: {aws/us-east-1: {ami: ami-1}}\n")
    assert plan_cli.ansible_settings(only_terraform) == AnsibleSettings()


def test_apply_makes_the_workspace_with_the_image_its_plan_recorded(tmp_path: Path) -> None:
    image = expected(policies(), AnsibleSettings())
    saved = PoolPlan(pool=BAKED.key, cloud="aws", region="us-east-1", plan_file=tmp_path / "p",
                     plan_sha256="0", nodes={}, planned_at=AT,
                     image=ImageChoice(id="ami-0b", hash=image.hash, stale=False, when_stale="hold"))
    assert plan_workspace(terraform(tmp_path), saved).image == image
    base = saved.model_copy(update={"pool": BASE.key, "image": None})
    assert plan_workspace(terraform(tmp_path), base).image is None


def _instance(rtype: str, key: str, **attrs: object) -> dict[str, Any]:
    return {"module": "module.pool", "mode": "managed", "type": rtype, "name": "node",
            "instances": [{"index_key": key, "attributes": attrs}]}


def test_the_state_says_which_image_each_instance_was_launched_from() -> None:
    state = {"resources": [
        _instance("aws_instance", "aws-1", id="i-1", ami="ami-0baked"),
        _instance("alicloud_instance", "ali-1", id="i-2", image_id="ubuntu_22_04_x64"),
        _instance("aws_instance", "old-1", id="i-3")]}  # a state without it: unknown
    images = {key: out.image for key, out in state_outputs(state).items()}
    assert images == {"aws-1": "ami-0baked", "ali-1": "ubuntu_22_04_x64", "old-1": None}
    assert not any(out.baked for out in state_outputs(state).values())  # the provisioner's word


@pytest.mark.parametrize(("baked_pool", "image", "baked"), [
    (False, "ami-0baked", False),  # a base pool
    (True, INPUTS.ami, False),  # stale: launched from the base image, full bootstrap
    (True, None, False),  # not known: the full bootstrap is always safe
    (True, "ami-0baked", True),  # the only other image the module launches from
])
def test_a_node_is_baked_only_on_a_baked_pools_image_other_than_the_base_one(
        baked_pool: bool, image: str | None, baked: bool) -> None:
    out = NodeOutput(id="i-1", lifecycle="spot", image=image)
    assert mark_baked({"n": out}, baked_pool, INPUTS.ami) == {
        "n": NodeOutput(id="i-1", lifecycle="spot", image=image, baked=baked)}


def test_the_provisioner_marks_baked_nodes_of_baked_pools_in_applies_and_reads(
        tmp_path: Path) -> None:
    held = {"vision-baked-1": NodeOutput(id="i-1", lifecycle="on-demand", image="ami-0baked"),
            "vision-baked-2": NodeOutput(id="i-2", lifecycle="on-demand", image=INPUTS.ami)}
    ws = FakeWorkspace(tmp_path / "ws", held)
    image = BakedImage("0123456789ab", "full")
    prov = TerraformProvisioner(terraform(tmp_path), images=lambda ref: image if ref == BAKED else None,
                                workspace=lambda *args: ws)  # type: ignore[arg-type]
    want = {"vision-baked-1": True, "vision-baked-2": False}
    assert {n: out.baked for n, out in prov.instances(BAKED).items()} == want
    applied = prov.apply(BAKED, {})
    assert {n: (out.image, out.baked) for n, out in applied.nodes.items()} == {
        "vision-baked-1": ("ami-0baked", True), "vision-baked-2": (INPUTS.ami, False)}
    # The same instances in a base pool: nothing is baked.
    assert not any(out.baked for out in prov.instances(BASE).values())
    assert not any(out.baked for out in prov.apply(BASE, {}).nodes.values())


def test_the_services_image_reader_asks_the_cloud_for_each_baked_pools_hash(
        tmp_path: Path, moto: str) -> None:  # noqa: F811 (the fixture)
    config = ServiceConfig(policies_dir=tmp_path, terraform=terraform(tmp_path),
                           ansible=AnsibleSettings(extra_vars=EXTRA),
                           clouds=CloudsConfig(aws=AwsCloudConfig(endpoint_url=moto)))
    images = build_images(config, Markets(config, load_catalog(None)), utc_now)
    digest = expected(policies(), config.ansible).hash
    got = images.observe(policies())
    assert list(got) == [BAKED.key] and got[BAKED.key].hash == digest and got[BAKED.key].stale
    ec2 = boto3.client("ec2", region_name="us-east-1", endpoint_url=moto)
    instance = ec2.run_instances(ImageId="ami-1e749f67", MinCount=1, MaxCount=1,
                                 InstanceType="g4dn.xlarge")["Instances"][0]["InstanceId"]
    made = ec2.create_image(InstanceId=instance, Name="baked", TagSpecifications=[
        {"ResourceType": "image", "Tags": [{"Key": "gpu-autoscaler/bootstrap-hash", "Value": digest}]}])
    fresh = build_images(config, Markets(config, load_catalog(None)), utc_now)  # no cached answer
    assert fresh.observe(policies())[BAKED.key].image_id == made["ImageId"]
    assert images.observe(policies())[BAKED.key].stale  # the first kept its answer (interval)
