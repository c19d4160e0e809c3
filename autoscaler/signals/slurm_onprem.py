"""The static on-prem Slurm nodes a pool fills before it launches (``cluster.on_prem``).

A pool names them by a partition that holds only them, or by a hostlist. Only nodes that
take jobs now count (idle, mixed or allocated, responding, not drained or down): a drained
on-prem GPU is no room. Their GPUs and allocation come from ``sinfo`` like a cloud node's,
and a node whose numbers are not possible (more than 64 GPUs, more allocated than it
has, a name Slurm would not give) is left out rather than believed.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError

from autoscaler.model.snapshot import OnPremNode, SchedulerNode
from autoscaler.schedulers.slurm.parse import NODE_NAME, expand_hostlist, gpu_model, gpu_type
from autoscaler.signals.readings import ClusterPool

if TYPE_CHECKING:
    from autoscaler.signals.slurm import SlurmNode

log = logging.getLogger(__name__)
_TAKES_JOBS = ("idle", "mixed", "allocated")


def on_prem_capacity(refs: Sequence[ClusterPool], nodes: Sequence[SlurmNode],
                     sched: dict[str, SchedulerNode]) -> dict[str, list[OnPremNode]]:
    """Per pool key with ``cluster.on_prem``: its on-prem nodes that take jobs now."""
    out: dict[str, list[OnPremNode]] = {}
    for ref in refs:
        spec = ref.pool.cluster.on_prem
        if spec is None:
            continue
        named = set(expand_hostlist(spec.nodes)) if spec.nodes is not None else None
        found = []
        for node in nodes:
            member = (node.name in named if named is not None
                      else spec.partition in node.partitions)
            seen = sched.get(node.name)
            if (not member or seen is None or not _takes_jobs(seen) or not NODE_NAME.match(node.name)
                    or not math.isfinite(seen.gpus_total)):
                continue
            try:
                found.append(OnPremNode(
                    name=node.name, gpus=math.floor(seen.gpus_total + 1e-9),
                    allocated=seen.gpus_allocated, gpu_model=gpu_model(gpu_type(node.gres))))
            except ValidationError as exc:
                log.warning("on-prem node %s of %s left out: %s", node.name, ref.key,
                            exc.errors()[0]["msg"])
        out[ref.key] = found
    return out


def _takes_jobs(node: SchedulerNode) -> bool:
    return (node.state in _TAKES_JOBS and node.ready and not node.cordoned
            and node.unusable is None)
