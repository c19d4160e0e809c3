"""Before the executor acts: what each pool's node map becomes, and the $/h delta.

Every tick whose plan changes a pool logs a preview line per pool. By default it is the
node-map diff Terraform will plan (``for_each`` over the map: a new key creates exactly
that node, a removed key destroys exactly that one), priced with the tick's snapshot.
With ``tick.preview: terraform`` each changed pool also gets a real ``terraform plan``
(the same preview as ``gpu-autoscaler plan --settings``; meant for ``--dry-run``, as the
executor plans again before it applies).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from autoscaler.actuators.node_map import PoolMaps, PreviewError, preview_maps
from autoscaler.actuators.terraform.preview import baked_workspace, map_cost, preview_pools
from autoscaler.actuators.terraform.rootmodule import BakedImage
from autoscaler.actuators.terraform.settings import TerraformSettings
from autoscaler.catalog import Catalog
from autoscaler.model.node import FleetView
from autoscaler.model.plan import Plan
from autoscaler.model.prices import PriceBook
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import TeamPolicy, pool_key

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolDelta:
    pool: str
    create: list[str]
    destroy: list[str]
    hourly_before: float
    hourly_after: float
    terraform: str = "node map"  # or the terraform plan's outcome
    power: list[str] = field(default_factory=list)  # warm-pool nodes started or stopped

    @property
    def delta(self) -> float:
        return round(self.hourly_after - self.hourly_before, 4)

    def line(self) -> str:
        parts = []
        if self.create:
            parts.append(f"create {len(self.create)} ({', '.join(self.create)})")
        if self.destroy:
            parts.append(f"destroy {len(self.destroy)} ({', '.join(self.destroy)})")
        if self.power:
            parts.append(f"warm pool: {', '.join(self.power)}")
        return (f"preview {self.pool}: {'; '.join(parts) or 'no instance change'}; $/h "
                f"{self.hourly_before:.3f} -> {self.hourly_after:.3f} ({self.delta:+.3f}) "
                f"[{self.terraform}]")


def _describe(pm: PoolMaps, names: list[str], after: bool) -> list[str]:
    side = pm.after if after else pm.before
    return [f"{n}: {side[n].describe()}" for n in names]


def _named(pm: PoolMaps, next_seq: int | None) -> None:
    """Placeholders ``<team>-<pool>-new<k>`` -> the names the store will give them."""
    if next_seq is None:
        return
    prefix = f"{pm.ref.team}-{pm.ref.pool}-new"
    fresh = sorted((n for n in pm.after if n.startswith(prefix) and n not in pm.before),
                   key=lambda n: int(n.removeprefix(prefix)))
    for i, name in enumerate(fresh):
        pm.after[f"{pm.ref.team}-{pm.ref.pool}-{next_seq + i}"] = pm.after.pop(name)


def preview(plan: Plan, fleet: FleetView, policies: Mapping[str, TeamPolicy], catalog: Catalog,
            snapshot: Snapshot, now: datetime, terraform: TerraformSettings | None = None,
            next_seq: Mapping[str, int] | None = None,
            images: Mapping[str, BakedImage] | None = None) -> list[PoolDelta]:
    """One PoolDelta per pool whose node map the plan changes. ``next_seq`` (pool key ->
    the store's next node number) names new nodes as they will be named; ``images`` (pool
    key -> BakedImage, ``bootstrap_hash.baked_images``) gives baked pools' terraform plans
    their image."""
    pools = {pool_key(t.team, p.name): p for t in policies.values() for p in t.pools}
    try:
        maps = preview_maps(fleet.nodes, plan, catalog, pools)
    except PreviewError as exc:
        log.warning("no preview: %s", exc)
        return []
    changed = {k: pm for k, pm in maps.items() if pm.after != pm.before}
    if not changed:
        return []
    for key, pm in changed.items():
        _named(pm, (next_seq or {}).get(key, 1))
    prices = PriceBook(catalog, snapshot)
    outcome: dict[str, str] = {}
    if terraform is not None:
        for pv in preview_pools(changed, terraform, prices, baked_workspace(images or {})):
            outcome[pv.pool] = (f"terraform plan: {len(pv.changes)} change(s)" if pv.status ==
                                "planned" else f"terraform {pv.status}: {pv.error or ''}".strip())
            if pv.image:
                outcome[pv.pool] += f"; {pv.image}"
    out = []
    for key, pm in sorted(changed.items()):
        created = sorted(set(pm.after) - set(pm.before))
        destroyed = sorted(set(pm.before) - set(pm.after))
        powered = [f"{'start' if pm.after[n].power == 'running' else 'stop'} {n}"
                   for n in sorted(set(pm.before) & set(pm.after))
                   if pm.before[n].power != pm.after[n].power]
        out.append(PoolDelta(
            pool=key, create=_describe(pm, created, True), destroy=_describe(pm, destroyed, False),
            power=powered,
            hourly_before=map_cost(pm.ref, pm.before, prices)[0],
            hourly_after=map_cost(pm.ref, pm.after, prices)[0],
            terraform=outcome.get(key, "node map")))
    return out
