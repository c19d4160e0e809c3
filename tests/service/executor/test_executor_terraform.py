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
                clock: Callable[[], datetime] = lambda: NOW,
                monotonic: Callable[[], float] = lambda: 0.0) -> TerraformProvisioner:
    return TerraformProvisioner(TerraformSettings(workdir=tmp_path), clock=clock, monotonic=monotonic,
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


class Monotonic:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def locked(created: str, lock_id: str = "5c2e7b8e-aaaa-bbbb-cccc-0123456789ab") -> StateLockedError:
    return StateLockedError("terraform apply failed: the state is locked by another run",
                            f"ID: {lock_id}\nPath: tf-state/pools/vision/gpu\n"
                            f"Operation: OperationTypeApply\nWho: alice@laptop\nCreated: {created}")


def test_a_stale_lock_is_released_and_the_apply_retried_once(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    assert lock_of(LOCKED) == ("5c2e7b8e-aaaa-bbbb-cccc-0123456789ab",
                               datetime.fromisoformat("2026-11-30T10:00:00+00:00"))
    ws = FakeWorkspace(tmp_path / "ws", {})
    mono = Monotonic()
    prov = provisioner(tmp_path, None, ws, clock=lambda: NOW, monotonic=mono)  # 2 h after the lock
    for seconds in (0, 20 * 60, 35 * 60 - 1):  # each tick meets it until we have seen it 35 min
        mono.now = 1000.0 + seconds
        ws.apply_errors = [LOCKED]
        with pytest.raises(StateLockedError):
            prov.apply(REF, {})
    assert ws.runner.calls == []
    # One line says why the apply waits, naming the lock; not one per tick.
    [line] = [r.getMessage() for r in caplog.records if "state lock" in r.getMessage()]
    assert "5c2e7b8e-aaaa-bbbb-cccc-0123456789ab" in line and "0:35:00" in line
    mono.now = 1000.0 + 35 * 60
    ws.apply_errors = [LOCKED]
    assert prov.apply(REF, {}).ok
    assert ws.runner.calls == [("force-unlock", "5c2e7b8e-aaaa-bbbb-cccc-0123456789ab")]
    assert prov.unlocked == [("vision/gpu", "5c2e7b8e-aaaa-bbbb-cccc-0123456789ab")]


@pytest.mark.parametrize(("created", "now"), [
    ("2026-11-30 09:59:00.5 +0000 UTC", NOW),  # a live lock whose holder's clock is 2 h behind
    ("0001-01-01 00:00:00 +0000 UTC", NOW),  # Go's zero time: a backend that keeps none
    ("1970-01-01 00:00:00 +0000 UTC", NOW),
    ("2026-11-30 11:59:30 +0000 UTC", NOW + timedelta(hours=1)),  # our wall clock stepped +1 h
])
def test_a_lock_is_never_broken_on_its_created_time_alone(tmp_path: Path, created: str,
                                                          now: datetime) -> None:
    """Created is the holder's clock: a lock met for the first time is left alone however
    old it claims to be, and so is one seen long enough whose id changed (a new run)."""
    ws = FakeWorkspace(tmp_path / "ws", {})
    mono = Monotonic()
    prov = provisioner(tmp_path, None, ws, clock=lambda: now, monotonic=mono)
    ws.apply_errors = [locked(created)]
    with pytest.raises(StateLockedError):
        prov.apply(REF, {})
    mono.now += 3600
    ws.apply_errors = [locked(created, lock_id="99999999-aaaa-bbbb-cccc-0123456789ab")]
    with pytest.raises(StateLockedError):
        prov.apply(REF, {})
    assert ws.runner.calls == [] and prov.unlocked == []


def test_a_lock_seen_long_enough_but_created_recently_is_left_alone(tmp_path: Path) -> None:
    ws = FakeWorkspace(tmp_path / "ws", {})
    mono = Monotonic()
    soon = datetime.fromisoformat("2026-11-30T10:20:00+00:00")
    prov = provisioner(tmp_path, None, ws, clock=lambda: soon, monotonic=mono)
    for _ in range(2):
        ws.apply_errors = [LOCKED]
        with pytest.raises(StateLockedError):
            prov.apply(REF, {})
        mono.now += 3600
    assert ws.runner.calls == []


def test_a_recent_lock_is_left_alone(tmp_path: Path) -> None:
    ws = FakeWorkspace(tmp_path / "ws", {})
    ws.apply_errors = [LOCKED]
    soon = datetime.fromisoformat("2026-11-30T10:20:00+00:00")  # inside a 30 min run
    prov = provisioner(tmp_path, None, ws, clock=lambda: soon)
    with pytest.raises(StateLockedError):
        prov.apply(REF, {})
    assert ws.runner.calls == [] and prov.stale_lock_after == timedelta(minutes=35)
