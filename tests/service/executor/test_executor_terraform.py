"""TerraformProvisioner without terraform: strays imported before an apply, stale locks."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.node_map import NodeMap, NodeSpec
from autoscaler.actuators.terraform import (
    ApplyResult,
    NodeOutput,
    StateLockedError,
    TerraformSettings,
)
from autoscaler.actuators.terraform.provisioner import TerraformProvisioner, lock_of, stray_key
from autoscaler.model.pool import PoolRef
from autoscaler.policy.models import Market
from tests.builders import NOW
from tests.fakes import FakeCloud

REF = PoolRef("vision", "gpu", "aws", "us-east-1")
SPEC = NodeSpec(instance_type="p3.2xlarge", market=Market.ON_DEMAND)
LOCKED = StateLockedError("terraform plan failed: the state is locked by another run",
                          "ID: 5c2e7b8e-aaaa-bbbb-cccc-0123456789ab\nPath: tf-state/pools/vision/gpu\n"
                          "Operation: OperationTypeApply\nWho: root@autoscaler-0\n"
                          "Created: 2026-11-30 10:00:00.123456 +0000 UTC")


class Runner:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def run(self, cmd: str, *args: str, **options: Any) -> None:
        self.calls.append((cmd, *args))


class FakeWorkspace:
    """The slice of PoolWorkspace the provisioner uses."""

    shard = 0
    label = "vision/gpu"

    def __init__(self, directory: Path, held: dict[str, NodeOutput]):
        self.dir = directory
        self.held = held
        self.runner = Runner()
        self.configs: list[NodeMap] = []
        self.apply_errors: list[Exception] = []

    def init(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)

    def outputs(self) -> dict[str, NodeOutput]:
        return dict(self.held)

    def pull_state(self) -> dict[str, Any]:
        """The state's shape, as ``terraform state pull`` prints it."""
        return {"resources": [{"module": "module.pool", "mode": "managed", "type": "aws_instance",
                               "name": "node", "instances": [
                                   {"index_key": key, "attributes": {
                                       "id": out.id, "private_ip": out.private_ip,
                                       "ami": out.image, "instance_lifecycle": "spot" if out.lifecycle == "spot"
                                       else ""}} for key, out in self.held.items()]}]}

    def applied_nodes(self) -> NodeMap:
        return {}

    def write_config(self, nodes: NodeMap | None = None) -> None:
        self.configs.append(dict(nodes or {}))

    def converge(self, nodes: NodeMap) -> ApplyResult:
        if self.apply_errors:
            raise self.apply_errors.pop(0)
        return ApplyResult(pool=REF.key, ok=True, nodes=dict(self.held))


def provisioner(tmp_path: Path, cloud: FakeCloud | None, ws: FakeWorkspace,
                clock: Callable[[], datetime] = lambda: NOW) -> TerraformProvisioner:
    return TerraformProvisioner(TerraformSettings(workdir=tmp_path), clock=clock,
                                cloud_for=(lambda c, r: cloud) if cloud else None,  # type: ignore[arg-type,return-value]
                                workspace=lambda s, ref, clk, shard=0, image=None: ws)  # type: ignore[arg-type,return-value]


def test_instances_the_state_lost_are_imported_before_the_apply(tmp_path: Path) -> None:
    cloud = FakeCloud()
    held_inst = cloud.launch(REF, "vision-gpu-1", SPEC)
    lost = cloud.launch(REF, "vision-gpu-2", SPEC)  # an apply died before saving it
    unwanted = cloud.launch(REF, "vision-gpu-9", SPEC)  # the reconciler's business
    doomed = cloud.launch(REF, "vision-gpu-8", SPEC)
    cloud.launch(PoolRef("vision", "other", "aws", "us-east-1"), "vision-other-2", SPEC)
    ws = FakeWorkspace(tmp_path / "ws", {"vision-gpu-1": NodeOutput(
        id=held_inst.instance_id, private_ip=None, lifecycle="on-demand")})
    prov = provisioner(tmp_path, cloud, ws)
    wanted = {"vision-gpu-1": SPEC, "vision-gpu-2": SPEC}
    prov.apply(REF, wanted, destroy=[doomed.instance_id])
    spare = stray_key("vision-gpu-8", doomed.instance_id)
    # The spare key is described as the instance is (its zone from the cloud).
    assert ws.configs == [{**wanted, spare: SPEC.model_copy(update={"zone": "us-east-1a"})}]
    address = 'module.pool.aws_instance.node["{}"]'
    assert sorted(ws.runner.calls) == sorted([
        ("import", address.format("vision-gpu-2"), lost.instance_id),
        ("import", address.format(spare), doomed.instance_id)])
    assert unwanted.instance_id not in str(ws.runner.calls)
    assert spare.startswith("vision-gpu-8-stray-") and len(spare) <= 63


def test_without_a_cloud_adapter_there_is_nothing_to_import_or_destroy(tmp_path: Path) -> None:
    ws = FakeWorkspace(tmp_path / "ws", {})
    prov = provisioner(tmp_path, None, ws)
    prov.apply(REF, {"vision-gpu-1": SPEC})
    assert ws.runner.calls == []
    with pytest.raises(Exception, match="no cloud adapter"):
        prov.apply(REF, {}, destroy=["i-0123"])


def test_stale_marker_forces_an_apply_until_one_succeeds(tmp_path: Path) -> None:
    ws = FakeWorkspace(tmp_path / "ws", {})
    prov = provisioner(tmp_path, None, ws)
    assert prov.applied(REF) == {}
    prov.mark_stale(REF)
    assert prov.applied(REF) is None
    prov.apply(REF, {})
    assert prov.applied(REF) == {}


def test_a_stale_lock_is_released_and_the_apply_retried_once(tmp_path: Path) -> None:
    assert lock_of(LOCKED) == ("5c2e7b8e-aaaa-bbbb-cccc-0123456789ab",
                               datetime.fromisoformat("2026-11-30T10:00:00+00:00"))
    ws = FakeWorkspace(tmp_path / "ws", {})
    ws.apply_errors = [LOCKED]
    prov = provisioner(tmp_path, None, ws, clock=lambda: NOW)  # 2 h after the lock
    assert prov.apply(REF, {}).ok
    assert ws.runner.calls == [("force-unlock", "5c2e7b8e-aaaa-bbbb-cccc-0123456789ab")]
    assert prov.unlocked == [("vision/gpu", "5c2e7b8e-aaaa-bbbb-cccc-0123456789ab")]


def test_a_recent_lock_is_left_alone(tmp_path: Path) -> None:
    ws = FakeWorkspace(tmp_path / "ws", {})
    ws.apply_errors = [LOCKED]
    soon = datetime.fromisoformat("2026-11-30T10:20:00+00:00")  # inside a 30 min run
    prov = provisioner(tmp_path, None, ws, clock=lambda: soon)
    with pytest.raises(StateLockedError):
        prov.apply(REF, {})
    assert ws.runner.calls == [] and prov.stale_lock_after == timedelta(minutes=35)
