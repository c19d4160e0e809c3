"""Capacity requests on the sandbox stack, every component real: what the request e2e tests
and ``benchmarks/bench_requests.py`` share.

moto + terraform, booted test hosts in network namespaces bootstrapped by the real
playbook, a real Slurm cluster, the executor as the service wires it, the keeper before
each tick (linked Slurm jobs asked through the real ``scontrol``), and the HTTP API with
two team tokens on a free loopback port.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from autoscaler.catalog import default_catalog
from autoscaler.fleet.requests import RequestBook
from autoscaler.model.snapshot import Snapshot
from autoscaler.model.snapshot_parts import assemble
from autoscaler.policy import load_dir
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.stack.local import SandboxStack, StackOptions
from autoscaler.service.control.request_keeper import RequestKeeper, held_by_requests
from autoscaler.service.http.api import ApiHandlers, ApiServer, Health
from autoscaler.service.http.requests_api import RequestsApi, service_admitter
from autoscaler.signals.request_links import LinkWatcher
from tests.e2e.test_lifecycle_e2e import Loop

TOKEN = "e2e-team-token-0123456789"
OTHER = "other-team-token-0123456789"
# The sandbox pool: requests take g4dn.xlarge (1 x T4); a short checkpoint grace so a ttl
# expiry's signal -> grace -> destroy fits a test.
POLICY = """\
apiVersion: gpu-autoscaler/v1
team: e2e
priority: high
pools:
  - name: gpu
    cloud: aws
    region: us-east-1
    instance_types: [{types}]
    capacity: {{on_demand_base: 2, spot_percent: 0}}
    min_nodes: 0
    max_nodes: {max_nodes}
    scale_up: {{pending_jobs: false}}
    scale_down: {{gpu_utilization_below: 10, idle_for: 1s, cooldown: 1s, max_draining_percent: 100,
                 checkpoint_grace: 15s}}
    bootstrap: {{timeout: 6m}}
    cluster: {{kind: slurm, partition: gpu}}
"""
# Records the checkpoint signal in its own comment (scontrol works inside jobs), then ends.
CHECKPOINTING_JOB = ("trap 'scontrol update jobid=$SLURM_JOB_ID comment=checkpointed; exit 0' "
                     "USR1; while true; do sleep 1; done")
GATED_JOB = ("while ! scontrol show job $SLURM_JOB_ID | grep -q Comment=release; "
             "do sleep 1; done")


def write_policy(directory: Path, types: str = "g4dn.xlarge",
                 max_nodes: int = 2) -> dict[str, TeamPolicy]:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "e2e.yaml").write_text(POLICY.format(types=types, max_nodes=max_nodes))
    policies, errors = load_dir(directory, default_catalog())
    if errors:
        raise ValueError(f"policy invalid: {errors}")
    return policies


@contextmanager
def request_stack(root: Path) -> Iterator[SandboxStack]:
    write_policy(root / "policies", "g4dn.xlarge, g4dn.2xlarge")
    # Declared names (State=CLOUD sites, Slurm before 22.05): the other e2e scenarios and
    # the demo run the default, dynamic nodes.
    with SandboxStack(root / "sandbox", StackOptions(policies_dir=root / "policies",
                                                     slurm_registration="declared",
                                                     slurm_names_per_pool=12)) as stack:
        yield stack


class RequestLoop(Loop):
    """The e2e loop with the keeper before each tick and held nodes in the snapshot."""

    def __init__(self, stack: SandboxStack, policies: dict[str, TeamPolicy]):
        super().__init__(stack, policies)
        self.book = RequestBook(self.store)
        self.keeper = RequestKeeper(self.book, lambda: self.policies, self.catalog,
                                    self.executor.submit, lambda: datetime.now(UTC))
        self.keeper.ended_links = LinkWatcher(slurm=self.config.signals.slurm)
        self.requests = RequestsApi(self.book, {"e2e": TOKEN, "other": OTHER}, service_admitter(
            self.book, lambda: self.policies, self.catalog, self.config.engine, dict),
            lambda: datetime.now(UTC))

    def snapshot(self, now: datetime) -> Snapshot:
        return assemble(self.observe(now), held=held_by_requests(self.book, self.store.nodes(), now))

    def tick(self) -> None:
        self.log += self.keeper.run()
        super().tick()
        self.log += self.keeper.run()  # as the service does: READY nodes complete requests now

    @contextmanager
    def api(self) -> Iterator[str]:
        """The HTTP API on a free loopback port; yields the /v1/requests URL."""
        server = ApiServer(ApiHandlers(health=lambda: Health(True, "e2e"), metrics=lambda: b"",
                                       status=dict, plan=lambda: None,
                                       requests=self.requests.handle), port=0).start()
        try:
            yield server.url + "/v1/requests"
        finally:
            server.stop()

    def create(self, body: dict[str, Any], token: str = TOKEN) -> tuple[int, dict[str, Any]]:
        code, made = self.requests.handle("POST", "/v1/requests", f"Bearer {token}",
                                          json.dumps(body).encode())
        return code, made

    def condition(self, rid: str) -> str:
        view = self.book.get(rid)
        return view.condition.value if view is not None else "missing"

    def until_condition(self, rid: str, want: str, timeout: float) -> float:
        """Tick until the request is ``want``; the seconds it took."""
        started = time.monotonic()
        self.until(lambda: self.condition(rid) == want, timeout, f"request {want}")
        return time.monotonic() - started

    def boot_seconds(self, names: list[str]) -> list[float]:
        """REQUESTED -> READY of each node, from the store's transitions."""
        at = {(t.node, t.to_state): t.at for t in self.store.transitions()}
        return [(at[(n, "READY")] - at[(n, "REQUESTED")]).total_seconds() for n in names]


__all__ = ["CHECKPOINTING_JOB", "GATED_JOB", "OTHER", "TOKEN", "RequestLoop", "request_stack",
           "write_policy"]
