"""Team quotas and global caps, spent in priority order (high, medium, low)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.engine.context import PoolContext
from autoscaler.engine.settings import EngineSettings
from autoscaler.model.snapshot import ClusterQuota
from autoscaler.policy.models import TeamPolicy


@dataclass
class Allowance:
    """What a holder may still add. ``None`` limits mean unlimited."""

    label: str
    max_gpus: int | None
    max_usd: float | None
    gpus: int = 0
    usd: float = 0.0

    def fits(self, gpus: int, usd: float) -> bool:
        if self.max_gpus is not None and self.gpus + gpus > self.max_gpus:
            return False
        return self.max_usd is None or self.usd + usd <= self.max_usd + 1e-9

    def spend(self, gpus: int, usd: float) -> None:
        self.gpus += gpus
        self.usd += usd

    def why_full(self, gpus: int, usd: float) -> str:
        if self.max_gpus is not None and self.gpus + gpus > self.max_gpus:
            return f"{self.label} GPU cap {self.max_gpus} (holds {self.gpus}, +{gpus} would exceed)"
        return (f"{self.label} $/h cap {self.max_usd:g} (spends ${self.usd:.2f}/h, "
                f"+${usd:.2f}/h would exceed)")

    def over(self) -> tuple[int, float]:
        """How far above its limits the holder already is."""
        gpus = self.gpus - self.max_gpus if self.max_gpus is not None else 0
        usd = self.usd - self.max_usd if self.max_usd is not None else 0.0
        return max(0, gpus), max(0.0, usd)


def team_gpu_cap(team: str, policy: TeamPolicy,
                 cluster: Mapping[str, ClusterQuota]) -> tuple[str, int | None]:
    """The smaller of the policy's max_gpus and the cluster's quota, and a label that
    says which one applies."""
    mine, theirs = policy.quota.max_gpus, cluster.get(team)
    if theirs is None:
        return f"team {team}", mine
    if mine is not None and mine <= theirs.max_gpus:
        return f"team {team} (policy max_gpus {mine} <= {theirs.source} {theirs.max_gpus})", mine
    return f"team {team} ({theirs.source})", theirs.max_gpus


class Ledger:
    def __init__(self, policies: dict[str, TeamPolicy], settings: EngineSettings,
                 cluster_quotas: Mapping[str, ClusterQuota] | None = None):
        caps = {t: team_gpu_cap(t, p, cluster_quotas or {}) for t, p in policies.items()}
        self.teams = {
            t: Allowance(caps[t][0], caps[t][1], p.quota.max_hourly_usd)
            for t, p in policies.items()
        }
        self.fleet = Allowance("global", settings.max_gpus, settings.max_hourly_usd)
        # What stays after this tick's drains: a lowered quota is measured against this,
        # so an un-drain must fit here too or the quota rule would drain it right back.
        self.staying = {
            t: Allowance(caps[t][0], caps[t][1], p.quota.max_hourly_usd)
            for t, p in policies.items()
        }

    def count_existing(self, contexts: list[PoolContext]) -> None:
        """Everything the cloud may bill counts, draining nodes included."""
        for ctx in contexts:
            self.teams[ctx.team].spend(ctx.billable_gpus, ctx.billable_usd)
            self.fleet.spend(ctx.billable_gpus, ctx.billable_usd)
            self.staying[ctx.team].spend(ctx.active_gpus, ctx.active_usd)

    def count_orphans(self, gpus: int, usd: float) -> None:
        self.fleet.spend(gpus, usd)

    def admit(self, team: str, gpus: int, usd: float) -> str | None:
        """Spend for one node, or say which limit refuses it."""
        for allowance in (self.teams[team], self.fleet):
            if not allowance.fits(gpus, usd):
                return allowance.why_full(gpus, usd)
        self.teams[team].spend(gpus, usd)
        self.fleet.spend(gpus, usd)
        self.staying[team].spend(gpus, usd)
        return None

    def admit_undrain(self, team: str, gpus: int, usd: float) -> str | None:
        """A draining node is already billed; it must fit the team's staying capacity."""
        staying = self.staying[team]
        if not staying.fits(gpus, usd):
            return staying.why_full(gpus, usd)
        staying.spend(gpus, usd)
        return None

    def fleet_blocks(self, team: str, gpus: int, usd: float) -> bool:
        """True when only the global cap (not the team's own quota) refuses the node."""
        return self.teams[team].fits(gpus, usd) and not self.fleet.fits(gpus, usd)


def nodes_to_cover(over_gpus: int, over_usd: float, gpus: int, usd: float) -> int:
    need = 0
    if over_gpus > 0 and gpus > 0:
        need = math.ceil(over_gpus / gpus)
    if over_usd > 1e-9 and usd > 0:
        need = max(need, math.ceil(over_usd / usd - 1e-9))
    return need
