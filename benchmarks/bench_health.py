"""Broken READY nodes, replayed through decide() tick by tick: how long from the failure to
the Replace, and whether a fleet-wide outage replaces anything.

A pool of 12 READY p3.2xlarge nodes busy at 60%, ticks every 30 s of simulated time (no
wall clock: the engine reads none). At t0 one node breaks in one of these ways, observed as
the signal reader would hand it over:

* ``silent``: its DCGM samples stop (the newest sample ages; stale after 2m, then
  ``metrics_silent``) while the other 11 report;
* ``unusable``: Slurm says DOWN since t0 (its reason time);
* ``xid``, ``ecc``: an XID error / an uncorrectable ECC error in the window;
* ``health_check``: the periodic health check failed;
* ``gpus_missing``: a p3.8xlarge node whose scheduler and DCGM both see 3 of its 4 GPUs
  (READY for an hour: its grace counts from READY).

Then two outages, every node at once: all silent (the exporters' fault, not the nodes':
with no node reporting there is nothing to compare with, and scale-down freezes), and all
DOWN in Slurm (its controller's fault): nothing may be replaced, and the fleet-wide
unhealthy budget must hold.

Prints one line per scenario and a last line
``detect_to_replace_s_p50=<a> false_replacements=<f> silent_node_billed_s=<b>
unready_budget_held=<y/n>`` (targets: each scenario within its grace + 2 ticks, f == 0,
b <= silent_grace + 2 ticks), then the sandbox half (health_sandbox.py: real Prometheus
and Slurm, unless --no-sandbox) and its keys on the same line. The same failures are
asserted on real parts (Slurm, Prometheus, booted hosts, Ansible) in tests/.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from autoscaler.catalog import default_catalog
from autoscaler.engine import decide
from autoscaler.model.plan import Hold, Replace
from autoscaler.model.snapshot import GpuMetrics, NodeObservation, SchedulerNode, Snapshot
from autoscaler.policy.models import Pool, TeamPolicy

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.builders import NOW, fleet, make_node, make_policy

TICK = timedelta(seconds=30)
STALE = timedelta(minutes=2)  # the Prometheus reader's default stale_s
NODES = 12
Observe = Callable[[str, timedelta], NodeObservation]  # node, time since t0 -> observation


def healthy(gpus: int = 1) -> NodeObservation:
    return NodeObservation(
        metrics=GpuMetrics(util_mean=60, util_max=70, util_max_idle_window=70, gpus_reporting=gpus,
                           sample_age_s=5),
        scheduler=SchedulerNode(state="allocated", gpus_total=gpus, gpus_allocated=gpus))


def silent(since: timedelta) -> NodeObservation:
    age = since.total_seconds() + 5
    metrics = GpuMetrics(util_mean=60, util_max=70, util_max_idle_window=70, gpus_reporting=1,
                         sample_age_s=age)
    stale = since > STALE
    return NodeObservation(metrics=metrics, metrics_silent=stale,
                           metrics_missing=f"no sample for {age:.0f}s" if stale else None,
                           scheduler=SchedulerNode(state="allocated", gpus_total=1, gpus_allocated=1))


def with_metrics(**fields: object) -> NodeObservation:
    base = healthy()
    assert base.metrics is not None
    return dataclasses.replace(base, metrics=dataclasses.replace(base.metrics, **fields))


def scenarios(t0: datetime) -> dict[str, tuple[Observe, str]]:
    """name -> (how the broken node looks, the instance type)."""
    down = SchedulerNode(state="down", gpus_total=1, ready=False, unusable="DOWN by slurm: Not responding",
                         unusable_since=t0)
    three_of_four = NodeObservation(
        metrics=GpuMetrics(util_mean=60, util_max=70, util_max_idle_window=70, gpus_reporting=3,
                           sample_age_s=5),
        scheduler=SchedulerNode(state="allocated", gpus_total=3, gpus_allocated=3))
    return {
        "silent": (lambda _n, since: silent(since), "p3.2xlarge"),
        "unusable": (lambda _n, since: NodeObservation(metrics=healthy().metrics, scheduler=down),
                     "p3.2xlarge"),
        "xid": (lambda _n, since: with_metrics(xid_errors=1), "p3.2xlarge"),
        "ecc": (lambda _n, since: with_metrics(ecc_dbe_errors=1), "p3.2xlarge"),
        "health_check": (lambda _n, since: dataclasses.replace(
            healthy(), health_check_failed="GPU health check failed: GPU 0 above 87 C"), "p3.2xlarge"),
        # READY since t0 - 1h: the grace counts from READY, so the first tick already exceeds it
        "gpus_missing": (lambda _n, since: three_of_four, "p3.8xlarge"),
    }


def policies(instance_type: str) -> dict[str, TeamPolicy]:
    return {"vision": make_policy(instance_types=[instance_type], min_nodes=NODES, max_nodes=NODES + 4,
                                  cluster={"kind": "slurm", "partition": "gpu"})}


def run(broken: set[str], observe: Observe, instance_type: str, max_ticks: int) -> tuple[
        float | None, int, list[str]]:
    """Ticks from t0 until a Replace of a broken node: (seconds, replacements of nodes that
    were not broken, the holds' reasons)."""
    pols = policies(instance_type)
    gpus = default_catalog().get("aws", instance_type).gpus
    nodes = [make_node(f"vision-gpu-{i}", instance_type=instance_type) for i in range(NODES)]
    view = fleet(*nodes)
    false, holds = 0, []
    for tick in range(1, max_ticks + 1):
        since = TICK * tick
        now = NOW + since
        obs = {n.name: observe(n.name, since) if n.name in broken else healthy(gpus) for n in nodes}
        plan = decide(pols, view, Snapshot(taken_at=now, nodes=obs), now, catalog=default_catalog())
        replaced = [a.node for a in plan.actions if isinstance(a, Replace)]
        holds += [a.reason for a in plan.actions if isinstance(a, Hold) and "look broken" in a.reason]
        false += len([n for n in replaced if n not in broken])
        if set(replaced) & broken:
            return since.total_seconds(), false, holds
    return None, false, holds


def pool_grace(pool: Pool, name: str) -> int:
    return {"silent": int(pool.health.silent_grace.total_seconds()),
            "unusable": int(pool.health.unready_grace.total_seconds())}.get(name, 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-ticks", type=int, default=60)
    parser.add_argument("--no-sandbox", action="store_true",
                        help="the engine replay only (the sandbox half needs Prometheus and Slurm)")
    args = parser.parse_args()
    t0 = NOW
    detect: list[float] = []
    false_total = 0
    silent_billed = float("nan")
    for name, (observe, itype) in scenarios(t0).items():
        pool = policies(itype)["vision"].pools[0]
        grace = pool_grace(pool, name)
        seconds, false, _ = run({"vision-gpu-3"}, observe, itype, args.max_ticks)
        false_total += false
        bound = grace + 2 * TICK.total_seconds()
        within = seconds is not None and seconds <= bound
        if seconds is not None:
            detect.append(seconds)
        if name == "silent" and seconds is not None:
            silent_billed = seconds
        print(f"{name:13s} replaced after {seconds if seconds is not None else 'never'} s "
              f"(grace {grace} s + 2 ticks = {bound:.0f} s: {'ok' if within else 'MISSED'}), "
              f"false replacements {false}")
    everyone = {f"vision-gpu-{i}" for i in range(NODES)}
    unusable = scenarios(t0)["unusable"][0]
    held = True
    for name, observe in (("silent", lambda _n, since: silent(since)), ("unusable", unusable)):
        seconds, false, holds = run(everyone, observe, "p3.2xlarge", args.max_ticks)
        false_total += false + (1 if seconds is not None else 0)
        if name == "unusable":  # broken by the scheduler's word: the fleet-wide budget holds
            held = bool(holds) and seconds is None
        print(f"outage ({name:8s}) every node at once: replaced "
              f"{'nothing' if seconds is None else 'some'} in {args.max_ticks} ticks, "
              f"{len(holds)} budget holds" + (f": '{holds[-1][:110]}...'" if holds else
                                             " (no fleet reports: scale-down freezes instead)"))
    p50 = statistics.median(detect) if detect else float("nan")
    sandbox = "" if args.no_sandbox else run_sandbox()
    print(f"detect_to_replace_s_p50={p50:.0f} false_replacements={false_total} "
          f"silent_node_billed_s={silent_billed:.0f} unready_budget_held={'y' if held else 'n'}"
          + sandbox)


def run_sandbox() -> str:
    """The sandbox half (health_sandbox.py): printed lines, and the last line's keys."""
    from benchmarks.health_sandbox import TICK as WALL_TICK
    from benchmarks.health_sandbox import run_all

    print(f"sandbox: real Prometheus and Slurm, decide() every {WALL_TICK:.0f} s, graces 10 s")
    outcomes = run_all()
    for o in outcomes:
        added = o.after_seen
        within = added is not None and added <= 10 + 2 * WALL_TICK
        replaced = "nothing" if o.seconds is None else f"after {o.seconds:.1f} s"
        print(f"  {o.name:18s} observer said so after "
              f"{'never' if o.seen is None else f'{o.seen:.1f} s'}, replaced {replaced}"
              + (f" ({added:.1f} s after it: {'ok' if within else 'MISSED'} within grace + 2 "
                 "ticks)" if added is not None else "")
              + f", false replacements {o.false}, holds {o.holds}")
    by = {o.name: o for o in outcomes}
    false = sum(o.false for o in outcomes)

    def shown(value: float | None) -> str:
        return "never" if value is None else f"{value:.1f}"

    return (f" sandbox_silent_replaced_s={shown(by['silent'].seconds)}"
            f" sandbox_down_to_replace_s={shown(by['unusable'].after_seen)}"
            f" sandbox_false_replacements={false}")


if __name__ == "__main__":
    main()
