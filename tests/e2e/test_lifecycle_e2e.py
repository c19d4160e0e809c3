"""End to end: the node lifecycle on the sandbox stack, every component real.

moto + the terraform binary and AWS provider, a real Slurm cluster, one SSH test host
per instance in a network namespace (the sandbox follower makes them), the real playbook
through ansible-runner, the executor and reconciler as the service wires them, and
``decide()`` fed by the real Slurm reader (GPU metrics are synthetic: 50% on a node with
a job, 0% on one without: the engine keeps the last node of a pool while its mean
utilization is above zero).

1. policy floor 2: two nodes launched, bootstrapped over SSH and joined to Slurm (READY
   only once slurmctld hears from their slurmd);
2. a job runs on the first (it waits until the test releases it);
3. the floor drops to 0: the idle node is drained and destroyed while the busy one keeps
   its job and stays READY; the job is released and ends: the busy node is drained and
   destroyed after it;
4. zero instances left in moto, every transition in order.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.actuators.ansible.settings import KNOWN_HOSTS_DIR
from autoscaler.actuators.bootstrap_hash import warm_pool_hashes
from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.engine.pricing import Prices
from autoscaler.fleet.store import FleetStore
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.plan import Plan
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, PoolObservation, Snapshot
from autoscaler.model.snapshot_parts import Observed, assemble
from autoscaler.policy import load_dir
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.hosts.procs import wait_until
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions, privileged
from autoscaler.service.config.addresses import make_resolver
from autoscaler.service.config.load import load_config
from autoscaler.service.control import warm
from autoscaler.service.wiring import Markets, build_actuators
from autoscaler.signals.readings import pools_in_priority_order
from autoscaler.signals.slurm import SlurmReader
from tests.actuators.terraform_fixtures import needs_terraform

pytestmark = [
    pytest.mark.slow, needs_terraform,
    pytest.mark.skipif(not privileged(), reason="needs root, network namespaces and Slurm"),
]
S = NodeState
POLICY = """\
apiVersion: gpu-autoscaler/v1
team: e2e
priority: high
pools:
  - name: gpu
    cloud: aws
    region: us-east-1
    instance_types: [g4dn.xlarge]
    capacity: {{on_demand_base: 2, spot_percent: 0}}
    min_nodes: {floor}
    max_nodes: 2
    scale_up: {{pending_jobs: false}}
    scale_down: {{gpu_utilization_below: 10, idle_for: 1s, cooldown: 1s, max_draining_percent: 100}}
    bootstrap: {{timeout: 6m}}
    cluster: {{kind: slurm, partition: gpu}}
"""
GATED_JOB = ("while ! scontrol show job $SLURM_JOB_ID | grep -q Comment=release; "
             "do sleep 1; done")


def write_policy(directory: Path, floor: int) -> dict[str, TeamPolicy]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "e2e.yaml").write_text(POLICY.format(floor=floor))
    policies, errors = load_dir(directory, default_catalog())
    assert not errors, errors
    return policies


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SandboxStack]:
    root = tmp_path_factory.mktemp("e2e")
    write_policy(root / "policies", 2)
    with SandboxStack(root / "sandbox", StackOptions(policies_dir=root / "policies")) as s:
        yield s


class Loop:
    """The service tick without the service: reconcile, decide, record, submit, advance."""

    def __init__(self, stack: SandboxStack, policies: dict[str, TeamPolicy]):
        self.stack = stack
        self.policies = policies
        self.config = load_config(stack.config_file)
        self.catalog = default_catalog()
        self.store = FleetStore(self.config.store.url)
        self.executor, self.reconciler = build_actuators(
            self.config, self.store, lambda: self.policies, make_resolver(self.config.addresses),
            self.catalog, lambda: datetime.now(UTC), Markets(self.config, self.catalog))
        self.slurm = SlurmReader(self.config.signals.slurm)
        self.log: list[str] = []
        self.last_plan: Plan | None = None

    def observe(self, now: datetime) -> Observed:
        refs = pools_in_priority_order(self.policies, self.catalog, "slurm")
        reading = self.slurm.read(refs)
        assert reading.error is None, reading.error
        nodes = {}
        for node in self.store.nodes():
            sched = reading.nodes.get(node.name)
            util = 50.0 if sched is not None and sched.jobs else 0.0
            nodes[node.name] = NodeObservation(
                metrics=GpuMetrics(util_mean=util, util_max_idle_window=util, util_max=util,
                                   gpus_reporting=1, sample_age_s=1),
                scheduler=sched)
        pools = {r.key: PoolObservation(pending=reading.pending.get(r.key, [])) for r in refs}
        return Observed(taken_at=now, nodes=nodes, pools=pools)

    def snapshot(self, now: datetime) -> Snapshot:
        return assemble(self.observe(now))

    def tick(self) -> None:
        self.reconciler.run()
        now = datetime.now(UTC)
        snap = self.snapshot(now)
        # As the service decides: the warm pools out of decide()'s fleet, then their step.
        fleet, warm_nodes = warm.split(self.store.fleet_view())
        plan = decide(self.policies, fleet, snap, now, catalog=self.catalog)
        plan = warm.apply(plan, self.policies, fleet, warm_nodes, Prices(self.catalog, snap, now),
                          {}, lambda policies: warm_pool_hashes(
                              policies, self.config.terraform, self.config.ansible), now)
        self.last_plan = plan
        plan_id = self.store.record_plan(plan)
        self.executor.submit(plan, plan_id)
        report = self.executor.advance(snap)
        self.log += [f"{c.node} -> {c.to}: {c.reason}" for c in report.changes]
        self.log += [f"error: {e}" for e in report.errors]

    def until(self, done: Any, timeout: float, what: str, during: Any = None) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; "
                                     f"fleet {self.states()}; log tail: {self.log[-12:]}")
            self.tick()
            if during is not None:
                during()
            # A tick reads the cloud, Slurm and the store (~0.3 s of CPU under CI's load);
            # every 2 s keeps waits short without spending the suite's CPU on polling.
            time.sleep(2)

    def states(self) -> dict[str, NodeState]:
        return {n.name: n.state for n in self.store.nodes(include_terminated=True)}


def test_two_nodes_up_job_on_one_idle_drained_first_busy_after_its_job(
        stack: SandboxStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[Any]) -> None:
    started = time.monotonic()
    for key, value in stack.env().items():
        monkeypatch.setenv(key, value)
    loop = Loop(stack, write_policy(tmp_path / "policies", 2))
    cluster = stack.slurm
    assert cluster is not None

    # 1. Two nodes: terraform, ansible over SSH, slurmd joins slurmctld.
    loop.until(lambda: sorted(loop.states().values()) == [S.READY, S.READY], 420, "two READY nodes")
    busy, idle = sorted(loop.states())
    assert busy == "e2e-gpu-1" and idle == "e2e-gpu-2"
    # Dynamic nodes: slurm.conf names none; each registered itself with its gres, its
    # features (partition, team, pool, type, market, GPU model) and a weight above on-prem's.
    assert "NodeName=" not in cluster.slurm_conf.read_text()
    for name in (busy, idle):
        assert cluster.node_state(name) == "idle"
        node = loop.store.get(name)
        assert node is not None and node.address and node.address.startswith("169.254.77.")
        shown = cluster.scontrol("--oneliner", "show", "node", name).stdout
        assert "DYNAMIC" in shown and "Partitions=gpu" in shown and "Weight=100" in shown, shown
        assert (f"AvailableFeatures=partition-gpu,team-e2e,pool-gpu,{node.instance_type},"
                f"{node.market.value}") in shown, shown
        assert f"NodeAddr={node.address}" in shown, shown
    assert stack.running_instances() == 2
    up = time.monotonic() - started

    # 2. A job on the first node.
    job = cluster.submit(GATED_JOB, gpus=1, nodelist=busy, name="e2e-train")
    cluster.wait_job_state(job, {"RUNNING"}, 90)

    # 3. Scale down: the idle node goes, the busy one stays while its job runs.
    loop.policies = write_policy(tmp_path / "policies", 0)

    def busy_keeps_serving() -> None:
        assert loop.states()[busy] is S.READY, f"{busy} left while its job ran: {loop.log[-5:]}"
        assert cluster.job_state(job) == "RUNNING"

    loop.until(lambda: loop.states()[idle] is S.TERMINATED, 300, f"{idle} destroyed",
               during=busy_keeps_serving)
    assert stack.running_instances() == 1
    assert cluster.node_names() == [busy]  # the destroyed node was deleted from slurmctld
    released_at = datetime.now(UTC)
    cluster.run(["scontrol", "update", f"jobid={job}", "comment=release"], check=True)
    wait_until(lambda: cluster.job_state(job) == "COMPLETED", 60, "the job to end")
    loop.until(lambda: loop.states()[busy] is S.TERMINATED, 300, f"{busy} destroyed")

    # 4. Nothing left, and the order of it all.
    assert stack.running_instances() == 0 and cluster.node_names() == []
    order = [(t.node, t.to_state, t.at) for t in loop.store.transitions()]
    steps = {n: [s for m, s, _ in order if m == n] for n in (busy, idle)}
    for name in (busy, idle):
        assert steps[name] == ["REQUESTED", "PROVISIONING", "BOOTSTRAPPING", "READY", "DRAINING",
                               "DRAINED", "TERMINATING", "TERMINATED"], steps[name]
    drained = {n: at for n, s, at in order if s == "DRAINING"}
    gone = {n: at for n, s, at in order if s == "TERMINATED"}
    assert gone[idle] < drained[busy] and drained[busy] >= released_at
    assert "idle" in (loop.store.get(busy).drain_trigger or "")  # type: ignore[union-attr]
    runs = sorted(p for p in (Path(stack.config_file).parent / "ansible-runs").iterdir()
                  if p.name != KNOWN_HOSTS_DIR)
    assert runs and json.loads((runs[0] / "results.json").read_text())["status"] == "successful"
    with capsys.disabled():
        print(f"\nlifecycle e2e: both READY after {up:.0f}s, whole life {time.monotonic() - started:.0f}s")
