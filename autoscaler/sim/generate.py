"""A generated workload that keeps a fleet of about N nodes busy: the simulator at scale.

No data file: the jobs are drawn from a seeded random stream, so the same ``(nodes, seed,
hours)`` always gives the same workload. It is built to be at steady state from the first
second, so a replay spends its time at the fleet size asked, not ramping up to it:

* shapes (GPUs asked) and the node each needs on its own, the smallest p3 that fits
  (all p3 sizes cost the same per GPU, so the engine buys the smallest): a whole GPU
  (p3.2xlarge), half a GPU (two share one p3.2xlarge), 4 GPUs (p3.8xlarge), 8 GPUs
  (p3.16xlarge); ``SHAPES`` holds their shares of the jobs;
* run times are exponential with mean ``mean_run`` (at least ``MIN_RUN``);
* the jobs running at the window start are ``carried`` (arrive at the start, with what is
  left of their run, which for an exponential run time is again exponential), enough to
  need ``nodes`` nodes; the rest arrive as a Poisson stream at the rate that keeps as many
  running (Little's law: jobs in the system = arrival rate x mean run time).

So about ``nodes`` nodes are needed at every moment, plus those booting and those idle
until ``scale_down.idle_for``. The fleet a strategy holds depends on its packing and
scale-down rules; :func:`nodes_needed` is the count the workload asks for by itself.
"""

from __future__ import annotations

import random

from autoscaler.traces import Job, LoadStats, Workload

MIN_RUN = 60.0
# (GPUs asked, share of the jobs, nodes one such job needs on its own)
SHAPES: tuple[tuple[float, float, float], ...] = (
    (1.0, 0.70, 1.0),
    (0.5, 0.15, 0.5),
    (4.0, 0.10, 1.0),
    (8.0, 0.05, 1.0),
)


def _nodes_per_job() -> float:
    return sum(share * need for _, share, need in SHAPES)


def fleet_workload(nodes: int = 3000, seed: int = 0, hours: float = 2.0,
                   mean_run: float = 2 * 3600.0) -> Workload:
    """A window of ``hours`` that needs about ``nodes`` nodes throughout (module docstring)."""
    if nodes < 1 or hours <= 0 or mean_run < MIN_RUN:
        raise ValueError("nodes >= 1, hours > 0 and mean_run >= MIN_RUN are required")
    rng = random.Random(f"{seed}:fleet-workload")
    gpus = [g for g, _, _ in SHAPES]
    weights = [share for _, share, _ in SHAPES]
    running = round(nodes / _nodes_per_job())
    end = hours * 3600.0
    jobs: list[Job] = []

    def run_time() -> float:
        return max(MIN_RUN, round(rng.expovariate(1.0 / mean_run), 1))

    for i in range(running):
        jobs.append(Job(f"c{i:06d}", 0.0, run_time(), rng.choices(gpus, weights)[0], carried=True))
    rate = running / mean_run  # Little's law: keeps `running` jobs in the system
    t, i = rng.expovariate(rate), 0
    while t < end:
        jobs.append(Job(f"a{i:06d}", round(t, 3), run_time(), rng.choices(gpus, weights)[0]))
        t, i = t + rng.expovariate(rate), i + 1
    return Workload(jobs=jobs, start=0.0, end=end, trace_end=end,
                    stats=LoadStats(rows=len(jobs), carried=running))


def nodes_needed(workload: Workload, at: float) -> float:
    """Nodes the jobs running at ``at`` need, had every job started on arrival (each shape
    on its own smallest node; half-GPU jobs two to a node)."""
    need = {g: n for g, _, n in SHAPES}
    return sum(need.get(j.gpus, float(max(1.0, j.gpus))) for j in workload.jobs
               if j.arrival <= at < j.arrival + j.duration)
