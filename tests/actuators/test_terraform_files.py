"""Root-module generation, plan-event parsing and previews, without running Terraform."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.node_map import NodeMap, NodeSpec, PoolMaps
from autoscaler.actuators.terraform import PoolPlan, RegionInputs, S3Backend, TerraformSettings
from autoscaler.actuators.terraform.errors import TerraformError
from autoscaler.actuators.terraform.planfile import NodeChange, node_changes, state_nodes
from autoscaler.actuators.terraform.preview import map_cost, preview_pool
from autoscaler.actuators.terraform.rootmodule import cli_config, main_tf, tfvars
from autoscaler.actuators.terraform.runner import Runner
from autoscaler.catalog import default_catalog
from autoscaler.engine.pricing import Prices
from autoscaler.model.pool import PoolRef
from autoscaler.model.snapshot import Offering, Snapshot
from autoscaler.policy.models import Market

AT = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
SPOT, OD = Market.SPOT, Market.ON_DEMAND
INPUTS = RegionInputs(ami="ami-1e749f67", user_data="TOKEN=abc", subnet_ids=["subnet-1"])


def test_root_module_calls_the_pool_module_with_a_relative_source(tmp_path: Path) -> None:
    settings = TerraformSettings(workdir=tmp_path, aws_endpoint="http://127.0.0.1:5000")
    ws_dir = tmp_path / "vision" / "v100"
    main = main_tf(settings, ws_dir, "vision", "v100", "aws", "us-east-1", INPUTS)
    module = main["module"]["pool"]
    assert module["source"].startswith("../")
    assert (ws_dir / module["source"]).resolve() == settings.modules_dir / "aws-gpu-pool"
    assert module["nodes"] == "${var.nodes}" and module["user_data"] == "${var.user_data}"
    assert main["variable"]["user_data"]["sensitive"] is True
    provider = main["provider"]["aws"]
    assert provider["endpoints"][0]["ec2"] == "http://127.0.0.1:5000"
    assert provider["skip_credentials_validation"] is True
    assert main["terraform"]["backend"] == {"local": {"path": "terraform.tfstate"}}
    # Credentials and user data never go into the root module.
    text = json.dumps(main)
    assert "TOKEN=abc" not in text and "access_key" not in text and "secret" not in text


def test_without_an_endpoint_the_provider_keeps_its_checks(tmp_path: Path) -> None:
    main = main_tf(TerraformSettings(), tmp_path, "a", "b", "aws", "eu-west-1", INPUTS)
    assert main["provider"]["aws"] == {"region": "eu-west-1", "max_retries": 3}


def test_s3_backend_has_one_key_per_pool_and_a_lockfile(tmp_path: Path) -> None:
    backend = S3Backend(bucket="state", key_prefix="fleet/", endpoint="http://127.0.0.1:9")
    settings = TerraformSettings(backend=backend)
    conf = main_tf(settings, tmp_path, "vision", "v100", "aws", "us-east-1",
                   INPUTS)["terraform"]["backend"]["s3"]
    assert conf["key"] == "fleet/vision/v100/terraform.tfstate"
    assert conf["use_lockfile"] is True and conf["endpoints"] == {"s3": "http://127.0.0.1:9"}


def test_terraform_runs_with_a_lazier_go_collector_unless_the_operator_set_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runner = Runner(tmp_path, tmp_path / "terraformrc")
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.setenv("TF_LOG", "trace")
    env = runner.env()
    assert env["GOGC"] == "400" and "TF_LOG" not in env
    assert env["TF_CLI_CONFIG_FILE"] == str(tmp_path / "terraformrc")
    monkeypatch.setenv("GOGC", "100")
    assert runner.env()["GOGC"] == "100"


def test_cli_config_uses_only_the_mirror() -> None:
    text = cli_config(TerraformSettings(plugin_mirror=Path("/opt/tf-plugins")))
    assert 'path    = "/opt/tf-plugins"' in text
    assert 'exclude = ["*/*"]' in text and "disable_checkpoint = true" in text


def test_tfvars_hold_the_node_map_and_user_data() -> None:
    nodes = {"b": NodeSpec(instance_type="g4dn.xlarge", market=SPOT),
             "a": NodeSpec(instance_type="p3.2xlarge", market=OD, zone="us-east-1a")}
    assert tfvars(nodes, INPUTS) == {
        "nodes": {"a": {"instance_type": "p3.2xlarge", "market": "on-demand",
                        "zone": "us-east-1a"},
                  "b": {"instance_type": "g4dn.xlarge", "market": "spot", "zone": ""}},
        "user_data": "TOKEN=abc"}


def _event(node: str, action: str, rtype: str = "aws_instance") -> dict[str, Any]:
    addr = f'module.pool.{rtype}.node["{node}"]'
    return {"type": "planned_change", "change": {"resource": {"addr": addr}, "action": action}}


def test_planned_change_events_become_node_changes() -> None:
    planned = {"n-new": NodeSpec(instance_type="p3.2xlarge", market=SPOT),
               "n-swap": NodeSpec(instance_type="g4dn.xlarge", market=SPOT)}
    current = {"n-gone": NodeSpec(instance_type="g4dn.xlarge", market=OD, zone="us-east-1b"),
               "n-swap": NodeSpec(instance_type="g4dn.xlarge", market=OD)}
    events = [
        {"type": "version"}, _event("n-new", "create"), _event("n-gone", "delete"),
        _event("n-swap", "replace"), _event("n-same", "noop"),
        {"type": "planned_change", "change": {"resource": {"addr": "data.aws_subnet.x"},
                                              "action": "read"}},
    ]
    assert node_changes(events, planned, current) == [
        NodeChange(node="n-new", action="create", after=planned["n-new"]),
        NodeChange(node="n-gone", action="destroy", before=current["n-gone"]),
        NodeChange(node="n-swap", action="replace", after=planned["n-swap"],
                   before=current["n-swap"]),
    ]


def test_state_nodes_read_type_market_and_zone() -> None:
    state = {"serial": 4, "resources": [
        {"module": "module.pool", "mode": "managed", "type": "aws_instance", "name": "node",
         "instances": [
             {"index_key": "a", "attributes": {"instance_type": "p3.2xlarge",
                                               "instance_lifecycle": "spot",
                                               "availability_zone": "us-east-1a"}},
             {"index_key": "b", "attributes": {"instance_type": "g4dn.xlarge",
                                               "instance_lifecycle": "",
                                               "availability_zone": "us-east-1b"}}]},
        {"module": "module.pool", "mode": "data", "type": "aws_subnet", "name": "pool",
         "instances": []},
    ]}
    assert state_nodes(state) == {
        "a": NodeSpec(instance_type="p3.2xlarge", market=SPOT, zone="us-east-1a"),
        "b": NodeSpec(instance_type="g4dn.xlarge", market=OD, zone="us-east-1b"),
    }


class FakeWorkspace:
    """Stands in for PoolWorkspace: records plans, returns a fixed change list."""

    def __init__(self, applied: NodeMap, error: str | None = None):
        self.applied, self.error = applied, error
        self.planned: list[NodeMap] = []
        self.discarded = 0

    def applied_nodes(self) -> NodeMap:
        return self.applied

    def discard_plan(self) -> None:
        self.discarded += 1

    def plan(self, nodes: NodeMap) -> PoolPlan:
        if self.error:
            raise TerraformError(self.error)
        self.planned.append(nodes)
        changes = [NodeChange(node=n, action="create", after=s) for n, s in nodes.items()
                   if n not in self.applied]
        return PoolPlan(pool="vision/v100", cloud="aws", region="us-east-1",
                        plan_file=Path("/x/pending.tfplan"), plan_sha256="0", nodes=nodes,
                        changes=changes, planned_at=AT)


REF = PoolRef("vision", "v100", "aws", "us-east-1")
ONE = {"v-1": NodeSpec(instance_type="p3.2xlarge", market=OD)}
TWO = {**ONE, "v-new1": NodeSpec(instance_type="p3.2xlarge", market=SPOT, zone="us-east-1a")}


def _prices(*offerings: Offering) -> Prices:
    return Prices(default_catalog(), Snapshot(taken_at=AT, offerings=list(offerings)), AT)


def test_cost_uses_observed_offerings_before_the_catalog() -> None:
    spot_a = Offering(cloud="aws", region="us-east-1", instance_type="p3.2xlarge",
                      zone="us-east-1a", spot_usd=0.95)
    assert map_cost(REF, TWO, _prices()) == (round(3.06 + 3.06 * 0.3, 4), [])
    assert map_cost(REF, TWO, _prices(spot_a)) == (round(3.06 + 0.95, 4), [])
    unknown = {"x": NodeSpec(instance_type="nope.large", market=OD)}
    assert map_cost(REF, unknown, _prices()) == (0.0, ["x"])


def _settings() -> TerraformSettings:
    return TerraformSettings(regions={"aws/us-east-1": INPUTS})


def test_changed_pool_is_planned_with_its_cost_delta() -> None:
    fake = FakeWorkspace(applied=ONE)
    preview = preview_pool(PoolMaps(REF, ONE, TWO, ["vision/v100: grow"]), _settings(),
                           _prices(), lambda s, r, k=0: fake)
    assert preview.status == "planned" and fake.planned == [TWO]
    assert [(c.node, c.action) for c in preview.changes] == [("v-new1", "create")]
    assert preview.hourly_before == 3.06 and round(preview.delta, 3) == 0.918
    assert preview.reasons == ["vision/v100: grow"]


def test_unchanged_pool_runs_no_terraform_and_drops_an_old_plan() -> None:
    fake = FakeWorkspace(applied=ONE)
    preview = preview_pool(PoolMaps(REF, ONE, dict(ONE)), _settings(), _prices(),
                           lambda s, r, k=0: fake)
    assert preview.status == "unchanged" and fake.planned == [] and fake.discarded == 1


def test_pool_in_an_unconfigured_region_is_engine_only() -> None:
    ref = PoolRef("research", "gn6", "alicloud", "cn-hangzhou")
    preview = preview_pool(PoolMaps(ref, {}, TWO), _settings(), _prices(),
                           lambda s, r, k=0: FakeWorkspace({}))
    assert preview.status == "not-configured" and preview.changes == []


def test_terraform_failure_is_reported_per_pool() -> None:
    preview = preview_pool(PoolMaps(REF, ONE, TWO), _settings(), _prices(),
                           lambda s, r, k=0: FakeWorkspace(ONE, error="state locked"))
    assert preview.status == "error" and preview.error == "state locked"


def test_an_apply_without_its_closing_outputs_asks_terraform_output() -> None:
    from autoscaler.actuators.terraform.workspace import _applied_outputs

    node = {"id": "i-1", "private_ip": "10.0.0.1", "lifecycle": "spot"}
    planned = {"type": "outputs", "outputs": {"nodes": {"sensitive": False, "action": "noop"}}}
    closing = {"type": "outputs", "outputs": {"nodes": {"sensitive": False, "value": {"a": node}}}}
    assert _applied_outputs([planned]) is None  # a failed apply prints only the planned one
    assert _applied_outputs([]) is None
    assert _applied_outputs([{"type": "outputs", "outputs": {"nodes": {"sensitive": True}}}]) is None
    assert _applied_outputs([planned, closing])["a"].id == "i-1"  # type: ignore[index]
    assert _applied_outputs([planned, {"type": "outputs", "outputs": {"nodes": {"value": {}}}}]) == {}


def test_terraform_runs_without_the_services_own_secrets(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store password and Ansible's secret_env are none of a provider plugin's
    business; the cloud's own credentials still reach it."""
    from autoscaler import secrets
    from autoscaler.actuators.ansible.runner import AnsibleActuator
    from autoscaler.actuators.ansible.settings import AnsibleSettings

    monkeypatch.setattr(secrets, "_HELD", set())
    for name, value in {"GAS_STORE_PW": "pw", "GAS_MUNGE": "munge", "AWS_SECRET_ACCESS_KEY": "aws",
                        "GAS_UNRELATED": "kept"}.items():
        monkeypatch.setenv(name, value)
    runner = Runner(tmp_path, tmp_path / "terraformrc")
    assert runner.env()["GAS_STORE_PW"] == "pw"  # nothing read as a secret yet
    assert secrets.read_secret("GAS_STORE_PW", None, "store password") == "pw"
    AnsibleActuator(AnsibleSettings(secret_env={"cluster_join_munge_key_b64": "GAS_MUNGE"}),
                    address_of=lambda node: None)
    env = runner.env()
    assert "GAS_STORE_PW" not in env and "GAS_MUNGE" not in env
    assert env["AWS_SECRET_ACCESS_KEY"] == "aws" and env["GAS_UNRELATED"] == "kept"
    assert "GAS_STORE_PW" in os.environ  # the service itself still has it
