"""Benchmark: replay speed of ours at fleet scale, on a generated trace of about 3,000 nodes.

    python benchmarks/bench_sim_scale.py [--nodes 3000] [--hours 2] [--seed 0] [--profile FILE] [--plan-hash]

The workload is generated in code (``autoscaler.sim.generate.fleet_workload``: seeded,
no data file), at steady state from its first second: about ``--nodes`` nodes needed
throughout. The pool is the benchmark policy's (``policies/openb-v100.yaml``) with room for
such a fleet: ``max_nodes`` and the team's GPU quota 3x the nodes asked, ``max_step`` as
many as the nodes asked (the first tick launches the whole fleet). Spot is always
available, and a job uses all of its GPUs (no duty-cycle trace).

It prints the fleet held (READY nodes: median and range over the samples), decide()'s
calls and CPU per call, and where the replay's CPU went, all from the same run:

* decide: the engine (``autoscaler.engine.decide``), not the simulator's to make cheaper;
* observe: the simulator's Observer building the FleetView and Snapshot from the cluster;
* sample: the util samples a scrape would take (``Replay.sample_util``);
* apply: the plan's intents applied to the cluster;
* cluster: everything else (events, job placement, series and bookkeeping).

Then what g would be with decide() at 50 ms and at 10 ms per call (the rest unchanged),
and the ticks in which nothing decide() reads had changed since the previous tick. The
last line is::

    sim_replay_x_3000_nodes=<g> decide_ms_per_call=<d> sim_ms_per_tick=<s>

g: simulated seconds / CPU seconds of the replay (time.process_time: the machine is shared);
d: decide()'s CPU per call; s: the simulator's own CPU per tick (all but decide). The
first key is named for 3,000 nodes whatever ``--nodes`` says.

``--plan-hash`` also prints ``plan_sha256=<h>``: a sha256 over every plan of the run (its
JSON, actions and pool summaries), so a change meant only to make things faster can show
that it decides exactly the same (same seed, same hours). It is taken in ``apply``, so
that part's CPU is inflated when it is given.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoscaler.catalog import default_catalog
from autoscaler.model.plan import Plan
from autoscaler.policy import load_policies
from autoscaler.policy.models import TeamPolicy
from autoscaler.sim.clock import Kind
from autoscaler.sim.generate import fleet_workload
from autoscaler.sim.replay import Replay, SimConfig
from autoscaler.sim.run import select_pool
from autoscaler.sim.strategies.engine import EngineStrategy

ROOT = Path(__file__).resolve().parent.parent


def scaled_team(team: TeamPolicy, nodes: int) -> TeamPolicy:
    """The bench team with its first pool sized for a fleet of ``nodes``."""
    doc = team.model_dump(mode="json", exclude_defaults=True)
    doc["quota"] = {**doc.get("quota", {}), "max_gpus": 3 * 8 * nodes}
    pool = doc["pools"][0]
    pool["max_nodes"] = min(10_000, 3 * nodes)
    pool["scale_up"] = {**pool.get("scale_up", {}), "max_step": min(10_000, nodes)}
    doc["pools"] = [pool]
    return TeamPolicy.model_validate(doc)


class Measured(EngineStrategy):
    """ours, counting the ticks whose plan was empty and those after which nothing in the
    cluster had changed by the next one (no job arrived, started or ended, no node moved)."""

    def __init__(self, *args: Any, plan_hash: bool = False, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.empty_plans = self.unchanged = 0
        self._seen = -1
        self.plans = hashlib.sha256() if plan_hash else None

    def tick(self, replay: Replay, now: float) -> None:
        self.unchanged += replay.cluster.version == self._seen
        super().tick(replay, now)
        self._seen = replay.cluster.version

    def apply(self, replay: Replay, plan: Plan, now: float) -> None:
        self.empty_plans += not plan.actions
        if self.plans is not None:
            self.plans.update(plan.model_dump_json().encode())
        super().apply(replay, plan, now)


@dataclass
class Mark:
    """The CPU counters at one instant of the replay."""

    cpu: float = 0.0
    parts: dict[str, float] = field(default_factory=dict)
    ticks: int = 0

    @classmethod
    def take(cls, strategy: EngineStrategy) -> Mark:
        return cls(time.process_time(), dict(strategy.cpu), strategy.decisions)

    def since(self, earlier: Mark) -> Mark:
        parts = {k: v - earlier.parts.get(k, 0.0) for k, v in self.parts.items()}
        return Mark(self.cpu - earlier.cpu, parts, self.ticks - earlier.ticks)


def report(label: str, span: float, m: Mark) -> tuple[float, float, float]:
    """Print where the CPU of ``m`` went; (g, decide ms per call, simulator ms per tick)."""
    cpu, ticks = max(m.cpu, 1e-9), max(m.ticks, 1)
    parts = {name: m.parts.get(name, 0.0) for name in ("decide", "observe", "sample", "apply")}
    parts["cluster"] = cpu - sum(parts.values())
    print(f"{label}: {span / 3600:g} h simulated, {cpu:.1f} s CPU, {span / cpu:,.0f}x real time, "
          f"{m.ticks} ticks", file=sys.stderr)
    for name, used in parts.items():
        print(f"  {name:8s} {used:7.2f} s CPU ({used / cpu:5.1%}), {1000 * used / ticks:6.2f} ms per tick",
              file=sys.stderr)
    rest = cpu - parts["decide"]
    for target in (50.0, 20.0, 10.0):
        print(f"  with decide() at {target:g} ms per call: {span / (rest + ticks * target / 1000):,.0f}x",
              file=sys.stderr)
    return span / cpu, 1000 * parts["decide"] / ticks, 1000 * rest / ticks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=3000)
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--warmup", type=float, default=0.5, help="hours before the steady part")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--policies", type=Path, default=ROOT / "benchmarks" / "policies")
    parser.add_argument("--profile", type=Path, help="also write a cProfile (CPU time) of the replay here")
    parser.add_argument("--plan-hash", action="store_true", help="also print a sha256 of every plan")
    args = parser.parse_args()

    catalog = default_catalog()
    base, _, _ = select_pool(load_policies(args.policies, catalog), None)
    team = scaled_team(base, args.nodes)
    pool = team.pools[0]
    workload = fleet_workload(args.nodes, seed=args.seed, hours=args.hours)
    config = SimConfig(seed=args.seed)
    strategy = Measured(team, pool, catalog, interval=config.tick, plan_hash=args.plan_hash)
    replay = Replay(workload, pool, catalog, config, strategy)
    marks: list[Mark] = []
    warm = workload.start + args.warmup * 3600
    replay.clock.at(warm, Kind.SAMPLE, lambda t: marks.append(Mark.take(strategy)))  # reads only
    profiler = cProfile.Profile(time.process_time) if args.profile else None  # CPU, not wall
    if profiler:
        profiler.enable()
    began = Mark.take(strategy)
    replay.run()
    ended = Mark.take(strategy)
    if profiler:
        profiler.disable()
        profiler.dump_stats(args.profile)

    held = replay.series.ready_nodes[1:] or [0]  # the first sample is before any boot
    steady = [n for t, n in zip(replay.series.t, replay.series.ready_nodes, strict=True) if t >= warm] or [0]
    print(f"{len(workload.jobs)} jobs ({workload.stats.carried} running at the start); READY nodes: "
          f"median {statistics.median(held):.0f} (range {min(held)}-{max(held)}), after the warm-up "
          f"{statistics.median(steady):.0f} ({min(steady)}-{max(steady)}); replay "
          f"{replay.stats.wall_seconds:.1f} s wall{' (profiled)' if profiler else ''}", file=sys.stderr)
    g_all, _, _ = report("whole replay", workload.end - workload.start, ended.since(began))
    if not marks:
        raise SystemExit("--warmup must be shorter than --hours")
    g, decide_ms, sim_ms = report(f"after the first {args.warmup:g} h", workload.end - warm,
                                  ended.since(marks[0]))
    print(f"decide() calls: {strategy.decisions}; with an empty plan: {strategy.empty_plans}; after a tick "
          f"where nothing in the cluster changed: {strategy.unchanged}", file=sys.stderr)
    print(f"sim_replay_x_3000_nodes={g:.1f} decide_ms_per_call={decide_ms:.1f} sim_ms_per_tick={sim_ms:.2f} "
          f"sim_replay_x_whole={g_all:.1f}")
    if strategy.plans is not None:
        print(f"plan_sha256={strategy.plans.hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
