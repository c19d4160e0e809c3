"""decide() at fleet scale: 10,000 nodes in 500 pools of 100 teams, and 1,000 for scaling.

Prints one line per size, then `decide_ms_median=<x> scaling_ratio_10k_over_1k=<y>`.
With ``--views`` each size is also decided on plain slotted stand-ins of the per-node input
records (Node, NodeObservation, GpuMetrics, SchedulerNode, RunningJob), built before the
clock starts, and the line says whether that plan is the same: what "slotted views built
by the reader" (issue 36 item 3) would buy decide() at most, without building them.
With ``--plan-hash`` each size's line also gives a sha256 of its plan's JSON, to show that a
change meant only to make decide() faster decides exactly the same.
Both sizes are measured in the same run (machines here are noisy; the ratio is what counts);
times are CPU time of the deciding process, so other load on the machine does not count.

For scale: a bare loop over the 10k nodes that only reads the facts decide() needs (node
name/state/team/pool, GPU metrics, scheduler jobs) and updates a dict already takes about
30-40 ms of CPU here (pydantic models define __getattr__, so CPython 3.11 does not
specialize reads of their fields), which leaves the 50 ms target almost nothing for the
rules themselves.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel

from autoscaler.engine import decide
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import FleetView, Node, PoolHistory
from autoscaler.model.snapshot import (
    GpuMetrics,
    NodeObservation,
    PendingJob,
    PoolObservation,
    RunningJob,
    SchedulerNode,
    Snapshot,
)
from autoscaler.policy.models import Market, TeamPolicy

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
WEEKDAYS = {"cron": "0 8 * * MON-FRI", "min_nodes": 5, "duration": "10h"}
TYPES = [["p3.2xlarge", "p3.8xlarge"], ["g4dn.xlarge", "g4dn.12xlarge"], ["p3.2xlarge", "p3.16xlarge"]]


def world(nodes: int, teams: int, pools_per_team: int, seed: int = 7):
    rnd = random.Random(seed)
    policies = {}
    for t in range(teams):
        policies[f"team{t}"] = TeamPolicy.model_validate({
            "team": f"team{t}", "priority": ["high", "medium", "low"][t % 3],
            "quota": {"max_gpus": 400},
            "pools": [{"name": f"pool{p}", "cloud": "aws", "region": "us-east-1",
                       "instance_types": TYPES[(t + p) % 3], "min_nodes": 2, "max_nodes": 60,
                       "capacity": {"on_demand_base": 2, "spot_percent": 70},
                       "lifetime": {"max_node_age": "720h", "max_job_runtime": "48h"},
                       "schedule": [WEEKDAYS] if p == 0 else []}
                      for p in range(pools_per_team)],
        })
    keys = [(t, p) for t in policies.values() for p in t.pools]
    fleet_nodes, obs = [], {}
    for i in range(nodes):
        team, pool = keys[i % len(keys)]
        name = f"{team.team}-{pool.name}-{i}"
        state = rnd.choices([NodeState.READY, NodeState.BOOTSTRAPPING, NodeState.DRAINING],
                            weights=[90, 5, 5])[0]
        fleet_nodes.append(Node(
            name=name, team=team.team, pool=pool.name, cloud="aws", region="us-east-1",
            instance_type=rnd.choice(pool.instance_types),
            market=Market.SPOT if rnd.random() < 0.7 else Market.ON_DEMAND, state=state,
            state_since=NOW - timedelta(minutes=30), created_at=NOW - timedelta(hours=rnd.randint(1, 750)),
            ready_at=NOW - timedelta(hours=1), drain_trigger="idle" if state is NodeState.DRAINING else None))
        util = rnd.choice([0.5, 3, 40, 70, 85, 97])
        jobs = [] if util < 5 else [RunningJob(id=f"{name}-j", gpus=1, started_at=NOW - timedelta(hours=3))]
        obs[name] = NodeObservation(
            metrics=GpuMetrics(util_mean=util, util_max_idle_window=util + 2, util_max=util + 5,
                               xid_errors=1 if rnd.random() < 0.002 else 0, temperature_max_c=70,
                               sample_age_s=4),
            scheduler=SchedulerNode(state="mixed", gpus_total=1, gpus_allocated=len(jobs), jobs=jobs))
    pool_obs = {
        f"{t.team}/{p.name}": PoolObservation(pending=[
            PendingJob(id=f"{t.team}-{p.name}-{k}", gpus=rnd.choice([0.5, 1, 1, 2, 4]))
            for k in range(rnd.choice([0, 0, 0, 1, 3]))])
        for t, p in keys
    }
    history = {f"{t.team}/{p.name}": PoolHistory(last_scale_up_at=NOW - timedelta(hours=2)) for t, p in keys}
    snap = Snapshot(taken_at=NOW, nodes=obs, pools=pool_obs)
    return policies, FleetView(nodes=fleet_nodes, history=history), snap


# The per-node records decide() reads thousands of times a tick.
_VIEWED = frozenset({"Node", "NodeObservation", "GpuMetrics", "SchedulerNode", "RunningJob", "NodeProgress"})


def _slotted(obj: Any, classes: dict[type, type]) -> Any:
    """``obj`` with every per-node pydantic record in it copied to a plain slotted class that
    has the same fields, properties and methods (pydantic's __getattr__ keeps CPython from
    specialising reads of a model's fields; a slotted class's are specialised)."""
    if isinstance(obj, list):
        return [_slotted(x, classes) for x in obj]
    if not isinstance(obj, BaseModel) or type(obj).__name__ not in _VIEWED:
        return obj
    model = type(obj)
    view = classes.get(model)
    if view is None:
        members = {k: v for k, v in vars(model).items()
                   if isinstance(v, property) or (callable(v) and not k.startswith("__"))}
        view = classes[model] = type(f"{model.__name__}View", (),
                                     {"__slots__": tuple(model.model_fields), **members})
    out = object.__new__(view)
    for name in model.model_fields:
        object.__setattr__(out, name, _slotted(getattr(obj, name), classes))
    return out


def views(fleet: FleetView, snap: Snapshot) -> tuple[FleetView, Snapshot]:
    classes: dict[type, type] = {}
    nodes = [_slotted(n, classes) for n in fleet.nodes]
    observed = {k: _slotted(v, classes) for k, v in snap.nodes.items()}
    return (FleetView.model_construct(nodes=nodes, history=fleet.history),
            snap.model_copy(update={"nodes": observed}))


def measure(nodes: int, teams: int, pools_per_team: int, repeat: int,
            as_views: bool = False) -> tuple[float, int, str]:
    policies, fleet, snap = world(nodes, teams, pools_per_team)
    if as_views:
        fleet, snap = views(fleet, snap)
    decide(policies, fleet, snap, NOW)  # warm caches (croniter parsing, imports)
    times = []
    for _ in range(repeat):
        # CPU time of this process: other load on these shared 2-core machines would
        # otherwise show up as decide() being slow.
        start = time.process_time()
        plan = decide(policies, fleet, snap, NOW)
        times.append((time.process_time() - start) * 1000)
    digest = hashlib.sha256(plan.model_dump_json().encode()).hexdigest()
    return statistics.median(times), len(plan.actions), digest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--plan-hash", action="store_true", help="also print a sha256 of each size's plan")
    parser.add_argument("--views", action="store_true",
                        help="also decide on slotted stand-ins of the per-node records (see above)")
    args = parser.parse_args()
    medians = []
    for label, nodes, teams in (("1k nodes / 50 pools / 10 teams", 1_000, 10),
                                ("10k nodes / 500 pools / 100 teams", 10_000, 100)):
        ms, n, digest = measure(nodes, teams, 5, args.repeat)
        medians.append(ms)
        line = f"{label}: median {ms:.1f} ms ({n} actions)"
        line += f" plan_sha256={digest}" if args.plan_hash else ""
        if args.views:
            v_ms, _, v_digest = measure(nodes, teams, 5, args.repeat, as_views=True)
            line += (f"; on slotted views {v_ms:.1f} ms ({v_ms / ms:.2f}x), plan "
                     + ("the same" if v_digest == digest else "DIFFERENT"))
        print(line)
    small, big = medians
    print(f"decide_ms_median={big:.1f} scaling_ratio_10k_over_1k={big / small:.2f}")


if __name__ == "__main__":
    main()
