"""PoolForecasts keeps per-pool state only for the pools of the policies."""

from __future__ import annotations

from datetime import timedelta

from autoscaler.fleet.store import FleetStore
from autoscaler.model.node import FleetView
from autoscaler.model.snapshot_parts import Observed
from autoscaler.service.observe.forecasts import PoolForecasts
from tests.builders import NOW, make_policy


def test_a_pool_renamed_away_leaves_no_fit_behind(tmp_path) -> None:
    store = FleetStore(f"sqlite:///{tmp_path / 'fleet.db'}")
    try:
        forecasts = PoolForecasts(store)
        for e in range(30):  # one pool that stays, one renamed each tick (one fit a tick)
            now = NOW + timedelta(minutes=5 * e)
            policies = {"vision": make_policy(pools=[
                {**make_policy().pools[0].model_dump(mode="json", exclude_defaults=True),
                 "name": name, "predictive": {"mode": "forecast-only"}}
                for name in ("keep", f"p{e}")])}
            forecasts.update(policies, FleetView(), Observed(taken_at=now), now)
        assert sorted(forecasts._fits) == sorted(forecasts._warmed) == ["vision/keep", "vision/p29"]
    finally:
        store.close()
