"""Drainers: take a node out of its scheduler as re-runnable steps (Slurm, Kubernetes, none)."""

from autoscaler.actuators.drain.base import (
    Drainer,
    DrainError,
    DrainOutcome,
    DrainStep,
    NoSchedulerOps,
    PhasedDrainer,
    Readiness,
    SchedulerOps,
    Work,
    no_drainer,
)
from autoscaler.model.progress import DrainPhase, DrainProgress

__all__ = [
    "DrainError",
    "DrainOutcome",
    "DrainPhase",
    "DrainProgress",
    "DrainStep",
    "Drainer",
    "NoSchedulerOps",
    "PhasedDrainer",
    "Readiness",
    "SchedulerOps",
    "Work",
    "no_drainer",
]
