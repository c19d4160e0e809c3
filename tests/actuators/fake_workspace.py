"""An in-memory stand-in for PoolWorkspace, for unit tests of code that drives Terraform
(the executor, previews). Same method names and result types; records every call; can
fail chosen nodes with a capacity code or fail the next call outright (``next_error``)."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.actuators.node_map import NodeMap
from autoscaler.actuators.terraform.errors import (
    Diagnostic,
    NodeTarget,
    StalePlanError,
    TerraformError,
    capacity_errors,
)
from autoscaler.actuators.terraform.planfile import NodeChange, PoolPlan
from autoscaler.actuators.terraform.workspace import ApplyResult, NodeOutput
from autoscaler.policy.models import pool_key

_AT = datetime(2026, 1, 1, tzinfo=UTC)


class FakePoolWorkspace:
    def __init__(self, team: str, pool: str, cloud: str = "aws", region: str = "us-east-1",
                 now: datetime = _AT):
        self.team, self.pool, self.cloud, self.region, self.now = team, pool, cloud, region, now
        self.calls: list[str] = []
        self.next_error: TerraformError | None = None
        self.fail_nodes: dict[str, str] = {}  # node -> capacity code for its next create
        self._applied: NodeMap = {}
        self._outputs: dict[str, NodeOutput] = {}
        self._serial = 0
        self._ids = itertools.count(1)

    @property
    def key(self) -> str:
        return pool_key(self.team, self.pool)

    def _call(self, name: str) -> None:
        self.calls.append(name)
        if self.next_error is not None:
            error, self.next_error = self.next_error, None
            raise error

    def applied_nodes(self) -> NodeMap:
        return dict(self._applied)

    def outputs(self) -> dict[str, NodeOutput]:
        return dict(self._outputs)

    def discard_plan(self) -> None:
        self.calls.append("discard_plan")

    def plan(self, nodes: NodeMap) -> PoolPlan:
        self._call("plan")
        changes = [NodeChange(node=n, action="create", after=s) for n, s in nodes.items()
                   if n not in self._outputs]
        changes += [NodeChange(node=n, action="replace", after=s, before=self._applied[n])
                    for n, s in nodes.items() if n in self._outputs and self._applied.get(n)
                    and self._applied[n] != s]
        changes += [NodeChange(node=n, action="destroy", before=self._applied.get(n))
                    for n in self._outputs if n not in nodes]
        return PoolPlan(pool=self.key, cloud=self.cloud, region=self.region,
                        plan_file=Path(f"/fake/{self.key}/pending.tfplan"), plan_sha256="fake",
                        nodes=dict(nodes), changes=sorted(changes, key=lambda c: c.node),
                        state_serial=self._serial, planned_at=self.now)

    def apply(self, pool_plan: PoolPlan) -> ApplyResult:
        self._call("apply")
        if pool_plan.state_serial != self._serial:
            raise StalePlanError(f"pool {self.key}: plan made against serial "
                                 f"{pool_plan.state_serial}, state is at {self._serial}")
        created, destroyed, diags = [], [], []
        for change in pool_plan.changes:
            if change.action in ("destroy", "replace"):
                self._outputs.pop(change.node, None)
                destroyed.append(change.node)
            if change.action in ("create", "replace"):
                code = self.fail_nodes.pop(change.node, None)
                if code:
                    diags.append(Diagnostic("error", f"creating instance: api error {code}",
                                            address=f'module.pool.x.node["{change.node}"]'))
                    continue
                lifecycle = change.after.market.value if change.after else "on-demand"
                self._outputs[change.node] = NodeOutput(
                    id=f"i-fake{next(self._ids):05d}", private_ip=None, lifecycle=lifecycle)
                created.append(change.node)
        self._serial += 1
        failed = {d.node: d.text for d in diags if d.node}
        self._applied = {n: s for n, s in pool_plan.nodes.items() if n in self._outputs}
        targets = {n: NodeTarget(s.instance_type, s.market, s.zone)
                   for n, s in pool_plan.nodes.items()}
        caps = capacity_errors(diags, targets, self.cloud, self.region, self.now)
        return ApplyResult(pool=self.key, ok=not diags, nodes=self.outputs(), created=created,
                           destroyed=destroyed, failed=failed, capacity_errors=list(caps.values()))

    def destroy_all(self) -> None:
        self._call("destroy_all")
        self._outputs, self._applied = {}, {}
        self._serial += 1
