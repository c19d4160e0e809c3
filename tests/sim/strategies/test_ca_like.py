from __future__ import annotations

from itertools import pairwise

from autoscaler.model.lifecycle import IN_FLIGHT
from autoscaler.sim.spot import load_spot_traces
from autoscaler.sim.strategies.ca_like import ClusterAutoscalerLike, GroupBackoff
from autoscaler.traces import Job
from tests.sim.conftest import EXACT, policy, ready_node, replay_for, run_job, write_spot

POOL = policy(instance_types=["p3.2xlarge", "p3.8xlarge"]).pools[0]


def _two_nodes():  # type: ignore[no-untyped-def]
    """A: p3.8xlarge holding one 1-GPU job (25% requested); B: p3.8xlarge at 50%, 2 GPUs free."""
    jobs = [Job("on-a", 0, 10**6, 1.0), Job("b1", 0, 10**6, 1.0), Job("b2", 0, 10**6, 1.0)]
    ca = ClusterAutoscalerLike()
    replay = replay_for(jobs, strategy=ca, pool=POOL)
    b = ready_node(replay, "p3.8xlarge", now=0)
    run_job(replay, jobs[1], b, 0)
    run_job(replay, jobs[2], b, 0)
    b.free[2:] = [0.0, 0.0]  # keep A's job off B while placing it
    a = ready_node(replay, "p3.8xlarge", now=0)
    run_job(replay, jobs[0], a, 0)
    b.free[2:] = [1.0, 1.0]
    return replay, ca, a, b


def test_node_under_half_requested_goes_after_ten_minutes_and_its_job_moves() -> None:
    replay, ca, a, b = _two_nodes()
    for t in (0, 300, 590):
        ca.tick(replay, t)
        assert a.name in replay.cluster.nodes, t
    ca.tick(replay, 600)
    assert a.name not in replay.cluster.nodes
    assert b.name in replay.cluster.nodes  # 50% requested is not below the threshold
    assert replay.cluster.totals.kills == {"scale-down-eviction": 1}
    replay.cluster.schedule(600)
    moved = next(j for j in replay.jobs if j.job.id == "on-a")
    assert moved.state == "running" and moved.node is b


def test_no_scale_down_within_ten_minutes_of_a_scale_up() -> None:
    replay, ca, a, _ = _two_nodes()
    ca.tick(replay, 0)
    ca.last_scale_up = 500
    ca.tick(replay, 1000)
    assert a.name in replay.cluster.nodes  # unneeded for 1000 s, but the delay after add holds
    ca.tick(replay, 1100)
    assert a.name not in replay.cluster.nodes


def test_node_whose_jobs_fit_nowhere_else_stays() -> None:
    jobs = [Job("x", 0, 10**6, 1.0)]
    ca = ClusterAutoscalerLike()
    replay = replay_for(jobs, strategy=ca, pool=POOL)
    lonely = ready_node(replay, "p3.8xlarge")
    run_job(replay, jobs[0], lonely, 0)
    for t in range(0, 3600, 10):
        ca.tick(replay, t)
    assert lonely.name in replay.cluster.nodes


def test_empty_nodes_go_in_bulk() -> None:
    ca = ClusterAutoscalerLike()
    replay = replay_for([], strategy=ca, pool=POOL)
    for _ in range(12):
        ready_node(replay)
    ca.tick(replay, 0)
    ca.tick(replay, 600)
    assert len(replay.cluster.nodes) == 2  # max-empty-bulk-delete is 10
    ca.tick(replay, 610)  # the next scan takes the other two (the group's minimum is 0)
    assert not replay.cluster.nodes


def test_scale_up_packs_pending_pods_onto_the_least_wasteful_group() -> None:
    jobs = [Job("one", 0, 3600, 1.0), Job("h1", 0, 3600, 0.5), Job("h2", 0, 3600, 0.5)]
    ca = ClusterAutoscalerLike()
    replay = replay_for(jobs, strategy=ca, pool=POOL)
    for sim in replay.jobs:
        replay.cluster.arrive(sim, 0)
    ca.tick(replay, 0)
    launched = [n for n in replay.cluster.nodes.values() if n.state in IN_FLIGHT]
    # p3.2xlarge x2 wastes nothing; p3.8xlarge x1 would leave 2 of 4 GPUs idle
    assert sorted(n.itype.name for n in launched) == ["p3.2xlarge", "p3.2xlarge"]
    assert ca.last_scale_up == 0
    ca.tick(replay, 10)
    assert len(replay.cluster.nodes) == 2  # the pods fit on the upcoming nodes


def _tie_choice(seed: int) -> list[str]:
    """Eight 1-GPU pods: 2 x p3.8xlarge and 1 x p3.16xlarge both waste nothing (a tie)."""
    from dataclasses import replace

    from tests.sim.conftest import EXACT
    jobs = [Job(f"p{i}", 0, 3600, 1.0) for i in range(8)]
    ca = ClusterAutoscalerLike()
    pool = policy(instance_types=["p3.8xlarge", "p3.16xlarge"]).pools[0]
    replay = replay_for(jobs, strategy=ca, pool=pool, config=replace(EXACT, seed=seed))
    ca.begin(replay, 0)
    for sim in replay.jobs:
        replay.cluster.arrive(sim, 0)
    ca.tick(replay, 0)
    return sorted(n.itype.name for n in replay.cluster.nodes.values())


def test_least_waste_ties_go_to_a_random_group_drawn_from_the_seed() -> None:
    choices = {seed: _tie_choice(seed) for seed in range(8)}
    assert set(map(tuple, choices.values())) == {("p3.8xlarge", "p3.8xlarge"), ("p3.16xlarge",)}
    assert all(_tie_choice(seed) == choices[seed] for seed in (0, 1))  # same seed, same draw


def test_group_backoff_follows_the_cluster_autoscaler_rule() -> None:
    """5 min, doubled by each failure after the back-off ran out, capped at 30 min; a
    failure during a back-off restarts at 5 min; success or 3 h without failure clear it."""
    b = GroupBackoff(300, 1800, 10800)
    t, durations = 0.0, []
    for _ in range(6):
        b.failed("g", t)
        b.failed("g", t)  # the group's other refused nodes of the same scan: one failure
        until = t + next(d for d in range(0, 3601, 10) if not b.blocked("g", t + d))
        durations.append(until - t)
        t = until + 10
    assert durations == [300, 600, 1200, 1800, 1800, 1800]
    b.failed("g", t)  # 30 min
    b.failed("g", t + 60)  # still backed off: CA restarts the back-off at the initial duration
    assert b.blocked("g", t + 60 + 299) and not b.blocked("g", t + 60 + 300)
    b.succeeded("g")
    assert not b.blocked("g", t + 61)
    b.failed("g", 0)
    b.failed("g", 400)  # doubles to 600
    assert not b.blocked("g", 400 + 10800 + 1)  # 3 h after the last failure: forgotten
    b.failed("g", 400 + 10800 + 2)
    assert not b.blocked("g", 400 + 10800 + 2 + 300)  # back to 5 min


def test_a_dry_market_backs_the_group_off_longer_each_time(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Spot only, no fallback, every zone dry for 3 h: CA's retries of the group come
    5, 10, 20, 30, 30 min after each failure (plus the two refused attempts each)."""
    write_spot(tmp_path / "us-east-1a_v100_1.json", [1] * 40, gap=600)
    write_spot(tmp_path / "us-east-1b_v100_1.json", [1] * 40, gap=600)
    pool = policy(zones=["us-east-1a", "us-east-1b"],
                  capacity={"on_demand_base": 0, "spot_percent": 100, "spot_fallback": "none"}).pools[0]
    failures: list[float] = []

    class Recording(ClusterAutoscalerLike):
        def capacity_error(self, replay, node, now):  # type: ignore[no-untyped-def]
            super().capacity_error(replay, node, now)
            fresh = not failures or failures[-1] != now
            if fresh and self.backoff is not None and self.backoff.blocked(node.itype.name, now):
                failures.append(now)

    replay = replay_for([Job("j", 0, 3600, 1.0)], strategy=Recording(), pool=pool,
                        spot=load_spot_traces(tmp_path), end=3 * 3600)
    replay.run()
    a = EXACT.launch_attempt
    gaps = [later - earlier - 2 * a for earlier, later in pairwise(failures)]
    want = [300, 600, 1200, 1800, 1800, 1800, 1800]
    assert len(gaps) >= 5
    assert all(d <= g <= d + 10 for g, d in zip(gaps, want[: len(gaps)], strict=True)), gaps  # the next 10 s scan retries
