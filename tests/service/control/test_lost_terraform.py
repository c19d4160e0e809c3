"""Empty cloud answers never destroy busy nodes: the real reconciler, executor and Terraform
(AWS provider) against moto.

Two READY nodes run jobs. Then every DescribeInstances the reconciler makes is answered
successfully and empty (a second, empty moto server: a real boto3 call that returns
nothing, as a wrong account, region or partition would). Over many ticks, with real
Terraform applies, no node is marked LOST and both instances keep running: first the pool
is frozen (100% of its instances missing at once), then, with the freeze turned off, the
scheduler's running jobs keep the nodes. Control: once the jobs are gone and the freeze
is off, the same answers do mark them LOST and Terraform destroys them (the guard, not
luck, kept them).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.engine import decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.snapshot import Snapshot
from autoscaler.model.snapshot_parts import Observed, assemble
from autoscaler.sandbox.services.moto_server import MotoSandbox, running_instances
from autoscaler.service.control.reconciler import Reconciler, ReconcileReport
from autoscaler.service.executor import ExecutorSettings
from tests.actuators.terraform_fixtures import (  # noqa: F401
    moto,
    moto_running,
    needs_terraform,
    sandbox_settings,
)
from tests.builders import NOW
from tests.service.crash_harness import Faults, Scenario
from tests.service.terraform_world import POOL, make_world

pytestmark = [pytest.mark.slow, needs_terraform]
S = NodeState


@pytest.fixture
def empty_cloud(tmp_path: Path) -> Iterator[MotoSandbox]:
    """A moto server with no instances: DescribeInstances succeeds and lists nothing."""
    yield from moto_running(tmp_path / "empty-moto")


def tick(scn: Scenario, rec: Reconciler, snapshot: Snapshot) -> ReconcileReport:
    """One service tick as the loop runs it: reconcile with what the scheduler observed,
    decide, record, submit, advance (real Terraform applies)."""
    scn.now += timedelta(seconds=30)
    observed = Observed(taken_at=scn.now, nodes=snapshot.nodes)
    report = rec.run(observed)
    plan = decide(scn.world.policies, scn.raw_store.fleet_view(), assemble(observed), scn.now,
                  catalog=default_catalog())
    scn.executor.submit(plan, scn.store.record_plan(plan))
    scn.executor.advance()
    return report


@pytest.mark.timeout(1200)
def test_empty_describe_answers_destroy_no_busy_instance(
        moto: MotoSandbox, empty_cloud: MotoSandbox, tmp_path: Path) -> None:  # noqa: F811
    world = make_world(f"sqlite:///{tmp_path / 'fleet.db'}", sandbox_settings(moto, tmp_path / "tf"),
                       moto.endpoint)
    world.jobs = lambda name: [f"job-on-{name}"]
    scn = Scenario(world, Faults(), NOW)
    scn.run_until(lambda: sorted(scn.states().values()) == [S.READY, S.READY], max_ticks=40)
    live = sorted(i["InstanceId"] for i in running_instances(moto.client(), pool=POOL))
    assert len(live) == 2

    def reconciler(settings: ExecutorSettings) -> Reconciler:
        def empty(cloud: str, region: str) -> AwsCloud:
            return AwsCloud(region, settings=AwsSettings(endpoint_url=empty_cloud.endpoint))
        return Reconciler(scn.store, scn.executor.provisioner, empty, settings,  # type: ignore[arg-type]
                          scn.clock, policies=lambda: world.policies)

    busy = scn.snapshot()  # both nodes run a job
    frozen = reconciler(ExecutorSettings(lost_after_misses=2))
    for _ in range(3):
        report = tick(scn, frozen, busy)
        assert list(report.frozen) == [f"vision/{POOL}"] and report.of("lost") == []
    unfrozen = reconciler(ExecutorSettings(lost_after_misses=2, lost_freeze_percent=100))
    for _ in range(3):
        report = tick(scn, unfrozen, busy)
        assert report.of("lost") == []
    refused = report.of("lost-refused")
    assert sorted(f.node or "" for f in refused) == sorted(scn.states())
    assert all("job(s) running on it" in f.detail for f in refused)
    assert sorted(scn.states().values()) == [S.READY, S.READY]
    assert sorted(i["InstanceId"] for i in running_instances(moto.client(), pool=POOL)) == live

    # Control: no jobs, no freeze: the same empty answers are now believed (and the
    # pool's min_nodes launches replacements, which the empty answers then miss too).
    first = sorted(scn.states())
    world.jobs = lambda name: []
    idle = scn.snapshot()
    for _ in range(3):
        tick(scn, unfrozen, idle)
    states = scn.states()
    assert {states[n] for n in first} <= {S.LOST, S.TERMINATED}, states
    still = {i["InstanceId"] for i in running_instances(moto.client(), pool=POOL)}
    assert not still & set(live), "the believed LOST nodes' instances were not destroyed"
