"""Hybrid burst: pending jobs go on the free GPUs of the pool's on-prem nodes first.

A part that fits there is not bought for (Slurm will start it on-prem), unless its job has
pended longer than ``on_prem.start_within``: then something other than GPUs keeps it off
(memory, a constraint, a reservation) and it is treated like any other. A burst-only pool
(``burst_after`` > 0) buys for a part that does not fit only once its job has waited that
long. Parts limited to some instance types or zones (cloud features) never go on-prem.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from autoscaler.engine.binpack import Bin, Part, first_fit, part_wait
from autoscaler.engine.context import PoolContext
from autoscaler.policy.duration import format_duration


@dataclass(slots=True)
class OnPremFill:
    label: str
    bins: list[Bin]
    start_within: timedelta
    burst_after: timedelta
    now: datetime
    free_gpus: float
    total_gpus: int
    fitted: int = 0
    waiting: int = 0
    longest_wait: timedelta = timedelta(0)

    @classmethod
    def of(cls, ctx: PoolContext, now: datetime) -> OnPremFill | None:
        spec = ctx.pool.cluster.on_prem
        if spec is None:
            return None
        nodes = ctx.obs.on_prem or []
        bins = [Bin.observed(n.gpus, n.allocated, n.gpus_free, most=n.gpus, gpu_model=n.gpu_model or "")
                for n in sorted(nodes, key=lambda n: n.name)]
        return cls(label=spec.label(), bins=bins, start_within=spec.start_within,
                   burst_after=spec.burst_after, now=now,
                   free_gpus=sum(sum(b.free) for b in bins), total_gpus=sum(n.gpus for n in nodes))

    def take(self, part: Part) -> bool:
        """True when the part needs no cloud node this tick: it fits on-prem, or it waits
        for on-prem to free up before the pool bursts."""
        job, gpus, model, zones, types, submitted = part
        waited = part_wait(submitted, self.now)
        if zones is None and types is None and (waited is None or waited < self.start_within):
            b = first_fit(self.bins, gpus, model)
            if b is not None:
                b.place(job, gpus)
                self.fitted += 1
                return True
        if waited is not None and waited < self.burst_after:
            self.waiting += 1
            self.longest_wait = max(self.longest_wait, waited)
            return True
        return False

    def fit_words(self, parts: int) -> str:
        """'2 of 3 pending job part(s) fit on-prem gpu[01-04] (5 of 16 GPUs free)'."""
        return (f"{self.fitted} of {parts} pending job part(s) fit on-prem {self.label} "
                f"({self.free_gpus:g} of {self.total_gpus} GPUs free)")

    def holds(self, parts: int, launched: bool) -> list[str]:
        out = []
        if self.fitted and not launched:
            out.append(f"{self.fit_words(parts)}: no cloud node needed")
        if self.waiting:
            out.append(f"{self.waiting} pending job part(s) wait for on-prem {self.label} "
                       f"before bursting (burst_after {format_duration(self.burst_after)}; "
                       f"the longest has waited {format_duration(self.longest_wait)})")
        return out
