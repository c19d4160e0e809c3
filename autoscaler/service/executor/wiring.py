"""Real drainers from the signals configuration (the same Slurm and Kubernetes access)."""

from __future__ import annotations

from typing import Literal

from autoscaler.actuators.drain import Drainer, no_drainer
from autoscaler.actuators.drain.kubernetes import kubernetes_drainer
from autoscaler.actuators.drain.slurm import slurm_drainer
from autoscaler.signals.config import SignalsConfig


def drainers_for(signals: SignalsConfig, *,
                 checkpoint_scope: Literal["batch", "full"] = "batch") -> dict[str, Drainer]:
    """One drainer per cluster kind the configuration can reach ("none" always)."""
    out: dict[str, Drainer] = {"none": no_drainer(),
                               "slurm": slurm_drainer(signals.slurm, scope=checkpoint_scope)}
    if signals.kubernetes is not None:
        out["kubernetes"] = kubernetes_drainer(config=signals.kubernetes)
    return out
