"""Terraform template syntax in values is never evaluated: real terraform, real AWS
provider, against moto. The values bypass validation (RegionInputs and the pool's region
are given directly), so what is shown is the root module's own escaping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.actuators.node_map import NodeSpec
from autoscaler.actuators.terraform import PoolWorkspace, RegionInputs, TerraformError
from autoscaler.policy.models import Market
from autoscaler.sandbox.services.moto_server import MOTO_AMI, MotoSandbox
from tests.actuators.terraform_fixtures import (  # noqa: F401 (fixture)
    moto,
    needs_terraform,
    sandbox_settings,
)
from tests.hostile import PASSWD_LINE, TF_DIRECTIVE, TF_FILE

pytestmark = [pytest.mark.slow, needs_terraform]

NODES = {"vision-v100-1": NodeSpec(instance_type="g4dn.xlarge", market=Market.ON_DEMAND)}


def _everything_written(ws: PoolWorkspace) -> str:
    return "\n".join(p.read_text(errors="replace") for p in ws.dir.rglob("*")
                     if p.is_file() and p.suffix in (".json", ".log", ".txt", ""))


def test_template_syntax_in_module_inputs_reaches_the_plan_as_plain_text(
        moto: MotoSandbox, tmp_path: Path) -> None:  # noqa: F811
    inputs = RegionInputs(ami=MOTO_AMI, key_name=TF_FILE, iam_instance_profile=TF_DIRECTIVE,
                          security_group_ids=[f"sg-{TF_FILE}"])
    ws = PoolWorkspace(sandbox_settings(moto, tmp_path), "vision", "v100", "aws", "us-east-1",
                       inputs=inputs)
    plan = ws.plan(NODES)
    assert [(c.node, c.action) for c in plan.changes] == [("vision-v100-1", "create")]
    shown = json.loads(ws.runner.run("show", "-json", str(plan.plan_file)).stdout)
    node = next(r for r in shown["planned_values"]["root_module"]["child_modules"][0]["resources"]
                if r["type"] == "aws_instance")
    # Exactly the strings given: no file was read, no directive ran.
    assert node["values"]["key_name"] == TF_FILE
    assert node["values"]["iam_instance_profile"] == TF_DIRECTIVE
    assert node["values"]["vpc_security_group_ids"] == [f"sg-{TF_FILE}"]
    assert PASSWD_LINE not in json.dumps(shown) and PASSWD_LINE not in _everything_written(ws)


def test_template_syntax_in_the_region_is_not_evaluated(
        moto: MotoSandbox, tmp_path: Path) -> None:  # noqa: F811
    region = f"us-east-1{TF_FILE}"
    ws = PoolWorkspace(sandbox_settings(moto, tmp_path), "vision", "v100", "aws", region,
                       inputs=RegionInputs(ami=MOTO_AMI))
    ws.write_config(NODES)
    main = json.loads((ws.dir / "main.tf.json").read_text())
    assert main["provider"]["aws"]["region"] == "us-east-1$" + TF_FILE  # escaped: $${
    try:
        plan = ws.plan(NODES)
    except TerraformError as exc:  # the provider may refuse such a region: as plain text
        message = str(exc)
        assert PASSWD_LINE not in message
    else:
        shown = ws.runner.run("show", "-json", str(plan.plan_file)).stdout
        assert PASSWD_LINE not in shown
    assert PASSWD_LINE not in _everything_written(ws)
