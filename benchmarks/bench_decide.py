"""decide() at fleet scale: 10,000 nodes in 500 pools of 100 teams, and 1,000 for scaling.

Prints one line per size, then `decide_ms_median=<x> scaling_ratio_10k_over_1k=<y>`.
With ``--plan-hash`` each size's line also gives a sha256 of its plan's JSON, to show that a
change meant only to make decide() faster decides exactly the same.
Both sizes are measured in the same run (machines here are noisy; the ratio is what counts);
times are CPU time of the deciding process, so other load on the machine does not count.

For scale: a bare loop over the 10k nodes that only reads the facts decide() needs (node
name/state/team/pool, GPU metrics, scheduler jobs) and updates a dict took about
30-40 ms of CPU here while those records were pydantic models (BaseModel defines
__getattr__, so CPython 3.11 does not specialise reads of their fields); they are slotted
dataclasses now (autoscaler/model/record.py).
"""

from __future__ import annotations

import argparse
import hashlib
import random
import statistics
import time
from datetime import UTC, datetime, timedelta

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


def measure(nodes: int, teams: int, pools_per_team: int, repeat: int) -> tuple[float, int, str]:
    policies, fleet, snap = world(nodes, teams, pools_per_team)
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
    args = parser.parse_args()
    medians = []
    for label, nodes, teams in (("1k nodes / 50 pools / 10 teams", 1_000, 10),
                                ("10k nodes / 500 pools / 100 teams", 10_000, 100)):
        ms, n, digest = measure(nodes, teams, 5, args.repeat)
        medians.append(ms)
        line = f"{label}: median {ms:.1f} ms ({n} actions)"
        line += f" plan_sha256={digest}" if args.plan_hash else ""
        print(line)
    small, big = medians
    print(f"decide_ms_median={big:.1f} scaling_ratio_10k_over_1k={big / small:.2f}")


if __name__ == "__main__":
    main()
