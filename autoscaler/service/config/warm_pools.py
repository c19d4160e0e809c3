"""Warm pools run on AWS only so far: the Alibaba Cloud module has no stop/start of a node
(``alicloud_instance.status``) and nothing in the sandbox stands for it, so the service
refuses a warm pool there rather than launch cold nodes for a team that expects warm ones."""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.policy.errors import PolicyError
from autoscaler.policy.models import Cloud, Pool, TeamPolicy, pool_key

WHY = ("warm pools run on AWS only so far (the service cannot stop or start an Alibaba Cloud "
       "instance yet; `gpu-autoscaler simulate` models them): remove warm_pool to run this pool")


def _refused(pool: Pool) -> bool:
    return pool.warm_pool is not None and pool.cloud is not Cloud.AWS


def warm_pool_keys(policies: Mapping[str, TeamPolicy]) -> list[str]:
    """``team/pool`` of every pool with a warm pool the service cannot run, sorted."""
    return sorted(pool_key(team, pool.name) for team, policy in policies.items()
                  for pool in policy.pools if _refused(pool))


def refusal(policies: Mapping[str, TeamPolicy]) -> str | None:
    """Why the service does not start with these policies (None: it may)."""
    keys = warm_pool_keys(policies)
    return f"pool(s) {', '.join(keys)} have warm_pool: {WHY}" if keys else None


def warm_pool_errors(path: str, policy: TeamPolicy) -> list[PolicyError]:
    """A reload that adds such a warm pool is refused like a broken file: the team keeps its
    last good policy and the error shows in status and metrics."""
    return [PolicyError(path, 1, 1, f"pools[{i}].warm_pool",
                        f"pool {pool_key(policy.team, pool.name)}: {WHY}")
            for i, pool in enumerate(policy.pools) if _refused(pool)]
