"""The two pool modules: formatting, validation, and one shared variable/output contract.

The alicloud provider cannot be installed here, so the Alibaba Cloud module is checked by
``terraform fmt`` and by parsing it (python-hcl2) against the AWS module's contract.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import hcl2
import pytest

from autoscaler.actuators.terraform.rootmodule import NODES_TYPE, cli_config
from autoscaler.actuators.terraform.settings import DEFAULT_MODULES_DIR, TerraformSettings
from tests.actuators.terraform_fixtures import needs_terraform

AWS = DEFAULT_MODULES_DIR / "aws-gpu-pool"
ALI = DEFAULT_MODULES_DIR / "alicloud-gpu-pool"
CONTRACT_INPUTS = {"team", "pool", "region", "nodes", "ami", "subnet_ids", "security_group_ids",
                   "key_name", "iam_instance_profile", "root_volume_gb", "user_data",
                   "spot_max_price"}


def _unq(text: Any) -> Any:
    if isinstance(text, str) and len(text) >= 2 and text[0] == text[-1] == '"':
        return text[1:-1]
    return text


def load(module: Path) -> dict[str, list[dict[str, Any]]]:
    merged: dict[str, list[dict[str, Any]]] = {}
    for tf in sorted(module.glob("*.tf")):
        with tf.open() as fh:
            for key, blocks in hcl2.load(fh).items():
                merged.setdefault(key, []).extend(blocks)
    return merged


def blocks(module: Path, kind: str) -> dict[str, dict[str, Any]]:
    return {_unq(name): body for block in load(module).get(kind, []) for name, body in block.items()}


def _norm_type(expr: str) -> str:
    return "".join(expr.removeprefix("${").removesuffix("}").split())


def test_both_modules_declare_the_same_inputs_and_types() -> None:
    aws, ali = blocks(AWS, "variable"), blocks(ALI, "variable")
    assert set(aws) == set(ali) == CONTRACT_INPUTS
    for name in CONTRACT_INPUTS:
        assert _norm_type(aws[name]["type"]) == _norm_type(ali[name]["type"]), name
        assert ("default" in aws[name]) == ("default" in ali[name]), name
    assert _norm_type(aws["nodes"]["type"]) == _norm_type(NODES_TYPE)
    assert aws["user_data"].get("sensitive") is True and ali["user_data"].get("sensitive") is True


def test_both_modules_output_the_node_map() -> None:
    for module in (AWS, ALI):
        outputs = blocks(module, "output")
        assert set(outputs) == {"nodes"}
        value = outputs["nodes"]["value"]
        for field in ("id", "private_ip", "lifecycle", "image"):
            assert f"{field} " in value or f"{field}=" in value, (module.name, field)


def _resource(module: Path, rtype: str) -> dict[str, Any]:
    resources = {_unq(t): {_unq(n): b for n, b in body.items()}
                 for block in load(module)["resource"] for t, body in block.items()}
    return resources[rtype]["node"]


def test_alicloud_module_uses_ecs_spot_strategies_and_postpaid() -> None:
    node = _resource(ALI, "alicloud_instance")
    assert node["for_each"] == "${var.nodes}"
    assert _unq(node["instance_charge_type"]) == "PostPaid"
    for strategy in ("SpotAsPriceGo", "SpotWithPriceLimit", "NoSpot"):
        assert strategy in node["spot_strategy"]


def test_aws_module_tags_every_instance_and_uses_market_options() -> None:
    node = _resource(AWS, "aws_instance")
    assert node["for_each"] == "${var.nodes}"
    for module, resource in ((AWS, node), (ALI, _resource(ALI, "alicloud_instance"))):
        common = {_unq(k): _unq(v) for k, v in load(module)["locals"][0]["common_tags"].items()}
        assert common == {"team": "${var.team}", "pool": "${var.pool}",
                          "managed-by": "gpu-autoscaler"}
        assert resource["tags"] == "${merge(local.common_tags, {node = each.key, Name = each.key})}"
    [market] = node["dynamic"]
    assert "instance_market_options" in {_unq(k) for k in market}


def _terraform(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["terraform", *args], cwd=cwd, env={**os.environ, **env},
                          capture_output=True, text=True, timeout=300)


@needs_terraform
def test_modules_are_formatted(tmp_path: Path) -> None:
    for module in (AWS, ALI, DEFAULT_MODULES_DIR / "controller"):
        proc = _terraform(["fmt", "-check", "-diff", "-no-color", str(module)], tmp_path, {})
        assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
@needs_terraform
def test_aws_module_validates_with_the_mirror(tmp_path: Path) -> None:
    module = tmp_path / "aws-gpu-pool"
    shutil.copytree(AWS, module)
    rc = tmp_path / "terraformrc"
    rc.write_text(cli_config(TerraformSettings()))
    env = {"TF_CLI_CONFIG_FILE": str(rc), "CHECKPOINT_DISABLE": "1", "TF_INPUT": "0"}
    init = _terraform(["init", "-backend=false", "-no-color"], module, env)
    assert init.returncode == 0, init.stderr
    proc = _terraform(["validate", "-no-color"], module, env)
    assert proc.returncode == 0 and "configuration is valid" in proc.stdout, proc.stderr
