"""Generated garbage as trace files: nothing but TraceError, which names the file (and the
line when there is one) (hypothesis)."""

from __future__ import annotations

import gzip
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.sim.spot import load_spot_traces
from autoscaler.traces import TraceError, load_duty_cycles, load_pod_list
from tests.hostile_files import POD_HEADER

FAST = settings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
ROW = "p1,1,500,V100,LS,Running,0,7200,60\n"


def _refused_cleanly(path: Path, load) -> None:  # type: ignore[no-untyped-def]
    try:
        load(path)
    except TraceError as exc:
        assert str(path) in str(exc)


@FAST
@given(data=st.binary(max_size=2000))
def test_random_bytes_as_every_trace_kind(tmp_path: Path, data: bytes) -> None:
    for name, load in (("pods.csv", load_pod_list), ("duty.csv", load_duty_cycles),
                       ("zone_a.json", load_spot_traces)):
        path = tmp_path / name
        path.write_bytes(data)
        _refused_cleanly(path, load)
    gz = tmp_path / "pods.csv.gz"
    gz.write_bytes(data)  # not gzip at all
    _refused_cleanly(gz, load_pod_list)


@FAST
@given(cut=st.integers(0, len(POD_HEADER + ROW * 3)), noise=st.binary(max_size=30),
       zipped=st.booleans())
def test_a_damaged_pod_list(tmp_path: Path, cut: int, noise: bytes, zipped: bool) -> None:
    good = (POD_HEADER + ROW * 3).encode()
    data = good[:cut] + noise + good[cut:]
    path = tmp_path / ("pods.csv.gz" if zipped else "pods.csv")
    path.write_bytes(gzip.compress(data) if zipped else data)
    _refused_cleanly(path, load_pod_list)
