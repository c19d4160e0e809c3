"""End to end: a warm pool of 2 on the sandbox, every component real.

moto + the terraform binary and AWS provider (``aws_ec2_instance_state`` stops and starts the
instances), the real playbook through ansible-runner over SSH to booted test hosts, a real
Slurm cluster, and the executor as the service wires it (the lifecycle e2e's ``Loop``, which
decides as the service does: the warm pools out of decide()'s fleet, then their step; woken
as the service is when an operation ends, ``bake_rig.WakingLoop``).

1. The pool fills: two nodes launched, all but the start part run on them (``--skip-tags
   start``, slurmd held off), never joined to Slurm, then stopped: WARM, their instances
   ``stopped`` in moto and their hosts shut down with their disks kept. The preview prices
   them at the volume's $/h.
2. A pending Slurm job and, in the same tick, a floor of 1 in a cold pool of the same type:
   the job starts a warm node (the same instance, booted again from its disk), which runs
   only the start part (``--tags start``) and joins; from its instance up to READY it takes less than the
   cold node's full bootstrap (the sandbox's cold boot installs no driver: on a GPU
   instance the gap is minutes, benchmarks/bench_warm.py).
3. The pool refills to 2 once the started node is READY (not in the apply that starts it).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.catalog.volumes import stopped_hourly_usd
from autoscaler.model.plan import Plan, StartWarm
from autoscaler.policy import load_dir
from autoscaler.policy.models import Market, TeamPolicy
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions, privileged
from autoscaler.service.control.preview import preview
from tests.actuators.terraform_fixtures import needs_terraform
from tests.e2e.bake_rig import IMAGE_ONLY, PREPARED, STARTED, S, WakingLoop, pool_yaml, runs

pytestmark = [
    pytest.mark.slow, needs_terraform,
    pytest.mark.skipif(not privileged(), reason="needs root, network namespaces and Slurm"),
]

def write_policy(directory: Path, cold_floor: int) -> dict[str, TeamPolicy]:
    directory.mkdir(parents=True, exist_ok=True)
    warm = pool_yaml("warm", 0, most=2, pending=True, idle_for="1h") + "    warm_pool: {size: 2, max: 2}\n"
    cold = pool_yaml("cold", cold_floor)
    (directory / "e2e.yaml").write_text(
        "apiVersion: gpu-autoscaler/v1\nteam: e2e\npriority: high\npools:\n" + warm + cold)
    policies, errors = load_dir(directory, default_catalog())
    assert not errors, errors
    return policies


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[SandboxStack]:
    write_policy(tmp_path / "policies", 0)
    with SandboxStack(tmp_path / "sandbox", StackOptions(policies_dir=tmp_path / "policies")) as s:
        yield s


def moto_state(stack: SandboxStack, instance_id: str | None) -> str:
    [res] = stack.ec2().describe_instances(InstanceIds=[instance_id or ""])["Reservations"]
    return str(res["Instances"][0]["State"]["Name"])


def test_a_pending_job_starts_a_warm_node_which_is_ready_before_a_cold_one_and_the_pool_refills(
        stack: SandboxStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[Any]) -> None:
    for key, value in stack.env().items():
        monkeypatch.setenv(key, value)
    cluster = stack.slurm
    assert cluster is not None and stack.follower is not None
    loop = WakingLoop(stack, write_policy(tmp_path / "policies", 0))

    # 1. The warm pool fills, and its nodes are not capacity.
    loop.until(lambda: list(loop.states().values()).count(S.WARM) == 2, 480, "two WARM nodes")
    warm = sorted(n.name for n in loop.store.nodes() if n.state is S.WARM)
    done = runs(stack)
    for name in warm:
        node = loop.store.get(name)
        assert node is not None and node.progress.warm is not None
        assert node.progress.warm.stopped_at is not None and node.launched_for == "warm-pool"
        assert moto_state(stack, node.instance_id) == "stopped"
        assert done[name]["part"] == "warm" and done[name]["tasks"] >= IMAGE_ONLY - {
            "Reboot to load the NVIDIA driver"} | PREPARED, done[name]
        assert not done[name]["tasks"] & STARTED, done[name]["tasks"] & STARTED
    assert cluster.node_names() == [], "a warm node never joins before it is started"
    assert loop.last_plan is not None and loop.last_plan.pools["e2e/warm"].nodes == 0
    instance_of = {name: loop.store.get(name).instance_id for name in warm}  # type: ignore[union-attr]
    # What the preview of a start shows: the stopped nodes at their volume's $/h.
    now = datetime.now(UTC)
    plan = Plan(decided_at=now, actions=[StartWarm(
        pool="e2e/warm", node=warm[0], instance_type="g4dn.xlarge", market=Market.ON_DEMAND,
        gpus_per_node=1, hourly_usd=0.526, reason="test")])
    [delta] = preview(plan, loop.store.fleet_view(), loop.policies, loop.catalog,
                      loop.snapshot(now), now)
    assert delta.pool == "e2e/warm" and delta.power == [f"start {warm[0]}"], delta
    assert delta.hourly_before == pytest.approx(2 * stopped_hourly_usd(), abs=1e-3)
    assert delta.hourly_after == pytest.approx(stopped_hourly_usd() + 0.526, abs=1e-3)
    assert f"warm pool: start {warm[0]}" in delta.line()

    # 2. A pending job, and a cold node launched in the same tick.
    job = cluster.submit("sleep 600", gpus=1, partition="gpu", name="e2e-warm")
    loop.policies = write_policy(tmp_path / "policies", 1)
    loop.until(lambda: any(n.state is S.STARTING for n in loop.store.nodes()), 120,
               "a warm node STARTING")
    started_at = time.monotonic()
    [started] = [n for n in loop.store.nodes() if n.state is S.STARTING]
    assert started.name in warm and started.instance_id == instance_of[started.name]
    assert "start warm nodes" in started.reason, started.reason

    def up(name: str) -> bool:
        node = loop.store.get(name)
        return node is not None and node.state is S.READY

    cold_name: list[str] = []

    def cold_ready() -> bool:
        cold = [n for n in loop.store.nodes() if n.pool == "cold"]
        cold_name[:] = [n.name for n in cold]
        return bool(cold) and cold[0].state is S.READY

    loop.until(lambda: up(started.name), 300, f"{started.name} READY")
    warm_s = time.monotonic() - started_at
    cluster.wait_job_state(job, {"RUNNING"}, 90)
    assert cluster.node_state(started.name) in ("idle", "mixed", "allocated")
    done = runs(stack)
    assert done[started.name]["part"] == "start", done[started.name]
    assert done[started.name]["tasks"].isdisjoint(IMAGE_ONLY | PREPARED)
    assert done[started.name]["tasks"] >= STARTED, STARTED - done[started.name]["tasks"]
    host = stack.follower.followed[started.name].host
    assert host.run(started.name, ["hostname"]).stdout.strip() == started.name

    # 3. The pool refills to 2, and the cold node comes up too.
    loop.until(lambda: cold_ready() and sum(
        1 for n in loop.store.nodes() if n.pool == "warm" and n.state is S.WARM) == 2, 600,
        "the cold node READY and the warm pool refilled")
    moves = [(t.node, t.to_state, t.at) for t in loop.store.transitions()]
    booted = max(at for node, state, at in moves if node == started.name and state == "BOOTSTRAPPING")
    at = {(node, state): when for node, state, when in moves}
    warm_boot = (at[(started.name, "READY")] - booted).total_seconds()
    start_apply = (booted - at[(started.name, "STARTING")]).total_seconds()
    cold_boot = (at[(cold_name[0], "READY")] - at[(cold_name[0], "BOOTSTRAPPING")]).total_seconds()
    assert warm_boot < cold_boot, (warm_boot, cold_boot)
    refills = [node for node, state, when in moves if state == "REQUESTED" and node not in warm
               and node.startswith("e2e-warm-")]
    assert refills and all(at[(r, "REQUESTED")] >= at[(started.name, "READY")] for r in refills)
    with capsys.disabled():
        print(f"\nwarm pool e2e: boot_to_ready_warm_s={warm_boot:.1f} (start apply "
              f"{start_apply:.1f} s) boot_to_ready_cold_s={cold_boot:.1f} (wall {warm_s:.0f} s)")
