"""Cross-field checks that a single field's type cannot express."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from autoscaler.catalog import Catalog
from autoscaler.catalog.mig import layout_problems
from autoscaler.catalog.regions import region_problem, zone_problem
from autoscaler.policy.cron import cron_problem
from autoscaler.policy.models import Cloud, Market, Pool, TeamPolicy

Problem = tuple[list[int | str], str]
# Node names are "<team>-<pool>-<suffix>" and must stay valid hostnames (63 characters).
MAX_TEAM_POOL_CHARS = 52


def check_policy(policy: TeamPolicy, catalog: Catalog) -> list[Problem]:
    problems: list[Problem] = []
    seen: dict[str, int] = {}
    for i, pool in enumerate(policy.pools):
        at: list[int | str] = ["pools", i]
        if pool.name in seen:
            problems.append(
                ([*at, "name"], f"pool name '{pool.name}' is already used by pools[{seen[pool.name]}]")
            )
        seen.setdefault(pool.name, i)
        if len(policy.team) + len(pool.name) > MAX_TEAM_POOL_CHARS:
            problems.append(
                ([*at, "name"],
                 f"team and pool names together are {len(policy.team) + len(pool.name)} characters; "
                 f"at most {MAX_TEAM_POOL_CHARS} so node names stay valid hostnames")
            )
        problems.extend((at + loc, msg) for loc, msg in _check_pool(pool, catalog))
        if pool.cloud in policy.forbid_clouds:
            problems.append(([*at, "cloud"], f"team {policy.team} forbids {pool.cloud.value} "
                             "(forbid_clouds): none of its work may run there"))
    problems.extend(_check_groups(policy))
    return problems


def _check_groups(policy: TeamPolicy) -> Iterator[Problem]:
    """A placement group's pools exist, are in one group each, and share a cluster: a
    Slurm job cannot be served by a Kubernetes node."""
    names = {p.name: p for p in policy.pools}
    member: dict[str, str] = {}
    for group, listed in policy.placement_groups.items():
        for j, name in enumerate(listed):
            if name not in names:
                yield (["placement_groups", group, j],
                       f"placement group '{group}' lists pool '{name}', which the team does not have")
            elif name in member:
                yield (["placement_groups", group, j],
                       f"pool '{name}' is already in placement group '{member[name]}'")
            member.setdefault(name, group)
    for i, pool in enumerate(policy.pools):
        own = pool.placement_group
        if own is None:
            continue
        if member.get(pool.name, own) != own:
            yield (["pools", i, "placement_group"],
                   f"pool '{pool.name}' is in placement group '{own}' here and in "
                   f"'{member[pool.name]}' under placement_groups")
        member.setdefault(pool.name, own)
    kinds: dict[str, tuple[str, str]] = {}
    for i, pool in enumerate(policy.pools):
        in_group = member.get(pool.name)
        if in_group is None:
            continue
        seen = kinds.setdefault(in_group, (pool.cluster.kind, pool.name))
        if seen[0] != pool.cluster.kind:
            yield (["pools", i, "cluster", "kind"],
                   f"placement group '{in_group}' mixes cluster kinds: '{seen[1]}' is {seen[0]}, "
                   f"'{pool.name}' is {pool.cluster.kind} (a job can only run on its own cluster)")


def _check_pool(pool: Pool, catalog: Catalog) -> Iterator[Problem]:
    if pool.min_nodes > pool.max_nodes:
        yield ["min_nodes"], f"min_nodes ({pool.min_nodes}) is above max_nodes ({pool.max_nodes})"
    if pool.capacity.on_demand_base > pool.max_nodes:
        yield (["capacity", "on_demand_base"],
               f"on_demand_base ({pool.capacity.on_demand_base}) is above max_nodes ({pool.max_nodes})")
    share = pool.capacity.max_spot_share_per_zone
    if share is not None and len(pool.zones) * share < 1:
        yield (["capacity", "max_spot_share_per_zone"],
               f"max_spot_share_per_zone {share:g} needs at least {math.ceil(1 / share - 1e-9)} zones "
               f"listed in the pool (it lists {len(pool.zones)}): otherwise spot could never fill it")
    scarce = pool.capacity.spot_scarcity
    if scarce is not None and Market.SPOT not in pool.capacity.markets():
        yield (["capacity", "spot_scarcity"],
               "the pool launches no spot (spot_percent 0), so no spot launch is ever refused")
    elif scarce is not None and pool.zones and scarce.zones > len(pool.zones):
        yield (["capacity", "spot_scarcity", "zones"],
               f"zones {scarce.zones} is more than the pool's {len(pool.zones)} zones: "
               "spot would never count as scarce")
    if pool.scale_down.gpu_utilization_below >= pool.scale_up.gpu_utilization_above:
        yield (["scale_down", "gpu_utilization_below"],
               f"idle threshold ({pool.scale_down.gpu_utilization_below:g}%) must be below the "
               f"scale-up threshold ({pool.scale_up.gpu_utilization_above:g}%)")
    for j, name in enumerate(pool.instance_types):
        if (pool.cloud.value, name) not in catalog:
            known = ", ".join(t.name for t in catalog.types(pool.cloud.value))
            yield (["instance_types", j],
                   f"'{name}' is not a {pool.cloud.value} instance type in the catalog (known: {known})")
    if len(set(pool.instance_types)) != len(pool.instance_types):
        yield ["instance_types"], "instance types are listed more than once"
    region = region_problem(pool.cloud.value, pool.region)
    if region:
        yield ["region"], region
    for j, zone in enumerate(pool.zones):
        problem = zone_problem(pool.cloud.value, pool.region, zone)
        if problem:
            yield ["zones", j], problem
    for name, value in (("window", pool.scale_up.window), ("idle_for", pool.scale_down.idle_for)):
        if value < timedelta(seconds=1):
            section = "scale_up" if name == "window" else "scale_down"
            yield [section, name], f"{name} must be at least 1s (a window of no time has no samples)"
    for j, entry in enumerate(pool.schedule):
        cron = cron_problem(entry.cron)
        if cron:
            yield ["schedule", j, "cron"], cron
        if entry.min_nodes > pool.max_nodes:
            yield (["schedule", j, "min_nodes"],
                   f"scheduled min_nodes ({entry.min_nodes}) is above max_nodes ({pool.max_nodes})")
        if entry.duration.total_seconds() <= 0:
            yield ["schedule", j, "duration"], "duration must be longer than 0s"
        try:
            ZoneInfo(entry.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            yield ["schedule", j, "timezone"], f"unknown time zone '{entry.timezone}'"
    if len(pool.schedule) > 50:
        yield ["schedule"], "at most 50 schedule entries"
    if pool.bootstrap.mig_profiles and pool.bootstrap.sharing != "mig":
        yield ["bootstrap", "mig_profiles"], "mig_profiles is only used with sharing: mig"
    if pool.bootstrap.sharing == "mig" and not pool.bootstrap.mig_profiles:
        yield ["bootstrap", "mig_profiles"], "sharing: mig needs at least one MIG profile, e.g. ['3g.20gb']"
    elif pool.bootstrap.sharing == "mig":
        yield from _check_mig(pool, catalog)
    if pool.bootstrap.image == "baked" and pool.cloud is not Cloud.AWS:
        yield (["bootstrap", "image"], f"image: baked is supported on aws only for now (the "
               f"{pool.cloud.value} pool module has no baked-image lookup); use image: base")
    yield from _check_warm_pool(pool)
    if pool.cluster.quota_from == "resourcequota" and pool.cluster.kind != "kubernetes":
        yield ["cluster", "quota_from"], "quota_from: resourcequota needs cluster.kind: kubernetes"
    c = pool.cluster
    for field, names in (("accounts", c.accounts), ("qos", c.qos), ("users", c.users)):
        if names and c.kind != "slurm":
            yield ["cluster", field], f"{field} names Slurm jobs: it needs cluster.kind: slurm"
    if c.on_prem is not None and c.kind != "slurm":
        yield ["cluster", "on_prem"], "on_prem names Slurm nodes: it needs cluster.kind: slurm"


def _check_mig(pool: Pool, catalog: Catalog) -> Iterator[Problem]:
    """Every type of a MIG pool must have MIG and make the layout (one GPU's instances)."""
    for j, name in enumerate(pool.instance_types):
        if (pool.cloud.value, name) not in catalog:
            continue  # reported above
        itype = catalog.get(pool.cloud.value, name)
        for why in layout_problems(itype.gpu_model, itype.gpu_memory_gib,
                                   list(pool.bootstrap.mig_profiles)):
            yield ["instance_types", j], f"sharing: mig on {name}: {why}"


def _check_warm_pool(pool: Pool) -> Iterator[Problem]:
    warm = pool.warm_pool
    if warm is None:
        return
    if warm.max > pool.max_nodes:
        yield (["warm_pool", "max"], f"warm_pool.max ({warm.max}) is above max_nodes "
               f"({pool.max_nodes}): a started warm node is one of the pool's nodes")
    if warm.size == "forecast" and pool.predictive.mode == "off":
        yield (["warm_pool", "size"], "size: forecast follows the pool's forecast: set "
               "predictive.mode to forecast-only (warm nodes only) or scale (also a floor)")
