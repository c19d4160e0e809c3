"""Warm pools in the replay: a warm node bootstraps, stops and bills its volume only; a
launch starts it (warm boot time) before launching cold; it is never capacity."""

from __future__ import annotations

from dataclasses import replace

import pytest

from autoscaler.catalog.volumes import stopped_hourly_usd
from autoscaler.sim.run import run_all
from autoscaler.traces import Job
from tests.sim.conftest import CATALOG, EXACT, policy, workload

OD = 3.06
CONFIG = replace(EXACT, warm_boot_delay=60.0)
# arrives after the first warm node stopped (240 s), and wakes decide at once (the last
# tick was at 570: tick.wake_after 10 s)
JOBS = [Job("a", 590, 3600, 1.0)]


def run(**pool_kw: object):
    pol = policy(**pool_kw)
    return run_all(workload(JOBS, end=7200), pol, pol.pools[0], CATALOG, CONFIG,
                   strategies=("ours",)).result("ours")


def test_a_launch_starts_the_warm_node_and_the_pool_refills() -> None:
    cold, warm = run(), run(warm_pool={"size": 1, "max": 1})
    # decided at its arrival, 590: cold READY at 830, warm at 650
    assert (cold.wait_p50_s, warm.wait_p50_s) == (240, 60)
    assert warm.launches == 1  # the fleet's: a warm node is never one of its nodes
    assert {k: warm.extra[k] for k in ("warm_launches", "warm_starts", "warm_retired")} == {
        "warm_launches": 2, "warm_starts": 1, "warm_retired": 0}
    # w1 runs 0-240 at the on-demand price, is stopped 240-590; w2 runs 590-830, is stopped to the end
    volume = stopped_hourly_usd()
    expected = (OD * 240 + volume * 350 + OD * 240 + volume * (7200 - 830)) / 3600
    assert warm.extra["warm_cost_usd"] == pytest.approx(expected, abs=0.005)
    assert volume == pytest.approx(0.01096, abs=1e-5)


def test_no_warm_pool_no_warm_figures() -> None:
    assert "warm_starts" not in run().extra


def test_the_report_cost_counts_the_warm_bills() -> None:
    cold, warm = run(), run(warm_pool={"size": 1, "max": 1})
    # the started node serves 180 s sooner, so it is idle and gone 180 s sooner too
    assert warm.cost_usd - cold.cost_usd == pytest.approx(warm.extra["warm_cost_usd"] - OD * 180 / 3600,
                                                          abs=0.005)


def test_what_the_warm_nodes_leave_is_launched_cold_once_they_are_ready() -> None:
    pol = policy(warm_pool={"size": 1, "max": 1})
    jobs = [Job("a", 590, 3600, 1.0), Job("b", 590, 3600, 1.0)]
    warm = run_all(workload(jobs, end=7200), pol, pol.pools[0], CATALOG, CONFIG,
                   strategies=("ours",)).result("ours")
    # a: the warm node started at 590 is READY at 650 (waits 60 s); b's cold launch waits
    # until then, for the tick of 660, and is READY at 900 (waits 310 s): p50 is their mean
    assert warm.wait_p50_s == pytest.approx((60 + 310) / 2)
    assert warm.launches == 2 and warm.extra["cold_held"] >= 2
