"""Baked images in the files and records of a pool's Terraform workspace (no Terraform):
a base pool's root module, tfvars, saved plan and preview are what they were before baked
images existed; a baked pool's root module looks its image up by the bootstrap hash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.actuators.node_map import NodeMap, PoolMaps
from autoscaler.actuators.terraform import (
    BakedImage,
    ImageChoice,
    PoolPlan,
    PoolWorkspace,
    TerraformSettings,
)
from autoscaler.actuators.terraform.bake import bake_tf
from autoscaler.actuators.terraform.preview import preview_pool
from autoscaler.actuators.terraform.rootmodule import HASH_TAG, main_tf, tfvars
from autoscaler.cli.plan_render import _pool_markdown
from tests.actuators.test_terraform_files import (
    AT,
    INPUTS,
    ONE,
    REF,
    TWO,
    FakeWorkspace,
    _prices,
    _settings,
)

HASH = "0123456789ab"


def test_a_base_pool_root_module_and_tfvars_have_nothing_of_baked_images(tmp_path: Path) -> None:
    settings = TerraformSettings(workdir=tmp_path)
    main = main_tf(settings, tmp_path, "vision", "v100", "aws", "us-east-1", INPUTS)
    assert set(main) == {"terraform", "provider", "variable", "module", "output"}
    assert main["module"]["pool"]["ami"] == INPUTS.ami
    assert set(main["variable"]) == {"nodes", "user_data"} and set(main["output"]) == {"nodes"}
    assert set(tfvars(ONE, INPUTS)) == {"nodes", "user_data"}


def test_a_baked_pool_looks_up_the_newest_image_with_its_hash(tmp_path: Path) -> None:
    main = main_tf(TerraformSettings(workdir=tmp_path), tmp_path, "vision", "v100", "aws",
                   "us-east-1", INPUTS, image=BakedImage(HASH, "full"))
    lookup = main["data"]["aws_ami_ids"]["baked"]
    assert lookup["owners"] == ["self"]
    assert {"name": f"tag:{HASH_TAG}", "values": [HASH]} in lookup["filter"]
    (check,) = lookup["lifecycle"][0]["postcondition"]
    assert "var.hold_if_stale" in check["condition"] and HASH in check["error_message"]
    assert main["locals"]["base_ami"] == INPUTS.ami
    assert main["module"]["pool"]["ami"] == "${local.ami}"
    assert set(main["output"]["image"]["value"]) == {"id", "hash", "stale"}
    # Written values stay literal text for Terraform.
    odd = main_tf(TerraformSettings(workdir=tmp_path), tmp_path, "vision", "v100", "aws",
                  "us-east-1", INPUTS.model_copy(update={"ami": "ami-${x}"}),
                  image=BakedImage("${y}", "full"))
    assert odd["locals"]["base_ami"] == "ami-$${x}" and odd["locals"]["bootstrap_hash"] == "$${y}"


def test_baked_images_are_aws_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="aws only"):
        main_tf(TerraformSettings(workdir=tmp_path), tmp_path, "r", "g", "alicloud",
                "cn-hangzhou", INPUTS, image=BakedImage(HASH, "full"))


@pytest.mark.parametrize(("when_stale", "launching", "hold"), [
    ("hold", True, True), ("hold", False, False), ("full", True, False)])
def test_hold_applies_only_to_a_run_that_launches(when_stale: str, launching: bool,
                                                  hold: bool) -> None:
    image = BakedImage(HASH, when_stale)  # type: ignore[arg-type]
    assert tfvars(ONE, INPUTS, image, launching)["hold_if_stale"] is hold


def test_image_choice_says_which_image_or_that_it_is_stale() -> None:
    assert ImageChoice(id="ami-0b", hash=HASH, stale=False, when_stale="full").describe() == \
        f"baked image ami-0b (bootstrap hash {HASH})"
    stale = ImageChoice(id="ami-base", hash=HASH, stale=True, when_stale="full").describe()
    assert stale == (f"stale: no image for bootstrap hash {HASH}; new nodes launch from the "
                     "base image ami-base with the full bootstrap")
    held = ImageChoice(id="ami-base", hash=HASH, stale=True, when_stale="hold").describe()
    assert held.startswith(f"stale: no image for bootstrap hash {HASH}") and "hold" in held


class BakedFake(FakeWorkspace):
    def __init__(self, applied: NodeMap, image: ImageChoice | None):
        super().__init__(applied)
        self.image = image

    def plan(self, nodes: NodeMap) -> PoolPlan:
        return super().plan(nodes).model_copy(update={"image": self.image})


def test_saved_plans_and_previews_of_base_pools_are_written_as_before() -> None:
    preview = preview_pool(PoolMaps(REF, ONE, TWO), _settings(), _prices(),
                           lambda s, r, k=0: BakedFake(ONE, None))
    assert preview.image is None and "image" not in json.loads(preview.model_dump_json())
    plan = BakedFake(ONE, None).plan(TWO)
    assert "image" not in plan.model_dump() and plan.planned_at == AT


def test_a_baked_pools_preview_shows_its_image() -> None:
    choice = ImageChoice(id="ami-0b", hash=HASH, stale=False, when_stale="full")
    preview = preview_pool(PoolMaps(REF, ONE, TWO), _settings(), _prices(),
                           lambda s, r, k=0: BakedFake(ONE, choice))
    assert preview.image == choice.describe()
    assert json.loads(preview.model_dump_json())["image"] == choice.describe()
    plan = BakedFake(ONE, choice).plan(TWO)
    assert PoolPlan.model_validate_json(plan.model_dump_json()).image == choice


def test_the_plan_command_prints_the_image_line_only_for_baked_pools() -> None:
    choice = ImageChoice(id="ami-0b", hash=HASH, stale=True, when_stale="full")
    baked = preview_pool(PoolMaps(REF, ONE, TWO), _settings(), _prices(),
                         lambda s, r, k=0: BakedFake(ONE, choice))
    base = preview_pool(PoolMaps(REF, ONE, TWO), _settings(), _prices(),
                        lambda s, r, k=0: BakedFake(ONE, None))
    assert f"- **image**: {choice.describe()}" in _pool_markdown(baked)
    assert not any("image" in line for line in _pool_markdown(base))


def test_the_bake_root_module_keeps_its_images_in_a_map_and_its_builder_behind_a_flag(
        tmp_path: Path) -> None:
    settings = TerraformSettings(workdir=tmp_path, aws_endpoint="http://127.0.0.1:5000")
    main = bake_tf(settings, "vision", "v100", "us-east-1",
                   INPUTS.model_copy(update={"ami": "ami-${x}"}), HASH, "p3.2xlarge",
                   "vision-v100-builder-1")
    builder = main["resource"]["aws_instance"]["builder"]
    assert builder["ami"] == "ami-$${x}" and builder["subnet_id"] == "subnet-1"
    assert builder["count"] == "${var.builder ? 1 : 0}"
    assert builder["tags"][HASH_TAG] == HASH and builder["tags"]["gpu-autoscaler/role"] == "builder"
    assert builder["tags"]["node"] == "vision-v100-builder-1"
    image = main["resource"]["aws_ami_from_instance"]["image"]
    assert image["for_each"] == "${var.images}" and image["name"] == "${each.key}"
    assert image["source_instance_id"] == "${each.value.source}"
    assert image["tags"][HASH_TAG] == "${each.value.hash}"
    assert image["tags"]["gpu-autoscaler/builder"] == "${each.value.source}"
    assert image["tags"]["team"] == "vision" and image["tags"]["managed-by"] == "gpu-autoscaler"
    assert main["terraform"]["backend"] == {"local": {"path": "terraform.tfstate"}}
    assert "TOKEN=abc" not in json.dumps(main)  # no user data on the builder


def test_a_hold_left_by_a_plan_does_not_reach_a_refresh_or_destroy(tmp_path: Path) -> None:
    ws = PoolWorkspace(TerraformSettings(workdir=tmp_path, regions={"aws/us-east-1": INPUTS}),
                       "vision", "v100", "aws", "us-east-1", image=BakedImage(HASH, "hold"))
    tfvars = ws.dir / "terraform.tfvars.json"
    ws.write_config(TWO)  # what plan() and converge() write: TWO launches
    assert json.loads(tfvars.read_text())["hold_if_stale"] is True
    ws.write_config()  # what init() writes before refresh() and destroy_all()
    assert json.loads(tfvars.read_text()) == {**tfvars_of(TWO), "hold_if_stale": False}


def tfvars_of(nodes: NodeMap) -> dict[str, object]:
    return json.loads(json.dumps(tfvars(nodes, INPUTS)))
