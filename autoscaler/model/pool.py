"""Which pool, on which cloud and region: the key every per-pool workspace and map uses."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.policy.models import pool_key


@dataclass(frozen=True)
class PoolRef:
    team: str
    pool: str
    cloud: str
    region: str

    @property
    def key(self) -> str:
        return pool_key(self.team, self.pool)
