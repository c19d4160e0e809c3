"""What the executor needs of Terraform, Ansible and the schedulers (the Protocols; fakes
in tests/fakes.py), and the real drainers from the signals configuration."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Literal, Protocol

from autoscaler.actuators.ansible import Bootstrapper
from autoscaler.actuators.drain import Drainer, no_drainer
from autoscaler.actuators.node_map import NodeMap
from autoscaler.actuators.terraform import ApplyResult, NodeOutput
from autoscaler.model.pool import PoolRef

if TYPE_CHECKING:
    from autoscaler.actuators.drain.kubernetes import NodeCache
    from autoscaler.signals.config import SignalsConfig


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

    def mark_stale(self, ref: PoolRef, nodes: Collection[str] | None = None) -> None:
        """Apply the pool again at the next apply, whatever its map: where it holds one of
        ``nodes`` (a node not held anywhere is applied anyway: its map differs), or
        everywhere when None."""
        ...


def drainers_for(signals: SignalsConfig, *,
                 checkpoint_scope: Literal["batch", "full"] = "batch",
                 kube_nodes: NodeCache | None = None) -> dict[str, Drainer]:
    """One drainer per cluster kind the configuration can reach ("none" always).
    ``kube_nodes``: the signal reader's watch cache of Kubernetes nodes, which answers the
    readiness of booting nodes without a LIST."""
    # Imported here: the scheduler clients (the kubernetes package) load only in the
    # process that builds real drainers, not wherever the executor is imported.
    from autoscaler.actuators.drain.kubernetes import kubernetes_drainer
    from autoscaler.actuators.drain.slurm import slurm_drainer

    out: dict[str, Drainer] = {"none": no_drainer(),
                               "slurm": slurm_drainer(signals.slurm, scope=checkpoint_scope)}
    if signals.kubernetes is not None:
        out["kubernetes"] = kubernetes_drainer(config=signals.kubernetes, cached=kube_nodes)
    return out


__all__ = ["Bootstrapper", "Drainer", "Provisioner", "drainers_for"]
