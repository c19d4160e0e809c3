"""The Provisioner over the Terraform actuator: one PoolWorkspace per pool, plus strays.

``apply(ref, nodes)`` plans and applies the pool's node map. Before that it lists the
pool's instances in the cloud (by the ``managed-by``, ``team`` and ``pool`` tags every
instance gets from the module) and compares them with the state: an instance whose
``node`` tag is wanted but that the state does not hold was created by an apply that
was killed before it saved the state. It is imported under its node's key, so the
retry adopts it instead of launching a second instance. Instance ids the reconciler
asks to destroy are imported under a spare key (``<node>-stray-<id>``) that the map
leaves out, so the same apply destroys them: nothing but Terraform ever terminates an
instance.

``mark_stale(ref)`` leaves a marker in the workspace: the next advance applies the pool
even though its node map did not change (the state and the store disagree).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping
from datetime import UTC, datetime

from autoscaler.actuators.node_map import NodeMap, NodeSpec, PoolRef
from autoscaler.actuators.terraform import (
    ApplyResult,
    NodeOutput,
    PoolWorkspace,
    TerraformError,
    TerraformSettings,
)
from autoscaler.actuators.terraform.runner import FLAG
from autoscaler.clouds.base import MANAGED_TAGS, CloudInstance, CloudMarket

STALE_MARKER = "gpu-autoscaler-stale"
RESOURCES = {"aws": "aws_instance", "alicloud": "alicloud_instance"}
CloudFor = Callable[[str, str], CloudMarket]


def _utcnow() -> datetime:
    return datetime.now(UTC)


def stray_key(node: str | None, instance_id: str) -> str:
    """A map key for an instance to destroy (a valid node name, never a real node's)."""
    base = (node or "unnamed")[:40]
    return f"{base}-stray-{instance_id.removeprefix('i-')[-12:]}".lower()


def pool_instances(cloud: CloudMarket, ref: PoolRef) -> list[CloudInstance]:
    tags = {**MANAGED_TAGS, "team": ref.team, "pool": ref.pool}
    return cloud.managed_instances(tags=tags)


class TerraformProvisioner:
    def __init__(self, settings: TerraformSettings, *, cloud_for: CloudFor | None = None,
                 clock: Callable[[], datetime] = _utcnow):
        self.settings = settings
        self.cloud_for = cloud_for
        self.clock = clock
        self._workspaces: dict[str, PoolWorkspace] = {}
        self._guard = threading.Lock()
        self.imported: list[tuple[str, str, str]] = []  # (pool, key, instance id), for status

    def workspace(self, ref: PoolRef) -> PoolWorkspace:
        with self._guard:
            if ref.key not in self._workspaces:
                self._workspaces[ref.key] = PoolWorkspace(
                    self.settings, ref.team, ref.pool, ref.cloud, ref.region, clock=self.clock)
            return self._workspaces[ref.key]

    # -- Provisioner -----------------------------------------------------------------------
    def applied(self, ref: PoolRef) -> NodeMap | None:
        ws = self.workspace(ref)
        if (ws.dir / STALE_MARKER).exists():
            return None
        return ws.applied_nodes()

    def mark_stale(self, ref: PoolRef) -> None:
        ws = self.workspace(ref)
        ws.dir.mkdir(parents=True, exist_ok=True)
        (ws.dir / STALE_MARKER).touch()

    def instances(self, ref: PoolRef) -> dict[str, NodeOutput]:
        ws = self.workspace(ref)
        ws.init()
        return ws.outputs()

    def apply(self, ref: PoolRef, nodes: NodeMap, *, destroy: Collection[str] = ()) -> ApplyResult:
        ws = self.workspace(ref)
        ws.init()
        imports = self._strays(ref, ws, nodes, set(destroy))
        if imports:
            self._import(ref, ws, nodes, imports)
        result = ws.apply(ws.plan(nodes))
        if result.ok:
            (ws.dir / STALE_MARKER).unlink(missing_ok=True)
        return result

    # -- strays ------------------------------------------------------------------------------
    def _strays(self, ref: PoolRef, ws: PoolWorkspace, nodes: NodeMap,
                destroy: set[str]) -> dict[str, tuple[str, NodeSpec]]:
        """Map key -> (instance id, spec) of cloud instances to bring into the state."""
        if self.cloud_for is None:
            if destroy:
                raise TerraformError(f"pool {ref.key}: cannot destroy {sorted(destroy)}: no cloud "
                                     "adapter to read them from")
            return {}
        held = ws.outputs()
        known = {out.id for out in held.values()}
        out: dict[str, tuple[str, NodeSpec]] = {}
        for inst in pool_instances(self.cloud_for(ref.cloud, ref.region), ref):
            if inst.instance_id in known:
                continue
            if inst.instance_id in destroy:
                spec = NodeSpec(instance_type=inst.instance_type, market=inst.market,
                                zone=inst.zone or "")
                out[stray_key(inst.node, inst.instance_id)] = (inst.instance_id, spec)
            elif inst.node and inst.node in nodes and inst.node not in held and inst.node not in out:
                out[inst.node] = (inst.instance_id, nodes[inst.node])
        return out

    def _import(self, ref: PoolRef, ws: PoolWorkspace, nodes: NodeMap,
                imports: Mapping[str, tuple[str, NodeSpec]]) -> None:
        resource = RESOURCES.get(ref.cloud)
        if resource is None:
            raise TerraformError(f"pool {ref.key}: no import for cloud {ref.cloud!r}")
        ws.write_config({**nodes, **{key: spec for key, (_, spec) in imports.items()}})
        for key, (instance_id, _) in sorted(imports.items()):
            address = f'module.pool.{resource}.node["{key}"]'
            try:
                ws.runner.run("import", address, instance_id, input=False, no_color=FLAG,
                              lock_timeout=self.settings.lock_timeout)
            except TerraformError as exc:
                if "already managed" not in str(exc):
                    raise
            self.imported.append((ref.key, key, instance_id))
