"""Terraform plan and apply cost per pool, against the patched moto sandbox.

Measured in one run (this machine is noisy; ratios are what count):
  * plan of a pool holding 10 vs 100 nodes (one node added, the default refresh=false):
    per-pool state keeps plan time nearly flat in the pool size (--with-refresh also
    times both with refresh on, where moto's per-instance reads add up);
  * `plan` preview over 10 pools of which 1 changed vs over that 1 pool alone: unchanged
    pools are skipped before Terraform runs;
  * apply of 5 vs 50 new nodes with -parallelism=50.

The 9 unchanged pools of the 10-pool case carry a recorded applied map equal to their
desired map (written directly, not applied: applying 9 more pools would add minutes and
their state is never read, since an unchanged pool is skipped before any Terraform run).

Last line: plan_s_10_nodes=<a> plan_s_100_nodes=<b> plan_s_10_pools_1_changed=<c> plan_s_1_pool=<d>

With ``--sizes 10,100,250,500`` it measures instead what launching and removing k nodes
(``--step``, default 10) costs against a pool already holding N nodes, one pool grown from
size to size through the executor's provisioner (its shards of ``--shard-size`` nodes): the
apply of N+k nodes, of N again, and an operator's ``plan`` preview of N+1. Last line:
``launch_s_<N>=.. remove_s_<N>=.. plan_s_<N>=..`` per size, then ``launch_ratio=<largest/smallest>``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from autoscaler.actuators.node_map import NodeMap, NodeSpec, PoolMaps
from autoscaler.actuators.terraform import PoolWorkspace, RegionInputs, TerraformSettings
from autoscaler.actuators.terraform.preview import preview_pool, preview_pools
from autoscaler.actuators.terraform.provisioner import TerraformProvisioner
from autoscaler.catalog import default_catalog
from autoscaler.engine.pricing import Prices
from autoscaler.model.pool import PoolRef
from autoscaler.model.snapshot import Snapshot
from autoscaler.policy.models import Market
from autoscaler.sandbox.services.moto_server import MOTO_AMI, SANDBOX_ENV, MotoSandbox


def node_map(pool: str, n: int, start: int = 1) -> NodeMap:
    types = ("g4dn.xlarge", "p3.2xlarge")
    return {f"{pool}-{i}": NodeSpec(instance_type=types[i % 2],
                                    market=Market.SPOT if i % 3 else Market.ON_DEMAND)
            for i in range(start, start + n)}


def timed_apply(ws: PoolWorkspace, nodes: NodeMap) -> float:
    plan = ws.plan(nodes)
    started = time.monotonic()
    result = ws.apply(plan)
    if not result.ok:
        raise SystemExit(f"apply failed for {ws.key}: {result.failed or result.errors}")
    return time.monotonic() - started


def timed_plan(ws: PoolWorkspace, nodes: NodeMap) -> float:
    started = time.monotonic()
    plan = ws.plan(nodes)
    elapsed = time.monotonic() - started
    if plan.count("create") != 1 or len(plan.changes) != 1:
        raise SystemExit(f"unexpected plan for {ws.key}: {plan.changes}")
    ws.discard_plan()
    return elapsed


def ten_pools(settings: TerraformSettings, changed: PoolMaps) -> dict[str, PoolMaps]:
    maps = {changed.ref.key: changed}
    for i in range(9):
        ref = PoolRef("bench", f"steady{i}", "aws", "us-east-1")
        nodes = node_map(f"steady{i}", 4)
        ws_dir = Path(settings.workdir) / ref.team / ref.pool
        ws_dir.mkdir(parents=True, exist_ok=True)
        (ws_dir / "applied-nodes.json").write_text(json.dumps(
            {k: v.model_dump(mode="json") for k, v in nodes.items()}))
        maps[ref.key] = PoolMaps(ref, dict(nodes), dict(nodes))
    return maps


def timed_preview(maps: dict[str, PoolMaps], settings: TerraformSettings, prices: Prices) -> float:
    started = time.monotonic()
    previews = preview_pools(maps, settings, prices)
    elapsed = time.monotonic() - started
    planned = [p for p in previews if p.status == "planned"]
    if len(planned) != 1 or any(p.status == "error" for p in previews):
        raise SystemExit(f"unexpected previews: {[(p.pool, p.status, p.error) for p in previews]}")
    PoolWorkspace(settings, "bench", "p10", "aws", "us-east-1").discard_plan()
    return elapsed


def run(workdir: Path, with_refresh: bool) -> None:
    os.environ.update(SANDBOX_ENV)
    with MotoSandbox(workdir / "moto") as moto:
        settings = TerraformSettings(workdir=workdir / "tf", aws_endpoint=moto.endpoint,
                                     regions={"aws/us-east-1": RegionInputs(ami=MOTO_AMI)})
        p10 = PoolWorkspace(settings, "bench", "p10", "aws", "us-east-1")
        p100 = PoolWorkspace(settings, "bench", "p100", "aws", "us-east-1")
        apply_5 = timed_apply(p10, node_map("p10", 5))
        print(f"apply_s_5_nodes={apply_5:.1f}", flush=True)
        apply_50 = timed_apply(p100, node_map("p100", 50))
        print(f"apply_s_50_nodes={apply_50:.1f} ratio={apply_50 / apply_5:.2f} "
              f"(target < 2, parallelism {settings.parallelism})", flush=True)
        timed_apply(p10, node_map("p10", 10))
        timed_apply(p100, node_map("p100", 100))
        grown10, grown100 = node_map("p10", 11), node_map("p100", 101)
        a = timed_plan(p10, grown10)
        b = timed_plan(p100, grown100)
        print(f"plan of 10 vs 100 nodes: {a:.1f}s vs {b:.1f}s ratio={b / a:.2f} (target <= 1.5, "
              f"refresh={settings.refresh})", flush=True)
        if with_refresh:
            on = settings.model_copy(update={"refresh": True})
            ra = timed_plan(PoolWorkspace(on, "bench", "p10", "aws", "us-east-1"), grown10)
            rb = timed_plan(PoolWorkspace(on, "bench", "p100", "aws", "us-east-1"), grown100)
            print(f"with refresh: {ra:.1f}s vs {rb:.1f}s ratio={rb / ra:.2f}", flush=True)
        now = datetime.now(UTC)
        prices = Prices(default_catalog(), Snapshot(taken_at=now), now)
        ref = PoolRef("bench", "p10", "aws", "us-east-1")
        changed = PoolMaps(ref, node_map("p10", 10), grown10)
        d = timed_preview({ref.key: changed}, settings, prices)
        c = timed_preview(ten_pools(settings, changed), settings, prices)
        print(f"preview of 10 pools (1 changed) vs 1 pool: {c:.1f}s vs {d:.1f}s "
              f"ratio={c / d:.2f} (target <= 1.3)", flush=True)
        for ws in (p10, p100):
            ws.destroy_all()
    print(f"plan_s_10_nodes={a:.2f} plan_s_100_nodes={b:.2f} "
          f"plan_s_10_pools_1_changed={c:.2f} plan_s_1_pool={d:.2f}")


def timed_converge(prov: TerraformProvisioner, ref: PoolRef, nodes: NodeMap) -> float:
    started = time.monotonic()
    result = prov.apply(ref, nodes)
    if not result.ok or not set(nodes) <= set(prov.instances(ref)):
        raise SystemExit(f"apply of {len(nodes)} failed for {ref.key}: "
                         f"{result.failed or result.errors}")
    return time.monotonic() - started


def timed_shard_plan(settings: TerraformSettings, ref: PoolRef, before: NodeMap,
                     after: NodeMap, prices: Prices) -> float:
    started = time.monotonic()
    preview = preview_pool(PoolMaps(ref, before, after), settings, prices)
    elapsed = time.monotonic() - started
    if preview.status != "planned" or [c.action for c in preview.changes] != ["create"]:
        raise SystemExit(f"unexpected preview of {ref.key}: {preview.status} {preview.error} "
                         f"{preview.changes}")
    for plan_file in preview.plan_files:  # leave no pending plan behind
        Path(plan_file).unlink(missing_ok=True)
        (Path(plan_file).parent / "pending.json").unlink(missing_ok=True)
    return elapsed


def scale_run(workdir: Path, sizes: list[int], step: int, shard_size: int) -> None:
    """Launch and remove ``step`` nodes against a pool grown to each size in turn, through
    the executor's provisioner (so through the pool's shards)."""
    os.environ.update(SANDBOX_ENV)
    rows: list[tuple[int, float, float, float]] = []
    with MotoSandbox(workdir / "moto") as moto:
        settings = TerraformSettings(workdir=workdir / "tf", aws_endpoint=moto.endpoint,
                                     shard_size=shard_size,
                                     regions={"aws/us-east-1": RegionInputs(ami=MOTO_AMI)})
        prov = TerraformProvisioner(settings)
        ref = PoolRef("bench", "big", "aws", "us-east-1")
        now = datetime.now(UTC)
        prices = Prices(default_catalog(), Snapshot(taken_at=now), now)
        for size in sizes:
            grown = time.monotonic()
            timed_converge(prov, ref, node_map("bench-big", size))
            print(f"pool grown to {size} nodes in {time.monotonic() - grown:.0f}s "
                  f"({len(prov.shards(ref))} shard(s) of at most {shard_size})", flush=True)
            launch = timed_converge(prov, ref, node_map("bench-big", size + step))
            remove = timed_converge(prov, ref, node_map("bench-big", size))
            plan = timed_shard_plan(settings, ref, node_map("bench-big", size),
                                    node_map("bench-big", size + 1), prices)
            rows.append((size, launch, remove, plan))
            print(f"N={size}: launch {step} {launch:.1f}s, remove {step} {remove:.1f}s, "
                  f"plan +1 {plan:.1f}s", flush=True)
        prov.apply(ref, {})
    first, last = rows[0], rows[-1]
    print(f"launch of {step} at {last[0]} vs {first[0]} nodes: ratio {last[1] / first[1]:.2f}; "
          f"remove {last[2] / first[2]:.2f}; plan {last[3] / first[3]:.2f} (shard_size {shard_size})")
    print(" ".join(f"launch_s_{n}={a:.1f} remove_s_{n}={r:.1f} plan_s_{n}={p:.1f}"
                   for n, a, r, p in rows) + f" launch_ratio={last[1] / first[1]:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, default=None,
                        help="Keep workspaces here (default: a temporary directory).")
    parser.add_argument("--with-refresh", action="store_true",
                        help="Also time the two plans with refresh on (information only).")
    parser.add_argument("--sizes", default=None,
                        help="Comma-separated pool sizes, e.g. 10,100,250,500: time launching and "
                             "removing --step nodes against each instead.")
    parser.add_argument("--step", type=int, default=10, help="Nodes launched and removed (--sizes).")
    parser.add_argument("--shard-size", type=int, default=TerraformSettings().shard_size,
                        help="Nodes per Terraform shard (--sizes); a size above the largest "
                             "pool (at most 10000) measures one state per pool, as before shards.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-terraform-") as tmp:
        workdir = args.workdir or Path(tmp)
        if args.sizes:
            scale_run(workdir, [int(x) for x in args.sizes.split(",")], args.step, args.shard_size)
        else:
            run(workdir, args.with_refresh)


if __name__ == "__main__":
    main()
