"""Whole replays on tiny synthetic traces, with expectations computed by hand."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.sim.replay import SimConfig
from autoscaler.sim.report import to_json
from autoscaler.sim.run import run_all
from autoscaler.sim.spot import load_spot_traces
from autoscaler.traces import Job, load_duty_cycles
from tests.sim.conftest import CATALOG, EXACT, policy, replay_for, workload, write_spot

OD = 3.06  # p3.2xlarge on-demand $/h


def test_one_job_by_hand() -> None:
    """Job of 1 GPU for 1 h at t=0; boot 240 s; ticks every 30 s (CA: 10 s).

    ours: launched at 0, ready at 240 (wait 240), job ends at 3840; idle 10 min -> drained
    at the tick of 4440, terminated at the next tick, 4470.
    ca_like: node empty (0% requested) from 3840, unneeded for 10 min -> removed at 4440.
    static: peak 1 GPU -> one p3.2xlarge for the whole day. oracle: 1 GPU-hour.
    """
    pol = policy()
    report = run_all(workload([Job("a", 0, 3600, 1.0)]), pol, pol.pools[0], CATALOG, EXACT,
                     strategies=("ours", "ca_like", "static"))
    cost = {r.name: r.cost_usd for r in report.results}
    assert cost["ours"] == pytest.approx(OD * 4470 / 3600)
    assert cost["ca_like"] == pytest.approx(OD * 4440 / 3600)
    assert cost["static"] == pytest.approx(OD * 24)
    assert report.oracle.cost_usd == pytest.approx(OD)
    for r in report.results:
        assert r.wait_p50_s == 240 and r.jobs_finished == 1 and r.gpu_hours_used == pytest.approx(1)
    ours = report.result("ours")
    assert ours.gpu_hours_paid == pytest.approx(4470 / 3600)
    assert ours.launches == 1 and ours.terminations == 1
    assert ours.extra["actions"] == {"launch": 1, "drain": 1, "terminate": 1}


def test_shared_boot_draws_give_two_strategies_launching_together_the_same_boot() -> None:
    """One job at t=0: ours and CA-like both launch a node at once. Each with its own
    stream, the two boots differ by the draw alone; with shared draws they take the same."""
    pol = policy()

    def waits(shared: bool) -> dict[str, float]:
        config = replace(EXACT, boot_jitter=0.25, shared_boot_draws=shared)
        report = run_all(workload([Job("a", 0, 3600, 1.0)]), pol, pol.pools[0], CATALOG, config,
                         strategies=("ours", "ca_like"))
        assert all(r.jobs_waited == 1 for r in report.results)
        return {r.name: r.wait_p50_s for r in report.results}

    own, shared = waits(False), waits(True)
    assert own["ours"] != own["ca_like"]
    assert shared["ours"] == shared["ca_like"]
    assert 240 * 0.75 <= shared["ours"] <= 240 * 1.25


def test_two_half_gpu_jobs_share_one_node() -> None:
    jobs = [Job("a", 0, 3600, 0.5), Job("b", 0, 3600, 0.5), Job("c", 600, 600, 1.0)]
    pol = policy()
    report = run_all(workload(jobs), pol, pol.pools[0], CATALOG, EXACT, strategies=("ours",))
    ours = report.result("ours")
    # a+b share node 1 (ready at 240); c arrives at 600, waits for node 2 (launched at the
    # tick of 600, ready at 840), runs to 1440; node 2 idle until 2040, terminated at 2070;
    # node 1 as in the one-job case: terminated at 4470.
    assert ours.launches == 2
    assert ours.cost_usd == pytest.approx(OD * (4470 + (2070 - 600)) / 3600)
    assert report.oracle.cost_usd == pytest.approx(OD * (0.5 + 0.5 + 1 / 6))


def _random_jobs(seed: int, n: int = 40, span: float = 6 * 3600) -> list[Job]:
    rng = random.Random(seed)
    shares = [0.25, 0.5, 0.81, 1.0, 1.0, 2.0, 4.0]
    return [Job(f"j{i}", rng.uniform(0, span), rng.uniform(60, 5400), rng.choice(shares)) for i in range(n)]


@pytest.fixture
def spot_dir(tmp_path: Path) -> Path:
    rng = random.Random(7)
    for zone in ("us-east-1a", "us-east-1b"):
        write_spot(tmp_path / f"{zone}_v100_1.json", [int(rng.random() < 0.3) for _ in range(200)], gap=120)
    return tmp_path


@pytest.fixture
def duty_csv(tmp_path: Path) -> Path:
    rng = random.Random(3)
    rows = ["value,timestamp_anon,container_ip"]
    rows += [f"{rng.uniform(0, 100):.1f},{60 * i},c{c}" for c in range(3) for i in range(30)]
    path = tmp_path / "duty.csv"
    path.write_text("\n".join(rows) + "\n")
    return path


def _spot_policy():  # type: ignore[no-untyped-def]
    return policy(instance_types=["p3.2xlarge", "p3.8xlarge"], zones=["us-east-1a", "us-east-1b"],
                  capacity={"on_demand_base": 0, "spot_percent": 100, "spot_fallback": "on-demand"})


def _report_json(seed: int, spot_dir: Path, duty_csv: Path, workers: int = 1) -> dict[str, object]:
    pol = _spot_policy()
    config = SimConfig(seed=seed, boot_jitter=0.25)
    report = run_all(workload(_random_jobs(1), end=8 * 3600), pol, pol.pools[0], CATALOG, config,
                     spot=load_spot_traces(spot_dir), duty=load_duty_cycles(duty_csv), workers=workers)
    out = to_json(report, with_series=True)
    out.pop("wall_seconds")
    out["ratios"].pop("replay_speedup")  # type: ignore[attr-defined]
    for s in out["strategies"]:  # type: ignore[attr-defined]
        s.pop("wall_seconds")
        s.pop("cpu_seconds")
        s["extra"].pop("decide_seconds", None)
    return out


def test_same_seed_same_report_other_seed_other_report(spot_dir: Path, duty_csv: Path) -> None:
    first = _report_json(11, spot_dir, duty_csv)
    assert first == _report_json(11, spot_dir, duty_csv, workers=2)  # processes change nothing
    assert first != _report_json(12, spot_dir, duty_csv)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_oracle_is_a_lower_bound_for_every_strategy(seed: int, spot_dir: Path) -> None:
    pol = _spot_policy()
    report = run_all(workload(_random_jobs(seed), end=8 * 3600), pol, pol.pools[0], CATALOG,
                     SimConfig(seed=seed), spot=load_spot_traces(spot_dir))
    assert report.oracle.cost_usd > 0
    for r in report.results:
        assert r.cost_usd >= report.oracle.cost_usd - 1e-9, r.name
        assert r.gpu_hours_paid >= r.gpu_hours_used - 1e-9, r.name


def test_spot_outage_interrupts_and_requeues_and_the_job_still_finishes(tmp_path: Path) -> None:
    # zone a goes away at 1200 s for good; zone b always has capacity
    write_spot(tmp_path / "us-east-1a_v100_1.json", [0] * 10 + [1] * 1000, gap=120)
    write_spot(tmp_path / "us-east-1b_v100_1.json", [0] * 1010, gap=120)
    pol = _spot_policy()
    report = run_all(workload([Job("long", 0, 7200, 1.0)]), pol, pol.pools[0], CATALOG, EXACT,
                     spot=load_spot_traces(tmp_path, interrupt_share=1.0), strategies=("ours", "ca_like"))
    for r in report.results:
        assert r.kills_by_cause == {"spot": 1}, r.name
        assert r.spot_interruptions == 1
        assert r.jobs_finished == 1
        assert r.gpu_hours_paid_by_market.keys() == {"spot"}
    ours = report.result("ours")
    # notice at 1200 -> the stand-in goes to 1b at once: 1a, under the notice, ranks last
    assert ours.failed_launches == 0
    assert ours.extra["actions"]["launch"] >= 2
    # it ran from 240 to the reclaim at 1320: 1080 s, less than one 30-min checkpoint: all lost
    assert ours.gpu_hours_lost == pytest.approx(1080 / 3600)
    # wait is the time to the first start; the requeue wait shows in wait_total only
    assert ours.wait_p50_s == 240
    assert ours.wait_total_p50_s > 240


def test_static_on_prem_nodes_are_filled_first_never_billed_and_burst_waits() -> None:
    """One on-prem p3.2xlarge (1 GPU): job a runs there at once; b (arriving while a runs)
    does not fit. Without on_prem in the policy the engine buys for b at its first tick; a
    burst-only pool (burst_after 10m) waits, and b starts on-prem when a ends at 300 s,
    so nothing is bought at all."""
    from dataclasses import replace

    jobs = [Job("a", 0, 300, 1.0), Job("b", 10, 600, 1.0)]
    config = replace(EXACT, on_prem_nodes=1, on_prem_type="p3.2xlarge")
    plain = policy(cluster={"kind": "slurm", "partition": "gpu"})
    hybrid = policy(cluster={"kind": "slurm", "partition": "gpu",
                             "on_prem": {"nodes": "onprem001", "burst_after": "10m"}})
    bought = run_all(workload(jobs), plain, plain.pools[0], CATALOG, config, strategies=("ours",))
    waited = run_all(workload(jobs), hybrid, hybrid.pools[0], CATALOG, config, strategies=("ours",))
    b_plain, b_hybrid = bought.result("ours"), waited.result("ours")
    assert b_plain.launches == 1 and b_plain.cost_usd > 0  # b bought a node
    assert b_hybrid.launches == 0 and b_hybrid.cost_usd == 0  # on-prem is never billed
    assert b_hybrid.jobs_finished == 2 and b_hybrid.wait_p95_s == pytest.approx(290, abs=15)


def test_shared_boot_draws_are_keyed_by_the_minute_not_by_what_was_launched_before() -> None:
    """Two fleets that differ (one launched a node more on day 0) still draw the same boot
    for their first launch of a later minute, and for their second launch in it, wherever
    in the minute each falls; another minute draws anew. Own streams pair nothing."""
    from autoscaler.sim.replay import Replay
    from autoscaler.sim.strategies.base import Strategy

    pol = policy()

    def replay(shared: bool) -> Replay:
        return Replay(workload([Job("a", 0, 60, 1.0)]), pol.pools[0], CATALOG,
                      replace(EXACT, boot_jitter=0.25, shared_boot_draws=shared), Strategy())

    a, b = replay(True), replay(True)
    a.boot_draw(5.0)
    day = 86_400.0
    first, second = a.boot_draw(day + 1), a.boot_draw(day + 2)
    assert (first, second) == (b.boot_draw(day + 50), b.boot_draw(day + 59))
    assert first != second and a.boot_draw(day + 61) not in (first, second)
    assert all(0.75 <= x <= 1.25 for x in (first, second))
    own_a, own_b = replay(False), replay(False)
    own_a.boot_draw(5.0)
    assert own_a.boot_draw(day) != own_b.boot_draw(day)


def test_an_arrival_between_ticks_wakes_decide_wake_after_past_the_last_tick() -> None:
    """Job at t=5 s: woken at 10 s (10 s after the tick at 0), ready at 250, waits 245 s;
    with the wake off it waits for the tick at 30 s: ready at 270, 265 s. One wake."""
    from dataclasses import replace

    pol = policy()
    jobs = workload([Job("a", 5, 3600, 1.0)])
    woken = run_all(jobs, pol, pol.pools[0], CATALOG, replace(EXACT, wake_after=10.0), strategies=("ours",))
    ticks = run_all(jobs, pol, pol.pools[0], CATALOG, replace(EXACT, wake_after=None), strategies=("ours",))
    assert woken.result("ours").wait_p50_s == 245
    assert ticks.result("ours").wait_p50_s == 265
    assert woken.result("ours").parameters["wake_after_s"] == 10.0


def test_the_predictive_strategy_wakes_as_ours_does() -> None:
    """The forecast floor changes what is decided, not when: a job arriving between ticks
    wakes both engine strategies alike (the service's tick.wake_after does not depend on
    predictive mode)."""
    pol = policy()
    jobs = workload([Job("a", 5, 3600, 1.0)])
    report = run_all(jobs, pol, pol.pools[0], CATALOG, replace(EXACT, wake_after=10.0),
                     strategies=("ours", "predictive"))
    for name in ("ours", "predictive"):
        assert report.result(name).parameters["wake_after_s"] == 10.0, name
        assert report.result(name).wait_p50_s == 245, name


def test_a_wake_waits_for_the_last_launchs_attempt_as_the_services_one_apply_per_pool() -> None:
    """Ticks every 60 s. a (t=0) is launched at the tick at 0, its attempt running to 36 s;
    b arrives at 5 s. The service would only queue b's launch behind a's apply, so the wake
    comes when that attempt has passed: b is launched at 36 s and waits 271 s (not 245 s, as
    a wake at 10 s would give, nor 295 s at the next tick)."""
    pol = policy()
    jobs = workload([Job("a", 0, 3600, 1.0), Job("b", 5, 3600, 1.0)])
    config = replace(EXACT, tick=60.0, wake_after=10.0)
    run = run_all(jobs, pol, pol.pools[0], CATALOG, config, strategies=("ours",)).result("ours")
    assert run.launches == 2 and run.jobs_waited == 2
    assert run.wait_p50_s == pytest.approx((240 + 271) / 2)
    off = run_all(jobs, pol, pol.pools[0], CATALOG, replace(config, wake_after=None),
                  strategies=("ours",)).result("ours")
    assert off.wait_p50_s == pytest.approx((240 + 295) / 2)


def test_a_refused_launch_wakes_decide_so_the_next_zone_is_tried_sooner(tmp_path: Path) -> None:
    """Spot only, us-east-1a dry and us-east-1b not. The tick at 0 launches into 1a, refused
    at 36 s. With wake_after 10 s the refusal is demand again: the next decide comes at 40 s
    (10 s after the tick at 30), launching into 1b, ready at 280 s. Off: the tick at 60 s
    does, ready at 300 s."""
    write_spot(tmp_path / "us-east-1a_v100_1.json", [1] * 100, gap=120)
    write_spot(tmp_path / "us-east-1b_v100_1.json", [0] * 100, gap=120)
    pol = policy(zones=["us-east-1a", "us-east-1b"],
                 capacity={"on_demand_base": 0, "spot_percent": 100})
    spot = load_spot_traces(tmp_path)
    jobs = workload([Job("a", 0, 3600, 1.0)])

    def ours(wake: float | None):  # type: ignore[no-untyped-def]
        return run_all(jobs, pol, pol.pools[0], CATALOG, replace(EXACT, wake_after=wake),
                       spot=spot, strategies=("ours",)).result("ours")

    woken, ticks = ours(10.0), ours(None)
    assert woken.failed_launches == ticks.failed_launches == 1
    assert woken.wait_p50_s == 280 and ticks.wait_p50_s == 300


def test_the_soonest_wake_wins_whichever_was_asked_first() -> None:
    """The service's waker moves the next tick only when that is sooner, so a wake asked for
    later but due sooner (a placement group's follow-up after a demand wake held back by a
    running launch) is the one that runs; the later one finds itself stale and skips. Ticks
    every 60 s; at 5 s a wake 40 s past the tick of 0 is asked for, then one 20 s past it."""
    from autoscaler.sim.clock import Kind
    from autoscaler.sim.replay import Replay
    from autoscaler.sim.strategies.base import Strategy

    def asks(replay: Replay, now: float) -> None:
        replay.wake(now, 40.0)
        replay.wake(now, 20.0)
        replay.wake(now, 30.0)  # later than the one queued: changes nothing

    class Asks(Strategy):
        interval = 60.0

        def __init__(self) -> None:
            self.at: list[float] = []

        def tick(self, replay: Replay, now: float) -> None:
            self.at.append(now)
            if now == 0:
                replay.clock.at(5.0, Kind.NODE, lambda t: asks(replay, t))

    pol = policy()
    strategy = Asks()
    run = Replay(workload([Job("a", 0, 60, 1.0)], end=130), pol.pools[0], CATALOG, EXACT, strategy).run()
    assert strategy.at == [0, 20, 60, 120]
    assert run.stats.wakes == 1


def test_a_stand_in_spot_score_reads_the_trace_lag_seconds_before(tmp_path: Path) -> None:
    # Zone a loses its spot at 1200 s for good; scores that lag 600 s see it from 1800 s on.
    write_spot(tmp_path / "us-east-1a_v100_1.json", [0] * 10 + [1] * 1000, gap=120)
    write_spot(tmp_path / "us-east-1b_v100_1.json", [0] * 1010, gap=120)
    spot = load_spot_traces(tmp_path, interrupt_share=1.0)
    pool = _spot_policy().pools[0]
    run = replay_for([], pool=pool, config=replace(EXACT, spot_score_lag=600.0), spot=spot)
    scores = {s.zone: s.score for s in run.spot_scores([pool], 1500.0)}  # the trace at 900 s
    assert scores == {"us-east-1a": 9, "us-east-1b": 9}
    scores = {s.zone: s.score for s in run.spot_scores([pool], 1900.0)}  # at 1300 s
    assert scores == {"us-east-1a": 2, "us-east-1b": 9}
    assert all(s.instance_types == list(pool.instance_types) for s in run.spot_scores([pool], 0.0))
    assert replay_for([], pool=pool, spot=spot).spot_scores([pool], 1900.0) == []  # off by default
