"""A placement group on real Terraform: two pools in two regions of moto, the service loop
with the real executor. Spot is cheaper in us-east-1, so the first launch goes there; moto
refuses it (InsufficientInstanceCapacity), the executor reports the refusal, and the next
tick launches in us-west-2, whose apply succeeds. The plan names both pools and prices.

Ansible is the fake (no host boots here: what is tested is where the launch goes); the
cluster is the loop's test signals, which list the job with both pools as options, as the
Slurm and Kubernetes readers do (tests/signals)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autoscaler.actuators.drain import no_drainer
from autoscaler.actuators.terraform import RegionInputs
from autoscaler.actuators.terraform.provisioner import TerraformProvisioner
from autoscaler.catalog import default_catalog
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.engine import EngineSettings
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Launch
from autoscaler.model.snapshot import CapacityError, Offering, PendingJob, PoolObservation, PoolOption
from autoscaler.model.snapshot_parts import PriceView
from autoscaler.policy.models import Market, TeamPolicy
from autoscaler.sandbox.services.moto_server import MOTO_AMI, MotoSandbox, running_instances
from autoscaler.service.config.models import LeaderSettings
from autoscaler.service.config.reload import PolicyReloader
from autoscaler.service.control.leader import Leadership
from autoscaler.service.control.loop import ServiceLoop
from autoscaler.service.executor import Executor, ExecutorSettings
from autoscaler.service.observe.metrics import ServiceMetrics
from tests.actuators.terraform_fixtures import moto, needs_terraform, sandbox_settings  # noqa: F401
from tests.fakes import FakeAnsible
from tests.service.service_fakes import Clock, FakeReconciler, FakeSignals

pytestmark = [pytest.mark.slow, needs_terraform]
EAST, WEST = "vision/east", "vision/west"
OFFERS = [Offering(cloud="aws", region="us-east-1", instance_type="g4dn.xlarge", zone="us-east-1a",
                   spot_usd=0.16, in_stock=True),
          Offering(cloud="aws", region="us-west-2", instance_type="g4dn.xlarge", zone="us-west-2a",
                   spot_usd=0.21, in_stock=True)]


@dataclass
class MarketPrices:
    """Observed spot prices (as the spot price history reader gives them) and the
    refusals the loop feeds back from the executor."""

    recorded: list[CapacityError] = field(default_factory=list)

    def observe(self, policies: Mapping[str, TeamPolicy]) -> PriceView:
        return PriceView(list(OFFERS), list(self.recorded), [])

    def record_capacity_error(self, error: CapacityError) -> None:
        self.recorded.append(error)


POLICY = """\
team: vision
placement_groups: {t4: [east, west]}
pools:
  - {name: east, cloud: aws, region: us-east-1, zones: [us-east-1a], instance_types: [g4dn.xlarge],
     max_nodes: 2, capacity: {on_demand_base: 0, spot_percent: 100, spot_fallback: on-demand},
     cluster: {kind: none}}
  - {name: west, cloud: aws, region: us-west-2, zones: [us-west-2a], instance_types: [g4dn.xlarge],
     max_nodes: 2, capacity: {on_demand_base: 0, spot_percent: 100, spot_fallback: on-demand},
     cluster: {kind: none}}
"""


@pytest.mark.timeout(600)
def test_a_spot_refusal_in_one_region_launches_in_the_other_on_the_next_tick(
        moto: MotoSandbox, tmp_path: Path) -> None:  # noqa: F811
    inputs = RegionInputs(ami=MOTO_AMI, root_volume_gb=50, user_data="#!/bin/sh\n")
    settings = sandbox_settings(moto, tmp_path / "tf").model_copy(update={"regions": {
        "aws/us-east-1": inputs, "aws/us-west-2": inputs}})

    def cloud(name: str, region: str) -> AwsCloud:
        return AwsCloud(region, settings=AwsSettings(endpoint_url=moto.endpoint))

    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "vision.yaml").write_text(POLICY)
    catalog, clock = default_catalog(), Clock()
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    executor = Executor(store, lambda: loop.policies(), TerraformProvisioner(settings, cloud_for=cloud),
                        FakeAnsible(), {"none": no_drainer()},
                        lambda n: "169.254.77.2" if n.instance_id else None,
                        ExecutorSettings(), catalog, clock)
    signals, prices = FakeSignals(), MarketPrices()
    loop = ServiceLoop(
        store=store, reloader=PolicyReloader(tmp_path / "policies", catalog), signals=signals,
        catalog=catalog, metrics=ServiceMetrics(), leadership=Leadership(store, LeaderSettings()),
        executor=executor, reconciler=FakeReconciler(), prices=prices,
        engine=EngineSettings(), clock=clock, dry_run=False, interval_s=5)
    job = PendingJob(id="train-1", gpus=1, reason="Unschedulable", submitted_at=clock.now,
                     options=[PoolOption(pool=EAST), PoolOption(pool=WEST)])
    signals.pools = {EAST: PoolObservation(pending=[job])}
    moto.fail_capacity("g4dn.xlarge", "us-east-1a", "spot")
    try:
        first = loop.tick()
        assert first.error is None and first.plan is not None, first.error
        (launch,) = [a for a in first.plan.actions if isinstance(a, Launch)]
        assert (launch.pool, launch.market) == (EAST, Market.SPOT)
        assert "$0.16/GPU-h chosen over vision/west (aws us-west-2) g4dn.xlarge spot us-west-2a " \
               "$0.21/GPU-h" in first.plan.placements[0].reason
        assert [e.code for e in prices.recorded] == ["InsufficientInstanceCapacity"]
        assert running_instances(moto.client(region="us-east-1")) == []

        clock.advance(seconds=30)
        second = loop.tick()
        assert second.error is None and second.plan is not None, second.error
        (launch,) = [a for a in second.plan.actions if isinstance(a, Launch)]
        assert (launch.pool, launch.market, launch.zone) == (WEST, Market.SPOT, "us-west-2a")
        reason = second.plan.placements[0].reason
        assert "vision/west (aws us-west-2) g4dn.xlarge spot us-west-2a $0.21/GPU-h chosen over" in reason
        assert "us-east-1a: capacity error InsufficientInstanceCapacity" in reason
        west = running_instances(moto.client(region="us-west-2"))
        assert len(west) == 1 and west[0]["InstanceLifecycle"] == "spot"
        (node,) = [n for n in store.nodes() if n.pool == "west"]
        assert node.region == "us-west-2" and node.state is not NodeState.PROVISION_FAILED
    finally:
        moto.clear_faults()
        executor.close()
        store.close()
