from __future__ import annotations

import pytest

from autoscaler.model.lifecycle import IllegalTransitionError, NodeState
from autoscaler.traces import Job
from tests.sim.conftest import ready_node, replay_for, run_job

S = NodeState


def test_moves_go_through_the_lifecycle_table() -> None:
    replay = replay_for([])
    node = ready_node(replay)
    with pytest.raises(IllegalTransitionError):
        replay.cluster.move(node, S.BOOTSTRAPPING, 10)


def test_billing_runs_from_launch_request_to_termination() -> None:
    replay = replay_for([])
    node = ready_node(replay, "p3.8xlarge", now=0)
    replay.cluster.terminate(node, 1800, "test")
    assert node.name not in replay.cluster.nodes
    assert replay.cluster.totals.cost_usd == pytest.approx(12.24 / 2)
    assert replay.cluster.totals.gpu_seconds_paid == 4 * 1800
    assert replay.cluster.totals.terminations == 1


def test_killed_job_keeps_its_last_checkpoint_and_requeues_by_age() -> None:
    jobs = [Job("a", 0, 7200, 1.0), Job("b", 10, 7200, 1.0)]
    replay = replay_for(jobs)  # checkpoint every 30 min
    node = ready_node(replay)
    a = run_job(replay, jobs[0], node, 0)
    b = next(j for j in replay.jobs if j.job.id == "b")
    replay.cluster.arrive(b, 10)  # no room: pending
    replay.cluster.kill_jobs(node, 2500, "spot")
    assert a.state == "pending" and a.kills == 1
    assert a.remaining == 7200 - 1800
    assert a.lost_seconds == pytest.approx(700)
    assert [j.job.id for j in replay.cluster.pending] == ["a", "b"]  # a is older
    assert replay.cluster.totals.kills["spot"] == 1
    assert node.free == [1.0]


def test_drained_when_the_last_job_leaves() -> None:
    job = Job("a", 0, 100, 0.5)
    replay = replay_for([job])
    node = ready_node(replay)
    sim = run_job(replay, job, node, 0)
    replay.cluster.drain(node, 10, "idle")
    assert node.state is S.DRAINING
    replay.cluster.finish(sim, sim.run_id, 100)
    assert node.state is S.DRAINED
    assert sim.gpu_seconds == pytest.approx(50)


def test_fifo_with_backfill_starts_what_fits_oldest_first() -> None:
    jobs = [Job("big", 0, 100, 4.0), Job("small", 1, 100, 1.0), Job("share", 2, 100, 0.5)]
    replay = replay_for(jobs)
    ready_node(replay)
    for sim in replay.jobs:
        replay.cluster.arrive(sim, sim.job.arrival)
    replay.cluster.schedule(5)
    state = {j.job.id: j.state for j in replay.jobs}
    assert state == {"big": "pending", "small": "running", "share": "pending"}
    assert [j.job.id for j in replay.cluster.pending] == ["big", "share"]


def test_the_nodes_with_room_are_the_ready_nodes_with_a_free_gpu_share() -> None:
    """The scheduler's index (Cluster.with_room) against a scan, through starts, kills,
    drains and a termination."""
    jobs = [Job(f"j{i}", i, 50 + 10 * i, [1.0, 0.5, 0.25, 4.0][i % 4]) for i in range(12)]
    replay = replay_for(jobs)
    cluster = replay.cluster
    nodes = [ready_node(replay, t, now=float(i)) for i, t in enumerate(["p3.2xlarge", "p3.8xlarge"] * 2)]

    def scanned() -> list[str]:
        return [n.name for n in sorted(cluster.serving(), key=lambda n: (n.created_at, n.name))
                if max(n.free) >= 1e-9]

    for sim in replay.jobs:
        cluster.arrive(sim, sim.job.arrival)
        cluster.schedule(sim.job.arrival)
        assert [n.name for n in cluster.with_room()] == scanned()
    cluster.kill_jobs(nodes[1], 20, "spot")
    assert [n.name for n in cluster.with_room()] == scanned()
    cluster.drain(nodes[0], 21, "idle")
    cluster.terminate(nodes[2], 22, "test")
    assert [n.name for n in cluster.with_room()] == scanned()
    for sim in list(cluster.running.values()):
        cluster.finish(sim, sim.run_id, 100)
    assert [n.name for n in cluster.with_room()] == scanned()


def test_a_run_of_equal_util_samples_is_tracked_through_trimming() -> None:
    replay = replay_for([])
    node = ready_node(replay)
    for t, u in enumerate([5.0, 5.0, 7.0, 7.0, 7.0]):
        node.add_sample(float(t), u, keep=2)
    assert node.sample_u == [7.0, 7.0] and node.run_from == 0  # 5 > 2 x keep: the last 2 kept
    node.add_sample(5.0, 8.0, keep=2)
    assert node.sample_u[node.run_from:] == [8.0]
