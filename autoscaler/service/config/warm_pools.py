"""Warm pools are modelled by the simulator only: the service has no executor for them
(no Terraform stop/start, no stopped-instance bookkeeping), so it refuses to run one rather
than launch cold nodes for a pool whose team expects warm ones."""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.policy.errors import PolicyError
from autoscaler.policy.models import TeamPolicy, pool_key

WHY = ("warm pools are modelled by `gpu-autoscaler simulate` only so far; the service cannot "
       "stop or start instances yet: remove warm_pool to run this pool")


def warm_pool_keys(policies: Mapping[str, TeamPolicy]) -> list[str]:
    """``team/pool`` of every pool with a warm pool, sorted."""
    return sorted(pool_key(team, pool.name) for team, policy in policies.items()
                  for pool in policy.pools if pool.warm_pool is not None)


def refusal(policies: Mapping[str, TeamPolicy]) -> str | None:
    """Why the service does not start with these policies (None: it may)."""
    keys = warm_pool_keys(policies)
    return f"pool(s) {', '.join(keys)} have warm_pool: {WHY}" if keys else None


def warm_pool_errors(path: str, policy: TeamPolicy) -> list[PolicyError]:
    """A reload that adds a warm pool is refused like a broken file: the team keeps its
    last good policy and the error shows in status and metrics."""
    return [PolicyError(path, 1, 1, f"pools[{i}].warm_pool",
                        f"pool {pool_key(policy.team, pool.name)}: {WHY}")
            for i, pool in enumerate(policy.pools) if pool.warm_pool is not None]
