"""What the executor needs of Terraform, Ansible and the schedulers (fakes in tests/fakes.py)."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Protocol

from autoscaler.actuators.ansible import Bootstrapper
from autoscaler.actuators.drain import Drainer
from autoscaler.actuators.node_map import NodeMap
from autoscaler.actuators.terraform import ApplyResult, NodeOutput
from autoscaler.model.pool import PoolRef


class Provisioner(Protocol):
    """Per-pool Terraform: the only thing that creates or destroys instances."""

    def applied(self, ref: PoolRef) -> NodeMap | None:
        """The node map of the pool's last successful apply; None when it must be applied
        again whatever the map (marked stale by the reconciler)."""
        ...

    def apply(self, ref: PoolRef, nodes: NodeMap, *, destroy: Collection[str] = ()) -> ApplyResult:
        """Make the pool hold exactly ``nodes``. Instances of the pool that the cloud has but
        the state lost (an apply killed half way) are imported first when their ``node`` tag
        is in ``nodes``, so a retry never doubles a node; instance ids in ``destroy`` are
        imported under a spare key and destroyed by the same apply."""
        ...

    def instances(self, ref: PoolRef) -> dict[str, NodeOutput]:
        """What the pool's state holds now, per node (read from the state, not from the
        outputs, which a failed apply leaves stale)."""
        ...

    def leftovers(self, ref: PoolRef, names: Iterable[str]) -> dict[str, list[str]]:
        """Per named node, live cloud instances tagged with it that the state does not
        hold: the evidence that must be absent before a node counts as TERMINATED."""
        ...

    def mark_stale(self, ref: PoolRef) -> None: ...


__all__ = ["Bootstrapper", "Drainer", "Provisioner"]
