"""Warm pools the service can run: on AWS, with on-demand warm nodes. It refuses the rest
rather than launch cold nodes for a team that expects warm ones:

* Alibaba Cloud: the module has no stop/start of a node (``alicloud_instance.status``) and
  nothing in the sandbox stands for it;
* a pool that launches no on-demand node (its warm nodes would be spot): EC2 stops a spot
  instance only as a persistent request, and a Terraform destroy of such an instance
  leaves the request behind to launch an instance nobody manages
  (hashicorp/terraform-provider-aws#38142). EC2 Auto Scaling warm pools take no spot
  instances either. ``gpu-autoscaler simulate`` models both."""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler.policy.errors import PolicyError
from autoscaler.policy.models import Cloud, Market, Pool, TeamPolicy, pool_key

WHY = ("warm pools run on AWS only so far (the service cannot stop or start an Alibaba Cloud "
       "instance yet; `gpu-autoscaler simulate` models them): remove warm_pool to run this pool")
WHY_SPOT = ("its warm nodes would be spot, and EC2 stops a spot instance only as a persistent "
            "request, which a Terraform destroy leaves behind to launch unmanaged instances: "
            "let the pool launch on-demand (capacity.on_demand_base >= 1, spot_percent < 100 "
            "or spot_fallback: on-demand), or remove warm_pool")


def _why(pool: Pool) -> str | None:
    if pool.warm_pool is None:
        return None
    if pool.cloud is not Cloud.AWS:
        return WHY
    if Market.ON_DEMAND not in pool.capacity.markets():
        return WHY_SPOT
    return None


def _refused(pool: Pool) -> bool:
    return _why(pool) is not None


def warm_pool_keys(policies: Mapping[str, TeamPolicy]) -> list[str]:
    """``team/pool`` of every pool with a warm pool the service cannot run, sorted."""
    return sorted(pool_key(team, pool.name) for team, policy in policies.items()
                  for pool in policy.pools if _refused(pool))


def refusal(policies: Mapping[str, TeamPolicy]) -> str | None:
    """Why the service does not start with these policies (None: it may)."""
    refused = sorted((pool_key(team, pool.name), why) for team, policy in policies.items()
                     for pool in policy.pools if (why := _why(pool)) is not None)
    return "; ".join(f"pool {key} has warm_pool: {why}" for key, why in refused) or None


def warm_pool_errors(path: str, policy: TeamPolicy) -> list[PolicyError]:
    """A reload that adds such a warm pool is refused like a broken file: the team keeps its
    last good policy and the error shows in status and metrics."""
    return [PolicyError(path, 1, 1, f"pools[{i}].warm_pool",
                        f"pool {pool_key(policy.team, pool.name)}: {_why(pool)}")
            for i, pool in enumerate(policy.pools) if _refused(pool)]
