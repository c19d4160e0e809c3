"""The orphan seen on the sandbox, with the real terraform binary and AWS provider against
moto: a launch cancelled (PROVISIONING -> TERMINATING) while its pool's apply ran and
failed on another node ended TERMINATED "instance (none) destroyed" while moto still ran
its instance.

Cause: after an apply that fails on one node, ``terraform output`` still shows the last
successful apply, so the instance the same apply did create was in the state and in the
cloud but in no answer the executor read. Now what a pool holds is read from the state,
the node keeps its instance id, and the next apply destroys it before it is TERMINATED.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import pytest

from autoscaler.actuators.drain import no_drainer
from autoscaler.actuators.node_map import NodeMap
from autoscaler.actuators.terraform import ApplyResult
from autoscaler.actuators.terraform.provisioner import TerraformProvisioner
from autoscaler.catalog import default_catalog
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.pool import PoolRef
from autoscaler.model.progress import NodeProgress
from autoscaler.policy.models import Market
from autoscaler.sandbox.services.moto_server import MotoSandbox, running_instances
from autoscaler.service.executor import Executor, ExecutorSettings
from tests.actuators.terraform_fixtures import moto, needs_terraform, sandbox_settings  # noqa: F401
from tests.builders import NOW, make_policy
from tests.fakes import FakeAnsible
from tests.fleet.writes import create_node, transition

pytestmark = [pytest.mark.slow, needs_terraform]
S = NodeState
POOL = "v100"


class CancellingProvisioner(TerraformProvisioner):
    """The engine cancels ``victim`` while the pool's first apply runs."""

    victim = ""

    def apply(self, ref: PoolRef, nodes: NodeMap, *, destroy: Collection[str] = ()) -> ApplyResult:
        result = super().apply(ref, nodes, destroy=destroy)
        if self.victim:
            transition(self.store, self.victim, S.TERMINATING, NOW, "demand gone")
            self.victim = ""
        return result


@pytest.mark.timeout(900)
def test_a_launch_cancelled_during_a_half_failed_apply_leaves_no_orphan(
        moto: MotoSandbox, tmp_path: Path) -> None:  # noqa: F811
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    policies = {"vision": make_policy(team="vision", name=POOL, cluster={"kind": "none"},
                                      instance_types=["g4dn.xlarge", "p3.2xlarge"])}

    def cloud(name: str, region: str) -> AwsCloud:
        return AwsCloud(region, settings=AwsSettings(endpoint_url=moto.endpoint))

    prov = CancellingProvisioner(sandbox_settings(moto, tmp_path / "tf"), cloud_for=cloud)  # type: ignore[arg-type]
    prov.store = store  # type: ignore[attr-defined]
    executor = Executor(store, lambda: policies, prov, FakeAnsible(), {"none": no_drainer()},
                        lambda n: "169.254.77.2" if n.instance_id else None, ExecutorSettings(),
                        default_catalog(), lambda: NOW)
    ok, fails = (create_node(store, cooldown="up", pool=POOL, zone="us-east-1a", instance_type=t,
                             market=m, now=NOW, progress=NodeProgress(cluster="none"))
                 for t, m in (("g4dn.xlarge", Market.ON_DEMAND), ("p3.2xlarge", Market.SPOT)))
    moto.fail_capacity("p3.2xlarge", zone="us-east-1a", market="spot")
    try:
        prov.victim = ok.name
        executor.advance()
        [inst] = running_instances(moto.client(), pool=POOL)
        node = store.get(ok.name)
        assert node is not None and node.state is S.TERMINATING
        assert node.instance_id == inst["InstanceId"], "the store lost track of the instance"
        assert store.get(fails.name).state is S.PROVISION_FAILED  # type: ignore[union-attr]
        for _ in range(3):
            executor.advance()
            if store.get(ok.name).state is S.TERMINATED:  # type: ignore[union-attr]
                break
        assert running_instances(moto.client(), pool=POOL) == [], "orphaned instance"
        done = store.get(ok.name)
        assert done is not None and done.state is S.TERMINATED
        assert inst["InstanceId"] in done.reason, done.reason
    finally:
        moto.clear_faults()
        store.close()
