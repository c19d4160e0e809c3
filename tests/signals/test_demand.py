"""The demand warm start's reading of a range-query answer, with junk in it (in process;
tests/signals/test_demand_history.py reads a real Prometheus)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from autoscaler.fleet.demand_history import STEP
from autoscaler.signals.demand import load_demand

NOW = datetime(2026, 1, 1, tzinfo=UTC)
AT = NOW - timedelta(minutes=10)
T = AT.timestamp()


class Answer:
    """A reader whose range query answers ``result`` (Prometheus' ``data.result``)."""

    def __init__(self, result: list[Any]):
        self.result = result

    def query_range(self, *args: Any) -> list[Any]:
        return self.result


@pytest.mark.parametrize("junk", [
    {"metric": {"pool": "vision/b"}, "values": [[T, "x"]]},
    {"metric": {"pool": "vision/b"}, "values": [[1e20, "1"]]},
    {"metric": {"pool": "vision/b"}, "values": [["now", "1"]]},
    {"metric": {"pool": "vision/b"}, "values": [[T, "1", "2"]]},
    {"metric": {"pool": "vision/b"}, "values": [[T, "NaN"]]},
    {"metric": {"pool": "vision/b"}, "values": [[T, "-3"]]},
    {"metric": {"pool": "vision/b"}, "values": [[4102444800, "1e300"]]},  # 2100: not asked for
    {"metric": {"pool": "vision/b"}, "values": "1"},
    {"metric": {"pool": ["vision/b"]}, "values": []},
    {"metric": ["vision/b"], "values": []},
    "junk",
])
def test_junk_costs_its_point_not_every_pools_history(junk: Any) -> None:
    """One bad point raised out of load_demand, and no pool was warmed."""
    good = {"metric": {"pool": "vision/a"}, "values": [[T, "4"]]}
    bins = load_demand(Answer([good, junk]), ["vision/a", "vision/b"], NOW)  # type: ignore[arg-type]
    assert bins["vision/a"] == [(AT - STEP, 4.0)]
    assert bins.get("vision/b", []) == []
