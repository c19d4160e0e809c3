from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.sim.spot import load_spot_traces
from autoscaler.traces import TraceError
from tests.shared_data import SHARED_DATA
from tests.sim.conftest import write_spot


def test_one_means_unavailable_and_zone_comes_from_the_file_name(tmp_path: Path) -> None:
    write_spot(tmp_path / "us-east-1a_v100_1.json", [0, 0, 1, 1, 0], gap=100)
    write_spot(tmp_path / "us-east-1c_v100_1.json", [1, 1, 1, 1, 1], gap=100)
    market = load_spot_traces(tmp_path)
    assert sorted(market.zones) == ["us-east-1a", "us-east-1c"]
    a = market.zones["us-east-1a"]
    assert [a.available(t) for t in (0, 150, 200, 399, 400)] == [True, True, False, False, True]
    assert not market.available("us-east-1c", 0)
    assert market.interrupt_share == 0.5  # the 4-node preemption trace's mean onset share


def test_a_pool_zone_missing_from_the_trace_is_an_error_unless_assumed(tmp_path: Path) -> None:
    write_spot(tmp_path / "us-east-1a_v100_1.json", [1, 1])
    market = load_spot_traces(tmp_path)
    with pytest.raises(TraceError, match=r"us-east-1b not in the spot trace.*--assume-available"):
        market.for_pool(["us-east-1a", "us-east-1b"], assume_available=False)
    with pytest.raises(TraceError, match=r"\(no zone\)"):
        market.for_pool([], assume_available=False)
    assumed = market.for_pool(["us-east-1a", "us-east-1b"], assume_available=True)
    assert assumed.assumed == ("us-east-1b",) and assumed.available("us-east-1b", 0)
    assert not assumed.available("us-east-1a", 0)
    assert assumed.describe()["assumed_available"] == ["us-east-1b"]
    assert market.for_pool(["us-east-1a"], assume_available=False).assumed == ()


def test_trace_wraps_around_and_outages_are_0_to_1_edges(tmp_path: Path) -> None:
    file = write_spot(tmp_path / "z1_x.json", [0, 1, 1, 0], gap=10)
    zone = load_spot_traces(file).zones["z1"]
    assert zone.available(40) and not zone.available(50)  # 40 s = index 0 again
    assert zone.outages(95) == [10, 50, 90]


def test_outage_at_the_wrap_edge_is_found(tmp_path: Path) -> None:
    zone = load_spot_traces(write_spot(tmp_path / "z_x.json", [1, 0, 0], gap=10)).zones["z"]
    assert zone.outages(65) == [30, 60]  # never at offset 0: the replay starts there


def test_events_from_every_zone_in_time_order(tmp_path: Path) -> None:
    write_spot(tmp_path / "a_x.json", [0, 1], gap=10)
    write_spot(tmp_path / "b_x.json", [0, 0, 1], gap=5)
    assert load_spot_traces(tmp_path).outage_events(26) == [(10, "a"), (10, "b"), (25, "b")]


@pytest.mark.parametrize("content, message", [
    ("{", "not valid JSON"),
    ('{"data": [0]}', "expected"),
    ('{"metadata": {"gap_seconds": 0}, "data": [0]}', "gap_seconds must be > 0"),
    ('{"metadata": {"gap_seconds": 5}, "data": ["x"]}', "data must hold numbers"),
])
def test_malformed_traces_are_refused_with_the_file_name(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "z_bad.json"
    path.write_text(content)
    with pytest.raises(TraceError, match=message) as err:
        load_spot_traces(path)
    assert "z_bad.json" in str(err.value)


def test_empty_directory_and_duplicate_zones(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"no \*\.json"):
        load_spot_traces(tmp_path)
    write_spot(tmp_path / "z_a.json", [0])
    write_spot(tmp_path / "z_b.json", [0])
    with pytest.raises(TraceError, match="zone z already read"):
        load_spot_traces(tmp_path)


SKYPILOT = SHARED_DATA / "spot-traces-skypilot/availability/1-node/aws-02-15-2023"


@pytest.mark.skipif(not SKYPILOT.exists(), reason="shared spot traces not present")
def test_real_skypilot_directory_loads_nine_zones() -> None:
    market = load_spot_traces(SKYPILOT)
    assert "us-east-1a" in market.zones and len(market.zones) == 9
    share = sum(market.zones["us-east-1a"].unavailable) / len(market.zones["us-east-1a"].unavailable)
    assert 0.1 < share < 0.25  # 1a is the best zone: ~17% of the 45 days without capacity
