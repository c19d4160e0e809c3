"""engine/warm_pool.py: the warm target, which launches start warm nodes, what is retired
and refilled; numbers and reasons."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from autoscaler.engine.warm_pool import Target, WarmNode, refresh, serve, target
from autoscaler.model.plan import Launch
from autoscaler.model.snapshot import ForecastFloor
from autoscaler.policy.models import Market, Pool
from tests.builders import make_policy

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
SPOT, OD = Market.SPOT, Market.ON_DEMAND


def pool(size: int | str = 2, most: int = 6, **kw: object) -> Pool:
    predictive = {"mode": "forecast-only", "quantile": 0.8} if size == "forecast" else {}
    # the warm pool's own quantile, not the floor's, names the forecast
    quantile = {"quantile": 0.95} if size == "forecast" else {}
    return make_policy(warm_pool={"size": size, "max": most, **quantile}, predictive=predictive,
                       **kw).pools[0]


def forecast(gpus: float) -> ForecastFloor:
    return ForecastFloor(gpus=gpus, reason="test forecast")


def warm(name: str, hours_old: float = 1.0, itype: str = "p3.2xlarge", market: Market = SPOT,
         image: str = "h1", ready: bool = True) -> WarmNode:
    return WarmNode(name, itype, market, NOW - timedelta(hours=hours_old), image, ready)


def launch(count: int, itype: str = "p3.2xlarge", market: Market = SPOT) -> Launch:
    return Launch(pool="vision/gpu", reason="pending", instance_type=itype, market=market,
                  count=count, gpus_per_node=1, hourly_usd=3.06, trigger="pending")


@pytest.mark.parametrize(("size", "most", "fc", "running", "per_node", "nodes", "reason"), [
    (2, 6, None, 0, 1, 2, "warm target 2 (warm_pool.size), max 6"),
    ("forecast", 6, 12, 8, 1, 4, "warm target 4 = forecast p95 12 GPUs - 8 running, max 6"),
    ("forecast", 6, 20, 8, 1, 6, "warm target 6 = forecast p95 20 GPUs - 8 running, max 6 (capped from 12)"),
    ("forecast", 6, 12, 8, 4, 1, "warm target 1 = forecast p95 12 GPUs - 8 running, in 4-GPU nodes, max 6"),
    ("forecast", 6, 13, 8, 4, 2, "warm target 2 = forecast p95 13 GPUs - 8 running, in 4-GPU nodes, max 6"),
    ("forecast", 6, 6, 8, 1, 0, "warm target 0 = forecast p95 6 GPUs - 8 running, max 6"),
    ("forecast", 6, None, 8, 1, 0, "warm target 0: no forecast for the pool yet (size: forecast), max 6"),
])
def test_the_target(size, most, fc, running, per_node, nodes, reason):
    got = target(pool(size, most), forecast(fc) if fc is not None else None, running, per_node)
    assert got == Target(nodes, reason)


def test_no_warm_pool_no_target():
    assert target(make_policy().pools[0], forecast(10), 0, 1) == Target(0, "no warm pool")


def test_launches_start_warm_nodes_first_youngest_first_then_cold():
    nodes = [warm("w-old", 5), warm("w-new", 1), warm("w-mid", 3), warm("w-od", 1, market=OD),
             warm("w-boot", 0.1, ready=False)]
    first, second = serve([launch(2), launch(3)], nodes)
    assert (first.start, first.cold, first.held) == (("w-new", "w-mid"), 0, 0)
    assert first.reason == ("2 of 2 launch(es) of 2 x p3.2xlarge spot start warm nodes "
                            "(w-new, w-mid); 0 cold")
    # w-boot is not stopped yet; what is left waits for the three warm nodes
    assert (second.start, second.cold, second.held) == (("w-old",), 0, 2)
    assert second.reason == ("1 of 3 launch(es) of 3 x p3.2xlarge spot start warm nodes "
                             "(w-old); 2 cold held until the 3 warm node(s) starting are READY")


def test_a_launch_of_another_type_or_market_is_cold_unless_warm_nodes_are_starting():
    [od], [big] = serve([launch(1, market=OD)], [warm("w1")]), serve([launch(1, "p3.8xlarge")], [warm("w1")])
    assert (od.start, od.cold, od.held, big.start, big.cold, big.held) == ((), 1, 0, (), 1, 0)
    assert big.reason == "1 x p3.8xlarge spot: no warm p3.8xlarge spot node stopped; 1 cold"
    [waits] = serve([launch(2, "p3.8xlarge")], [warm("w1")], starting=1)
    assert (waits.start, waits.cold, waits.held) == ((), 0, 2)
    assert waits.reason.endswith("; 2 cold held until the 1 warm node(s) starting are READY")


def test_stale_and_old_warm_nodes_are_retired_and_refilled():
    p = pool(3, 6, lifetime={"max_node_age": "24h"}, scale_down={"max_draining_percent": 50})
    nodes = [warm("w-stale", 2, image="h0"), warm("w-old", 25), warm("w-ok", 2),
             warm("w-boot", 0.1, ready=False)]
    got = refresh(p, nodes, Target(3, "warm target 3 (warm_pool.size), max 6"), "h1", NOW)
    assert got.retire == (("w-old", "age 1d1h past lifetime.max_node_age 1d"),
                          ("w-stale", "stale image h0 (the pool's is now h1)"))
    assert got.refill == 1
    assert got.reason == ("warm target 3 (warm_pool.size), max 6; 2 warm node(s) kept "
                          "(1 bootstrapping), 2 retired, 1 launched to refill")


def test_above_the_target_is_kept_up_to_max():
    p = pool("forecast", 2)
    nodes = [warm("w1", 3), warm("w2", 2), warm("w3", 1)]
    got = refresh(p, nodes, Target(0, "warm target 0"), "h1", NOW)
    assert got.retire == (("w1", "above warm_pool.max 2"),) and got.refill == 0
