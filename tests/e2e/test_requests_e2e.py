"""End to end: a capacity request on the sandbox stack, every component real.

moto + terraform, SSH test hosts in network namespaces bootstrapped by the real playbook,
a real Slurm cluster, the executor as the service wires it, the HTTP API with team
tokens. An atomic request for 2 nodes is Provisioned (node names and addresses), a job
pinned to them runs (``sbatch --nodelist``), the nodes stay while the request holds them
although they are idle, and ``DELETE`` drains and destroys them.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from autoscaler.fleet.requests import RequestBook
from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.procs import wait_until
from autoscaler.sandbox.stack import SandboxStack, StackOptions
from autoscaler.service.api import ApiHandlers, ApiServer, Health
from autoscaler.service.request_keeper import HeldSignals, RequestKeeper
from autoscaler.service.requests_api import RequestsApi, service_admitter
from tests.e2e.test_lifecycle_e2e import Loop, pytestmark, write_policy  # noqa: F401
from tests.requests.test_requests_api import call

S = NodeState
TOKEN = "e2e-team-token-0123456789"
BODY = {"name": "ci-4711", "class": "atomic", "idempotency_key": "e2e-run-1-attempt",
        "node_sets": [{"instance_type": "g4dn.xlarge", "gpus": 1, "nodes": 2}]}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("e2e-requests")
    write_policy(root / "policies", 0)
    with SandboxStack(root / "sandbox", StackOptions(policies_dir=root / "policies",
                                                     slurm_names_per_pool=3)) as s:
        yield s


class RequestLoop(Loop):
    """The e2e loop with the keeper before each tick and held nodes in the snapshot."""

    def __init__(self, stack: SandboxStack, policies: Any):
        super().__init__(stack, policies)
        self.book = RequestBook(self.store)
        self.keeper = RequestKeeper(self.book, lambda: self.policies, self.catalog,
                                    self.executor.submit, lambda: datetime.now(UTC))

    def snapshot(self, now: datetime) -> Any:
        snap = super().snapshot(now)
        return HeldSignals(_Fixed(snap), self.book).read(self.policies, [], now)

    def tick(self) -> None:
        self.log += self.keeper.run()
        super().tick()


class _Fixed:
    def __init__(self, snap: Any):
        self.snap = snap

    def read(self, *_: Any) -> Any:
        return self.snap


def test_atomic_request_provisioned_job_runs_delete_drains_and_destroys(
        stack: SandboxStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[Any]) -> None:
    for key, value in stack.env().items():
        monkeypatch.setenv(key, value)
    loop = RequestLoop(stack, write_policy(tmp_path / "policies", 0))
    requests = RequestsApi(loop.book, {"e2e": TOKEN}, service_admitter(
        loop.book, lambda: loop.policies, loop.catalog, loop.config.engine, dict),
        lambda: datetime.now(UTC))
    api = ApiServer(ApiHandlers(health=lambda: Health(True, "e2e"), metrics=lambda: b"",
                                status=dict, plan=lambda: None, requests=requests.handle),
                    port=0).start()
    try:
        url = api.url + "/v1/requests"
        started = time.monotonic()
        code, made = call(url, "POST", TOKEN, BODY)
        assert code == 201 and made["condition"] == "Accepted", made
        assert call(url, "POST", TOKEN, BODY)[1]["id"] == made["id"]  # a retried step
        rid = made["id"]

        def condition() -> str:
            return str(call(f"{url}/{rid}", token=TOKEN)[1]["condition"])

        loop.until(lambda: condition() == "Provisioned", 480, "the request Provisioned")
        provisioned_s = time.monotonic() - started
        view = call(f"{url}/{rid}", token=TOKEN)[1]
        names = sorted(view["nodes"])
        assert names == ["e2e-gpu-1", "e2e-gpu-2"]
        assert all(a and a.startswith("169.254.77.") for a in view["nodes"].values())
        cluster = stack.slurm
        assert cluster is not None
        job = cluster.submit("hostname", gpus=1, nodelist=",".join(names), name="ci-4711",
                             extra=["--nodes=2", "--ntasks=2"])
        wait_until(lambda: cluster.job_state(job) == "COMPLETED", 120, "the pinned job")
        for _ in range(3):  # idle, but held: kept
            loop.tick()
        assert {loop.states()[n] for n in names} == {S.READY}

        assert call(f"{url}/{rid}", "DELETE", TOKEN)[1]["condition"] == "Released"
        released = time.monotonic()
        loop.until(lambda: {loop.states()[n] for n in names} == {S.TERMINATED}, 300,
                   "the released nodes destroyed")
        assert stack.running_instances() == 0
        for name in names:
            steps = [t.to_state for t in loop.store.transitions(name)]
            assert steps[-4:] == ["DRAINING", "DRAINED", "TERMINATING", "TERMINATED"], steps
            assert loop.store.get(name).drain_trigger == "released"  # type: ignore[union-attr]
        events = [a.event for a in loop.store.audit_log(500)]
        assert {"request_created", "request_accepted", "request_provisioned",
                "request_released"} <= set(events)
        gone_s = time.monotonic() - released
        at = {(t.node, t.to_state): t.at for t in loop.store.transitions()}
        boot_s = max((at[(n, "READY")] - at[(n, "REQUESTED")]).total_seconds() for n in names)
        with capsys.disabled():
            print(f"\nrequests e2e: request_to_provisioned_s={provisioned_s:.0f} "
                  f"boot_to_ready_s={boot_s:.0f} release_to_terminated_s={gone_s:.0f}")
    finally:
        api.stop()


TWO_TYPES = """\
apiVersion: gpu-autoscaler/v1
team: e2e
priority: high
pools:
  - name: gpu
    cloud: aws
    region: us-east-1
    instance_types: [g4dn.xlarge, g4dn.2xlarge]
    capacity: {on_demand_base: 2, spot_percent: 0}
    min_nodes: 0
    max_nodes: 2
    scale_up: {pending_jobs: false}
    scale_down: {gpu_utilization_below: 10, idle_for: 1s, cooldown: 1s, max_draining_percent: 100}
    bootstrap: {timeout: 6m}
    cluster: {kind: slurm, partition: gpu}
"""


def test_atomic_request_rolled_back_when_the_second_node_hits_a_capacity_error(
        stack: SandboxStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[Any]) -> None:
    from autoscaler.catalog import default_catalog
    from autoscaler.policy import load_dir

    for key, value in stack.env().items():
        monkeypatch.setenv(key, value)
    (tmp_path / "policies").mkdir()
    (tmp_path / "policies" / "e2e.yaml").write_text(TWO_TYPES)
    policies, errors = load_dir(tmp_path / "policies", default_catalog())
    assert not errors
    loop = RequestLoop(stack, policies)
    assert stack.moto is not None
    stack.moto.fail_capacity("g4dn.2xlarge")
    try:
        requests = RequestsApi(loop.book, {"e2e": TOKEN}, service_admitter(
            loop.book, lambda: loop.policies, loop.catalog, loop.config.engine, dict),
            lambda: datetime.now(UTC))
        code, made = requests.handle("POST", "/v1/requests", f"Bearer {TOKEN}", json.dumps({
            "name": "ci-4712", "class": "atomic", "node_sets": [
                {"instance_type": "g4dn.xlarge", "gpus": 1, "nodes": 1},
                {"instance_type": "g4dn.2xlarge", "gpus": 1, "nodes": 1}]}).encode())
        assert code == 201 and made["condition"] == "Accepted", made
        rid = made["id"]
        loop.until(lambda: loop.book.get(rid).condition.value == "Failed", 300,  # type: ignore[union-attr]
                   "the request Failed")
        failed_at = time.monotonic()
        view = loop.book.get(rid)
        assert view is not None
        first, second = sorted(view.nodes)
        assert f"{second} PROVISION_FAILED" in view.reason
        assert "InsufficientInstanceCapacity" in view.reason and "rolling back" in view.reason
        loop.until(lambda: loop.states()[first] is S.TERMINATED, 300, f"{first} rolled back")
        rollback_s = time.monotonic() - failed_at
        # The failed node is cleaned up like any PROVISION_FAILED node (decide terminates it).
        loop.until(lambda: stack.running_instances() == 0
                   and loop.states()[second] is S.TERMINATED, 180,
                   f"no instance left (running: {stack.running_instances()})")
        assert rollback_s <= 120, rollback_s
        with capsys.disabled():
            print(f"\nrequests e2e: atomic rollback {rollback_s:.0f}s after the failure")
    finally:
        stack.moto.clear_faults()
